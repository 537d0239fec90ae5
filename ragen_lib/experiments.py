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

The grid's runs train in worker processes (`workers.run_grid`, `worker_slots`): `runs_per_device` per GPU,
or sharing the CPU cores. Ctrl-C (Jupyter's stop button) or SIGTERM stops a grid within seconds:
queued runs are cancelled, the workers stopped (they also die with their parent), and every
started run is left resumable. `plan(profile)` says what a profile will train and the disk it needs.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

from ragen_lib import config, files, metrics, models, revisions, runs
from ragen_lib.envs import env_class
from ragen_lib.workers import run_grid, train_quietly, worker_slots

ROOT = Path(__file__).resolve().parent.parent


VARIANTS = "variants"


def results_root(profile: str, parameters: dict | None = None) -> Path:
    """Where a notebook's verdict and figures go: `outputs/<profile>` for the profile's design, and
    for a notebook run with parameters (`papermill -p seeds ... -p overrides ...`: a researcher's
    grid) `outputs/<profile>/variants/<name>`, one folder per set of parameters, so a grid's points
    neither replace the design's verdict nor each other's. Runs stay in the one store (a variant
    reuses every run it shares with the design). The name is readable and ends in a hash of the
    parameters, which tells apart two sets that read alike once cut short."""
    root = runs.output_root(profile)
    if not parameters:
        return root
    digest = hashlib.sha256(json.dumps(parameters, sort_keys=True, default=str).encode()).hexdigest()[:8]
    flat = []
    for key, value in sorted(parameters.items()):
        items = sorted(value.items()) if isinstance(value, dict) else [(key, value)]
        flat += [f"{k}={json.dumps(v, default=str)}" for k, v in items]
    readable = re.sub(r"[^A-Za-z0-9._=+-]+", "-", "_".join(flat)).strip("-")[:60]
    return root / VARIANTS / f"{readable}-{digest}"


def notebook_parameters(seeds=None, overrides=None) -> dict:
    """A notebook's parameters as `results_root` names them: the seeds and overrides given, parsed
    from papermill's (or make's) text, those left at their defaults left out. `run_finding` and
    `make replicate` (through `plan --results-folder`) both read them here, so the executed copy
    lands in the folder the notebook writes its verdict to."""
    parsed = {"seeds": parse_seeds(seeds), "overrides": parse_overrides(overrides)}
    return {k: v for k, v in parsed.items() if v}


def default_profile() -> str:
    """quick when CUDA is present, smoke otherwise (RAGEN_PROFILE overrides)."""
    if os.environ.get("RAGEN_PROFILE"):
        return os.environ["RAGEN_PROFILE"]
    import torch

    return "quick" if torch.cuda.is_available() else "smoke"


TRAIN_ENV = "RAGEN_TRAIN"
TRAIN_MODES = ("all", "stored")


def train_mode() -> str:
    """What a notebook's grid trains, from RAGEN_TRAIN: `all` (the default) every run not stored yet;
    `stored` none: the verdicts are judged on the runs already stored (a GPU's runs brought back and
    committed, `ragen_lib.backlog`), and a row whose arms miss a run says so (INCONCLUSIVE)."""
    mode = os.environ.get(TRAIN_ENV, "").strip() or "all"
    if mode not in TRAIN_MODES:
        raise ValueError(
            f"{TRAIN_ENV}={mode!r} is not a mode{config.did_you_mean(mode, TRAIN_MODES)}: `all` trains "
            "every missing run, `stored` trains none and judges the runs stored (unset means all)"
        )
    return mode


def load_profile(profile: str, path: Path | None = None) -> dict:
    """The profile's settings from params/profiles.yaml (or `path`), checked; "profiles" lists every
    profile the file defines (a grid variant's `profiles:` must name them)."""
    path = path or ROOT / "params" / "profiles.yaml"
    data = config.read_yaml(path)
    if not isinstance(data, dict) or not data:
        raise ValueError(
            f"{path} is empty or not a mapping of profiles (smoke:, quick:, paper:, each with seeds, "
            "overrides, ...)"
        )
    if profile not in data:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(data)}")
    prof = data[profile] or {}
    if not isinstance(prof, dict):
        raise ValueError(f"profile {profile!r} in {path} is a mapping of its settings, not {prof!r}")
    valid = ("seeds", "overrides", "runs_per_device", "max_episodes_per_step", "judged")
    unknown = set(prof) - set(valid)
    if unknown:
        raise ValueError(
            f"profile {profile!r} has unknown key(s) {sorted(unknown)}; valid: {', '.join(valid)}"
        )
    cap = prof.get("max_episodes_per_step")
    # the grid files beside the profiles: the findings a judged entry may name
    findings = sorted(p.stem for p in Path(path).parent.glob("*.yaml") if p.stem != Path(path).stem)
    return {
        "seeds": parse_seeds(prof.get("seeds", [0]), f"profile {profile!r}: seeds"),
        "overrides": dict(prof.get("overrides") or {}),
        "runs_per_device": _whole(profile, path, "runs_per_device", prof.get("runs_per_device", 1)),
        "max_episodes_per_step": None
        if cap is None
        else _whole(profile, path, "max_episodes_per_step", cap, " or absent"),
        "judged": _check_judged(profile, prof.get("judged", "all"), findings),
        "profiles": list(data),
    }


