"""The run store, tried as an adversary would: torn tails, corrupt and foreign files, planted
pickles, full disks, SIGKILL at random moments and two writers on one run (docs/RELIABILITY.md)."""

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_lib import config, experiments, files, models, revisions, runs
from ragen_lib.files import DiskFullError
from ragen_lib.runs import CorruptRunError, Run, RunLockedError, RunStoreWarning

CFG = config.from_dict(
    {"algo": {"name": "starpo-ppo"}, "env": {"name": "bandit"}, "train": {"seed": 0, "steps": 12}}
)
ENV = {**os.environ, "PYTHONPATH": os.getcwd()}


def seed(s: int) -> config.Config:
    return config.from_dict(CFG.to_dict(), {"train.seed": s})


def steps_of(run: Run) -> list[int]:
    return [r["step"] for r in run.metrics()]


def trained(path, upto: int, ckpt_every: int = 3, cfg=CFG) -> Run:
    """A run that logged steps 0..upto, with a checkpoint every `ckpt_every` steps."""
    run = Run(path, cfg)
    for s in range(upto + 1):
        run.log(s, {"a": s})
        run.log_samples(s, [{"t": s}])
        if (s + 1) % ckpt_every == 0:
            run.save_checkpoint(s, {"w": torch.full((3,), float(s))})
    return run


def test_run_dir_is_slug_and_config_hash():
    assert runs.run_dir("out", "f", CFG).name == f"starpo-ppo_bandit_s0-{CFG.hash()}"
    assert config.dict_hash(CFG.to_dict()) == CFG.hash() != seed(1).hash()
    # a preset used with another estimator says so in its folder name
    other = config.from_dict({}, {"algo.name": "starpo-s", "algo.advantage": "grpo", "algo.critic": False})
    assert runs.run_dir("out", "f", other).name.startswith("starpo-s+grpo_bandit_s0-")
    slashed = config.from_dict({}, {"env.name": "bandit", "model.name": "Qwen/Qwen2.5-0.5B"})
    assert "/" not in runs.run_dir("out", "f", slashed).name


def test_another_config_in_the_folder_is_refused_without_advising_deletion(tmp_path):
    Run(tmp_path / "r", CFG)
    with pytest.raises(CorruptRunError, match="holds the run of another config") as e:
        Run(tmp_path / "r", seed(1))
    assert "delete" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="elsewhere does not exist"):
        Run(tmp_path / "elsewhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty is not a run folder"):
        Run(tmp_path / "empty")


