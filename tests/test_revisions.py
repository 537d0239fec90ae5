"""A run trained by older code is not reused where today's code trains its config differently
(ragen_lib/revisions.py): checked on the cases worked out by hand, then through the store, the grid,
resume, load and the command line."""

import json
import warnings

import pytest
import torch

from ragen_lib import config, experiments, files, revisions, runs, trainer, workers
from ragen_lib.runs import Run, RunStoreWarning


def cfg_of(**train) -> config.Config:
    return config.from_dict(
        {"model": {"name": "tiny-random"}, "env": {"name": "bandit"}, "train": {"steps": 4, **train}}
    )


OLD = cfg_of(online_k=2, steps=4)  # touched by the change of revision 2 below
SAME = cfg_of(online_k=1, steps=4)  # left alone by it
REAL_CHANGES = revisions.CHANGES  # before the fixture below swaps in a record of its own
ONLINE = revisions.Change(
    2, "2099-01-01", "online-k changed (a test's change)", lambda c: c.train.online_k > 1
)


@pytest.fixture(autouse=True)
def revision_2(monkeypatch):
    """The record's first change plus a change of revision 2 that touches online-k configs only: a
    run of revision 1 stands where it does not touch its config, any run without a record is
    outdated. (The mechanism, on a record of its own: today's later changes are tested below.)"""
    monkeypatch.setattr(revisions, "CHANGES", (revisions.CHANGES[0], ONLINE))
    monkeypatch.setattr(revisions, "REVISION", 2)


def test_todays_record_names_what_each_change_touches():
    """Revision 2: the update's statistics became each mini-batch's, which moved what token-mean
    runs log (packed micro-batches); micro-batch-mean runs log the same where the micro-batches of
    a mini-batch are equal in number (every paper grid point)."""
    real = {c.revision: c for c in REAL_CHANGES}
    assert sorted(real) == list(range(1, max(real) + 1))  # numbered without gaps, from 1
    stats = real[2]
    assert stats.affects(cfg_of()) and stats.affects(cfg_of(loss_agg="token-mean"))
    assert not stats.affects(cfg_of(loss_agg="micro-batch-mean"))


def test_a_change_touches_the_runs_of_earlier_revisions_whose_configs_it_names():
    assert revisions.since(1, OLD) == [ONLINE] and revisions.since(1, SAME) == []
    assert revisions.since(2, OLD) == revisions.since(2, SAME) == []  # trained by this code
    for unrecorded in (None, 0, "1", 1.0, True):  # a DONE edited by hand reads as before the record
        assert revisions.since(unrecorded, SAME) == [revisions.CHANGES[0]], unrecorded
        assert len(revisions.since(unrecorded, OLD)) == 2


def test_the_record_begins_with_every_run_before_it_outdated():
    """The record began on a day that changed the envs, the warm-up and the rollout; changes before
    it were never listed: a run without a revision is of unknown code, whatever its config."""
    [first] = [c for c in revisions.CHANGES if c.revision == 1]
    for name in ("bandit", "sokoban", "frozenlake", "webshop"):
        assert first.affects(config.from_dict({"env": {"name": name}}))


def finished(path, cfg, revision: int | None) -> Run:
    """A finished run whose DONE records `revision` (None: none, as before the record)."""
    run = Run(path, cfg)
    for s in cfg.train.logged_steps:
        run.log(s, {"success": 0.5})
        run.log_samples(s, [{"t": s}])
    run.mark_done({"final": {"step": s}})
    info = json.loads((path / runs.DONE).read_text())
    assert info["training_revision"] == revisions.REVISION  # what this code records
    if revision is None:
        del info["training_revision"]
    else:
        info["training_revision"] = revision
    (path / runs.DONE).write_text(json.dumps(info))
    run.close()
    return run