def _whole(profile: str, path: Path, key: str, value, absent: str = "") -> int:
    """A profile's count setting, refused by name where it is not a whole number >= 1 (int() named
    neither the key nor the file, and cut 2.7 to 2 without a word)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"profile {profile!r}: {key} must be a whole number >= 1{absent}, got {value!r} ({path})"
        )
    return value


def _check_judged(profile: str, judged, findings: list[str]):
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
        if findings and entry["finding"] not in findings:  # its study would run as a pilot, unsaid
            raise ValueError(
                f"profile {profile!r}: judged entry names finding {entry['finding']!r}, which has no grid "
                f"file {entry['finding']}.yaml{config.did_you_mean(str(entry['finding']), findings)}; "
                f"findings: {', '.join(findings)}"
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
        parsed = _json_mapping(overrides)
        if parsed is None:  # not JSON: YAML ('{train.steps: 50}'), which reads 2e-6 as a string
            parsed = config.read_yaml("overrides", overrides)
        if not isinstance(parsed, dict):
            raise ValueError(
                "overrides must be a mapping of dotted keys, e.g. "
                f"'{{\"train.steps\": 50}}', got {overrides!r}"
            )
        return parsed
    if not isinstance(overrides, dict):
        raise ValueError(f"overrides must be a mapping of dotted keys or its JSON text, got {overrides!r}")
    return dict(overrides)


def _json_mapping(text: str):
    """`text` as JSON, what `papermill -p overrides '{"train.actor_lr": 2e-6}'` passes, or None where
    it is not JSON. Read as YAML, that 2e-6 is the string "2e-6" (YAML 1.1 floats need a dot): the
    run still trains at 2e-6, but the verdict named a string and a variant's folder told 2e-6 from
    2.0e-6. A key given twice is refused, as YAML's reader refuses it."""

    def once(pairs):
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"overrides: {', '.join(twice)} given twice; give each key once")
        return dict(pairs)

    try:
        return json.loads(text, object_pairs_hook=once)
    except json.JSONDecodeError:
        return None


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


