"""`python -m ragen_lib doctor` (`make gpu-check`): the CPU half runs in the test suite; on a GPU
the same command does the full check."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_lib import doctor

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_doctor_cpu_half_passes_and_writes_its_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ragen_lib", "doctor", "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "cpu.json").read_text())
    names = [c["name"] for c in report["checks"]]
    assert names == ["environment", "model load", "precision", "static decoding", "continuous decoding"] + [
        f"train {a}" for a in doctor.ALGOS
    ]
    assert all(c["ok"] for c in report["checks"])
    by_name = {c["name"]: c["details"] for c in report["checks"]}
    assert by_name["model load"]["name"] == "smollm2-135m-instruct"  # the embedded model loads
    assert by_name["precision"]["fraction_of_weights_changed"] > 0.9
    assert set(by_name["static decoding"]) >= {"float32", "bfloat16"}
    assert by_name["continuous decoding"]["captures"] >= 1
    assert by_name["continuous decoding"]["flex decode attention"] == "ok"  # compiled and ran here
    for algo in doctor.ALGOS:
        d = by_name[f"train {algo}"]
        assert d["fraction_of_policy_weights_moved"] > 0.5 and d["run_disk_MB"] > 0
    assert "| train apo | ok |" in (tmp_path / "cpu.md").read_text()


def test_a_failed_check_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    def rounded_away(name, device):
        raise doctor.CheckFailed("one step at lr 1e-6 changed only 2% of the weights")

    monkeypatch.setattr(doctor, "_model_load", lambda name, device, work: {"stub": True})
    monkeypatch.setattr(doctor, "_precision", rounded_away)
    monkeypatch.setattr(doctor, "_static_decoding", lambda work, device: 1 / 0)  # a crash, not a verdict
    monkeypatch.setattr(doctor, "_continuous_decoding", lambda work, device: {"stub": True})
    monkeypatch.setattr(doctor, "_train", lambda algo, name, device: {"algo": algo})
    assert doctor.run("cpu", tmp_path) == 1
    report = json.loads((tmp_path / "cpu.json").read_text())
    failed = {c["name"]: c["error"] for c in report["checks"] if not c["ok"]}
    assert set(failed) == {"precision", "static decoding"}
    assert "changed only 2%" in failed["precision"] and "ZeroDivisionError" in failed["static decoding"]
    assert report["header"]["passed"] == 7 and report["header"]["failed"] == 2
    err = capsys.readouterr().err
    assert "2 check(s) FAILED" in err and "precision" in err
    assert "**FAILED**" in (tmp_path / "cpu.md").read_text()


def test_a_check_cut_off_partway_leaves_the_report_of_those_done(tmp_path, monkeypatch):
    """The report is written after every check: a host taken back mid-run (a lease's time limit,
    here an interrupt in the third check) keeps the checks done and names those not run."""

    def taken_back(name, device):
        raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "_model_load", lambda name, device, work: {"stub": True})
    monkeypatch.setattr(doctor, "_precision", taken_back)
    with pytest.raises(KeyboardInterrupt):
        doctor.run("cpu", tmp_path)
    report = json.loads((tmp_path / "cpu.json").read_text())
    assert [c["name"] for c in report["checks"]] == ["environment", "model load"]
    not_run = ["precision", "static decoding", "continuous decoding"] + [f"train {a}" for a in doctor.ALGOS]
    assert report["header"]["status"] == "running: not yet run " + ", ".join(not_run)
    assert "not yet run precision" in (tmp_path / "cpu.md").read_text()


def test_asking_for_cuda_without_one_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(doctor.torch.cuda, "is_available", lambda: False)
    assert doctor.run("cuda", tmp_path) == 2
    assert "--device cpu" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".md", ".json"])
def test_a_check_killed_while_the_report_is_rewritten_keeps_the_previous_one(
    tmp_path, monkeypatch, kill_at_rename, suffix
):
    """The report is rewritten after every check; a GPU lease that ends inside the write left it torn
    (the evidence of the checks before lost). Each file is replaced whole or not at all."""
    head = {"device": "cpu", "status": "running"}
    md = doctor.write(tmp_path, head, [doctor.Check("environment", ok=True)])
    kill_at_rename(suffix)
    with pytest.raises(KeyboardInterrupt):
        doctor.write(tmp_path, head, [doctor.Check("environment", ok=True), doctor.Check("model load")])
    monkeypatch.undo()
    if suffix == ".json":
        kept = json.loads(md.with_suffix(".json").read_text())
        assert [c["name"] for c in kept["checks"]] == ["environment"]
    else:
        assert "model load" not in md.read_text() and "environment" in md.read_text()
