"""Section `pool`: several runs per device (a profile's `runs_per_device`), trained as a grid
trains them, for each k."""

from __future__ import annotations

import os
import tempfile
import time

import torch

from ragen_lib import models
from ragen_lib.bench.common import Row, trim_host_memory
from ragen_lib.bench.training import train_config


def measure_runs_per_device(name: str, device: str, size: dict) -> list[Row]:
    """The same max(pool_runs) training runs (Sokoban, this size, `pool_steps` steps, seeds 0…),
    trained as a grid with `runs_per_device: k` trains them, for each k of `pool_runs` (`grid_rate`:
    k = 1 in this process, more in spawned workers): runs' steps per second over all of them, model
    loads included. The k with the highest rate is what a profile's `runs_per_device` should say
    for this device; on a GPU, whether CUDA MPS was running is noted (without it the runs' kernels
    time-share the GPU instead of running side by side)."""
    n = max(size["pool_runs"])
    cfgs = [
        train_config(name, device, size, steps=size["pool_steps"], extra={"train": {"seed": seed}})
        for seed in range(n)
    ]
    shape = f"{n} runs × {size['pool_steps']} steps (Sokoban {size['groups']}×{size['group_size']})"
    mps = f"; CUDA MPS {'on' if mps_running() else 'off'}" if device.startswith("cuda") else ""
    rows, base = [], None
    for k in size["pool_runs"]:
        wall, rate = grid_rate(cfgs, k)
        base = base or rate
        note = f"{shape}, wall {wall:.1f} s{mps}"
        rows.append(
            Row(f"runs per device {k}: steps/s of all runs", rate, "steps/s", vs_naive=rate / base, note=note)
        )
    return rows


def grid_rate(cfgs: list, runs_per_device: int) -> tuple[float, float]:
    """Wall seconds, and steps per second of all runs, of `cfgs` trained through
    `workers.run_grid` (in a scratch folder) with `runs_per_device` worker slots per device, as a
    grid with that setting trains them: one slot trains in this process, two or more in that many
    spawned workers whose process starts and imports count, as a grid pays them (the comparison
    leans against pooling). Model loads count in both.

    On CPU every k gets the whole machine's cores: the k slots split them, and the one slot's
    share (all of them) is set on this process for the run, which may run under fewer (the full
    CPU bench runs under OMP_NUM_THREADS=1; k = 1 would otherwise get half of k = 2's cores)."""
    from ragen_lib import workers

    slots = workers.worker_slots(runs_per_device)
    threads = torch.get_num_threads()
    # Earlier sections, and an earlier k = 1 call, grow this process's heap, which sits beside the
    # k >= 2 workers (beside two 8.5 GB CPU workers, a 24 GiB machine ran out of memory): give it
    # back before every grid.
    trim_host_memory()
    # A fresh host converts a GGUF on its first load (once, then cached): do it before the clock,
    # so whichever k is timed first does not pay it (on an H100, 2026-11-27, both workers of the
    # first pool converted it at once). tiny-random takes its tokenizer from the embedded model.
    for name in {c.model.name for c in cfgs}:
        models.resolve(models.EMBEDDED if name == models.TINY_RANDOM else name)
    try:
        if len(slots) == 1 and "OMP_NUM_THREADS" in slots[0]:
            torch.set_num_threads(int(slots[0]["OMP_NUM_THREADS"]))
        with tempfile.TemporaryDirectory() as root:
            t0 = time.perf_counter()
            workers.run_grid(root, f"pool-{runs_per_device}", cfgs, progress=False, slots=slots)
            wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return wall, sum(c.train.steps for c in cfgs) / wall


def mps_running() -> bool:
    """Whether a CUDA MPS control daemon runs for this user (its pipe directory exists)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe, "control"))