def test_an_outdated_finished_run_is_moved_aside_and_trains_again(tmp_path, capsys):
    path = runs.run_dir(tmp_path, "f", OLD)
    finished(path, OLD, None)
    with Run(path, OLD) as run:
        why = run.outdated()
        assert "with no training revision recorded, before training revisions were recorded" in why
        assert "online-k changed (a test's change) (2099-01-01)" in why
        assert workers.reuse_finished(run) is False
        assert not run.done and run.metrics() == [] and run.resume() == (None, None)
    out = capsys.readouterr().out
    assert "not reused" in out and "It trains again" in out
    box = next((path / runs.QUARANTINE).iterdir())
    assert {p.name for p in box.iterdir()} == {runs.DONE, "metrics.jsonl", "samples.jsonl"}  # kept


def test_a_run_the_changes_do_not_touch_is_reused(tmp_path):
    for revision in (1, 2):
        path = tmp_path / str(revision)
        finished(path, SAME, revision)
        with Run(path, SAME) as run:
            assert run.outdated() is None and workers.reuse_finished(run) is True and run.done
    path = tmp_path / "current"
    finished(path, OLD, revisions.REVISION)  # trained by this code
    with Run(path, OLD) as run:
        assert run.outdated() is None and workers.reuse_finished(run) is True


def test_the_grid_retrains_an_outdated_run_and_reuses_a_current_one(tmp_path):
    old, same = (runs.run_dir(tmp_path, "f", c) for c in (OLD, SAME))
    finished(old, OLD, 1)
    finished(same, SAME, 1)
    trained = []

    def train(cfg, run):
        trained.append(run.path)
        for s in cfg.train.logged_steps:
            run.log(s, {"success": 1.0})
        run.mark_done()

    experiments.run_grid(tmp_path, "f", [OLD, SAME], train, progress=False)
    assert trained == [old]
    assert [r["success"] for r in Run(old).metrics()] == [1.0, 1.0]  # the new training's
    assert Run(old).outdated() is None and Run(same).done_info()["training_revision"] == 1


def test_an_outdated_run_another_finding_has_trained_anew_is_copied_not_trained(tmp_path, capsys):
    """01, 03 and 04 share Bandit runs: the first grid retrains its outdated copy, the next ones
    take that copy instead of each training their own again."""
    mine, theirs = runs.run_dir(tmp_path, "g", OLD), runs.run_dir(tmp_path, "h", OLD)
    finished(mine, OLD, 1)
    finished(theirs, OLD, 2)
    experiments.run_grid(tmp_path, "g", [OLD], lambda cfg, run: pytest.fail("trained"), progress=False)
    assert Run(mine).outdated() is None and (mine / runs.REUSED_FROM).read_text().strip() == str(
        theirs.relative_to(tmp_path)
    )
    assert Run(mine).metrics() == Run(theirs).metrics() and not (mine / ".adopting").exists()
    assert f"reused from h: {mine.name}" in capsys.readouterr().out
    assert len(list((mine / runs.QUARANTINE).iterdir())) == 1  # the old files, kept


def test_an_outdated_checkpoint_is_not_resumed(tmp_path):
    run = Run(tmp_path / "r", OLD)
    run.log(0, {"success": 0.5})
    run.save_checkpoint(0, {"w": torch.zeros(2)})
    ckpt = run.checkpoint_file()
    state = runs.read_state(ckpt)
    assert state["training_revision"] == revisions.REVISION
    with Run(tmp_path / "r", OLD) as again:
        assert again.resume()[0] == 0  # this code's checkpoint resumes
    files.save_state(ckpt, {**state, "training_revision": 1})
    with (
        Run(tmp_path / "r", OLD) as again,
        pytest.warns(RunStoreWarning, match="training restarts at step 0"),
    ):
        assert again.resume() == (None, None)
        assert again.metrics() == [] and again.checkpoint_file() is None


