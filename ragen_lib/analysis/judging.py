"""`judge`: one sub-claim becomes one `Row`.

How a row is decided, in this order (the first that applies wins):
1. PILOT when a run of either arm is not judged in this profile (`judged` column, profiles.yaml).
   INCONCLUSIVE "not trained" when the grid plans a run for either arm that is not stored
   (`missing`: `experiments.missing_runs`, which a replication with RAGEN_TRAIN=stored leaves, judging
   GPU-trained runs brought back one lease at a time): the arm would be scored on fewer seeds than
   its design, and the seeds present are not a random draw of the planned ones. The runs are named
   (seeds per arm); a pilot arm's row stays PILOT and names them too.
2. INCONCLUSIVE "no data" when an arm has no runs, or the metric (a lead's indicator too) was
   never logged; "censored" when a run of either arm did not finish (`done` false: stopped, or
   still running; its last steps are missing, so its score is not the design's); "unequal
   horizons" when a score that depends on how long a run trained (`HORIZON_SCORES`) would compare
   runs of different lengths, across the arms or within one; "different devices" when a time/ or
   memory/ claim's runs trained on more than one device (DONE's record: a run 07 shares with 01
   may have trained on another lease's GPU); "different weights" when the
   runs of both arms that share one model name recorded more than one model fingerprint (DONE's
   `model_fingerprint`: a folder written over by another fine-tune, another wheel, a hub snapshot
   that moved; runs stored before the record are left out of the count); "no seed recorded" when
   a run's config.yaml has no train.seed (every per-seed grouping would drop it silently); "runs per
   seed" when an arm's selector matches more than one run of a seed (they would be averaged into
   one score under one seed).
3. INCONCLUSIVE "mechanism did not act": the claim's manipulated mechanism was inert on each
   arm's runs together, or (once the seeds compared are known, step 5) in any one of them
   (`inactive_seeds` names them)
   (`clip`: arm a's clip fraction, both bounds, below 1%; `clip_high`: arm b's upper-bound clip
   fraction below 1%, the tokens a higher ε_high in arm a would let through; either: one optimizer
   step per batch, so the ratio is always 1; `kl`: arm b's KL reward, kl_coef · Σ|KL_t| per
   episode, below 1% of the spread of the trajectory rewards; `filter`: arm a's filter kept every
   episode, or its kept groups' reward std exceeded all groups' (bottom: fell below) on under half
   the steps of every stretch of 10 or more from the start: groups tied in std leave the choice to
   their order; `think`: arm a's reasoning (and arm b's, where it thinks too) averaged under one
   token a turn, where an empty `<think></think>` still passes the format check; `actions`, both
   arms: the smaller per-turn action limit dropped pieces on under 5% of its arm's turns and the
   larger limit's arm wrote no more actions a turn, on average, than the smaller allows, nor (the
   smaller limit at or under the env's default) past that default on 5% of its turns: 05's Table 3
   arms then played alike; `staleness`, both arms: the arm with the larger train.online_k ran its
   updates under twice as far from its rollouts' policy as the other, `policy/approx_kl`, or not at
   all: 05's Fig. 10 arms then trained on rollouts about as fresh).
4. INCONCLUSIVE "floor" / "ceiling": both arms' mean score within the MDE of the metric's
   `bound` (a claim other than a slope that names one: 06's reasoning length, bound 0) or its
   `ceiling` (06's consistency bonus, at most 0.2), or at
   most the MDE above the env's random-policy success (floor) or within the MDE of its expert
   success (ceiling), from `baselines.reference_success`: each arm's own, within the action
   budget its runs played under and on their validation states (`arm_reference`; Table 3's arms
   play 5 to 35 actions). Not the floor where exactly one arm sank more than the MDE below random
   play: it lost what random play keeps (a collapse: the paper's Sokoban StarPO-S ≈0.21 vs PPO
   ≈0, random play 0.19), which the other arm did not, scores below the other and more than the
   MDE apart; the row is judged and says so. Both sunk: the floor.
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
   0.5^n >= alpha; or, for a success or format-valid rate's level score (late, auc, peak, max,
   median), a predicted 95% CI half-width from episode sampling alone (p = 0.5), with the t
   quantile of the interval step 7 draws (paired: n − 1 df, so 3 seeds need about 310 validation
   states for an MDE of 0.1, 4 seeds 128), wider than the MDE (validation states counted once a
   seed, however often the late validations replay them; each arm its own count, so the arm with
   fewer episodes sets the width whichever is arm a).
   INCONCLUSIVE "no spread" (scores other than collapse and lead): every seed of both arms (of a
   one-arm claim: arm a, and the 0 it is tested against) scored exactly the same value, as a metric
   pinned at a bound does (reasoning length 0 in both arms): the seeds' t interval would be zero
   wide and call the tie a decision. For a rate redrawn over its episodes (whose CI always has
   width), the same where the arms are paired and every seed's a − b is exactly 0 (superiority
   claims: a tie is what a non-inferiority claim claims): both arms start a seed's episodes from
   the same states with the same sampling seeds, so they played alike.
7. The effect: mean over seeds of (a − b) × direction, paired by seed where both arms ran it; its
   95% CI from a two-level bootstrap (seeds with replacement, then each seed's episodes: a success
   rate from n binary episodes is redrawn as Binomial(n, rate) / n, which is exactly resampling
   those episodes; a validation rate once a seed, at the mean of its points, since every
   validation replays the same states), with a fixed RNG seed, widened to the seeds' Student t
   interval (paired, else Welch) wherever that is wider: a percentile bootstrap cannot reach
   beyond the range of 3-5 seeds, and alone it reproduced a null effect in 17 of 200 simulated
   3-seed studies (nominal 2.5%: 5; with the t interval, 6; tests/test_analysis.py, `-k
   null_effect`). REPRODUCED when the
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

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ragen_lib.analysis.claims import (
    HORIZON_SCORES,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    PILOT,
    REPRODUCED,
    UNRECORDED_MODEL,
    Claim,
    Row,
    _fmt,
    _is_rate,
    _pair,
)
from ragen_lib.analysis.curves import early_mean
from ragen_lib.analysis.mechanisms import arm_reference, inactive, inactive_seeds
from ragen_lib.analysis.scores import _horizon, _horizons, seed_scores
from ragen_lib.analysis.stats import censored_ci, effect_ci, power_statement, sign_test, underpowered
from ragen_lib.metrics import format_rate_of

#: A censored run learned when its success peak (5-step training average, or validation) rose this
#: far above the env's random play: the max of ~30 validations of 128 random-level states lies
#: about 0.09 above it (2 standard errors at p = 0.5), the max of 150 steps' 5-step averages of 64
#: episodes about 0.06, so a run under this never left random play.
LEARN_MARGIN = 0.1
#: Metrics of the hardware, not of the policy: compared only between runs of one device.
COST_PREFIXES = ("time/", "memory/")


def _nan_meaning(metric: str) -> str:
    """A metric's definition, which says when it is NaN (metrics.METRICS: "... (NaN: none did)")."""
    from ragen_lib.metrics import METRICS

    return f"its definition: {METRICS[metric].doc}" if metric in METRICS else "nothing was measured"


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


