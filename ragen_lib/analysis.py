"""Verdicts on the metrics DataFrame (pure pandas/numpy; no plotting).

A notebook states its sub-claims as `Claim`s before it looks at a result (the metric, how a run is
scored, the direction, the minimum effect the study can detect, the mechanism that must act), then
`judge(df, claim, a, b)` turns each into one `Row`: REPRODUCED / NOT REPRODUCED / INCONCLUSIVE (with
the reason) or PILOT (run at pilot scale: figures and numbers, no verdict). `Verdict` holds the
rows and the headline, a stated rule over them (`headline`), and writes both for `make report`.

How a row is decided, in this order (the first that applies wins):
1. PILOT when a run of either arm is not judged in this profile (`judged` column, profiles.yaml).
2. INCONCLUSIVE "no data" when an arm has no runs, or the metric (a lead's indicator too) was
   never logged; "censored" when a run of either arm did not finish (`done` false: stopped, or
   still running; its last steps are missing, so its score is not the design's); "runs per seed"
   when an arm's selector matches more than one run of a seed (they would be averaged into one
   score under one seed).
3. INCONCLUSIVE "mechanism did not act": the claim's manipulated mechanism was inert
   (`clip`: arm a's clip fraction, both bounds, below 1%; `clip_high`: arm b's upper-bound clip
   fraction below 1%, the tokens a higher ε_high in arm a would let through; either: one optimizer
   step per batch, so the ratio is always 1; `kl`: arm b's KL reward, kl_coef · Σ|KL_t| per
   episode, below 1% of the spread of the trajectory rewards; `filter`: arm a's filter kept every
   episode, or its kept groups' reward std exceeded all groups' (bottom: fell below) on under half
   the steps of every stretch of 10 or more from the start: groups tied in std leave the choice to
   their order; `think`: arm a's reasoning averaged under one token a turn, where an empty
   `<think></think>` still passes the format check; `actions`, both arms: the smaller per-turn
   action limit dropped pieces on under 5% of its arm's turns and the larger limit's arm wrote no
   more actions a turn, on average, than the smaller allows, nor (the smaller limit at or under the
   env's default) past that default on 5% of its turns: 05's Table 3 arms then played alike).
4. INCONCLUSIVE "floor" / "ceiling": both arms' mean score at most the MDE above the env's
   random-policy success (floor) or within the MDE of its expert success (ceiling), from
   `baselines.reference_success`: each arm's own, within the action budget its runs played under
   and on their validation states (`arm_reference`; Table 3's arms play 5 to 35 actions). Not the
   floor where exactly one arm sank more than the MDE below random play: it lost what random play
   keeps (a collapse: the paper's Sokoban StarPO-S ≈0.21 vs PPO ≈0, random play 0.19), which the
   other arm did not, scores below the other and more than the MDE apart; the row is judged and
   says so. Both sunk: the floor.
5. Collapse claims with an env: a censored run whose success never rose LEARN_MARGIN above the env's
   random play (peak of the 5-step training average and of validation) never learned, so it had
   nothing to lose and its holding says nothing about stability: its seed is left out of the
   comparison and named; INCONCLUSIVE "never learned" when no seed is left.
   INCONCLUSIVE "censored" (collapse claims): no run of either arm collapsed inside the horizon.
   Where only some did, all that is known of a censored run is that it collapses at its `least`
   step (the first whose sustained drop the horizon would hide) or later, or never: step 7 takes
   each end of the CI with the runs at their least and most favourable values (`censored_ci`), so
   a censored run only widens the CI (to ±inf where "never" is the least favourable value) and no
   decision rests on an assumed collapse step.
6. INCONCLUSIVE "under-powered": fewer than 3 seeds; a sign-test claim with so few seeds that
   0.5^n >= alpha; or, for success rates, a predicted 95% CI half-width from episode sampling alone
   (p = 0.5) wider than the MDE (validation states counted once a seed, however often the late
   validations replay them).
   INCONCLUSIVE "no spread" (scores other than collapse and lead): every seed of both arms (of a
   one-arm claim: arm a, and the 0 it is tested against) scored exactly the same value, as a metric
   pinned at a bound does (reasoning length 0 in both arms): the seeds' t interval would be zero
   wide and call the tie a decision.
7. The effect: mean over seeds of (a − b) × direction, paired by seed where both arms ran it; its
   95% CI from a two-level bootstrap (seeds with replacement, then each seed's episodes: a success
   rate from n binary episodes is redrawn as Binomial(n, rate) / n, which is exactly resampling
   those episodes), with a fixed RNG seed, widened to the seeds' Student t interval (paired, else
   Welch) wherever that is wider: a percentile bootstrap cannot reach beyond the range of 3-5
   seeds, and alone it reproduced a null effect in 28 of 200 simulated 3-seed studies (nominal
   2.5%: 5; with the t interval, 7; tests/test_analysis.py, `-k null_effect`). REPRODUCED when the
   CI's low end is above 0 (above −margin for non-inferiority) and, for a sign-test claim, the sign
   test's p < alpha; NOT REPRODUCED when the CI's high end is below the MDE (below −margin for
   non-inferiority: the effect the study could see is excluded); INCONCLUSIVE otherwise, saying
   whether the CI spans 0 and the MDE or the sign test disagreed with a CI above 0 (its p, or arms
   that ran different seeds and so have no pairs; a CI above 0 the sign test does not back is
   INCONCLUSIVE even where its high end is under the MDE). A row with censored runs names them.
   A seed an arm could not score (its metric not logged, too few points for a slope, a lead's
   indicator unreadable: `unreadable_drop`) is left out and named, from both arms where that leaves
   them on the same seeds, so the comparison stays paired.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ragen_lib import models, runs
from ragen_lib.metrics import format_rate_of, natural_key

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
PILOT = "PILOT"  # run at pilot scale in this profile: figures and numbers, no verdict
#: Fixed RNG seed of every bootstrap, so a verdict is a function of the data alone.
BOOTSTRAP_SEED = 0
BOOTSTRAP_DRAWS = 2000
#: Collapse (issue 16): the 5-step moving average of training success below half its running peak
#: for at least 5 steps, or the format-valid rate (same smoothing) below 0.5 for at least 5 steps
#: (`collapse`).
COLLAPSE_WINDOW, COLLAPSE_PERSIST, COLLAPSE_FRAC, FORMAT_FLOOR = 5, 5, 0.5, 0.5
#: The success criterion counts only from a running peak of at least this much: a steady success
#: rate near 0 has no measurable level to lose, and the noise of its 5-step average alone keeps it
#: below half its noise-inflated peak. Simulated (150 steps of 64 episodes, a steady rate, 400
#: runs): the criterion without this called a collapse in 99% of runs at rate 0.02, 76% at 0.05,
#: 10% at 0.1; with it 0%, 3%, 10% (tests/test_analysis.py, `-k steady_low_rate`).
MIN_COLLAPSE_PEAK = 0.1
#: A loss counts only when it exceeds the noise: the drop from the running peak of the 5-step
#: average to the current one must be more than this many standard errors of the difference of two
#: such averages at the peak's rate, sqrt(2·p·(1 − p) / (5·episodes)). The running peak is the max
#: of up to ~150 noisy averages, itself ~2.5 of them above the rate, so 2 or 3 are not enough.
#: Simulated (150 steps, a steady rate, 400 runs; tests/test_analysis.py, `-k noise`): success at a
#: steady 0.1 read as a collapse in 11% of runs of 64 episodes a step and 71% of runs of 32 without
#: this, 0% with it; a format-valid rate steady at 0.5 in 100% of runs, 0.5% with it. Drops of
#: 0.15 -> 0.05 and 0.1 -> 0.03 success are still found in 100% and 90% of runs of 64 episodes
#: (all of them at 128; 46% and 2% at 32, where such drops are within the noise).
COLLAPSE_Z = 4.0
#: A mechanism acted when its clip fraction reached this much (clip claims).
MIN_CLIP_FRAC = 0.01
#: A KL acted when its reward could move an episode's returns by this share of the spread of the
#: trajectory rewards (kl claims: `reward/kl_penalty` / `reward/std`, means over the KL arm's steps).
#: The penalty's size is an upper bound on what it moves, so below this it cannot have mattered.
#: Measured (params/examples/bandit_ppo.yaml, the embedded model, StarPO-PPO at lr 2e-5, 6 steps,
#: CPU): 0% at step 0 (the policy is the reference), 3% at step 1, 44% at step 5; 16% over the run.
MIN_KL_SHARE = 0.01
MIN_SEEDS = 3
#: A filter chose by uncertainty when its kept groups' reward std beat all groups' on at least this
#: share of the steps of some stretch from the start of the run of at least `MIN_FILTER_STEPS` steps
#: (filter claims): on the others every group tied, and top-k kept the first ones, the unfiltered
#: arm's choice in all but the batch size. A stretch from the start, not the whole run: an arm that
#: converged or collapsed ties from then on (on Bandit a group shares its payout, so every group of
#: an arm that always pulls one arm has std 0), and had chosen until then; what follows is the
#: outcome its claim scores, not a filter that did not act (the whole-run share read a filter arm at
#: success 1 from step 40 of 150 as inactive: 27%).
MIN_FILTER_SHARE = 0.5
MIN_FILTER_STEPS = 10
#: Two per-turn action limits separated the arms when the smaller limit dropped the pieces past it on
#: at least this share of its arm's matched turns (`rollout/actions_dropped`; actions claims), or
#: the larger limit's arm wrote more actions a turn on average than the smaller allows
#: (`rollout/actions_written`), or past the env's default on this share of its turns where the
#: smaller is at or under that default (`rollout/actions_past_default`). Otherwise both arms played
#: what either limit would have let through, and only the action budget printed in the prompt
#: differed.
MIN_ACTIONS_DROPPED = 0.05
#: A think arm thought when its parsed <think> text averaged at least this many tokens a turn, over
#: all its turns (`reasoning/length` × `reasoning/matched`; think claims): an empty
#: `<think></think>` passes the format check, and tags that matched on a few turns are not thinking.
MIN_REASONING_TOKENS = 1.0
#: A censored run learned when its success peak (5-step training average, or validation) rose this
#: far above the env's random play: the max of ~30 validations of 128 random-level states lies
#: about 0.09 above it (2 standard errors at p = 0.5), the max of 150 steps' 5-step averages of 64
#: episodes about 0.06, so a run under this never left random play.
LEARN_MARGIN = 0.1


def curve(df: pd.DataFrame, metric: str, by: list[str]) -> pd.DataFrame:
    """Mean of `metric` per step over seeds, for each combination of `by`; NaN rows dropped."""
    d = df.dropna(subset=[metric]) if metric in df else df.iloc[:0]
    return (
        d.groupby([*by, "step"], dropna=False)[metric].mean().reset_index()
        if len(d)
        else pd.DataFrame(columns=[*by, "step", metric])
    )


def drop_step(values: pd.Series, frac: float = 0.5) -> int | None:
    """Where an indicator dropped: the first step of a stretch of COLLAPSE_PERSIST steps in which its
    COLLAPSE_WINDOW-step moving average (full windows) stays below `frac` × that average's maximum
    over the first third of the run; None when it never does, or the run is too short to tell.

    Smoothed and sustained as `collapse` is, so that a lead compares like with like, and because one
    step's value is noisy: a group reward std at success 0.1 (8 groups of 8) has a step-to-step
    spread of ~30% of its level, and its first dip under half its early maximum came at a median of
    step 3 in every simulated stationary run (300 runs of 150 steps), a "warning" any later collapse
    would score as a long lead; smoothed and sustained, 0.3% of those runs dropped before step 100,
    while a real fall (success 0.5 -> 0.05 at step 60) was found in all, at step 63."""
    ma, ref, unreadable = _early_level(values)
    return None if unreadable else _first_sustained(ma < frac * ref, COLLAPSE_PERSIST)


def unreadable_drop(values: pd.Series) -> str | None:
    """Why `drop_step` cannot read a drop in `values`, or None when it can (and then its None means
    the indicator never dropped: a lead of 0). Scored as 0, an unreadable indicator (not logged in
    this run, too short, or flat at 0 early, with nothing to fall from) read as "no warning"."""
    return _early_level(values)[2]


def _early_level(values: pd.Series) -> tuple[pd.Series, float, str | None]:
    """An indicator's COLLAPSE_WINDOW-step moving average, its maximum over the first third of the
    run (the level a drop falls from), and why a drop cannot be read from them (None: it can)."""
    v = values.dropna().sort_index()
    need = COLLAPSE_WINDOW + COLLAPSE_PERSIST - 1
    if v.empty:
        return v, math.nan, "not logged"
    if len(v) < need:
        return v, math.nan, f"{len(v)} logged point(s), fewer than the {need} a held drop needs"
    ma = v.rolling(COLLAPSE_WINDOW).mean()
    ref = ma.iloc[: max(COLLAPSE_WINDOW, len(v) // 3)].max()
    if not ref > 0:
        return (
            ma,
            ref,
            (
                f"its {COLLAPSE_WINDOW}-step average never rose above 0 in the first third of the run: "
                "no early level to fall from"
            ),
        )
    return ma, ref, None


def success_metric(df: pd.DataFrame) -> str:
    """Validation success when the runs validated, else training success."""
    return "val/success" if "val/success" in df and df["val/success"].notna().any() else "rollout/success"


def series(df: pd.DataFrame, metric: str, **where) -> pd.Series:
    """Step-indexed mean of `metric` over the rows matching `where` (column=value), seeds pooled.
    Column names with dots or slashes go in as keyword arguments via **{"cfg.env.name": ...}."""
    part = df
    for col, value in where.items():
        part = part[part[col] == value]
    c = curve(part, metric, [])
    return c.set_index("step")[metric] if len(c) else pd.Series(dtype=float)


#: The share of a run's logged points that "late" means, everywhere: `late_mean`, the late score,
#: the slope's last third, the late bars.
LATE = 1 / 3


def late_tail(values: pd.Series | pd.DataFrame, frac: float = LATE) -> pd.Series | pd.DataFrame:
    """The last `frac` of `values` (at least one point)."""
    return values.iloc[-max(1, round(len(values) * frac)) :]


def early_head(values: pd.Series | pd.DataFrame, frac: float = LATE) -> pd.Series | pd.DataFrame:
    """The first `frac` of `values` (at least one point): `late_tail`'s mirror."""
    return values.iloc[: max(1, round(len(values) * frac))]


