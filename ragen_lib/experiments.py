"""A notebook's one call: expand its grid for a profile, train what is missing, load the metrics.

    df = experiments.run_finding("params/03_uncertainty_filtering.yaml", profile="smoke")

Grid files (`params/NN_<finding>.yaml`) hold `finding`, `base` (dotted overrides for every run),
and `grid`: a mapping of dotted keys to value lists (cartesian product) or a list of override
dicts; `extra` adds more variants. Keys without a dot in a variant are labels (e.g. `study`): they
become DataFrame columns, not config. Order of application: defaults ← base ← profile ← variant,
so a variant's own values always win.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import yaml

from ragen_lib import config, runs

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ("smoke", "quick", "paper")


def default_profile() -> str:
    """quick when CUDA is present, smoke otherwise (RAGEN_PROFILE overrides)."""
    if os.environ.get("RAGEN_PROFILE"):
        return os.environ["RAGEN_PROFILE"]
    import torch

    return "quick" if torch.cuda.is_available() else "smoke"


def load_profile(profile: str, path: Path | None = None) -> dict:
    data = yaml.safe_load((path or ROOT / "params" / "profiles.yaml").read_text())
    if profile not in data:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(data)}")
    prof = data[profile]
    valid = ("seeds", "overrides", "runs_per_device", "max_episodes_per_step")
    unknown = set(prof) - set(valid)
    if unknown:
        raise ValueError(f"profile {profile!r} has unknown key(s) {sorted(unknown)}; valid: {', '.join(valid)}")
    return {"seeds": list(prof.get("seeds", [0])), "overrides": dict(prof.get("overrides") or {}),
            "runs_per_device": int(prof.get("runs_per_device", 1)),
            "max_episodes_per_step": prof.get("max_episodes_per_step")}


def cap_batch(overrides: dict, cap: int | None) -> dict:
    """Shrink P (train.groups) and N (train.group_size) by the same factor when a variant asks for
    more than `cap` episodes per step: the smoke profile keeps a P×N study's shape (more states vs
    more samples) at a size a CPU can run. N stays >= 2 so groups still have a spread."""
    P, N = overrides.get("train.groups"), overrides.get("train.group_size")
    if cap is None or P is None or N is None or P * N <= cap:
        return overrides
    s = math.sqrt(cap / (P * N))
    return {**overrides, "train.groups": max(1, round(P * s)), "train.group_size": max(2, round(N * s))}


def worker_slots(runs_per_device: int) -> list[dict]:
    """One environment per grid worker: `runs_per_device` runs on each visible GPU, or on CPU that
    many runs sharing the cores (one thread pool each, so they do not oversubscribe them)."""
    import torch

    if runs_per_device < 1:
        raise ValueError(f"runs_per_device must be >= 1, got {runs_per_device}")
    if torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        return [{"CUDA_VISIBLE_DEVICES": i} for i in ids for _ in range(runs_per_device)]
    threads = max(1, (os.cpu_count() or 1) // runs_per_device)
    return [{"OMP_NUM_THREADS": str(threads)} for _ in range(runs_per_device)]


def _train(cfg_dict: dict, run) -> None:
    from ragen_lib import trainer

    trainer.train(config.from_dict(cfg_dict), run, progress=False)


def variants(grid_file: str | Path, profile: str, *, seeds: list[int] | None = None,
             overrides: dict | None = None) -> tuple[str, list[tuple[config.Config, dict]]]:
    """(finding, [(Config, labels)]) for every grid point × seed of the profile."""
    spec = yaml.safe_load(Path(grid_file).read_text())
    unknown = set(spec) - {"finding", "base", "grid", "extra"}
    if unknown:
        raise ValueError(f"{grid_file}: unknown key(s) {sorted(unknown)}; valid: finding, base, grid, extra")
    prof = load_profile(profile)
    grid = spec.get("grid") or [{}]
    points = _points(grid) + list(spec.get("extra") or [])
    out = []
    for point in points:
        labels = {k: v for k, v in point.items() if "." not in k}
        dotted = {k: v for k, v in point.items() if "." in k}
        for seed in seeds if seeds is not None else prof["seeds"]:
            merged = {**(spec.get("base") or {}), **prof["overrides"], **(overrides or {}), **dotted,
                      "train.seed": seed}
            merged = cap_batch(merged, prof["max_episodes_per_step"])
            out.append((config.from_dict({}, merged), labels))
    return spec["finding"], out


def _points(grid) -> list[dict]:
    if isinstance(grid, list):
        return [dict(p) for p in grid]
    import itertools

    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def run_finding(grid_file: str | Path, profile: str | None = None, *, seeds: list[int] | None = None,
                overrides: dict | None = None, root: str | Path | None = None, progress: bool = True):
    """Train every missing run of the grid (finished ones are reused) and return their metrics.

    Returns a DataFrame with one row per run × step: metrics, `cfg.*` columns, the variant's
    labels, and `profile`.
    """
    profile = profile or default_profile()
    finding, points = variants(grid_file, profile, seeds=seeds, overrides=overrides)
    root = Path(root) if root else runs.output_root(profile)
    cfgs = [c.to_dict() for c, _ in points]
    t0 = time.perf_counter()
    slots = worker_slots(load_profile(profile)["runs_per_device"])
    runs.run_grid(root, finding, cfgs, _train, progress=progress, slots=slots)
    df = runs.load(root, finding)
    wanted = {runs.run_dir(root, finding, d).name: labels for d, (_, labels) in zip(cfgs, points)}
    df = df[df["run_id"].isin(wanted)].copy()  # other grids' leftovers in the folder are ignored
    for key in {k for labels in wanted.values() for k in labels}:
        df[key] = df["run_id"].map(lambda r, k=key: wanted[r].get(k))
    df["profile"] = profile
    df.attrs.update(profile=profile, finding=finding, wall_s=time.perf_counter() - t0, root=str(root))
    return df


def samples(df):
    """The trajectory samples of the runs in `df` (a `run_finding` result), with its labels."""
    s = runs.load_samples(df.attrs["root"], df.attrs["finding"], set(df["run_id"]))
    keys = df.drop_duplicates("run_id").set_index("run_id")
    for col in [c for c in df.columns if c.startswith("cfg.") or c in ("study",)]:
        s[col] = s["run_id"].map(keys[col])
    return s
