"""A run trained by older code is not reused where today's code trains its config differently
(ragen_lib/revisions.py): checked on the cases worked out by hand, then through the store, the grid,
resume, load and the command line."""

import json
import warnings

import pytest
import torch

from ragen_lib import config, experiments, revisions, runs
from ragen_lib.runs import Run, RunStoreWarning


def cfg_of(**train) -> config.Config:
    return config.from_dict(
        {"model": {"name": "tiny-random"}, "env": {"name": "bandit"}, "train": {"steps": 4, **train}}
    )


OLD = cfg_of(online_k=2, steps=3, val_every=1)  # 3 steps at k=2: the last rollout fed 2, now 1
SAME = cfg_of(online_k=1, steps=4, val_every=2)


@pytest.mark.parametrize(
    ("online_k", "steps", "val_every", "samples_every", "touched"),
    [
        (1, 200, 5, 10, False),  # online-1: nothing changed
        (2, 200, 10, 10, False),  # 2 divides 10: both rules validate at 0, 10, 20, ...
        (2, 200, 5, 10, True),  # old: 0, 10, 20 (multiples of lcm 10); new: also 6, 16, ... (41 not 21)
        (10, 200, 5, 10, False),  # every rollout passes a multiple of 5, and every logged step was one
        (5, 200, 5, 10, False),
        (2, 200, 10, 5, True),  # the samples: old at 0, 10, ...; new also at 6, 16, ...
        (10, 3, 1, 1, True),  # smoke: the only rollout fed 10 updates, now 3
    ],
)
def test_the_online_k_change_touches_exactly_the_configs_whose_steps_it_moved(
    online_k, steps, val_every, samples_every, touched
):
    cfg = cfg_of(online_k=online_k, steps=steps, val_every=val_every, samples_every=samples_every)
    changes = revisions.since(None, cfg)
    assert any("online-k" in c.what for c in changes) is touched
    assert revisions.since(revisions.REVISION, cfg) == []  # trained by this code: it stands


def test_the_end_id_change_touches_every_model_but_the_built_in_ones():
    for name, touched in [
        ("tiny-random", False),
        ("smollm2-135m-instruct", False),
        ("Qwen/Qwen2.5-0.5B-Instruct", True),
    ]:
        cfg = config.from_dict({"model": {"name": name}})
        assert any("end id" in c.what for c in revisions.since(0, cfg)) is touched, name


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
        assert (
            "online-k counted updates" in run.outdated()
            and "before revisions were recorded" in run.outdated()
        )
        assert experiments.reuse_finished(run) is False
        assert not run.done and run.metrics() == [] and run.resume() == (None, None)
    out = capsys.readouterr().out
    assert "not reused" in out and "It trains again" in out
    box = next((path / runs.QUARANTINE).iterdir())
    assert {p.name for p in box.iterdir()} == {runs.DONE, "metrics.jsonl", "samples.jsonl"}  # kept


def test_a_run_the_changes_do_not_touch_is_reused_whatever_its_revision(tmp_path):
    for revision in (None, 0, revisions.REVISION):
        path = tmp_path / str(revision)
        finished(path, SAME, revision)
        with Run(path, SAME) as run:
            assert run.outdated() is None and experiments.reuse_finished(run) is True and run.done
    path = tmp_path / "current"
    finished(path, OLD, revisions.REVISION)  # trained by this code
    with Run(path, OLD) as run:
        assert run.outdated() is None and experiments.reuse_finished(run) is True


def test_the_grid_retrains_an_outdated_run_and_reuses_a_current_one(tmp_path):
    old, same = (runs.run_dir(tmp_path, "f", c) for c in (OLD, SAME))
    finished(old, OLD, None)
    finished(same, SAME, None)
    trained = []

    def train(cfg, run):
        trained.append(run.path)
        for s in cfg.train.logged_steps:
            run.log(s, {"success": 1.0})
        run.mark_done()

    experiments.run_grid(tmp_path, "f", [OLD, SAME], train, progress=False)
    assert trained == [old]
    assert [r["success"] for r in Run(old).metrics()] == [1.0, 1.0]  # the new training's
    assert Run(old).outdated() is None and Run(same).done_info().get("training_revision") is None


def test_an_outdated_checkpoint_is_not_resumed(tmp_path):
    run = Run(tmp_path / "r", OLD)
    run.log(0, {"success": 0.5})
    run.save_checkpoint(0, {"w": torch.zeros(2)})
    ckpt = run.checkpoint_file()
    state = runs.read_state(ckpt)
    assert state["training_revision"] == revisions.REVISION
    with Run(tmp_path / "r", OLD) as again:
        assert again.resume()[0] == 0  # this code's checkpoint resumes
    runs.save_state(ckpt, {**state, "training_revision": 0})
    with (
        Run(tmp_path / "r", OLD) as again,
        pytest.warns(RunStoreWarning, match="training restarts at step 0"),
    ):
        assert again.resume() == (None, None)
        assert again.metrics() == [] and again.checkpoint_file() is None


def test_load_reports_an_outdated_run_as_unfinished_and_another_finding_does_not_adopt_it(tmp_path):
    path = runs.run_dir(tmp_path, "f", OLD)
    finished(path, OLD, None)
    with pytest.warns(RunStoreWarning, match="reported as unfinished"):
        df = runs.load(tmp_path, "f")
    assert not df["done"].any()
    assert runs.finished_elsewhere(tmp_path, "g", path.name) is None
    finished(runs.run_dir(tmp_path, "h", SAME), SAME, None)
    assert runs.finished_elsewhere(tmp_path, "g", runs.run_dir(tmp_path, "h", SAME).name) is not None


def test_other_data_parallel_ranks_train_with_rank_0_when_its_run_is_outdated(tmp_path):
    path = runs.run_dir(tmp_path, "f", OLD)
    assert not runs.rank0_stops_at(path, OLD)  # nothing there: rank 0 trains
    finished(path, OLD, None)
    assert not runs.rank0_stops_at(path, OLD)  # outdated: rank 0 retires it and trains
    finished(runs.run_dir(tmp_path, "g", SAME), SAME, None)
    assert runs.rank0_stops_at(runs.run_dir(tmp_path, "g", SAME), SAME)
    (path / runs.DONE).write_text("garbage")  # rank 0 stops on it with the repair command
    assert runs.rank0_stops_at(path, OLD)


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


def test_the_plan_counts_outdated_runs_as_runs_to_train(tmp_path):
    """make replicate-all sizes the disk and time by the plan: an outdated run trains again."""
    finding, pairs = experiments.variants("05_rollout_quality", "smoke")
    cfgs = {runs.run_dir(tmp_path, finding, c): c for c, _ in pairs}
    for path, cfg in cfgs.items():
        finished(path, cfg, None)
    [row] = experiments.plan("smoke", root=tmp_path, names=[finding], device="cpu")["findings"]
    online = [c for c in cfgs.values() if c.train.online_k > 1]  # smoke's 3 steps: no k divides them
    assert 0 < len(online) < len(cfgs) and row["to_train"] == len(online)
