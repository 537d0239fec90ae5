"""The offline bundle (`make offline-bundle`): built from a local folder of small wheels, installed with
no index into a fresh venv whose "torch" (a stand-in) must stay untouched."""

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ragen_lib import bundle


def _wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    """A small pure-Python wheel: one module that records its version."""
    return bundle.make_wheel(
        folder, name, version, requires, {f"{name}/__init__.py": f"VERSION = {version!r}\n"}
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundle")
    index = tmp / "index"
    index.mkdir()
    _wheel(index, "alpha", "1.0", ["beta>=2"])
    _wheel(index, "beta", "2.0")
    _wheel(index, "beta", "1.0")
    _wheel(index, "needs_torch", "1.0", ["torch>=2.4"])
    _wheel(index, "torch", "2.11.0")
    _wheel(index, "torch", "2.12.0")  # newer: a resolver free to upgrade would take it
    model = tmp / "model.bin"
    model.write_bytes(os.urandom(500_000))  # cut into 3 pieces at 0.2 MiB
    dest = tmp / "dest"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    manifest = bundle.build(
        dest,
        part_mb=0.2,
        pythons=[py],
        requirements=["alpha", "needs_torch"],
        find_links=str(index),
        model=model,
        verify_imports=["alpha", "beta", "needs_torch"],
    )
    return tmp, index, dest, manifest, model


def test_groups_hold_at_most_part_mb_and_the_model_is_cut_into_pieces(built):
    _, _, dest, manifest, model = built
    for g in manifest["groups"]:
        size = sum(f.stat().st_size for f in (dest / g).iterdir())
        assert size <= 0.2 * 2**20, (g, size)
    names = {Path(f["path"]).name for f in manifest["files"]}
    assert {n.split("-")[0] for n in names if n.endswith(".whl")} == {
        "alpha",
        "beta",
        "needs_torch",
    }  # no torch
    (joined,) = manifest["joined"]
    assert joined["file"] == "model.bin" and len(joined["pieces"]) == 3
    assert joined["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert (dest / manifest["groups"][0] / "install.sh").exists()
    sums = (dest / "SHA256SUMS").read_text().splitlines()
    assert len(sums) == len(manifest["files"]) and all(len(s.split()[0]) == 64 for s in sums)


def _fresh_venv(path: Path, index: Path, *preinstalled: str) -> Path:
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    wheels = [str(next(index.glob(f"{w}-py3-none-any.whl"))) for w in preinstalled]
    if wheels:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheels], check=True)
    return python


