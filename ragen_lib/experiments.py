"""A notebook's one call: expand its grid for a profile, train what is missing, load the metrics.

    df = experiments.run_finding("03_uncertainty_filtering", profile="smoke")

A finding has one name, the stem of its grid file `params/<name>.yaml`: the notebook's file name,
its run folder `runs/<name>/`, its verdict and its figures' prefix are all that string.
Grid files hold `base` (dotted overrides for every run) and `grid`: a mapping of dotted keys to
value lists (cartesian product) or a list of override dicts; `extra` adds more variants. Keys
without a dot in a variant are labels (e.g. `study`): they become DataFrame columns, not config.
A mapping grid's undotted key may list dicts, each merged in (`variant: [{...}, {...}]`); a dotted
key's values are the field's own, dicts included (`env.kwargs: [{high_risk_p: 0.2}, ...]`), and
`env.kwargs.NAME` sets one entry of that mapping.
Order of application: defaults ← base ← profile ← variant, so a variant's own values always win.
A variant with `profiles: [paper]` runs only in those profiles.

What a profile can decide: its `judged` key is `all` (every grid point is judged) or a list of
entries `{finding, where, seeds, overrides}`; a grid point of `finding` whose merged values match
`where` (dotted key → value or list of values; a key the point does not set matches null) runs with
those seeds and overrides (applied after the profile's) and is judged. Every other point runs once
at the profile's pilot scale and is labelled `judged: False`: the notebook draws it and reports
its numbers as PILOT, with no verdict (`analysis.judge`). Each run carries the `judged` label.

The grid's runs train in worker processes (`run_grid`, `worker_slots`): `runs_per_device` per GPU,
or sharing the CPU cores. Ctrl-C (Jupyter's stop button) or SIGTERM stops a grid within seconds:
queued runs are cancelled, the workers stopped (they also die with their parent), and every
started run is left resumable. `plan(profile)` says what a profile will train and the disk it needs.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import gc
import itertools
import math
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ragen_lib import config, models, revisions, runs
from ragen_lib.envs import env_class

ROOT = Path(__file__).resolve().parent.parent


def default_profile() -> str:
    """quick when CUDA is present, smoke otherwise (RAGEN_PROFILE overrides)."""
    if os.environ.get("RAGEN_PROFILE"):
        return os.environ["RAGEN_PROFILE"]
    import torch

    return "quick" if torch.cuda.is_available() else "smoke"


def load_profile(profile: str, path: Path | None = None) -> dict:
    data = config.read_yaml(path or ROOT / "params" / "profiles.yaml")
    if profile not in data:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(data)}")
    prof = data[profile]
    valid = ("seeds", "overrides", "runs_per_device", "max_episodes_per_step", "judged")
    unknown = set(prof) - set(valid)
    if unknown:
        raise ValueError(
            f"profile {profile!r} has unknown key(s) {sorted(unknown)}; valid: {', '.join(valid)}"
        )
    return {
        "seeds": parse_seeds(prof.get("seeds", [0]), f"profile {profile!r}: seeds"),
        "overrides": dict(prof.get("overrides") or {}),
        "runs_per_device": int(prof.get("runs_per_device", 1)),
        "max_episodes_per_step": prof.get("max_episodes_per_step"),
        "judged": _check_judged(profile, prof.get("judged", "all")),
    }


def _check_judged(profile: str, judged):
    if judged == "all":
        return "all"
    if not isinstance(judged, list):
        raise ValueError(
            f"profile {profile!r}: judged is `all` or a list of {{finding, where, seeds, overrides}}"
        )
    valid = {"finding", "where", "seeds", "overrides"}
    for entry in judged:
        if not isinstance(entry, dict) or "finding" not in entry or set(entry) - valid:
            raise ValueError(
                f"profile {profile!r}: judged entry {entry!r} needs `finding` and may have only "
                f"{', '.join(sorted(valid))}"
            )
        if "seeds" in entry:
            entry["seeds"] = parse_seeds(
                entry["seeds"], f"profile {profile!r}: judged {entry['finding']} seeds"
            )
    return judged


def judged_entry(prof: dict, finding: str, merged: dict) -> dict | None:
    """The profile's judged entry that a grid point (its merged dotted values and labels) matches:
    {} when the profile judges everything, None when the point runs as a pilot."""
    if prof["judged"] == "all":
        return {}
    for entry in prof["judged"]:
        if entry["finding"] != finding:
            continue
        where = entry.get("where") or {}
        if all(merged.get(k) in v if isinstance(v, list) else merged.get(k) == v for k, v in where.items()):
            return entry
    return None


def cap_batch(overrides: dict, cap: int | None) -> dict:
    """Shrink P (train.groups) and N (train.group_size) by the same factor when a variant asks for
    more than `cap` episodes per step: the smoke profile keeps a P×N study's shape (more states vs
    more samples) at a size a CPU can run. N stays >= 2 where it was (groups keep a spread; the
    paper's N = 1 point stays N = 1) and P >= 1; what rounding and those floors add over the cap is
    taken off the larger side, so P × N never exceeds it. Points that differ only beyond the cap's
    resolution can land on the same P × N (and then share one run)."""
    P, N = overrides.get("train.groups"), overrides.get("train.group_size")
    if cap is None or P is None or N is None or P * N <= cap:
        return overrides
    s = math.sqrt(cap / (P * N))
    n_floor = min(N, 2)
    p, n = max(1, round(P * s)), max(n_floor, round(N * s))
    while p * n > cap and (p > 1 or n > n_floor):
        if n > n_floor and (n > p or p == 1):
            n -= 1
        else:
            p -= 1
    return {**overrides, "train.groups": p, "train.group_size": n}


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
    """`params/<finding>.yaml` for a finding's name or number (`finding_name`); a path to a grid
    file is taken as it is."""
    path = Path(finding)
    if path.suffix not in (".yaml", ".yml"):
        path = ROOT / "params" / f"{finding_name(str(finding))}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in (ROOT / "params").glob("[0-9][0-9]_*.yaml"))
        raise FileNotFoundError(f"no grid file {path}; findings: {', '.join(names)}")
    return path


def points(grid) -> list[dict]:
    """A grid's variants: a mapping {dotted key: [values]} gives the cartesian product (keys in the
    order given); a list of dicts gives one variant per dict. In a mapping, a key whose values are
    dicts (e.g. `variant: [{algo.filter_keep: 0.5}, {algo.filter_keep: 0.25, study: x}]`) takes part
    in the product with each dict merged in, so a list of variants can be crossed with envs. A dotted
    key's values are the field's values, dicts included (`env.kwargs: [{high_risk_p: 0.2}, ...]`):
    merged in, their entries became labels and the field kept its default without a word."""
    if isinstance(grid, list):
        return [dict(p) for p in grid]
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point: dict = {}
        for k, v in zip(keys, combo):
            point.update(v if isinstance(v, dict) and "." not in k else {k: v})
        out.append(point)
    return out


def parse_overrides(overrides: dict | str | None) -> dict:
    """A mapping of dotted overrides, from a mapping or its JSON (or YAML) text."""
    if overrides is None or overrides == "":
        return {}
    if isinstance(overrides, str):
        parsed = config.read_yaml("overrides", overrides)  # JSON is YAML: '{"train.steps": 50}'
        if not isinstance(parsed, dict):
            raise ValueError(
                "overrides must be a mapping of dotted keys, e.g. "
                f"'{{\"train.steps\": 50}}', got {overrides!r}"
            )
        return parsed
    if not isinstance(overrides, dict):
        raise ValueError(f"overrides must be a mapping of dotted keys or its JSON text, got {overrides!r}")
    return dict(overrides)


def parse_seeds(seeds, source: str = "seeds") -> list[int] | None:
    """Seed numbers from a list or its JSON (or YAML) text, which is what `papermill -p seeds
    '[0, 1, 2]'` passes; None (or "") for the profile's, where `source` is "seeds" (a notebook's
    parameter). A bare number is refused: "3" could mean seed 3 or three seeds. A repeated seed is
    refused: it is one run counted twice by a verdict."""
    parameter = source == "seeds"
    if parameter and (seeds is None or seeds == ""):
        return None
    given = seeds
    if isinstance(seeds, str):
        seeds = config.read_yaml(source, seeds)
    ok = isinstance(seeds, (list, tuple)) and len(seeds) > 0
    if not ok or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        how = " (papermill: -p seeds '[0, 1, 2]')" if parameter else ""
        raise ValueError(f"{source} must be a list of seed numbers, e.g. [0, 1, 2]{how}; got {given!r}")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"{source} {given!r} repeats a seed: the same run would count twice in a verdict")
    return list(seeds)


def variants(
    finding: str | Path, profile: str, *, seeds: list[int] | None = None, overrides: dict | str | None = None
) -> tuple[str, list[tuple[config.Config, dict]]]:
    """(finding name, [(Config, labels)]) for every grid point × seed of the profile.

    `overrides` (dotted keys, applied to every run) may be a mapping or its JSON text (what
    `papermill -p overrides '{"train.steps": 50}'` passes); `seeds` a list or its JSON text.
    Overriding a key the grid varies, or train.seed (use `seeds`), is an error: the variant would
    silently win."""
    path = grid_file(finding)
    spec = config.read_yaml(path) or {}
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a grid file is a mapping with base, grid and extra")
    overrides = parse_overrides(overrides)
    seeds = parse_seeds(seeds)
    unknown = set(spec) - {"base", "grid", "extra"}
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {sorted(unknown)}; valid: base, grid, extra "
            "(the file's name is the finding's name)"
        )
    prof = load_profile(profile)
    grid = spec.get("grid") or [{}]
    variants_ = points(grid) + list(spec.get("extra") or [])
    varied = {k for point in variants_ for k in point if "." in k} | {"train.seed"}
    field = lambda key: ".".join(key.split(".")[:2])  # noqa: E731  (env.kwargs.x is part of env.kwargs)
    varied_fields = {field(v) for v in varied}
    clash = sorted(k for k in overrides if field(k) in varied_fields)
    if clash:
        values = [
            f"{v}: " + ", ".join(sorted({str(p[v]) for p in variants_ if v in p}))
            for v in sorted({v for v in varied for k in clash if field(v) == field(k)})
            if v != "train.seed"
        ]
        raise ValueError(
            f"overrides set {', '.join(clash)}, which {path.name} varies per run "
            + (f"({'; '.join(values)})" if values else "")
            + ": the grid's values would win and the override would be ignored. Remove it"
            + (" (pass seeds=[...] for train.seed)" if "train.seed" in clash else "")
            + f", or edit the grid in {path}."
        )
    _check_labels(path, variants_)
    matched: set[int] = set()
    out = []
    for point in variants_:
        only = point.pop("profiles", None)  # a variant for some profiles only (e.g. the paper's full table)
        if only is not None and profile not in only:
            continue
        labels = {k: v for k, v in point.items() if "." not in k}
        dotted = {k: v for k, v in point.items() if "." in k}
        entry = judged_entry(prof, path.stem, {**(spec.get("base") or {}), **labels, **dotted})
        if entry:
            matched.add(id(entry))
        labels["judged"] = entry is not None
        entry = entry or {}
        for seed in seeds if seeds is not None else entry.get("seeds", prof["seeds"]):
            merged = {
                **(spec.get("base") or {}),
                **prof["overrides"],
                **(entry.get("overrides") or {}),
                **overrides,
                **dotted,
                "train.seed": seed,
            }
            merged = cap_batch(merged, prof["max_episodes_per_step"])
            out.append((config.from_dict({}, merged), labels))
    if prof["judged"] != "all":
        for entry in prof["judged"]:
            if entry["finding"] == path.stem and id(entry) not in matched:
                # its study would run as a pilot, and its verdicts read PILOT, after the whole grid
                raise ValueError(
                    f"profile {profile!r}: the judged entry for {path.stem} where {entry.get('where')} "
                    f"matches no grid point of {path} (a misspelt key or value?); its keys must be "
                    "the grid's or its base's, with their values"
                )
    return path.stem, out


def _check_labels(path: Path, variants_: list[dict]) -> None:
    """Refuse an undotted grid key that reads as a config setting (`steps`, `algo_kl_coef`): undotted
    keys are labels (`study`), which set nothing, so the run would keep the default without a word."""
    fields = {f: s for s, cls in config.SECTIONS.items() for f in (x.name for x in dataclasses.fields(cls))}
    for point in variants_:
        for key in point:
            if "." in key or key == "profiles":
                continue
            name = key.replace("-", "_")
            section = next((s for s in config.SECTIONS if name.startswith(s + "_")), None)
            field_ = name[len(section) + 1 :] if section else name
            if key in config.SECTIONS:
                guess = f"{key}.<field>: <value>"
            elif field_ in fields:
                guess = f"{section or fields[field_]}.{field_}"
            else:
                continue
            raise ValueError(
                f"{path}: grid key {key!r} has no dot, so it is a label (like `study`) and sets "
                f"nothing: write the setting dotted, e.g. {guess}"
            )


def run_finding(
    finding: str | Path,
    profile: str | None = None,
    *,
    seeds: list[int] | None = None,
    overrides: dict | str | None = None,
    root: str | Path | None = None,
    progress: bool = True,
):
    """Train every missing run of the finding's grid (finished ones are reused); return their metrics.

    Returns a DataFrame with one row per run × step: metrics, `cfg.*` columns, the variant's
    labels, and `profile`; `df.attrs` holds profile, finding, root and wall_s.
    """
    check_parameters()
    profile = profile or default_profile()
    finding, pairs = variants(finding, profile, seeds=seeds, overrides=overrides)
    root = Path(root) if root else runs.output_root(profile)
    cfgs = [c for c, _ in pairs]
    t0 = time.perf_counter()
    slots = worker_slots(load_profile(profile)["runs_per_device"])
    run_grid(root, finding, cfgs, train_quietly, progress=progress, slots=slots)
    wanted = grid_labels(root, finding, pairs)
    df = runs.load(root, finding, run_ids=set(wanted))  # other grids' leftovers are not even read
    df = label_rows(df, wanted)
    df["profile"] = profile
    df.attrs.update(profile=profile, finding=finding, wall_s=time.perf_counter() - t0, root=str(root))
    return df


def grid_labels(root, finding: str, pairs) -> dict[str, list[dict]]:
    """{run folder name: [the labels of each grid point it is]}. Two grid points can be one config
    (the paper profile's P×N point 8×16 is its online-1 run): the run then serves both."""
    wanted: dict[str, list[dict]] = {}
    for cfg, labels in pairs:
        sets = wanted.setdefault(runs.run_dir(root, finding, cfg).name, [])
        if labels not in sets:
            sets.append(labels)
    return wanted


def label_rows(df, wanted: dict[str, list[dict]]):
    """`df`'s rows with each run's grid labels as columns, a run's rows repeated once per label set
    (a run two grid points share); the rows keep their order within each set."""
    import pandas as pd

    keys = sorted({k for sets in wanted.values() for labels in sets for k in labels})
    table = pd.DataFrame(
        [{"run_id": r, **{k: labels.get(k) for k in keys}} for r, sets in wanted.items() for labels in sets],
        columns=["run_id", *keys],
    )
    out = df.drop(columns=[k for k in keys if k in df]).merge(table, on="run_id", how="left")
    out.attrs.update(df.attrs)
    return out


def check_parameters(history: list[str] | None = None) -> None:
    """Refuse a papermill parameter the notebook does not have (`-p profle paper`): papermill only
    logs a warning and runs the defaults, so the verdict would answer another question. In a kernel
    the cell papermill injects (it starts "# Parameters") runs right after the notebook's
    parameters cell; every name it assigns must be one that cell assigns. `history`: the sources of
    the cells run so far, in order (default: IPython's `In`; outside IPython there is nothing to
    check)."""
    if history is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        history = list(shell.user_ns.get("In", [])) if shell is not None else []
    # The last injected cell only, and only where the cell run before it is a parameters cell (all
    # assignments): a cell re-run by hand in a papermill output would otherwise pair with any cell.
    injected = [i for i in range(1, len(history)) if history[i].startswith("# Parameters\n")]
    if injected:
        i = injected[-1]
        declared, given = _assigned(history[i - 1]), _assigned(history[i])
        # PAPERMILL_*: the paths papermill's --inject-paths adds to every notebook
        unknown = sorted(n for n in given - declared if not n.startswith("PAPERMILL_"))
        if declared and unknown:
            hints = [n + config.did_you_mean(n, sorted(declared)) for n in unknown]
            raise ValueError(
                f"unknown notebook parameter(s) {', '.join(hints)}: this notebook takes "
                f"{', '.join(sorted(declared))}. papermill only warned and would have run the defaults; "
                "fix the -p name"
            )


def _assigned(source: str) -> set[str]:
    """The names a cell of assignments only assigns (empty when it holds anything else or does not
    parse: not a parameters cell)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    if not all(isinstance(node, (ast.Assign, ast.AnnAssign)) for node in tree.body):
        return set()
    targets = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def samples(df):
    """The trajectory samples of the runs in `df` (a `run_finding` result), with its labels."""
    s = runs.load_samples(df.attrs["root"], df.attrs["finding"], set(df["run_id"]))
    cols = [c for c in df.columns if c.startswith("cfg.") or c in ("study",)]
    # a run two grid points share: its samples once per point's labels, as its metrics (label_rows)
    keys = df.drop_duplicates(["run_id", *(["study"] if "study" in df else [])])[["run_id", *cols]]
    return s.drop(columns=[c for c in cols if c in s]).merge(keys, on="run_id", how="left")


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
    """Train every config not already DONE under `<root>/runs/<finding>/` (or DONE by older code
    that trains it differently today: `runs.stands`, `reuse_finished`); returns the run folders.
    `train_fn(cfg, run)` does the work, holding the run's lock, and resumes through `run.resume()`.

    `slots`: one dict of environment variables per worker process, e.g. {"CUDA_VISIBLE_DEVICES": "0"}
    twice to pack two runs on GPU 0, or {"OMP_NUM_THREADS": "1"} per CPU core. With two or more
    slots and two or more runs left to train, runs go to a pool of that many spawned processes
    (train_fn must then be a module-level function); with one slot, or one run left, they train
    in this process. A failed run does not stop the others; its traceback is printed where it
    fails and the first failure is raised at the end. A worker process that dies (the OOM killer, a
    segfault) breaks the pool: its runs go to a fresh pool and resume; a run in flight at
    MAX_POOL_BREAKS breaks trains alone from then on if other runs were in flight at each of them
    (any of those may have been the one that died), and fails otherwise. A finished run whose files
    disagree with its DONE is not reused and counts as a failure; one that still holds a checkpoint
    (a crash after its DONE) loses it.

    Ctrl-C or SIGTERM cancels the queued runs, stops the workers and raises KeyboardInterrupt
    (GridInterrupted for SIGTERM) within seconds; the runs in progress resume on the next call.
    """
    from ragen_lib.progress import tqdm

    paths = [runs.run_dir(root, finding, c) for c in cfgs]
    # Identical configs share one folder: train it once (two workers on one folder would collide).
    todo, failures = [], []
    for path, cfg in {p: c for c, p in zip(cfgs, paths)}.items():
        src = None if path.exists() else runs.finished_elsewhere(root, finding, path.name)
        if src is not None and runs.adopt(src, path):
            print(f"reused from {src.parent.name}: {path.name} (the same config, finished there)")
        if not (path / runs.DONE).exists():
            todo.append((cfg, path))
            continue
        try:
            runs.Run(path).check_done()
        except (runs.CorruptRunError, OSError, ValueError) as e:
            print(f"not reused: {e}")
            failures.append((path, e))
            continue
        if not runs.stands(path, cfg):  # trained by older code: retired where it trains, locked
            if not _replace_outdated(path, runs.finished_elsewhere(root, finding, path.name)):
                todo.append((cfg, path))  # (`reuse_finished`)
            continue
        if (path / runs.CKPT).exists():  # a crash after its DONE; if the run is locked, its writer removes it
            with contextlib.suppress(runs.RunLockedError), runs.Run(path) as run:
                drop_stale_checkpoint(run)
    for name, device in dict.fromkeys((cfg.model.name, cfg.model.device) for cfg, _ in todo):
        models.check(name, device)  # one clear error before any run starts, not one per run
    reused = len(set(paths)) - len(todo) - len(failures)
    stored = reused + sum((path / runs.CKPT).exists() for _, path in todo)  # reused or resumed
    if stored and (edited := revisions.unreviewed()):
        print(revisions.unreviewed_note(edited, stored))
    bar = tqdm(
        total=len(todo),
        desc=f"{finding}: {reused} reused, {len(todo)} to run",
        unit="run",
        disable=not progress or not todo,
    )
    with _signals_interrupt():
        if slots and len(slots) > 1 and len(todo) > 1:
            failures += _run_pool(todo, train_fn, slots, bar)
        else:
            for cfg, path in todo:
                try:
                    _train_one(train_fn, cfg, str(path))
                except KeyboardInterrupt:
                    print(f"interrupted: {path} stopped mid-run (resumable: rerun to continue)")
                    raise
                except Exception as e:  # as in the pool: one run's failure must not cost the others
                    print(f"run failed: {path} ({e!r}); its metrics and last checkpoint are kept: rerun")
                    failures.append((path, _release(e)))
                bar.update()
    bar.close()
    if failures:
        names = ", ".join(p.name for p, _ in failures)
        raise RuntimeError(
            f"{len(failures)} of {len(set(paths))} runs failed ({names}); the others finished. "
            "Failed runs keep their metrics and last checkpoint: rerun to resume them (a message "
            "above names any repair a run needs)."
        ) from failures[0][1]
    return paths


def _replace_outdated(path: Path, src: Path | None) -> bool:
    """Retire the outdated finished run at `path` and copy in `src`, the same config finished by
    today's code under another finding (`runs.finished_elsewhere` passes over outdated ones): the
    runs 01, 03 and 04 share train once, as a new grid's do. False (nothing changed) without `src`,
    or when another process holds the run (it decides)."""
    if src is None:
        return False
    try:
        with runs.Run(path) as run:
            if not run.done or run.outdated() is None:
                return False
            box = run.retire()
            runs.adopt_into(src, run)
    except runs.RunLockedError:
        return False
    print(f"reused from {src.parent.name}: {path.name} (trained there by today's code; old files: {box})")
    return True


def reuse_finished(run: runs.Run) -> bool:
    """Whether the finished `run` (held locked) stands as it is; CorruptRunError when its files
    disagree with its DONE. One trained by older code that would train its config differently today
    (`revisions`) has its files moved to quarantine/ and returns False: it trains again."""
    run.check_done()
    why = run.outdated()
    if why:
        box = run.retire()
        print(f"not reused: {run.path.name} was {why}. It trains again (its old files are in {box})")
        return False
    drop_stale_checkpoint(run)
    return True


def drop_stale_checkpoint(run: runs.Run) -> None:
    """Remove the checkpoint a finished run still holds: `mark_done` writes DONE and then removes
    ckpt/, and a crash between the two leaves gigabytes that nothing else removes."""
    freed = run.drop_stale_checkpoint()
    if freed:
        print(
            f"removed the leftover checkpoint of finished run {run.path} ({freed / 1e6:.0f} MB; a crash "
            "came after its DONE was written)"
        )


def _release(error: BaseException) -> BaseException:
    """`error` without its tracebacks (printed already), so the failed run's frames, and the model
    and optimizer they hold, are freed before the next run of the grid starts."""
    e, seen = error, set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return error


class GridInterrupted(KeyboardInterrupt):
    """SIGTERM stopped a grid (raised in the main thread, so cleanup runs as for Ctrl-C)."""


@contextlib.contextmanager
def _signals_interrupt():
    """SIGTERM raises GridInterrupted in the main thread while a grid runs (SIGINT already raises
    KeyboardInterrupt), so the same cleanup stops the workers; the old handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise GridInterrupted(f"stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_pool(todo, train_fn, slots: list[dict], bar) -> list[tuple[Path, BaseException]]:
    """Train `todo` in a pool of spawned workers, one per slot. A worker that dies abruptly (the OOM
    killer, a segfault, os._exit) breaks the whole pool and fails every run in it: those runs go to a
    fresh pool (they resume from their checkpoints). The pool cannot say whose worker died, so a run
    in flight at MAX_POOL_BREAKS breaks, each shared with other runs in flight, goes on alone in a
    one-worker pool (where a break is surely its own), and fails at its next break; one that was
    alone in flight at any of its breaks fails at MAX_POOL_BREAKS."""
    failures: list[tuple[Path, BaseException]] = []
    breaks: dict[Path, _Breaks] = {}
    while todo:
        isolated = {path for path, b in breaks.items() if b.isolated}
        alone = [job for job in todo if job[1] in isolated]
        together = [job for job in todo if job[1] not in isolated]
        todo = []
        if together:
            todo += _pool_round(together, train_fn, slots, bar, failures, breaks)
        if alone:  # one worker: one run in flight at a time
            todo += _pool_round(alone, train_fn, slots[:1], bar, failures, breaks)
    return failures


MAX_POOL_BREAKS = 2
"""Pool breaks a run may be in flight for before it is failed or, when other runs were in flight at
every one of them, trained alone: one break may be another run's doing (the pool kills every worker
when one dies), a second with this run alone in flight says it likely kills its worker."""


@dataclasses.dataclass
class _Breaks:
    """The pool breaks one run was in flight for: how many, whether any was surely its own (it was
    alone in flight), and whether it trains alone from now on."""

    count: int = 0
    own: bool = False
    isolated: bool = False


def _pool_round(todo, train_fn, slots: list[dict], bar, failures: list, breaks: dict) -> list:
    """One pool over `todo`; returns the runs a broken pool lost, to train again in a fresh one."""
    # spawn, not fork: a forked CUDA context or a forked torch thread pool is unusable.
    ctx = multiprocessing.get_context("spawn")
    free = ctx.Queue()  # fresh each round: a dead worker never gives its slot back
    for slot in slots:
        free.put(dict(slot))
    started = ctx.SimpleQueue()  # written at once (no feeder thread), so a worker dying next still tells
    pool = ProcessPoolExecutor(
        len(slots), mp_context=ctx, initializer=_start_worker, initargs=(free, started, os.getpid())
    )
    futures = {pool.submit(_pool_train, train_fn, cfg, str(path)): (cfg, path) for cfg, path in todo}
    # The executor spawns a worker at each submit, after waking its manager thread: the manager may
    # already wait on the sentinels of the workers spawned before, so a death of the last one would go
    # unseen until another run finishes (hours, with its slot idle). Wake it once all are spawned.
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    if wakeup is not None:  # under the executor's lock, as its own calls (a pool broken already: no-op)
        with getattr(pool, "_shutdown_lock", contextlib.nullcontext()), contextlib.suppress(OSError):
            wakeup.wakeup()
    pending, lost, began = set(futures), [], set()
    try:
        while pending:
            # Timed: the kernel may hand Ctrl-C or SIGTERM to one of the pool's helper threads, which
            # only flags it for the main thread; an untimed wait would sit out the running runs.
            done, pending = wait(pending, timeout=SIGNAL_POLL_S, return_when=FIRST_COMPLETED)
            began |= _drain(started)  # read as it comes: a full pipe would block the workers
            for fut in sorted(done, key=list(futures).index):  # grid order when several finish at once
                path, error = futures[fut][1], fut.exception()
                if isinstance(error, BrokenProcessPool):
                    lost.append(futures[fut])
                    continue
                if error is not None:
                    print(
                        f"run failed: {path} ({error!r}); its metrics and last checkpoint are kept: "
                        "rerun to resume"
                    )
                    failures.append((path, error))
                bar.update()
    except BaseException:  # Ctrl-C, SIGTERM (GridInterrupted), or anything else: stop everything now
        _stop_pool(pool, futures)
        raise
    pool.shutdown(wait=True)
    began |= _drain(started)
    unstarted = sorted(x.removeprefix(_START_FAILED) for x in began if x.startswith(_START_FAILED))
    if unstarted and not lost:  # it died before the pool noticed, and the other workers did the work
        print(f"warning: a grid worker process failed while starting ({unstarted[0]}); the others "
              "trained every run")  # fmt: skip
    elif unstarted:  # every fresh pool would die the same way: say why, once, instead of requeueing
        raise WorkerStartFailed(
            f"a grid worker process failed while starting, before training any run: {unstarted[0]} "
            "(its traceback is above). The runs keep their metrics and last checkpoint: fix the slot's "
            "environment (the profile's runs_per_device, a CUDA_VISIBLE_DEVICES or OMP_NUM_THREADS "
            "value) and rerun to resume them"
        )
    return _requeue(lost, began, failures, breaks, bar)


def _drain(started) -> set[str]:
    """The run folders that workers have reported starting since the last call."""
    paths = set()
    while not started.empty():
        paths.add(started.get())
    return paths


def _requeue(lost: list, began: set[str], failures: list, breaks: dict, bar) -> list:
    """The runs of a broken pool to train again. A break counts against the runs in flight (a run
    still queued is requeued whatever happened), or against every lost run when none had started
    (a worker that dies before training anything). It is surely a run's own when the run was alone
    in flight or trains alone already. Each run's shared breaks are bounded (MAX_POOL_BREAKS, then
    it trains alone) and its next own break past them fails it, so a grid always ends."""
    if not lost:
        return []
    in_flight = [path for _, path in lost if str(path) in began] or [path for _, path in lost]
    isolated = []
    for path in in_flight:
        b = breaks.setdefault(path, _Breaks())
        b.count += 1
        b.own = b.own or b.isolated or len(in_flight) == 1
        if b.count >= MAX_POOL_BREAKS and not b.own and not b.isolated:
            b.isolated = True
            isolated.append(path)
    requeue = []
    for cfg, path in lost:
        b = breaks.get(path, _Breaks())
        if b.count < MAX_POOL_BREAKS or not b.own:
            requeue.append((cfg, path))
            continue
        error = WorkerDied(
            f"{path}: the worker process training it died {b.count} times (the OOM killer: check "
            "`dmesg`; a crash in native code; or os._exit in the training code); its metrics and last "
            "checkpoint are kept: rerun to resume, with fewer runs_per_device if memory ran out"
        )
        print(f"run failed: {error}")
        failures.append((path, error))
        bar.update()
    again = f"{len(requeue)} run(s) requeued in a fresh pool, to resume from their checkpoints"
    print(
        f"a grid worker process died and broke the pool ({len(in_flight)} run(s) were in flight): "
        + (again if requeue else "no run left to requeue")
    )
    for path in isolated:
        print(
            f"{path.name} was in flight at {MAX_POOL_BREAKS} breaks, each shared with other runs: it "
            "trains alone from now on, so that its next break is surely its own"
        )
    return requeue


class WorkerDied(RuntimeError):
    """A run's worker process died abruptly (killed, crashed) each time it trained the run."""


class WorkerStartFailed(RuntimeError):
    """A grid worker raised in its start-up (`_start_worker`), before it could train anything."""


SIGNAL_POLL_S = 0.5
"""Longest a pending Ctrl-C or SIGTERM waits before the grid's main thread acts on it."""

STOP_GRACE_S = 3.0
"""Seconds a stopped worker gets to exit after SIGTERM before SIGKILL."""


def _stop_pool(pool: ProcessPoolExecutor, futures: dict) -> None:
    """Cancel the queued runs and stop the workers (SIGTERM, then SIGKILL after STOP_GRACE_S). The
    store is crash-safe, so a worker killed mid-step leaves its run resumable."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    # The executor cancels what is queued itself (cancelling from here races its manager thread).
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1.0)
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(STOP_GRACE_S)
    cancelled = sum(f.cancelled() for f in futures)
    print(
        f"grid interrupted: {cancelled} queued run(s) cancelled, {len(procs)} worker(s) stopped; the "
        "runs in progress keep their metrics and last checkpoint and resume when you rerun"
    )


_STARTED = None
"""In a pool worker: where `_pool_train` tells the grid which run it starts (`_start_worker` sets it)."""
_START_FAILED = "start failed: "
"""What a worker whose start-up raised puts on that queue ahead of its error, in place of a run."""


def _start_worker(free, started, parent: int) -> None:
    """Pool initializer: this worker dies with its parent, leaves Ctrl-C to the parent (a terminal
    sends SIGINT to the whole process group) and takes one slot's environment for its whole life."""
    global _STARTED
    _STARTED = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    env = {}
    try:
        env = free.get()
        os.environ.update(env)
        if "OMP_NUM_THREADS" in env:
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    except BaseException as e:  # the pool only sees a dead worker: tell the grid why it died
        started.put(f"{_START_FAILED}{type(e).__name__}: {e} (slot {env})")
        raise


def _die_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """SIGKILL this process when `parent` dies: at once through Linux's PR_SET_PDEATHSIG, and by a
    thread that polls the parent's PID elsewhere (or if the parent died before the prctl)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


def _pool_train(train_fn, cfg: config.Config, path: str) -> None:
    """What a pool worker runs: it says first which run it starts, so that when a worker dies and
    breaks the pool, the grid can tell the runs in flight from those still queued."""
    _STARTED.put(path)
    _train_one(train_fn, cfg, path)


def _train_one(train_fn, cfg: config.Config, path: str) -> None:
    """Train one run holding its lock (a second process on the same run is refused). A failure's
    traceback is printed here, where it happens: a worker hands the grid only the exception."""
    try:
        with runs.Run(Path(path), cfg) as run:
            if run.done and reuse_finished(run):  # finished by another process since the grid looked
                return
            train_fn(cfg, run)
    except Exception:
        traceback.print_exc()
        raise


# ----------------------------------------------------------------------------------------------
# The plan of a profile: what it trains and the disk it needs (`python -m ragen_lib plan PROFILE`)
# ----------------------------------------------------------------------------------------------
METRIC_LINE_BYTES = 3_000
"""Bytes of one metrics.jsonl line, with validation (measured on smoke runs: 2.2-2.6 kB)."""
SAMPLE_BYTES_PER_TURN = 2_000
"""Bytes of one sampled trajectory's turn in samples.jsonl, prompt and answer (smoke: about 1.2 kB
for 8-token answers; an answer of T tokens adds about 4·T characters, counted separately)."""


def findings() -> list[str]:
    """Every finding's name, in notebook order."""
    return sorted(p.stem for p in (ROOT / "params").glob("[0-9][0-9]_*.yaml"))


def finding_name(name: str) -> str:
    """A finding's full name from its number ("05", as `make replicate NB=05` takes it) or its name;
    anything else is left as it is, for `grid_file` to refuse, naming the findings."""
    known = findings()
    match = [f for f in known if f.startswith(f"{name}_")]
    return match[0] if name not in known and len(match) == 1 else name


@functools.cache
def model_size(name: str) -> tuple[int, int]:
    """(policy parameters, critic parameters) of a model, counted on the meta device (no weights are
    loaded; tiny-random is built, it is small). The critic is the backbone plus a scalar head."""
    import torch

    if name == models.TINY_RANDOM:
        model, _ = models.load(name, device="cpu")
    else:
        from transformers import AutoConfig, AutoModelForCausalLM

        # Resolved outside the meta device: on a fresh machine resolving converts the GGUF, a real
        # load, which transformers 5 refuses under a meta device (the first GPU lease's plan died so).
        cfg = AutoConfig.from_pretrained(models.resolve(name))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
    policy = sum(p.numel() for p in model.parameters())  # tied weights counted once, as saved
    critic = sum(p.numel() for p in model.base_model.parameters()) + model.config.hidden_size + 1
    return policy, critic


PARAM_BYTES = 4
"""Bytes per stored parameter: the weights and AdamW's states are float32 master copies whatever
`model.dtype` (the compute dtype, models.py) says, so 4 on every device."""


def checkpoint_bytes(cfg: config.Config) -> int:
    """One checkpoint of `cfg` (trainer._checkpoint): policy + its two Adam moments, the critic and
    its two moments when there is one, the reference after a warm-up, all float32 (`PARAM_BYTES`),
    plus the metrics copy. Checked against a written checkpoint in tests/test_experiments.py."""
    policy, critic = model_size(cfg.model.name)
    params = (
        3 * policy + (3 * critic if cfg.algo.critic else 0) + (policy if cfg.train.warmup != "none" else 0)
    )
    return params * PARAM_BYTES + cfg.train.steps * METRIC_LINE_BYTES


def finished_bytes(cfg: config.Config) -> int:
    """What a finished run leaves: metrics, samples, and the final weights with keep_final_weights."""
    t = cfg.train
    written = sum(t.due(s, t.samples_every) for s in t.logged_steps)  # as trainer writes them
    logged = written * t.samples_per_step
    # the run's budgets (RAGEN's defaults: 5 turns × 400 tokens; Bandit 1 × 500)
    limits = cfg.rollout.limits(env_class(cfg.env.name))
    samples = logged * limits.max_turns * (SAMPLE_BYTES_PER_TURN + 4 * limits.max_new_tokens)
    weights = 0
    if t.keep_final_weights:
        policy, critic = model_size(cfg.model.name)
        weights = (policy + (critic if cfg.algo.critic else 0)) * PARAM_BYTES
    return t.steps * METRIC_LINE_BYTES + samples + weights


_BENCH_SHAPE = r"(\d+)×(\d+), ≤(\d+) turns × (\d+) tokens"


def measured_step(cuda: bool, bench_dir: Path | None = None, gpu: str | None = None) -> dict | None:
    """Seconds per train step measured by `make bench` (outputs/bench/<device>.json: cpu.json for
    a CPU plan; for a GPU one, this host's GPU's file, or any GPU's where the host has none, the
    file named in the plan) and the step's shape, or None when nothing was measured. `gpu`: the
    host's GPU name (None: torch's, where it sees one). Shape: P, N, turns, tokens per turn."""
    import json
    import re

    import torch

    from ragen_lib.metrics import device_slug

    bench_dir = bench_dir or ROOT / "outputs" / "bench"
    files = sorted(bench_dir.glob("*.json")) if bench_dir.exists() else []
    files = [f for f in files if (f.stem != "cpu") == cuda]
    if cuda and gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    if cuda and gpu is not None:  # an A100's seconds are not an H100's: this GPU's file or nothing
        files = [f for f in files if f.stem == device_slug(gpu)]
    for f in files:
        data = json.loads(f.read_text())
        for row in data.get("rows", []):
            if row.get("what") == "train step: time/step":
                m = re.search(_BENCH_SHAPE, row.get("note", ""))
                shape = tuple(int(x) for x in m.groups()) if m else None
                model = data.get("header", {}).get("model", "?")
                return {
                    "s_per_step": float(row["value"]),
                    "shape": shape,
                    "model": model,
                    "file": f"{f.name} ({model})",
                }
    return None


def estimate_seconds(cfg: config.Config, bench: dict | None) -> float | None:
    """Rough training seconds of `cfg`: the measured seconds per step scaled linearly by episodes ×
    turns × tokens per turn against the measured step's shape (validation and warm-up excluded).
    None when nothing was measured, or only another model (the 135M model's seconds say nothing
    about the tiny one's)."""
    if bench is None or bench.get("model", cfg.model.name) != cfg.model.name:
        return None
    scale = 1.0
    if bench["shape"]:
        p, n, turns, tokens = bench["shape"]
        limits = cfg.rollout.limits(env_class(cfg.env.name))
        ours = cfg.train.groups * cfg.train.group_size * limits.max_turns * limits.max_new_tokens
        scale = ours / (p * n * turns * tokens)
    return bench["s_per_step"] * scale * cfg.train.steps


def plan(profile: str, *, root=None, names: list[str] | None = None, device: str | None = None) -> dict:
    """A profile's plan as data: per finding the runs, those already finished, the steps still to
    train and the disk they need; and for the whole plan the need and the free space. A running
    run holds one checkpoint, two for a moment while the next replaces it (written, then the old
    removed); a finished run keeps only what `finished_bytes` counts. Findings run one after
    another (make replicate-all), so the need is every finding's leftovers plus the largest peak."""
    root = Path(root) if root else runs.output_root(profile)
    workers = len(worker_slots(load_profile(profile)["runs_per_device"]))
    rows, to_load = [], set()
    earlier: set[str] = set()  # run folders an earlier finding of this plan trains (or has)
    for name in names or findings():
        finding, pairs = variants(name, profile)  # a number names its finding (grid_file)
        unique = {runs.run_dir(root, finding, c): c for c, _ in pairs}
        # run_grid copies a run another finding finished (or an earlier one here will): not trained twice
        shared = {
            p
            for p in unique
            if not p.exists() and (p.name in earlier or runs.finished_elsewhere(root, finding, p.name))
        }
        earlier |= {p.name for p in unique}
        todo = [c for p, c in unique.items() if not runs.stands(p, c) and p not in shared]
        for model in {c.model.name for c in todo} - to_load:  # each once, before model_size reads it:
            models.check(model)  # a hub id not cached and not on the hub was transformers' traceback
        to_load |= {c.model.name for c in todo}
        ckpt = max((checkpoint_bytes(c) for c in todo), default=0)
        judged = {runs.run_dir(root, finding, c) for c, labels in pairs if labels.get("judged")}
        cuda = any(c.model.device != "cpu" for c in todo) and (device or "cuda") != "cpu"
        bench = measured_step(cuda)
        est = [estimate_seconds(c, bench) for c in todo]
        rows.append(
            {
                "finding": finding,
                "runs": len(unique),
                "judged": len(judged),
                "pilot": len(unique) - len(judged),
                "minutes": None
                if bench is None or None in est
                else sum(est) / 60 / max(1, min(workers, len(todo))),
                "bench": None if bench is None else bench["file"],
                "done": len(unique) - len(todo) - len(shared),
                "shared": len(shared),
                "to_train": len(todo),
                "steps": sum(c.train.steps for c in todo),
                "checkpoint_bytes": ckpt,
                "peak_bytes": min(workers, len(todo)) * 2 * ckpt,
                "left_bytes": sum(finished_bytes(c) for c in todo),
            }
        )
    disk = root
    while not disk.exists():
        disk = disk.parent
    need = sum(r["left_bytes"] for r in rows) + max((r["peak_bytes"] for r in rows), default=0)
    stored = sum(r["done"] for r in rows)  # finished runs the grids will take as today's code's
    return {
        "profile": profile,
        "root": str(root),
        "workers": workers,
        "models": sorted(to_load),  # what the runs left to train will load (RAGEN_MODEL, if set)
        "findings": rows,
        "need_bytes": need,
        "free_bytes": shutil.disk_usage(disk).free,
        "stored": stored,
        "edited": revisions.unreviewed() if stored else [],  # training modules unlike TRAINING_CODE
    }


def format_plan(p: dict) -> str:
    """The plan as a table, and whether the output disk can hold it."""

    def size(b: float) -> str:
        return f"{b / 1e9:.1f} GB" if b >= 1e9 else f"{b / 1e6:.0f} MB" if b >= 1e6 else f"{b / 1e3:.0f} kB"

    cols = (
        ("runs", 5),
        ("judged", 7),
        ("pilot", 6),
        ("done", 5),
        ("to train", 9),
        ("steps", 7),
        ("est. min", 9),
        ("checkpoint", 11),
        ("peak", 9),
        ("left", 9),
    )

    def minutes(m):
        return "—" if m is None else f"{m:.0f}"

    head = f"{'finding':<26} " + " ".join(f"{c:>{w}}" for c, w in cols)
    trains = f"; model {models.describe(p['models'])}" if p["models"] else ""
    lines = [
        f"plan of profile {p['profile']} → {p['root']} ({p['workers']} worker(s) per grid){trains}",
        head,
    ]
    for r in p["findings"]:
        lines.append(
            f"{r['finding']:<26} {r['runs']:>5} {r['judged']:>7} {r['pilot']:>6} {r['done']:>5} "
            f"{r['to_train']:>9} {r['steps']:>7} {minutes(r['minutes']):>9} "
            f"{size(r['checkpoint_bytes']):>11} {size(r['peak_bytes']):>9} {size(r['left_bytes']):>9}"
        )
    todo = sum(r["to_train"] for r in p["findings"])
    known = [r["minutes"] for r in p["findings"] if r["to_train"]]
    benches = sorted({r["bench"] for r in p["findings"] if r["bench"]})
    if known and all(m is not None for m in known):
        est = (
            f"estimated {sum(known):.0f} min of training (outputs/bench/{', '.join(benches)}: the measured "
            "s/step scaled by episodes × turns × tokens; validation and warm-ups not included)"
        )
    elif todo and p["models"] == [models.TINY_RANDOM]:  # `make bench` measures the embedded model
        est = "estimated minutes: none (the tiny random model is not benchmarked; smoke takes minutes)"
    elif todo:
        est = (
            f"estimated minutes: no measurement of {', '.join(p['models'])} here (`make bench` measures "
            "the embedded model, or RAGEN_MODEL's when it is set, on this machine)"
        )
    else:
        est = "nothing left to train"
    shared = sum(r["shared"] for r in p["findings"])
    if shared:
        lines.append(
            f"{shared} runs share their config with another finding's: trained once, then copied "
            "(not counted in 'to train')"
        )
    lines.append(
        f"{todo} runs, {sum(r['steps'] for r in p['findings'])} steps to train; disk needed "
        f"{size(p['need_bytes'])} (largest peak + what finished runs keep), free {size(p['free_bytes'])}"
    )
    lines.append(est)
    lines.append(
        f"{sum(r['judged'] for r in p['findings'])} runs judged, {sum(r['pilot'] for r in p['findings'])} "
        "pilot runs (figures and numbers, no verdict)"
    )
    if p.get("edited"):  # here, on the terminal: a headless replication prints the grids' inside notebooks
        lines.append(revisions.unreviewed_note(p["edited"], p["stored"]))
    return "\n".join(lines)
