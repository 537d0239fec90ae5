"""The run store: atomic appends, torn tails, corrupt files, resume, SIGKILL."""

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

from ragen_lib import config, runs
from ragen_lib.runs import CorruptRunError, Run

CFG = config.from_dict({"algo": {"name": "starpo-ppo"}, "env": {"name": "bandit"}, "train": {"seed": 0}})


def seed(s: int) -> config.Config:
    return config.from_dict(CFG.to_dict(), {"train.seed": s})


def test_run_dir_is_slug_and_config_hash():
    assert runs.run_dir("out", "f", CFG).name == f"starpo-ppo_bandit_s0-{CFG.hash()}"
    assert config.dict_hash(CFG.to_dict()) == CFG.hash() != seed(1).hash()
    # a preset used with another estimator says so in its folder name
    other = config.from_dict({}, {"algo.name": "starpo-s", "algo.advantage": "grpo", "algo.critic": False})
    assert runs.run_dir("out", "f", other).name.startswith("starpo-s+grpo_bandit_s0-")
    slashed = config.from_dict({}, {"env.name": "bandit", "model.name": "Qwen/Qwen2.5-0.5B"})
    assert "/" not in runs.run_dir("out", "f", slashed).name


def test_config_conflict(tmp_path):
    Run(tmp_path / "r", CFG)
    with pytest.raises(ValueError, match="another run"):
        Run(tmp_path / "r", seed(1))
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        Run(tmp_path / "elsewhere")


def test_log_round_trip_and_no_duplicates(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(
        0,
        {
            "a": np.float32(0.5),
            "b": torch.tensor(3),
            "c": float("nan"),
            "d": np.float64("inf"),
            "e": np.int64(7),
            "f": np.bool_(True),
            "g": np.arange(2),
        },
    )
    run.log(1, {"a": 1.0})
    rows = Run(tmp_path / "r", CFG).metrics()
    assert rows[0]["a"] == 0.5 and rows[0]["b"] == 3 and math.isnan(rows[0]["c"]) and rows[0]["d"] == math.inf
    assert type(rows[0]["e"]) is int and rows[0]["f"] is True and rows[0]["g"] == [0, 1]
    with pytest.raises(ValueError, match="already logged"):
        run.log(1, {"a": 2.0})
    with pytest.raises(ValueError, match="already logged"):
        Run(tmp_path / "r", CFG).log(0, {"a": 2.0})  # a fresh handle knows the file's last step


def test_config_yaml_round_trip_with_tuples(tmp_path):
    cfg = config.from_dict({}, {"train.betas": [0.9, 0.99], "env.eval_envs": ["bandit-rev"]})
    run = Run(tmp_path / "r", cfg)
    assert Run(tmp_path / "r", cfg).path == run.path  # the saved YAML (lists) hashes as the tuples did
    assert config.load(run.path / "config.yaml") == cfg


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


def test_load_skips_running_when_asked_and_leaves_live_files_alone(tmp_path):
    done = Run(runs.run_dir(tmp_path, "f", CFG), CFG)
    done.log(0, {"a": 1})
    done.mark_done({"final": 1})
    cfg2 = seed(5)
    live = Run(runs.run_dir(tmp_path, "f", cfg2), cfg2)
    live.log(0, {"a": 2})
    with open(live.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 1, "a"')  # a write in flight in a training process
    before = (live.path / "metrics.jsonl").read_bytes()
    df = runs.load(tmp_path)
    assert sorted(df["cfg.train.seed"]) == [0, 5] and set(df["finding"]) == {"f"}
    assert (live.path / "metrics.jsonl").read_bytes() == before  # a reader never truncates
    assert list(runs.load(tmp_path, include_running=False)["cfg.train.seed"]) == [0]


# The writer under test. It runs in a forked child of one helper process (spawned with
# sys.executable), so torch is imported once rather than once per kill: that keeps the test fast.
SCRIPT = """
import os, sys, time, traceback
import torch  # noqa: F401  (imported once, before the forks)
from ragen_lib.config import Config
from ragen_lib.runs import Run

def attempt(path):
    run = Run(path, Config())
    step, state = run.resume()
    assert state is None or state["s"] == step
    start = 0 if step is None else step + 1
    print("ready", os.getpid(), flush=True)
    for s in range(start, 20):
        time.sleep(0.01)
        run.log(s, {"x": s * 2, "pad": "y" * 2000})
        run.log_samples(s, [{"t": s * 3}, {"t": s * 3 + 1}])
        if s % 2 == 1:
            run.save_checkpoint(s, {"s": s})
    run.mark_done({"steps": 20})

for _ in sys.stdin:  # one line: one attempt, in a fresh process
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            attempt(sys.argv[1])
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print("exit", status, flush=True)
"""


def test_sigkill_at_random_moments_loses_nothing(tmp_path):
    """SIGKILL the writer (no cleanup at all) at random moments of its loop, resume each time."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    path = tmp_path / "r"
    rng = np.random.default_rng(0)
    helper = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(path)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def attempt(kill_after: float | None) -> int:
        helper.stdin.write("go\n")
        helper.stdin.flush()
        ready, pid = helper.stdout.readline().split()  # past resume(): inside the loop now
        assert ready == "ready"
        if kill_after is not None:
            time.sleep(kill_after)
            os.kill(int(pid), signal.SIGKILL)
        word, status = helper.stdout.readline().split()
        assert word == "exit"
        return int(status)

    try:
        reached = []
        for _ in range(5):
            status = attempt(float(rng.uniform(0.0, 0.12)))
            assert status in (signal.SIGKILL, 0)  # killed, or finished just before the kill
            reached.append(Run(path).metrics()[-1]["step"] if (path / "metrics.jsonl").exists() else -1)
        assert not (path / runs.DONE).exists() and any(0 <= r < 19 for r in reached), reached  # mid-run kills
        assert attempt(None) == 0  # the last attempt runs to the end
    finally:
        helper.stdin.close()
        helper.wait(timeout=10)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == list(range(20))
    assert all(r["x"] == r["step"] * 2 and r["pad"] == "y" * 2000 for r in rows)
    samples = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["t"]) for r in samples] == [(s, s * 3 + k) for s in range(20) for k in (0, 1)]
    assert [p.name for p in (path / "ckpt").iterdir()] == ["step_000019.pt"]
    assert Run(path).done


def test_plot_cli_draws_the_runs_and_summarises_first_and_last(tmp_path, capsys):
    from ragen_lib.__main__ import main

    run = Run(runs.run_dir(tmp_path, "adhoc", CFG), CFG)
    for s, succ in enumerate([0.2, 0.3, 0.4, 0.6, 0.7, 0.9]):
        run.log(s, {"rollout/success": succ, "rollout/format_valid": 1.0})
    run.mark_done({"commit": "abc1234", "device": "cpu"})
    assert main(["plot", str(tmp_path), "--metrics", "rollout/success"]) == 0
    out = capsys.readouterr().out
    assert "trained at commit abc1234 on cpu" in out
    assert "rollout/success: step 0 0.200 → step 5 0.900; mean of first/last third 0.250 / 0.800" in out
    assert (tmp_path / "adhoc.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="no runs"):
        main(["plot", str(tmp_path), "--finding", "other"])