def _not_trained(missing: list[dict] | None, arms) -> tuple[list[str], bool]:
    """(each arm's runs among `missing` that its selector matches, as 'arm a seeds [2, 3]'; whether
    any of them is judged). `arms`: (name, selector) pairs."""
    if not missing:
        return [], False
    frame = pd.DataFrame(missing)
    derived = sorted({col for _, where in arms for col in where if col not in frame})
    if derived:  # a label the notebook derived from the runs' data without `experiments.label`: a
        # missing run does not carry it, so whether it is one of the arms' cannot be told. Said, not
        # guessed; and counted as judged, lest a judged row whose own runs are all stored read PILOT
        # because a pilot run elsewhere in the grid is not.
        n = frame["run_id"].nunique()
        return [f"{n} of the grid's runs, which the arms' selector {derived} cannot tell apart"], True
    out, judged = [], False
    for name, where in arms:
        part = _select(frame, where)
        if part.empty:
            continue
        seeds = sorted({int(s) for s in part["cfg.train.seed"]})
        out.append(f"arm {name} seed {seeds[0]}" if len(seeds) == 1 else f"arm {name} seeds {seeds}")
        judged |= bool(part["judged"].any())
    return out, judged


def _mixed_weights(part: pd.DataFrame) -> list[str]:
    """Each model name under which the runs of `part` recorded more than one fingerprint (DONE's
    `model_fingerprint`; NaN, not recorded, is not counted): 'NAME (fp1…, fp2…)'."""
    if "model_fingerprint" not in part or "cfg.model.name" not in part:
        return []
    recorded = pd.DataFrame(  # by position: the two arms' rows may share index labels
        {
            "name": part["cfg.model.name"].fillna(UNRECORDED_MODEL).astype(str).to_numpy(),
            "fp": part["model_fingerprint"].to_numpy(),
        }
    ).dropna()
    prints = recorded.groupby("name", sort=True)["fp"].unique()
    return [
        f"{name} ({', '.join(f'{fp[:12]}…' for fp in sorted(map(str, fps)))})"
        for name, fps in prints.items()
        if len(fps) > 1
    ]