def test_load_reports_an_outdated_run_as_unfinished_and_another_finding_does_not_adopt_it(tmp_path, capsys):
    from ragen_lib.__main__ import main

    path = runs.run_dir(tmp_path, "f", OLD)
    finished(path, OLD, None)
    with pytest.warns(RunStoreWarning, match="reported as unfinished"):
        df = runs.load(tmp_path, "f")
    assert not df["done"].any()
    with pytest.warns(RunStoreWarning):  # the plot command says why, not "DONE is inconsistent"
        assert main(["plot", str(tmp_path), "--finding", "f", "--metrics", "success"]) == 0
    assert "(not reused: trained with no training revision recorded" in capsys.readouterr().out
    assert runs.finished_elsewhere(tmp_path, "g", path.name) is None
    finished(runs.run_dir(tmp_path, "h", SAME), SAME, 1)
    assert runs.finished_elsewhere(tmp_path, "g", runs.run_dir(tmp_path, "h", SAME).name) is not None


def test_stands_reads_an_outdated_run_as_one_to_train(tmp_path):
    path = runs.run_dir(tmp_path, "f", OLD)
    assert not runs.stands(path, OLD)  # nothing there: rank 0 trains
    finished(path, OLD, None)
    assert not runs.stands(path, OLD)  # outdated: rank 0 retires it and trains
    finished(runs.run_dir(tmp_path, "g", SAME), SAME, 1)
    assert runs.stands(runs.run_dir(tmp_path, "g", SAME), SAME)
    (path / runs.DONE).write_text("garbage")  # rank 0 stops on it with the repair command
    assert runs.stands(path, OLD)


