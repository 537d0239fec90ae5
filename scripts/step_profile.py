"""Where one training step's seconds go on this device: a few steps of one run's config, alone,
once per setting (decoding cache, batching, micro-batch packing), optionally k copies of it trained
at once on the device first (`runs_per_device`), and optionally one update under torch.profiler.

    python scripts/step_profile.py SOURCE OUT_DIR [--steps 4] [--budget 150] [--only A,B]
                                   [--pool K] [--profile] [--set KEY=VALUE ...]

SOURCE: a run's config.yaml, or FINDING@PROFILE (e.g. 01_instability@quick): that finding's first
judged run (seed 0) under that profile, as `make replicate-all` would train it.

Written for issue 18: the `quick` plan was sized at 0.23 s a step, and its first run took 10-13 s
a step on an idle H100 (rollout 5 s with the dynamic cache; update 4-5 s, of which the GPU was busy
0.6 s); with the static cache and one pack per micro-batch, 2.45 s (before the LM head ran in
chunks; outputs/gpu-evidence/2026-11-27-h100). This times the levers with the GPU to itself.
Everything goes to OUT_DIR/step_profile.json as soon as it is measured, so a lease that ends early
keeps what finished. No warm-up, validation or samples: the steps alone. The medians leave out
step 0 (kernel selection, allocator growth).

--pool K: the same config with seeds 0..K-1, trained through `workers.run_grid` K at once (K
spawned workers on the device, as `runs_per_device: K` would), then one at a time (in this process,
as `runs_per_device: 1` does), before the settings, while this process holds no GPU memory: steps
per second of all runs, model loads included, and for the K workers their process starts too, as a
grid pays them (so the comparison leans against pooling). A K that runs out of memory is recorded
as failed, and the rest goes on.
--profile: the last step's update under torch.profiler (tables by device and host time). On an H100
that made a 4.5 s update take 108 s, so it is off unless asked for, and that step is left out of
the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ragen_lib import config, experiments, trainer
from ragen_lib.bench.pool import grid_rate
from ragen_lib.workers import free_memory

# Each names all three fields, so a profile's own values do not leak into a label. Measured on an
# H100 (2026-11-27, quick's Bandit run): static + one pack 2.45 s a step, static + shared prefix
# 7.6 s, continuous + shared prefix 6.7 s, dynamic + shared prefix 10.8 s.
SETTINGS = {
    # The quick profile's own since then: the shared prefix's extra forwards and packs cost the
    # host-bound update 4x (1.24 s against 4.97 s) for the compute it saves.
    "static-one-pack": {
        "rollout.kv_cache": "static",
        "rollout.batching": "turn",
        "train.shared_prefix": False,
    },
    "static-shared-prefix": {
        "rollout.kv_cache": "static",
        "rollout.batching": "turn",
        "train.shared_prefix": True,
    },
    "continuous-one-pack": {
        "rollout.kv_cache": "static",
        "rollout.batching": "continuous",
        "train.shared_prefix": False,
    },
    "dynamic-one-pack": {
        "rollout.kv_cache": "dynamic",
        "rollout.batching": "turn",
        "train.shared_prefix": False,
    },
}
KEYS = ("time/rollout", "time/forward", "time/update", "time/step", "throughput/gen_tokens_per_s",
        "throughput/train_tokens_per_s", "policy/optimizer_steps", "rollout/answer_cut")  # fmt: skip


def source_config(source: str) -> tuple[config.Config, str]:
    """The Config SOURCE names (module docstring) and a line saying which run it is."""
    if "@" not in source:
        return config.load(source), source
    finding, profile = source.split("@", 1)
    _, runs = experiments.variants(finding, profile)
    judged = [(c, labels) for c, labels in runs if labels.get("judged")] or runs
    cfg, labels = judged[0]
    return (
        cfg,
        f"{finding} under {profile}: {cfg.algo.name} on {cfg.env.name}, seed {cfg.train.seed}, {labels}",
    )


def with_overrides(cfg: config.Config, overrides: dict) -> config.Config:
    return config.from_dict(cfg.to_dict(), overrides)


def profiled(fn, when: int, out: Path, label: str):
    """`fn` with its `when`-th call (1-based) run under torch.profiler; tables written to `out`."""
    calls = [0]

    def wrapper(*a, **k):
        calls[0] += 1
        if calls[0] != when:
            return fn(*a, **k)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as p:
            r = fn(*a, **k)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        avg = p.key_averages()
        by = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
        text = f"## {label}: one update, by {by}\n\n{avg.table(sort_by=by, row_limit=30)}\n\n"
        text += f"## {label}: one update, by self_cpu_time_total\n\n"
        text += avg.table(sort_by="self_cpu_time_total", row_limit=30) + "\n"
        with out.open("a") as f:
            f.write(text)
        return r

    return wrapper


def time_setting(cfg: config.Config, label: str, args, out: Path) -> dict:
    original = trainer._update
    if args.profile:
        trainer._update = profiled(original, args.steps, out / "step_profile_update.txt", label)
    ts = time.perf_counter()
    try:
        rows = trainer.train(cfg, run=None, progress=False)
    finally:
        trainer._update = original
    later = (rows[1:-1] if args.profile and len(rows) >= 3 else rows[1:]) or rows
    summary = {k: statistics.median(r[k] for r in later) for k in KEYS if k in later[0]}
    print(f"[steps] {label}: " + ", ".join(f"{k} {v:.3g}" for k, v in summary.items()), flush=True)
    return {
        "wall_s": time.perf_counter() - ts,
        "median_after_step_0": summary,
        "steps": [{k: r.get(k) for k in KEYS} for r in rows],
    }


def pool_rate(cfg: config.Config, k: int, workers: int) -> dict:
    """Steps per second of k runs (seeds 0..k-1) trained by `workers` slots on this device."""
    wall, rate = grid_rate([with_overrides(cfg, {"train.seed": seed}) for seed in range(k)], workers)
    print(f"[steps] pool: {k} runs by {workers} worker(s): {wall:.1f} s, {rate:.3g} steps/s", flush=True)
    return {"runs": k, "workers": workers, "wall_s": wall, "steps_per_s": rate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="a run's config.yaml, or FINDING@PROFILE")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds; nothing new starts after it")
    ap.add_argument("--only", default="", help="comma-separated setting names (default: all)")
    ap.add_argument("--pool", type=int, default=0, help="also time K runs at once against one at a time")
    ap.add_argument("--profile", action="store_true", help="profile the last step's update")
    ap.add_argument("--set", nargs="*", default=[], help="dotted overrides for every setting")
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SETTINGS)
    if unknown:
        ap.error(f"unknown setting(s) {sorted(unknown)}; choose from: {'; '.join(SETTINGS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        cfg, which = source_config(args.source)
    except (ValueError, FileNotFoundError) as e:  # a profile or finding misspelt, a config not there
        ap.error(f"source {args.source!r}: {e}")
    base = {"train.steps": args.steps, "train.val_every": 0, "train.warmup": "none", "train.samples_every": 0}
    cfg = config.from_dict(with_overrides(cfg, base).to_dict(), args.set)  # --set last: it wins
    if args.set:  # e.g. env.name=sokoban: the line names the run that is timed
        which += f"; with --set {' '.join(args.set)}"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    result = {
        "source": which,
        "overrides": {**base, "--set": args.set},
        "device": device,
        "settings": {},
        "pool": [],
    }
    print(f"[steps] {which}; {device}", flush=True)

    def save():
        (out / "step_profile.json").write_text(json.dumps(result, indent=1, default=str))

    # The pool first, k workers before one: on an H100 (2026-11-27) k = 4 spawned workers ran out
    # of memory beside this process, which held 40 GB of cached blocks after the in-process runs.
    # The update is host-bound, so several runs on one GPU is also the larger lever to measure.
    for workers in (args.pool, 1) if args.pool > 1 else ():
        if time.perf_counter() - t0 > args.budget:
            print(f"[steps] pool, {workers} worker(s): skipped, past the budget", flush=True)
            continue
        try:
            result["pool"].append(pool_rate(cfg, args.pool, workers))
        except RuntimeError as e:  # a run out of memory fails the grid: keep it as a finding
            print(f"[steps] pool: {args.pool} runs by {workers} worker(s) failed: {e}", flush=True)
            result["pool"].append({"runs": args.pool, "workers": workers, "failed": str(e)[:500]})
        save()
    for label, extra in SETTINGS.items():
        if only and label not in only:
            continue
        if time.perf_counter() - t0 > args.budget:
            print(f"[steps] {label}: skipped, past the budget", flush=True)
            continue
        result["settings"][label] = {
            "overrides": extra,
            **time_setting(with_overrides(cfg, extra), label, args, out),
        }
        save()
        # What the last setting held (model, optimizer, decoder pool; a reference cycle from the
        # first model load can keep them) is freed before the next one's peak memory is measured.
        free_memory()
    save()


if __name__ == "__main__":
    main()