def check_int(name: str, value, minimum: int) -> int:
    """A notebook's integer parameter (`papermill -p seed 3`), or an error that names it and the fix
    when it is not an integer >= `minimum` (numpy would say "expected non-negative integer" and
    name neither)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"notebook parameter {name}={value!r}: it takes an integer >= {minimum} "
            f"(papermill: -p {name} {max(minimum, 1)})"
        )
    return value


def variants(
    finding: str | Path, profile: str, *, seeds: list[int] | None = None, overrides: dict | str | None = None
) -> tuple[str, list[tuple[config.Config, dict]]]:
    """(finding name, [(Config, labels)]) for every grid point × seed of the profile.

    `overrides` (dotted keys, applied to every run) may be a mapping or its JSON text (what
    `papermill -p overrides '{"train.steps": 50}'` passes); `seeds` a list or its JSON text.
    Overriding a key the grid varies, or train.seed (use `seeds`), is an error: the variant would
    silently win."""
    name, triples = judged_variants(finding, profile, seeds=seeds, overrides=overrides)
    return name, [(cfg, labels) for cfg, labels, _ in triples]


def judged_variants(
    finding: str | Path, profile: str, *, seeds: list[int] | None = None, overrides: dict | str | None = None
) -> tuple[str, list[tuple[config.Config, dict, dict | None]]]:
    """`variants`, each with the profile's judged entry its grid point matched (`judged_entry`: {}
    where the profile judges everything, None for a pilot point): the study it serves (`backlog`)."""
    path = grid_file(finding)
    spec = config.read_yaml(path)
    if spec is None or spec == {}:  # it trained one run of the default config, without a word
        raise ValueError(f"{path} is empty: a grid file needs base and/or grid (and may have extra)")
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
    if isinstance(grid, dict):  # one value, not a list: iterated as letters ('sokoban' → 's', 'o', …)
        empty = [k for k, v in grid.items() if isinstance(v, list) and not v]
        if empty:  # the product is empty: no run, and the notebook said nothing was left to train
            raise ValueError(
                f"{path}: grid key {empty[0]} has no values: give at least one, e.g. {empty[0]}: [x]"
            )
        single = {k: v for k, v in grid.items() if not isinstance(v, list)}
        if single:
            k, v = next(iter(single.items()))
            raise ValueError(
                f"{path}: grid key(s) {', '.join(single)} take a list of values (e.g. {k}: [{v}]); "
                "a value every run shares belongs under base"
            )
    elif not isinstance(grid, list):
        raise ValueError(f"{path}: grid is a mapping {{key: [values]}} or a list of variants, not {grid!r}")
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
            f"overrides set {', '.join(clash)}, which {path.name} varies per run"
            + (f" ({'; '.join(values)})" if values else "")
            + ": the grid's values would win and the override would be ignored. Remove it"
            + (" (pass seeds=[...] for train.seed)" if "train.seed" in clash else "")
            + f", or edit the grid in {path}."
        )
    _check_labels(path, variants_)
    matched: set[int] = set()
    out = []
    for point in variants_:
        only = point.pop("profiles", None)  # a variant for some profiles only (e.g. the paper's full table)
        if only is not None:
            only = only if isinstance(only, list) else [only]  # `profiles: paper` matched by substring
            wrong = [p for p in only if p not in prof["profiles"]]
            if wrong:  # a misspelt name dropped the variant from every profile, unsaid
                raise ValueError(
                    f"{path}: a variant has profiles: {only!r}, and {wrong[0]!r} is not a profile"
                    f"{config.did_you_mean(str(wrong[0]), prof['profiles'])}; profiles: "
                    f"{', '.join(prof['profiles'])} (a list of them)"
                )
            if profile not in only:
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
            capped = cap_batch(merged, prof["max_episodes_per_step"])
            # the cap shrinks the profile's grids, never a value the caller set: that would train
            # another batch than asked for, without a word
            mine = sorted(
                k for k in ("train.groups", "train.group_size") if k in overrides and capped[k] != merged[k]
            )
            if mine:
                raise ValueError(
                    f"overrides set {', '.join(f'{k}={overrides[k]}' for k in mine)}, but profile "
                    f"{profile!r} caps a step at {prof['max_episodes_per_step']} episodes "
                    "(max_episodes_per_step in params/profiles.yaml) and would train "
                    f"{capped['train.groups']} groups × {capped['train.group_size']} instead: lower "
                    "train.groups × train.group_size to the cap, or use a profile without one (quick, paper)"
                )
            try:
                cfg = config.from_dict({}, capped)
            except ValueError as e:  # a typo in the grid file, the profile or the overrides: name them
                given = f", or the overrides given ({', '.join(sorted(overrides))})" if overrides else ""
                raise ValueError(
                    f"{e} (from {path}'s base or grid point {dotted or labels}, params/profiles.yaml's "
                    f"{profile}{given})"
                ) from None
            out.append((cfg, labels, entry if labels["judged"] else None))
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
    # Settings by their name with the separators squeezed out: `steps`, `train_steps`, `envname`
    # (`env.name` written without its dot or an underscore) all read as one.
    squeeze = lambda s: re.sub(r"[_\-]", "", s).lower()  # noqa: E731
    settings: dict[str, str] = {}
    for section, cls in config.SECTIONS.items():
        for f in dataclasses.fields(cls):
            settings[squeeze(section + f.name)] = f"{section}.{f.name}"
            settings.setdefault(squeeze(f.name), f"{section}.{f.name}")
    for point in variants_:
        for key in point:
            if "." in key or key == "profiles":
                continue
            if key in config.SECTIONS:
                guess = f"{key}.<field>: <value>"
            elif squeeze(key) in settings:
                guess = settings[squeeze(key)]
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
    labels, and `profile`; `df.attrs` holds profile, finding, root, wall_s, the runs planned and
    those `missing`, the notebook's `parameters` where given, and `results`, the folder its verdict
    and figures go to (`results_root`).
    """
    import pandas as pd

    check_parameters()
    profile = profile or default_profile()
    mode = train_mode()  # a misspelt RAGEN_TRAIN stops here, before anything trains
    parameters = notebook_parameters(seeds, overrides)  # papermill's text, parsed once
    seeds, overrides = parameters.get("seeds"), parameters.get("overrides")
    finding, pairs = variants(finding, profile, seeds=seeds, overrides=overrides)
    root_given = bool(root)
    root = Path(root) if root else runs.output_root(profile)
    blocked = files.unwritable(root) if mode == "all" else None
    if blocked:  # else every run of the grid failed on it, a traceback each, then "rerun to resume"
        raise ValueError(
            f"the run store {root} cannot be made here: {blocked}. Point "
            f"{'root' if root_given else 'RAGEN_OUTPUTS'} at a folder this user can write"
        )
    cfgs = [c for c, _ in pairs]
    t0 = time.perf_counter()
    slots = worker_slots(load_profile(profile)["runs_per_device"])
    run_grid(root, finding, cfgs, train_quietly, progress=progress, slots=slots, train=mode == "all")
    wanted = grid_labels(root, finding, pairs)
    df = runs.load(root, finding, run_ids=set(wanted))  # other grids' leftovers are not even read
    df = label_rows(df, wanted)
    missing = missing_runs(root, finding, pairs)
    # A store with none of a grid's runs still has its config and label columns, for a notebook to
    # select on, and, empty, the metrics' columns, for its tables and figures to read (a frame with
    # runs keeps the columns they logged: 07 reads a missing one as "none"). Added in one concat:
    # one at a time, a hundred of them fragment the frame (pandas' PerformanceWarning).
    absent = {c: pd.Series(dtype=object) for c in dict.fromkeys(k for m in missing for k in m) if c not in df}
    if df.empty:
        absent |= {c: pd.Series(dtype=float) for c in metrics.METRICS if c not in df and c not in absent}
    if absent:
        df = pd.concat([df, pd.DataFrame(absent)], axis=1)
    df["profile"] = profile
    # the notebook's parameters where given: its verdict and REPORT.md name them, and its verdict
    # and figures go to a folder of their own (`results`), never over the profile's design's
    df.attrs.update(
        profile=profile,
        finding=finding,
        parameters=parameters,
        results=str(results_root(profile, parameters)),
        wall_s=time.perf_counter() - t0,
        root=str(root),
        planned=len(wanted),
        missing=missing,  # `analysis.decide` hands it to every row
    )
    return df


