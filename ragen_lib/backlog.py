"""The runs a profile has left to train, in the order that finishes its judged studies soonest, and
training those that fit a time budget: how the `quick` plan accumulates over short GPU leases.

A borrowed GPU host gives this project about 15 minutes of device time at a time, and the `quick`
plan needs hours (README, "Results so far"). A finished run is small (config.yaml, metrics.jsonl,
samples.jsonl, DONE: `experiments.finished_bytes`, about 26 MB for the whole plan) and any machine's
grid reuses it, so the plan can be trained a lease at a time:

    python -m ragen_lib backlog quick --train 480     # on the GPU host: what fits in 480 s

The finished runs come back in the evidence archive (`scripts/gpu_evidence.sh` with BACKLOG_S; no
checkpoints), are committed under outputs/<profile>/runs/, and travel with the next lease's working
tree, where they are reused. On any machine, `make replicate-all PROFILE=quick RAGEN_TRAIN=stored`
then renders every notebook from the stored runs alone; a row whose arms lack a planned run reads
INCONCLUSIVE "not trained" and names them (`analysis.judge`).

Order (`backlog`): the judged studies first (a profile's `judged` entries; with `judged: all`, each
finding is one study), the one with the least training left first, so that a lease completes a study
rather than starting several (a verdict needs every seed of its arms); a study's runs seed by seed
(seed 0 of each arm, then seed 1: a study cut short holds paired seeds); then the pilot runs in
notebook order. A run two findings share is listed once, under the first (the other's grid copies it).

Budget (`next_run`): the first run in that order whose estimate, times MARGIN (EXTRAPOLATED_MARGIN
for an estimate from another env's or algorithm's runs or from `make bench`), fits the seconds left;
one that does not is passed over for a later, shorter one. A run cut off by the end of a lease is
lost with the host (its checkpoint does not come back), so no run starts that is not expected to
finish. Runs train one at a time, in this process (on an H100 two at once gave 1.24x
on Bandit and less than one at a time on a cold host: outputs/gpu-evidence/2026-11-27-h100-2).

Estimates (`Estimator`): the logged step seconds of stored finished runs of the same env and
algorithm, per update, on this device (else on any device of its class: GPU or CPU), scaled by
`work` (episodes and validation episodes × turns × tokens per turn); else of any stored run on it,
scaled the same way; else `make bench`'s train step (`experiments.estimate_seconds`); plus the setup
the runs chosen the same way logged (`time/setup`: load, warm-up, A*-PO's stage 1), else SETUP_S.
None (unknown) when nothing was measured: then the budget's first run is the backlog's smallest,
which measures the rest, where the budget holds at least SETUP_S × MARGIN; after that, a run with no
estimate is not started. Not counted: checkpoint writes (every train.checkpoint_every steps, outside
`time/step`: 3.8 GB each in quick), which the margin has to cover; `--no-checkpoints` (what
`scripts/gpu_evidence.sh` passes) writes none, on a host whose checkpoints never come back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from pathlib import Path

from ragen_lib import config, experiments, runs
from ragen_lib.envs import env_class

SETUP_S = 60.0
"""Seconds a run takes before its first step where no stored run logged `time/setup`: the model load
(10 s on an H100 from the converted cache: outputs/gpu-check) and the format warm-up's 10 steps, which
no GPU has timed yet. A guess, used only until the lease's first run has measured it."""


MARGIN = 1.15
"""A run starts only where this many times its estimate fits what is left: the estimate is a mean
over other runs' steps, and a run that overruns the lease is lost whole."""

EXTRAPOLATED_MARGIN = 2.0
"""The margin for an estimate from another env's or algorithm's runs, or from `make bench`'s step:
`work` does not see prompt lengths or an algorithm's extra passes (on a CPU a Sokoban PPO run
estimated from Bandit's took 63 s against 31 s, and a GRPO one 69 s against 47 s)."""

