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
# # 04 · Removing the KL term and clipping higher; StarPO-S vs StarPO (RAGEN Finding 5, Figs. 8–9)
#
# **Claim.** On Sokoban with StarPO-PPO, removing the KL penalty (0.001 → 0) and raising the upper
# clip (ε_high 0.2 → 0.28, ε_low kept at 0.2) each raise peak success and delay the collapse.
# StarPO-S (top-25% filtering + no KL + clip-higher) beats vanilla StarPO on Bandit, Sokoban and
# FrozenLake.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# (a) no-KL: peak success without KL ≥ with KL, at both clip settings. (b) clip-higher: peak
# success at ε_high 0.28 ≥ at 0.2, at both KL settings. (c) StarPO-S's late success (mean of the
# last third of steps) > StarPO-PPO's on every env. REPRODUCED when (a), (b) and (c) all hold;
# NOT REPRODUCED otherwise. INCONCLUSIVE when no Sokoban ablation run's peak reaches 0.05.

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots


def judge(df):
    metric = analysis.success_metric(df)
    ablation = df[(df["cfg.env.name"] == "sokoban") & (df["cfg.algo.name"] == "starpo-ppo")]
    peak = {}
    for kl in (0.001, 0.0):
        for clip in (0.2, 0.28):
            s = analysis.series(ablation, metric, **{"cfg.algo.kl_coef": kl, "cfg.algo.clip_high": clip})
            peak[(kl, clip)] = analysis.peak_final(s)[0]
    no_kl = all(peak[(0.0, c)] >= peak[(0.001, c)] for c in (0.2, 0.28))
    higher = all(peak[(k, 0.28)] >= peak[(k, 0.2)] for k in (0.001, 0.0))
    measured = {f"sokoban peak {metric} kl={k} clip_high={c}": v for (k, c), v in peak.items()}
    beats = True
    for env in ("bandit", "sokoban", "frozenlake"):
        s_late = analysis.late_mean(
            analysis.series(df, metric, **{"cfg.env.name": env, "cfg.algo.name": "starpo-s"})
        )
        p_late = analysis.late_mean(
            analysis.series(
                df,
                metric,
                **{
                    "cfg.env.name": env,
                    "cfg.algo.name": "starpo-ppo",
                    "cfg.algo.kl_coef": 0.001,
                    "cfg.algo.clip_high": 0.2,
                },
            )
        )
        measured[f"{env} late {metric} StarPO-S vs StarPO"] = f"{s_late:.3g} vs {p_late:.3g}"
        beats &= s_late > p_late
    measured.update(
        {
            "(a) no KL raises peak": no_kl,
            "(b) clip-higher raises peak": higher,
            "(c) StarPO-S beats StarPO everywhere": beats,
        }
    )
    paper = {
        "(a) no KL raises peak": True,
        "(b) clip-higher raises peak": True,
        "(c) StarPO-S beats StarPO everywhere": True,
    }
    if not max(peak.values()) >= 0.05:
        status, reason = analysis.INCONCLUSIVE, "no Sokoban ablation run reached 0.05 success"
    elif no_kl and higher and beats:
        status, reason = analysis.REPRODUCED, "(a), (b) and (c) hold"
    else:
        failed = [k for k, ok in (("(a)", no_kl), ("(b)", higher), ("(c)", beats)) if not ok]
        status, reason = analysis.NOT_REPRODUCED, f"{', '.join(failed)} did not hold"
    return analysis.Verdict(
        df.attrs["finding"],
        "no KL and clip-higher help; StarPO-S beats StarPO",
        status,
        measured,
        paper,
        reason,
    )


# %%
df = experiments.run_finding("04_kl_and_clipping", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]
df["variant"] = df.apply(
    lambda r: (
        "StarPO-S"
        if r["cfg.algo.name"] == "starpo-s"
        else f"PPO kl={r['cfg.algo.kl_coef']:g} ε_high={r['cfg.algo.clip_high']:g}"
    ),
    axis=1,
)

# %%
metric = analysis.success_metric(df)
ablation = df[df["cfg.env.name"] == "sokoban"]
fig8 = plots.curves(
    ablation,
    [metric, "policy/kl_ref", "policy/clip_frac_high", "policy/entropy"],
    hue="variant",
    title="Fig. 8: KL and clipping ablation (Sokoban)",
)
main = df[
    (df["cfg.algo.name"] == "starpo-s")
    | ((df["cfg.algo.kl_coef"] == 0.001) & (df["cfg.algo.clip_high"] == 0.2))
]
fig9 = plots.curves(
    main, [metric, "reward/group_std"], hue="variant", col="cfg.env.name", title="Fig. 9: StarPO-S vs StarPO"
)
display(analysis.late_table(main, metric, ["cfg.env.name", "variant"]))
figures = [
    plots.save(fig8, profile, f"{finding}_kl_clip_ablation"),
    plots.save(fig9, profile, f"{finding}_starpo_s_vs_starpo"),
]

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
