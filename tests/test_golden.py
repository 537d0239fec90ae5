"""Golden metrics: 3-step tiny-random runs of every algorithm on Bandit and Sokoban, recorded before
the architecture refactor (issue 11) and reproduced since.

A change that alters training behaviour on purpose regenerates the file in the same commit and says
why in its message:

    .venv/bin/python -m tests.test_golden --regenerate

Timings, throughput and memory are machine facts and are left out. Floats are compared to a relative
1e-6 (float reductions may round differently on another CPU); everything else exactly. The metrics in
ROUNDING_METRICS measure float rounding itself, so they are compared to an absolute tolerance.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from ragen_lib import config, trainer

GOLDEN = Path(__file__).parent / "golden" / "metrics.json"
ALGOS = ("starpo-ppo", "starpo-grpo", "starpo-s", "apo")
ENVS = ("bandit", "sokoban")
BASE = {
    "model": {"name": "tiny-random", "device": "cpu"},
    "rollout": {"max_new_tokens": 12},
    "algo": {"apo_prompt_pool": 8, "apo_ref_samples": 2},
    "train": {
        "steps": 3,
        "groups": 2,
        "group_size": 2,
        "mini_batch_size": 2,
        "micro_batch_size": 2,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "val_every": 2,
        "val_size": 2,
        "samples_every": 0,
    },
}
MACHINE = ("time/", "throughput/", "memory/")
#: New metric name for each name the golden file was recorded with, when a change renames metrics
#: without changing behaviour (None: a key that is no longer logged).
RENAMED: dict[str, str | None] = {}


#: Runs with rewards that vary: the tiny model never answers in format by itself, so these learn the
#: no-think format first (100 BC steps on random valid arms) and then train on varied rewards.
WARM = {
    "rollout.enable_think": False,
    "rollout.max_new_tokens": 24,
    "train.warmup": "format",
    "train.warmup_steps": 100,
    "train.warmup_lr": 3e-3,
    "train.warmup_episodes": 16,
}
CASES = [(a, e, False) for a in ALGOS for e in ENVS] + [(a, "bandit", True) for a in ALGOS]


def cfg_for(algo: str, env: str, warm: bool = False) -> config.Config:
    return config.from_dict(BASE, {"algo.name": algo, "env.name": env, **(WARM if warm else {})})


def key(algo: str, env: str, warm: bool) -> str:
    return f"{algo}/{env}" + ("/warm" if warm else "")


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(MACHINE)} for r in rows]


def regenerate() -> None:
    out = {key(*c): comparable(trainer.train(cfg_for(*c), progress=False)) for c in CASES}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


ROUNDING_METRICS = {"rollout/logprob_gap": 1e-6}
"""Metric -> absolute tolerance. The gap between the sampler's and the update's log-probs is float32
rounding (about 3e-7 here) and changes with the CPU's thread count (OMP_NUM_THREADS=1 gives 2.8e-7
where two threads give 3.0e-7); a decoding bug shows as 1e-3 or more."""


def _same(a, b, name: str = "") -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=ROUNDING_METRICS.get(name, 1e-9))
    return a == b


@pytest.mark.parametrize("case", CASES, ids=[key(*c) for c in CASES])
def test_training_reproduces_the_golden_metrics(case):
    golden = json.loads(GOLDEN.read_text())[key(*case)]
    rows = comparable(trainer.train(cfg_for(*case), progress=False))
    assert len(rows) == len(golden)
    for got, want in zip(rows, golden):
        want = {RENAMED.get(k, k): v for k, v in want.items() if RENAMED.get(k, k) is not None}
        assert set(want) <= set(got), f"metrics missing: {sorted(set(want) - set(got))}"
        bad = {k: (got[k], v) for k, v in want.items() if not _same(got[k], v, k)}
        assert not bad, f"step {want['step']}: (now, golden) differ for {bad}"


if __name__ == "__main__" and "--regenerate" in sys.argv:
    regenerate()
    print(f"wrote {GOLDEN}")