def label(df, column: str, fn) -> None:
    """`df[column] = fn(row)` for each row of a notebook's frame, and for each of its grid's runs not
    stored (`df.attrs["missing"]`): a verdict's arm selected on a label the notebook derives (05's
    `variant`) then finds the runs it lacks, where a run without the label could be any arm's. A
    column even with no run stored (`result_type="reduce"`: pandas would make an empty frame)."""
    import pandas as pd

    df[column] = df.apply(fn, axis=1, result_type="reduce")
    for run in df.attrs.get("missing") or []:
        run[column] = fn(pd.Series(run))


def missing_runs(root, finding: str, pairs) -> list[dict]:
    """The grid points of `pairs` whose run is not stored finished (by today's code: `runs.stands`),
    each as the columns `runs.load` would give its rows (run_id, the labels, cfg.<dotted>), so an
    arm's selector finds the runs it lacks. Empty after a grid that trained everything; with
    RAGEN_TRAIN=stored, what that replication could not judge. Plain records, not a frame: pandas
    compares frames' attrs when it concatenates them, and a frame there cannot be compared."""
    out = []
    for cfg, labels in pairs:
        path = runs.run_dir(root, finding, cfg)
        if not runs.stands(path, cfg, model=False):  # the store alone, as `runs.load` reads it
            out.append({"run_id": path.name, **labels, **runs.config_columns(cfg.to_dict())})
    return out


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
    import re
    import warnings

    import torch

    from ragen_lib.bench import report
    from ragen_lib.metrics import device_slug

    bench_dir = bench_dir or ROOT / "outputs" / "bench"
    files = sorted(bench_dir.glob("*.json")) if bench_dir.exists() else []
    files = [f for f in files if (f.stem != "cpu") == cuda]
    if cuda and gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    if cuda and gpu is not None:  # an A100's seconds are not an H100's: this GPU's file or nothing
        files = [f for f in files if f.stem == device_slug(gpu)]
    for f in files:
        try:
            data = report.read(f)
        except (OSError, ValueError) as e:
            # Torn (a bench killed mid-write before reports were written whole) or edited: the plan
            # goes on without its figure, saying so, rather than failing replicate-all.
            msg = f"{f} is not a bench report ({e}): its step time is not used; rerun `make bench`"
            warnings.warn(msg, stacklevel=2)
            continue
        for row in data["rows"]:
            if row.get("what") == "train step: time/step":
                m = re.search(_BENCH_SHAPE, row.get("note", ""))
                shape = tuple(int(x) for x in m.groups()) if m else None
                model = data["header"].get("model", "?")
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


