"""Data parallel: the CLI under `accelerate launch` with two CPU processes (gloo) on `tiny-random`.

Each rank plays half of the step's groups. We check that the run finishes, that metrics.jsonl has
one line per step (rank 0 alone writes), that both ranks end with bit-identical weights, that the
ranks together played exactly the single-process initial states, and, with greedy decoding (so
the rollouts do not depend on how episodes are split into sampling streams), that the step
metrics, gradient norm included, match a single-process run of the same config.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_lib import __main__ as cli
from ragen_lib import config, seeds, trainer

# Runs inside each launched process: the CLI, with spies on the model and the rollout seeds.
DRIVER = """
import hashlib, json, os, sys
from ragen_lib import __main__ as cli, runs, trainer

out, argv = sys.argv[1], sys.argv[2:]
seen = {"seeds": []}
real_load, real_collect = trainer.models.load, trainer.collect

def load(*a, **k):
    seen["model"], tok = real_load(*a, **k)
    return seen["model"], tok

def collect(model, tok, env, seeds, *a, **k):
    seen["seeds"].append(list(seeds))
    return real_collect(model, tok, env, seeds, *a, **k)

trainer.models.load, trainer.collect = load, collect
if os.environ.get("STANDS_ELSEWHERE") and os.environ["RANK"] != "0":  # this rank reads the run otherwise
    runs.stands = lambda *a, **k: os.environ["STANDS_ELSEWHERE"] == "yes"
cli.main(argv)
params = (p.detach().numpy().tobytes() for p in seen["model"].parameters()) if "model" in seen else ()
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"seeds": seen["seeds"], "params": hashlib.sha256(b"".join(params)).hexdigest()}, f)
"""

TINY = {
    "model": {"name": "tiny-random", "device": "cpu"},
    "rollout": {"max_new_tokens": 12},
    "train": {
        "steps": 2,
        "groups": 4,
        "group_size": 2,
        "mini_batch_size": 4,
        "micro_batch_size": 2,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "val_every": 0,
        "samples_every": 1,
        "checkpoint_every": 1,
    },
}

# Wall-clock measurements, and the ratio's spread within each micro-batch (whose split differs
# between 1 and 2 processes): not comparable across process counts. The losses, clip fractions and
# approx KL are each mini-batch's, summed over its micro-batches and ranks: compared (they were
# plain means over micro-batches, 1.5x one process's on two).
NOT_COMPARABLE = ("time/", "throughput/", "memory/", "policy/ratio_std")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, cfg: config.Config, timeout=600, **env) -> tuple[list[dict], list[dict]]:
    """Train `cfg` with the CLI on two processes; returns (metrics.jsonl rows, per-rank spy records).
    `env`: more environment for the processes."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    cfg_path = tmp_path / "c.yaml"
    config.save(cfg, cfg_path)
    (tmp_path / "driver.py").write_text(DRIVER)
    # --multi_gpu selects accelerate's torchrun launcher, which also runs CPU-only processes
    # (accelerate's --cpu path starts one process unless an MPI hostfile is given).
    cmd = [
        accelerate,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        str(tmp_path / "driver.py"),
        str(tmp_path),
        "run",
        str(cfg_path),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **env}
    # its own session, so that a hang kills every rank, not the launcher alone (hung ranks held
    # the CPU for the process group's 2 h timeout)
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    [run_dir] = [p.parent for p in (tmp_path / "out").rglob("config.yaml")]
    assert (run_dir / "DONE").exists()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    return metrics, ranks