def _unseeded(arm: str, part: pd.DataFrame) -> list[str]:
    """'arm a: run id, id' for the runs of `part` that record no seed (every per-seed grouping would
    leave them out without a word)."""
    if "cfg.train.seed" not in part:
        return [f"arm {arm}: every run"] if len(part) else []
    gone = part.loc[part["cfg.train.seed"].isna()]
    if gone.empty:
        return []
    ids = sorted(map(str, gone["run_id"].unique())) if "run_id" in gone else [f"{len(gone)} rows"]
    return [f"arm {arm}: run {', '.join(ids)}"]


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


def _seeds(part: pd.DataFrame) -> int:
    return part["cfg.train.seed"].nunique() if len(part) else 0


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
        # a run without one is named by `judge` (`_unseeded`)
        "seeds": sorted(int(s) for s in part["cfg.train.seed"].dropna().unique())
        if "cfg.train.seed" in part
        else [],
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


def judge(
    df: pd.DataFrame,
    claim: Claim,
    a: dict,
    b: dict | None,
    *,
    floor_ceiling: tuple[float, float] | None | str = "env",
    missing: list[dict] | None = None,
) -> Row:
    """Judge `claim` on arm a (rows matching `a`, column → value or list) against arm b.

    floor_ceiling: (floor, ceiling) of the success score; "env" (default) looks them up for
    `claim.env` with `reference`; None skips the check. `missing`: the grid's runs not stored, as
    `experiments.missing_runs` describes them. See the module docstring for the order."""
    A = _select(df, a)
    B = A if b is None else _select(df, b)  # one arm: its score against 0
    d = _design(A, B, claim.metric)
    row = Row(claim.id, claim.text, INCONCLUSIVE, "", criterion=claim.criterion(), paper=claim.paper, **d)
    row.power = power_statement(claim, min(_seeds(A), _seeds(B)))
    pilot = "pilot scale in this profile: figures and numbers, no verdict"
    absent, absent_judged = _not_trained(missing, (("a", a),) if b is None else (("a", a), ("b", b)))
    if absent:
        gap = f"not trained: {'; '.join(absent)} (the grid plans them; only stored runs were judged)"
        arms_judged = all(part["judged"].all() for part in (A, B) if "judged" in part and len(part))
        if absent_judged and arms_judged:
            return replace(row, reason=gap)
        return replace(row, status=PILOT, reason=f"{pilot}; {gap}")
    if "judged" in df and len(A) and len(B) and not (A["judged"].all() and B["judged"].all()):
        return replace(row, status=PILOT, reason=pilot)
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
    # one arm's runs of different lengths (its seeds averaged into one score) as much as two arms'
    if claim.score in HORIZON_SCORES and (isinstance(ha, str) or (b is not None and ha != hb)):
        return replace(
            row,
            reason=f"unequal horizons: arm a's runs trained {ha} steps"
            + ("" if b is None else f", arm b's {hb}")
            + f": a {claim.score} score compares different lengths of training",
        )
    if b is not None and claim.metric.startswith(COST_PREFIXES) and "device" in df:
        # Runs shared with other findings train on whichever lease ran them, an H100 or an H200
        da, db = (_recorded(part, "device") for part in (A, B))
        if len(set(da) | set(db)) > 1:
            return replace(
                row,
                reason=f"different devices: arm a trained on {', '.join(da)}, arm b on {', '.join(db)}: "
                f"{claim.metric} measured on different devices does not compare",
            )
    if b is not None and claim.metric.startswith(COST_PREFIXES) and "runs_per_device" in df:
        # Runs packed several to a device (a profile's runs_per_device) share its time and memory:
        # against runs that trained alone, the packing is measured, not the algorithm
        sa_, sb_ = (_recorded(part, "runs_per_device") for part in (A, B))
        if len(set(sa_) | set(sb_)) > 1:
            return replace(
                row,
                reason=f"runs shared their device differently: arm a's trained {' or '.join(sa_)} at a "
                f"time, arm b's {' or '.join(sb_)} (runs_per_device): {claim.metric} does not compare",
            )
    # A name's runs on two sets of weights are two models' runs, whichever claim compares them
    mixed = _mixed_weights(pd.concat([A, B]))
    if mixed:
        return replace(
            row, reason=f"runs trained on different weights under one model name: {'; '.join(mixed)}"
        )
    unseeded = [d for name, part in arms for d in _unseeded(name, part)]
    if unseeded:
        return replace(
            row,
            reason=f"no seed recorded: {'; '.join(unseeded)} (train.seed is missing or null in its "
            "config.yaml): a run without its seed is neither paired nor counted",
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
    found = inactive(A, B, claim.mechanism)
    if found:
        arm, why = found
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
    fc_name = _reference_where(claim.env or "this task", fa, fb)
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
    # the seeds the effect rests on: censored, never-learned and unscored ones are gone by now
    left_out = sorted(
        {int(x) for part, kept in ((A, sa), (B, sb)) for x in set(part["cfg.train.seed"]) - set(kept["seed"])}
    )
    row.power = power_statement(claim, min(len(sa), len(sb)), left_out)
    row.a, row.b = float(sa["score"].mean()), float(sb["score"].mean())
    row.effect = (row.a - row.b) * claim.direction
    row.format_valid = _late_format(A, None if b is None else B, claim.metric)
    found = inactive_seeds(A, B, claim.mechanism, set(sa["seed"]) | set(sb["seed"]))
    if found:  # acted on each arm's runs together, but not in every seed compared
        arm, why = found
        return replace(
            row,
            reason=f"mechanism did not act ({claim.mechanism}, arm {arm}): {why}{never_learned}{unscored}",
        )
    floor_note = ""
    if claim.score not in ("collapse", "lead") and b is not None and fa is not None:
        # An arm more than the MDE below random play lost what random play keeps (answers out of
        # format, or a losing habit): beside one that did not, the floor hides no difference. The
        # paper's Sokoban rows are that case: StarPO-S ≈0.21 vs collapsed PPO ≈0, random play 0.19.
        # Only where exactly one arm sank, it is the lower (with floors of their own, an arm can
        # sink below its higher floor and still score above the other: its lead is then its bigger
        # action budget, not a collapse), and the arms are more than the MDE apart (two arms at 0,
        # one under a random play that keeps less than the MDE, differ in nothing).
        # smoke's 2-turn WebShop (search, click, buy is 3): the expert cannot, and neither arm did
        if max(fa[1], fb[1], row.a, row.b) <= claim.mde:
            return replace(
                row,
                reason=f"unsolvable: the expert's success ({_pair(fa[1], fb[1])}) on {fc_name} is within "
                f"the MDE {claim.mde:g} of 0, so no arm can show a difference (raise the action budget)",
            )
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
    for level, side in ((claim.bound, "floor"), (claim.ceiling, "ceiling")):
        # A level the metric cannot pass (0 for a length, 0.2 for the consistency bonus): two arms
        # within the MDE of it both sit at the metric's floor (ceiling), where no difference larger
        # than the MDE fits between them (the rule of the env's floor above; a clear but smaller
        # difference there is not the claim's).
        if level is None or claim.score == "slope" or b is None:
            continue
        if abs(row.a - level) <= claim.mde and abs(row.b - level) <= claim.mde:
            return replace(
                row,
                reason=f"{side}: both arms ({_fmt(row.a)}, {_fmt(row.b)}) within the MDE {claim.mde:g} of "
                f"{claim.metric}'s {'bound' if side == 'floor' else 'ceiling'} {level:g}",
            )
    if claim.above_chance:
        if fa is None:
            return replace(row, reason="no data: above_chance needs the env's random play (floor_ceiling)")
        # from here on each arm's score is what it reached beyond its own random play
        sa = sa.assign(score=sa["score"] - fa[0], offset=fa[0])
        if b is not None:  # one arm: what it added beyond random play, against the 0 that stands in for b
            sb = sb.assign(score=sb["score"] - fb[0], offset=fb[0])
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
    short = underpowered(claim, min(len(sa), len(sb)), sa, None if b is None else sb, paired=paired)
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
    tied = paired and b is not None and (sa["score"].to_numpy() == sb["score"].to_numpy()).all()
    if claim.score == "collapse" and tied and claim.kind != "noninferiority":
        # Two arms whose runs collapsed at the same step in every seed (or held in both) played
        # alike up to their collapse: a tie, not a measured 0 that rules out a delay (a CI of [0, 0]
        # read NOT REPRODUCED). A lead of 0 in every seed stays a measured result (below).
        return replace(
            row,
            reason=f"no spread: in every seed both arms collapsed at the same step, or neither did "
            f"(mean step {_fmt(row.a)}): the arms played alike up to their collapse, a tie that decides "
            f"nothing{note}",
        )
    if _is_rate(claim) and tied and claim.kind != "noninferiority":
        # Redrawn over episodes, a rate's CI always has width, and two identical arms read NOT
        # REPRODUCED. But a seed's episodes start from the same states with the same sampling
        # seeds in both arms: a − b exactly 0 in every seed is two arms that played alike (the
        # manipulation changed nothing measured), a tie that decides no superiority, as the rule
        # above. (A tie is what non-inferiority claims: a slightly better arm a reads REPRODUCED.)
        return replace(
            row,
            reason=f"no spread: every seed's difference a − b is exactly 0 ({claim.score} {claim.metric}, "
            f"both arms' mean {_fmt(row.a)}): the arms played alike on every seed's episodes, a tie that "
            f"decides nothing{note}",
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


def _recorded(part: pd.DataFrame, column: str) -> list[str]:
    """The values of a DONE record (`runs.load`'s `device`, `runs_per_device`) over an arm's runs, as
    sorted text: "not recorded" for a run stored before the record, a count without its ".0"."""
    return sorted(
        {
            "not recorded" if pd.isna(x) else str(int(x)) if isinstance(x, float) else str(x)
            for x in part[column]
        }
    )


def _reference_where(env: str, fa, fb) -> str:
    """`env`, and the validation states its floor and ceiling were measured on where they say so
    (`arm_reference`'s `Reference`; a tuple given by hand does not): "sokoban (its first 128
    validation states)", or "(... a 128, b 512 ...)" where the arms' differ."""
    states = [", ".join(map(str, getattr(f, "states", ()))) for f in (fa, fb)]
    if not all(states):
        return env
    n = states[0] if states[0] == states[1] else f"a {states[0]}, b {states[1]}"
    return f"{env} (its first {n} validation states)"


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
        # lo <= −margin <= hi: "straddles" misread a CI whose low end sits exactly on the margin
        return INCONCLUSIVE, (
            f"CI [{lo:+.3g}, {hi:+.3g}]: its low end does not clear −margin {-claim.margin:g}"
        )
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
