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
# # 03 · Uncertainty-based filtering (RAGEN Finding 4, Fig. 7)
#
# **Claim.** Training only on the initial states whose N rollouts disagree most (the top p% of
# groups by the std of their rewards) delays or removes the collapse: keeping 25–50% of the
# groups beats keeping all of them, with fewer updates. Our controls, not in the paper: keeping
# the 25% with the *lowest* std, and a random 25%, so that "fewer groups" alone cannot explain it.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# Score of a variant: mean success over the last third of its steps (`analysis.late_mean`).
# REPRODUCED when the better of top-25% / top-50% scores at least 0.02 above keep-100% and
# top-25% scores at least as high as both controls (lowest-std 25%, random 25%). NOT REPRODUCED
# otherwise. INCONCLUSIVE when no variant's peak success reaches 0.05.

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots


def label(row):
    if row["study"] == "reference":
        return "vanilla StarPO (RAGEN's reference)"
    keep = f"{row['cfg.algo.filter_keep']:.0%}"
    return {"top": f"top {keep}", "bottom": f"lowest-std {keep}", "random": f"random {keep}"}[
        row["cfg.algo.filter_mode"]
    ]


def judge(df):
    metric = analysis.success_metric(df)
    score = {v: analysis.late_mean(analysis.series(df, metric, variant=v)) for v in df["variant"].unique()}
    peak = max(analysis.peak_final(analysis.series(df, metric, variant=v))[0] for v in score)
    measured = {f"{v} late {metric}": s for v, s in sorted(score.items())}
    best_top = max(score["top 25%"], score["top 50%"])
    ok = (
        best_top >= score["top 100%"] + 0.02
        and score["top 25%"] >= score["lowest-std 25%"]
        and score["top 25%"] >= score["random 25%"]
    )
    paper = {f"top 25% late {metric}": "> top 100%", f"top 50% late {metric}": "> top 100%"}
    if not peak >= 0.05:
        status, reason = analysis.INCONCLUSIVE, "no variant reached 0.05 success"
    elif ok:
        status, reason = analysis.REPRODUCED, "filtering to 25–50% beats keeping all, and beats both controls"
    else:
        status, reason = (
            analysis.NOT_REPRODUCED,
            "top-std filtering did not beat keep-all by 0.02 and both controls",
        )
    return analysis.Verdict(
        df.attrs["finding"],
        "keeping the top 25–50% of groups by reward std beats keeping all",
        status,
        measured,
        paper,
        reason,
    )


# %%
df = experiments.run_finding("03_uncertainty_filtering", profile, seeds=seeds, overrides=overrides)
profile, finding = df.attrs["profile"], df.attrs["finding"]
df["variant"] = df.apply(label, axis=1)

# %%
metric = analysis.success_metric(df)
fig = plots.curves(
    df,
    [metric, "reward/group_std_kept", "policy/entropy"],
    hue="variant",
    col="cfg.env.name",
    title="Fig. 7: uncertainty filtering (StarPO-S settings: KL 0, clip-higher)",
)
finals = analysis.late_table(df, metric, "variant")
display(finals)
bar = plots.bars(
    finals.assign(profile=profile), "variant", "late " + metric, title="Late success by kept groups"
)
figures = [plots.save(fig, profile, f"{finding}_curves"), plots.save(bar, profile, f"{finding}_final")]

# %%
verdict = judge(df)
verdict.figures = figures
verdict_file = verdict.write(profile, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