def plan(
    profile: str,
    *,
    root=None,
    names: list[str] | None = None,
    device: str | None = None,
    seeds: list[int] | None = None,
    overrides: dict | None = None,
) -> dict:
    """A profile's plan as data: per finding the runs, those already finished, the steps still to
    train and the disk they need; and for the whole plan the need and the free space. `seeds`,
    `overrides`: a notebook's parameters (`make replicate SEEDS=... OVERRIDES=...`). A running
    run holds one checkpoint, two for a moment while the next replaces it (written, then the old
    removed); a finished run keeps only what `finished_bytes` counts. Findings run one after
    another (make replicate-all), so the need is every finding's leftovers plus the largest peak."""
    root = Path(root) if root else runs.output_root(profile)
    workers = len(worker_slots(load_profile(profile)["runs_per_device"]))
    rows, to_load = [], set()
    earlier: set[str] = set()  # run folders an earlier finding of this plan trains (or has)
    # With RAGEN_TRAIN=stored the grids judge the stored runs as they are, weights unchecked (as
    # `run_grid(train=False)`): so does the plan, which then fingerprints no model either.
    weights = train_mode() == "all"
    for name in names or findings():
        # a number names its finding (grid_file)
        finding, pairs = variants(name, profile, seeds=seeds, overrides=overrides)
        unique = {runs.run_dir(root, finding, c): c for c, _ in pairs}
        # run_grid copies a run another finding finished (or an earlier one here will): not trained twice
        shared = {
            p
            for p in unique
            if not p.exists()
            and (p.name in earlier or runs.finished_elsewhere(root, finding, p.name, model=weights))
        }
        earlier |= {p.name for p in unique}
        todo = [c for p, c in unique.items() if not runs.stands(p, c, model=weights) and p not in shared]
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
        "train": train_mode(),
        # a real model's runs left to train and no GPU to train them on: days on a CPU, unsaid
        "cpu_only": sum(r["steps"] for r in rows) > 0
        and any(m != models.TINY_RANDOM for m in to_load)
        and not _cuda_here(device),
    }


def _cuda_here(device: str | None) -> bool:
    import torch

    return device != "cpu" and torch.cuda.is_available()


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
        est = (
            "estimated minutes: none (the tiny random model is not benchmarked; smoke's eight "
            "notebooks took 10-26 min on 2 CPU cores)"
        )
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
    if p.get("cpu_only"):
        lines.append(
            f"note: no CUDA GPU here: these {sum(r['steps'] for r in p['findings'])} steps of "
            f"{', '.join(p['models'])} would train on the CPU (`make check-learning`'s 12 Bandit steps "
            "take about 30 min on 2 cores); PROFILE=smoke proves the pipeline in minutes"
        )
    asked = os.environ.get(models.MODEL_ENV)
    if asked and p["models"] and asked not in p["models"]:  # smoke's configs name tiny-random
        lines.append(
            f"{models.MODEL_ENV}={asked} is not used here: profile {p['profile']}'s configs name their "
            f"model ({', '.join(p['models'])}); it applies where model.name is left out (quick, paper)"
        )
    lines.append(
        f"{sum(r['judged'] for r in p['findings'])} runs judged, {sum(r['pilot'] for r in p['findings'])} "
        "pilot runs (figures and numbers, no verdict)"
    )
    if p.get("train") == "stored" and todo:
        lines.append(
            f"{TRAIN_ENV}=stored: nothing trains; the notebooks judge the stored runs, and the rows that "
            f"need one of the {todo} runs above read INCONCLUSIVE (not trained). "
            f"`python -m ragen_lib backlog {p['profile']}` lists them in training order"
        )
    if p.get("edited"):  # here, on the terminal: a headless replication prints the grids' inside notebooks
        lines.append(revisions.unreviewed_note(p["edited"], p["stored"]))
    return "\n".join(lines)
