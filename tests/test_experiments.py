"""Experiments: grid files, profiles, variants, the plan, and training a grid in worker processes
(reuse, failures, interrupts)."""

import functools
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest

from ragen_lib import config, experiments, models, runs, workers
from ragen_lib.analysis import reporting
from ragen_lib.runs import Run

CFG = config.from_dict({"algo": {"name": "starpo-ppo"}, "env": {"name": "bandit"}, "train": {"steps": 3}})
ENV = {**os.environ, "PYTHONPATH": os.getcwd()}


def seeds(*values: int) -> list[config.Config]:
    return [config.from_dict(CFG.to_dict(), {"train.seed": s}) for s in values]


def test_points_product_and_list():
    grid = experiments.points({"algo.name": ["a", "b"], "train.seed": [0, 1]})
    assert grid == [
        {"algo.name": "a", "train.seed": 0},
        {"algo.name": "a", "train.seed": 1},
        {"algo.name": "b", "train.seed": 0},
        {"algo.name": "b", "train.seed": 1},
    ]
    assert experiments.points([{"algo.name": "apo"}, {"study": "x"}]) == [
        {"algo.name": "apo"},
        {"study": "x"},
    ]


def test_every_finding_name_is_its_file_notebook_and_grid(tmp_path):
    """One name per finding: params/<name>.yaml, notebooks/<name>.py, and the notebook asks for it."""
    root = experiments.ROOT
    for path in sorted((root / "params").glob("[0-9][0-9]_*.yaml")):
        name, profile_points = experiments.variants(path.stem, "smoke")
        assert name == path.stem and profile_points
        notebook = (root / "notebooks" / f"{name}.py").read_text()
        assert f'experiments.run_finding("{name}"' in notebook
    bad = tmp_path / "x.yaml"
    bad.write_text("finding: x\nbase: {}\n")
    with pytest.raises(ValueError, match="file's name is the finding's name"):
        experiments.variants(bad, "smoke")
    with pytest.raises(FileNotFoundError, match="findings: 01_instability"):
        experiments.variants("01_instabilty", "smoke")


def test_a_grid_value_not_in_a_list_and_a_grid_typo_name_the_grid_file(tmp_path):
    """`grid: {env.name: sokoban}` was iterated as letters ("unknown env 's'"), a number raised
    "'float' object is not iterable"; a misspelt key's error did not say which file held it."""
    grid = tmp_path / "g.yaml"
    grid.write_text("grid: {env.name: sokoban, train.steps: [3]}\n")
    with pytest.raises(
        ValueError,
        match=r"g.yaml: grid key\(s\) env.name take a list of values \(e.g. env.name: \[sokoban\]\)",
    ):
        experiments.variants(grid, "smoke")
    grid.write_text("grid: {algo.filter_kep: [0.5]}\n")
    with pytest.raises(
        ValueError,
        match=r"did you mean algo.filter_keep.*\(from .*g.yaml's base or grid point "
        r"\{'algo.filter_kep': 0.5\}, params/profiles.yaml's smoke\)",
    ):
        experiments.variants(grid, "smoke")
    grid.write_text("grid: 3\n")
    with pytest.raises(ValueError, match="grid is a mapping"):
        experiments.variants(grid, "smoke")


def test_grid_order_defaults_base_profile_variant_and_labels(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "base: {train.steps: 7, algo.name: starpo-s}\n"
        "grid:\n  - {study: a, rollout.max_new_tokens: 5}\n  - {study: b}\n"
    )
    finding, points = experiments.variants(grid, "smoke", seeds=[0, 1])
    assert finding == "g" and len(points) == 4  # the file's name is the finding's
    cfg, labels = points[0]
    assert labels == {"study": "a", "judged": True}  # smoke judges every point
    assert cfg.rollout.max_new_tokens == 5  # the variant beats the profile's 8
    assert cfg.train.steps == 3  # the profile beats the base's 7
    assert cfg.algo.filter_keep == 0.25  # base algo.name's preset
    assert [c.train.seed for c, _ in points] == [0, 1, 0, 1]
    assert points[2][0].rollout.max_new_tokens == 8  # variant b keeps the profile's


