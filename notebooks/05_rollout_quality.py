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
# responses each (about N = 4) train better than few states with many responses (Table 2: 32×4
# against 4×32, 25.4 vs 20.2 on the new-vocabulary Sokoban, 21.5 vs 18.0 on FrozenLake; the most
# states, 128×1, is *worse* than 4×32 on FrozenLake, 12.5). Allowing 5–6 actions per turn is best
# and 7 or more hurts (Table 3: 5 actions 28.1, 7 actions 22.3, 1 action 12.1). Fresh rollouts, regenerated
# for every update, beat taking several updates from one larger rollout (Fig. 10, RAGEN's
# online-k). All with StarPO-S on Sokoban, validated also on LargerSokoban, a new-vocabulary
# Sokoban and FrozenLake (the generalisation columns of Table 2).

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: $RAGEN_PROFILE, else quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# Score: late validation success per seed (Fig. 10: its mean over the run), paired by seed. Each
# MDE is at most the paper's own effect, so NOT REPRODUCED excludes the effect the paper reports,
# not only a larger one. Table 2
# is judged where the paper's effect is, the generalisation columns (issue 16): on the
# new-vocabulary Sokoban and on FrozenLake the point with about 4 samples per state (32×4) beats
# the fewest states (4×32), MDE 0.05 and 0.03 (the paper's +5.2 and +3.5 points); on the training
# env the same pair is an equivalence check (no worse by more than 0.1). Table 3: 5 actions per
# turn beats 7 (MDE 0.05; the paper's +5.8) and beats 1 (MDE 0.1; +16.0); as RAGEN, k actions a
# turn come with a 5k budget, and random play alone rises with it (Sokoban 0.11 at k = 1, 0.29 at
# 5, 0.33 at 7: the paper's 12.1, 28.1, 22.3 sit about on it), so the same pairs are judged again on
# each arm's success less its own random play (secondary rows, "above chance": what training
# added, not what the budget gives). The warm-up teaches every arm Sokoban's 5 actions a turn, so each
# Table 3 row needs its limits to have separated the arms' play (mechanism `actions`): the smaller
# limit dropped what its arm wrote past it on 5% of its turns or more, or the larger limit's arm
# wrote more actions a turn than the smaller allows, or past Sokoban's 5 on 5% of its turns or more
# where the smaller is 5 or under (`rollout/actions_dropped`, `rollout/actions_written`,
# `rollout/actions_past_default`, plotted); a 7-action arm that still writes 5 plays as the 5-action
# arm does, and its row is INCONCLUSIVE. Fig. 10: online-1 converges faster than online-5 and
# online-10, scored as the mean validation success over every logged point (the area under the curve
# per step, `auc`: of two runs that end level, the one that rose earlier scores higher; MDE 0.1; the
# paper gives curves, no numbers), where the k updates from one rollout made it stale (mechanism
# `staleness`): the online-k arm's updates ran at least twice as far from the policy that played
# their rollout as online-1's (`policy/approx_kl`, plotted), else a policy that hardly moved left
# its rollouts about as fresh and the row is INCONCLUSIVE. Each row INCONCLUSIVE at the env's floor
# or ceiling or under-powered. Headline: the new-vocabulary Table 2 row. The FrozenLake row is
# secondary: the paper's 21.5 vs 18.0 sit at and below FrozenLake's random play (0.215,
# docs/FIDELITY.md), and a 95% CI of ±0.03 on a rate needs about 2,135 validation episodes an arm
# where the paper profile's 5 seeds × 256 states give 1,280 (it reads under-powered there;
# overrides={"train.val_size": 512} sizes it). (The P×N arms are found from the data: the smoke
# profile shrinks P and N, so there the "about 4" arm is the point whose N is nearest 4.)

# %%
import pandas as pd
from IPython.display import display

from ragen_lib import analysis, experiments, plots


def variant(r):
    # int(): a config column that is empty for other studies comes back as float
    if r["study"] == "pxn":
        return f"P={int(r['cfg.train.groups'])}×N={int(r['cfg.train.group_size'])}"
    if r["study"] == "actions":
        return f"{int(r['cfg.rollout.max_actions_per_turn'])} actions/turn"
    return f"online-{int(r['cfg.train.online_k'])}"