VAL_WEIGHT = 0.5
"""A validation episode's cost in training episodes: a rollout without the forward passes and the
update (the rollout was 57% of Sokoban's quick step on an H100: outputs/gpu-evidence/2026-11-27-h100-2).
A judged run validates more than a pilot (128 states every 5 updates against 64 every 10), and the
pilot is often what measured its speed."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One run of the backlog: the finding whose grid plans it first, its config and folder, the
    studies it serves (judged entries; "pilot" for none), its estimated seconds (None: unknown), and
    whether that estimate is extrapolated (from another env's or algorithm's runs, or the bench)."""

    finding: str
    cfg: config.Config
    path: Path
    studies: tuple[str, ...]
    judged: bool
    seconds: float | None
    extrapolated: bool = False

    @property
    def needs(self) -> float | None:
        """The seconds a budget must have left to start it: the estimate times its margin."""
        if self.seconds is None:
            return None
        return self.seconds * (EXTRAPOLATED_MARGIN if self.extrapolated else MARGIN)

    def describe(self) -> str:
        return f"{self.finding}/{self.path.name}"


def work(cfg: config.Config) -> float:
    """An update's size as the estimates scale it: (episodes + validation episodes per update, each
    VAL_WEIGHT) × turns × new tokens per turn (`experiments.estimate_seconds` scales `make bench`'s
    step, which has no validation, by the same measure without them)."""
    t, limits = cfg.train, cfg.rollout.limits(env_class(cfg.env.name))
    validation = VAL_WEIGHT * t.val_size / t.val_every if t.val_every else 0.0
    return (t.groups * t.group_size + validation) * limits.max_turns * limits.max_new_tokens


def _is_gpu(device: str) -> bool:
    return device != "cpu"


class Estimator:
    """Seconds a config's run takes on `device` (a `metrics.device_name`), from the runs stored under
    `root` and `make bench`'s measured step (module docstring, "Estimates")."""

    def __init__(self, root: Path, device: str, bench: dict | None):
        self.device, self.bench = device, bench
        # (device, env, algo) -> [seconds per update per unit of `work`], [setup seconds]
        self.rates: dict[tuple[str, str, str], list[float]] = {}
        self.setups: dict[tuple[str, str, str], list[float]] = {}
        for done in sorted(Path(root).glob(f"runs/*/*/{runs.DONE}")):
            self._add(done.parent)

    def _add(self, path: Path) -> None:
        info = runs.read_done(path)
        if (path / runs.REUSED_FROM).exists():
            return  # a copy of a run another finding trained: measured once, there
        try:
            run = runs.Run(path)
            cfg, rows = config.from_dict(run.saved_config()), run.metrics()
        except (OSError, ValueError, runs.CorruptRunError):
            return  # the run's own grid names what is wrong with it; here it only measures nothing
        steps = [r["time/step"] for r in rows if isinstance(r.get("time/step"), int | float)]
        if info is None or not steps:
            return
        key = (str(info.get("device") or "unrecorded"), cfg.env.name, cfg.algo.name)
        # per update, not per logged step: an online-k row holds one rollout and k updates
        self.rates.setdefault(key, []).append(sum(steps) / cfg.train.steps / work(cfg))
        setup = rows[0].get("time/setup") if rows[0].get("step") == 0 else None
        if isinstance(setup, int | float) and math.isfinite(setup):
            self.setups.setdefault(key, []).append(float(setup))

    def _median(self, table: dict, env: str, algo: str) -> tuple[float | None, bool]:
        """The median of `table`'s values for the first tier that has any: this device and (env,
        algo), its class and (env, algo), this device, its class; and whether it came from another
        env or algorithm (None, True: nothing)."""
        mine = _is_gpu(self.device)
        tiers = (
            lambda d, e, a: d == self.device and (e, a) == (env, algo),
            lambda d, e, a: _is_gpu(d) == mine and (e, a) == (env, algo),
            lambda d, e, a: d == self.device,
            lambda d, e, a: _is_gpu(d) == mine,
        )
        for n, match in enumerate(tiers):
            found = [v for key, vs in table.items() if match(*key) for v in vs]
            if found:
                return statistics.median(found), n >= 2
        return None, True

    def estimate(self, cfg: config.Config) -> tuple[float | None, bool]:
        """(seconds, whether extrapolated: from another env's or algorithm's runs, or the bench)."""
        setup = self._median(self.setups, cfg.env.name, cfg.algo.name)[0]  # A*-PO's holds stage 1
        setup = SETUP_S if setup is None else setup
        rate, other = self._median(self.rates, cfg.env.name, cfg.algo.name)
        if rate is not None:
            return rate * work(cfg) * cfg.train.steps + setup, other
        steps = experiments.estimate_seconds(cfg, self.bench)
        return (None, True) if steps is None else (steps + setup, True)


