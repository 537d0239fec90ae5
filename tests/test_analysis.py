"""Verdict arithmetic and grid expansion, against values worked out by hand."""

import json
import math

import pandas as pd
import pytest

from ragen_lib import analysis


def s(values, start=0):
    return pd.Series(values, index=range(start, start + len(values)), dtype=float)


def test_collapse_step_is_first_step_after_peak_below_half():
    assert analysis.collapse_step(s([0.1, 0.4, 0.8, 0.5, 0.39, 0.2])) == 4  # 0.39 < 0.4 = 0.8 / 2
    assert analysis.collapse_step(s([0.1, 0.4, 0.8, 0.5, 0.41])) is None  # never below half
    assert analysis.collapse_step(s([0.0, 0.04, 0.0])) is None  # peak under 0.05: nothing learned


def test_drop_step_and_lead():
    # max over the first third (steps 0-1) is 2.0; the first value below 1.0 is at step 4
    std = s([2.0, 1.5, 1.2, 1.1, 0.9, 0.5])
    assert analysis.drop_step(std) == 4
    assert analysis.lead(std, collapse=7) == 3
    assert analysis.lead(std, collapse=None) is None
    assert analysis.lead(s([1.0, 1.0, 1.0, 1.0]), collapse=3) is None  # the indicator never dropped


def test_late_early_mean_and_slope():
    v = s([1, 2, 3, 4, 5, 6])
    assert analysis.late_mean(v) == 5.5 and analysis.early_mean(v) == 1.5  # last / first 2 of 6
    assert analysis.slope(s([3.0, 1.0, -1.0, -3.0], start=10)) == pytest.approx(-2.0)
    assert math.isnan(analysis.slope(s([1.0, 2.0])))
    assert math.isnan(analysis.late_mean(s([])))


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
    assert analysis.success_metric(df) == "rollout/success"
    assert analysis.success_metric(df.assign(**{"val/success": 0.3})) == "val/success"


def test_early_late_reasoning_prefers_a_seed_logged_at_both_steps():
    rows = [
        {"run_id": "r", "step": 0, "seed": 5, "reward": 0.0, "thinks": ["first A"]},
        {"run_id": "r", "step": 0, "seed": 7, "reward": 1.0, "thinks": ["first B"]},
        {"run_id": "r", "step": 9, "seed": 9, "reward": 0.0, "thinks": [None]},
        {"run_id": "r", "step": 9, "seed": 7, "reward": 1.0, "thinks": ["late B"]},
    ]
    t = analysis.early_late_reasoning(pd.DataFrame(rows))
    assert list(t["seed"]) == [7, 7] and list(t["reasoning"]) == ["first B", "late B"]
    assert list(t["when"]) == ["early", "late"]


def test_verdict_write_and_report_go_under_ragen_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    v = analysis.Verdict(
        "09_x", "a claim", analysis.NOT_REPRODUCED, {"k": 0.25, "extra": 3}, {"k": 0.5}, "why"
    )
    out = v.write("smoke", wall_s=12.0)
    assert out == tmp_path / "smoke" / "verdicts" / "09_x.json"
    data = json.loads(out.read_text())
    assert data["status"] == "NOT REPRODUCED" and data["wall_s"] == 12.0
    assert "k" in str(v) and "measured 0.25   paper 0.5" in str(v)
    report = analysis.report("smoke").read_text()
    assert "| 09_x | a claim | **NOT REPRODUCED** | k: 0.25 vs 0.5 |" in report
    assert "Smoke profile" in report
