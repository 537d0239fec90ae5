"""What every section shares: the workloads (`SIZES`, `WORK_SIZE`), a report's `Row`, the
timer, and the host-memory trim the sections that spawn processes call first."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

# Workload per device. cuda is the paper's scale (P=8 prompts × N=16 samples, 400 tokens a turn,
# 5 turns); cpu and quick only prove that every measurement runs.
SIZES = {
    "cuda": dict(
        groups=8,
        group_size=16,
        gen_tokens=128,
        attention_rows=128,
        attention_columns=1024,
        max_new_tokens=400,
        max_turns=5,
        micro_batch_size=16,
        update_rows=128,
        update_max_len=2048,
        repeats=3,
        trl_steps=5,
        trl_new_tokens=(100, 400),
        trl_setups=("dynamic cache", "static cache", "static cache + compile", "paged"),
        pool_runs=(1, 2, 4),
        pool_steps=6,
        head_positions=9000,  # the quick profile's 32-row micro-batch (loss mask "paper")
    ),
    "cpu": dict(
        groups=2,
        group_size=4,
        gen_tokens=32,
        attention_rows=64,
        attention_columns=1024,
        max_new_tokens=32,
        max_turns=2,
        micro_batch_size=4,
        update_rows=8,
        update_max_len=256,
        repeats=1,
        trl_steps=5,
        trl_new_tokens=(16, 32),
        trl_setups=("dynamic cache", "static cache"),
        pool_runs=(1, 2),
        pool_steps=2,
        head_positions=9000,  # as cuda: the quick profile's scale
    ),
    "quick": dict(
        groups=2,
        group_size=2,
        gen_tokens=8,
        attention_rows=8,
        attention_columns=256,
        max_new_tokens=8,
        max_turns=1,
        micro_batch_size=2,
        update_rows=4,
        update_max_len=64,
        repeats=1,
        trl_steps=1,
        trl_new_tokens=(8,),
        trl_setups=("dynamic cache",),
        pool_runs=(1, 2),
        pool_steps=1,
        head_positions=4160,  # 2,080 with gradient: two chunks of HEAD_CHUNK, so checkpointing runs
    ),
}
WORK_SIZE = dict(groups=2, group_size=4, max_new_tokens=64, max_turns=2, micro_batch_size=4)
"""The work section's step: issue #17's real-model CPU row (2×4 episodes, 2 turns, 64 new tokens)."""


@dataclasses.dataclass
class Row:
    what: str
    value: float | None
    unit: str
    target: str = ""
    vs_naive: float | None = None  # speed-up over the naive baseline of the same row group
    note: str = ""
    before: float | None = None  # the same row of the `--before` run (an older commit, same machine)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(fn, device: str, repeats: int = 1) -> float:
    """Best wall time of `repeats` calls: the minimum is the figure least disturbed by other jobs."""
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def trim_host_memory() -> None:
    """Free unreachable objects and return the freed heap to the system (glibc keeps it otherwise)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
