"""Training a grid's runs: reuse the finished ones, train the rest here or in worker processes.

`run_grid(root, finding, cfgs)` is what `experiments.run_finding` calls once it has the configs;
`worker_slots` says how many runs share each device. A run reused or resumed is checked first
(`runs.stands`, `check_done`); a failed run costs only itself; a worker that dies takes no finished
work with it; Ctrl-C or SIGTERM stops the grid within seconds and leaves every started run
resumable (docs/RELIABILITY.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ragen_lib import config, models, revisions, runs


def worker_slots(runs_per_device: int) -> list[dict]:
    """One environment per grid worker: `runs_per_device` runs on each visible GPU, or on CPU that
    many runs sharing the cores (one thread pool each, so they do not oversubscribe them)."""
    import torch

    if runs_per_device < 1:
        raise ValueError(f"runs_per_device must be >= 1, got {runs_per_device}")
    # Recorded in each run's DONE (`runs_per_device`): seconds of runs that shared a device with
    # another run do not compare with seconds of one that trained alone
    sharing = {runs.SHARING_ENV: str(runs_per_device)}
    if torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        return [{"CUDA_VISIBLE_DEVICES": i, **sharing} for i in ids for _ in range(runs_per_device)]
    threads = max(1, (os.cpu_count() or 1) // runs_per_device)
    return [{"OMP_NUM_THREADS": str(threads), **sharing} for _ in range(runs_per_device)]


def train_quietly(cfg: config.Config, run, *, checkpoints: bool = True) -> None:
    """The grid's unit of work (module level, so a spawned worker can import it)."""
    from ragen_lib import trainer

    trainer.train(cfg, run, progress=False, checkpoints=checkpoints)


def run_grid(
    root,
    finding: str,
    cfgs: list[config.Config],
    train_fn=train_quietly,
    *,
    progress: bool = True,
    slots: list[dict] | None = None,
    train: bool = True,
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

    `train=False` (RAGEN_TRAIN=stored) trains nothing: the finished runs are checked and copied from
    another finding as above, and the rest are only counted (`experiments.missing_runs` names them).
    """
    from ragen_lib.progress import tqdm

    paths = [runs.run_dir(root, finding, c) for c in cfgs]
    # Identical configs share one folder: train it once (two workers on one folder would collide).
    todo, failures = [], []
    # Nothing trains with train=False: a run is then judged on the stored data alone, as `runs.load`
    # and `experiments.missing_runs` read it, not on whether its weights are the ones here.
    for path, cfg in {p: c for c, p in zip(cfgs, paths)}.items():
        src = None if path.exists() else runs.finished_elsewhere(root, finding, path.name, model=train)
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
        if not runs.stands(path, cfg, model=train):  # older code or other weights: retired where it trains
            if not _replace_outdated(path, runs.finished_elsewhere(root, finding, path.name, model=train)):
                todo.append((cfg, path))  # (`reuse_finished`)
            continue
        if (path / runs.CKPT).exists():  # a crash after its DONE; if the run is locked, its writer removes it
            with contextlib.suppress(runs.RunLockedError), runs.Run(path) as run:
                drop_stale_checkpoint(run)
    reused = len(set(paths)) - len(todo) - len(failures)
    if not train:
        if todo:
            print(
                f"{finding}: {reused} of {len(set(paths))} runs stored; {len(todo)} not trained "
                "(RAGEN_TRAIN=stored trains nothing: rows that need them read INCONCLUSIVE)"
            )
        todo = []
    for name, device in dict.fromkeys((cfg.model.name, cfg.model.device) for cfg, _ in todo):
        models.check(name, device)  # one clear error before any run starts, not one per run
    resumed = sum((path / runs.CKPT).exists() for _, path in todo)
    revisions.note_if_unreviewed(reused + resumed)
    if progress and train and reused and not todo and not failures:  # the bar stays hidden: say why
        print(f"{finding}: all {reused} runs stored and reused, none to train")
    bar = tqdm(
        total=len(todo),
        desc=f"{finding}: {reused} reused, {len(todo)} to run"
        + (f" ({resumed} resume from a checkpoint)" if resumed else ""),
        unit="run",
        disable=not progress or not todo,
    )
    with _signals_interrupt():
        if slots and len(slots) > 1 and len(todo) > 1:
            failures += _run_pool(todo, train_fn, slots, bar)
        else:
            for i, (cfg, path) in enumerate(todo):
                try:
                    _train_one(train_fn, cfg, str(path))
                except KeyboardInterrupt:
                    print(
                        f"interrupted: {path} stopped mid-run (resumable: rerun to continue); "
                        f"{len(todo) - i - 1} queued run(s) not started"
                    )
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
            if not run.done or run.outdated(model=True) is None:
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
    (`revisions`), or on other weights than its model's name loads here (`runs.other_weights`), has
    its files moved to quarantine/ and returns False: it trains again."""
    run.check_done()
    why = run.outdated(model=True)
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
    and optimizer they hold, can be freed before the next run of the grid starts (`free_memory`)."""
    e, seen = error, set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return error


def free_memory() -> None:
    """Free what the last run held before the next one starts. A process's first `models.load`
    leaves a reference cycle (a traceback from transformers' lazy import) that keeps the caller's
    frame, `trainer.train`'s, alive with its model, optimizer states and decoder pool until the
    cyclic collector happens to run: on a GPU the next run's peak memory (07's memory/peak_gb)
    would count them."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


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
        _stop_pool(pool, futures, began | _drain(started))
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


def _stop_pool(pool: ProcessPoolExecutor, futures: dict, began: set[str]) -> None:
    """Cancel the queued runs and stop the workers (SIGTERM, then SIGKILL after STOP_GRACE_S). The
    store is crash-safe, so a worker killed mid-step leaves its run resumable. `began`: the run
    folders workers reported starting, to tell the runs stopped mid-run from the queued ones."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    # Counted before the shutdown: the executor hands a run or two past the workers to its call
    # queue, where `cancel()` no longer reaches them, though no worker has started them.
    unfinished = [path for fut, (_, path) in futures.items() if not fut.done()]
    stopped = sum(str(path) in began for path in unfinished)
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
    print(
        f"grid interrupted: {len(unfinished) - stopped} queued run(s) cancelled, {stopped} stopped "
        f"mid-run, {len(procs)} worker(s) stopped; the runs stopped mid-run keep their metrics and "
        "last checkpoint and resume when you rerun"
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


#: Seconds between looks at a run another process is training (`_train_one` waits for it).
LOCK_POLL_S = 5.0


def _train_one(train_fn, cfg: config.Config, path: str) -> None:
    """Train one run holding its lock. A run another process holds (a second notebook or grid on
    the same store) is waited for, then reused when that process finished it, or resumed when it
    stopped: refused, it read as a failed run, "rerun to resume", in both grids though every run
    finished. A failure's traceback is printed here, where it happens: a worker hands the grid only
    the exception."""
    free_memory()  # the last run's, in this process (a failed one's once `_release` cut its traceback)
    waited = False
    while True:
        try:
            with runs.Run(Path(path), cfg) as run:
                if run.done and reuse_finished(run):  # finished by another process since the grid looked
                    if waited:
                        print(f"finished by the other process: {path} (reused)", flush=True)
                    return
                train_fn(cfg, run)
                return
        except runs.RunLockedError as e:
            if not waited:  # the owner's PID and how to stop it, once
                print(f"waiting, to take the run over when it ends: {e}", flush=True)
                waited = True
            time.sleep(LOCK_POLL_S)
        except Exception:
            traceback.print_exc()
            raise
