"""`seed_scores`: one score per seed of an arm, as its claim scores the run, with the episodes
and updates behind each score (what the bootstrap redraws, and each point's weight).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ragen_lib.analysis.claims import SCORES, Claim
from ragen_lib.analysis.curves import (
    COLLAPSE_PERSIST,
    COLLAPSE_WINDOW,
    collapse,
    drop_step,
    late_tail,
    slope,
    unreadable_drop,
)


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
        elif v.index.max() < (late_from := int(late_tail(part["step"].drop_duplicates()).iloc[0])):
            # A metric left unmeasured late (a length where no tags matched, distinct-2 of under
            # DISTINCT_AT bigrams where the reasoning shrank) would score its early points as the
            # whole run: a late mean of its early points, an auc or peak of a curve cut short (two
            # arms on one rising curve, one cut at a third, differed by 0.3), a slope over the
            # early steps alone. Not scored, whatever the score.
            score = float("nan")
            why = (
                f"no {claim.metric} on the last third of its steps (from step {late_from}; its last at "
                f"{int(v.index.max())}): the earlier ones say nothing of how the run ended"
            )
        elif claim.score == "late":
            # the last third of the metric's points that fall in the last third of the run's steps
            tail = late_tail(v)
            points = tail[tail.index >= late_from].to_numpy(float)
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