def _single(cfg: config.Config, monkeypatch) -> tuple[list[dict], list[list[int]]]:
    seeds, real = [], trainer.collect

    def spy(model, tok, env, s, *a, **k):
        seeds.append(list(s))
        return real(model, tok, env, s, *a, **k)

    monkeypatch.setattr(trainer, "collect", spy)
    return trainer.train(cfg, progress=False), seeds


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,env,over",
    [
        ("starpo-grpo", "sokoban", {}),
        # Greedy, so both process counts play the same episodes; keep 3 of 4 groups: rank 0 keeps
        # both of its groups, rank 1 one of its two (a per-rank top-k would keep 2 + 2). tiny-random
        # earns the same reward (-0.1) everywhere, so with gamma 1 the whitened advantages would be
        # 0 up to rounding noise; gamma 0.9 makes them vary along the sequence, a real gradient.
        # A KL reward, so that its size (reward/kl_penalty, a mean over every rank's rows) and the
        # returns it enters are compared too.
        (
            "starpo-s",
            "bandit",
            {"rollout.temperature": 0.0, "algo.filter_keep": 0.75, "algo.gamma": 0.9, "algo.kl_coef": 1e-3},
        ),
        # The paper profile's update (RAGEN/verl): the first in-order mini-batch of 4 holds rank 0's
        # 4 kept rows and none of rank 1's, which forwarded an empty micro-batch and crashed; cut per
        # rank, the micro-batch weights summed past 1 (a grad norm 1.5x one process's).
        (
            "starpo-s",
            "bandit",
            {
                "rollout.temperature": 0.0,
                "algo.filter_keep": 0.75,
                "algo.gamma": 0.9,
                "algo.kl_coef": 1e-3,
                "train.loss_agg": "micro-batch-mean",
                "train.minibatch_order": "in-order",
            },  # fmt: skip
        ),
    ],
    ids=["grpo-sokoban", "starpo-s-token-mean", "starpo-s-micro-batch-mean-in-order"],
)
def test_two_processes_match_one(tmp_path, monkeypatch, algo, env, over):
    cfg = config.from_dict(TINY, {"algo.name": algo, "env.name": env, **over})
    metrics, ranks = _launch(tmp_path, cfg)

    assert [m["step"] for m in metrics] == [0, 1]  # one line per step: only rank 0 logs
    assert not list((tmp_path / "out").rglob("step_*.pt"))  # a finished run keeps no checkpoint
    assert ranks[0]["params"] == ranks[1]["params"]  # gradients summed: the replicas never drift

    single, single_seeds = _single(cfg, monkeypatch)
    assert single_seeds == [seeds.train_seeds(cfg, s) for s in (0, 1)]
    # Each rank played its half of the single-process groups, in order.
    assert [a + b for a, b in zip(ranks[0]["seeds"], ranks[1]["seeds"])] == single_seeds
    assert all(
        len(a) == len(b) == cfg.train.groups // 2 for a, b in zip(ranks[0]["seeds"], ranks[1]["seeds"])
    )

    if cfg.rollout.temperature == 0:
        assert metrics[0]["rollout/kept"] == single[0]["rollout/kept"] == 6  # the top-k is global
        assert metrics[1]["reward/kl_penalty"] > 0  # compared with one process's below
        for dp, sp in zip(metrics, single):
            for k, v in sp.items():
                if k.startswith(NOT_COMPARABLE) or not isinstance(v, float):
                    continue
                assert dp[k] == pytest.approx(v, rel=1e-4, abs=1e-6, nan_ok=True), (dp["step"], k)


@pytest.mark.slow
@pytest.mark.parametrize("elsewhere", ["yes", "no"])
def test_rank_zero_decides_whether_the_run_trains(tmp_path, elsewhere):
    """Rank 0 alone opens the run and decides; the others follow its word, even where they would
    read the run otherwise. Each rank deciding for itself, a rank that trained waited two hours in
    `init_process_group` for one that had left. `yes`: rank 1 reads the new run as finished (rank 0
    trains it); `no`: rank 1 reads the finished run as one to train (rank 0 reuses it)."""
    cfg = config.from_dict(TINY, {"train.steps": 1})
    if elsewhere == "no":  # the run is finished first, by one process
        config.save(cfg, tmp_path / "first.yaml")
        assert cli.main(["run", str(tmp_path / "first.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    metrics, ranks = _launch(tmp_path, cfg, timeout=300, STANDS_ELSEWHERE=elsewhere)  # a hang: 2 h
    assert [m["step"] for m in metrics] == [0]
    played = [len(r["seeds"]) for r in ranks]  # the steps each rank played
    assert played == ([1, 1] if elsewhere == "yes" else [0, 0])
    assert ranks[0]["params"] == ranks[1]["params"]
