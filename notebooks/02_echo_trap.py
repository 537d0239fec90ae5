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
# Before the fall, the in-group reward std and the policy's entropy drop (early warnings); a reward
# plateau and gradient-norm spikes confirm it. The one lead the paper puts numbers on is FrozenLake
# PPO's: the in-group reward std drops at step 40, the mean reward collapses at 90 (a lead of about
# 50 steps; success collapses with it, and the rows below judge success).

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: $RAGEN_PROFILE, else quick with CUDA, else smoke
seeds = None  # None: the profile's seeds
overrides = {}  # dotted config overrides applied to every run

# %% [markdown]
# ## Criterion, fixed before any result
# Collapse as issue 16 defines it (`analysis.collapse`: the 5-step moving average of training
# success below half its running peak, once that reached 0.1, for 5 steps, or format-valid below
# 0.5, each drop beyond 4 standard errors of the episodes' noise; censored at the horizon). An
# indicator "drops" where its 5-step moving average falls below half that average's maximum over the
# first third of the run and stays there for 5 steps (`analysis.drop_step`: smoothed and held as the
# collapse is, since one step's in-group reward std is noisy); its lead is collapse − drop (0 when it never
# dropped; a run whose indicator cannot be read, not logged or flat at 0 early, is left out, named).
# One row per run and indicator (in-group reward std; entropy as RAGEN logs it, over the loss mask,
# which with the paper's mask averages the prompt and observations too; and, secondary, the entropy
# of the sampled tokens alone): the lead is positive over
# seeds (MDE 2 steps). INCONCLUSIVE when no run collapsed (censored: nothing to warn about) or with
# fewer than 3 seeds that did; a run that did not collapse has no lead and is left out, named in the
# row's reason. The Echo Trap itself, one row per run: the reasoning's diversity (distinct-2 of the
# words of the turns that parsed, rarefied to 128 bigrams so that it does not fall merely because
# more turns parse; a step with fewer is not measured, and a run not measured over the last third of
# its steps is left out, named) falls, its least-squares slope per step
# below 0 over seeds (MDE 0.001 a step, 0.2 over the paper's 200 steps; INCONCLUSIVE when the run
# did not reason, under one token a turn, or, instead of NOT REPRODUCED, when its early distinct-2
# leaves no room to fall by the MDE over the run).
# Headline: the Bandit PPO rows (the paper's Echo Trap example): the diversity falls and both
# indicators lead. The FrozenLake PPO rows are secondary, beside the paper's lead of about 50 steps
# (the MDE stays 2: the claim is that the std leads, not by how much).

# %%
from IPython.display import display

from ragen_lib import analysis, experiments, plots

RUNS = [
    ("bandit", "starpo-ppo"),
    ("sokoban", "starpo-ppo"),
    ("sokoban", "starpo-grpo"),
    ("frozenlake", "starpo-ppo"),
]
INDICATORS = {
    "reward/group_std": "std",
    "policy/entropy": "entropy",  # RAGEN's: the loss mask's tokens (the paper mask: prompt included)
    "policy/entropy_response": "sampled-token entropy",  # the model's own tokens alone (secondary)
}
# What the paper reports (Findings 2-3, Fig. 6), printed beside each row's numbers
EARLY_WARNING = "Finding 3: in-group reward std and entropy drop before reward degrades (no step given)"
PAPER_LEAD = {
    "frozenlake/starpo-ppo std": "Fig. 6: FrozenLake PPO's in-group reward std drops at step 40, its mean "
    "reward collapses at 90",
    "bandit/starpo-ppo std": EARLY_WARNING,
    "bandit/starpo-ppo entropy": EARLY_WARNING,
}
ECHO = 'Finding 2: templated reasoning ("My initial intention is to pick arm Dragon") after about 150 steps'
STUDIES = [
    (
        analysis.Claim(
            f"{env}/{algo} {short} lead",
            f"{env}/{algo}: the {short} drops before success collapses",
            "rollout/success",
            mde=2,
            score="lead",
            indicator=ind,
            paper=PAPER_LEAD.get(f"{env}/{algo} {short}", ""),
        ),
        {"cfg.env.name": env, "cfg.algo.name": algo},
        None,
    )
    for env, algo in RUNS
    for ind, short in INDICATORS.items()
] + [
    (
        analysis.Claim(
            f"{env}/{algo} echo",
            f"{env}/{algo}: the reasoning's diversity (distinct-2) falls",
            "reasoning/distinct2",
            mde=0.001,
            score="slope",
            direction=-1,
            mechanism="think",
            bound=0.0,  # distinct-2 cannot fall below 0
            paper=ECHO if (env, algo) == ("bandit", "starpo-ppo") else "",
        ),
        {"cfg.env.name": env, "cfg.algo.name": algo},
        None,
    )
    for env, algo in RUNS
]
PRIMARY = ["bandit/starpo-ppo echo", "bandit/starpo-ppo std lead", "bandit/starpo-ppo entropy lead"]
print(analysis.criteria(STUDIES))


# %%
df = experiments.run_finding("02_echo_trap", profile, seeds=seeds, overrides=overrides)
finding, results = df.attrs["finding"], df.attrs["results"]
df["run"] = df["cfg.env.name"] + "/" + df["cfg.algo.name"]

# %% [markdown]
# ## Table 1: reasoning early and late
# The first and last logged steps of each run: for an initial state logged at both where there is
# one (`same_state` True), else each step's first sample (training draws fresh states each step).

# %%
samples = experiments.samples(df)
table = analysis.early_late_reasoning(samples)
display(table)

# %%
fig = plots.curves(  # rollout/success: the curve the lead and collapse rows are scored on
    df,
    [
        "rollout/success",
        analysis.success_metric(df),
        "reward/group_std",
        "policy/entropy",
        "policy/entropy_response",
        "policy/grad_norm_max",
        "reasoning/distinct2",
        "reasoning/mi",
    ],
    hue="cfg.algo.name",
    col="cfg.env.name",  # one env a panel: its chance and expert lines
    title="Fig. 6: early warnings of the Echo Trap",
)
figures = [plots.save(fig, results, f"{finding}_indicators")]

# %%
div = {
    f"{r} distinct2 early→late": "{:.3g}→{:.3g}".format(
        analysis.early_mean(analysis.series(df, "reasoning/distinct2", run=r)),
        analysis.late_mean(analysis.series(df, "reasoning/distinct2", run=r)),
    )
    for r in sorted(df["run"].unique())
}
verdict = analysis.decide(
    df,
    "the reasoning's diversity falls (Echo Trap); reward std and entropy drop before success collapses",
    STUDIES,
    PRIMARY,
    measured=div,
)
verdict.figures = figures
verdict_file = verdict.write(results, df.attrs["wall_s"])

# %%
# NBVAL_CHECK_OUTPUT
print(verdict)
