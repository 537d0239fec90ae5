"""What a notebook states before it looks at a result, and what `judge` found.

`Claim`: a sub-claim (the metric, how a run is scored, the direction, the minimum effect the study
can detect, a non-inferiority margin, the mechanism that must act, the test). `Row`: its judgment,
REPRODUCED / NOT REPRODUCED / INCONCLUSIVE with the reason, or PILOT, and the numbers behind it.
The labels and text here are the ones every notebook, verdict file and REPORT.md prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ragen_lib import models
from ragen_lib.metrics import is_rate

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"

PILOT = "PILOT"  # run at pilot scale in this profile: figures and numbers, no verdict
UNRECORDED_MODEL = "not recorded (RAGEN_MODEL or the embedded model)"
"""The model of a run whose config predates recording it (model.name left as None)."""

SCORES = ("late", "auc", "peak", "median", "max", "total", "slope", "collapse", "lead")
BOUND_SCORES = ("late", "auc", "peak", "median", "slope")  # the scores a `bound` applies to


@dataclass(frozen=True)
class Claim:
    """One sub-claim, written before the data: arm a beats arm b (direction +1) on `metric`.

    score: "late" (mean over the last third of the logged points), "auc" (the area under the
    curve over updates, per update: trapezoids between the points at the updates they measured,
    so arms validated on different schedules score one curve alike; of two arms that end level,
    the one that rose earlier scores higher: "converges faster"), "peak", "median" (median over
    steps: costs such as seconds per step), "max" (peak memory), "total" (a sum: wall time),
    "slope" (least-squares slope per step), "collapse" (the step of `collapse`, censored at the
    horizon; metric is the training success) or "lead" (collapse step − the step `indicator` first
    fell below half its early maximum, `drop_step`, both as 5-step averages held for 5 steps; 0 when
    it never fell; censored without collapse).
    Judged with b=None, a one-arm claim compares the score against 0.
    mde: the minimum detectable effect, in the score's units. kind: "superiority" or
    "noninferiority" (a is no worse than b by more than `margin`). mechanism: "clip" (either bound,
    arm a), "clip_high" (arm a raises ε_high over arm b: b's upper bound must clip), "kl" (arm a
    drops the KL reward arm b keeps: b's must be large enough to move returns), "filter" (arm
    a), "think" (arm a's reasoning must be there: reasoning/length), "actions" (the arms' per-turn
    action limits must have separated their play: `actions_inactive`) or "staleness" (the arm with
    the larger train.online_k must have updated further from its rollouts' policy:
    `staleness_inactive`). env: whose floor and
    ceiling bound a success score (None: not a success). bound: a level the metric cannot pass, 0
    for a length or a diversity. A slope towards it can be no steeper than its early level's
    distance from it over the horizon (`slope_room`), and where that is under the MDE a fall smaller
    than the MDE is no evidence against the claim (INCONCLUSIVE, not NOT REPRODUCED); two arms'
    late, auc, peak or median scores both within the MDE of it sit at the metric's floor
    (INCONCLUSIVE "floor", as a success score at random play). ceiling: a level the metric cannot
    exceed (the consistency bonus's 0.2): both arms' scores within the MDE of it, INCONCLUSIVE
    "ceiling".
    above_chance (success claims with an env): each arm scored as its success less its own random
    play (`arm_reference`), so arms whose action budgets differ are compared on what training added:
    05's Table 3 pairs k actions a turn with a 5k budget, and random play alone rises from 0.11 at
    k = 1 to 0.29 at k = 5 on Sokoban, the paper's whole 12.1 → 28.1."""

    id: str
    text: str
    metric: str
    mde: float
    score: str = "late"
    direction: int = 1
    kind: str = "superiority"
    margin: float = 0.0
    env: str | None = None
    mechanism: str | None = None
    test: str = "bootstrap"  # or "sign": the sign test over seeds must reach p < alpha too
    alpha: float = 0.05
    indicator: str | None = None  # score "lead": the early-warning metric whose drop leads the collapse
    bound: float | None = None
    ceiling: float | None = None  # a level the metric cannot exceed (0.2: the consistency bonus)
    above_chance: bool = False
    paper: str = ""
    """What the paper reports for this comparison, with its source ("Fig. 5: GRPO collapses at about
    step 20, PPO holds to about 100"): printed beside the row's own numbers, '' where it gives none."""

    def __post_init__(self):
        if self.score not in SCORES:
            raise ValueError(f"claim {self.id!r}: unknown score {self.score!r}: {' | '.join(SCORES)}")
        if self.score == "lead" and not self.indicator:
            raise ValueError(
                f"claim {self.id!r}: score 'lead' needs indicator=<metric> (the early warning whose drop "
                "leads the collapse, e.g. reward/group_std)"
            )
        if self.above_chance and (self.env is None or "success" not in self.metric):
            raise ValueError(
                f"claim {self.id!r}: above_chance scores a success metric against its env's random "
                f"play: set env= and a success metric (got {self.metric!r}, env {self.env!r})"
            )
        for name in ("bound", "ceiling"):  # a slope is judged against `bound` only (`slope_room`)
            scores = BOUND_SCORES if name == "bound" else tuple(s for s in BOUND_SCORES if s != "slope")
            if getattr(self, name) is not None and self.score not in scores:
                raise ValueError(
                    f"claim {self.id!r}: {name} is for {', '.join(scores)} claims (score {self.score!r})"
                )
        if self.mechanism is not None and self.mechanism not in MECHANISMS:
            raise ValueError(
                f"claim {self.id!r}: unknown mechanism {self.mechanism!r}: {' | '.join(MECHANISMS)}"
            )

    def criterion(self) -> str:
        """The criterion in words, as printed before the data."""
        sign = ">" if self.direction > 0 else "<"
        if self.kind == "noninferiority":  # no worse by more than the margin, whichever way is better
            # strict, as `judging` decides it: the CI's low end must clear −margin, so arms exactly
            # the margin apart are not shown non-inferior (the usual H0: a − b <= −margin)
            rule = f"a {sign} b {'−' if self.direction > 0 else '+'} {self.margin:g} (non-inferiority margin)"
        else:
            rule = f"a {sign} b, minimum detectable effect {self.mde:g}"
        # a lead is measured from the indicator's drop: without it, 02's three leads read alike
        score = (
            f"lead of {self.indicator}'s drop before the collapse of" if self.score == "lead" else self.score
        )
        return f"{self.id}: {score} {self.metric}: {rule}; test {self.test}, alpha {self.alpha:g}"


@dataclass
class Row:
    """One sub-claim's verdict: the status, its reason, the effect with its CI and the design."""

    id: str
    claim: str
    status: str
    reason: str
    effect: float = float("nan")
    ci: tuple[float, float] = (float("nan"), float("nan"))
    a: float = float("nan")
    b: float = float("nan")
    seeds: list = field(default_factory=list)
    steps: int | str | None = None  # "150 / 30" where the runs' horizons differ
    val_size: int | str | None = None  # "128 / 256" where the arms differ
    temperature: float | str | None = None
    models: list = field(default_factory=list)  # cfg.model.name of the rows judged
    power: str = ""
    criterion: str = ""
    # A success row's late format-valid rate per arm, on the same episodes (None: not a success row
    # or not logged): with the small model a success gap may be a format gap.
    format_valid: tuple[float | None, float | None] | None = None
    paper: str = ""  # the claim's `paper`: what the paper reports, beside our numbers

    def __str__(self) -> str:
        effect = f" effect {e}" if (e := effect_text(self, "95% CI ")) else ""
        if fv := format_text(self):
            effect += "; " + fv
        paper = f"\n    paper: {self.paper}" if self.paper else ""
        return (
            f"{self.status}: {self.claim}{effect}{paper}\n    why: {self.reason}\n"
            f"    design: {design(self)}; {self.power}"
        )


def format_text(row: Row) -> str:
    """ "late format-valid a 0.9, b 0.5" for a success row, else ""."""
    if not row.format_valid:
        return ""
    fa, fb = row.format_valid
    return f"late format-valid a {_fmt(fa)}" + (f", b {_fmt(fb)}" if fb is not None else "")


def design(row: Row) -> str:
    model = f", model {models.describe(row.models)}" if row.models else ""
    return (
        f"seeds {row.seeds or '—'}, steps {_fmt(row.steps)}, validation states {_fmt(row.val_size)}, "
        f"temperature {_fmt(row.temperature)}{model}"
    )


def _is_rate(claim: Claim) -> bool:
    """A score that averages a rate's points, which the bootstrap redraws over their episodes."""
    return claim.score in ("late", "auc") and is_rate(claim.metric)


#: Scores that are a level of the metric (an average of points, or one point), so a rate's score
#: carries its episodes' noise: the power check counts those episodes.
LEVEL_SCORES = ("late", "auc", "peak", "max", "median")


#: Scores that depend on how long a run trained: arms with different horizons are not compared.
HORIZON_SCORES = ("late", "auc", "peak", "total", "slope", "collapse", "lead")

MECHANISMS = ("clip", "clip_high", "kl", "filter", "think", "actions", "staleness")

COLLAPSE_MDE = {"bandit": 10, "sokoban": 5, "frozenlake": 5}
"""Collapse rows' MDE in steps per env: under the paper's gaps (GRPO at about 20 and 10 steps, PPO
at 100 and 50 on Bandit and Sokoban; the filter moves FrozenLake's from 100 to 140)."""


def by_collapse(late: Claim, paper: str = "") -> Claim:
    """`late`'s pair judged again by its collapse step (training success, censored at the horizon,
    MDE `COLLAPSE_MDE`), with its env and mechanism: where the paper claims a delayed collapse, a
    late score ties two arms that both fell before the last third at the floor. `paper`: what the
    paper reports of the collapse (the late claim's numbers are success rates, not steps)."""
    return replace(
        late,
        id=f"{late.id} collapse",
        text=late.text.replace(" beats ", " collapses later than "),
        metric="rollout/success",
        mde=COLLAPSE_MDE[late.env],
        score="collapse",
        paper=paper,
    )


def _pair(a: float, b: float) -> str:
    """One number when the arms share it, else both, named."""
    return f"{a:.3g}" if f"{a:.3g}" == f"{b:.3g}" else f"a {a:.3g}, b {b:.3g}"


def effect_text(row: Row, ci_label: str = "") -> str:
    """The effect, its CI where drawn and each arm's score, e.g. `+0.12 [+0.02, +0.22] (a 0.5, b
    0.38)` (a time row's effect alone had no unit); "" without an effect."""
    if row.effect is None or row.effect != row.effect:
        return ""
    lo, hi = row.ci
    ci = "" if lo != lo else f" [{ci_label}{lo:+.3g}, {hi:+.3g}]"
    return f"{row.effect:+.3g}{ci} (a {_fmt(row.a)}, b {_fmt(row.b)})"


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}"
    return str(v)


def criteria(studies: list[tuple[Claim, dict, dict | None]]) -> str:
    """The criteria of a notebook's sub-claims, one line each (printed before any result)."""
    return "\n".join(
        f"- {c.criterion()}; a = {a}; b = {b if b is not None else '0 (one arm)'}" for c, a, b in studies
    )