def late_mean(values: pd.Series, frac: float = LATE) -> float:
    """Mean over the last `frac` of the logged steps (at least one): "final" performance that one
    noisy last step does not decide."""
    v = values.dropna()
    if v.empty:
        return float("nan")
    return float(late_tail(v, frac).mean())


def late_table(df: pd.DataFrame, metric: str, by: str | list[str]) -> pd.DataFrame:
    """One row per combination of `by`: the late mean of `metric` (seeds averaged per step first),
    in the figures' legend order (numbers inside labels by value: "top 25%" before "top 100%")."""
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    parts = [(k if isinstance(k, tuple) else (k,), part) for k, part in df.groupby(by, sort=False)]
    for key, part in sorted(parts, key=lambda kp: tuple(map(natural_key, kp[0]))):
        c = curve(part, metric, [])
        rows.append({**dict(zip(by, key)), f"late {metric}": late_mean(c.set_index("step")[metric])})
    return pd.DataFrame(rows)


def early_mean(values: pd.Series, frac: float = LATE) -> float:
    v = values.dropna()
    if v.empty:
        return float("nan")
    return float(early_head(v, frac).mean())


def lead(indicator: pd.Series, collapse: int | None, frac: float = 0.5) -> int | None:
    """Early-warning lead: steps from the indicator's drop (`drop_step`) to the reward collapse.
    Positive: the indicator warned first. None when either event never happens."""
    drop = drop_step(indicator, frac)
    return None if drop is None or collapse is None else collapse - drop


def slope(values: pd.Series) -> float:
    """Least-squares slope per step (NaN with fewer than 3 points): the trend of a curve."""
    v = values.dropna()
    if len(v) < 3:
        return float("nan")
    x = v.index.to_numpy(dtype=float)
    y = v.to_numpy(dtype=float)
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x**2).sum())


def early_late_reasoning(samples: pd.DataFrame, width: int = 160) -> pd.DataFrame:
    """Paper Table 1: per run, the first-turn reasoning at its first and last logged step, for an
    initial state (seed) logged at both when there is one, so templates show side by side."""
    rows = []
    for run_id, part in samples.groupby("run_id", sort=True):
        first, last = part["step"].min(), part["step"].max()
        common = sorted(set(part[part["step"] == first]["seed"]) & set(part[part["step"] == last]["seed"]))
        for step in sorted({first, last}):
            at = part[part["step"] == step]
            pick = at[at["seed"] == common[0]] if common else at
            s = pick.iloc[0]
            think = (s["thinks"] or [""])[0] if isinstance(s["thinks"], list) else ""
            rows.append(
                {
                    "run_id": run_id,
                    "when": "early" if step == first else "late",
                    "step": int(step),
                    "seed": s["seed"],
                    "reward": s.get("reward"),
                    "reasoning": (think or "(no <think> parsed)")[:width],
                }
            )
    return pd.DataFrame(rows)


# ---- collapse, censored at the horizon ----


def _first_sustained(flag: pd.Series, persist: int) -> int | None:
    """First index where `flag` holds for `persist` consecutive points."""
    run = 0
    for step, f in flag.items():
        run = run + 1 if f else 0
        if run >= persist:
            return int(flag.index[flag.index.get_loc(step) - persist + 1])
    return None


def _beyond_noise(ma: pd.Series, peak: pd.Series, episodes: int | None, window: int) -> pd.Series:
    """Where the drop from `peak` to `ma` (rates of `window`-step averages of `episodes` binary
    outcomes a step) exceeds COLLAPSE_Z standard errors of their difference; everywhere when the
    episode count is unknown."""
    if episodes is None:
        return pd.Series(True, index=ma.index)
    se = np.sqrt(2 * peak * (1 - peak) / (window * episodes))
    return (peak - ma) > COLLAPSE_Z * se


def collapse(
    success: pd.Series,
    format_valid: pd.Series | None = None,
    *,
    episodes: int | None = None,
    window: int = COLLAPSE_WINDOW,
) -> int | None:
    """Step where a run collapsed, or None (censored: no collapse inside the horizon).

    Collapse: the `window`-step moving average of training success stays below half its running
    peak for at least COLLAPSE_PERSIST steps, once that peak reached MIN_COLLAPSE_PEAK, or the
    format-valid rate (same smoothing) stays below 0.5 for as long after its average had reached
    0.5 (a run that never answered in format did not collapse: it never learned). With `episodes`
    (a step's episodes) each drop must also exceed the noise (COLLAPSE_Z); the format rate is per
    turn, but a step's turns are counted as its episodes, since one episode's turns go together.
    The step returned is the first step of that stretch."""
    steps = []
    for rate, lost in (
        (success, lambda ma, peak: (peak >= MIN_COLLAPSE_PEAK) & (ma < COLLAPSE_FRAC * peak)),
        (format_valid, lambda ma, peak: (peak >= FORMAT_FLOOR) & (ma < FORMAT_FLOOR)),
    ):
        r = rate.dropna().sort_index() if rate is not None else pd.Series(dtype=float)
        if not len(r):
            continue
        # Full windows: one step's episodes alone (a partial window) can set a lucky running peak.
        ma = r.rolling(window).mean()
        peak = ma.cummax()
        flag = lost(ma, peak) & _beyond_noise(ma, peak, episodes, window)
        steps.append(_first_sustained(flag, COLLAPSE_PERSIST))
    found = [x for x in steps if x is not None]
    return min(found) if found else None


# ---- the claim, per-seed scores, the bootstrap, the sign test ----


