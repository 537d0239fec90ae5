"""A notebook's one call: expand its grid for a profile, train what is missing, load the metrics.

    df = experiments.run_finding("03_uncertainty_filtering", profile="smoke")

A finding has one name, the stem of its grid file `params/<name>.yaml`: the notebook's file name,
its run folder `runs/<name>/`, its verdict and its figures' prefix are all that string.
Grid files hold `base` (dotted overrides for every run) and `grid`: a mapping of dotted keys to
value lists (cartesian product) or a list of override dicts; `extra` adds more variants. Keys
without a dot in a variant are labels (e.g. `study`): they become DataFrame columns, not config.
Order of application: defaults ← base ← profile ← variant, so a variant's own values always win.
A variant with `profiles: [paper]` runs only in those profiles.

The grid's runs train in worker processes (`run_grid`, `worker_slots`): `runs_per_device` per GPU,
or sharing the CPU cores.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
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
        raise ValueError(
            f"profile {profile!r} has unknown key(s) {sorted(unknown)}; valid: {', '.join(valid)}"
        )
    return {
        "seeds": list(prof.get("seeds", [0])),
        "overrides": dict(prof.get("overrides") or {}),
        "runs_per_device": int(prof.get("runs_per_device", 1)),
        "max_episodes_per_step": prof.get("max_episodes_per_step"),
    }


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


def train_quietly(cfg: config.Config, run) -> None:
    """The grid's unit of work (module level, so a spawned worker can import it)."""
    from ragen_lib import trainer

    trainer.train(cfg, run, progress=False)


def grid_file(finding: str | Path) -> Path:
    """`params/<finding>.yaml` for a finding's name; a path to a grid file is taken as it is."""
    path = Path(finding)
    if path.suffix not in (".yaml", ".yml"):
        path = ROOT / "params" / f"{finding}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in (ROOT / "params").glob("[0-9][0-9]_*.yaml"))
        raise FileNotFoundError(f"no grid file {path}; findings: {', '.join(names)}")
    return path


def points(grid) -> list[dict]:
    """A grid's variants: a mapping {dotted key: [values]} gives the cartesian product (keys in the
    order given); a list of dicts gives one variant per dict. In a mapping, a key whose values are
    dicts (e.g. `variant: [{algo.filter_keep: 0.5}, {algo.filter_keep: 0.25, study: x}]`) takes part
    in the product with each dict merged in, so a list of variants can be crossed with envs."""
    if isinstance(grid, list):
        return [dict(p) for p in grid]
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point: dict = {}
        for k, v in zip(keys, combo):
            point.update(v if isinstance(v, dict) else {k: v})
        out.append(point)
    return out


def variants(
    finding: str | Path, profile: str, *, seeds: list[int] | None = None, overrides: dict | None = None
) -> tuple[str, list[tuple[config.Config, dict]]]:
    """(finding name, [(Config, labels)]) for every grid point × seed of the profile."""
    path = grid_file(finding)
    spec = yaml.safe_load(path.read_text())
    unknown = set(spec) - {"base", "grid", "extra"}
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {sorted(unknown)}; valid: base, grid, extra "
            "(the file's name is the finding's name)"
        )
    prof = load_profile(profile)
    grid = spec.get("grid") or [{}]
    variants_ = points(grid) + list(spec.get("extra") or [])
    out = []
    for point in variants_:
        only = point.pop("profiles", None)  # a variant for some profiles only (e.g. the paper's full table)
        if only is not None and profile not in only:
            continue
        labels = {k: v for k, v in point.items() if "." not in k}
        dotted = {k: v for k, v in point.items() if "." in k}
        for seed in seeds if seeds is not None else prof["seeds"]:
            merged = {
                **(spec.get("base") or {}),
                **prof["overrides"],
                **(overrides or {}),
                **dotted,
                "train.seed": seed,
            }
            merged = cap_batch(merged, prof["max_episodes_per_step"])
            out.append((config.from_dict({}, merged), labels))
    return path.stem, out