def test_log_round_trip_no_duplicates_no_gaps(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(
        0,
        {
            "a": np.float32(0.5),
            "b": torch.tensor(3),
            "c": float("nan"),
            "d": np.float64("inf"),
            "e": np.int64(7),
            "f": np.bool_(True),
            "g": np.arange(2),
        },
    )
    run.log(1, {"a": 1.0})
    rows = Run(tmp_path / "r", CFG).metrics()
    assert rows[0]["a"] == 0.5 and rows[0]["b"] == 3 and math.isnan(rows[0]["c"]) and rows[0]["d"] == math.inf
    assert type(rows[0]["e"]) is int and rows[0]["f"] is True and rows[0]["g"] == [0, 1]
    with pytest.raises(ValueError, match="already logged"):
        run.log(1, {"a": 2.0})
    with pytest.raises(ValueError, match="one after another"):
        run.log(3, {"a": 2.0})  # a hole is never written
    run.close()
    with pytest.raises(ValueError, match="already logged"):
        Run(tmp_path / "r", CFG).log(0, {"a": 2.0})  # a fresh handle knows the file's last step


def test_config_yaml_round_trip_with_tuples(tmp_path):
    cfg = config.from_dict({}, {"train.betas": [0.9, 0.99], "env.eval_envs": ["bandit-rev"]})
    run = Run(tmp_path / "r", cfg)
    assert Run(tmp_path / "r", cfg).path == run.path  # the saved YAML (lists) hashes as the tuples did
    assert config.load(run.path / "config.yaml") == cfg


def test_torn_tail_dropped_and_repaired_by_the_writer_only(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(0, {"a": 1})
    run.close()
    with open(run.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 1, "a"')
    before = (run.path / "metrics.jsonl").read_bytes()
    with pytest.warns(RunStoreWarning, match="incomplete line"):
        assert steps_of(Run(run.path)) == [0]  # a reader leaves it, and says so
    assert (run.path / "metrics.jsonl").read_bytes() == before
    with Run(tmp_path / "r", CFG) as writer:
        writer.log(1, {"a": 2})  # the writer cuts the torn tail first
        assert steps_of(writer) == [0, 1]


def test_corrupt_middle_line_names_file_line_and_repair(tmp_path):
    run = Run(tmp_path / "r", CFG)
    (run.path / "metrics.jsonl").write_text('{"step": 0}\nGARBAGE\n{"step": 2}\n')
    with pytest.raises(CorruptRunError, match=r"metrics.jsonl, line 2, is not a metric line.*repair") as e:
        run.metrics()
    assert "delete" not in str(e.value)


def test_checkpoints_keep_newest_only_with_identity_and_a_metrics_copy(tmp_path):
    run = trained(tmp_path / "r", 5)  # checkpoints at 2 and 5
    assert [p.name for p in (run.path / "ckpt").iterdir()] == ["step_000005.pt"]
    state = torch.load(run.path / "ckpt" / "step_000005.pt", weights_only=True)
    assert state["step"] == 5 and state["config_hash"] == CFG.hash() and state["config"] == CFG.to_dict()
    assert [json.loads(line)["step"] for line in state["metrics"].splitlines()] == list(range(6))
    step, state = run.load_checkpoint()
    assert step == 5 and torch.equal(state["w"], torch.full((3,), 5.0))
    (run.path / "ckpt" / "step_000005.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CorruptRunError, match="step_000005.pt cannot be read.*repair"):
        run.load_checkpoint()


def test_a_checkpoint_never_covers_a_hole(tmp_path):
    run = Run(tmp_path / "r", CFG)
    run.log(0, {})
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2}\n')  # what a second writer's truncate used to leave
    run._last_step = None
    with pytest.raises(CorruptRunError, match="holds steps 0, 2; a checkpoint at step 2 needs exactly 0-2"):
        run.save_checkpoint(2, {})


def test_resume_trims_steps_after_the_checkpoint(tmp_path):
    run = trained(tmp_path / "r", 7)  # checkpoint at 5, steps 6-7 logged after it
    run.close()
    with Run(run.path, CFG) as again:
        step, _ = again.resume()
        assert step == 5 and steps_of(again) == list(range(6))
        assert [r["step"] for r in again.samples()] == list(range(6))
        again.log(6, {"a": 6})  # continuing is allowed again


def test_a_damaged_sample_line_costs_that_line_not_the_file(tmp_path):
    """A sample line that no longer parsed sent the whole samples.jsonl to quarantine, silently:
    every earlier step's samples were gone from the run (samples have no checkpoint copy)."""
    run = trained(tmp_path / "r", 7)  # checkpoint at 5, steps 6-7 logged after it
    run.close()
    lines = (run.path / "samples.jsonl").read_text().splitlines(keepends=True)
    lines[2] = "garbage\n"
    (run.path / "samples.jsonl").write_text("".join(lines))
    with Run(run.path, CFG) as again:
        with pytest.warns(RunStoreWarning, match="line 3, is not a sample line: kept the 5 samples") as got:
            assert again.resume()[0] == 5
        assert "quarantine" in str(got[0].message)
        assert [r["step"] for r in again.samples()] == [0, 1, 3, 4, 5]
    assert "garbage" in next((run.path / "quarantine").rglob("samples.jsonl")).read_text()


def test_resume_before_the_first_checkpoint_says_the_logged_steps_are_redone(tmp_path):
    run = trained(tmp_path / "r", 1)  # steps 0-1 logged, the first checkpoint would come at step 2
    run.close()
    with Run(run.path, CFG) as again:
        with pytest.warns(RunStoreWarning, match="logged steps 0-1 but has no checkpoint") as got:
            step, state = again.resume()
        assert step is None and state is None and steps_of(again) == []
        assert "redoes them" in str(got[0].message) and "train.checkpoint_every" in str(got[0].message)
        assert again.samples() == []
        assert list((run.path / "quarantine").rglob("metrics.jsonl"))  # kept, not deleted
        assert list((run.path / "quarantine").rglob("samples.jsonl"))
    run = trained(tmp_path / "torn", 1)  # the same with a line that does not parse: samples kept too
    run.close()
    lines = (run.path / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run.path / "metrics.jsonl").write_text("garbage\n" + "".join(lines[1:]))
    with Run(run.path, CFG) as again:
        with pytest.warns(RunStoreWarning, match="logged metrics that do not parse but has no checkpoint"):
            assert again.resume() == (None, None)
        assert steps_of(again) == [] and again.samples() == []
        assert list((run.path / "quarantine").rglob("samples.jsonl"))  # was rewritten to nothing
    fresh = Run(tmp_path / "fresh", CFG)  # nothing logged: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fresh.resume() == (None, None)
    fresh.close()


def test_two_quarantines_of_one_file_in_the_same_second_keep_both(tmp_path, monkeypatch):
    """The quarantine folder is named to the second: a second move of metrics.jsonl within it (a
    resume, then a repair) replaced the first copy, the one thing quarantine promises to keep."""
    monkeypatch.setattr(runs.time, "strftime", lambda fmt: "20261127-230000")  # one second, frozen
    run = Run(tmp_path / "r", CFG)
    for text in ("first\n", "second\n", "third\n"):
        (run.path / "metrics.jsonl").write_text(text)
        run._quarantine([run.path / "metrics.jsonl"])
    kept = sorted(f.read_text() for f in (run.path / "quarantine").rglob("metrics.jsonl"))
    assert kept == ["first\n", "second\n", "third\n"]
    assert sorted(p.name for p in (run.path / "quarantine").iterdir()) == [
        "20261127-230000",
        "20261127-230000-2",
        "20261127-230000-3",
    ]
    run.close()


# --- corruptions: each was accepted silently before (issue 13) --------------------------------------
def cut_last_line(path):
    lines = (path / "metrics.jsonl").read_text().splitlines(keepends=True)
    (path / "metrics.jsonl").write_text("".join(lines[:-1]))


@pytest.mark.parametrize(
    "damage",
    ["last line cut", "file deleted", "hole", "garbage line", "torn and short"],
)
def test_resume_restores_metrics_up_to_the_checkpoint(tmp_path, damage):
    """Checkpoint 5, metrics damaged: resume restores 0-5 from the checkpoint's copy (before: it
    resumed after the last line, leaving a hole, or kept only the steps logged after)."""
    run = trained(tmp_path / "r", 5)
    run.close()
    m = run.path / "metrics.jsonl"
    if damage == "last line cut":
        cut_last_line(run.path)
    elif damage == "file deleted":
        m.unlink()
    elif damage == "hole":
        m.write_text("".join(line for line in m.read_text().splitlines(True) if '"step": 3' not in line))
    elif damage == "garbage line":
        m.write_text(m.read_text().replace('{"step": 2', "GARBAGE", 1))
    else:
        cut_last_line(run.path)
        with open(m, "ab") as f:
            f.write(b'{"step": 5, "a')
    with Run(run.path, CFG) as again:
        with pytest.warns(RunStoreWarning, match="restored steps 0-5 from checkpoint step 5"):
            step, _ = again.resume()
        assert step == 5 and steps_of(again) == list(range(6))
        assert [r["a"] for r in again.metrics()] == list(range(6))
    if damage != "file deleted":
        assert list((run.path / "quarantine").rglob("metrics.jsonl"))  # the damaged file is kept


FUZZ_EXAMPLES = 200


@settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    damage=st.lists(
        st.tuples(
            st.sampled_from(["truncate", "flip", "drop line", "repeat line", "append", "swap lines"]),
            st.integers(0, 10_000),
            st.binary(min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzzed_metrics_damage_is_repaired_or_refused_never_silent(tmp_path_factory, damage):
    """Random damage to metrics.jsonl (checkpoint at 5, steps 0-7 logged): resume gives exactly the
    original steps 0-5, byte for byte, or raises CorruptRunError; it never returns a short, holey or
    altered run."""
    path = tmp_path_factory.mktemp("fuzz") / "r"
    run = trained(path, 7)
    run.close()
    m = path / "metrics.jsonl"
    original = m.read_text().splitlines(keepends=True)[:6]
    for op, at, data in damage:
        raw = m.read_bytes()
        lines = raw.splitlines(keepends=True)
        i = at % max(1, len(raw))
        if op == "truncate":
            raw = raw[:i]
        elif op == "flip":
            raw = raw[:i] + bytes([raw[i] ^ (data[0] or 1)]) + raw[i + 1 :] if raw else raw
        elif op == "drop line" and lines:
            raw = b"".join(lines[: at % len(lines)] + lines[at % len(lines) + 1 :])
        elif op == "repeat line" and lines:
            raw = b"".join(lines[: at % len(lines) + 1] + lines[at % len(lines) :])
        elif op == "swap lines" and len(lines) > 1:
            j = at % (len(lines) - 1)
            raw = b"".join(lines[:j] + [lines[j + 1], lines[j]] + lines[j + 2 :])
        elif op == "append":
            raw = raw + data
        m.write_bytes(raw)
    with Run(path, CFG) as again, warnings.catch_warnings():
        warnings.simplefilter("ignore", RunStoreWarning)
        try:
            step, _ = again.resume()
        except CorruptRunError:
            return
        assert step == 5 and m.read_text().splitlines(keepends=True) == original


def test_checkpoint_of_another_config_is_refused_and_repair_moves_it(tmp_path, capsys):
    from ragen_lib.__main__ import main

    mine = trained(tmp_path / "mine", 2)
    theirs = trained(tmp_path / "theirs", 5, cfg=seed(1))
    mine.close()
    shutil.copy(theirs.path / "ckpt" / "step_000005.pt", mine.path / "ckpt" / "step_000005.pt")
    with Run(mine.path, CFG) as again, pytest.raises(CorruptRunError) as e:
        again.resume()
    assert "written by another config" in str(e.value) and f"repair {mine.path}" in str(e.value)
    assert main(["repair", str(mine.path)]) == 0
    assert "checkpoint moved to" in capsys.readouterr().out
    with Run(mine.path, CFG) as again:
        assert again.resume()[0] == 2  # its own checkpoint again
    assert list((mine.path / "quarantine").rglob("step_000005.pt"))


@pytest.mark.parametrize("damage", ["hole", "garbage line"])
def test_an_older_format_checkpoint_over_a_metrics_hole_is_repaired_not_looped(tmp_path, capsys, damage):
    """A format-1 checkpoint has no copy of the metrics: when they lost a step it covers, resume
    refuses and names repair, and repair must then act (it used to find nothing wrong, so the two
    sent the user back and forth)."""
    from ragen_lib.__main__ import main

    run = trained(tmp_path / "r", 7)
    run.close()
    ckpt = run.path / "ckpt" / "step_000005.pt"
    state = runs.read_state(ckpt)
    del state["metrics"], state["config_hash"]
    files.save_state(ckpt, {**state, "format": 1})
    m = run.path / "metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text("".join(lines[:2] + (["GARBAGE\n"] if damage == "garbage line" else []) + lines[3:]))
    with Run(run.path, CFG) as again, pytest.raises(CorruptRunError, match="older format.*repair"):
        again.resume()
    files.save_state(ckpt.with_name("step_000002.pt"), {**state, "format": 1})  # an older one a crash left
    assert main(["repair", str(run.path)]) == 0
    assert "trains again from step 0" in capsys.readouterr().out
    with Run(run.path, CFG) as again:
        assert again.resume() == (None, None) and steps_of(again) == []
    assert main(["repair", str(run.path)]) == 0
    assert "nothing to repair" in capsys.readouterr().out.lower()
    assert list((run.path / "quarantine").rglob("step_000005.pt"))  # nothing is deleted
    assert list((run.path / "quarantine").rglob("step_000002.pt"))  # not left to be the next newest


def test_an_older_format_checkpoint_over_whole_metrics_still_resumes(tmp_path):
    run = trained(tmp_path / "r", 7)
    run.close()
    ckpt = run.path / "ckpt" / "step_000005.pt"
    state = runs.read_state(ckpt)
    del state["metrics"]
    files.save_state(ckpt, {**state, "format": 1})
    with Run(run.path, CFG) as again:
        assert again.repair() == []
        assert again.resume()[0] == 5 and steps_of(again) == list(range(6))


def test_checkpoint_past_the_last_step_is_refused(tmp_path):
    run = trained(tmp_path / "r", 5)
    files.save_state(run.path / "ckpt" / "step_000099.pt", {**run._identity(99), "metrics": ""})
    run.close()
    with Run(run.path, CFG) as again, pytest.raises(CorruptRunError, match="past this run's last step 11"):
        again.resume()


def test_done_is_written_only_for_steps_0_to_n_minus_1(tmp_path):
    run = trained(tmp_path / "r", 6)
    with pytest.raises(CorruptRunError, match="holds steps 0-6, not 0-11: the run is not marked finished"):
        run.mark_done()
    assert not run.done
    for s in range(7, 12):
        run.log(s, {"a": s})
    run.mark_done({"x": 1})
    assert run.done and Run(run.path).problems() == []
    assert not (run.path / "ckpt").exists()  # a finished run drops its checkpoint and optimizer states


@pytest.mark.parametrize(
    "damage", ["no metrics", "short metrics", "garbage DONE and short metrics", "DONE of another config"]
)
def test_an_inconsistent_done_is_not_reused_and_repair_retrains_it(tmp_path, damage):
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    if damage == "no metrics":
        (run.path / "metrics.jsonl").unlink()
    elif damage == "short metrics":
        cut_last_line(run.path)
    elif damage == "garbage DONE and short metrics":
        (run.path / "DONE").write_text("garbage")
        cut_last_line(run.path)
    else:  # e.g. a DONE copied in from another run's folder
        info = json.loads((run.path / "DONE").read_text())
        (run.path / "DONE").write_text(json.dumps({**info, "config_hash": "0" * 12, "steps": 99}))
    with pytest.raises(CorruptRunError, match=f"is inconsistent.*repair {run.path}"):
        Run(run.path).check_done()
    with pytest.warns(RunStoreWarning, match="marked finished but"):
        df = runs.load(tmp_path, "f")
    assert not df["done"].any()
    actions = Run(run.path).repair()
    assert actions and not run.done and not (run.path / "metrics.jsonl").exists()  # trains again
    assert list((run.path / "quarantine").rglob("DONE"))  # moved aside, not deleted


def test_repair_rebuilds_a_done_that_does_not_read_over_complete_metrics(tmp_path):
    """DONE cut short (a copy between machines: mark_done writes it in one rename) while the metrics
    hold every step: the run finished and only its summary was lost, but repair moved DONE aside and
    the whole run trained again from step 0."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.model_fingerprint = "0123456789abcdef"
    run.mark_done({"device": "NVIDIA H100"})
    run.close()
    whole = (run.path / "DONE").read_bytes()
    (run.path / "DONE").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CorruptRunError, match="is not a JSON summary"):
        Run(run.path).check_done()
    actions = Run(run.path).repair()
    assert len(actions) == 1 and "did not read and the metrics hold every step: rebuilt" in actions[0]
    assert run.done and Run(run.path).problems() == []
    info = Run(run.path).done_info()
    assert info["steps"] == 12 and info["config_hash"] == Run(run.path).config_hash
    assert info["training_revision"] == revisions.REVISION  # DONE's first key: the cut kept it
    # and its second, the weights it trained on: rebuilt without it, the run had stood on any
    # weights, and no verdict saw two models under one name (an audit found it)
    assert info["model_fingerprint"] == "0123456789abcdef"
    assert info["final"] == Run(run.path).metrics()[-1] and "device" not in info
    assert next((run.path / "quarantine").rglob("DONE")).read_bytes() == whole[: len(whole) // 2]
    assert Run(run.path).repair() == []  # repaired: nothing left to do
    assert runs.load(tmp_path, "f")["done"].all()
    # cut before the fingerprint: the repair says the run now stands as one stored before the record
    (run.path / "DONE").write_bytes(whole[:30])
    assert "nor is the model's fingerprint, so it stands on whatever weights" in Run(run.path).repair()[0]
    assert "model_fingerprint" not in Run(run.path).done_info()


def test_repair_cuts_only_a_torn_line_after_a_finished_runs_last_step(tmp_path):
    """Every step 0..N-1 logged, DONE valid, then an incomplete line: repair moved DONE, metrics and
    samples aside and the whole run trained again, for one line that was not a step of it."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    whole = (run.path / "metrics.jsonl").read_bytes()
    with open(run.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 12, "a"')
    assert Run(run.path).problems()  # seen as damage, and the grid would not reuse it
    actions = Run(run.path).repair()
    assert len(actions) == 1 and "incomplete line after its last step: cut" in actions[0]
    assert run.done and Run(run.path).problems() == [] and (run.path / "metrics.jsonl").read_bytes() == whole
    assert b'"step": 12' in next((run.path / "quarantine").rglob("metrics.jsonl")).read_bytes()


@pytest.mark.parametrize("cut", ["torn", "gone"])
def test_repair_restores_a_finished_runs_last_metrics_line_from_its_done(tmp_path, cut):
    """A copy between machines cut short in the last metrics line: DONE holds that row as `final`
    (the trainer writes it), but repair moved DONE aside and the finished run trained again."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done({"final": {"step": 11, "a": 11}, "device": "NVIDIA H100"})
    run.close()
    whole = (run.path / "metrics.jsonl").read_bytes()
    (run.path / "metrics.jsonl").write_bytes(
        whole[:-6] if cut == "torn" else whole[: whole.rindex(b'{"step": 11')]
    )
    assert Run(run.path).problems()
    actions = Run(run.path).repair()
    assert len(actions) == 1 and "step 11 restored from DONE's record of it" in actions[0], actions
    assert run.done and Run(run.path).problems() == [] and (run.path / "metrics.jsonl").read_bytes() == whole
    assert Run(run.path).done_info()["device"] == "NVIDIA H100"  # the record kept, not rebuilt
    assert next((run.path / "quarantine").rglob("metrics.jsonl")).read_bytes() != whole  # the cut file kept


def test_load_warns_and_never_returns_a_short_run_as_finished(tmp_path):
    good = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    good.mark_done({"device": "NVIDIA H100 80GB HBM3"})
    short_cfg = seed(5)
    short = trained(runs.run_dir(tmp_path, "f", short_cfg), 11, cfg=short_cfg)
    short.mark_done()
    cut_last_line(short.path)
    live_cfg = seed(6)
    live = trained(runs.run_dir(tmp_path, "f", live_cfg), 1, cfg=live_cfg)
    with open(live.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 2, "a"')  # a write in flight in a training process
    before = (live.path / "metrics.jsonl").read_bytes()
    with pytest.warns(RunStoreWarning) as record:
        df = runs.load(tmp_path)
    text = " ".join(str(w.message) for w in record)
    assert "marked finished but" in text and "incomplete line" in text
    done = df.groupby("cfg.train.seed")["done"].first().to_dict()
    assert done == {0: True, 5: False, 6: False}
    # DONE's device on every row of a finished run (07's cost rows compare one device's runs only)
    device = df.groupby("cfg.train.seed")["device"].first().to_dict()
    assert device[0] == "NVIDIA H100 80GB HBM3" and (device[6] is None or math.isnan(device[6]))
    assert (live.path / "metrics.jsonl").read_bytes() == before  # a reader never truncates
    with pytest.warns(RunStoreWarning):
        assert set(runs.load(tmp_path, include_running=False)["cfg.train.seed"]) == {0}


def test_load_of_named_runs_skips_a_damaged_leftover_beside_them(tmp_path):
    """A finding's folder may hold runs of an older grid; one of them damaged must not stop a
    notebook from loading its own runs (run_finding loads only the runs of its grid)."""
    good = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    good.mark_done()
    old_cfg = seed(7)
    old = trained(runs.run_dir(tmp_path, "f", old_cfg), 3, cfg=old_cfg)
    old.close()
    with open(old.path / "metrics.jsonl", "ab") as f:
        f.write(b"garbage\n")
    # unfinished and damaged: left out with a warning naming repair (it blocked every plot of the store)
    with pytest.warns(RunStoreWarning, match=r"\(unfinished\) is left out: .*is not a metric line.*repair"):
        assert set(runs.load(tmp_path, "f")["run_id"]) == {good.path.name}
    df = runs.load(tmp_path, "f", run_ids={good.path.name})
    assert set(df["run_id"]) == {good.path.name} and df["done"].all()
    # a finished run that does not read still stops the load: its verdict would lose a seed
    good.close()
    with open(good.path / "metrics.jsonl", "r+b") as f:
        f.write(b"garbage\n")
    with pytest.raises(CorruptRunError, match="is not a metric line"):
        runs.load(tmp_path, "f", run_ids={good.path.name})


# --- other weights under one model name (models.fingerprint) -------------------------------------
def model_folder(path, weights: bytes = b"weights 1"):
    """A model folder `models.check` accepts (config.json, weights, a tokenizer), never loaded."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def on(name: str, **train) -> config.Config:
    return config.from_dict(
        {"model": {"name": name}, "env": {"name": "bandit"}, "train": {"steps": 2, **train}}
    )


def train_here(trained: list):
    """A grid's train_fn that records what `trainer.train` records: the model's fingerprint here."""

    def train(cfg, run):
        trained.append(run.path)
        run.model_fingerprint = models.fingerprint_here(cfg.model.name)
        for s in cfg.train.logged_steps:
            run.log(s, {"success": 1.0})
        run.mark_done()

    return train


def test_a_finished_run_on_other_weights_under_its_name_trains_again_its_results_kept(tmp_path, capsys):
    """A folder written over by another fine-tune keeps its name, and so the run's folder: the grid
    reused the run trained on the old weights, and a verdict mixed two models' runs under one name."""
    folder = model_folder(tmp_path / "m")
    cfg, trained = on(str(folder)), []
    path = runs.run_dir(tmp_path, "f", cfg)
    for _ in range(2):  # the same weights: trained once, then reused
        experiments.run_grid(tmp_path, "f", [cfg], train_here(trained), progress=False)
    then = Run(path).done_info()["model_fingerprint"]
    assert trained == [path] and then == models.fingerprint(str(folder))
    (folder / "model.safetensors").write_bytes(b"other weights")
    now = models.fingerprint(str(folder))
    assert now != then and not runs.stands(path, cfg)
    assert Run(path).outdated() is None  # the stored data alone (`load`, `plot`): it stands
    capsys.readouterr()
    experiments.run_grid(tmp_path, "f", [cfg], train_here(trained), progress=False)
    assert trained == [path, path] and Run(path).done_info()["model_fingerprint"] == now
    assert (
        f"{path.name} was trained on other weights under the name {folder} ({then[:12]}… then, "
        f"{now[:12]}… now, from folder {folder.resolve()}). It trains again"
    ) in capsys.readouterr().out
    [box] = (path / runs.QUARANTINE).iterdir()  # the old results, kept
    assert json.loads((box / runs.DONE).read_text())["model_fingerprint"] == then


def test_a_run_stored_before_fingerprints_were_recorded_stands(tmp_path):
    """Every run of the store before this record has none: it stands, rather than the world
    training again."""
    folder = model_folder(tmp_path / "m")
    cfg, trained = on(str(folder)), []
    experiments.run_grid(tmp_path, "f", [cfg], train_here(trained), progress=False)
    path = runs.run_dir(tmp_path, "f", cfg)
    info = Run(path).done_info()
    del info["model_fingerprint"]
    (path / runs.DONE).write_text(json.dumps(info))
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert runs.stands(path, cfg)
    experiments.run_grid(tmp_path, "f", [cfg], train_here(trained), progress=False)
    assert trained == [path]


def test_a_relative_model_path_from_another_working_folder_is_other_weights(tmp_path, monkeypatch, capsys):
    """`./m` names one run folder from every working folder (absolutised, the names would differ from
    machine to machine, and a store copied between them would train again); the fingerprint tells
    the two folders' weights apart. Where `./m` is not, nothing is compared: the run stands."""
    for where, weights in (("a", b"weights 1"), ("b", b"other weights")):
        model_folder(tmp_path / where / "m", weights)
    (tmp_path / "c").mkdir()
    cfg, trained, store = on("./m"), [], tmp_path / "store"
    path = runs.run_dir(store, "f", cfg)
    monkeypatch.chdir(tmp_path / "a")
    experiments.run_grid(store, "f", [cfg], train_here(trained), progress=False)
    monkeypatch.chdir(tmp_path / "b")
    assert not runs.stands(path, cfg)
    experiments.run_grid(store, "f", [cfg], train_here(trained), progress=False)
    assert trained == [path, path]
    assert "now, from folder " in (out := capsys.readouterr().out) and "(a relative path, read from" in out
    monkeypatch.chdir(tmp_path / "c")
    assert runs.stands(path, cfg)
    experiments.run_grid(store, "f", [cfg], lambda cfg, run: pytest.fail("trained"), progress=False)


def test_a_checkpoint_trained_on_other_weights_is_not_resumed(tmp_path):
    """Resumed, the run would be half one model's training and half another's."""
    folder = model_folder(tmp_path / "m")
    cfg = on(str(folder), steps=4)
    with Run(tmp_path / "r", cfg) as run:
        run.model_fingerprint = models.fingerprint(str(folder))
        run.log(0, {"success": 0.5})
        run.save_checkpoint(0, {"w": torch.zeros(2)})
        assert runs.read_state(run.checkpoint_file())["model_fingerprint"] == run.model_fingerprint
    with Run(tmp_path / "r", cfg) as again:
        assert again.resume()[0] == 0  # the same weights: resumed
    (folder / "model.safetensors").write_bytes(b"other weights")
    with (
        Run(tmp_path / "r", cfg) as again,
        pytest.warns(
            RunStoreWarning, match=r"step 0 was trained on other weights under the name .*: training restarts"
        ),
    ):
        assert again.resume() == (None, None) and again.metrics() == []
        again.log(0, {"success": 0.5})
        again.save_checkpoint(0, {"w": torch.zeros(2)})  # none recorded, as before the record
    (folder / "model.safetensors").write_bytes(b"third weights!")
    with Run(tmp_path / "r", cfg) as again:
        assert again.resume()[0] == 0


def test_reading_a_store_judges_no_run_by_the_model_here(tmp_path, monkeypatch):
    """`load`, `missing_runs` and a grid that trains nothing (RAGEN_TRAIN=stored) read the stored data
    alone, fingerprinting no model: a verdict is a function of the store wherever it is read. Only
    the grid's questions (`stands`, `finished_elsewhere`) compare the weights."""
    folder = model_folder(tmp_path / "m")
    cfg = on(str(folder))
    experiments.run_grid(tmp_path, "f", [cfg], train_here([]), progress=False)
    path = runs.run_dir(tmp_path, "f", cfg)
    then = Run(path).done_info()["model_fingerprint"]
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert runs.finished_elsewhere(tmp_path, "g", path.name) is None  # not adopted by another finding
    monkeypatch.setattr(models, "fingerprint", lambda name: pytest.fail(f"fingerprinted {name}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = runs.load(tmp_path, "f")
    assert df["done"].all() and set(df["model_fingerprint"]) == {then}
    assert experiments.missing_runs(tmp_path, "f", [(cfg, {})]) == []
    experiments.run_grid(
        tmp_path, "f", [cfg], lambda c, r: pytest.fail("trained"), progress=False, train=False
    )
    assert Run(path).done_info()["model_fingerprint"] == then
    # the plan of RAGEN_TRAIN=stored (make replicate-all's first step) counts it stored, as its
    # grid judges it: it had fingerprinted the model and planned the run as "not trained"
    monkeypatch.setenv(experiments.TRAIN_ENV, "stored")
    monkeypatch.setattr(experiments, "findings", lambda: ["f"])
    monkeypatch.setattr(experiments, "variants", lambda name, profile, **kw: ("f", [(cfg, {"judged": True})]))
    plan = experiments.plan("smoke", root=tmp_path)
    assert (plan["findings"][0]["done"], plan["findings"][0]["to_train"]) == (1, 0)


def test_repair_fixes_what_its_messages_send_it_for(tmp_path, capsys):
    """Three states a helper's audit reproduced where the error named repair and repair answered
    "nothing to repair" or refused the folder: an unfinished run's metrics line that does not parse
    (with a checkpoint), a finished run's samples line that does not parse, a finished run's missing
    config.yaml (DONE holds the config)."""
    from ragen_lib.__main__ import main

    crashed = trained(runs.run_dir(tmp_path, "f", seed(1)), 7, cfg=seed(1))  # checkpoint at step 5
    crashed.close()
    lines = (crashed.path / "metrics.jsonl").read_text().splitlines(keepends=True)
    (crashed.path / "metrics.jsonl").write_text("torn\n" + "".join(lines[1:]))
    actions = Run(crashed.path).repair()
    assert len(actions) == 1 and actions[0].startswith(f"{crashed.path / 'metrics.jsonl'}, line 1, is not")
    assert "restored steps 0-5 from checkpoint step 5" in actions[0]
    assert steps_of(Run(crashed.path)) == list(range(6))
    done = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    done.mark_done()
    done.close()
    samples = (done.path / "samples.jsonl").read_text().splitlines(keepends=True)
    (done.path / "samples.jsonl").write_text("".join(samples[:3]) + '{"t": 3, "st\n' + "".join(samples[4:]))
    with pytest.raises(CorruptRunError, match="samples.jsonl, line 4, is not a sample line"):
        runs.load_samples(tmp_path, "f")
    actions = Run(done.path).repair()
    assert actions == [
        f"{done.path / 'samples.jsonl'}, line 4, is not a sample line: kept the 11 samples that read "
        f"(the old file is kept in {done.path / 'quarantine'}/" + actions[0].split("quarantine/")[1]
    ]
    kept = runs.load_samples(tmp_path, "f", run_ids={done.path.name})["step"].tolist()
    assert kept == [s for s in range(12) if s != 3]
    (done.path / "config.yaml").unlink()
    assert main(["repair", str(done.path)]) == 0
    assert "config.yaml was missing: restored from the run's own record" in capsys.readouterr().out
    assert Run(done.path).problems() == [] and Run(done.path).saved_config() == CFG.to_dict()


def test_hand_edited_config_is_explained_and_repair_restores_it(tmp_path):
    run = trained(tmp_path / "runs" / "f" / runs.run_dir(tmp_path, "f", CFG).name, 5)
    run.close()
    cfg_file = run.path / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("steps: 12", "steps: 50"))
    with pytest.raises(CorruptRunError) as e:
        Run(run.path, CFG)
    msg = str(e.value)
    assert "was edited after the run started" in msg and f"repair {run.path}" in msg
    assert "delete" not in msg.lower()
    actions = Run(run.path).repair()
    assert "restored" in actions[0] and "steps: 50" in (run.path / "config.yaml.edited").read_text()
    assert actions[0].endswith("your edit is config.yaml.edited")
    with Run(run.path, CFG) as again:  # the original config again: resumes where it was
        assert again.resume()[0] == 5
    # a config.yaml cut short (a copy, a full disk) is not an edit: repair had called it "your edit"
    whole = cfg_file.read_bytes()
    cfg_file.write_bytes(whole[: len(whole) // 2])
    actions = Run(run.path).repair()
    assert actions[0].endswith("the damaged file (it does not parse) is config.yaml.edited"), actions
    assert cfg_file.read_bytes() == whole


def test_a_repair_stopped_while_restoring_the_config_leaves_a_config_yaml(tmp_path, monkeypatch):
    """The edited config.yaml was moved to quarantine before the original was written back: a
    repair stopped in between left a finished run without one, so load, the grid and repair itself
    no longer saw a run there."""
    run = trained(tmp_path / "runs" / "f" / runs.run_dir(tmp_path, "f", CFG).name, 5)
    run.close()
    cfg_file = run.path / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("steps: 12", "steps: 50"))
    real = runs.write_atomic

    def stopped(path, text):
        if path.name == "config.yaml":
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(runs, "write_atomic", stopped)
    with pytest.raises(KeyboardInterrupt):
        Run(run.path).repair()
    assert "steps: 50" in cfg_file.read_text()  # still there: the edit, untouched
    assert any(p.name == "config.yaml" for p in (run.path / runs.QUARANTINE).rglob("*"))
    monkeypatch.undo()
    assert "restored" in Run(run.path).repair()[0]
    with Run(run.path, CFG) as again:
        assert again.resume()[0] == 5


def test_a_config_yaml_that_no_longer_parses_names_the_repair_and_repair_restores_it(tmp_path, capsys):
    """A damaged config.yaml raised a plain ValueError that named no repair (and the CLI printed a
    traceback), though `repair` restores it from the config the checkpoint recorded."""
    from ragen_lib.__main__ import main

    cfg = config.from_dict(CFG.to_dict(), {"model.name": "tiny-random"})
    run = trained(runs.run_dir(tmp_path, "adhoc", cfg), 5, cfg=cfg)
    run.close()
    cfg_file = run.path / "config.yaml"
    cfg_file.write_text(cfg_file.read_text() + "train: [\n")
    for open_it in (lambda: Run(run.path, cfg), lambda: Run(run.path).steps):
        with pytest.raises(CorruptRunError) as e:
            open_it()
        msg = str(e.value)
        assert (
            msg.startswith(f"{cfg_file}, line ") and "does not parse" in msg and f"repair {run.path}" in msg
        )
    cfg_path = tmp_path / "c.yaml"
    config.save(cfg, cfg_path)
    assert main(["run", str(cfg_path), "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {cfg_file}, line ") and f"repair {run.path}" in err and "Traceback" not in err
    )
    assert "restored" in Run(run.path).repair()[0]
    with Run(run.path, cfg) as again:  # the recorded config again: resumes where it was
        assert again.resume()[0] == 5


def test_the_cli_reuses_a_finished_run_and_drops_a_checkpoint_a_crash_left_beside_done(
    tmp_path, capsys, monkeypatch
):
    from ragen_lib.__main__ import main

    cfg = config.from_dict(CFG.to_dict(), {"model.name": "tiny-random"})
    run = trained(runs.run_dir(tmp_path, "adhoc", cfg), 11, cfg=cfg)
    run.save_checkpoint(11, {"w": torch.zeros(3)})
    kept = run.path / "ckpt.kept"
    shutil.copytree(run.path / "ckpt", kept)
    run.mark_done()
    shutil.move(kept, run.path / "ckpt")  # as if the process died between DONE and the removal
    run.close()
    cfg_path = tmp_path / "c.yaml"
    config.save(cfg, cfg_path)
    assert main(["run", str(cfg_path), "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "removed the leftover checkpoint of finished run" in out and "finished run reused" in out
    assert not (run.path / "ckpt").exists() and Run(run.path).problems() == []
    # A stray RANK in one process (a scheduler's) is rank 0 still: it reuses the run, as above,
    # rather than wait for a rank 0 that does not exist (data parallel: tests/test_distributed.py)
    import ragen_lib.trainer

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(ragen_lib.trainer, "train", lambda *a, **k: pytest.fail("trained a finished run"))
    assert main(["run", str(cfg_path), "--out", str(tmp_path), "--quiet"]) == 0
    assert "finished run reused" in capsys.readouterr().out


# --- a planted pickle --------------------------------------------------------------------------------
class Planted:
    """Unpickling this runs a shell command (what weights_only=False allowed)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_is_refused_and_runs_nothing(tmp_path):
    run = trained(tmp_path / "r", 1, ckpt_every=100)
    marker = tmp_path / "pwned"
    (run.path / "ckpt").mkdir()
    torch.save({"policy": Planted(marker), "step": 1}, run.path / "ckpt" / "step_000001.pt")
    with pytest.raises(CorruptRunError, match="asks to load posix.system.*refused") as e:
        run.resume()
    assert f"repair {run.path}" in str(e.value)
    with pytest.raises(CorruptRunError, match="refused"):
        runs.read_state(run.path / "ckpt" / "step_000001.pt")  # what the other ranks load
    assert not marker.exists()


# --- the lock: one writer per run -----------------------------------------------------------------
HOLDER = """
import sys, time
from ragen_lib import config
from ragen_lib.runs import Run
cfg = config.from_dict({"algo": {"name": "starpo-ppo"}, "train": {"seed": 0, "steps": 12}})
run = Run(sys.argv[1], cfg).lock()
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_process_is_refused_with_the_owners_pid_and_a_dead_owner_is_taken_over(tmp_path):
    path = tmp_path / "r"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError) as e:
            Run(path, CFG).log(0, {})
        msg = str(e.value)
        assert f"PID {holder.pid}" in msg and f"kill {holder.pid}" in msg and "tail -f" in msg
        assert not (path / "metrics.jsonl").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding the lock: the kernel releases it
        holder.wait()
    with pytest.warns(RunStoreWarning, match=f"taking over from PID {holder.pid}"):
        run = Run(path, CFG).lock()
    run.log(0, {})
    assert steps_of(run) == [0]
    # a holder killed after the run's DONE (in its last cleanup) left its PID, but nothing
    # unfinished: the grid that reuses the run said "taking over from PID …, which stopped without
    # finishing" before "reused"
    for step in range(1, CFG.train.steps):
        run.log(step, {})
    run.mark_done()
    run.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunStoreWarning)
        Run(path, CFG).lock().close()


def test_a_newer_handle_in_the_same_process_supersedes_the_older(tmp_path):
    """A notebook cell rerun after an interrupt: the old handle (kept alive by a traceback) must not
    block the new one, and must not write any more."""
    old = Run(tmp_path / "r", CFG)
    old.log(0, {})
    new = Run(tmp_path / "r", CFG)
    new.log(1, {})
    with pytest.raises(RuntimeError, match="superseded"):
        old.log(2, {})
    assert steps_of(new) == [0, 1]


def test_stale_tmp_files_are_removed_when_the_lock_is_taken(tmp_path):
    run = trained(tmp_path / "r", 2)
    run.close()
    (run.path / "ckpt" / "step_000005.pt.tmp").write_bytes(b"half")
    (run.path / "metrics.jsonl.123.tmp").write_text("half")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its owner released the lock cleanly: no "taking over"
        Run(run.path, CFG).lock()
    assert sorted(p.name for p in run.path.rglob("*.tmp")) == []


# --- full disk ---------------------------------------------------------------------------------
class FullFile:
    """A file that takes `room` bytes and then fails as a full disk does."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)

    def flush(self):
        self.f.flush()


class InterruptedFile(FullFile):
    """A file whose write is interrupted by Ctrl-C after `room` bytes."""

    def write(self, data):
        if len(data) > self.room:
            raise KeyboardInterrupt
        return super().write(data)


def test_ctrl_c_during_a_checkpoint_write_stays_an_interrupt(tmp_path, monkeypatch):
    """torch's zip writer turned a KeyboardInterrupt inside torch.save into RuntimeError("enforce
    fail at inline_container.cc"): a one-slot grid logged "run failed" and trained the next run,
    the CLI printed a traceback instead of "interrupted" (an audit reproduced it with SIGINT)."""
    run = trained(tmp_path / "r", 2, ckpt_every=2)  # checkpoint at 1
    run.log(3, {"a": 3})
    real = files._CountingWriter
    monkeypatch.setattr(files, "_CountingWriter", lambda f: real(InterruptedFile(f, 4096)))
    with pytest.raises(KeyboardInterrupt):
        run.save_checkpoint(3, {"w": torch.zeros(1_000_000)})
    monkeypatch.undo()
    assert sorted(p.name for p in (run.path / "ckpt").iterdir()) == ["step_000001.pt"]  # no .tmp left
    run.close()


def test_full_disk_injected_names_the_file_and_leaves_the_run_resumable(tmp_path, monkeypatch):
    run = trained(tmp_path / "r", 2, ckpt_every=2)  # checkpoint at 1
    run.log(3, {"a": 3})
    real = files._CountingWriter
    monkeypatch.setattr(files, "_CountingWriter", lambda f: real(FullFile(f, 4096)))
    with pytest.raises(DiskFullError, match=r"no space left writing .*step_000003.pt \(about \d+ MB needed"):
        run.save_checkpoint(3, {"w": torch.zeros(1_000_000)})
    monkeypatch.undo()
    assert sorted(p.name for p in (run.path / "ckpt").iterdir()) == ["step_000001.pt"]  # no .tmp left
    real_write = os.write

    def full_for_metrics(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_for_metrics)
    with pytest.raises(DiskFullError, match="no space left writing .*metrics.jsonl"):
        run.log(4, {"a": 4})
    monkeypatch.undo()
    run.close()
    with Run(run.path, CFG) as again:
        assert again.resume()[0] == 1 and steps_of(again) == [0, 1]


TMPFS_SCRIPT = """
import json, os, sys, torch
from ragen_lib import config
from ragen_lib.files import DiskFullError
from ragen_lib.runs import Run
cfg = config.from_dict({"train": {"steps": 12}})
run = Run(os.path.join(sys.argv[1], "r"), cfg)
out = {}
for s in range(4):
    run.log(s, {"a": s})
    if s == 1:
        run.save_checkpoint(1, {"w": torch.zeros(256 * 1024)})  # 1 MB
try:
    run.save_checkpoint(3, {"w": torch.zeros(3 * 256 * 1024)})  # 3 MB: more than the 4 MB disk has left
except DiskFullError as e:
    out["error"] = str(e)
run.close()
again = Run(os.path.join(sys.argv[1], "r"), cfg)
out["ckpt"] = sorted(os.listdir(os.path.join(sys.argv[1], "r", "ckpt")))
out["resume"] = again.resume()[0]
out["steps"] = [r["step"] for r in again.metrics()]
print(json.dumps(out))
"""


def test_full_disk_on_a_real_small_tmpfs(tmp_path):
    """A 4 MB tmpfs in a private mount namespace (unshare -rm: no root needed where user namespaces
    are allowed); skipped where it cannot be mounted. The injected test above runs everywhere."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=4m tmpfs {mnt}"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode().strip()}")
    cmd = f"mount -t tmpfs -o size=4m tmpfs {mnt} && exec {sys.executable} -c '{TMPFS_SCRIPT}' {mnt}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "no space left writing" in out["error"] and "step_000003.pt (about 3 MB needed" in out["error"]
    assert out["ckpt"] == ["step_000001.pt"] and out["resume"] == 1 and out["steps"] == [0, 1]


# --- processes: SIGKILL at random moments, two writers at once ------------------------------------
# The writer under test runs in forked children of one helper process (spawned with sys.executable),
# so torch is imported once rather than once per attempt: that keeps the tests fast.
SCRIPT = """
import os, sys, time
import torch  # noqa: F401  (imported once, before the forks)
from ragen_lib import config
from ragen_lib.runs import Run, RunLockedError

CFG = config.from_dict({"train": {"steps": 20}})

def say(*words):  # one write per line: the two writers of a pair share the pipe
    os.write(1, (" ".join(map(str, words)) + chr(10)).encode())

def attempt(path):
    with Run(path, CFG) as run:
        if run.done:
            return "reused"
        step, state = run.resume()
        assert state is None or state["s"] == step
        start = 0 if step is None else step + 1
        say("ready", os.getpid())
        for s in range(start, 20):
            time.sleep(0.03)  # 20 steps outlast the 8 kills (each within 0.12 s of the start)
            run.log(s, {"x": s * 2, "pad": "y" * 2000})
            run.log_samples(s, [{"t": s * 3}, {"t": s * 3 + 1}])
            if s % 2 == 1 and s < 19:
                run.save_checkpoint(s, {"s": s})
        run.mark_done({"steps": 20})
    return "done"

def child(path, gate=None):
    if gate is not None:
        os.read(gate, 1)  # returns when the parent closes the pipe: both writers start together
    try:
        outcome = attempt(path)
    except RunLockedError as e:
        outcome = "locked" if "PID" in str(e) else "locked-without-pid"
    except BaseException as e:
        outcome = "error:" + type(e).__name__ + ":" + str(e).replace(chr(10), " ")[:300]
    say("outcome", outcome)
    os._exit(0)

for line in sys.stdin:
    word, path = line.split()
    if word == "one":
        pid = os.fork()
        if pid == 0:
            child(path)
        _, status = os.waitpid(pid, 0)
        say("exit", status)
    else:  # "pair": two writers on one run at the same moment
        r, w = os.pipe()
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                child(path, r)
            pids.append(pid)
        os.close(r)
        os.close(w)
        for pid in pids:
            os.waitpid(pid, 0)
        say("pair-done")
"""


@pytest.fixture
def helper():
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


def finished_cleanly(path) -> None:
    lines = (path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == list(range(20))
    assert all(r["x"] == r["step"] * 2 and r["pad"] == "y" * 2000 for r in rows)
    samples = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["t"]) for r in samples] == [(s, s * 3 + k) for s in range(20) for k in (0, 1)]
    assert not (path / "ckpt").exists() and Run(path).done and Run(path).problems() == []


KILLS = 8


def test_sigkill_at_random_moments_loses_nothing(tmp_path, helper):
    """SIGKILL the writer (no cleanup at all) at random moments of its loop, resume each time."""
    path = tmp_path / "r"
    rng = np.random.default_rng(0)

    def attempt(kill_after: float | None) -> int:
        helper.stdin.write(f"one {path}\n")
        helper.stdin.flush()
        ready, pid = helper.stdout.readline().split()  # past resume(): inside the loop now
        assert ready == "ready"
        if kill_after is not None:
            time.sleep(kill_after)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:  # it finished and was reaped before the kill: "exit 0" follows
                pass
        while True:
            word, status = helper.stdout.readline().split()
            if word == "exit":
                return int(status)
            assert status == "done", status  # "outcome done": it finished just before the kill

    reached = []
    for _ in range(KILLS):
        status = attempt(float(rng.uniform(0.0, 0.12)))
        assert status in (signal.SIGKILL, 0)  # killed, or finished just before the kill
        # A kill before the first step's line leaves no metrics file, or an empty one (a slow machine).
        steps = steps_of(Run(path)) if (path / "metrics.jsonl").exists() else []
        reached.append(steps[-1] if steps else -1)
    assert not (path / runs.DONE).exists() and any(0 <= r < 19 for r in reached), reached  # mid-run kills
    assert attempt(None) == 0  # the last attempt runs to the end
    finished_cleanly(path)


PAIRS = 30


def test_two_writers_started_together_never_leave_a_hole(tmp_path, helper, capsys):
    """Two processes on one run at the same moment (a notebook and a CLI, two grids on one disk),
    PAIRS times: exactly one trains, the other is refused with the owner's PID (or, if it came
    second, reuses the finished run). Before the lock, 2 pairs in 30 left a permanent hole."""
    outcomes = []
    for i in range(PAIRS):
        path = tmp_path / f"r{i}"
        helper.stdin.write(f"pair {path}\n")
        helper.stdin.flush()
        pair = []
        while (line := helper.stdout.readline().split())[0] != "pair-done":
            if line[0] == "outcome":
                pair.append(line[1])
        assert sorted(pair) in (["done", "locked"], ["done", "reused"]), (i, pair)
        finished_cleanly(path)
        outcomes += pair
    with capsys.disabled():
        locked, reused = outcomes.count("locked"), outcomes.count("reused")
        print(f"\n{PAIRS} pairs: {locked} refused by the lock, {reused} reused the finished run")


def test_plot_cli_draws_the_runs_and_summarises_first_and_last(tmp_path, capsys):
    from ragen_lib.__main__ import main

    cfg = config.from_dict(CFG.to_dict(), {"train.steps": 6})
    run = Run(runs.run_dir(tmp_path, "adhoc", cfg), cfg)
    for s, succ in enumerate([0.2, 0.3, 0.4, 0.6, 0.7, 0.9]):
        val = {"val/success": [0.1, 0.5, 0.8][s // 2], "val/format_valid": 0.9} if s % 2 == 0 else {}
        run.log(s, {"rollout/success": succ, "rollout/format_valid": 1.0, **val})
    run.mark_done({"commit": "abc1234", "device": "cpu"})
    assert main(["plot", str(tmp_path), "--metrics", "rollout/success", "val/success"]) == 0
    out = capsys.readouterr().out
    assert "trained at commit abc1234 on cpu" in out
    assert "rollout/success: step 0 0.200 → step 5 0.900; mean of first/last third 0.250 / 0.800" in out
    # a third of the 3 points validation logged, not of the 6 steps (which averaged all 3 twice)
    assert "val/success: step 0 0.100 → step 4 0.800; mean of first/last third 0.100 / 0.800" in out
    assert "val/format_valid: step 0 0.900 → step 4 0.900" in out  # beside the success it qualifies
    assert (tmp_path / "adhoc.png").stat().st_size > 0
    (run.path / "DONE").write_text("garbage")  # crashed the command before
    with pytest.warns(RunStoreWarning):
        assert main(["plot", str(tmp_path), "--metrics", "rollout/success"]) == 0
    assert "(DONE is inconsistent)" in capsys.readouterr().out
    assert main(["plot", str(tmp_path), "--finding", "other"]) == 2  # names the findings that have runs
    assert "no runs with metrics under" in (err := capsys.readouterr().err) and (
        "findings with runs there: adhoc (--finding NAME)" in err
    )
    assert main(["plot", str(tmp_path / "runs" / "adhoc")]) == 2  # a run folder, not the --out root
    assert "holds no run: give the --out folder of `run`" in capsys.readouterr().err


def test_the_command_line_prints_run_store_warnings_as_one_line(tmp_path):
    """Run as a command, a run store warning was four lines: file, line number, category and the
    source line of the library's warnings.warn call. The person at the terminal gets the message."""
    run = Run(runs.run_dir(tmp_path, "adhoc", CFG), CFG)
    run.log(0, {"rollout/success": 0.5, "rollout/format_valid": 1.0})
    run.close()
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "rollout/succ')  # a torn tail: left out, with a warning
    done = subprocess.run(
        [sys.executable, "-m", "ragen_lib", "plot", str(tmp_path), "--metrics", "rollout/success"],
        env={**ENV, "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "incomplete line" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and str(run.path) in warned[0]
    assert "warnings.warn" not in done.stderr and "RunStoreWarning" not in done.stderr


def test_cli_typos_in_plot_bench_and_repair_name_the_fix_without_a_traceback(tmp_path, capsys):
    """A misspelt --metrics was drawn as an empty panel; a misspelt --hue, --only or run folder
    raised a traceback (bench's only after the model check). Each is now one line, exit 2."""
    from ragen_lib.__main__ import main

    run = Run(runs.run_dir(tmp_path, "adhoc", CFG), CFG)
    run.log(0, {"rollout/success": 0.5, "rollout/format_valid": 1.0})
    root = str(tmp_path)
    cases = [
        (
            ["plot", root, "--metrics", "rollout/sucess"],
            "--metrics: unknown name 'rollout/sucess'; did you mean rollout/success",
        ),
        (  # each close name once: the columns and the metric names overlap
            ["plot", root, "--metrics", "rollout/sucess"],
            "did you mean rollout/success or rollout/turns or rollout/truncated?",
        ),
        (
            ["plot", root, "--hue", "cfg.algo.nme"],
            "--hue: unknown name 'cfg.algo.nme'; did you mean cfg.algo.name",
        ),
        (
            ["bench", "--only", "load,trian", "--model", "nope"],
            "--only: unknown name 'trian'; did you mean train",
        ),
        (["repair", str(run.path), root + "/nope"], "nope does not exist: pass <out>/runs/<finding>/"),
        (["repair", str(run.path), root], f"{root} is not a run folder (no config.yaml)"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (run.path / "quarantine").exists()  # repair checked every folder before touching one
    # a metric these runs did not log (validation off) is still a name plot knows: drawn empty
    assert main(["plot", str(tmp_path), "--metrics", "rollout/success", "val/success"]) == 0


def test_plot_of_a_store_it_cannot_write_or_a_bad_png_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    """plot writes <store>/adhoc.png: on a colleague's read-only store, or with --png under a
    file, it raised a PermissionError or FileExistsError traceback."""
    from ragen_lib.__main__ import main

    run = Run(runs.run_dir(tmp_path, "adhoc", CFG), CFG)
    run.log(0, {"rollout/success": 0.5, "rollout/format_valid": 1.0})
    run.close()
    (tmp_path / "afile").write_text("")
    assert main(["plot", str(tmp_path), "--png", str(tmp_path / "afile" / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "--png" in err and "must be a folder this user can write" in err and "--png PATH" in err
    # a store this user cannot write (as root every folder is writable: the refusal is staged)
    from matplotlib.figure import Figure

    def refused(self, path, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Figure, "savefig", refused)
    assert main(["plot", str(tmp_path)]) == 2
    assert f"the run store {tmp_path} must be a folder this user can write" in capsys.readouterr().err


def test_ctrl_c_during_a_run_is_one_line_that_says_how_to_resume(monkeypatch, capsys):
    import ragen_lib.__main__ as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["run", "some.yaml"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted: the same command resumes the run from its last checkpoint"


def test_ragen_commit_names_a_copy_whose_git_is_absent_or_stale(monkeypatch):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.delenv("RAGEN_COMMIT", raising=False)
    here = runs.git_commit()
    monkeypatch.setenv("RAGEN_COMMIT", "abc1234")
    assert runs.git_commit() == "abc1234" != here  # a stale .git (a GPU host's copy) is overruled
    monkeypatch.setattr(runs.subprocess, "run", no_git)
    monkeypatch.delenv("RAGEN_COMMIT")
    assert runs.git_commit() == "unknown"


def test_a_relative_ragen_outputs_is_the_checkouts_wherever_the_process_runs(tmp_path, monkeypatch):
    """RAGEN_OUTPUTS=myruns was read against the working folder: make (at the checkout's root) wrote
    ./myruns, and JupyterLab's kernels (in notebooks/) notebooks/myruns, two stores, and the report
    never saw the lab's runs."""
    root = Path(runs.__file__).resolve().parent.parent
    monkeypatch.setenv("RAGEN_OUTPUTS", "myruns")
    monkeypatch.chdir(tmp_path)
    assert runs.output_root("smoke") == root / "myruns" / "smoke"
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path / "abs"))
    assert runs.output_root("smoke") == tmp_path / "abs" / "smoke"


# --- pinned by mutation testing: slips the tests above let through ---------------------------------
def test_a_done_without_a_config_hash_stands_and_its_step_count_is_still_checked(tmp_path):
    """A DONE written before the config hash was recorded stands (read as this run's: a whole store
    would otherwise train again), but a step count it records is still compared with the config's.
    Pins `info.get("config_hash", our_hash)` and the `steps` check behind it."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    info = json.loads((run.path / "DONE").read_text())
    del info["config_hash"]
    (run.path / "DONE").write_text(json.dumps(info))
    assert Run(run.path).problems() == []
    (run.path / "DONE").write_text(json.dumps({**info, "steps": 99}))
    assert Run(run.path).problems() == [f"{run.path / 'DONE'} records 99 steps, not this run's 12"]


def test_a_finished_run_whose_metrics_repeat_a_step_in_place_of_another_is_not_finished(tmp_path):
    """Twelve lines are not twelve steps: 0-10 then 10 again (step 11 lost) is as short as 0-10.
    Pins the exact `steps != schedule` comparison (a count of lines passed it as finished)."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    m = run.path / "metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text("".join(lines[:11] + [lines[10]]))
    assert Run(run.path).problems() == [f"{m} holds steps 0-10, 10, not steps 0-11"]
    with pytest.warns(RunStoreWarning, match="marked finished but"):
        assert not runs.load(tmp_path, "f")["done"].any()


def test_mark_done_refuses_metrics_that_end_in_an_incomplete_line(tmp_path):
    """Every step logged, then a torn line (a write cut short): no DONE over it, which `problems`
    would then call inconsistent. Pins the `tail or` of mark_done's check."""
    run = trained(tmp_path / "r", 11)
    with open(run.path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 12, "a"')
    with pytest.raises(CorruptRunError, match="holds steps 0-11 and an incomplete last line, not 0-11"):
        run.mark_done()
    assert not run.done


@pytest.mark.parametrize("killed", ["DONE", "final weights"])
def test_a_kill_while_a_run_is_marked_done_leaves_it_resumable(tmp_path, monkeypatch, kill_at_rename, killed):
    """Killed as DONE or the final weights are put in place: no DONE, and the newest checkpoint is
    still there to resume from (mark_done writes the weights, then DONE, then drops ckpt/). Pins that
    order: ckpt/ dropped before DONE lost the run to a kill; DONE before the weights left a finished
    run without them."""
    run = trained(tmp_path / "r", 11)  # checkpoints every 3 steps: the newest at step 11
    kill_at_rename("" if killed == "DONE" else ".pt")  # DONE is the one file without a suffix
    with pytest.raises(KeyboardInterrupt):
        run.mark_done(final_weights={"policy": {"w": torch.zeros(2)}})
    monkeypatch.undo()
    assert not run.done and (run.path / "ckpt" / "step_000011.pt").exists()
    run.mark_done(final_weights={"policy": {"w": torch.zeros(2)}})
    assert run.done and (run.path / "final_weights.pt").exists() and not (run.path / "ckpt").exists()


def test_a_checkpoint_is_checked_against_the_run_and_its_own_name(tmp_path):
    """A checkpoint named for step 12 of a 12-step run (steps 0-11) is past its end (`>=`, not `>`),
    and one whose recorded step is not its name's is refused."""
    run = trained(tmp_path / "r", 5)
    files.save_state(run.path / "ckpt" / "step_000012.pt", {**run._identity(12), "metrics": ""})
    with pytest.raises(CorruptRunError, match="step_000012.pt is at step 12, past this run's last step 11"):
        run.load_checkpoint()
    (run.path / "ckpt" / "step_000012.pt").unlink()
    files.save_state(run.path / "ckpt" / "step_000009.pt", {**run._identity(5), "metrics": ""})
    with pytest.raises(CorruptRunError, match="step_000009.pt holds step 5, not 9"):
        run.load_checkpoint()


def test_resume_restores_a_metrics_line_whose_value_changed_since_the_checkpoint(tmp_path):
    """The steps 0-5 are all there but step 3's value is not the one checkpointed (another writer,
    a hand edit): resume restores the checkpoint's copy byte for byte. Pins the byte comparison."""
    run = trained(tmp_path / "r", 7)  # checkpoint at 5
    run.close()
    m = run.path / "metrics.jsonl"
    m.write_text(m.read_text().replace('{"step": 3, "a": 3}', '{"step": 3, "a": 30}'))
    with Run(run.path, CFG) as again:
        with pytest.warns(RunStoreWarning, match="differs from the checkpoint's copy; restored steps 0-5"):
            assert again.resume()[0] == 5
        assert [r["a"] for r in again.metrics()] == list(range(6))


def test_resume_keeps_the_newest_of_two_checkpoints_a_crash_left(tmp_path):
    """A crash between writing checkpoint 5 and removing checkpoint 2 leaves both: resume goes on
    from 5 and removes 2 (slicing `[1:]` instead of `[:-1]` removed the newest)."""
    run = trained(tmp_path / "r", 2)  # checkpoint at 2
    older = (run.path / "ckpt" / "step_000002.pt").read_bytes()
    for s in range(3, 6):
        run.log(s, {"a": s})
    run.save_checkpoint(5, {"w": torch.zeros(3)})
    (run.path / "ckpt" / "step_000002.pt").write_bytes(older)
    run.close()
    with Run(run.path, CFG) as again:
        assert again.resume()[0] == 5
        assert [p.name for p in (run.path / "ckpt").iterdir()] == ["step_000005.pt"]


def test_the_handle_that_logged_resumes_and_logs_on_after_the_trim(tmp_path):
    """resume trims steps 6-7 on the handle that logged them: its cached last step must go with
    them, or the next step 6 is refused as already logged."""
    run = trained(tmp_path / "r", 7)  # checkpoint at 5, this handle logged up to 7
    assert run.resume()[0] == 5
    run.log(6, {"a": 6})
    assert steps_of(run) == list(range(7))


def test_resume_of_a_finished_run_is_refused_and_leaves_its_metrics(tmp_path):
    """A finished run has no checkpoint: resumed, its metrics would read as steps logged without
    one and go to quarantine, the run trained again."""
    run = trained(tmp_path / "r", 11)
    run.mark_done()
    before = (run.path / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match="is finished \\(DONE\\): nothing to resume"):
        run.resume()
    assert (run.path / "metrics.jsonl").read_bytes() == before and not (run.path / "quarantine").exists()


def test_a_done_that_does_not_read_stops_the_grid_rather_than_training_over_it(tmp_path):
    """`stands` of a run whose DONE does not read is True: the grid and the CLI stop on it and name
    the repair (a copy cut short keeps every metric; repair rebuilds DONE from them). Pins the
    `(path / DONE).exists()` fallback: False read it as never trained (`missing_runs` too)."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    (run.path / "DONE").write_text("garbage")
    assert runs.stands(run.path, CFG) and runs.stands(run.path, CFG, model=False)
    assert experiments.missing_runs(tmp_path, "f", [(CFG, {})]) == []
    (run.path / "DONE").unlink()
    assert not runs.stands(run.path, CFG)


def test_a_copy_into_a_retired_run_puts_done_in_place_last(tmp_path, monkeypatch, kill_at_rename):
    """adopt_into moves the copied files in one by one, DONE last: killed as the metrics are moved,
    the run reads unfinished, never finished without its metrics (DONE first did that)."""
    src = trained(runs.run_dir(tmp_path, "a", CFG), 11)
    src.mark_done()
    src.close()
    with Run(runs.run_dir(tmp_path, "b", CFG), CFG) as run:
        kill_at_rename(".jsonl")
        with pytest.raises(KeyboardInterrupt):
            runs.adopt_into(src.path, run)
        monkeypatch.undo()
        assert not run.done and not (run.path / "metrics.jsonl").exists()
        runs.adopt_into(src.path, run)
        assert run.done and run.problems() == []


def test_a_done_that_is_json_but_not_a_summary_reads_as_unreadable(tmp_path):
    """DONE holding JSON that is not an object (a list, a number) is no summary: read_done gives
    None and `problems` says so, rather than `.get` failing on a list in every reader."""
    run = trained(runs.run_dir(tmp_path, "f", CFG), 11)
    run.mark_done()
    run.close()
    (run.path / "DONE").write_text("[1, 2]")
    assert runs.read_done(run.path) is None
    assert Run(run.path).problems() == [f"{run.path / 'DONE'} is not a JSON summary"]


def test_taking_the_lock_leaves_the_config_yaml_another_process_is_creating(tmp_path):
    """config.yaml is written without the lock by the process creating the run: its temporary file
    is not a dead writer's leftover, so the lock holder must not remove it from under that rename."""
    run = trained(tmp_path / "r", 2)
    run.close()
    (run.path / "config.yaml.123.tmp").write_text("being written")
    (run.path / "metrics.jsonl.123.tmp").write_text("half")
    Run(run.path, CFG).lock().close()
    assert sorted(p.name for p in run.path.rglob("*.tmp")) == ["config.yaml.123.tmp"]


@pytest.mark.parametrize("step", ['"3"', "3.0", "null", "true"])
def test_a_metric_line_whose_step_is_not_an_integer_is_not_a_metric_line(tmp_path, step):
    """A line that parses but whose step is text, a float, null or a bool (Python's int) is damage,
    named with its line, rather than a row whose step compares wrongly (or fails: "3" <= 5) in resume."""
    run = trained(tmp_path / "r", 2)
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write(f'{{"step": {step}, "a": 3}}\n')
    with pytest.raises(CorruptRunError, match=r"metrics.jsonl, line 4, is not a metric line"):
        Run(run.path).metrics()
