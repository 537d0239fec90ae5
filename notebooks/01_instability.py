# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Vanilla StarPO improves, then collapses (RAGEN Finding 1, Fig. 5)
#
# **Claim.** PPO is more stable than GRPO on Bandit and Sokoban (GRPO collapses at about step 20
# on Bandit and 10 on Sokoban, PPO holds to about 100 and 50); on FrozenLake GRPO is the more
# stable one.

# %% tags=["parameters"]
profile = None
seeds = None
overrides = {}

# %% [markdown]
# ## Criterion, fixed before any result
# Collapse step = first step after the peak where validation success (training success when no
# validation) falls below half its peak; a run that never collapses counts as the last step + 1.
# Judged on the paper's loss mask (every token after the system turn); the response-only mask runs
# are an ablation shown beside it, not part of the verdict.
# REPRODUCED when, on Bandit and Sokoban, PPO's collapse step is later than GRPO's, and on
# FrozenLake GRPO's is not earlier than PPO's. INCONCLUSIVE when any run's peak success is below
# 0.05 (nothing learned, nothing to collapse).

# %%
from ragen_lib import analysis, experiments, plots


def judge(df):
    df = df[df["study"] == "paper-mask"]
    metric = "val/success" if df["val/success"].notna().any() else "rollout/success"
    measured, learned = {}, True
    for env in ["bandit", "sokoban", "frozenlake"]:
        for algo in ["starpo-ppo", "starpo-grpo"]:
            c = analysis.curve(df[(df["cfg.env.name"] == env) & (df["cfg.algo.name"] == algo)], metric, [])
            s = c.set_index("step")[metric]
            peak, final, _ = analysis.peak_final(s)
            learned &= bool(peak >= 0.05)
            step = analysis.collapse_step(s)
            measured[f"{env}/{algo} collapse step"] = step if step is not None else int(s.index.max()) + 1
            measured[f"{env}/{algo} peak {metric}"] = peak
    paper = {
        "bandit/starpo-grpo collapse step": 20,
        "bandit/starpo-ppo collapse step": 100,
        "sokoban/starpo-grpo collapse step": 10,
        "sokoban/starpo-ppo collapse step": 50,
    }
    ok = (
        measured["bandit/starpo-ppo collapse step"] > measured["bandit/starpo-grpo collapse step"]
        and measured["sokoban/starpo-ppo collapse step"] > measured["sokoban/starpo-grpo collapse step"]
        and measured["frozenlake/starpo-grpo collapse step"]
        >= measured["frozenlake/starpo-ppo collapse step"]
    )
    status = analysis.INCONCLUSIVE if not learned else analysis.REPRODUCED if ok else analysis.NOT_REPRODUCED
    reason = (
        "some run never reached 0.05 success: no collapse can be judged"
        if not learned
        else "collapse order as in the paper"
        if ok
        else "collapse order differs from the paper"
    )
    return analysis.Verdict(
        df.attrs["finding"],
        "PPO outlasts GRPO on Bandit/Sokoban; GRPO steadier on FrozenLake",
        status,
        measured,
        paper,
        reason,
    )


# %%
df = experiments.run_finding("01_instability", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]

# %%
panels = ["rollout/success", "val/success", "reward/std", "policy/grad_norm"]
fig = plots.curves(
    df[df["study"] == "paper-mask"],
    panels,
    hue="cfg.algo.name",
    col="cfg.env.name",
    title="Fig. 5: StarPO-PPO vs StarPO-GRPO (paper's loss mask)",
)
ablation = plots.curves(
    df[df["study"] == "response-mask"],
    panels,
    hue="cfg.algo.name",
    col="cfg.env.name",
    title="Ablation: the same with the response-only loss mask",
)
figures = [
    plots.save(fig, profile, f"{finding}_curves"),
    plots.save(ablation, profile, f"{finding}_response_mask"),
]

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