def test_cap_batch_shrinks_p_and_n_alike_and_never_exceeds_the_cap():
    def cap(P, N, c=16):
        out = experiments.cap_batch({"train.groups": P, "train.group_size": N}, c)
        return out["train.groups"], out["train.group_size"]

    # The paper's P x N = 128 points at the smoke profile's 16 (s = sqrt(16/128) = 0.354): rounding
    # alone gave 3 x 6 and 6 x 3 (18), and the N >= 2 floor 11 x 2 (22), 23 x 2 (46) and 45 x 2
    # (90 episodes, with N = 1 raised to 2).
    assert [cap(P, 128 // P) for P in (1, 4, 8, 16, 32, 64, 128)] == [
        (1, 16), (1, 11), (3, 5), (5, 3), (8, 2), (8, 2), (16, 1)
    ]  # fmt: skip
    for P in range(1, 129):
        for N in range(1, 33):
            p, n = cap(P, N)
            assert p * n <= 16 and p >= 1 and n >= min(N, 2), (P, N)
    small = {"train.groups": 2, "train.group_size": 2}
    assert experiments.cap_batch(small, 16) == small and experiments.cap_batch(small, None) == small


def test_an_override_the_profiles_cap_would_shrink_is_refused_not_trained_smaller():
    """smoke caps a step at 16 episodes by shrinking its grids' P and N; a P or N the caller set
    would have trained at another size without a word."""
    with pytest.raises(
        ValueError,
        match=r"overrides set train.group_size=8, train.groups=8, but profile 'smoke' caps a step at 16 "
        r"episodes .* would train 4 groups × 4 instead: lower",
    ):
        experiments.variants("01_instability", "smoke", overrides={"train.groups": 8, "train.group_size": 8})
    _, kept = experiments.variants("01_instability", "smoke", overrides={"train.groups": 2})
    assert {c.train.groups for c, _ in kept} == {2}
    _, shrunk = experiments.variants("05_rollout_quality", "smoke")  # its own grid's P x N: shrunk
    assert max(c.train.groups * c.train.group_size for c, _ in shrunk) <= 16


def test_a_notebooks_integer_parameter_is_checked_with_its_name():
    assert experiments.check_int("seed", 0, 0) == 0
    for bad in (-1, 1.5, "3", True, None):
        with pytest.raises(
            ValueError, match=r"notebook parameter seed=.*: it takes an integer >= 0 \(papermill: -p seed 1\)"
        ):
            experiments.check_int("seed", bad, 0)
    with pytest.raises(ValueError, match=r"reference_states=0: it takes an integer >= 1"):
        experiments.check_int("reference_states", 0, 1)


def test_profile_errors_and_cpu_worker_slots(monkeypatch):
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid profiles: smoke, quick, paper"):
        experiments.load_profile("fast")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    # each worker's runs record how many trained at once (DONE's runs_per_device: 07's seconds)
    assert experiments.worker_slots(2) == [{"OMP_NUM_THREADS": "4", "RAGEN_RUNS_PER_DEVICE": "2"}] * 2
    with pytest.raises(ValueError, match="runs_per_device must be >= 1"):
        experiments.worker_slots(0)


def test_run_grid_reuses_finished_runs_and_load_reads_them(tmp_path):
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(3):
            run.log(s, {"rollout/success": s / 10 + cfg.train.seed})
        run.mark_done()

    cfgs = seeds(0, 1)
    experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    assert calls == [0, 1]  # the second call reused both
    df = runs.load(tmp_path, "f")
    assert len(df) == 6 and set(df["cfg.train.seed"]) == {0, 1} and df["done"].all()
    assert {"run_id", "finding", "step", "rollout/success", "cfg.algo.clip_high"} <= set(df.columns)
    empty = runs.load(tmp_path, "nothing")
    assert empty.empty and {"run_id", "finding", "done", "step"} <= set(empty.columns)


def test_a_grid_frees_what_the_last_run_left_in_a_reference_cycle_before_the_next_starts(tmp_path):
    """A process's first models.load leaves a cycle that keeps trainer.train's frame (model,
    optimizer states, decoder pool) alive until the cyclic collector runs: on a GPU the next run's
    peak memory counted them. The collector is off here, as it may happen to be for a whole run."""
    import gc

    class Held:  # stands for the first run's model, held by a cycle
        pass

    left, seen_alive = [], []

    def fake_train(cfg, run):
        seen_alive.append([r() is not None for r in left])
        held = Held()
        held.cycle = held
        left.append(weakref.ref(held))
        run.log(0, {"rollout/success": 0.0})
        run.mark_done()

    cfgs = [config.from_dict(c.to_dict(), {"train.steps": 1}) for c in seeds(0, 1)]
    gc.collect()
    gc.disable()
    try:
        experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    finally:
        gc.enable()
    assert seen_alive == [[], [False]]


def test_a_config_another_finding_finished_is_copied_not_trained_again(tmp_path, capsys):
    """01, 03 and 04 train the same Bandit StarPO-PPO runs (a quarter of the quick profile's steps):
    a finished, consistent run of the same config under another finding is copied, with its origin."""
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(cfg.train.steps):
            run.log(s, {"rollout/success": s / 10 + cfg.train.seed})
        run.mark_done()

    experiments.run_grid(tmp_path, "first", seeds(0, 1), fake_train, progress=False)
    damaged = runs.run_dir(tmp_path, "first", seeds(1)[0])
    (damaged / "metrics.jsonl").write_text("")  # not consistent: never copied
    experiments.run_grid(tmp_path, "second", seeds(0, 1, 2), fake_train, progress=False)
    assert calls == [0, 1, 1, 2]  # seed 0 copied; seed 1 (damaged there) and seed 2 trained
    copied = runs.run_dir(tmp_path, "second", seeds(0)[0])
    origin = runs.run_dir(
        tmp_path, "first", seeds(0)[0]
    )  # named by its place in the store, not this machine's path
    assert (copied / runs.REUSED_FROM).read_text() == f"{origin.relative_to(tmp_path)}\n"
    assert f"reused from first: {copied.name}" in capsys.readouterr().out
    assert not (runs.run_dir(tmp_path, "second", seeds(1)[0]) / runs.REUSED_FROM).exists()
    df = runs.load(tmp_path, "second")
    assert df["done"].all() and sorted(set(df["cfg.train.seed"])) == [0, 1, 2]
    assert not (tmp_path / ".adopting").exists()  # not even empty (a fresh-clone audit found it left)
    # a folder already there (a run in progress in this finding) is resumed, never replaced
    third = runs.run_dir(tmp_path, "third", seeds(0)[0])
    third.mkdir(parents=True)
    assert runs.finished_elsewhere(tmp_path, "third", third.name) is not None
    experiments.run_grid(tmp_path, "third", seeds(0), fake_train, progress=False)
    assert calls[-1] == 0 and not (third / runs.REUSED_FROM).exists()


def test_a_copy_of_a_copy_names_where_the_run_trained_and_never_points_in_a_cycle(tmp_path):
    """REUSED_FROM named the folder copied, not where the run trained: after 01's run was deleted
    and copied back from 03's copy of it, each named the other, and the report and the backlog, which
    skip copies, counted the run nowhere."""

    def fake_train(cfg, run):
        for s in range(cfg.train.steps):
            run.log(s, {"rollout/success": 0.5})
        run.mark_done()

    cfgs = seeds(0)
    trained, first, second = (runs.run_dir(tmp_path, f, cfgs[0]) for f in ("a", "b", "c"))
    experiments.run_grid(tmp_path, "a", cfgs, fake_train, progress=False)
    experiments.run_grid(tmp_path, "b", cfgs, fake_train, progress=False)
    shutil.rmtree(trained)  # a researcher deletes 01's runs, then reruns 01 and 04
    experiments.run_grid(tmp_path, "a", cfgs, fake_train, progress=False)
    experiments.run_grid(tmp_path, "c", cfgs, fake_train, progress=False)
    assert not (trained / runs.REUSED_FROM).exists()  # back where it trained: the original again
    assert (first / runs.REUSED_FROM).read_text() == "runs/a/" + trained.name + "\n"
    assert (second / runs.REUSED_FROM).read_text() == "runs/a/" + trained.name + "\n"  # not b's
    assert reporting.trained_on(tmp_path).split(" (")[1].startswith("1 runs")


def test_run_grid_names_a_missing_model_once_before_any_run_and_reuses_finished_runs_without_it(tmp_path):
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(cfg.train.steps):
            run.log(s, {"rollout/success": 1.0})
        run.mark_done()

    gone = str(tmp_path / "moved.gguf")
    done, todo = [config.from_dict(c.to_dict(), {"model.name": gone}) for c in seeds(0, 1)]
    # there while the first run trains: a whole GGUF with no tensors (magic, version 3, 0 tensors, 0 keys)
    Path(gone).write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    experiments.run_grid(tmp_path, "f", [done], fake_train, progress=False)
    Path(gone).unlink()  # then moved: the finished run is still reused, the new one is refused
    with pytest.raises(
        models.ModelNotFound, match=f"model file {re.escape(gone)} does not exist: set model.name"
    ):
        experiments.run_grid(tmp_path, "f", [done, todo], fake_train, progress=False)
    assert calls == [0] and not runs.run_dir(tmp_path, "f", todo).exists()
    experiments.run_grid(tmp_path, "f", [done], fake_train, progress=False)
    assert calls == [0]


class Weights:
    """Stands for a failed run's model: the test checks it is freed before the next run starts."""


def test_run_grid_one_at_a_time_keeps_going_after_a_failure_and_frees_it(tmp_path, capsys):
    held = []

    def train(cfg, run):
        if cfg.train.seed == 0:
            model = Weights()  # a local of the failing frame, as a model is
            held.append(weakref.ref(model))
            run.log(0, {"a": 1})
            raise RuntimeError("diverged")
        assert held[0]() is None, "the failed run's frames still hold its model"
        for step in range(cfg.train.steps):
            run.log(step, {"a": 2})
        run.mark_done()

    cfgs = seeds(0, 1)
    with pytest.raises(RuntimeError, match="1 of 2 runs failed") as info:
        experiments.run_grid(tmp_path, "f", cfgs, train, progress=False)
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == "diverged"
    out = capsys.readouterr()
    assert f"run failed: {runs.run_dir(tmp_path, 'f', cfgs[0])}" in out.out
    assert out.err.count("Traceback (most recent call last)") == 1 and "diverged" in out.err  # printed once
    assert not Run(runs.run_dir(tmp_path, "f", cfgs[0]), cfgs[0]).done
    assert Run(runs.run_dir(tmp_path, "f", cfgs[1]), cfgs[1]).done  # trained after the failure


FINISHER = """
import sys, time
from ragen_lib import config
from ragen_lib.runs import Run
cfg = config.from_dict({"algo": {"name": "starpo-ppo"}, "env": {"name": "bandit"}, "train": {"steps": 3}})
run = Run(sys.argv[1], cfg).lock()
print("locked", flush=True)
time.sleep(1.5)
for step in range(3):
    run.log(step, {"a": 1})
run.mark_done()
"""


def test_a_run_another_process_is_training_is_waited_for_not_failed(tmp_path, monkeypatch, capsys):
    """Two notebooks on one store: each grid found the other's runs locked and raised "4 of 9 runs
    failed ... rerun to resume them", though every run finished (an audit reproduced it). A grid
    now waits for the other process and reuses what it finished."""
    monkeypatch.setattr(workers, "LOCK_POLL_S", 0.2)
    path = runs.run_dir(tmp_path, "f", CFG)
    holder = subprocess.Popen(
        [sys.executable, "-c", FINISHER, str(path)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    calls = []
    try:
        assert holder.stdout.readline().strip() == "locked"
        experiments.run_grid(tmp_path, "f", [CFG], lambda cfg, run: calls.append(cfg), progress=False)
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert calls == [] and Run(path, CFG).done  # the other process's run, reused
    waiting = "waiting, to take the run over when it ends: "
    assert f"{waiting}{path} is being written by another process: PID {holder.pid}" in out
    assert f"finished by the other process: {path} (reused)" in out


def pooled_train(cfg, run):
    """Module level so that spawned pool workers can unpickle it."""
    if cfg.train.seed == 99:
        raise RuntimeError("diverged")
    for s in range(cfg.train.steps):
        run.log(s, {"slot": os.environ["RAGEN_TEST_SLOT"], "pid": os.getpid()})
    run.mark_done()


def test_run_grid_pool_uses_every_slot_env_and_keeps_going_after_a_failure(tmp_path, capfd):
    cfgs = seeds(0, 1, 2, 99)
    slots = [{"RAGEN_TEST_SLOT": "a"}, {"RAGEN_TEST_SLOT": "b"}]
    with pytest.raises(RuntimeError, match="1 of 4 runs failed"):
        experiments.run_grid(tmp_path, "f", cfgs, pooled_train, progress=False, slots=slots)
    df = runs.load(tmp_path, "f")
    assert sorted(set(df["cfg.train.seed"])) == [0, 1, 2]  # the three good runs finished despite the failure
    assert set(df["slot"]) <= {"a", "b"} and os.getpid() not in set(df["pid"])
    assert not Run(runs.run_dir(tmp_path, "f", cfgs[3]), cfgs[3]).done
    # the worker prints where the run failed, once, as a grid run one at a time does (it printed none)
    err = capfd.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1, err
    assert "in pooled_train" in err and "RuntimeError: diverged" in err


def dying_train(cfg, run):
    """Seed 98 kills its worker process (as the OOM killer would) every time it trains: the first
    time as soon as another run has finished, while one is in flight and the rest are queued; the
    second time once all four others have finished, so that no other run is in flight then. The
    others take a moment each and resume as a real run does (one may be killed mid-run)."""
    if cfg.train.seed != 98:
        run.resume()
        time.sleep(0.3)
        return pooled_train(cfg, run)
    root = Path(run.path).parent
    attempts = root.parent.parent / "attempts"
    first = not attempts.exists()
    attempts.touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [p for p in root.iterdir() if (p / runs.DONE).exists() and not (p / runs.LOCK).read_text()]
        if len(done) >= (1 if first else 4):
            break
        time.sleep(0.05)
    if not first:
        time.sleep(1.0)  # the last run's worker hands back its result before this one dies
    os._exit(1)


def test_a_worker_that_dies_breaks_the_pool_only_for_its_own_run(tmp_path, capfd):
    """A worker that dies abruptly (OOM killer, segfault) broke the pool: every run in flight or
    queued failed with BrokenProcessPool. Now the lost runs go to a fresh pool, and only the run in
    flight at both breaks fails, saying its worker died."""
    cfgs = seeds(98, 0, 1, 2, 3)
    slots = [{"RAGEN_TEST_SLOT": "a"}, {"RAGEN_TEST_SLOT": "b"}]
    dying = runs.run_dir(tmp_path, "f", cfgs[0])
    with pytest.raises(RuntimeError, match=rf"^1 of 5 runs failed \({dying.name}\); the others") as info:
        experiments.run_grid(tmp_path, "f", cfgs, dying_train, progress=False, slots=slots)
    assert isinstance(info.value.__cause__, workers.WorkerDied)
    for cfg in cfgs[1:]:
        assert Run(runs.run_dir(tmp_path, "f", cfg), cfg).done  # queued or in flight at a break, trained
    assert not Run(dying, cfgs[0]).done
    out = capfd.readouterr().out
    breaks = re.findall(r"a grid worker process died and broke the pool .*", out)
    assert len(breaks) == 2 and "requeued in a fresh pool" in breaks[0], out  # one line per break
    assert breaks[1].endswith("no run left to requeue")
    assert re.search(rf"run failed: {re.escape(str(dying))}: the worker process .* died 2 times .*dmesg", out)


def test_a_worker_that_fails_to_start_stops_the_grid_with_its_reason(tmp_path, capfd):
    """Workers whose start-up raises (here slots whose OMP_NUM_THREADS is not a number) die before
    training anything: every fresh pool died the same way, and after three pools each run failed
    as 'the worker process training it died 3 times (the OOM killer: check dmesg ...)'. Now the
    first pool's death says what went wrong, and no run is charged with it. (A single bad slot
    beside good ones may die before the pool notices; the others then train every run, with a
    warning.)"""
    cfgs = seeds(0, 1, 2)
    slots = [
        {"RAGEN_TEST_SLOT": "a", "OMP_NUM_THREADS": "one"},
        {"RAGEN_TEST_SLOT": "b", "OMP_NUM_THREADS": "two"},
    ]
    with pytest.raises(workers.WorkerStartFailed) as info:
        experiments.run_grid(tmp_path, "f", cfgs, pooled_train, progress=False, slots=slots)
    msg = str(info.value)
    assert "failed while starting, before training any run: ValueError: invalid literal" in msg, msg
    assert re.search(r"\(slot \{'RAGEN_TEST_SLOT': '[ab]', 'OMP_NUM_THREADS': '(one|two)'\}\)", msg), msg
    assert "rerun to resume" in msg, msg
    out = capfd.readouterr().out
    assert "broke the pool" not in out and "died" not in out, out  # no requeue, nobody blamed


def neighbour_killing_train(cfg, run):
    """Seed 97 kills its worker each time it trains: for its first two attempts once seed 0 is in
    flight beside it, at once after that. Seed 0 is healthy: it stays in flight until the kill on
    its first two attempts (they begin together), and trains on its third (alone). Each says it
    started by a line in a file, so that the order does not hang on how fast workers spawn."""
    root = Path(run.path).parents[2]

    def lines(name: str) -> int:
        return len((root / name).read_text().splitlines()) if (root / name).exists() else 0

    def wait_for(name: str, n: int) -> None:
        deadline = time.monotonic() + 60
        while lines(name) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    mine, theirs = ("attempts", "starts") if cfg.train.seed == 97 else ("starts", "attempts")
    with open(root / mine, "a") as f:
        f.write("x\n")
    attempt = lines(mine)
    if cfg.train.seed == 97:
        if attempt <= 2:
            wait_for(theirs, attempt)
        os._exit(1)
    run.resume()
    if attempt <= 2:
        wait_for(theirs, attempt)
        time.sleep(60)  # killed with the pool before this ends
    return pooled_train(cfg, run)


def test_a_healthy_run_beside_a_dying_one_at_both_breaks_trains_alone_and_finishes(tmp_path, capfd):
    """Two runs in flight at each of two breaks: the pool cannot tell whose worker died, and both
    used to fail with WorkerDied. Now both train alone, one at a time: the dying one breaks its own
    pool and fails, the healthy one finishes."""
    cfgs = seeds(97, 0)
    slots = [{"RAGEN_TEST_SLOT": "a"}, {"RAGEN_TEST_SLOT": "b"}]
    dying, healthy = (runs.run_dir(tmp_path, "f", c) for c in cfgs)
    with pytest.raises(RuntimeError, match=rf"^1 of 2 runs failed \({dying.name}\); the others") as info:
        experiments.run_grid(tmp_path, "f", cfgs, neighbour_killing_train, progress=False, slots=slots)
    assert isinstance(info.value.__cause__, workers.WorkerDied)
    assert Run(healthy, cfgs[1]).done and not Run(dying, cfgs[0]).done
    out = capfd.readouterr().out
    assert len(re.findall(r"a grid worker process died and broke the pool", out)) == 3, out
    assert f"{healthy.name} was in flight at 2 breaks, each shared with other runs: it trains alone" in out
    assert re.search(rf"run failed: {re.escape(str(dying))}: the worker process .* died 3 times", out)
    assert len((tmp_path / "starts").read_text().splitlines()) == 3  # twice beside it, once alone


def last_spawned_dies_train(cfg, run):
    """The first time, the run whose worker was spawned last (the higher PID) kills it once both are
    in flight; the other stays in flight for 60 s. The second time both train."""
    root = Path(run.path).parents[2]
    if not (root / "died").exists():
        (root / f"pid-{cfg.train.seed}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while len(list(root.glob("pid-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the other's PID is whole
        if os.getpid() == max(int(f.read_text()) for f in root.glob("pid-*")):
            (root / "died").touch()
            os._exit(1)
        time.sleep(60)  # killed with the pool before this ends
    run.resume()
    return pooled_train(cfg, run)


def test_the_death_of_the_last_spawned_worker_is_seen_at_once(tmp_path, capfd):
    """The executor spawns a worker per submit after waking its manager thread, which could already
    be waiting on the first worker alone: the second one's death went unseen until the first run
    finished (here 60 s; hours in a grid, its slot idle), and only then broke the pool."""
    cfgs = seeds(0, 1)
    slots = [{"RAGEN_TEST_SLOT": "a"}, {"RAGEN_TEST_SLOT": "b"}]
    experiments.run_grid(tmp_path, "f", cfgs, last_spawned_dies_train, progress=False, slots=slots)
    assert all(Run(runs.run_dir(tmp_path, "f", c), c).done for c in cfgs)
    out = capfd.readouterr().out
    assert re.findall(r"broke the pool \((\d) run\(s\) were in flight\)", out) == ["2"], out


def test_a_checkpoint_left_beside_a_done_is_removed_when_the_grid_reuses_the_run(
    tmp_path, capsys, monkeypatch
):
    """mark_done writes DONE, then removes ckpt/: a crash between the two left a checkpoint (GBs on a
    GPU) that nothing removed, since the grid skips finished runs and repair found nothing wrong."""
    calls = []

    def train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(cfg.train.steps):
            run.log(s, {"a": s})
        run.save_checkpoint(cfg.train.steps - 1, {"w": [1.0] * 1000})
        run.mark_done()

    cfgs = seeds(0)
    path = runs.run_dir(tmp_path, "f", cfgs[0])
    with monkeypatch.context() as crash:  # the process dies after DONE, before the checkpoint goes
        crash.setattr(runs.shutil, "rmtree", lambda *a, **k: None)
        experiments.run_grid(tmp_path, "f", cfgs, train, progress=False)
    assert (path / runs.DONE).exists() and list((path / runs.CKPT).glob("step_*.pt"))
    experiments.run_grid(tmp_path, "f", cfgs, train, progress=False)
    assert calls == [0] and not (path / runs.CKPT).exists()  # reused, its checkpoint gone
    assert f"removed the leftover checkpoint of finished run {path}" in capsys.readouterr().out
    assert Run(path).problems() == [] and not (path / runs.LOCK).read_text()  # finished, lock released


def test_the_grid_says_when_every_run_is_reused_and_which_runs_resume(tmp_path, capsys):
    """A fresh-clone audit: a rerun whose runs were all stored printed nothing at all (the bar hides
    when there is nothing to train), and the bar did not say that a run resumes from a checkpoint."""

    def stop_after_a_checkpoint(cfg, run):
        run.log(0, {"a": 0})
        run.save_checkpoint(0, {"w": [1.0]})
        raise RuntimeError("crashed")

    cfgs = seeds(0, 1)
    with pytest.raises(RuntimeError, match="2 of 2 runs failed"):
        experiments.run_grid(tmp_path, "f", cfgs, stop_after_a_checkpoint, progress=False)
    capsys.readouterr()

    def finish(cfg, run):
        run.resume()
        for s in range(1, cfg.train.steps):
            run.log(s, {"a": s})
        run.mark_done()

    experiments.run_grid(tmp_path, "f", cfgs, finish, progress=True)
    assert "f: 0 reused, 2 to run (2 resume from a checkpoint)" in capsys.readouterr().err
    experiments.run_grid(tmp_path, "f", cfgs, finish, progress=True)
    out = capsys.readouterr()
    assert "f: all 2 runs stored and reused, none to train" in out.out, out


def test_dict_valued_grid_keys_cross_a_variant_list_and_profiles_gate_variants(tmp_path):
    grid = experiments.points({"env.name": ["a", "b"], "variant": [{"x.y": 1}, {"x.y": 2, "study": "s"}]})
    assert grid == [{"env.name": "a", "x.y": 1}, {"env.name": "a", "x.y": 2, "study": "s"},
                    {"env.name": "b", "x.y": 1}, {"env.name": "b", "x.y": 2, "study": "s"}]  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text("grid:\n  - {train.steps: 2}\n  - {train.steps: 4, profiles: [paper]}\n")
    assert len(experiments.variants(path, "smoke")[1]) == 1
    _, paper = experiments.variants(path, "paper", seeds=[0])
    assert [c.train.steps for c, labels in paper] == [2, 4] and all("profiles" not in lab for _, lab in paper)


def test_a_grid_key_that_reads_as_a_setting_and_a_judged_entry_matching_nothing_are_errors(
    tmp_path, monkeypatch
):
    """Both were silent: an undotted key is a label, so `steps: 50` set nothing; a judged entry
    whose `where` matched no point left its study a pilot, found out as PILOT rows after the grid."""
    grid = tmp_path / "g.yaml"
    for key, fix in (("steps", "train.steps"), ("algo_kl_coef", "algo.kl_coef"), ("algo", "algo.<field>"),
                     ("envname", "env.name"), ("Train-Steps", "train.steps")):  # fmt: skip
        grid.write_text(f"grid:\n  - {{study: a, {key}: 0}}\n")
        with pytest.raises(ValueError, match=f"grid key '{key}' has no dot.*e.g. {re.escape(fix)}"):
            experiments.variants(grid, "smoke")
    grid.write_text("grid:\n  - {study: a, env.name: bandit}\n  - {study: b, env.name: sokoban}\n")
    profiles = tmp_path / "profiles.yaml"
    load = experiments.load_profile
    monkeypatch.setattr(experiments, "load_profile", lambda name: load(name, profiles))
    for where, ok in (("{study: b}", True), ("{study: paper-mask}", False), ("{env.nmae: sokoban}", False)):
        profiles.write_text(f"p:\n  judged:\n    - {{finding: g, where: {where}, seeds: [3]}}\n")
        if ok:
            judged = [labels["judged"] for _, labels in experiments.variants(grid, "p")[1]]
            assert judged == [False, True]
        else:
            with pytest.raises(ValueError, match="judged entry for g where .* matches no grid point"):
                experiments.variants(grid, "p")


def test_a_finished_run_whose_files_disagree_is_not_reused(tmp_path, capsys):
    """A DONE with no metrics used to be reused forever; now the grid trains the others and fails
    naming the run and the repair command."""
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(3):
            run.log(s, {})
        run.mark_done()

    cfgs = seeds(0, 1)
    experiments.run_grid(tmp_path, "f", cfgs[:1], fake_train, progress=False)
    broken = runs.run_dir(tmp_path, "f", cfgs[0])
    (broken / "metrics.jsonl").unlink()
    with pytest.raises(RuntimeError, match="1 of 2 runs failed"):
        experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    assert calls == [0, 1]  # the healthy new run trained; the broken one was not reused
    assert f"python -m ragen_lib repair {broken}" in capsys.readouterr().out


def test_papermill_overrides_as_json_text_and_overriding_a_varied_key_is_an_error(tmp_path):
    """papermill -p passes text; a key the grid varies would be silently ignored."""
    _, as_text = experiments.variants("03_uncertainty_filtering", "smoke", overrides='{"train.steps": 5}')
    _, as_dict = experiments.variants("03_uncertainty_filtering", "smoke", overrides={"train.steps": 5})
    assert [c for c, _ in as_text] == [c for c, _ in as_dict] and as_text[0][0].train.steps == 5
    with pytest.raises(ValueError, match=r"algo.filter_keep, which 03_uncertainty_filtering.yaml varies"):
        experiments.variants("03_uncertainty_filtering", "smoke", overrides={"algo.filter_keep": 0.5})
    with pytest.raises(ValueError, match="pass seeds="):
        experiments.variants("03_uncertainty_filtering", "smoke", overrides={"train.seed": 3})
    with pytest.raises(ValueError, match="overrides must be a mapping"):
        experiments.variants("03_uncertainty_filtering", "smoke", overrides="[1, 2]")
    with pytest.raises(ValueError, match="overrides, line 1"):
        experiments.variants("03_uncertainty_filtering", "smoke", overrides='{"train.steps": ')
    # JSON's 2e-6 is a float (YAML 1.1 read it as the string "2e-6", which the verdict then named and
    # a variant's folder told from 2.0e-6); YAML still parses; a key twice is refused in either
    assert experiments.parse_overrides('{"train.actor_lr": 2e-6}') == {"train.actor_lr": 2e-6}
    assert experiments.parse_overrides("{train.steps: 5}") == {"train.steps": 5}
    with pytest.raises(ValueError, match="train.steps given twice"):
        experiments.parse_overrides('{"train.steps": 5, "train.steps": 6}')
    with pytest.raises(
        ValueError,
        match=r"overrides, line 1, column 18: key 'train.steps' is given twice \(first on line 1, column 2\)",
    ):
        experiments.parse_overrides("{train.steps: 5, train.steps: 6}")
    grid = tmp_path / "kw.yaml"  # a grid varying a mapping: an override of one entry is a clash too
    grid.write_text(
        "base: {env.name: bandit}\ngrid:\n  env.kwargs: [{high_risk_p: 0.2}, {high_risk_p: 0.5}]\n"
    )
    with pytest.raises(
        ValueError, match=r"env.kwargs.high_risk_p, which kw.yaml varies per run \(env.kwargs: "
    ):
        experiments.variants(grid, "smoke", overrides={"env.kwargs.high_risk_p": 0.4})
    _, kept = experiments.variants(grid, "smoke", overrides={"rollout.max_turns": 1})
    assert [c.env.kwargs["high_risk_p"] for c, _ in kept] == [0.2, 0.5]


NOTEBOOK_PARAMETERS = "profile = None  # smoke | quick | paper\nseeds = None\noverrides = {}\n"


def test_a_papermill_parameter_the_notebook_lacks_is_refused_with_the_close_name():
    """papermill only warns about `-p profle paper` and runs the defaults: a verdict for the wrong
    question. The cell it injects runs after the parameters cell; each name it sets must be there."""
    injected = '# Parameters\nprofle = "paper"\noverides = {"train.steps": 5}\nPAPERMILL_INPUT_PATH = "a"\n'
    with pytest.raises(ValueError) as e:
        experiments.check_parameters(["import x", NOTEBOOK_PARAMETERS, injected, "df = ..."])
    assert str(e.value).startswith(
        "unknown notebook parameter(s) overides (did you mean overrides?), profle (did you mean profile?): "
        "this notebook takes overrides, profile, seeds."
    )
    experiments.check_parameters([NOTEBOOK_PARAMETERS, '# Parameters\nprofile = "paper"\nseeds = [0]\n'])
    experiments.check_parameters(
        [NOTEBOOK_PARAMETERS, "profle = 1"]
    )  # typed in a cell by hand: not papermill's
    experiments.check_parameters()  # outside IPython: nothing to check
    # the injected cell re-run by hand later in a papermill output: it follows a cell that is not
    # the parameters cell, and the earlier (good) injected cell is not looked at again
    rerun = [
        NOTEBOOK_PARAMETERS,
        '# Parameters\nprofile = "paper"\n',
        "df.plot()",
        '# Parameters\nprofile = "x"\n',
    ]
    experiments.check_parameters(rerun)


def test_papermill_with_a_misspelt_parameter_stops_the_notebook(tmp_path):
    import nbformat
    import papermill

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(NOTEBOOK_PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell("from ragen_lib import experiments\nexperiments.check_parameters()"),
    ]
    nbformat.write(nb, tmp_path / "in.ipynb")
    run = functools.partial(
        papermill.execute_notebook, kernel_name="python3", language="python", progress_bar=False
    )
    run(tmp_path / "in.ipynb", tmp_path / "ok.ipynb", parameters={"profile": "smoke"})
    with pytest.raises(papermill.PapermillExecutionError, match="profle \\(did you mean profile\\?\\)"):
        run(tmp_path / "in.ipynb", tmp_path / "bad.ipynb", parameters={"profle": "paper"})


def test_papermill_seeds_as_json_text_and_bad_seed_lists_are_errors(tmp_path):
    """papermill -p passes '[0, 1]' as text; a bare number is ambiguous (seed 3, or three seeds?)
    and a repeated seed would be one run counted twice, so both are refused with the fix."""
    _, as_text = experiments.variants("03_uncertainty_filtering", "smoke", seeds="[0, 1]")
    _, as_list = experiments.variants("03_uncertainty_filtering", "smoke", seeds=[0, 1])
    assert [c for c, _ in as_text] == [c for c, _ in as_list] and {c.train.seed for c, _ in as_text} == {0, 1}
    for bad in (3, "3", "0,1", "[]", [0, "1"], [True]):
        with pytest.raises(
            ValueError, match=r"seeds must be a list of seed numbers, e.g. \[0, 1, 2\] \(papermill"
        ):
            experiments.variants("03_uncertainty_filtering", "smoke", seeds=bad)
    with pytest.raises(ValueError, match=r"seeds \[0, 1, 0\] repeats a seed: the same run would count twice"):
        experiments.variants("03_uncertainty_filtering", "smoke", seeds=[0, 1, 0])
    prof = tmp_path / "profiles.yaml"
    for bad in ("3", "", "[0, 0]"):
        prof.write_text(f"smoke:\n  seeds: {bad}\n")
        with pytest.raises(
            ValueError, match=r"profile 'smoke': seeds (must be a list of seed numbers|.* repeats)"
        ):
            experiments.load_profile("smoke", prof)


def test_grid_and_profile_yaml_errors_name_the_file_and_line(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {train.steps: 7}\nbase: {train.steps: 8}\n")
    with pytest.raises(ValueError, match=r"g.yaml, line 2, column 1: key 'base' is given twice"):
        experiments.variants(grid, "smoke")
    prof = tmp_path / "profiles.yaml"
    prof.write_text("smoke:\n  seeds: [0\n")
    with pytest.raises(ValueError, match=r"profiles.yaml, line 3"):
        experiments.load_profile("smoke", prof)


# --- the plan: runs, steps and disk of a profile ---------------------------------------------------
def test_model_size_resolves_the_model_off_the_meta_device(tmp_path, monkeypatch):
    """On a fresh machine resolving converts the GGUF (a real load), which transformers 5 refuses
    under a meta device: the first GPU lease's `plan` died so. The counting stays on meta."""
    import torch

    tiny, _ = models.load(models.TINY_RANDOM, device="cpu")
    tiny.config.save_pretrained(tmp_path)
    seen = []

    def resolve(name, **kw):
        seen.append(torch.empty(0).device.type)  # the default device the resolver runs under
        return str(tmp_path)

    monkeypatch.setattr(models, "resolve", resolve)
    policy, _ = experiments.model_size("some-converted-model")
    assert seen == ["cpu"]
    assert policy == sum(p.numel() for p in tiny.parameters())


def test_plan_counts_runs_steps_and_disk_and_refuses_a_small_disk(tmp_path, monkeypatch, capsys):
    from ragen_lib.__main__ import main

    p = experiments.plan("smoke", root=tmp_path, names=["03_uncertainty_filtering"], device="cpu")
    [row] = p["findings"]
    # 2 envs × 7 variants + the Bandit filter pair, 3 steps each
    assert (row["runs"], row["done"], row["to_train"], row["steps"]) == (16, 0, 16, 48)
    assert (row["judged"], row["pilot"]) == (16, 0)  # smoke judges everything (one seed: INCONCLUSIVE)
    cfg = experiments.variants("03_uncertainty_filtering", "smoke")[1][0][0]
    assert row["checkpoint_bytes"] == experiments.checkpoint_bytes(cfg)
    assert row["peak_bytes"] == p["workers"] * 2 * row["checkpoint_bytes"]
    assert p["need_bytes"] == row["peak_bytes"] + row["left_bytes"]
    # the embedded model on a GPU: policy, critic and reference as float32 master copies (models.py)
    # plus two Adam moments each
    quick = experiments.variants("01_instability", "quick")[1][0][0]
    policy, critic = experiments.model_size(quick.model.name)
    assert 130e6 < policy < 140e6 and critic > policy - 1  # SmolLM2-135M; tied head counted once
    assert experiments.checkpoint_bytes(quick) == pytest.approx(4 * (4 * policy + 3 * critic), rel=0.01)
    assert p["models"] == ["tiny-random"]
    assert main(["plan", "smoke", "--root", str(tmp_path), "--finding", "03_uncertainty_filtering"]) == 0
    out = capsys.readouterr().out
    assert "03_uncertainty_filtering" in out
    assert "per grid); model tiny-random (not the paper's Qwen2.5-0.5B-Instruct)\n" in out
    # 02's four runs (FrozenLake PPO since 2026-12-02) are 01's configs: trained once (by 01) and
    # copied, not counted twice
    both = experiments.plan("smoke", root=tmp_path, names=["01_instability", "02_echo_trap"])
    first, second = both["findings"]
    assert (first["shared"], second["shared"], second["to_train"], second["steps"]) == (0, 4, 0, 0)
    assert "4 runs share their config with another finding's: trained once, then copied" in (
        experiments.format_plan(both)
    )
    # --finding takes one word per flag: before the profile it left `plan` without one (rc 2)
    flags = ["--root", str(tmp_path), "--no-check"]
    assert main(["plan", "--finding", "02_echo_trap", "smoke", *flags]) == 0
    assert main(["plan", "smoke", "--finding", "02_echo_trap", "--finding", "01_instability", *flags]) == 0
    both = capsys.readouterr().out.split("\n\n")[-1]
    assert "\n02_echo_trap " in both and "\n01_instability " in both
    # RAGEN_MODEL chooses the quick profile's model (smoke names tiny-random); one that is not there
    # stops replicate-all's first step with the fix
    gone = str(tmp_path / "gone.gguf")
    monkeypatch.setenv("RAGEN_MODEL", gone)
    assert {c.model.name for c, _ in experiments.variants("02_echo_trap", "quick")[1]} == {gone}
    assert {c.model.name for c, _ in experiments.variants("02_echo_trap", "smoke")[1]} == {"tiny-random"}
    assert main(["plan", "smoke", "--root", str(tmp_path), "--finding", "02_echo_trap"]) == 0
    assert f"RAGEN_MODEL={gone} is not used here: profile smoke's configs name their model (tiny-random)" in (
        capsys.readouterr().out
    )
    assert main(["plan", "quick", "--root", str(tmp_path), "--finding", "02_echo_trap"]) == 2
    assert f"error: model file {gone} does not exist: it comes from RAGEN_MODEL" in capsys.readouterr().err
    monkeypatch.delenv("RAGEN_MODEL")
    monkeypatch.setattr(
        experiments.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1e12, 1e12, 1000)
    )
    assert main(["plan", "smoke", "--root", str(tmp_path), "--finding", "03_uncertainty_filtering"]) == 3
    full = capsys.readouterr().err  # smoke is the smallest profile already; --root was given
    assert "error: the plan needs" in full and "point --root at a larger disk; --no-check" in full
    assert main(["plan", "quick", "--finding", "03_uncertainty_filtering"]) == 3
    assert (
        "point RAGEN_OUTPUTS at a larger disk, or run a smaller profile (PROFILE=smoke)"
        in capsys.readouterr().err
    )
    # a typo is one line that names the fix, not a traceback
    assert main(["plan", "quik", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: unknown profile 'quik'; valid profiles: smoke, quick, paper\n"
    assert main(["plan", "smoke", "--root", str(tmp_path), "--finding", "03_uncertanity"]) == 2
    assert "error: no grid file" in capsys.readouterr().err
    # an outputs root under a file passed the plan, then papermill raised for every notebook
    (tmp_path / "afile").write_text("")
    assert main(["plan", "smoke", "--root", str(tmp_path / "afile" / "out")]) == 2
    assert f"{tmp_path / 'afile'} is a file. Point --root at" in capsys.readouterr().err


def test_quick_profile_judges_its_studies_at_scale_and_runs_the_rest_as_pilots():
    _, pairs = experiments.variants("01_instability", "quick")
    judged = [(c, lab) for c, lab in pairs if lab["judged"]]
    pilot = [(c, lab) for c, lab in pairs if not lab["judged"]]
    bandit = [c for c, lab in judged if c.env.name == "bandit"]
    sokoban = [c for c, lab in judged if c.env.name == "sokoban"]
    assert sorted({c.train.seed for c in bandit}) == [0, 1, 2, 3] and len(bandit) == 8  # PPO, GRPO
    assert {(c.train.steps, c.train.val_every, c.train.val_size) for c in bandit} == {(150, 5, 128)}
    assert sorted({c.train.seed for c in sokoban}) == [0, 1, 2] and {c.train.steps for c in sokoban} == {50}
    assert {(c.train.val_every, c.train.val_size) for c in sokoban} == {(10, 384)}
    assert all(lab["study"] == "paper-mask" for _, lab in judged)
    # FrozenLake and every response-mask run: one seed at the pilot scale
    assert len(pilot) == 8 and {(c.train.seed, c.train.steps) for c, _ in pilot} == {(0, 30)}
    _, apo = experiments.variants("07_apo_vs_starpo", "quick")
    judged_apo = {(c.env.name, c.algo.name, c.algo.loss_mask) for c, lab in apo if lab["judged"]}
    # PPO on the response mask, A*-PO's loss tokens: the headline's cost comparator (07's criterion)
    assert judged_apo == {
        ("sokoban", "apo", "response"),  # its preset: A-PO is single-turn
        ("sokoban", "starpo-ppo", "paper"),
        ("sokoban", "starpo-ppo", "response"),
        ("sokoban", "starpo-grpo", "paper"),
    }
    assert all(c.algo.apo_refresh_every == 0 and not c.algo.apo_adaptive for c, lab in apo if lab["judged"])


def test_every_judged_design_of_quick_has_the_power_for_a_validation_rate_of_mde_0_1():
    """The seeds and validation states of each judged entry: a late validation success claim at
    the MDE 0.1 the studies declare must not read under-powered before a run trains (3 Sokoban
    seeds x 128 states did, once the power check used the t quantile its interval uses)."""
    import numpy as np
    import pandas as pd

    from ragen_lib import analysis

    claim = analysis.Claim("x", "a beats b", "val/success", mde=0.1)
    judged = config.read_yaml(experiments.ROOT / "params" / "profiles.yaml")["quick"]["judged"]
    for entry in judged:
        n, states = len(entry["seeds"]), entry["overrides"]["train.val_size"]
        arm = pd.DataFrame({"seed": range(n), "score": 0.5, "points": [np.full(3, 0.5)] * n, "n": states})
        assert analysis.underpowered(claim, n, arm, arm) is None, entry


def test_a_finding_is_named_by_its_number_as_make_replicate_takes_it(tmp_path, capsys):
    """`make replicate NB=05` takes the number; `plan --finding 05` refused it ("no grid file
    params/05.yaml"). A number names its finding; a name or an unknown word is left as it is."""
    from ragen_lib.__main__ import main

    assert experiments.finding_name("05") == "05_rollout_quality"
    assert experiments.finding_name("05_rollout_quality") == "05_rollout_quality"
    assert experiments.finding_name("5") == "5"  # not a prefix of any: refused below, with the names
    assert experiments.grid_file("05").name == "05_rollout_quality.yaml"  # every caller's way in
    [row] = experiments.plan("smoke", root=tmp_path, names=["03"], device="cpu")["findings"]
    assert row["finding"] == "03_uncertainty_filtering"
    assert main(["plan", "smoke", "--root", str(tmp_path), "--finding", "5"]) != 0
    assert "findings: 01_instability, 02_echo_trap" in capsys.readouterr().err


def test_plan_names_a_model_that_cannot_load_before_it_sizes_the_checkpoints(tmp_path, monkeypatch):
    """`plan` (the first step of make replicate) read a hub id's config with transformers to size a
    checkpoint, before any check: an id neither cached nor on the hub was a 40-line traceback."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import: the env var is too late
    monkeypatch.setenv("RAGEN_MODEL", "nobody/no-such-model")
    with pytest.raises(models.ModelNotFound, match="'nobody/no-such-model' is not in the local .*OFFLINE"):
        experiments.plan("quick", root=tmp_path, names=["02_echo_trap"])


def test_plan_estimates_minutes_from_the_measured_step(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the host's GPU would choose the file
    bench = tmp_path / "bench"
    bench.mkdir()
    assert experiments.measured_step(cuda=True, bench_dir=bench) is None
    row = {
        "what": "train step: time/step",
        "value": 2.0,
        "note": "Sokoban, starpo-ppo, 2×4, ≤2 turns × 32 tokens",
    }
    (bench / "h100.json").write_text(json.dumps({"header": {"model": "tiny-random"}, "rows": [row]}))
    b = experiments.measured_step(cuda=True, bench_dir=bench)
    assert b["s_per_step"] == 2.0 and b["shape"] == (2, 4, 2, 32) and b["file"] == "h100.json (tiny-random)"
    assert experiments.measured_step(cuda=False, bench_dir=bench) is None  # a GPU figure is no CPU one
    # on a host with a GPU, that GPU's file or none: an A100's seconds are not an H100's
    a100 = {"header": {"model": "m"}, "rows": [{**row, "value": 9.0}]}
    (bench / "nvidia-a100.json").write_text(json.dumps(a100))
    assert experiments.measured_step(cuda=True, bench_dir=bench, gpu="H100")["s_per_step"] == 2.0
    assert experiments.measured_step(cuda=True, bench_dir=bench, gpu="NVIDIA A100")["s_per_step"] == 9.0
    assert experiments.measured_step(cuda=True, bench_dir=bench, gpu="NVIDIA H200") is None
    (bench / "nvidia-a100.json").unlink()
    # a torn report (first in the order) or one that is no report is passed over, named, not a traceback
    (bench / "a-torn.json").write_text(json.dumps({"header": {}, "rows": [row]})[:40])
    (bench / "b-list.json").write_text("[1, 2]")
    with pytest.warns(UserWarning) as seen:
        assert experiments.measured_step(cuda=True, bench_dir=bench)["s_per_step"] == 2.0
    said = [str(w.message) for w in seen]
    assert any("a-torn.json is not a bench report (JSONDecodeError" in s for s in said), said
    assert any("b-list.json is not a bench report (no header and rows)" in s for s in said), said
    (bench / "a-torn.json").unlink()
    (bench / "b-list.json").unlink()
    cfg = experiments.variants("01_instability", "smoke")[1][0][0]  # 2 × 2, 2 turns × 8 tokens, 3 steps
    assert experiments.estimate_seconds(cfg, b) == pytest.approx(2.0 * (4 * 2 * 8) / (8 * 2 * 32) * 3)
    assert experiments.estimate_seconds(cfg, None) is None
    # another model's seconds say nothing about this one's
    assert experiments.estimate_seconds(cfg, {**b, "model": "smollm2-135m-instruct"}) is None
    # a config that leaves the model out (the paper profile) is estimated from the bench of the
    # model it will load (it never was while its name stayed None)
    monkeypatch.delenv("RAGEN_MODEL", raising=False)
    left_out = config.from_dict({}, {"env.name": "bandit", "train.steps": 1})
    assert experiments.estimate_seconds(left_out, {**b, "model": "smollm2-135m-instruct"}) is not None
    # the env's own budgets stand in for None (paper profile: Bandit 1 turn × 500 tokens)
    paper = config.from_dict({}, {"env.name": "bandit", "model.name": "tiny-random", "train.steps": 1})
    assert paper.rollout.max_turns is None and paper.rollout.max_new_tokens is None
    assert experiments.estimate_seconds(paper, b) == pytest.approx(
        2.0 * (paper.train.groups * paper.train.group_size * 1 * 500) / (2 * 4 * 2 * 32)
    )


# --- interrupting a grid -------------------------------------------------------------------------
def slow_train(cfg, run):
    """A run that logs one step, says which process trains it, then trains "forever" (60 s)."""
    run.resume()
    run.log(0, {"pid": os.getpid()})
    (Path(run.path).parent.parent.parent / "pids" / str(os.getpid())).touch()
    time.sleep(60)


# A process started with a non-interactive shell's `&` inherits SIGINT ignored (CI launched that
# way timed out here twice); the grid under test gets Python's own Ctrl-C handler, as in a terminal
# or a Jupyter kernel.
GRID = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from ragen_lib import config, experiments
from tests.test_experiments import slow_train
cfgs = [config.from_dict({}, {"train.seed": s, "train.steps": 3}) for s in range(6)]
experiments.run_grid(sys.argv[1], "f", cfgs, slow_train, progress=False, slots=[{}, {}])
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (OSError, IndexError):
        return False
    return state not in "ZX"  # a zombie (no init to reap it in a container) is dead


# The kernel hands a signal sent to a process to any thread that does not block it, not always the
# main one; this helper thread takes Ctrl-C itself once both workers train, as the kernel may.
SIGNAL_A_HELPER_THREAD = """
import pathlib, signal, sys, threading, time

def take_ctrl_c():
    while len(list((pathlib.Path(sys.argv[1]) / "pids").iterdir())) < 2:
        time.sleep(0.1)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

threading.Thread(target=take_ctrl_c, daemon=True).start()
"""


def start_grid(root: Path, script: str = GRID) -> tuple[subprocess.Popen, list[int]]:
    (root / "pids").mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the test can clean up the whole group whatever happens
    )
    deadline = time.monotonic() + 180
    while len(list((root / "pids").iterdir())) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    workers = [int(p.name) for p in (root / "pids").iterdir()]
    assert len(workers) == 2, proc.communicate(timeout=5)[0] if proc.poll() is not None else workers
    return proc, workers


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, None], ids=["ctrl-c", "sigterm", "ctrl-c-to-a-helper-thread"]
)
def test_interrupting_a_grid_stops_workers_and_cancels_queued_runs_within_seconds(tmp_path, sig):
    """Jupyter's stop button (SIGINT to the kernel only) or SIGTERM to the parent: before, the grid
    returned after every queued run had trained, or left its workers training and starting more.
    A signal that lands on one of the pool's helper threads only sets a flag the main thread reads
    when it runs Python again: the grid waited out the running runs (still running at 20 s)."""
    proc, workers = start_grid(tmp_path, GRID if sig else SIGNAL_A_HELPER_THREAD + GRID)
    try:
        t0 = time.monotonic()
        if sig:
            proc.send_signal(sig)
        out = proc.communicate(timeout=20)[0]
        took = time.monotonic() - t0
        assert took < 10, out
        print(f"grid stopped {took:.1f} s after {signal.Signals(sig).name if sig else 'SIGINT to a thread'}")
        assert wait_gone(workers, 5) == [], out
        # the runs the executor had already handed to its call queue count as queued, not as stopped
        stop = "grid interrupted: 4 queued run(s) cancelled, 2 stopped mid-run, 2 worker(s) stopped"
        assert stop in out, out
        assert "Exception in thread" not in out
        folders = sorted((tmp_path / "runs" / "f").iterdir())
        assert len(folders) == 2  # the four queued runs were never touched
        for folder in folders:
            cfg = config.load(folder / "config.yaml")
            with pytest.warns(runs.RunStoreWarning, match="taking over from PID"), Run(folder, cfg) as run:
                # the dead worker's lock is free: the run is resumable
                assert not run.done and [r["step"] for r in run.metrics()] == [0]
    finally:
        with pytest.MonkeyPatch.context():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in workers:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def test_grid_workers_die_with_a_killed_parent(tmp_path):
    """SIGKILL leaves the parent no time to clean up: the workers notice and die on their own."""
    proc, workers = start_grid(tmp_path)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert wait_gone(workers, 5) == []
    finally:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_action_count_variants_get_a_5k_budget_and_the_prompt_says_so():
    """Table 3 as RAGEN (train_all.sh:117-124): k actions per turn with a trajectory budget of 5k,
    k = 1..8 in the paper profile; the first prompt states the 5k budget, the second the 5k minus
    what the first turn executed."""
    from ragen_lib.envs import make
    from ragen_lib.rollout import Episode

    _, points = experiments.variants("05_rollout_quality", "paper")
    study = [c for c, labels in points if labels.get("study") == "actions" and c.train.seed == 0]
    ks = sorted(c.rollout.max_actions_per_turn for c in study)
    assert ks == list(range(1, 9))
    for c in study:
        k, budget = c.rollout.max_actions_per_turn, c.rollout.max_actions_per_episode
        assert budget == 5 * k
        ep = Episode(make(c.env.name), 0, c.rollout)
        first = ep.messages[-1]["content"]
        assert f"You can make up to {budget} actions" in first and f"You have {budget} actions left" in first
        assert ep.step("I go.</think><answer>" + " || ".join(["Up"] * (k + 1)) + "</answer>") is not None
        assert f"You have {budget - len(ep.turns[0].executed)} actions left" in ep.messages[-1]["content"]
        assert len(ep.turns[0].executed) == min(k, budget)  # the per-turn limit cut the (k+1)th action


class _AtDecide(Exception):
    """Raised by the stand-in `analysis.decide`: the notebook's studies have been read."""


def _studies_on_the_grid(name: str, profile: str) -> tuple[list, object]:
    """Run notebook `name` as papermill would, with `run_finding` returning the profile's grid as
    metrics-shaped rows (every run of `variants`, 3 steps of random metrics, no training) and the
    plots drawing nothing; stop at its `analysis.decide` and return the (claim, a, b) studies and
    the frame they would be judged on."""
    from dataclasses import asdict
    from unittest import mock

    import numpy as np
    import pandas as pd

    from ragen_lib import analysis, metrics, plots

    rng = np.random.default_rng(0)
    shifted = ["val/success/bandit-heldout", "val/success/bandit-heldout-rev", "val/success/frozenlake"]

    def grid(finding, profile_, seeds=None, overrides=None, **_):
        finding, pairs = experiments.variants(finding, profile_, seeds=seeds, overrides=overrides)
        rows = []
        for c, _ in pairs:
            run_id = runs.run_dir(Path("/nonexistent"), finding, c).name
            flat = runs.config_columns(asdict(c))
            for step in range(3):
                m = {k: float(rng.random()) for k in [*metrics.METRICS, *shifted]}
                rows.append({"run_id": run_id, "finding": finding, "done": True, "step": step, **m, **flat})
        df = pd.DataFrame(rows).drop_duplicates(["run_id", "step"])  # variants sharing a config: one run
        df = experiments.label_rows(df, experiments.grid_labels(Path("/nonexistent"), finding, pairs))
        df["profile"] = profile_
        df.attrs.update(
            profile=profile_, finding=finding, wall_s=0.0, root="/nonexistent", results="/nonexistent"
        )
        return df

    seen = {}

    def decide(df, claim, studies, primary, **_):
        seen.update(studies=studies, df=df)
        raise _AtDecide

    source = Path(f"notebooks/{name}.py").read_text()
    source = re.sub(r"^profile = None\b", f"profile = {profile!r}", source, count=1, flags=re.M)
    drawn = mock.MagicMock(return_value="figure.png")
    with (
        mock.patch.object(experiments, "run_finding", grid),
        mock.patch.object(analysis, "decide", decide),
        mock.patch.multiple(plots, curves=drawn, bars=drawn, save=drawn),
        mock.patch("IPython.display.display"),
        pytest.raises(_AtDecide),
    ):
        exec(compile(source, f"notebooks/{name}.py", "exec"), {"__name__": "__main__"})
    return seen["studies"], seen["df"]


@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_every_notebooks_arms_find_runs_and_one_run_a_seed_in_every_profile(profile, capsys):
    """A study whose arm matches no run reads "no data", and one matching two runs of a seed would
    average them under one seed, only after the grid has trained (hours at quick, days at paper);
    a judged finding whose studies all mix in a pilot arm spends its seeds on PILOT rows. All three
    are properties of the notebook's selectors and the profile's grid, checked here without
    training."""
    from ragen_lib import analysis

    judged_findings = set()
    for name in experiments.findings():
        studies, df = _studies_on_the_grid(name, profile)
        for claim, a, b in studies:
            select = analysis.judging._select
            arms = {"a": select(df, a), "b": None if b is None else select(df, b)}
            for arm, part in arms.items():
                if part is None:
                    continue
                assert len(part), (
                    f"{name} {profile}: {claim.id}: arm {arm} ({a if arm == 'a' else b}) has no run"
                )
                assert not analysis.judging._runs_per_seed(arm, part), (name, profile, claim.id)
            if all(part is None or part["judged"].all() for part in arms.values()):
                judged_findings.add(name)
    declared = experiments.load_profile(profile)["judged"]
    wanted = set(experiments.findings()) if declared == "all" else {j["finding"] for j in declared}
    assert wanted <= judged_findings, (
        f"{profile}: judged findings with no fully judged study: {wanted - judged_findings}"
    )


def test_a_run_two_grid_points_share_serves_both_studies():
    """In the paper profile Table 2's 8×16 point is Fig. 10's online-1 run (one config): keyed by
    run alone, the run kept only the last point's labels and Table 2 lost a column."""
    import pandas as pd

    finding, pairs = experiments.variants("05_rollout_quality", "paper")
    wanted = experiments.grid_labels(Path("/x"), finding, pairs)
    shared = [sets for sets in wanted.values() if len(sets) > 1]
    assert len(shared) == 5 and all({s["study"] for s in sets} == {"pxn", "online"} for sets in shared)
    df = pd.DataFrame([{"run_id": r, "step": s, "study": "stale"} for r in wanted for s in range(2)])
    df.attrs["finding"] = finding
    out = experiments.label_rows(df, wanted)
    assert len(out) == 2 * sum(len(sets) for sets in wanted.values()) and out.attrs["finding"] == finding
    pxn = out[out["study"] == "pxn"]
    # every P×N point of the grid keeps its 5 seeds, the shared one included
    cfg_of = {runs.run_dir(Path("/x"), finding, c).name: c for c, _ in pairs}
    pxn_points = {(cfg_of[r].train.groups, cfg_of[r].train.group_size) for r in pxn["run_id"]}
    assert pxn_points == {(4, 32), (8, 16), (16, 8), (32, 4), (64, 2), (128, 1)}
    assert pxn["run_id"].nunique() == 30 and out[out["study"] == "online"]["run_id"].nunique() == 20
    # an arm whose selector does not split the shared run's label sets reads its steps once
    from ragen_lib import analysis

    one = out[out["run_id"] == next(r for r, sets in wanted.items() if len(sets) > 1)]
    assert len(one) == 4 and len(analysis.judging._select(one, {"step": [0, 1]})) == 2


def test_samples_of_a_run_two_grid_points_share_carry_both_labels(tmp_path):
    def fake_train(cfg, run):
        for s in range(cfg.train.steps):
            run.log(s, {"rollout/success": 0.5})
            run.log_samples(s, [{"text": f"seed {cfg.train.seed} step {s}"}])
        run.mark_done()

    cfgs = seeds(0, 1)
    experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    pairs = [(cfgs[0], {"study": "pxn"}), (cfgs[0], {"study": "online"}), (cfgs[1], {"study": "pxn"})]
    wanted = experiments.grid_labels(tmp_path, "f", pairs)
    df = experiments.label_rows(runs.load(tmp_path, "f"), wanted)
    df.attrs.update(root=str(tmp_path), finding="f")
    got = experiments.samples(df)
    assert sorted(got.groupby("study")["run_id"].nunique().items()) == [("online", 1), ("pxn", 2)]
    assert len(got) == 3 * CFG.train.steps and set(got["cfg.train.seed"]) == {0, 1}


def test_profile_and_grid_mistakes_that_ran_silently_are_refused_by_name(tmp_path, monkeypatch):
    """A bad-input audit: a judged entry naming a misspelt finding ran its study as a pilot (PILOT
    verdicts, 39 judged runs became 31); a variant for a misspelt profile was dropped from every
    profile; an empty grid file trained one default run and an empty value list none; a bad
    runs_per_device or max_episodes_per_step was a bare int() or math error; an empty profiles file
    a TypeError."""
    prof = tmp_path / "profiles.yaml"
    (tmp_path / "01_instability.yaml").write_text("grid: {env.name: [bandit]}\n")
    prof.write_text("quick:\n  judged:\n    - {finding: 01_instabilty}\n")
    with pytest.raises(
        ValueError, match=r"judged entry names finding '01_instabilty', which has no grid file"
    ):
        experiments.load_profile("quick", prof)
    for key, bad, says in (
        ("runs_per_device", "two", "runs_per_device must be a whole number >= 1, got 'two'"),
        ("runs_per_device", "2.7", "runs_per_device must be a whole number >= 1, got 2.7"),
        ("runs_per_device", "0", "runs_per_device must be a whole number >= 1, got 0"),
        (
            "max_episodes_per_step",
            "-1",
            "max_episodes_per_step must be a whole number >= 1 or absent, got -1",
        ),
        ("max_episodes_per_step", "abc", "max_episodes_per_step must be a whole number >= 1 or absent"),
    ):
        prof.write_text(f"smoke:\n  {key}: {bad}\n")
        with pytest.raises(ValueError, match=re.escape(f"profile 'smoke': {says}")):
            experiments.load_profile("smoke", prof)
    prof.write_text("")
    with pytest.raises(ValueError, match=r"profiles.yaml is empty or not a mapping of profiles"):
        experiments.load_profile("smoke", prof)

    prof.write_text("smoke: {}\npaper: {}\n")
    load = experiments.load_profile
    monkeypatch.setattr(experiments, "load_profile", lambda name: load(name, prof))
    grid = tmp_path / "g.yaml"
    grid.write_text("grid:\n  - {train.steps: 2}\n  - {train.steps: 4, profiles: [papr]}\n")
    says = "g.yaml: a variant has profiles: ['papr'], and 'papr' is not a profile (did you mean paper?)"
    with pytest.raises(ValueError, match=re.escape(says + "; profiles: smoke, paper")):
        experiments.variants(grid, "smoke")
    for text, says in (
        ("", "g.yaml is empty: a grid file needs base and/or grid"),
        ("# nothing yet\n", "g.yaml is empty: a grid file needs base and/or grid"),
        (
            "grid: {env.name: []}\n",
            "g.yaml: grid key env.name has no values: give at least one, e.g. env.name: [x]",
        ),
    ):
        grid.write_text(text)
        with pytest.raises(ValueError, match=re.escape(says)):
            experiments.variants(grid, "smoke")


def test_a_run_store_that_cannot_be_made_is_named_before_any_run_not_once_per_run(
    tmp_path, monkeypatch, capsys
):
    """RAGEN_OUTPUTS at a file, papermill run directly: 12 NotADirectoryError tracebacks, then "12 of
    12 runs failed ... rerun to resume them"; and `plan --no-check` let it through to mkdir."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAGEN_OUTPUTS", str(blocker))
    with pytest.raises(ValueError, match=r"the run store .*a-file/smoke cannot be made here: .*a-file is a "
                                         r"file\. Point RAGEN_OUTPUTS at a folder"):  # fmt: skip
        experiments.run_finding("03_uncertainty_filtering", "smoke", progress=False)
    from ragen_lib.__main__ import main

    assert main(["plan", "smoke", "--no-check", "--finding", "03_uncertainty_filtering"]) == 2
    assert "cannot be made here" in capsys.readouterr().err


def test_the_plan_says_when_a_real_models_runs_would_train_on_a_cpu(monkeypatch):
    """PROFILE=quick on a host without CUDA: the plan accepted 1740 steps of the 135M model (weeks on
    a CPU), saying only that nothing was measured."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    text = experiments.format_plan(experiments.plan("quick", names=["02_echo_trap"]))
    assert re.search(r"note: no CUDA GPU here: these 120 steps of \S+ would train on the CPU", text), text
    smoke = experiments.format_plan(experiments.plan("smoke", names=["02_echo_trap"]))
    assert "no CUDA GPU" not in smoke  # the tiny model is meant for the CPU


# --- pinned by mutation testing ------------------------------------------------------------------
def test_a_notebooks_parameters_name_one_results_folder_whatever_their_order(monkeypatch, tmp_path):
    """The same parameters given in another order (papermill's JSON keeps the caller's) are the same
    variant: one folder, its readable part sorted, then a hash of the sorted parameters. Two sets
    that read alike once the name is cut to 60 characters still get two folders (the hash)."""
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    one = {"seeds": [0, 1], "overrides": {"train.steps": 5, "algo.kl_coef": 0.0}}
    other = {"overrides": {"algo.kl_coef": 0.0, "train.steps": 5}, "seeds": [0, 1]}
    folder = experiments.results_root("smoke", one)
    assert experiments.results_root("smoke", other) == folder
    assert folder.parent == tmp_path / "smoke" / "variants"
    assert folder.name.startswith("algo.kl_coef=0.0_train.steps=5_seeds=-0-1-")
    long = {"algo.clip_high": 0.28, "train.actor_lr": 1e-06, "train.critic_lr": 1e-05}
    a = experiments.results_root("smoke", {"overrides": {**long, "train.weight_decay": 0.01}})
    b = experiments.results_root("smoke", {"overrides": {**long, "train.weight_decay": 0.02}})
    readable = "algo.clip_high=0.28_train.actor_lr=1e-06_train.critic_lr=1e-"  # cut at 60 characters
    assert a != b and a.name.startswith(readable + "-") and b.name.startswith(readable + "-")


def test_a_misspelt_profile_key_is_refused_not_left_at_its_default(tmp_path):
    """`seed: [0, 1, 2]` for `seeds` ran the profile on the default seed 0 alone, without a word."""
    path = tmp_path / "profiles.yaml"
    path.write_text("smoke:\n  seed: [0, 1, 2]\n")
    with pytest.raises(ValueError, match=r"profile 'smoke' has unknown key\(s\) \['seed'\]; valid: seeds"):
        experiments.load_profile("smoke", path)
    path.write_text("smoke:\n  seeds: [0, 1, 2]\n")
    assert experiments.load_profile("smoke", path)["seeds"] == [0, 1, 2]


def test_a_run_folder_that_is_there_but_not_finished_is_still_missing(tmp_path):
    """`missing_runs` asks whether the run stands finished (`runs.stands`), not whether its folder
    exists: a run stopped at step 1 of 3 is not trained, and its arm must say so."""
    unfinished, finished = seeds(0, 1)
    run = Run(runs.run_dir(tmp_path, "f", unfinished), unfinished)
    run.log(0, {"a": 0})
    run.close()
    with Run(runs.run_dir(tmp_path, "f", finished), finished) as run:
        for s in range(3):
            run.log(s, {"a": s})
        run.mark_done()
    pairs = [(unfinished, {"study": "x"}), (finished, {"study": "x"})]
    missing = experiments.missing_runs(tmp_path, "f", pairs)
    assert [m["run_id"] for m in missing] == [runs.run_dir(tmp_path, "f", unfinished).name]
    assert missing[0]["study"] == "x" and missing[0]["cfg.train.seed"] == 0


def test_two_grid_points_with_one_config_and_one_label_set_give_its_rows_once(tmp_path):
    """Grid points the profile's cap shrinks onto one P × N can be one config with the same labels:
    the run's label set is listed once, or `label_rows` repeats every row of it (a run counted twice)."""
    (cfg,) = seeds(0)
    pairs = [(cfg, {"study": "a"}), (cfg, {"study": "a"}), (cfg, {"study": "b"})]
    assert experiments.grid_labels(tmp_path, "f", pairs) == {
        runs.run_dir(tmp_path, "f", cfg).name: [{"study": "a"}, {"study": "b"}]
    }
