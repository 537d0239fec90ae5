"""The effect's uncertainty: a fixed-seed two-level bootstrap (seeds, then each seed's episodes),
widened to the seeds' Student t interval (`t_quantile` written out: scipy is not a dependency);
the sign test; and whether a study has the seeds and episodes for the effect it claims.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ragen_lib.analysis.claims import LEVEL_SCORES, Claim, _is_rate
from ragen_lib.metrics import is_rate

#: Fixed RNG seed of every bootstrap, so a verdict is a function of the data alone.
BOOTSTRAP_SEED = 0
BOOTSTRAP_DRAWS = 2000
#: Fewer seeds an arm than this is under-powered, whatever the CI says (`underpowered`).
MIN_SEEDS = 3


def sign_test(k: int, n: int) -> float:
    """One-sided sign test: P(at least k of n seeds favour a | no effect). Ties are dropped by the
    caller. The smallest p with n seeds is 0.5^n: 3 seeds cannot go below 0.125, 5 reach 0.031."""
    if n == 0:
        return 1.0
    return float(sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n)


def bootstrap_ci(
    a: pd.DataFrame, b: pd.DataFrame, claim: Claim, *, paired: bool, draws: int = BOOTSTRAP_DRAWS
) -> tuple[float, float]:
    """95% CI of mean(a) − mean(b) (× direction): seeds resampled with replacement (pairs kept
    together when paired), then, for a success rate, each seed's episodes (Binomial(n, p)/n is a
    resample of n binary episodes with success rate p): a training rate's every point, on episodes
    of their own; a validation rate's states once, at the seed's (weighted) mean over its points,
    since every validation replays the same `val_size` states (as `underpowered` counts them:
    redrawn at every replay, 3 seeds' interval came out about √(late points) too narrow and
    decided an effect the states cannot resolve). Fixed RNG seed (BOOTSTRAP_SEED)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rate, replayed = _is_rate(claim), claim.metric.startswith("val/")

    def redraw(rows: pd.DataFrame, idx: np.ndarray) -> float:
        vals = []
        for i in idx:
            r = rows.iloc[i]
            if rate and len(r["points"]):
                n, p = int(r["n"]), np.clip(r["points"], 0.0, 1.0)
                if replayed:
                    drawn = rng.binomial(n, float(np.average(p, weights=r["weights"]))) / n
                else:
                    drawn = float(np.average(rng.binomial(n, p) / n, weights=r["weights"]))
                vals.append(drawn - float(r.get("offset", 0.0)))  # less random play (above_chance)
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


def underpowered(
    claim: Claim,
    n_seeds: int,
    points: pd.DataFrame | None = None,
    other: pd.DataFrame | None = None,
    paired: bool = True,
) -> str | None:
    """Why the study cannot decide `claim` at its declared MDE, or None. `points`, `other`: the two
    arms' seed scores (`seed_scores`); `other` None for a one-arm claim, or an arm taken to have
    as many episodes as `points`' (a difference of two rates, each p = 0.5). `paired`: the arms are
    compared seed by seed (`t_interval`'s paired differences, n − 1 degrees of freedom), else Welch
    (at most na + nb − 2)."""
    if n_seeds < MIN_SEEDS:
        return f"{n_seeds} seed(s) < {MIN_SEEDS}: no seed-to-seed spread to judge against"
    if claim.test == "sign" and 0.5**n_seeds >= claim.alpha:
        return f"a sign test over {n_seeds} seeds cannot reach p < {claim.alpha:g} (min p {0.5**n_seeds:.3g})"
    if claim.score in LEVEL_SCORES and is_rate(claim.metric) and points is not None and len(points):
        # Each validation replays the same val_size states, so a seed's late validations are n
        # episodes' worth of states, not n per point: states, not replays, set the CI's floor. A
        # peak is one point: its n episodes (it was checked on the seeds alone, and on 8 states a
        # clear-looking peak gap read REPRODUCED where the late score read under-powered).
        val = claim.metric.startswith("val/")

        def episodes(arm: pd.DataFrame) -> float:
            return float(sum((1 if val else max(len(r["points"]), 1)) * r["n"] for _, r in arm.iterrows()))

        # Each arm's own count: the arm with fewer episodes (8 validation states against 256) sets
        # the width, whichever of the two is arm a.
        one_arm = other is None or not len(other)
        ea = episodes(points)
        eb = ea if one_arm else episodes(other)
        # The width `effect_ci` will give where the seeds differ by their episodes' noise alone:
        # Student t over the seeds, as `t_interval`. With 1.96 in its place, 3 seeds x 128 states
        # passed for an MDE of 0.1 (0.071) where the t interval is about 0.155 wide: two equal
        # arms then read REPRODUCED non-inferior in under half of simulated studies.
        df = n_seeds - 1 if paired else len(points) + (n_seeds if one_arm else len(other)) - 2
        half = t_quantile(0.975, max(df, 1)) * math.sqrt(0.25 / max(ea, 1) + 0.25 / max(eb, 1))
        if half > claim.mde:
            counts = f"{ea:.0f} episodes per arm" if ea == eb else f"{ea:.0f} / {eb:.0f} episodes (arm a / b)"
            return (
                f"predicted 95% CI half-width {half:.3g} from {counts} over {n_seeds} seeds (t, {df:g} df) "
                f"> MDE {claim.mde:g}"
            )
    return None


def power_statement(claim: Claim, n_seeds: int, left_out: list[int] | None = None) -> str:
    """The power for the declared MDE of `n_seeds` compared seeds, in words (printed with every
    row); `left_out`: the design's seeds that were not compared (censored, never learned, unscored),
    so the line never counts seeds that the effect does not rest on; None: the row was decided
    before any comparison, and `n_seeds` is the design's."""
    reach = "can" if 0.5**n_seeds < claim.alpha else "cannot"
    # None: the design's seeds, before any comparison (a row decided earlier: no data, PILOT, …)
    compared = "" if left_out is None else " compared" + (f" (seeds {left_out} left out)" if left_out else "")
    return (
        f"power: MDE {claim.mde:g} declared; {n_seeds} seed(s){compared}, a sign test {reach} "
        f"reach p < {claim.alpha:g}"
    )
