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
# # 05 · Rollout quality: diversity, interaction granularity, freshness (RAGEN Finding 6, Tables 2–3, Fig. 10)
#
# **Claim.** At a fixed budget of 128 episodes per step, more distinct initial states with fewer
# responses each (about N = 4) train better than few states with many responses (Table 2).
# Allowing 5–6 actions per turn is best and 7 or more hurts (Table 3). Fresh rollouts, regenerated
# for every update, beat taking several updates from one larger rollout (Fig. 10, RAGEN's
# online-k). All with StarPO-S on Sokoban, validated also on LargerSokoban, a new-vocabulary
# Sokoban and FrozenLake (the generalisation columns of Table 2).

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# Score: mean success over the last third of steps. (Table 2) the most initial states with the
# fewest samples each (P=32×N=4) scores at least as high as the fewest states (P=4×N=32).
# (Table 3, k actions per turn with a 5k trajectory budget) 5 actions per turn scores higher than
# 7 and at least as high as 1. (Fig. 10) online-1 scores at least as high as online-5 and online-10
# (online-k: k× the groups per rollout and k optimizer steps from it, steps/k rollouts).
# REPRODUCED when all three hold; NOT REPRODUCED otherwise; INCONCLUSIVE when no run's peak
# success reaches 0.05.

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots


def judge(df):
    metric = analysis.success_metric(df)
    late = analysis.late_table(df, metric, "variant").set_index("variant")[f"late {metric}"].to_dict()
    peak = max(analysis.peak_final(analysis.series(df, metric, variant=v))[0] for v in late)
    pxn = df[df["study"] == "pxn"].drop_duplicates("run_id")
    most, fewest = (
        variant(pxn.loc[pxn["cfg.train.groups"].idxmax()]),
        variant(pxn.loc[pxn["cfg.train.groups"].idxmin()]),
    )  # the smoke profile shrinks P×N
    diversity = late[most] >= late[fewest]
    granularity = (
        late["5 actions/turn"] > late["7 actions/turn"] and late["5 actions/turn"] >= late["1 actions/turn"]
    )
    freshness = late["online-1"] >= late["online-5"] and late["online-1"] >= late["online-10"]
    measured = {f"{v} late {metric}": s for v, s in late.items()}
    measured.update(
        {
            "Table 2: more states, fewer samples, wins": diversity,
            "Table 3: 5 actions/turn best of 1/5/7": granularity,
            "Fig. 10: fresh rollouts win": freshness,
        }
    )
    paper = {
        "Table 2: more states, fewer samples, wins": True,
        "Table 3: 5 actions/turn best of 1/5/7": True,
        "Fig. 10: fresh rollouts win": True,
    }
    if not peak >= 0.05:
        status, reason = analysis.INCONCLUSIVE, "no run reached 0.05 success"
    elif diversity and granularity and freshness:
        status, reason = analysis.REPRODUCED, "all three rollout-quality effects hold"
    else:
        failed = [
            k
            for k, ok in (("Table 2", diversity), ("Table 3", granularity), ("Fig. 10", freshness))
            if not ok
        ]
        status, reason = analysis.NOT_REPRODUCED, f"{', '.join(failed)} did not hold"
    return analysis.Verdict(
        df.attrs["finding"],
        "diverse, moderately granular, fresh rollouts train best",
        status,
        measured,
        paper,
        reason,
    )


def variant(r):
    # int(): a config column that is empty for other studies comes back as float
    if r["study"] == "pxn":
        return f"P={int(r['cfg.train.groups'])}×N={int(r['cfg.train.group_size'])}"
    if r["study"] == "actions":
        return f"{int(r['cfg.rollout.max_actions_per_turn'])} actions/turn"
    return f"online-{int(r['cfg.train.online_k'])}"


# %%
df = experiments.run_finding("05_rollout_quality", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]
df["variant"] = df.apply(variant, axis=1)

# %%
metric = analysis.success_metric(df)
val_cols = [c for c in df.columns if c.startswith("val/success")]
tables = {}
for study in ("pxn", "actions", "online"):
    part = df[df["study"] == study]
    tables[study] = analysis.late_table(part, metric, "variant")
    for col in val_cols:
        if col != metric and part[col].notna().any():
            tables[study] = tables[study].merge(analysis.late_table(part, col, "variant"), on="variant")
    display(tables[study])
figures = []
for study, title in (
    ("pxn", "Table 2: P×N at 128 episodes"),
    ("actions", "Table 3: actions per turn"),
    ("online", "Fig. 10: freshness (online-k)"),
):
    fig = plots.curves(df[df["study"] == study], [metric, "reward/group_std"], hue="variant", title=title)
    figures.append(plots.save(fig, profile, f"{finding}_{study}"))

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
