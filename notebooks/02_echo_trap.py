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
# # 02 · The Echo Trap and its early warnings (RAGEN Findings 2–3, Fig. 6, Table 1)
#
# **Claim.** In long vanilla StarPO runs the reasoning collapses into repeated templates ("My
# initial intention is to pick arm Dragon", after about 150 steps on Bandit) and success falls.
# Before the fall, the in-group reward std and the entropy of the generated tokens drop (early
# warnings); a reward plateau and gradient-norm spikes confirm it.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# Collapse step: first step after the success peak where success falls below half of it
# (`analysis.collapse_step`). An indicator "drops" at the first step where it falls below half its
# maximum over the first third of the run (`analysis.drop_step`); its lead is collapse − drop.
# REPRODUCED when at least one run collapses and, in every collapsed run, both the in-group reward
# std and the entropy drop strictly before the collapse (lead > 0) and reasoning diversity
# (distinct-2) is lower late than early. NOT REPRODUCED when a collapsed run lacks a leading drop
# or keeps its diversity. INCONCLUSIVE when no run collapses (nothing to warn about).

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots

RUNS = [("bandit", "starpo-ppo"), ("sokoban", "starpo-ppo"), ("sokoban", "starpo-grpo")]


def judge(df):
    metric = analysis.success_metric(df)
    measured, collapsed, warned = {}, 0, True
    for env, algo in RUNS:
        where = {"cfg.env.name": env, "cfg.algo.name": algo}
        success = analysis.series(df, metric, **where)
        step = analysis.collapse_step(success)
        lead_std = analysis.lead(analysis.series(df, "reward/group_std", **where), step)
        lead_ent = analysis.lead(analysis.series(df, "policy/entropy", **where), step)
        div = analysis.series(df, "reasoning/distinct2", **where)
        early, late = analysis.early_mean(div), analysis.late_mean(div)
        measured[f"{env}/{algo} collapse step"] = step
        measured[f"{env}/{algo} reward-std lead"] = lead_std
        measured[f"{env}/{algo} entropy lead"] = lead_ent
        measured[f"{env}/{algo} distinct2 early→late"] = f"{early:.3g}→{late:.3g}"
        if step is not None:
            collapsed += 1
            warned &= (lead_std or 0) > 0 and (lead_ent or 0) > 0 and late < early
    paper = {
        "bandit/starpo-ppo collapse step": "≈150 (template reasoning)",
        "bandit/starpo-ppo reward-std lead": "> 0",
        "bandit/starpo-ppo entropy lead": "> 0",
    }
    if not collapsed:
        status, reason = analysis.INCONCLUSIVE, "no run collapsed: there was nothing to warn about"
    elif warned:
        status, reason = analysis.REPRODUCED, f"in all {collapsed} collapsed runs std and entropy fell first"
    else:
        status, reason = (
            analysis.NOT_REPRODUCED,
            "a collapsed run had no leading std/entropy drop or kept its diversity",
        )
    return analysis.Verdict(
        df.attrs["finding"],
        "reward std and entropy drop before success collapses",
        status,
        measured,
        paper,
        reason,
    )


# %%
df = experiments.run_finding("02_echo_trap", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]
df["run"] = df["cfg.env.name"] + "/" + df["cfg.algo.name"]

# %% [markdown]
# ## Table 1: the same initial state's reasoning early and late
# The first and last logged steps of each run, for the initial state seen at both.

# %%
samples = experiments.samples(df)
table = analysis.early_late_reasoning(samples)
display(table)

# %%
fig = plots.curves(
    df,
    [
        analysis.success_metric(df),
        "reward/group_std",
        "policy/entropy",
        "policy/grad_norm",
        "reasoning/distinct2",
        "reasoning/mi",
    ],
    hue="run",
    title="Fig. 6: early warnings of the Echo Trap",
)
figures = [plots.save(fig, profile, f"{finding}_indicators")]

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
