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
# # 06 · Reasoning fades without reasoning-aware rewards (RAGEN Finding 7, Fig. 11, Table 4)
#
# **Claim.** With success-only rewards the length of the `<think>` reasoning falls during training
# in every env, and BanditRev (where the arms' names mislead) keeps it longest (Fig. 11).
# Reasoning helps generalisation: trained with `<think>`, the agent does at least as well on a
# shifted env as one trained to answer directly (Table 4). The WebShop-lite report adds a
# reasoning–action consistency bonus mixed into the advantage (λ = 0.4) to keep reasoning tied to
# the actions; it should raise the consistency it rewards.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# (Fig. 11) the least-squares slope of reasoning length (tokens) over steps is negative in every
# think run without the bonus, and BanditRev's late reasoning length is the longest of them.
# (Table 4) late validation success on the held-out env (Bandit and BanditRev on held-out arm names,
# Sokoban→FrozenLake) with
# think ≥ without. (Bonus) on WebShop-lite, late reasoning consistency with λ = 0.4 > with λ = 0.
# REPRODUCED when all three hold; NOT REPRODUCED otherwise; INCONCLUSIVE when the think runs end
# with under 10% format-valid answers (no parsable reasoning to measure).

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots

# RAGEN's Section 5.1 pairs (docs/FIDELITY.md E13): each trained Bandit validated on held-out names.
SHIFTS = {"bandit-gen": "bandit-heldout", "bandit-gen-rev": "bandit-heldout-rev", "sokoban": "frozenlake"}


def judge(df):
    think = df[(df["cfg.rollout.enable_think"]) & (df["cfg.algo.reasoning_lambda"] == 0.0)]
    measured, falls, late_len = {}, True, {}
    for env in sorted(think["cfg.env.name"].unique()):
        s = analysis.series(think, "reasoning/length", **{"cfg.env.name": env})
        measured[f"{env} reasoning-length slope (tokens/step)"] = analysis.slope(s)
        late_len[env] = analysis.late_mean(s)
        falls &= analysis.slope(s) < 0
    rev_longest = late_len.get("bandit-gen-rev", float("nan")) >= max(late_len.values())
    generalises = True
    for env, shifted in SHIFTS.items():
        col = f"val/success/{shifted}"
        where = {"cfg.env.name": env}
        on = analysis.late_mean(analysis.series(df[df["cfg.rollout.enable_think"]], col, **where))
        off = analysis.late_mean(analysis.series(df[~df["cfg.rollout.enable_think"]], col, **where))
        measured[f"{env}→{shifted} late val success think vs no-think"] = f"{on:.3g} vs {off:.3g}"
        generalises &= on >= off
    shop = df[df["cfg.env.name"] == "webshop"]
    cons = {
        lam: analysis.late_mean(
            analysis.series(shop, "reasoning/consistency", **{"cfg.algo.reasoning_lambda": lam})
        )
        for lam in (0.0, 0.4)
    }
    bonus = cons[0.4] > cons[0.0]
    measured["webshop late consistency λ=0.4 vs λ=0"] = f"{cons[0.4]:.3g} vs {cons[0.0]:.3g}"
    measured.update(
        {
            "Fig. 11: reasoning shortens everywhere": bool(falls),
            "Fig. 11: BanditRev longest": bool(rev_longest),
            "Table 4: think generalises at least as well": bool(generalises),
            "bonus raises consistency": bool(bonus),
        }
    )
    paper = {
        "Fig. 11: reasoning shortens everywhere": True,
        "Fig. 11: BanditRev longest": True,
        "Table 4: think generalises at least as well": True,
        "bonus raises consistency": "(report's proposal)",
    }
    fmt = analysis.late_mean(
        analysis.curve(think, "rollout/format_valid", []).set_index("step")["rollout/format_valid"]
    )
    measured["late format_valid of think runs"] = fmt
    ok = falls and rev_longest and generalises and bonus
    if not fmt >= 0.1:
        status, reason = (
            analysis.INCONCLUSIVE,
            f"think runs end with {fmt:.0%} format-valid answers: no reasoning to measure",
        )
    elif ok:
        status, reason = (
            analysis.REPRODUCED,
            "reasoning shortens, BanditRev keeps most, think generalises, bonus works",
        )
    else:
        failed = [k for k in list(paper)[:3] + ["bonus raises consistency"] if measured[k] is not True]
        status, reason = analysis.NOT_REPRODUCED, f"did not hold: {'; '.join(failed)}"
    return analysis.Verdict(
        df.attrs["finding"],
        "reasoning shortens under success-only rewards; it aids generalisation",
        status,
        measured,
        paper,
        reason,
    )


# %%
df = experiments.run_finding("06_reasoning_rewards", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]
df["variant"] = df.apply(
    lambda r: (
        f"{r['cfg.env.name']} "
        + ("think" if r["cfg.rollout.enable_think"] else "no-think")
        + (f" λ={r['cfg.algo.reasoning_lambda']:g}" if r["cfg.env.name"] == "webshop" else "")
    ),
    axis=1,
)

# %%
think = df[df["cfg.rollout.enable_think"]]
fig11 = plots.curves(
    think,
    ["reasoning/length", "response/length", "rollout/success"],
    hue="variant",
    title="Fig. 11: reasoning length over training",
)
shifted = [c for c in df.columns if c.startswith("val/success/")]
table4 = df[df["cfg.env.name"].isin(list(SHIFTS))]
table = analysis.late_table(table4, "val/success", "variant")
for col in shifted:  # success on the shifted env each run was validated on
    table = table.merge(analysis.late_table(table4, col, "variant"), on="variant")
display(table)
shop = df[df["cfg.env.name"] == "webshop"]
fig_bonus = plots.curves(
    shop,
    ["rollout/success", "reward/mean", "reasoning/consistency"],
    hue="variant",
    title="Reasoning–action consistency bonus (WebShop-lite, λ = 0.4)",
)
figures = [
    plots.save(fig11, profile, f"{finding}_reasoning_length"),
    plots.save(fig_bonus, profile, f"{finding}_consistency_bonus"),
]

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