def test_the_cli_retrains_an_outdated_run(tmp_path, capsys, monkeypatch):
    from ragen_lib import trainer
    from ragen_lib.__main__ import main

    path = runs.run_dir(tmp_path, "adhoc", OLD)
    finished(path, OLD, None)
    cfg_path = tmp_path / "c.yaml"
    config.save(OLD, cfg_path)
    called = []
    monkeypatch.setattr(trainer, "train", lambda cfg, run, **k: called.append(run.path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["run", str(cfg_path), "--out", str(tmp_path), "--quiet"]) == 0
    assert called == [path] and "It trains again" in capsys.readouterr().out
    # a model that is not there is named before an outdated run is moved aside, as for a new run
    gone = config.from_dict(OLD.to_dict(), {"model.name": str(tmp_path / "gone.gguf")})
    finished(runs.run_dir(tmp_path, "adhoc", gone), gone, None)
    config.save(gone, cfg_path)
    assert main(["run", str(cfg_path), "--out", str(tmp_path), "--quiet"]) == 2
    assert "gone.gguf does not exist" in capsys.readouterr().err
    assert (runs.run_dir(tmp_path, "adhoc", gone) / runs.DONE).exists()


def test_the_plan_counts_outdated_runs_as_runs_to_train(tmp_path):
    """make replicate-all sizes the disk and time by the plan: an outdated run trains again."""
    finding, pairs = experiments.variants("05_rollout_quality", "smoke")
    cfgs = {runs.run_dir(tmp_path, finding, c): c for c, _ in pairs}
    for path, cfg in cfgs.items():
        finished(path, cfg, 1)
    [row] = experiments.plan("smoke", root=tmp_path, names=[finding], device="cpu")["findings"]
    online = [c for c in cfgs.values() if c.train.online_k > 1]  # smoke's 3 steps: no k divides them
    assert 0 < len(online) < len(cfgs) and row["to_train"] == len(online)


def test_repair_keeps_the_revision_of_a_done_cut_short(tmp_path):
    """DONE's first key is the revision, so a copy cut short still names it; one from before the
    record has none to keep, and the rebuilt run is outdated."""
    for revision, outdated in ((2, False), (None, True)):
        path = tmp_path / str(revision)
        finished(path, OLD, revision)
        whole = (path / runs.DONE).read_bytes()
        (path / runs.DONE).write_bytes(whole[: len(whole) // 2])
        with Run(path) as run:
            [action] = run.repair()
            assert ("nor is the code's training revision" in action) is outdated
            assert (run.outdated() is not None) is outdated


# --- The code that trains, fingerprinted (revisions.TRAINING_CODE) ------------------------------


def test_the_code_that_trains_is_the_code_the_record_was_last_checked_against():
    now, changed = revisions.training_code(), revisions.unreviewed()
    pasted = "".join(f'\n    "{m}": "{d}",' for m, d in sorted(now.items()))
    assert not changed, (
        f"the code that trains changed in {', '.join(changed)} (a module added, removed or edited beyond "
        "its docstrings and comments). If this changes what any config trains (other numbers for the "
        "same config and seed), add a revisions.Change with the next revision and a predicate naming "
        "the configs it touches, so that their stored runs are trained again; if it does not (a "
        "refactor, an error's wording), add none. Either way, set revisions.TRAINING_CODE to:"
        f" {{{pasted}\n}}"
    )


def test_a_digest_keeps_docstrings_comments_and_layout_out_and_every_change_that_runs_in():
    base = 'def f(x):\n    """Twice x."""\n    return 2 * x\n'
    same = [
        'def f(x):\n    """Two times x: a docstring reworded."""\n    return 2 * x\n',
        "def f(x):\n    # a comment\n    return 2*x  # and another\n",
        '"""A module docstring."""\n\n\ndef f(x):\n    return (\n        2 * x\n    )\n',
    ]
    other = [
        "def f(x):\n    return 3 * x\n",  # a constant
        "def f(y):\n    return 2 * y\n",  # a name
        "def f(x):\n    return x * 2\n",  # an order
        'def f(x):\n    raise ValueError("say what to fix")\n',  # a message is code too
    ]
    d = revisions.code_digest(base)
    assert len(d) == 12 and all(revisions.code_digest(s) == d for s in same)
    assert len({d, *(revisions.code_digest(s) for s in other)}) == 1 + len(other)
    # A function whose body was only its docstring still parses as one that does nothing.
    assert revisions.code_digest('def g():\n    """Nothing."""\n') == revisions.code_digest(
        "def g():\n    pass\n"
    )


def test_the_fingerprint_covers_what_the_trainer_imports_and_nothing_it_names_as_not_training(
    tmp_path, monkeypatch
):
    # A package of our own, worked by hand: the trainer imports a (a module) and b.leaf (a module
    # in a package, whose __init__ runs too); a imports runs, which is not followed to its import
    # of hidden; plots is imported by nobody on the way.
    files = {
        "ragen_lib/__init__.py": "",
        "ragen_lib/trainer.py": "from ragen_lib import a\nfrom ragen_lib.b.leaf import thing\nimport numpy\n",
        "ragen_lib/a.py": "from ragen_lib import runs\nfrom ragen_lib.a import nothing_new\n",
        "ragen_lib/b/__init__.py": "",
        "ragen_lib/b/leaf.py": "thing = 1\n",
        "ragen_lib/runs.py": "from ragen_lib import hidden\n",
        "ragen_lib/hidden.py": "",
        "ragen_lib/plots.py": "from ragen_lib import trainer\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(revisions, "_ROOT", tmp_path)
    assert revisions.training_modules() == [
        "ragen_lib",
        "ragen_lib.a",
        "ragen_lib.b",
        "ragen_lib.b.leaf",
        "ragen_lib.trainer",
    ]


def test_the_real_trainer_reaches_the_envs_the_losses_and_generation_but_not_the_store_or_analysis():
    modules = revisions.training_modules()
    for m in (
        "ragen_lib.rollout",
        "ragen_lib.envs.sokoban",
        "ragen_lib.algorithms.losses",
        "ragen_lib.generation",
    ):
        assert m in modules
    for m in (
        "ragen_lib.runs",
        "ragen_lib.metrics",
        "ragen_lib.analysis",
        "ragen_lib.plots",
        "ragen_lib.experiments",
        "ragen_lib.workers",
    ):
        assert not [x for x in modules if x == m or x.startswith(m + ".")], m


def edited(monkeypatch, module="ragen_lib.rollout"):
    """The code as a researcher's local edit of `module` leaves it: its digest no longer matches."""
    monkeypatch.setattr(revisions, "TRAINING_CODE", {**revisions.TRAINING_CODE, module: "0" * 12})


def test_the_grid_says_when_it_reuses_runs_while_the_code_that_trains_has_unreviewed_edits(
    tmp_path, capsys, monkeypatch
):
    """Edit the loss, rerun the notebook: the grid reuses every finished run of the same config as
    if the edited code trained it. Tests catch this at `make test`; a grid run before that says it."""
    finished(runs.run_dir(tmp_path, "f", SAME), SAME, 2)
    never = lambda cfg, run: pytest.fail("trained")  # noqa: E731
    experiments.run_grid(tmp_path, "f", [SAME], never, progress=False)
    assert "note:" not in capsys.readouterr().out  # the code is the code the record was checked against
    edited(monkeypatch)
    experiments.run_grid(tmp_path, "f", [SAME], never, progress=False)
    out = capsys.readouterr().out
    assert (
        "note: 1 stored run(s) are taken as trained by today's code" in out and "(ragen_lib.rollout)" in out
    )
    # A run left with a checkpoint counts too: it resumes on the edited code.
    resumed = runs.run_dir(tmp_path, "f", OLD)
    (resumed / runs.CKPT).mkdir(parents=True)
    experiments.run_grid(tmp_path, "f", [SAME, OLD], lambda c, run: None, progress=False)
    assert "note: 2 stored run(s)" in capsys.readouterr().out
    # A grid with nothing stored to take says nothing.
    trained = []
    experiments.run_grid(tmp_path, "new", [cfg_of(steps=2)], lambda c, run: trained.append(c), progress=False)
    assert trained and "note:" not in capsys.readouterr().out


def test_the_cli_says_when_it_reuses_a_run_while_the_code_that_trains_has_unreviewed_edits(
    tmp_path, capsys, monkeypatch
):
    from ragen_lib.__main__ import main

    finished(runs.run_dir(tmp_path, "adhoc", SAME), SAME, 2)
    config.save(SAME, tmp_path / "c.yaml")
    argv = ["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0 and "note:" not in capsys.readouterr().out
    edited(monkeypatch, "ragen_lib.algorithms.losses")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "finished run reused" in out and "(ragen_lib.algorithms.losses)" in out
    # A run left with a checkpoint resumes on the edited code: the CLI says so there too.
    monkeypatch.setattr(trainer, "train", lambda cfg, run, progress: None)
    left = cfg_of(online_k=1, steps=6)
    with Run(runs.run_dir(tmp_path, "adhoc", left), left) as run:
        run.log(0, {"success": 0.5})
        run.save_checkpoint(0, {"training_revision": revisions.REVISION})
    config.save(left, tmp_path / "left.yaml")
    assert main(["run", str(tmp_path / "left.yaml"), "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "note: 1 stored run(s)" in out and "(ragen_lib.algorithms.losses)" in out


def test_the_plan_says_so_before_a_replication_starts(tmp_path, monkeypatch):
    """`make replicate-all` runs headless: the grids' note lands inside the executed notebooks, so
    the plan it prints on the terminal first says it too."""
    finding, pairs = experiments.variants("03_uncertainty_filtering", "smoke")
    cfg = pairs[0][0]
    finished(runs.run_dir(tmp_path, finding, cfg), cfg, 2)
    p = experiments.plan("smoke", root=tmp_path, names=[finding], device="cpu")
    assert p["stored"] == 1 and p["edited"] == [] and "note:" not in experiments.format_plan(p)
    edited(monkeypatch, "ragen_lib.envs.sokoban")
    p = experiments.plan("smoke", root=tmp_path, names=[finding], device="cpu")
    assert p["edited"] == ["ragen_lib.envs.sokoban"]
    assert "note: 1 stored run(s) are taken as trained by today's code" in experiments.format_plan(p)
