"""Where one training step's seconds go on this device: a few steps of one run's config, alone,
once per setting (decoding cache, micro-batch packing), optionally with one update profiled
(torch.profiler, top ops by device and host time).

    python scripts/step_profile.py CONFIG.yaml OUT_DIR [--steps 4] [--budget 150] [--profile]
                                   [--set KEY=VALUE ...]

Written for issue 18: the `quick` plan was sized at 0.23 s a step, and its first run measured about
10 s a step on an H200 that `gpu-check` was sharing. This times the same config with the GPU to
itself. Each setting's rows go to OUT_DIR/step_profile.json (and .md) as soon as it finishes, so a
lease that ends early keeps what finished. No warm-up, validation, checkpoints or samples: the
steps alone. With --profile the last step's update is profiled: on an H100 that made a 4.5 s update
take 108 s (115k kernel launches recorded), so it is off unless asked for. The medians leave out
step 0 (kernel selection, allocator growth) and, when profiled, the last step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ragen_lib import config, trainer

SETTINGS = {  # the config's own first; then the levers the H100's first profile pointed at
    "config's own": {},
    "static cache": {"rollout.kv_cache": "static"},
    # The update was host-bound (0.6 s of GPU work in a 4.5 s update, 115k kernel launches):
    # packing by shared prompt forwards the quick profile's 4 mini-batches of 16 rows in 6 packs,
    # without it in 4 (fewer launches, more tokens computed).
    "static cache, one pack per mini-batch": {"rollout.kv_cache": "static", "train.shared_prefix": "false"},
    "continuous batching, static cache": {"rollout.kv_cache": "static", "rollout.batching": "continuous"},
}
KEYS = ("time/rollout", "time/forward", "time/update", "time/step", "throughput/gen_tokens_per_s",
        "throughput/train_tokens_per_s", "policy/optimizer_steps", "rollout/answer_cut")  # fmt: skip


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds; no new setting starts after it")
    ap.add_argument("--profile", action="store_true", help="profile the last step's update")
    ap.add_argument("--set", nargs="*", default=[], help="dotted overrides for every setting")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base = [
        f"train.steps={args.steps}", "train.val_every=0", "train.warmup=none",
        "train.samples_every=0", *args.set,
    ]  # fmt: skip
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    result = {"config": args.config, "overrides": base, "device": device, "settings": {}}
    original = trainer._update
    for label, extra in SETTINGS.items():
        if time.perf_counter() - t0 > args.budget:
            print(f"[steps] {label}: skipped, past the budget", flush=True)
            continue
        cfg = config.load(args.config, [*base, *(f"{k}={v}" for k, v in extra.items())])
        if args.profile:
            trainer._update = profiled(original, args.steps, out / "step_profile_update.txt", label)
        ts = time.perf_counter()
        try:
            rows = trainer.train(cfg, run=None, progress=False)
        finally:
            trainer._update = original
        later = (rows[1:-1] if args.profile and len(rows) >= 3 else rows[1:]) or rows
        summary = {k: statistics.median(r[k] for r in later) for k in KEYS if k in later[0]}
        result["settings"][label] = {
            "overrides": extra,
            "wall_s": time.perf_counter() - ts,
            "median_of_middle_steps": summary,
            "steps": [{k: r.get(k) for k in KEYS} for r in rows],
        }
        print(f"[steps] {label}: " + ", ".join(f"{k} {v:.3g}" for k, v in summary.items()), flush=True)
        (out / "step_profile.json").write_text(json.dumps(result, indent=1))
        torch.cuda.empty_cache() if torch.cuda.is_available() else None


if __name__ == "__main__":
    main()
