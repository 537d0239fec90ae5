"""The run store: atomic appends, torn tails, corrupt files, resume, grids, SIGKILL."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from ragen_lib import runs
from ragen_lib.runs import CorruptRunError, Run

CFG = {"algo": {"name": "starpo-ppo", "clip_high": 0.2}, "env": {"name": "bandit"}, "train": {"seed": 0}}


def test_hash_stable_and_sensitive():
    a = {"x": 1, "y": {"b": 2, "a": 1}}
    assert runs.config_hash(a) == runs.config_hash({"y": {"a": 1, "b": 2}, "x": 1})
    assert runs.config_hash(a) != runs.config_hash({**a, "x": 2})
    assert runs.run_dir("out", "f", CFG).name.startswith("starpo-ppo_bandit_s0-")


def test_config_conflict(tmp_path):
    Run(tmp_path / "r", CFG)
    with pytest.raises(ValueError, match="another run"):
        Run(tmp_path / "r", {**CFG, "train": {"seed": 1}})


def test_log_round_trip_and_no_duplicates(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(0, {"a": np.float32(0.5), "b": torch.tensor(3), "c": float("nan")})
    run.log(1, {"a": 1.0})
    rows = Run(tmp_path / "r", CFG).metrics()
    assert rows[0]["a"] == 0.5 and rows[0]["b"] == 3 and math.isnan(rows[0]["c"])
    with pytest.raises(ValueError, match="already logged"):
        run.log(1, {"a": 2.0})


def test_torn_tail_dropped_and_repaired(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(0, {"a": 1})
    with open(run.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 1, "a"')
    assert [r["step"] for r in run.metrics()] == [0]
    assert (run.path / "metrics.jsonl").read_bytes().endswith(b"}\n")
    run2 = Run(tmp_path / "r", CFG)
    run2.log(1, {"a": 2})
    assert [r["step"] for r in run2.metrics()] == [0, 1]


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    run = Run(tmp_path / "r", CFG)
    (run.path / "metrics.jsonl").write_text('{"step": 0}\nGARBAGE\n{"step": 2}\n')
    with pytest.raises(CorruptRunError, match=r"metrics.jsonl, line 2"):
        run.metrics()


def test_checkpoints_keep_newest_and_corrupt_is_named(tmp_path):
    run = Run(tmp_path / "r", CFG)
    assert run.load_checkpoint() == (None, None)
    run.save_checkpoint(1, {"w": torch.ones(2)})
    run.save_checkpoint(3, {"w": torch.zeros(2)})
    assert [p.name for p in (run.path / "ckpt").iterdir()] == ["step_000003.pt"]
    step, state = run.load_checkpoint()
    assert step == 3 and torch.equal(state["w"], torch.zeros(2))
    (run.path / "ckpt" / "step_000003.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CorruptRunError, match="step_000003.pt.*Delete it"):
        run.load_checkpoint()


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    run = Run(tmp_path / "r", CFG)
    for s in range(5):
        run.log(s, {"a": s})
        run.log_samples(s, [{"t": "x"}])
        if s == 2:
            run.save_checkpoint(s, {})
    step, _ = run.resume()
    assert step == 2 and [r["step"] for r in run.metrics()] == [0, 1, 2]
    assert [r["step"] for r in run.samples()] == [0, 1, 2]
    run.log(3, {"a": 3})  # continuing is allowed again


def test_expand_grid_product_list_and_errors():
    grid = runs.expand_grid(CFG, {"algo.name": ["a", "b"], "train.seed": [0, 1]})
    assert [(c["algo"]["name"], c["train"]["seed"]) for c in grid] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert CFG["algo"]["name"] == "starpo-ppo"  # base untouched
    listed = runs.expand_grid(CFG, [{"algo.name": "apo"}, {"algo.clip_high": 0.28}])
    assert listed[0]["algo"]["name"] == "apo" and listed[1]["algo"]["clip_high"] == 0.28
    with pytest.raises(KeyError, match="valid keys there: clip_high, name"):
        runs.expand_grid(CFG, {"algo.clip_hihg": [1]})


def test_load_dataframe_and_run_grid_reuse(tmp_path):
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg["train"]["seed"])
        for s in range(3):
            run.log(s, {"success": s / 10 + cfg["train"]["seed"]})
        run.mark_done()

    cfgs = runs.expand_grid(CFG, {"train.seed": [0, 1]})
    runs.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    runs.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    assert calls == [0, 1]  # the second call reused both
    df = runs.load(tmp_path, "f")
    assert len(df) == 6 and set(df["cfg.train.seed"]) == {0, 1} and df["done"].all()
    assert {"run_id", "finding", "step", "success", "cfg.algo.clip_high"} <= set(df.columns)
    assert runs.load(tmp_path, "nothing").empty


SCRIPT = """
import sys, time
from ragen_lib.runs import Run
run = Run(sys.argv[1], {"k": 1})
step, state = run.resume()
start = 0 if step is None else step + 1
for s in range(start, 20):
    time.sleep(0.01)
    run.log(s, {"x": s * 2, "pad": "y" * 2000})
    if s % 2 == 1:
        run.save_checkpoint(s, {"s": s})
run.mark_done()
"""


def test_sigkill_at_random_moments_loses_nothing(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    path = tmp_path / "r"
    rng = np.random.default_rng(0)
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-c", SCRIPT, str(path)], env=env)
        time.sleep(float(rng.uniform(0.3, 1.0)))  # interpreter start-up plus a few steps
        p.send_signal(signal.SIGKILL)
        p.wait()
    subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, check=True)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == list(range(20))
    assert all(r["x"] == r["step"] * 2 for r in rows)