def _study(finding: str, entry: dict | None) -> str:
    """The judged study a grid point serves, from the profile entry it matched
    (`experiments.judged_variants`): named by finding and `where`; the finding itself where the
    profile judges everything ({}); "pilot" for a point the profile does not judge (None)."""
    if entry is None:
        return "pilot"
    where = ", ".join(f"{k}={v}" for k, v in (entry.get("where") or {}).items())
    return f"{finding} ({where})" if where else finding


def backlog(profile: str, root=None, *, device: str | None = None) -> tuple[list[Item], dict]:
    """(the profile's runs not stored, in training order; each judged study's runs stored and
    planned, {study: (stored, planned)}). `device`: whose speed the estimates are for (a
    `metrics.device_name`; default this machine's)."""
    import torch

    from ragen_lib import metrics

    root = Path(root) if root else runs.output_root(profile)
    cuda = torch.cuda.is_available() if device is None else _is_gpu(device)
    device = device or metrics.device_name("cuda" if cuda else "cpu")
    estimate = Estimator(root, device, experiments.measured_step(cuda, gpu=device if cuda else None))
    planned: dict[str, Item] = {}  # run folder name -> its item (the first finding that plans it)
    serves: dict[str, list[str]] = {}
    counts: dict[str, dict[str, bool]] = {}  # study -> {run folder name: stored}
    for name in experiments.findings():
        finding, triples = experiments.judged_variants(name, profile)
        for cfg, _, entry in triples:
            path = runs.run_dir(root, finding, cfg)
            study = _study(finding, entry)
            done = runs.stands(path, cfg) or runs.finished_elsewhere(root, finding, path.name) is not None
            if study != "pilot":  # by folder: two grid points can be one run
                counts.setdefault(study, {})[path.name] = done
            if done:
                continue
            serves.setdefault(path.name, [])
            if study not in serves[path.name]:
                serves[path.name].append(study)
            if path.name not in planned:
                planned[path.name] = Item(finding, cfg, path, (), False, *estimate.estimate(cfg))
    items = [
        dataclasses.replace(i, studies=tuple(serves[n]), judged=any(s != "pilot" for s in serves[n]))
        for n, i in planned.items()
    ]
    return _ordered(items), {k: (sum(v.values()), len(v)) for k, v in counts.items()}


def _ordered(items: list[Item]) -> list[Item]:
    """The judged studies, least training left first (estimated seconds where every run has one,
    else steps × `work`), each seed by seed; then the pilot runs in the order given."""
    known = all(i.seconds is not None for i in items)

    def cost(i: Item) -> float:
        return i.seconds if known else i.cfg.train.steps * work(i.cfg)

    position = {id(i): n for n, i in enumerate(items)}
    studies: dict[str, list[Item]] = {}
    for i in items:
        for s in i.studies:
            if s != "pilot":
                studies.setdefault(s, []).append(i)
    out: list[Item] = []
    queued: set[int] = set()
    while studies:
        left = {s: [i for i in members if id(i) not in queued] for s, members in studies.items()}
        first = min(left, key=lambda s: sum(cost(i) for i in left[s]))  # ties: the earlier study
        for i in sorted(left.pop(first), key=lambda i: (i.cfg.train.seed, position[id(i)])):
            out.append(i)
            queued.add(id(i))
        studies = {s: m for s, m in studies.items() if s in left}
    return out + [i for i in items if id(i) not in queued]


def next_run(
    items: list[Item], seconds_left: float, skip: set[str] = frozenset(), *, first: bool = True
) -> Item | None:
    """The first item not in `skip` (run folder names) whose estimate, times its margin (`Item.needs`),
    fits `seconds_left`; where no item has an estimate and this is the `first` run of a budget of at
    least SETUP_S × MARGIN, the smallest (fewest steps × `work`: a 30-step pilot before a 150-step
    study run, so a lease that knows nothing spends little to learn its speed); None when nothing
    fits (or nothing is known to)."""
    todo = [i for i in items if i.path.name not in skip]
    if first and todo and all(i.seconds is None for i in todo):
        if seconds_left < SETUP_S * MARGIN:  # no run loads, warms up and trains in less
            return None
        return min(todo, key=lambda i: i.cfg.train.steps * work(i.cfg))  # the first of equals
    return next((i for i in todo if i.needs is not None and i.needs <= seconds_left), None)


