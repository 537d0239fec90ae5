"""One run's curve read as numbers, the same way in every score, figure and verdict.

`late_mean` / `early_mean` (a third of the logged points, `LATE`), `slope`, `collapse` (issue 16's
definition over 5-step averages, held for 5 steps, beyond the episodes' noise) and a lead
indicator's `drop_step`. Pure functions of a Series; nothing here knows about arms or seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ragen_lib.metrics import natural_key

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


def late_table(df: pd.DataFrame, metric: str | list[str], by: str | list[str]) -> pd.DataFrame:
    """One row per combination of `by`: the late mean of each `metric` (seeds averaged per step
    first), a column `late <metric>` each, in the figures' legend order (numbers inside labels by
    value: "top 25%" before "top 100%")."""
    by = [by] if isinstance(by, str) else list(by)
    metrics = [metric] if isinstance(metric, str) else list(metric)
    rows = []
    parts = [(k if isinstance(k, tuple) else (k,), part) for k, part in df.groupby(by, sort=False)]
    for key, part in sorted(parts, key=lambda kp: tuple(map(natural_key, kp[0]))):
        late = {f"late {m}": late_mean(series(part, m)) for m in metrics}
        rows.append({**dict(zip(by, key)), **late})
    return pd.DataFrame(rows)


def add_train_time(df: pd.DataFrame) -> None:
    """Set, in place, the derived `time/` metrics 07 compares (`metrics.METRICS`): `time/train_step`,
    rollout + forward + update (no validation, no V*), and `time/train_total`, that plus A*-PO's stage
    1 and V* refreshes, `time/v_star`, on the steps that logged them; `time/v_star` itself is 0 on a
    frame no A*-PO run logged it in. The trainer logs the parts: a derived sum is not a second record
    to keep in step."""
    df["time/train_step"] = df["time/rollout"] + df["time/forward"] + df["time/update"]
    if "time/v_star" not in df:
        df["time/v_star"] = 0.0
    df["time/train_total"] = df["time/train_step"] + df["time/v_star"].fillna(0.0)


def cost_table(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per (env, `by`) (07: per variant) of a frame `add_train_time` ran on: seeds, late
    success (seeds averaged per step first), median training seconds a step, stage-1 seconds and
    total training seconds per run (means over seeds), and the peak GPU memory of any run (NaN on
    CPU, where it is not measured)."""
    metric = success_metric(df)
    rows = []
    for (env, arm), part in df.groupby(["cfg.env.name", by]):
        n_seeds = part["cfg.train.seed"].nunique()
        peak = part["memory/peak_gb"]
        rows.append(
            {
                "env": env,
                by: arm,
                "seeds": n_seeds,
                "late success": late_mean(series(part, metric)),
                "s/step": float(part["time/train_step"].median()),
                "stage-1 s": float(part["time/v_star"].sum() / n_seeds),
                "total s": float(part.groupby("cfg.train.seed")["time/train_total"].sum().mean()),
                "peak GB": float(peak.max()) if peak.notna().any() else float("nan"),
            }
        )
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
    initial state (seed) logged at both when there is one, so templates show side by side; else
    each step's first sample. `same_state` says which: training draws fresh states every step, so
    a shared one is luck, and a table that said "the same state" of two states misled."""
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
                    "same_state": bool(common) and first != last,  # one step logged: nothing to compare
                    "reasoning": (think or "(no <think> parsed)")[:width],
                }
            )
    return pd.DataFrame(rows)


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
