"""Verdicts on the metrics DataFrame (pure pandas/numpy; no plotting).

A notebook states its sub-claims as `Claim`s before it looks at a result (the metric, how a run is
scored, the direction, the minimum effect the study can detect, the mechanism that must act), then
`judge(df, claim, a, b)` turns each into one `Row`: REPRODUCED / NOT REPRODUCED / INCONCLUSIVE (with
the reason) or PILOT (run at pilot scale: figures and numbers, no verdict). `Verdict` holds the
rows and the headline, a stated rule over them (`headline`), and writes both for `make report`.

The modules, in the order a verdict is built; each imports only modules above it:
- `claims`: the labels, `Claim` and `Row`, and the text they print.
- `curves`: one run's curve read as numbers (late and early means, slope, `collapse`, `drop_step`).
- `scores`: `seed_scores`, one score per seed of an arm, with the episodes behind it.
- `stats`: the effect's CI (bootstrap widened to the seeds' t interval), the sign test, power.
- `mechanisms`: whether the manipulated mechanism acted; each arm's floor and ceiling.
- `judging`: `judge`, one sub-claim to one row, in the order its docstring lists.
- `reporting`: `headline`, `Verdict`, `decide` (a notebook's one call) and `report` (REPORT.md).

Everything public is importable from `ragen_lib.analysis` itself; a test that replaces a name
replaces it in the module that reads it (`monkeypatch.setattr(analysis.curves, "COLLAPSE_Z", 0)`).
"""

from ragen_lib.analysis.claims import (
    COLLAPSE_MDE,
    HORIZON_SCORES,
    INCONCLUSIVE,
    MECHANISMS,
    NOT_REPRODUCED,
    PILOT,
    REPRODUCED,
    SCORES,
    Claim,
    Row,
    by_collapse,
    criteria,
    design,
    format_text,
)
from ragen_lib.analysis.curves import (
    COLLAPSE_FRAC,
    COLLAPSE_PERSIST,
    COLLAPSE_WINDOW,
    COLLAPSE_Z,
    FORMAT_FLOOR,
    LATE,
    MIN_COLLAPSE_PEAK,
    collapse,
    curve,
    drop_step,
    early_head,
    early_late_reasoning,
    early_mean,
    late_mean,
    late_table,
    late_tail,
    lead,
    series,
    slope,
    success_metric,
    unreadable_drop,
)
from ragen_lib.analysis.judging import (
    LEARN_MARGIN,
    UNRECORDED_MODEL,
    judge,
    slope_room,
)
from ragen_lib.analysis.mechanisms import (
    CLIP_FRACS,
    ENV_KWARGS,
    LIMITS,
    MIN_ACTIONS_DROPPED,
    MIN_CLIP_FRAC,
    MIN_FILTER_SHARE,
    MIN_FILTER_STEPS,
    MIN_KL_SHARE,
    MIN_REASONING_TOKENS,
    MIN_REFERENCE_STATES,
    PER_TURN,
    actions_inactive,
    arm_reference,
    inactive,
    mechanism_arm,
    mechanism_inactive,
    per_turn_limit,
    reference,
)
from ragen_lib.analysis.reporting import (
    Verdict,
    decide,
    headline,
    notebook_run,
    report,
    trained_on,
)
from ragen_lib.analysis.scores import (
    seed_scores,
)
from ragen_lib.analysis.stats import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    MIN_SEEDS,
    bootstrap_ci,
    censored_ci,
    effect_ci,
    power_statement,
    sign_test,
    t_cdf,
    t_interval,
    t_quantile,
    underpowered,
)

__all__ = [
    "COLLAPSE_MDE",
    "HORIZON_SCORES",
    "INCONCLUSIVE",
    "MECHANISMS",
    "NOT_REPRODUCED",
    "PILOT",
    "REPRODUCED",
    "SCORES",
    "by_collapse",
    "Claim",
    "criteria",
    "design",
    "format_text",
    "Row",
    "COLLAPSE_FRAC",
    "COLLAPSE_PERSIST",
    "COLLAPSE_WINDOW",
    "COLLAPSE_Z",
    "FORMAT_FLOOR",
    "LATE",
    "MIN_COLLAPSE_PEAK",
    "collapse",
    "curve",
    "drop_step",
    "early_head",
    "early_late_reasoning",
    "early_mean",
    "late_mean",
    "late_table",
    "late_tail",
    "lead",
    "series",
    "slope",
    "success_metric",
    "unreadable_drop",
    "seed_scores",
    "BOOTSTRAP_DRAWS",
    "BOOTSTRAP_SEED",
    "MIN_SEEDS",
    "bootstrap_ci",
    "censored_ci",
    "effect_ci",
    "power_statement",
    "sign_test",
    "t_cdf",
    "t_interval",
    "t_quantile",
    "underpowered",
    "CLIP_FRACS",
    "ENV_KWARGS",
    "LIMITS",
    "MIN_ACTIONS_DROPPED",
    "MIN_CLIP_FRAC",
    "MIN_FILTER_SHARE",
    "MIN_FILTER_STEPS",
    "MIN_KL_SHARE",
    "MIN_REASONING_TOKENS",
    "MIN_REFERENCE_STATES",
    "PER_TURN",
    "actions_inactive",
    "arm_reference",
    "mechanism_arm",
    "inactive",
    "mechanism_inactive",
    "per_turn_limit",
    "reference",
    "LEARN_MARGIN",
    "UNRECORDED_MODEL",
    "judge",
    "slope_room",
    "decide",
    "headline",
    "notebook_run",
    "report",
    "trained_on",
    "Verdict",
]