def _install(dest: Path, python: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHON": str(python)}
    return subprocess.run(
        ["bash", str(dest / "g01" / "install.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _version(python: Path, module: str) -> str:
    out = subprocess.run(
        [python, "-c", f"import {module}; print({module}.VERSION)"], capture_output=True, text=True
    )
    return out.stdout.strip()


def test_install_into_a_fresh_venv_with_no_index_keeps_torch_and_joins_the_model(built):
    tmp, index, dest, manifest, model = built
    python = _fresh_venv(tmp / "venv", index, "torch-2.11.0")
    proc = _install(dest, python)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _version(python, "alpha") == "1.0" and _version(python, "beta") == "2.0"
    assert _version(python, "torch") == "2.11.0"  # the host's torch, never replaced
    assert (dest / "joined" / "model.bin").read_bytes() == model.read_bytes()
    assert "torch 2.11.0 untouched" in proc.stdout


def test_a_missing_group_or_a_damaged_file_stops_before_installing(built, tmp_path):
    tmp, index, dest, manifest, _ = built
    python = _fresh_venv(tmp_path / "venv", index, "torch-2.11.0")
    last = dest / manifest["groups"][-1]
    last.rename(tmp_path / "away")
    try:
        proc = _install(dest, python)
    finally:
        (tmp_path / "away").rename(last)
    assert proc.returncode == 3 and f"group(s) {last.name} not here yet" in proc.stderr
    victim = dest / manifest["files"][0]["path"]
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    try:
        proc = _install(dest, python)
    finally:
        victim.write_bytes(data)
    assert proc.returncode == 1 and "damaged file(s)" in proc.stderr
    assert _version(python, "alpha") == ""  # nothing was installed


def test_a_package_the_host_has_is_kept_unless_upgrades_are_allowed(built, tmp_path):
    """The venv has beta 1.0, alpha needs beta>=2: by default install.sh refuses to replace it and
    says how; --allow-upgrades replaces it and still keeps torch."""
    _, index, dest, _, _ = built
    python = _fresh_venv(tmp_path / "venv", index, "torch-2.11.0", "beta-1.0")
    proc = _install(dest, python)
    assert proc.returncode == 1 and "--allow-upgrades" in proc.stderr
    assert _version(python, "beta") == "1.0"
    proc = _install(dest, python, "--allow-upgrades")
    assert proc.returncode == 0, proc.stderr
    assert _version(python, "beta") == "2.0" and _version(python, "torch") == "2.11.0"


def test_a_python_without_torch_is_told_to_install_it_first(built, tmp_path):
    _, index, dest, _, _ = built
    proc = _install(dest, _fresh_venv(tmp_path / "venv", index))
    assert proc.returncode == 1 and "has no torch" in proc.stderr


def test_the_manifest_pins_each_python_and_excludes_torch(built):
    _, _, dest, manifest, _ = built
    on_disk = json.loads((dest / "manifest.json").read_text())
    assert on_disk == json.loads((dest / "g01" / "manifest.json").read_text())
    (pins,) = on_disk["pins"].values()
    assert pins == {"alpha": "1.0", "beta": "2.0", "needs-torch": "1.0"}


def test_an_unknown_extra_is_refused_before_anything_is_downloaded(tmp_path):
    with pytest.raises(ValueError, match="carries notebooks, test, bench, not tests"):
        bundle.build(tmp_path / "dest", pythons=["3.12"], extras=("notebooks", "tests"))
    assert not (tmp_path / "dest").exists()
    from ragen_lib.__main__ import main

    assert main(["bundle", str(tmp_path / "dest"), "--extras", "tests"]) == 2  # one line, no traceback
    with pytest.raises(ValueError, match="not lab .*`make lab` there"):  # pyproject has it: not "no extra"
        bundle.build(tmp_path / "dest", pythons=["3.12"], extras=("lab",))
    for size in ("nan", "inf", "0"):  # nan and inf passed, to fail after the download naming nothing
        assert main(["bundle", str(tmp_path / "dest"), "--part-mb", size]) == 2
    assert not (tmp_path / "dest").exists()


def test_install_checks_the_imports_of_the_extras_it_carries_only():
    """A bundle without `bench` checked that trl imports: install.sh failed after installing all."""
    assert bundle.imports_to_verify(("notebooks",))[-2:] == ("papermill", "jupytext")
    assert "trl" not in bundle.imports_to_verify(("notebooks",))
    assert bundle.imports_to_verify(()) == bundle.VERIFY_IMPORTS  # --extras alone: the project only
    assert set(bundle.imports_to_verify(bundle.EXTRAS)) >= {"papermill", "jupytext", "trl", "pytest"}


def test_a_folder_that_is_not_a_bundle_is_refused_and_kept(tmp_path):
    """`bundle DEST` removed DEST first, whatever it held (results, a checkout), even when the build
    then failed: `make offline-bundle DEST=outputs` lost every finished run."""
    from ragen_lib.__main__ import main

    results = tmp_path / "outputs"
    (results / "runs" / "x").mkdir(parents=True)
    (results / "runs" / "x" / "DONE").write_text("{}")
    with pytest.raises(ValueError, match="is not an offline bundle.*name a new folder"):
        bundle.build(results, pythons=["3.12"])
    assert main(["bundle", str(results)]) == 2
    notes = tmp_path / "notes"  # only control-file names, but no manifest: not a bundle
    notes.mkdir()
    (notes / "README.txt").write_text("my notes")
    assert main(["bundle", str(notes)]) == 2 and (notes / "README.txt").read_text() == "my notes"
    assert main(["bundle", str(tmp_path / "new"), "--python", "9.9"]) == 2  # refused before pip
    assert (results / "runs" / "x" / "DONE").read_text() == "{}"


def test_a_failed_build_leaves_the_earlier_bundle_and_a_good_one_replaces_it(built):
    tmp, index, dest, manifest, model = built
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    with pytest.raises(RuntimeError, match="pip download failed"):
        bundle.build(dest, part_mb=0.2, pythons=[py], requirements=["no-such-package"], find_links=str(index))
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in dest.parent.iterdir() if p.name.startswith(".dest")) == []
    again = bundle.build(
        dest,
        part_mb=0.2,
        pythons=[py],
        requirements=["beta"],
        find_links=str(index),
        model=model,
        verify_imports=["beta"],
    )
    assert list(again["pins"][py]) == ["beta"]
    assert json.loads((dest / "manifest.json").read_text())["pins"] == again["pins"]


def test_a_dependency_only_the_target_python_needs_is_downloaded(tmp_path):
    """pip download --python-version evaluates environment markers on the Python it runs on: papermill's
    `aiohttp; python_version == "3.12"` was left out of a 3.12 bundle built from 3.11, and install.sh
    on the 3.12 host stopped. The markers are evaluated for the target and the missing ones fetched."""
    index = tmp_path / "index"
    index.mkdir()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    other = "3.12" if here != "3.12" else "3.11"
    _wheel(
        index,
        "gamma",
        "1.0",
        [f'delta>=1; python_version == "{other}"', f'eps>=1; python_version == "{here}"'],
    )
    _wheel(index, "delta", "1.0")
    _wheel(index, "eps", "1.0")
    got = bundle._download(["gamma"], other, tmp_path / "out", str(index))
    assert {"gamma", "delta"} <= set(got)  # the target's own dependency, whatever this Python's markers say
    # each requirement by its name, so one downloaded already is not asked for again ("delta>=1" had
    # been compared whole with the names downloaded: never found, always a second pip download)
    assert bundle._required_on(other, got) == [("delta", "delta>=1")]