def beyond(items: list[Item], budget_s: float) -> list[Item]:
    """The items whose estimate, with its margin, exceeds the whole of `budget_s`: no lease of that
    length starts them, however many come (a run cut off is lost with the host, checkpoint and
    all), so they need a longer budget or a profile of shorter runs."""
    return [i for i in items if i.needs is not None and i.needs > budget_s]


def format_backlog(items: list[Item], studies: dict[str, tuple[int, int]], profile: str) -> str:
    """The backlog as a table (order, run, steps, estimated and cumulative minutes, the studies it
    serves by number) under each judged study's stored and planned runs."""

    def minutes(s, extrapolated=False):
        return "?" if s is None else f"{s / 60:.1f}" + ("*" if extrapolated else "")

    number = {s: f"S{n}" for n, s in enumerate(studies, 1)}
    lines = [f"backlog of profile {profile}: judged studies first, the least training left first"]
    for study, (stored, planned) in studies.items():
        left = "complete" if stored == planned else f"{planned - stored} to train"
        lines.append(f"  {number[study]} {study}: {stored} of {planned} runs stored ({left})")
    lines.append(f"{'#':>3}  {'run':<60} {'steps':>5} {'est. min':>8} {'total':>7}  studies")
    total: float | None = 0.0
    for n, i in enumerate(items, 1):
        total = None if total is None or i.seconds is None else total + i.seconds
        serves = ", ".join(number.get(s, s) for s in i.studies)
        lines.append(
            f"{n:>3}  {i.describe():<60} {i.cfg.train.steps:>5} {minutes(i.seconds, i.extrapolated):>8} "
            f"{minutes(total):>7}  {serves}"
        )
    if not items:
        lines.append("  nothing left to train: every run of the plan is stored")
    if any(i.extrapolated and i.seconds is not None for i in items):
        lines.append(
            f"  *: estimated from another env's or algorithm's runs, or `make bench`: --train starts "
            f"it only where {EXTRAPOLATED_MARGIN:g}× the estimate fits (else {MARGIN:g}×)"
        )
    return "\n".join(lines)


def train(
    profile: str, budget_s: float, root=None, *, progress: bool = True, checkpoints: bool = True
) -> dict:
    """Train the backlog's runs in order, one at a time, each only where its estimate fits what is
    left of `budget_s` (re-estimated after every run, from the runs it finished). A run that fails
    is named and passed over. `checkpoints=False`: the runs write none (`trainer.train`), on a host
    that keeps nothing: a run the lease cuts off is lost either way. Returns {"trained": [...],
    "failed": [...], "left": [...]} (run folder paths relative to the store, what was left with its
    estimate, and `beyond`'s runs: too long for any budget of `budget_s`)."""
    from ragen_lib.workers import run_grid, train_quietly

    train_fn = functools.partial(train_quietly, checkpoints=checkpoints)

    root = Path(root) if root else runs.output_root(profile)
    t0 = time.monotonic()
    trained, failed = [], []
    while True:
        left = budget_s - (time.monotonic() - t0)
        items, _ = backlog(profile, root)
        item = next_run(items, left, {Path(f).name for f in failed}, first=not (trained or failed))
        if item is None:
            break
        est = f"{item.seconds:.0f} s" if item.seconds is not None else "unknown: nothing measured here yet"
        print(f"[backlog] {left:.0f} s left: training {item.describe()} (estimated {est})", flush=True)
        try:
            run_grid(root, item.finding, [item.cfg], train_fn, progress=progress)
        except RuntimeError as e:  # run_grid printed the traceback; the lease goes on with the next run
            print(f"[backlog] {item.describe()} failed: {e}", flush=True)
        # Not stored after its grid (failed, or stopped without a DONE): passed over from now on,
        # or the loop would pick it again.
        if runs.stands(item.path, item.cfg):
            trained.append(item.describe())
            print(f"[backlog] finished {item.describe()}", flush=True)
        else:
            failed.append(item.describe())
    return {
        "trained": trained,
        "failed": failed,
        "left": [(i.describe(), i.seconds) for i in items],
        "beyond": [i.describe() for i in beyond(items, budget_s)],
    }