def run_finding(
    finding: str | Path,
    profile: str | None = None,
    *,
    seeds: list[int] | None = None,
    overrides: dict | None = None,
    root: str | Path | None = None,
    progress: bool = True,
):
    """Train every missing run of the finding's grid (finished ones are reused); return their metrics.

    Returns a DataFrame with one row per run × step: metrics, `cfg.*` columns, the variant's
    labels, and `profile`; `df.attrs` holds profile, finding, root and wall_s.
    """
    profile = profile or default_profile()
    finding, pairs = variants(finding, profile, seeds=seeds, overrides=overrides)
    root = Path(root) if root else runs.output_root(profile)
    cfgs = [c for c, _ in pairs]
    t0 = time.perf_counter()
    slots = worker_slots(load_profile(profile)["runs_per_device"])
    run_grid(root, finding, cfgs, train_quietly, progress=progress, slots=slots)
    df = runs.load(root, finding)
    wanted = {runs.run_dir(root, finding, c).name: labels for c, (_, labels) in zip(cfgs, pairs)}
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


# ----------------------------------------------------------------------------------------------
# Training a grid: reuse finished runs, train the rest in worker processes
# ----------------------------------------------------------------------------------------------
def run_grid(
    root,
    finding: str,
    cfgs: list[config.Config],
    train_fn=train_quietly,
    *,
    progress: bool = True,
    slots: list[dict] | None = None,
) -> list[Path]:
    """Train every config not already DONE under `<root>/runs/<finding>/`; returns the run folders.
    `train_fn(cfg, run)` does the work and resumes itself through `run.resume()`.

    `slots`: one dict of environment variables per worker process, e.g. {"CUDA_VISIBLE_DEVICES": "0"}
    twice to pack two runs on GPU 0, or {"OMP_NUM_THREADS": "1"} per CPU core. With two or more,
    runs go to a pool of that many spawned processes (train_fn must then be a module-level
    function). A failed run does not stop the others; the first failure is raised at the end.
    """
    from tqdm.auto import tqdm

    paths = [runs.run_dir(root, finding, c) for c in cfgs]
    # Identical configs share one folder: train it once (two workers on one folder would collide).
    todo = list({p: (c, p) for c, p in zip(cfgs, paths) if not (p / runs.DONE).exists()}.values())
    bar = tqdm(
        total=len(todo),
        desc=f"{finding}: {len(cfgs) - len(todo)} reused, {len(todo)} to run",
        unit="run",
        disable=not progress or not todo,
    )
    failures: list[tuple[Path, BaseException]] = []
    if slots and len(slots) > 1 and len(todo) > 1:
        failures = _run_pool(todo, train_fn, slots, bar)
    else:
        for cfg, path in todo:
            try:
                train_fn(cfg, runs.Run(path, cfg))
            except BaseException:
                print(f"run failed: {path} (its metrics and last checkpoint are kept; rerun to resume)")
                raise
            bar.update()
    bar.close()
    if failures:
        names = ", ".join(p.name for p, _ in failures)
        raise RuntimeError(
            f"{len(failures)} of {len(todo)} runs failed ({names}); the others finished. "
            "Failed runs keep their metrics and last checkpoint: rerun to resume them."
        ) from failures[0][1]
    return paths


def _run_pool(todo, train_fn, slots: list[dict], bar) -> list[tuple[Path, BaseException]]:
    # spawn, not fork: a forked CUDA context or a forked torch thread pool is unusable.
    ctx = multiprocessing.get_context("spawn")
    free = ctx.Queue()
    for slot in slots:
        free.put(dict(slot))
    failures = []
    with ProcessPoolExecutor(len(slots), mp_context=ctx, initializer=_claim_slot, initargs=(free,)) as pool:
        futures = {pool.submit(_train_in_worker, train_fn, cfg, str(path)): path for cfg, path in todo}
        for fut in as_completed(futures):
            if fut.exception() is not None:
                print(
                    f"run failed: {futures[fut]} ({fut.exception()!r}); its metrics and last checkpoint "
                    "are kept: rerun to resume"
                )
                failures.append((futures[fut], fut.exception()))
            bar.update()
    return failures


def _claim_slot(free) -> None:
    """Pool initializer: this worker takes one slot's environment for its whole life."""
    env = free.get()
    os.environ.update(env)
    if "OMP_NUM_THREADS" in env:
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))


def _train_in_worker(train_fn, cfg: config.Config, path: str) -> None:
    train_fn(cfg, runs.Run(Path(path), cfg))