SCORES = ("late", "auc", "peak", "median", "max", "total", "slope", "collapse", "lead")


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
    a), "think" (arm a's reasoning must be there: reasoning/length) or "actions" (the arms' per-turn
    action limits must have separated their play: `actions_inactive`). env: whose floor and
    ceiling bound a success score (None: not a success). bound (slope claims): a level the metric
    cannot pass, 0 for a length or a diversity: a slope towards it can be no steeper than its early
    level's distance from it over the horizon (`slope_room`), and where that is under the MDE a fall
    smaller than the MDE is no evidence against the claim (INCONCLUSIVE, not NOT REPRODUCED).
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
    above_chance: bool = False

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
        if self.bound is not None and self.score != "slope":
            raise ValueError(f"claim {self.id!r}: bound is for slope claims (score {self.score!r})")
        if self.mechanism is not None and self.mechanism not in MECHANISMS:
            raise ValueError(
                f"claim {self.id!r}: unknown mechanism {self.mechanism!r}: {' | '.join(MECHANISMS)}"
            )

    def criterion(self) -> str:
        """The criterion in words, as printed before the data."""
        sign = ">" if self.direction > 0 else "<"
        if self.kind == "noninferiority":
            rule = f"a {sign}= b − {self.margin:g} (non-inferiority margin)"
        else:
            rule = f"a {sign} b, minimum detectable effect {self.mde:g}"
        return f"{self.id}: {self.score} {self.metric}: {rule}; test {self.test}, alpha {self.alpha:g}"


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

    def __str__(self) -> str:
        effect = ""
        if self.effect == self.effect:
            ci = "" if self.ci[0] != self.ci[0] else f" [95% CI {self.ci[0]:+.3g}, {self.ci[1]:+.3g}]"
            effect = f" effect {self.effect:+.3g}{ci} (a {_fmt(self.a)}, b {_fmt(self.b)})"
        if fv := format_text(self):
            effect += "; " + fv
        return (
            f"{self.status}: {self.claim}{effect}\n    why: {self.reason}\n    design: {design(self)}; "
            f"{self.power}"
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


def sign_test(k: int, n: int) -> float:
    """One-sided sign test: P(at least k of n seeds favour a | no effect). Ties are dropped by the
    caller. The smallest p with n seeds is 0.5^n: 3 seeds cannot go below 0.125, 5 reach 0.031."""
    if n == 0:
        return 1.0
    return float(sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n)


def _n_eval(part: pd.DataFrame, metric: str) -> int:
    """Episodes behind one logged value of `metric`: validation states, or the fewest of training
    behind any logged point, P × N × the updates its rollout fed (online_k, fewer at the last
    rollout of a run whose steps are not a multiple of it: that rollout plays only those), so that
    no point's count is overstated. A column a run's config predates, absent or NaN in a mixed
    store, counts as 1."""
    first = part.iloc[0]

    def get(col: str) -> int:
        v = first.get(col, 1)
        return 1 if pd.isna(v) or not v else int(v)

    if metric.startswith("val/"):
        return get("cfg.train.val_size")
    logged = part[part[metric].notna()] if metric in part else part
    updates = np.atleast_1d(np.asarray(_rollout_updates(logged if len(logged) else part), dtype=float))
    updates = updates[np.isfinite(updates)]  # a NaN steps or online_k column: the config's k
    k = max(1, int(updates.min())) if len(updates) else get("cfg.train.online_k")
    return get("cfg.train.groups") * get("cfg.train.group_size") * k


def _rollout_updates(df: pd.DataFrame) -> pd.Series | int:
    """The updates each row's rollout fed: train.online_k (1 where a run's config predates it), or
    the ones left at the last step of a run whose steps are not a multiple of it
    (`TrainConfig.rollout_updates`)."""
    k = df["cfg.train.online_k"].fillna(1) if "cfg.train.online_k" in df else 1
    if "cfg.train.steps" in df:
        return np.minimum(k, df["cfg.train.steps"] - df["step"])
    return k


def seed_scores(df: pd.DataFrame, claim: Claim) -> pd.DataFrame:
    """One row per seed of `df` (one arm): seed, score, the points it averaged (late, auc: for the
    bootstrap) and their `weights` (auc; None: equal), episodes per point, whether the run was
    censored (collapse scores: the score is then the horizon, and `least` the earliest step it can
    still collapse at; else `least` = score), and for collapse scores `peak`, the run's best
    success: the peak of its 5-step training average (full windows) or of its validation success,
    whichever is higher (NaN for other scores)."""
    rows = []
    for seed, part in df.groupby("cfg.train.seed", sort=True):
        part = part.sort_values("step")
        v = part.set_index("step")[claim.metric].dropna() if claim.metric in part else pd.Series(dtype=float)
        horizon = _horizon(part)
        points, censored, least, peak = np.array([]), False, float("nan"), float("nan")
        weights = None  # the points' weights in the score (None: equal)
        why = ""  # why the score is NaN (set below where the metric alone does not say)
        if claim.score in ("collapse", "lead") and v.empty:
            # No success at all: whether the run learned, and so whether "no collapse" means steady,
            # cannot be read; scoring it censored counted it as the steadier arm.
            score = float("nan")
        elif claim.score in ("collapse", "lead"):
            fmt = part.set_index("step")["rollout/format_valid"] if "rollout/format_valid" in part else None
            step = collapse(v, fmt, episodes=_n_eval(part, "rollout/success"))
            val = part["val/success"].dropna() if "val/success" in part else pd.Series(dtype=float)
            # full windows only: one step's 64 episodes alone can sit 0.1 above random play by chance
            full = v.rolling(COLLAPSE_WINDOW).mean().dropna()
            peak = max(
                full.max() if len(full) else -math.inf,
                val.max() if len(val) else -math.inf,
            )
            censored = step is None
            score = float(horizon if censored else step)
            # A stretch starting in the last COLLAPSE_PERSIST - 1 logged steps cannot have lasted long
            # enough to be seen: a censored run collapses there or later (or never).
            logged = part["step"].to_numpy()
            least = float(logged[max(0, len(logged) - COLLAPSE_PERSIST + 1)]) if censored else score
            if claim.score == "lead":
                ind = part.set_index("step")[claim.indicator] if claim.indicator in part else pd.Series([])
                unread = None if censored else unreadable_drop(ind)
                why = f"{claim.indicator} {unread}" if unread else ""
                drop = drop_step(ind)
                score = float("nan") if censored or unread else float(step - drop if drop is not None else 0)
        elif v.empty:
            score = float("nan")
        elif claim.score == "late":
            points = late_tail(v).to_numpy(float)
            score = float(points.mean())
        elif claim.score == "auc":
            points, weights = v.to_numpy(float), _update_weights(v, part, horizon, claim.metric)
            score = float(np.average(points, weights=weights))
        elif claim.score == "peak":
            score = float(v.max())
        elif claim.score == "median":
            score = float(v.median())
        elif claim.score == "max":
            score = float(v.max())
        elif claim.score == "total":
            score = float(v.sum())
        elif claim.score == "slope":
            # A metric left unmeasured late (distinct-2 of under DISTINCT_AT bigrams, where the
            # reasoning shrank; a length where no tags matched) has a slope over the early steps
            # alone, which says nothing of how the run ended: not scored.
            late_from = int(late_tail(part["step"].drop_duplicates()).iloc[0])
            if v.index.max() < late_from:
                score = float("nan")
                why = (
                    f"no {claim.metric} on the last third of its steps (from step {late_from}; its last at "
                    f"{int(v.index.max())}): a slope over the earlier ones says nothing of how the run ended"
                )
            else:
                score = slope(v)
        else:
            raise ValueError(f"unknown score {claim.score!r}: {'|'.join(SCORES)}")
        if score != score and not why:
            why = f"no {claim.metric} logged" if v.empty else f"no {claim.score} of {claim.metric}"
        rows.append(
            {
                "seed": seed,
                "score": score,
                "points": points,
                "n": _n_eval(part, claim.metric),
                "censored": censored,
                "least": least,
                "horizon": horizon,
                "peak": float(peak) if peak > -math.inf else float("nan"),
                "why": why,
                "weights": weights,
            }
        )
    columns = ["seed", "score", "points", "n", "censored", "least", "horizon", "peak", "why", "weights"]
    return pd.DataFrame(rows, columns=columns)


def _update_weights(v: pd.Series, run: pd.DataFrame, horizon: int, metric: str) -> np.ndarray:
    """Trapezoid weights of the points of `v` (indexed by step) over the updates they measured: a
    validation at step s measures the policy after s updates, the last logged step's the final
    policy, after all `horizon` (it is validated after the last update). A plain mean of the points
    favoured the arm validated more often (online-1 every 5 updates, online-10 every 10 with a
    20-update gap before the final one): one curve, laid on both schedules, scored 0.37 and 0.36."""
    x = v.index.to_numpy(float)
    k = int(run["cfg.train.online_k"].fillna(1).iloc[0]) if "cfg.train.online_k" in run else 1
    if metric.startswith("val/") and len(x) and x[-1] == (horizon - 1) // k * k:
        x[-1] = horizon
    if len(x) < 2 or x[-1] == x[0]:
        return np.ones(len(x))
    gaps = np.diff(x)
    return np.r_[gaps, 0.0] / 2 + np.r_[0.0, gaps] / 2


def _is_rate(claim: Claim) -> bool:
    return claim.score in ("late", "auc") and ("success" in claim.metric or "format_valid" in claim.metric)


def bootstrap_ci(
    a: pd.DataFrame, b: pd.DataFrame, claim: Claim, *, paired: bool, draws: int = BOOTSTRAP_DRAWS
) -> tuple[float, float]:
    """95% CI of mean(a) − mean(b) (× direction): seeds resampled with replacement (pairs kept
    together when paired), then, for a success rate, each late point's episodes (Binomial(n, p)/n
    is a resample of n binary episodes with success rate p). Fixed RNG seed (BOOTSTRAP_SEED)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rate = _is_rate(claim)

    def redraw(rows: pd.DataFrame, idx: np.ndarray) -> float:
        vals = []
        for i in idx:
            r = rows.iloc[i]
            if rate and len(r["points"]):
                p = np.clip(r["points"], 0.0, 1.0)
                drawn = rng.binomial(int(r["n"]), p) / int(r["n"])
                # less the arm's random play where the claim scores above chance (0 else)
                vals.append(float(np.average(drawn, weights=r["weights"])) - float(r.get("offset", 0.0)))
            else:
                vals.append(float(r["score"]))
        return float(np.mean(vals))

    out = np.empty(draws)
    for d in range(draws):
        ia = rng.integers(0, len(a), len(a))
        ib = ia if paired else rng.integers(0, len(b), len(b))
        out[d] = (redraw(a, ia) - redraw(b, ib)) * claim.direction
    lo, hi = np.percentile(out, [2.5, 97.5])
    return float(lo), float(hi)


def t_interval(a: pd.DataFrame, b: pd.DataFrame, claim: Claim, paired: bool) -> tuple[float, float]:
    """95% Student t interval of mean(a) − mean(b) (× direction) over the seeds' scores: paired
    differences when paired, else Welch's. A seed's score already carries its episodes' noise."""
    x, y = a["score"].to_numpy(float), b["score"].to_numpy(float)
    if paired:
        d = (x - y) * claim.direction
        mean, se, df = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), len(d) - 1.0
    else:
        va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
        mean, se = float(x.mean() - y.mean()) * claim.direction, math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1)) if va + vb > 0 else math.inf
    if se == 0:
        return mean, mean
    half = t_quantile(0.975, df) * se
    return mean - half, mean + half


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t with `df` degrees of freedom (real df, as Welch's),
    by bisection on its CDF (no scipy in the dependencies)."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t: 1 − I_x(df/2, 1/2) / 2 with x = df / (df + t²), for t >= 0."""
    if math.isinf(df):
        return 0.5 * (1 + math.erf(t / math.sqrt(2)))
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by its continued fraction (modified Lentz)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point
        return 1 - _betainc(b, a, 1 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny, c, d = 1e-300, 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h / a


# ---- mechanisms, floor and ceiling ----


def mechanism_inactive(A: pd.DataFrame, B: pd.DataFrame, mechanism: str | None) -> str | None:
    """Why the manipulated `mechanism` did not act between arms A and B, or None when it did (or
    when the claim names none). Read on the arm `mechanism_arm` names: both arms' limits for
    "actions" (`actions_inactive`), else the one arm that shows it (`_arm_inactive`)."""
    if mechanism is None:
        return None
    if mechanism == "actions":
        return actions_inactive(A, B)
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}: {' | '.join(MECHANISMS)}")
    return _arm_inactive(B if mechanism_arm(mechanism) == "b" else A, mechanism)


def _arm_inactive(df: pd.DataFrame, mechanism: str) -> str | None:
    """Why `mechanism` did not act in the one arm `df`, or None when it did."""
    if mechanism in ("clip", "clip_high"):
        steps = df["policy/optimizer_steps"].dropna() if "policy/optimizer_steps" in df else pd.Series([])
        if len(steps) and (steps <= 1).all():
            return "one optimizer step per batch: the ratio is 1, the clip never acts"
        # clip_high: only the upper bound differs between the arms; the lower bound's clipping, the
        # same in both, says nothing about whether raising ε_high changed an update.
        names = ("policy/clip_frac_high",) if mechanism == "clip_high" else CLIP_FRACS
        cols = [c for c in names if c in df]
        frac = float(df[cols].sum(axis=1, min_count=1).mean()) if cols else float("nan")
        if not frac >= MIN_CLIP_FRAC:
            which = "upper-bound clip fraction" if mechanism == "clip_high" else "clip fraction"
            return f"{which} {_fmt(frac)} < {MIN_CLIP_FRAC:.0%}: the clip hardly acted"
        return None
    if mechanism == "kl":
        # The KL arm's KL reward, at its largest (kl_coef · Σ|KL_t|), beside the spread of the
        # trajectory rewards it is added to: under MIN_KL_SHARE of it, no return moved enough for
        # removing the KL to change an update, however long the run.
        size = df["reward/kl_penalty"].dropna() if "reward/kl_penalty" in df else pd.Series([])
        if not len(size):
            return (
                "no KL reward logged (reward/kl_penalty; a KL loss term, kl_in_reward=false, is not measured)"
            )
        if not float(size.mean()) > 0:
            return f"the KL reward was {_fmt(float(size.mean()))} at every step: the KL did not act"
        if "reward/std" not in df or df["reward/std"].isna().all():
            return "no reward/std logged: the KL reward cannot be sized against the rewards' spread"
        spread = float(df["reward/std"].mean())
        share = float(size.mean()) / spread if spread > 0 else math.inf  # the only reward signal
        if share < MIN_KL_SHARE:
            return (
                f"the KL reward moved an episode's returns by at most {_fmt(float(size.mean()))}, "
                f"{share:.2%} of the rewards' spread {_fmt(spread)} (< {MIN_KL_SHARE:.0%}): "
                "the KL hardly acted"
            )
        return None
    if mechanism == "think":
        length = df["reasoning/length"].dropna() if "reasoning/length" in df else pd.Series([])
        if not len(length):
            # absent, or NaN at every step: no turn's tags matched, no reasoning to measure
            return "no reasoning/length logged" + (
                " (NaN at every step: no turn's tags matched the format)" if "reasoning/length" in df else ""
            )
        matched = df["reasoning/matched"].dropna() if "reasoning/matched" in df else pd.Series([])
        if len(matched):
            # Tokens a turn over all turns, not only the matched ones: an arm whose tags matched on a
            # few turns of one step out of 30 averaged many tokens there, and had not thought.
            rows = df.loc[matched.index]
            per_turn = float((rows["reasoning/length"].fillna(0.0) * matched).mean())
            if per_turn < MIN_REASONING_TOKENS:
                return (
                    f"its reasoning averaged {_fmt(per_turn)} tokens a turn over all its turns "
                    f"(< {MIN_REASONING_TOKENS:g}; {_fmt(float(length.mean()))} where the tags matched, "
                    f"on {float(matched.mean()):.0%} of its turns): the think arm did not think"
                )
            return None
        # a run store from before reasoning/matched: the matched turns' length alone
        if float(length.mean()) < MIN_REASONING_TOKENS:
            return (
                f"its reasoning averaged {_fmt(float(length.mean()))} tokens a turn "
                f"(< {MIN_REASONING_TOKENS:g}): the think arm did not think"
            )
        return None
    if mechanism == "filter":
        if "rollout/kept" not in df:
            return "no rollout/kept logged"
        if "cfg.train.groups" not in df or "cfg.train.group_size" not in df:
            return "no cfg.train.groups / cfg.train.group_size in the frame: the batch the filter chose from"
        # a step plays online_k × P × N episodes (each rollout feeds online_k updates), all filtered
        total = df["cfg.train.groups"] * df["cfg.train.group_size"] * _rollout_updates(df)
        if (df["rollout/kept"].dropna() >= total.loc[df["rollout/kept"].dropna().index]).all():
            return "the filter kept every episode"
        modes = set(df["cfg.algo.filter_mode"].dropna()) if "cfg.algo.filter_mode" in df else {"top"}
        if {"reward/group_std", "reward/group_std_kept"} <= set(df) and modes in ({"top"}, {"bottom"}):
            # Groups tied in reward std (all 0: every answer of a group scored the same) leave the
            # top-k choice to the order: the filter kept groups, but not by their std. (A random
            # filter chooses by design without it: not checked.)
            both = df[["step", "reward/group_std", "reward/group_std_kept"]].dropna()
            kept, every = both["reward/group_std_kept"], both["reward/group_std"]
            chose = kept > every + 1e-9 if modes == {"top"} else kept < every - 1e-9
            # the share of its seeds' steps where it chose, over the first n logged steps, at the
            # best n of at least MIN_FILTER_STEPS (all of them in a shorter run)
            by_step = chose.groupby(both["step"]).mean().sort_index()
            first = min(MIN_FILTER_STEPS, len(by_step))
            best = float(by_step.expanding().mean().iloc[first - 1 :].max()) if len(by_step) else 1.0
            if best == 0:  # kept == all at every step: every group's std was the same
                zero = float(every.abs().max()) < 1e-9
                alike = " (0: each group's answers all scored alike)" if zero else ""
                return (
                    f"every group had the same reward std at every logged step{alike}, so which "
                    "groups it kept fell to their order: the filter kept groups, but did not choose them "
                    "by their std"
                )
            if best < MIN_FILTER_SHARE:
                which = "exceeded" if modes == {"top"} else "fell below"
                return (
                    f"the kept groups' reward std {which} all groups' on at most {best:.0%} of the "
                    f"steps of any stretch from the start of {first} steps or more "
                    f"(< {MIN_FILTER_SHARE:.0%}; on the others every group had the same std): "
                    "the filter kept groups, but did not choose them by their std"
                )
        return None
    raise AssertionError(f"mechanism {mechanism!r} has no check in _arm_inactive")


CLIP_FRACS = ("policy/clip_frac_low", "policy/clip_frac_high")
#: Scores that depend on how long a run trained: arms with different horizons are not compared.
HORIZON_SCORES = ("late", "auc", "peak", "slope", "collapse", "lead")
MECHANISMS = ("clip", "clip_high", "kl", "filter", "think", "actions")


def mechanism_arm(mechanism: str | None) -> str:
    """Which arm shows whether `mechanism` acted: "b" for clip_high (the lower ε_high: the tokens
    its upper bound clips are the ones arm a's higher bound would let through) and for kl (the arm
    that keeps the KL: "no KL beats KL"), "a and b" for actions (`actions_inactive`), else "a"."""
    if mechanism == "actions":
        return "a and b"
    return "b" if mechanism in ("clip_high", "kl") else "a"


PER_TURN = "cfg.rollout.max_actions_per_turn"


def per_turn_limit(part: pd.DataFrame) -> int | None:
    """The one per-turn action limit an arm's runs played under (`rollout.max_actions_per_turn`, the
    env's default where unset), or None where its runs differ."""
    from ragen_lib import envs

    cols = [c for c in (PER_TURN, "cfg.env.name") if c in part]
    limits = {
        envs.env_class(r["cfg.env.name"])
        .limits(max_actions_per_turn=_int_or_none(r.get(PER_TURN)))
        .max_actions_per_turn
        for _, r in part[cols].drop_duplicates().iterrows()
    }
    return limits.pop() if len(limits) == 1 else None


def _int_or_none(value) -> int | None:
    """A run's integer setting from its DataFrame column (a `rollout.*` limit, `train.val_size`): None
    where the run left it unset (NaN in a store mixing runs that set it with runs that did not, or
    no such column)."""
    return None if value is None or pd.isna(value) else int(value)


def actions_inactive(A: pd.DataFrame, B: pd.DataFrame) -> str | None:
    """Why two arms' per-turn action limits did not separate their play, or None when they did (05's
    Table 3: k actions a turn with a 5k budget). Two limits differ only where an answer wrote more
    actions than the smaller one allows: the smaller limit then dropped pieces the larger would have
    played (`rollout/actions_dropped`, its arm), or the larger limit's arm played past the smaller
    (`rollout/actions_written` above the smaller limit, its arm's mean). Below `MIN_ACTIONS_DROPPED`
    and at or under the limit, both arms played what either limit allowed: the warm-up teaches every
    arm the env's default of 5 a turn, so a 7-action arm that never writes more than 5 plays as the
    5-action arm does, and 5 vs 7 compares a prompt's printed budget. Where the smaller limit is at
    or under the env's default (5 vs 7), the larger arm's `rollout/actions_past_default` is the share
    of its turns that played past the default, so past the smaller limit at least as often
    (`MIN_ACTIONS_DROPPED` or more: acted). Above the default (6 vs 8), and in runs stored before
    2026-12-02, a larger arm that passed the smaller limit on a minority of its turns, with a mean
    under it, is not seen: the row then errs to INCONCLUSIVE."""
    limits = {"a": per_turn_limit(A), "b": per_turn_limit(B)}
    if None in limits.values():
        which = "a" if limits["a"] is None else "b"
        return f"arm {which}'s runs played under different per-turn action limits ({PER_TURN})"
    if limits["a"] == limits["b"]:
        return f"both arms allow {limits['a']} actions a turn: no limit was manipulated"
    small, large = sorted(limits, key=limits.get)
    parts = {"a": A, "b": B}
    for arm, c in ((small, "rollout/actions_dropped"), (large, "rollout/actions_written")):
        if c not in parts[arm]:
            return f"no {c} logged (runs stored before 2026-12-02 lack it): whether a limit bound is unknown"
        if parts[arm][c].isna().all():
            return (
                f"arm {arm}'s {c} is NaN at every step: no turn's tags matched, so no answer wrote an "
                "action to count"
            )
    dropped = float(parts[small]["rollout/actions_dropped"].mean())
    written = float(parts[large]["rollout/actions_written"].mean())
    past, default = _past_default(parts[large], limits[small])
    if dropped >= MIN_ACTIONS_DROPPED or written > limits[small] or past >= MIN_ACTIONS_DROPPED:
        return None
    also = (
        f", past the env's default {default} on {past:.0%} of them (< {MIN_ACTIONS_DROPPED:.0%})"
        if past == past
        else ""
    )
    return (
        f"the {limits[small]}-action arm ({small}) wrote past its limit on {dropped:.0%} of its turns "
        f"(< {MIN_ACTIONS_DROPPED:.0%}) and the {limits[large]}-action arm ({large}) wrote "
        f"{_fmt(written)} actions a turn (≤ {limits[small]}){also}: both played what either limit allowed"
    )


def _past_default(part: pd.DataFrame, limit: int) -> tuple[float, int | None]:
    """(share, default): the share of an arm's matched turns that wrote more than its env's default
    per-turn limit (`rollout/actions_past_default`), a lower bound of the share past `limit` where
    `limit` is at or under that default; (NaN, None) where it is above it, where the arm's envs'
    defaults differ, or where its runs did not log it."""
    from ragen_lib import envs

    c = "rollout/actions_past_default"
    if c not in part or part[c].isna().all() or "cfg.env.name" not in part:
        return math.nan, None
    defaults = {envs.env_class(name).max_actions_per_turn for name in part["cfg.env.name"].dropna().unique()}
    if len(defaults) != 1 or limit > (default := defaults.pop()):
        return math.nan, None
    return float(part[c].mean()), default


MIN_REFERENCE_STATES = 64


def reference(
    env: str | None, n: int = MIN_REFERENCE_STATES, actions: int | None = None, env_kwargs: tuple = ()
) -> tuple[float, float] | None:
    """(floor, ceiling) of `env`'s success: random-policy and expert success within `actions`
    (None: the env's default budget), on its first `n` validation states, of the env built with
    `env_kwargs` ((name, value) pairs) (baselines.reference_success)."""
    if env is None:
        return None
    from ragen_lib import baselines

    ref = baselines.reference_success(env, n=n, actions=actions, env_kwargs=tuple(sorted(env_kwargs)))
    return float(ref["random"]), float(ref["expert"])


LIMITS = ("cfg.rollout.max_turns", "cfg.rollout.max_actions_per_turn", "cfg.rollout.max_actions_per_episode")
ENV_KWARGS = "cfg.env.kwargs."


def arm_reference(part: pd.DataFrame, env: str | None) -> tuple[float, float] | None:
    """(floor, ceiling) of `env`'s success for one arm's runs: within the action budget they played
    under (their `rollout.*` limits, the env's defaults where unset: 5 actions a turn over 5 turns is
    a 25-action budget, whose random play succeeds more often than at the default 10) and on the
    first max(val_size, MIN_REFERENCE_STATES) validation states: those they were validated on, and
    no fewer, so that a small validation set (the smoke profile's) does not set a noisy floor for
    the training success a collapse claim reads; and of the env as they built it (`env.kwargs`,
    where `env` is the env they trained on: a non-slippery FrozenLake's ceiling is 1). Runs under
    several budgets get the highest floor and the lowest ceiling, so the check errs toward
    INCONCLUSIVE."""
    if env is None:
        return None
    from ragen_lib import envs

    kw_cols = sorted(c for c in part if c.startswith(ENV_KWARGS))
    cols = [c for c in (*LIMITS, "cfg.train.val_size", "cfg.env.name", *kw_cols) if c in part]
    combos = part[cols].drop_duplicates() if cols and len(part) else pd.DataFrame([{}])
    refs = set()
    for _, r in combos.iterrows():
        # a run's env.kwargs build its own env only (trainer._validation: not an extra one)
        own = r.get("cfg.env.name", env) == env
        kwargs = _env_kwargs(env, {c.removeprefix(ENV_KWARGS): r[c] for c in kw_cols}) if own else ()
        given = {c.removeprefix("cfg.rollout."): _int_or_none(r.get(c)) for c in LIMITS}
        limits = envs.env_class(env).limits(**given)
        n = max(_int_or_none(r.get("cfg.train.val_size")) or 0, MIN_REFERENCE_STATES)
        refs.add(reference(env, n=n, actions=limits.actions, env_kwargs=kwargs))
    return max(f for f, _ in refs), min(c for _, c in refs)


def _env_kwargs(env: str, flat: dict) -> tuple:
    """A run's env.kwargs back from its DataFrame columns, as sorted (name, value) pairs of the
    env's field types: the frame holds a tuple as its text ("(8, 8)") and an int as a float where
    another run left the field unset (NaN: not set, left out)."""
    import ast

    from ragen_lib import envs

    defaults = envs.env_fields(env)
    out = []
    for name, value in sorted(flat.items()):
        if not isinstance(value, str) and pd.isna(value):
            continue
        value = value.item() if hasattr(value, "item") else value
        default = defaults.get(name)
        if isinstance(value, str) and not isinstance(default, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):  # not a literal: the env's own check names it
                pass
        if isinstance(default, bool):
            value = bool(value)
        elif isinstance(default, int) and isinstance(value, float) and value.is_integer():
            value = int(value)
        out.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(out)


def _nan_meaning(metric: str) -> str:
    """A metric's definition, which says when it is NaN (metrics.METRICS: "... (NaN: none did)")."""
    from ragen_lib.metrics import METRICS

    return f"its definition: {METRICS[metric].doc}" if metric in METRICS else "nothing was measured"


# ---- one sub-claim → one row ----


def _select(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    """The rows of one arm. A run two grid points share appears once per point's labels
    (`experiments.label_rows`); a selector that does not split them keeps its steps once, not twice."""
    missing = [col for col in where if col not in df]
    if missing:
        near = [c for c in df.columns if any(m.split(".")[-1] in c for m in missing)][:5]
        raise ValueError(
            f"arm selector column(s) {missing} not in the runs' frame (add them as the notebook's "
            f"labels, or select on a config column{': ' + ', '.join(near) if near else ''})"
        )
    part = df
    for col, value in where.items():
        part = part[part[col].isin(value) if isinstance(value, list | tuple | set) else part[col] == value]
    if {"run_id", "step"} <= set(part.columns):
        part = part.drop_duplicates(["run_id", "step"])
    return part


def _unfinished(arm: str, part: pd.DataFrame) -> list[str]:
    """Each run of `part` that did not finish (`done` false, runs.load), as 'arm a seed 1 stopped
    after 6 of 30 steps'; [] where every run finished or the frame has no `done` column."""
    if "done" not in part or part["done"].all():
        return []
    key = "run_id" if "run_id" in part else "cfg.train.seed"
    out = []
    for _, run in part[~part["done"].astype(bool)].groupby(key, sort=True):
        seed = run["cfg.train.seed"].iloc[0] if "cfg.train.seed" in run else "?"
        planned = run["cfg.train.steps"].iloc[0] if "cfg.train.steps" in run else None
        of = f" of {_fmt(planned)}" if planned is not None else ""
        out.append(f"arm {arm} seed {_fmt(seed)} stopped after {int(run['step'].max()) + 1}{of} steps")
    return out


def _runs_per_seed(arm: str, part: pd.DataFrame) -> list[str]:
    """Each seed for which `part` holds more than one run: 'arm a has 2 runs of seed 0 (id, id)'."""
    if "run_id" not in part or "cfg.train.seed" not in part:
        return []
    ids = part.groupby("cfg.train.seed", sort=True)["run_id"].unique()
    return [
        f"arm {arm} has {len(r)} runs of seed {_fmt(seed)} ({', '.join(sorted(map(str, r)))})"
        for seed, r in ids.items()
        if len(r) > 1
    ]


def _design(A: pd.DataFrame, B: pd.DataFrame, metric: str) -> dict:
    part = pd.concat([A, B])

    def one(col):
        vals = (
            [v.item() if hasattr(v, "item") else v for v in part[col].dropna().unique()]
            if col in part
            else []
        )
        if len(vals) > 1:  # the arms differ: say so rather than print one of them
            return " / ".join(_fmt(v) for v in sorted(vals))
        return vals[0] if vals else None

    return {
        "seeds": sorted(int(s) for s in part["cfg.train.seed"].unique()) if "cfg.train.seed" in part else [],
        "steps": _horizons(A, B),
        "val_size": one("cfg.train.val_size"),
        # the temperature the judged episodes were sampled at: validation's own for a val/ metric
        "temperature": one(
            "cfg.train.val_temperature" if metric.startswith("val/") else "cfg.rollout.temperature"
        ),
        # every model the rows trained (a config written before it was recorded: "not recorded")
        "models": sorted(part["cfg.model.name"].fillna(UNRECORDED_MODEL).astype(str).unique())
        if "cfg.model.name" in part
        else [],
    }


def _horizons(*parts: pd.DataFrame):
    """The steps the runs of `parts` (each an arm) trained: one number, or "150 / 30" where runs
    differ (one number hid an arm that trained a fifth as long). A run's planned train.steps where
    the frame has it: online-k logs every k-th step (0, 5, …, 195 of 200), the same updates."""
    steps = set()
    for part in parts:
        if not len(part):
            continue
        key = "run_id" if "run_id" in part else "cfg.train.seed" if "cfg.train.seed" in part else None
        groups = part.groupby(key) if key else [(None, part)]
        steps |= {_horizon(run) for _, run in groups}
    if not steps:
        return None
    return min(steps) if len(steps) == 1 else " / ".join(map(str, sorted(steps, reverse=True)))


def _horizon(run: pd.DataFrame) -> int:
    """One run's steps: its planned train.steps where recorded, else its last logged step + 1."""
    planned = run["cfg.train.steps"].dropna() if "cfg.train.steps" in run else pd.Series([])
    return int(planned.iloc[0]) if len(planned) else int(run["step"].max()) + 1


def judge(
    df: pd.DataFrame,
    claim: Claim,
    a: dict,
    b: dict | None,
    *,
    floor_ceiling: tuple[float, float] | None | str = "env",
) -> Row:
    """Judge `claim` on arm a (rows matching `a`, column → value or list) against arm b.

    floor_ceiling: (floor, ceiling) of the success score; "env" (default) looks them up for
    `claim.env` with `reference`; None skips the check. See the module docstring for the order."""
    A = _select(df, a)
    B = A if b is None else _select(df, b)  # one arm: its score against 0
    d = _design(A, B, claim.metric)
    row = Row(claim.id, claim.text, INCONCLUSIVE, "", criterion=claim.criterion(), **d)
    row.power = power_statement(claim, A, B)
    if "judged" in df and len(A) and len(B) and not (A["judged"].all() and B["judged"].all()):
        return replace(
            row, status=PILOT, reason="pilot scale in this profile: figures and numbers, no verdict"
        )
    if (
        A.empty
        or B.empty
        or claim.metric not in df
        or (A[claim.metric].isna().all() and claim.score != "collapse")
    ):
        which = (
            "arm a has no runs"
            if A.empty
            else "arm b has no runs"
            if B.empty
            else f"no {claim.metric} logged"
            if claim.metric not in df
            # logged, but NaN where there was nothing to measure (reasoning/* where no turn parsed)
            else f"{claim.metric} is NaN at every step of arm a; {_nan_meaning(claim.metric)}"
        )
        return replace(
            row,
            reason=f"no data: {which} (peak memory is measured on CUDA only)"
            if claim.metric.startswith("memory/") and not A.empty and not B.empty
            else f"no data: {which}",
        )
    arms = (("a", A),) if b is None else (("a", A), ("b", B))
    unfinished = [u for name, part in arms for u in _unfinished(name, part)]
    if unfinished:
        return replace(
            row, reason=f"censored: {'; '.join(unfinished)}: a run that did not finish is not scored"
        )
    ha, hb = _horizons(A), _horizons(B)
    if b is not None and claim.score in HORIZON_SCORES and (ha != hb or isinstance(ha, str)):
        return replace(
            row,
            reason=f"unequal horizons: arm a's runs trained {ha} steps, arm b's {hb}: a {claim.score} "
            "score compares different lengths of training",
        )
    shared_seed = [d for name, part in arms for d in _runs_per_seed(name, part)]
    if shared_seed:
        return replace(
            row,
            reason=f"runs per seed: {'; '.join(shared_seed)}: the arm's selector must pick one run a seed",
        )
    if claim.score == "lead" and (claim.indicator not in df or A[claim.indicator].isna().all()):
        # without this, a misspelt indicator would read as "never dropped": a lead of 0 in every seed
        return replace(row, reason=f"no data: no {claim.indicator} logged (the lead's indicator)")
    why = mechanism_inactive(A, B, claim.mechanism)
    if why:
        arm = mechanism_arm(claim.mechanism)
        return replace(row, reason=f"mechanism did not act ({claim.mechanism}, arm {arm}): {why}")
    sa = seed_scores(A, claim)
    if claim.score == "lead" and sa["censored"].all():
        return replace(row, reason=f"censored: no run collapsed within {int(sa['horizon'].max())} steps")
    # A lead exists only where the run collapsed: censored seeds have none and are left out (named).
    no_lead = sorted(int(x) for x in sa.loc[sa["censored"], "seed"]) if claim.score == "lead" else []
    sa, sb, unscored = _drop_unscored(sa, None if b is None else seed_scores(B, claim), claim)
    if b is None:
        sb = sa.assign(score=0.0, points=[np.array([])] * len(sa), censored=False, least=0.0)
    if sa.empty or sb.empty:
        return replace(row, reason=f"no scores{unscored}")
    # Each arm against its own floor and ceiling: arms that differ in their action budget differ in
    # what random play and the expert reach.
    fa = arm_reference(A, claim.env) if floor_ceiling == "env" else floor_ceiling
    fb = arm_reference(B, claim.env) if floor_ceiling == "env" and b is not None else fa
    fc_name = claim.env or "this task"
    never_learned = ""
    if claim.score == "collapse" and fa is not None:
        floors = (fa[0], fb[0])
        sa, sb, never_learned = _drop_never_learned(sa, sb, floors, fc_name, one_arm=b is None)
        if sa.empty or sb.empty:
            return replace(row, reason=f"never learned: {never_learned}; no seed left to compare")
        never_learned = "; " + never_learned if never_learned else ""
    shared = sorted(set(sa["seed"]) & set(sb["seed"]))
    paired = len(shared) >= 1 and len(shared) == len(sa) == len(sb)
    if paired:
        sa, sb = (
            sa.set_index("seed").loc[shared].reset_index(),
            sb.set_index("seed").loc[shared].reset_index(),
        )
    row.a, row.b = float(sa["score"].mean()), float(sb["score"].mean())
    row.effect = (row.a - row.b) * claim.direction
    row.format_valid = _late_format(A, None if b is None else B, claim.metric)
    floor_note = ""
    if claim.score not in ("collapse", "lead") and b is not None and fa is not None:
        # An arm more than the MDE below random play lost what random play keeps (answers out of
        # format, or a losing habit): beside one that did not, the floor hides no difference. The
        # paper's Sokoban rows are that case: StarPO-S ≈0.21 vs collapsed PPO ≈0, random play 0.19.
        # Only where exactly one arm sank, it is the lower (with floors of their own, an arm can
        # sink below its higher floor and still score above the other: its lead is then its bigger
        # action budget, not a collapse), and the arms are more than the MDE apart (two arms at 0,
        # one under a random play that keeps less than the MDE, differ in nothing).
        sank = [x < f - claim.mde for x, f in ((row.a, fa[0]), (row.b, fb[0]))]
        one_sank = sank[0] != sank[1] and sank[0] == (row.a < row.b) and abs(row.a - row.b) > claim.mde
        if row.a <= fa[0] + claim.mde and row.b <= fb[0] + claim.mde:
            if not one_sank:
                return replace(
                    row,
                    reason=f"floor: neither arm ({_fmt(row.a)}, {_fmt(row.b)}) above random play "
                    f"({_pair(fa[0], fb[0])}) on {fc_name} by more than the MDE {claim.mde:g}",
                )
            floor_note = (
                f"; neither arm above random play ({_pair(fa[0], fb[0])}) by more than the MDE, but arm "
                f"{'a' if sank[0] else 'b'} sank more than the MDE below it: judged"
            )
        if row.a >= fa[1] - claim.mde and row.b >= fb[1] - claim.mde:
            return replace(
                row,
                reason=f"ceiling: both arms ({_fmt(row.a)}, {_fmt(row.b)}) within the MDE {claim.mde:g} "
                f"of the expert ({_pair(fa[1], fb[1])}) on {fc_name}",
            )
    if claim.above_chance:
        if fa is None:
            return replace(row, reason="no data: above_chance needs the env's random play (floor_ceiling)")
        # from here on each arm's score is what it reached beyond its own random play
        sa, sb = (
            sa.assign(score=sa["score"] - fa[0], offset=fa[0]),
            sb.assign(score=sb["score"] - fb[0], offset=fb[0]),
        )
        row.a, row.b = float(sa["score"].mean()), float(sb["score"].mean())
        row.effect = (row.a - row.b) * claim.direction
        floor_note += f"; scored above each arm's own random play ({_pair(fa[0], fb[0])})"
    if claim.score == "collapse" and sa["censored"].all() and sb["censored"].all():
        horizon = int(sa["horizon"].max())
        return replace(
            row,
            effect=float("nan"),
            reason=f"censored: no run of either arm collapsed within {horizon} steps{never_learned}",
        )
    note = never_learned
    if no_lead:
        note = f"; seeds {no_lead} did not collapse within {int(sa['horizon'].max())} steps: no lead there"
    elif claim.score == "collapse" and (sa["censored"].any() or sb["censored"].any()):
        note += "; " + _censored_note(sa, sb)
    note += unscored + floor_note
    short = underpowered(claim, n_seeds=min(len(sa), len(sb)), points=sa)
    if short:
        return replace(row, reason=f"under-powered: {short}{note}")
    scores = pd.concat([sa["score"], sb["score"]])
    if claim.score not in ("collapse", "lead") and scores.nunique() == 1:
        # A lead of 0 in every seed is a measured result (the indicator never fell in any run that
        # collapsed; `unreadable_drop` keeps indicators it cannot read out), not a pinned metric.
        who = "both arms" if b is not None else "arm a and the 0 it is tested against"
        return replace(
            row,
            reason=f"no spread: every seed of {who} scored exactly {_fmt(float(scores.iloc[0]))} "
            f"({claim.score} {claim.metric}): the metric sat at one value, so nothing tells the arms "
            f"apart{note}",
        )
    if not paired and b is not None:
        note += (
            f"; the arms ran on different seeds (a {sorted(int(x) for x in sa['seed'])}, "
            f"b {sorted(int(x) for x in sb['seed'])}): compared unpaired (Welch)"
        )
    row.ci = (
        censored_ci(sa, sb, claim, paired) if claim.score == "collapse" else effect_ci(sa, sb, claim, paired)
    )
    lo, hi = row.ci
    zero_width = math.isfinite(lo) and math.isfinite(hi) and hi - lo <= 1e-9 * max(1.0, abs(lo))
    # Rates were redrawn over their episodes: a zero width there is every episode alike (1.0 vs 0.0)
    if zero_width and claim.score not in ("collapse", "lead") and not _is_rate(claim):  # 0.05 ± 1e-16
        # Every seed's difference the same (or each arm's seeds all one value) and no episodes to
        # redraw: a CI of zero width measures no noise, and any MDE would read as decided. Steps
        # (collapse, lead) are whole numbers: the same lead in every seed is a measured result.
        same = (
            "every seed of arm a scored"  # one arm, against 0
            if b is None
            else "every seed's difference a − b is"
            if paired
            else "each arm's seeds scored one value, a − b"
        )
        return replace(
            row,
            reason=f"no spread: {same} exactly {_fmt(row.effect * claim.direction)} ({claim.score} "
            f"{claim.metric}), so the 95% CI has zero width: the seeds measure no noise to judge "
            f"the effect against{note}",
        )
    status, reason = _decision(row.ci, sa, sb, claim, paired)
    room = slope_room(A, claim)
    if status == NOT_REPRODUCED and room is not None and room[1] < claim.mde:
        # Reasoning of 9 tokens cannot fall 0.05 a step for 200 steps: a fall under the MDE is all
        # the metric had room for, so it does not exclude the claimed effect.
        early, steepest = room
        return replace(
            row,
            reason=f"floor: CI [{row.ci[0]:+.3g}, {row.ci[1]:+.3g}] under the MDE {claim.mde:g}, but arm "
            f"a's {claim.metric} started at {_fmt(early)} (its first third), room for a slope of "
            f"{_fmt(steepest)} a step towards {claim.bound:g} over {_horizon(A)} steps: a fall of the "
            f"MDE's size could not happen, so this is no evidence against the claim{note}",
        )
    return replace(row, status=status, reason=reason + note)


COLLAPSE_MDE = {"bandit": 10, "sokoban": 5, "frozenlake": 5}
"""Collapse rows' MDE in steps per env: under the paper's gaps (GRPO at about 20 and 10 steps, PPO
at 100 and 50 on Bandit and Sokoban; the filter moves FrozenLake's from 100 to 140)."""


def by_collapse(late: Claim) -> Claim:
    """`late`'s pair judged again by its collapse step (training success, censored at the horizon,
    MDE `COLLAPSE_MDE`), with its env and mechanism: where the paper claims a delayed collapse, a
    late score ties two arms that both fell before the last third at the floor."""
    return replace(
        late,
        id=f"{late.id} collapse",
        text=late.text.replace(" beats ", " collapses later than "),
        metric="rollout/success",
        mde=COLLAPSE_MDE[late.env],
        score="collapse",
    )


def slope_room(A: pd.DataFrame, claim: Claim) -> tuple[float, float] | None:
    """(early level, steepest slope) of arm a for a slope claim towards `claim.bound`: the mean over
    seeds of the first third of each seed's points, and its distance from the bound over the
    horizon, the slope of a straight fall to the bound (None for other claims or without points)."""
    if claim.score != "slope" or claim.bound is None or claim.metric not in A:
        return None
    early = [
        early_mean(part.set_index("step")[claim.metric].sort_index())
        for _, part in A.groupby("cfg.train.seed")
    ]
    early = [x for x in early if x == x]  # a seed with no points has no early level
    if not early:
        return None
    level = float(np.mean(early))
    gap = (level - claim.bound) * -claim.direction  # towards the bound: > 0
    return level, max(gap, 0.0) / max(_horizon(A), 1)


def _late_format(A: pd.DataFrame, B: pd.DataFrame | None, metric: str):
    """Each arm's late format-valid rate beside a success metric (mean over seeds of the last third
    of its points, as a late score), or None where there is none to show."""
    rate = format_rate_of(metric)
    if rate is None or rate not in A:
        return None

    def late(part: pd.DataFrame | None) -> float | None:
        if part is None:
            return None
        s = seed_scores(part, Claim("format", "", rate, mde=0.0))["score"].dropna()
        return float(s.mean()) if len(s) else None

    return late(A), late(B)


def _drop_unscored(
    sa: pd.DataFrame, sb: pd.DataFrame | None, claim: Claim
) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    """Leave out the seeds an arm could not score (the metric not logged in that run, too few
    points for a slope, a lead's indicator unreadable), and name them with why: dropped silently,
    a seed vanished from the comparison while the design still listed it, and a paired design
    quietly became Welch's. Each arm also loses the other's where that leaves both on the same
    seeds, so the pairs stay.
    A lead's censored seeds (no collapse, no lead) are named apart, by the caller."""

    def lost(s: pd.DataFrame) -> dict[int, str]:
        gone = s["score"].isna() & ~s["censored"]  # a lead's censored seeds: named by the caller
        return {int(r.seed): r.why for r in s[gone].itertuples()}

    la, lb = lost(sa), {} if sb is None else lost(sb)
    sa, sb = sa.dropna(subset=["score"]), None if sb is None else sb.dropna(subset=["score"])
    if not la and not lb:
        return sa, sb, ""
    out = set(la) | set(lb)
    # each arm also loses the other's unscored seeds where that leaves both on the same seeds
    same = sb is not None and set(sa["seed"]) - out == set(sb["seed"]) - out != set()
    if same:
        sa, sb = sa[~sa["seed"].isin(out)], sb[~sb["seed"].isin(out)]
    who = "; ".join(
        f"{arm} seed {seed}: {why}" for arm, g in (("a", la), ("b", lb)) for seed, why in g.items()
    )
    both = f"seeds {sorted(out)} left out of both arms" if same else "left out"
    return sa, sb, f"; unscored ({who}): {both}"


def effect_ci(sa: pd.DataFrame, sb: pd.DataFrame, claim: Claim, paired: bool) -> tuple[float, float]:
    """95% CI of the effect: the bootstrap's, widened to the seeds' t interval where that is wider.
    The bootstrap cannot reach beyond the range of 3-5 seeds, so alone it calls a null effect about
    four times too often at 3 seeds; the seed-level t interval extrapolates."""
    (blo, bhi), (tlo, thi) = bootstrap_ci(sa, sb, claim, paired=paired), t_interval(sa, sb, claim, paired)
    return min(blo, tlo), max(bhi, thi)


def censored_ci(sa: pd.DataFrame, sb: pd.DataFrame, claim: Claim, paired: bool) -> tuple[float, float]:
    """`effect_ci` of collapse steps where some runs are censored: a censored run collapses at its
    `least` step or later, or never. The low end is the CI's low end with every run at its least
    favourable value, the high end its high end with every run at its most favourable, so no
    assumed collapse step decides anything; an end that a censored run can push to "never" is ±inf
    (with a ≥ b claimed, a censored b makes the low end −inf, a censored a the high end +inf)."""

    def end(low: bool) -> float:
        small_a = low == (claim.direction > 0)  # a at its least where the wanted end needs a small
        never_a, never_b = (
            sa["score"].where(~sa["censored"], math.inf),
            sb["score"].where(~sb["censored"], math.inf),
        )
        xa, xb = (sa["least"], never_b) if small_a else (never_a, sb["least"])
        if np.isinf(xa).any() or np.isinf(xb).any():
            return -math.inf if low else math.inf
        lo, hi = effect_ci(sa.assign(score=xa), sb.assign(score=xb), claim, paired)
        return lo if low else hi

    return end(True), end(False)


def _drop_never_learned(
    sa: pd.DataFrame, sb: pd.DataFrame, floors: tuple[float, float], env: str, *, one_arm: bool
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Leave out the seeds where a censored run never rose LEARN_MARGIN above random play (its
    arm's floor in `floors`): it did not collapse because it had nothing to lose, so its seed says
    nothing about which arm is steadier. Arms run on the same seeds lose the seed in both (the
    comparison stays paired)."""

    def flat(s: pd.DataFrame, floor: float) -> set:
        return {int(x) for x in s.loc[s["censored"] & (s["peak"] < floor + LEARN_MARGIN), "seed"]}

    fa, fb = flat(sa, floors[0]), set() if one_arm else flat(sb, floors[1])
    if not fa and not fb:
        return sa, sb, ""
    same = set(sa["seed"]) == set(sb["seed"])
    drop_a, drop_b = (fa | fb, fa | fb) if same else (fa, fb)
    who = ", ".join(f"{arm} seeds {sorted(f)}" for arm, f in (("a", fa), ("b", fb)) if f)
    note = (
        f"{who} never rose {LEARN_MARGIN:g} above random play ({_pair(*floors)}) on {env}: a run that never "
        f"learned had nothing to lose, so seeds {sorted(drop_a | drop_b)} are left out"
    )
    return sa[~sa["seed"].isin(drop_a)], sb[~sb["seed"].isin(drop_b)], note


def _censored_note(sa: pd.DataFrame, sb: pd.DataFrame) -> str:
    """Which seeds of each arm did not collapse, and how the CI counts them."""
    who = [
        f"{arm} seeds {sorted(int(x) for x in s.loc[s['censored'], 'seed'])}"
        for arm, s in (("a", sa), ("b", sb))
        if s["censored"].any()
    ]
    horizon = int(pd.concat([sa["horizon"], sb["horizon"]]).max())
    return (
        f"censored: {', '.join(who)} did not collapse within {horizon} steps (shown at the horizon); "
        "the CI counts each at its least and most favourable collapse step, from the last steps the "
        "horizon hides to never"
    )


def _decision(ci: tuple[float, float], sa: pd.DataFrame, sb: pd.DataFrame, claim: Claim, paired: bool):
    """(status, reason) of a row from its CI and, for a sign-test claim, the seeds' signs."""
    lo, hi = ci
    diffs = (sa["score"].to_numpy() - sb["score"].to_numpy()) * claim.direction if paired else np.array([])
    favour, untied = int((diffs > 0).sum()), int((diffs != 0).sum())
    p = sign_test(favour, untied) if paired else float("nan")
    if claim.kind == "noninferiority":
        if lo > -claim.margin:
            return REPRODUCED, f"CI low {lo:+.3g} above −margin {-claim.margin:g}"
        if hi < -claim.margin:
            return NOT_REPRODUCED, f"CI high {hi:+.3g} below −margin {-claim.margin:g}"
        return INCONCLUSIVE, f"CI [{lo:+.3g}, {hi:+.3g}] straddles the margin {-claim.margin:g}"
    sign_ok = claim.test != "sign" or p < claim.alpha
    if lo > 0 and sign_ok:
        extra = f", sign test p {p:.3g}" if paired else ""
        return REPRODUCED, f"CI above 0{extra}"
    # Before the MDE test: a CI above 0 that the sign test does not back is no decision either way,
    # where a small effect's CI (above 0, high end under the MDE) would otherwise read NOT REPRODUCED.
    if lo > 0:  # the CI alone would reproduce it; the claim's sign test did not agree
        if not paired:
            return INCONCLUSIVE, (
                f"CI above 0, but the sign test needs both arms on the same seeds "
                f"(a {sorted(sa['seed'].tolist())}, b {sorted(sb['seed'].tolist())})"
            )
        return INCONCLUSIVE, (
            f"CI above 0, but sign test p {p:.3g} >= alpha {claim.alpha:g} "
            f"({favour} of {untied} untied seeds favour a)"
        )
    if hi < claim.mde:
        return (
            NOT_REPRODUCED,
            f"CI high {hi:+.3g} below the MDE {claim.mde:g}: the claimed effect is excluded",
        )
    return INCONCLUSIVE, f"CI [{lo:+.3g}, {hi:+.3g}] covers both 0 and the MDE {claim.mde:g}"


def underpowered(claim: Claim, n_seeds: int, points: pd.DataFrame | None = None) -> str | None:
    """Why the study cannot decide `claim` at its declared MDE, or None."""
    if n_seeds < MIN_SEEDS:
        return f"{n_seeds} seed(s) < {MIN_SEEDS}: no seed-to-seed spread to judge against"
    if claim.test == "sign" and 0.5**n_seeds >= claim.alpha:
        return f"a sign test over {n_seeds} seeds cannot reach p < {claim.alpha:g} (min p {0.5**n_seeds:.3g})"
    if _is_rate(claim) and points is not None and len(points):
        # Each validation replays the same val_size states, so a seed's late validations are n
        # episodes' worth of states, not n per point: states, not replays, set the CI's floor.
        val = claim.metric.startswith("val/")
        episodes = float(sum((1 if val else len(r["points"])) * r["n"] for _, r in points.iterrows()))
        half = 1.96 * math.sqrt(2 * 0.25 / max(episodes, 1))
        if half > claim.mde:
            return (
                f"predicted 95% CI half-width {half:.3g} from {episodes:.0f} episodes per arm "
                f"> MDE {claim.mde:g}"
            )
    return None


def power_statement(claim: Claim, A: pd.DataFrame, B: pd.DataFrame) -> str:
    """The design's power for the declared MDE, in words (printed with every row)."""
    n = min(A["cfg.train.seed"].nunique() if len(A) else 0, B["cfg.train.seed"].nunique() if len(B) else 0)
    reach = "can" if 0.5**n < claim.alpha else "cannot"
    return f"power: MDE {claim.mde:g} declared; {n} seed(s), a sign test {reach} reach p < {claim.alpha:g}"


# ---- the notebook's verdict: rows + a headline rule ----


def headline(rows: list[Row], primary: list[str]) -> tuple[str, str]:
    """The notebook's status from its primary rows: REPRODUCED when all of them are, NOT REPRODUCED
    when any is (and none is INCONCLUSIVE), PILOT when all are pilot; else INCONCLUSIVE. PILOT rows
    are left out, and the reason names the rows it rests on and those left out: a headline over
    fewer rows than its claim names (e.g. one env of three judged in a profile) says so."""
    by = {r.id: r for r in rows}
    missing = [p for p in primary if p not in by]
    if missing:
        raise ValueError(f"headline names unknown rows {missing}; rows: {list(by)}")
    pilot = [p for p in primary if by[p].status == PILOT]
    if len(pilot) == len(primary):
        return PILOT, "every primary sub-claim ran at pilot scale"
    judged = [p for p in primary if p not in pilot]
    on = f" (judged: {', '.join(judged)}" + (f"; PILOT, left out: {', '.join(pilot)})" if pilot else ")")
    st = [by[p].status for p in judged]
    if all(s == REPRODUCED for s in st):
        return REPRODUCED, f"every judged primary sub-claim reproduced{on}"
    if NOT_REPRODUCED in st and INCONCLUSIVE not in st:
        return NOT_REPRODUCED, f"a primary sub-claim was not reproduced{on}"
    return INCONCLUSIVE, f"a primary sub-claim is inconclusive{on}"


@dataclass
class Verdict:
    """A notebook's verdict: one row per sub-claim and a headline from `rule` (the primary rows)."""

    notebook: str
    claim: str
    rows: list[Row]
    primary: list[str]
    rule: str = (
        "REPRODUCED when every judged primary row is; NOT REPRODUCED when one is not and none is "
        "inconclusive; else INCONCLUSIVE (PILOT rows left out)"
    )
    figures: list[str] = field(default_factory=list)
    measured: dict = field(default_factory=dict)  # extra numbers shown, not judged
    status: str = ""
    reason: str = ""

    def __post_init__(self):
        self.status, self.reason = headline(self.rows, self.primary)

    def __str__(self) -> str:
        head = (
            f"{self.status}: {self.claim}\n  why: {self.reason}\n"
            f"  rule: {self.rule} (primary: {', '.join(self.primary)})"
        )
        rows = "\n".join(f"  [{r.id}] {r}" for r in self.rows)
        extra = "\n".join(f"  {k}: {_fmt(v)}" for k, v in self.measured.items())
        return "\n".join(x for x in (head, rows, extra) if x)

    def write(self, profile: str, wall_s: float | None = None) -> Path:
        out = runs.output_root(profile) / "verdicts" / f"{self.notebook}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "wall_s": wall_s, "commit": runs.git_commit()}
        runs._atomic_write(out, json.dumps(data, indent=1, default=str))  # a crash leaves the old one
        return out


def _pair(a: float, b: float) -> str:
    """One number when the arms share it, else both, named."""
    return f"{a:.3g}" if f"{a:.3g}" == f"{b:.3g}" else f"a {a:.3g}, b {b:.3g}"


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}"
    return str(v)


def notebook_run(path: Path) -> tuple[str, float | None]:
    """How papermill's last execution of a notebook ended, from the executed copy at `path`:
    ("finished" | "failed" | "unfinished" | "not run", its start as a POSIX time or None).
    papermill records `exception: true` when a cell raised and `end_time` when it stopped;
    a copy without `end_time` was killed (or is still running)."""
    from datetime import datetime

    if not path.exists():
        return "not run", None
    try:
        meta = json.loads(path.read_text()).get("metadata", {}).get("papermill", {})
    except (OSError, json.JSONDecodeError):
        return "unfinished", None  # papermill was killed while writing it
    start = meta.get("start_time")
    start_s = datetime.fromisoformat(start).timestamp() if start else None
    if meta.get("exception"):
        return "failed", start_s
    return ("finished" if meta.get("end_time") else "unfinished"), start_s


UNRECORDED_MODEL = "not recorded (RAGEN_MODEL or the embedded model)"
"""The model of a run whose config predates recording it (model.name left as None)."""


def trained_on(base: Path) -> str:
    """The devices and models the finished runs under `base` trained, from their DONE records and
    configs (the report may be written elsewhere, e.g. on a laptop from a GPU host's outputs)."""
    devices, names = Counter(), Counter()
    for done in sorted(base.glob("runs/*/*/" + runs.DONE)):
        info = runs.read_done(done.parent)
        devices["unreadable DONE" if info is None else info.get("device") or "unrecorded"] += 1
        try:
            names[runs.Run(done.parent).saved_config().get("model", {}).get("name") or UNRECORDED_MODEL] += 1
        except (OSError, ValueError, runs.CorruptRunError):  # said, not fatal to the report
            names["unreadable config.yaml"] += 1
    if not devices:
        return "no finished runs"

    def counts(c: Counter) -> str:
        return ", ".join(f"{k} ({n} runs)" for k, n in c.items())

    return f"{counts(devices)}; models {counts(names)}{models.paper_note(names)}"


def report(profile: str) -> Path:
    """outputs/<profile>/REPORT.md: one row per sub-claim (verdict, effect and CI, power, design),
    PILOT rows marked; the device, commit and wall time on top. A finding whose notebook failed,
    did not finish or never ran under `make replicate` is listed too, and a verdict older than its
    notebook's failed or unfinished last run is marked stale."""
    import torch

    from ragen_lib import experiments, metrics

    experiments.load_profile(profile)  # a misspelt profile: ValueError naming the valid ones
    base = runs.output_root(profile)
    if not base.is_dir():
        raise FileNotFoundError(
            f"nothing has run for profile {profile!r}: {base} does not exist. Run "
            f"`make replicate-all PROFILE={profile}` first (or point RAGEN_OUTPUTS where it ran)"
        )
    verdicts = [_read_verdict(p, profile) for p in sorted((base / "verdicts").glob("*.json"))]
    here = metrics.device_name("cuda" if torch.cuda.is_available() else "cpu")
    lines = [
        f"# Replication report: profile `{profile}`",
        "",
        f"Trained on: {trained_on(base)}. Report written on: {here}, commit {runs.git_commit()}. "
        f"Total wall time of the notebooks: {sum(v.get('wall_s') or 0 for v in verdicts) / 60:.1f} min.",
        "",
    ]
    if profile == "smoke":
        lines += [
            "**Smoke profile: a tiny random model on CPU. This proves the pipeline runs end to end; "
            "its verdicts say nothing about the paper's findings.**",
            "",
        ]
    lines += [
        "| notebook | sub-claim | verdict | effect [95% CI] | why | power | design | figures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_name = {v["notebook"]: v for v in verdicts}
    for name in sorted(set(experiments.findings()) | set(by_name)):
        state, start = notebook_run(base / "notebooks" / f"{name}.ipynb")
        link = f"[notebooks/{name}.ipynb](notebooks/{name}.ipynb)"
        v = by_name.get(name)
        if v is None:
            why = {
                "failed": f"the notebook raised: see {link}",
                "unfinished": f"the notebook did not finish (killed, or still running): {link}",
                "finished": f"the notebook finished without writing a verdict: {link}",
                "not run": f"`make replicate NB={name[:2]} PROFILE={profile}` has not run",
            }[state]
            lines.append(f"| {name} | **headline** | **NO VERDICT** | | {why} | | | |")
            continue
        # An executed copy torn mid-write has no readable start: the verdict may predate that run,
        # and nothing says it does not, so it is marked like one that does.
        unknown = state in ("failed", "unfinished") and start is None
        stale = state in ("failed", "unfinished") and (unknown or v["written"] < start)
        status = f"**{v['status']}**"
        reason = v["reason"]
        if stale:
            status = f"**STALE {v['status']}**"
            last = "raised" if state == "failed" else "did not finish"
            when = (
                "perhaps from an earlier run (the executed copy is unreadable)"
                if unknown
                else "from an earlier run"
            )
            reason = f"{when}: the notebook's last run {last} ({link}); {reason}"
        figs = " ".join(f"[{Path(f).stem}](figures/{Path(f).name})" for f in v.get("figures", []))
        lines.append(
            f"| {name} | **headline**: {v['claim']} ({v.get('rule', 'old verdict file')}) | "
            f"{status} | | {reason} | | verdict of commit {v.get('commit', 'unknown')} | {figs} |"
        )
        for r in v.get("rows", []):  # a verdict written before rows existed has none
            eff = r["effect"]
            effect = (
                ""
                if eff is None or eff != eff
                else f"{eff:+.3g}"
                + ("" if r["ci"][0] != r["ci"][0] else f" [{r['ci'][0]:+.3g}, {r['ci'][1]:+.3g}]")
            )
            status = "PILOT (no verdict)" if r["status"] == PILOT else r["status"]
            status = f"stale {status}" if stale else status
            row = Row(**{**r, "ci": tuple(r["ci"])})
            d, fv = design(row), format_text(row)
            effect = f"{effect}; {fv}" if effect and fv else effect or fv
            lines.append(
                f"| {name} | {r['id']}: {r['claim']} | {status} | {effect} | {r['reason']} | "
                f"{r['power']} | {d} | |"
            )
    out = base / "REPORT.md"
    runs._atomic_write(out, "\n".join(lines) + "\n")
    return out


def _read_verdict(path: Path, profile: str) -> dict:
    """A notebook's verdict file, or a ValueError naming the file and the notebook to rerun (a
    torn file read as "Invalid control character at: line 1 column 49" and named neither)."""
    try:
        v = json.loads(path.read_text())
        if not isinstance(v, dict) or not isinstance(v.get("rows", []), list) or "notebook" not in v:
            raise ValueError("not a verdict (a mapping with notebook and a list of rows)")
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} does not read as a verdict ({e}): rerun its notebook, `make replicate "
            f"NB={path.stem[:2]} PROFILE={profile}`, which rewrites it, or move the file aside"
        ) from None
    return {**v, "written": path.stat().st_mtime}


def criteria(studies: list[tuple[Claim, dict, dict | None]]) -> str:
    """The criteria of a notebook's sub-claims, one line each (printed before any result)."""
    return "\n".join(
        f"- {c.criterion()}; a = {a}; b = {b if b is not None else '0 (one arm)'}" for c, a, b in studies
    )


def decide(
    df: pd.DataFrame,
    claim: str,
    studies: list[tuple[Claim, dict, dict | None]],
    primary: list[str],
    *,
    measured: dict | None = None,
    floor_ceiling="env",
) -> Verdict:
    """Judge every (Claim, arm a, arm b) and build the notebook's verdict (`df.attrs["finding"]`)."""
    rows = [judge(df, c, a, b, floor_ceiling=floor_ceiling) for c, a, b in studies]
    return Verdict(df.attrs.get("finding", "?"), claim, rows, primary, measured=measured or {})