def studies(df):
    """The rows; Table 2's arms are the P×N point with N nearest 4 (the paper's best, 32×4; the
    most states among ties) and the one with the fewest initial states (4×32), among the grid's
    points, stored or not (RAGEN_TRAIN=stored): the arms are the design's, whatever is stored."""
    cols = ["study", "cfg.train.groups", "cfg.train.group_size"]
    grid = df[cols]
    if df.attrs.get("missing"):
        grid = pd.concat([grid, pd.DataFrame(df.attrs["missing"])[cols]], ignore_index=True)
    pxn = grid[grid["study"] == "pxn"].astype({"cfg.train.groups": float, "cfg.train.group_size": float})
    near4 = pxn.assign(off=(pxn["cfg.train.group_size"] - 4).abs()).sort_values(
        ["off", "cfg.train.groups"], ascending=[True, False]
    )
    most = {"variant": variant(near4.iloc[0])} if len(pxn) else {"variant": "?"}
    fewest = {"variant": variant(pxn.loc[pxn["cfg.train.groups"].idxmin()])} if len(pxn) else {"variant": "?"}
    c = analysis.Claim
    return [
        (
            c(
                "table2 newvocab",
                "Table 2: more states, N ≈ 4, win on the new-vocabulary Sokoban",
                "val/success/sokoban-newvocab",
                0.05,
                env="sokoban-newvocab",
                paper="Table 2 (arms 32×4, 4×32): 25.4% vs 20.2% on NewVocab",
            ),
            most,
            fewest,
        ),
        (
            c(
                "table2 frozenlake",
                "Table 2: more states, N ≈ 4, win on FrozenLake",
                "val/success/frozenlake",
                0.03,
                env="frozenlake",
                paper="Table 2 (arms 32×4, 4×32): 21.5% vs 18.0% on FrozenLake",
            ),
            most,
            fewest,
        ),
        (
            c(
                "table2 train equivalence",
                "Table 2: more states, N ≈ 4, no worse on Sokoban itself",
                "val/success",
                0.1,
                env="sokoban",
                kind="noninferiority",
                margin=0.1,
                paper="Table 2 (arms 32×4, 4×32): 20.7% vs 21.1% on Sokoban",
            ),
            most,
            fewest,
        ),
        (
            c(
                "table3 5 vs 7",
                "Table 3: 5 actions/turn beat 7",
                "val/success",
                0.05,
                env="sokoban",
                mechanism="actions",
                paper="Table 3: 28.1% at 5 actions/turn vs 22.3% at 7 on Sokoban",
            ),
            {"variant": "5 actions/turn"},
            {"variant": "7 actions/turn"},
        ),
        (
            c(
                "table3 5 vs 1",
                "Table 3: 5 actions/turn beat 1",
                "val/success",
                0.1,
                env="sokoban",
                mechanism="actions",
                paper="Table 3: 28.1% at 5 actions/turn vs 12.1% at 1 on Sokoban",
            ),
            {"variant": "5 actions/turn"},
            {"variant": "1 actions/turn"},
        ),
        # the same pairs on what training added beyond each arm's own random play (its 5k budget)
        *[
            (
                c(
                    f"table3 5 vs {k} above chance",
                    f"Table 3: 5 actions/turn beat {k}, above each arm's random play",
                    "val/success",
                    mde,
                    env="sokoban",
                    above_chance=True,
                    mechanism="actions",
                ),
                {"variant": "5 actions/turn"},
                {"variant": f"{k} actions/turn"},
            )
            for k, mde in ((7, 0.05), (1, 0.1))
        ],
        (
            c(
                "fig10 online-1 vs 5",
                "Fig. 10: fresh rollouts converge faster than online-5",
                "val/success",
                0.1,
                score="auc",
                env="sokoban",
                mechanism="staleness",
            ),
            {"variant": "online-1"},
            {"variant": "online-5"},
        ),
        (
            c(
                "fig10 online-1 vs 10",
                "Fig. 10: fresh rollouts converge faster than online-10",
                "val/success",
                0.1,
                score="auc",
                env="sokoban",
                mechanism="staleness",
            ),
            {"variant": "online-1"},
            {"variant": "online-10"},
        ),
    ]


PRIMARY = ["table2 newvocab"]  # FrozenLake's row: at random play and under-powered (criterion)


# %%
df = experiments.run_finding("05_rollout_quality", profile, seeds=seeds, overrides=overrides)
finding, results = df.attrs["finding"], df.attrs["results"]
experiments.label(df, "variant", variant)
STUDIES = studies(df)
print(analysis.criteria(STUDIES))

# %%
metric = analysis.success_metric(df)
val_cols = [c for c in df.columns if c.startswith("val/success")]
for study in ("pxn", "actions", "online"):  # the training env's success, then each other env validated
    part = df[df["study"] == study]
    display(
        analysis.late_table(
            part, [metric, *[c for c in val_cols if c != metric and part[c].notna().any()]], "variant"
        )
    )
figures = []
pxn = df[df["study"] == "pxn"]
pxn_episodes = plots.span(pxn["cfg.train.groups"] * pxn["cfg.train.group_size"])  # the profile's, not 128
for study, title in (
    ("pxn", f"Table 2: P×N at {pxn_episodes} episodes a step"),
    ("actions", "Table 3: actions per turn"),
    ("online", "Fig. 10: freshness (online-k)"),
):
    part = df[df["study"] == study]
    shown = [metric, *[c for c in val_cols if c != metric and part[c].notna().any()], "reward/group_std"]
    if study == "actions":  # what each arm wrote against what its limit let it play (the mechanism)
        shown += [
            c
            for c in ("rollout/actions_written", "rollout/actions_dropped", "rollout/actions_past_default")
            if c in part and part[c].notna().any()
        ]
    if study == "online" and "policy/approx_kl" in part:  # how stale its rollouts were: the mechanism
        shown.append("policy/approx_kl")
    fig = plots.curves(part, shown, hue="variant", title=title)
    figures.append(plots.save(fig, results, f"{finding}_{study}"))
columns = [c for c in val_cols if pxn[c].notna().any()]
if columns:  # none where no P×N run is stored yet (RAGEN_TRAIN=stored)
    seeded = pd.concat(
        [plots.per_seed(pxn, c, ["variant"]).rename(columns={c: "success"}).assign(column=c) for c in columns]
    )
    bar = plots.bars(
        seeded,
        "column",
        "success",
        hue="variant",
        title="Table 2: late validation success per column",
        metric="val/success",
    )
    figures.append(plots.save(bar, results, f"{finding}_table2"))

# %%
verdict = analysis.decide(
    df, "more initial states, about 4 samples each, generalise better (Table 2)", STUDIES, PRIMARY
)
verdict.figures = figures
verdict_file = verdict.write(results, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
