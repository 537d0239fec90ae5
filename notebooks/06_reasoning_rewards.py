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
# Reasoning helps generalisation: trained with `<think>`, the Bandit agent does better on held-out
# arm names than one trained to answer directly (Table 4: 100.0 vs 81.3, and 67.6 vs 56.3 with the
# names' symbolism reversed), and the Sokoban agent at least as well on FrozenLake (19.9 vs 19.5).
# The WebShop-lite report adds a reasoning–action consistency bonus mixed into the advantage
# (λ = 0.4) to keep reasoning tied to the actions; it should raise the consistency it rewards.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: $RAGEN_PROFILE, else quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# (Fig. 11) per think run without the bonus, the least-squares slope of reasoning length (tokens
# per step) is below 0 over seeds (MDE 0.05 tokens/step; a CI under the MDE is INCONCLUSIVE, not
# NOT REPRODUCED, where the reasoning's early length leaves no room for such a fall over the run:
# 9 tokens over 200 steps allow 0.045 a step); BanditRev's late reasoning length beats
# Bandit's (MDE 5 tokens; INCONCLUSIVE where both are within 5 tokens of none, the floor, or
# where either arm did not think). (Table 4) late validation success on the held-out env: on Bandit and
# BanditRev (held-out arm names) think beats no-think (MDE 0.1, under the paper's +18.7 and +11.3
# points); Sokoban→FrozenLake, where the paper's difference is 0.4 points, think no worse than
# no-think (margin 0.1).
# (Bonus) WebShop-lite late reasoning consistency with λ = 0.4 beats λ = 0 (MDE 0.05). Each row
# INCONCLUSIVE at the held-out env's floor or ceiling, or under-powered; the Fig. 11 and Table 4
# rows also when the think arm did not think (reasoning under one token a turn over all its turns:
# an empty `<think></think>` passes the format check). Headline: the two Bandit Table 4 rows (the
# generalisation claim); Fig. 11, Sokoban→FrozenLake and the bonus are secondary. Sokoban→FrozenLake
# is secondary because the paper's own 19.9 and 19.5 sit below FrozenLake's random play (0.215,
# docs/FIDELITY.md): a faithful result reads INCONCLUSIVE at the floor there.

# %%
import pandas as pd
from IPython.display import display

from ragen_lib import analysis, experiments, plots

# RAGEN's Section 5.1 pairs (docs/FIDELITY.md E13): each trained Bandit validated on held-out names.
SHIFTS = {"bandit-gen": "bandit-heldout", "bandit-gen-rev": "bandit-heldout-rev", "sokoban": "frozenlake"}
# What the paper reports (Table 4: StarPO-S with thinking vs without), beside each row's numbers
PAPER = {
    "bandit-gen": "Table 4: Bandit→Bandit 100.0% with thinking vs 81.3% without",
    "bandit-gen-rev": "Table 4: Bandit→BanditRev 67.6% with thinking vs 56.3% without",
    "sokoban": "Table 4: Sokoban→FrozenLake 19.9% with thinking vs 19.5% without",
}
c = analysis.Claim


def think(env, on=True):
    return {"cfg.env.name": env, "cfg.rollout.enable_think": on, "cfg.algo.reasoning_lambda": 0.0}


STUDIES = [
    *[
        (
            c(
                f"fig11 {env}",
                f"{env}: reasoning shortens",
                "reasoning/length",
                0.05,
                score="slope",
                direction=-1,
                mechanism="think",
                bound=0.0,  # a length: reasoning of 9 tokens has no room to fall 0.05 a step for 200
            ),
            think(env),
            None,
        )
        for env in ("bandit-gen", "bandit-gen-rev", "sokoban", "frozenlake")
    ],
    (
        c(
            "fig11 rev longest",
            "BanditRev keeps longer reasoning than Bandit",
            "reasoning/length",
            5.0,
            mechanism="think",  # both arms think: each must (an empty <think></think> passes the format)
            bound=0.0,  # two arms within 5 tokens of none: both at the floor, no room for the MDE
        ),
        think("bandit-gen-rev"),
        think("bandit-gen"),
    ),
    *[
        (
            c(
                f"table4 {env}",
                f"{env}→{shifted}: think generalises "
                + ("better than" if env.startswith("bandit") else "no worse than")
                + " no-think",
                f"val/success/{shifted}",
                0.1,
                env=shifted,
                # Bandit: the paper's gains (+18.7, +11.3 points) are claims of superiority
                kind="superiority" if env.startswith("bandit") else "noninferiority",
                margin=0.0 if env.startswith("bandit") else 0.1,
                mechanism="think",  # an empty <think></think> passes the format check
                paper=PAPER[env],
            ),
            think(env),
            think(env, False),
        )
        for env, shifted in SHIFTS.items()
    ],
    (
        c(
            "bonus",
            "WebShop-lite: the consistency bonus raises consistency",
            "reasoning/consistency",
            0.05,
            bound=0.0,  # a bonus in [0, 0.2]: two arms that never earn it, or always, tell nothing apart
            ceiling=0.2,
        ),
        {"cfg.env.name": "webshop", "cfg.algo.reasoning_lambda": 0.4},
        {"cfg.env.name": "webshop", "cfg.algo.reasoning_lambda": 0.0},
    ),
]
PRIMARY = [f"table4 {env}" for env in SHIFTS if env.startswith("bandit")]  # FrozenLake: at its floor
print(analysis.criteria(STUDIES))


# %%
df = experiments.run_finding("06_reasoning_rewards", profile, seeds=seeds, overrides=overrides)
finding, results = df.attrs["finding"], df.attrs["results"]
experiments.label(
    df,
    "variant",
    lambda r: (
        f"{r['cfg.env.name']} "
        + ("think" if r["cfg.rollout.enable_think"] else "no-think")
        + (f" λ={r['cfg.algo.reasoning_lambda']:g}" if r["cfg.env.name"] == "webshop" else "")
    ),
)

# %%
thinking = df[df["cfg.rollout.enable_think"]]  # not `think`: the selector above, which STUDIES calls
fig11 = plots.curves(
    thinking,
    ["reasoning/length", "response/length", "rollout/success"],
    hue="variant",
    title="Fig. 11: reasoning length over training",
)
shifted = [c for c in df.columns if c.startswith("val/success/")]
table4 = df[df["cfg.env.name"].isin(list(SHIFTS))]
# success on the training env, then on the shifted env each run was validated on
display(analysis.late_table(table4, ["val/success", *shifted], "variant"))
shifts = [
    plots.per_seed(df[df["cfg.env.name"] == env], f"val/success/{shifted}", ["variant"])
    .rename(columns={f"val/success/{shifted}": "success"})
    .assign(shift=f"{env} → {shifted}", think=lambda t: t["variant"].str.endswith(" think"))
    for env, shifted in SHIFTS.items()
    if f"val/success/{shifted}" in df
]
# none where no Table 4 run is stored yet (RAGEN_TRAIN=stored): the empty frame keeps df's attrs,
# so the bar says "not trained yet" (and is an error where every run is stored)
held_out = pd.concat(shifts) if shifts else pd.DataFrame(columns=["variant", "success", "shift", "think"])
held_out.attrs = df.attrs
held_out["arm"] = held_out["think"].map({True: "think", False: "no-think"})
table4_bar = plots.bars(
    held_out,
    "shift",
    "success",
    hue="arm",
    title="Table 4: held-out success",
    metric="val/success",
    ylabel="success (val) on the shifted env",
)
shop = df[df["cfg.env.name"] == "webshop"]
fig_bonus = plots.curves(
    shop,
    ["rollout/success", "reward/mean", "reasoning/consistency"],
    hue="variant",
    title="Reasoning–action consistency bonus (WebShop-lite, λ = 0.4)",
)
figures = [
    plots.save(fig11, results, f"{finding}_reasoning_length"),
    plots.save(fig_bonus, results, f"{finding}_consistency_bonus"),
    plots.save(table4_bar, results, f"{finding}_table4"),
]

# %%
verdict = analysis.decide(
    df, "reasoning aids generalisation (Table 4); it shortens under success-only rewards", STUDIES, PRIMARY
)
verdict.figures = figures
verdict_file = verdict.write(results, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
