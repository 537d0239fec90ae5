"""What changed in how a config trains, so that no verdict mixes runs trained by different code.

A run folder is named by its config's hash, and the grid reuses a finished run of the same hash.
That is right while the code trains a config the same way; when a change alters what a config
trains, a run stored before it would be reused as if it were new. So each such change is listed
here with the configs it touches, every run records the revision it trained under (in DONE and in
its checkpoints), and a run is reused or resumed only when no change since its revision touches
its config. A run from before this record (no revision: 0) is outdated whatever its config: the
record began on a day that changed the envs, the warm-up and the rollout, and earlier changes were
never listed.

A change that alters training gets an entry here, with REVISION raised to its number, in the same
commit, and a predicate that names the configs it touches as narrowly as is true (a change to the
online-k cadence: `lambda cfg: cfg.train.online_k > 1`), so that the runs it leaves alone stand.
A new config field needs none (it changes the hash; see config.HASH_NEUTRAL), nor does a change
of analysis or plots (verdicts are recomputed from the metrics on every call).

A change that is left out of this record would let old runs stand as new, and only a review
would see it. So the code that trains is fingerprinted too: `training_code()` digests each module
the trainer reaches (its syntax tree, so docstrings, comments and layout do not count), and
tests/test_revisions.py fails while that differs from `TRAINING_CODE`, naming the modules that
changed. Whoever changed them then says which it is: a change to what a config trains gets its
entry above; a refactor does not; and in either case `TRAINING_CODE` is set to the new digests.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragen_lib.config import Config


@dataclass(frozen=True)
class Change:
    revision: int
    """The first revision that trains this way."""
    date: str
    what: str
    """What trains differently, in a phrase that completes "trained before ..."."""
    affects: Callable[[Config], bool]
    """Whether a config trains differently since the change (False: its old runs stand)."""


def _every_config(cfg: Config) -> bool:
    return True


CHANGES: tuple[Change, ...] = (
    Change(
        1,
        "2026-11-28",
        "training revisions were recorded (that day alone changed the Sokoban, FrozenLake and WebShop "
        "envs, the warm-up, the think-mode stop, online-k's validation cadence and last rollout, and "
        "the end ids an answer stops at; a run without a record was trained by code of unknown date)",
        _every_config,
    ),
    Change(
        2,
        "2026-12-07",
        "the update's clip fractions, approx KL, ratio spread and A*-PO statistics were each "
        "mini-batch's token-weighted statistic (they were plain means over the length-packed "
        "micro-batches, so the packing moved them; the clip and staleness mechanism checks read them). "
        "The gradient is unchanged; micro-batch-mean runs log the same wherever every mini-batch "
        "holds the same number of micro-batches, as in every paper grid point",
        lambda cfg: cfg.train.loss_agg == "token-mean",
    ),
    Change(
        3,
        "2026-12-07",
        "a GRPO group whose rewards were all equal got 0 only where float32 rounding left its std at "
        "most 1e-6: over one group (a filter keeping one, a data-parallel rank holding one) eight "
        "Sokoban successes of 10.9 all trained at -0.47, while over several the CPU's std was exactly "
        "0; a GPU's reduction is unmeasured, so every scaled GRPO run trains again. And a weighted "
        "reasoning bonus made the advantages and the loss float64",
        lambda cfg: (cfg.algo.advantage == "grpo" and cfg.algo.grpo_scale) or cfg.algo.reasoning_lambda != 0,
    ),
)

REVISION = max(c.revision for c in CHANGES)
"""The revision this code trains under: recorded in DONE and in every checkpoint."""


def since(revision, cfg: Config) -> list[Change]:
    """The changes after `revision` (None, or anything not a whole number, as a hand-edited DONE
    may hold: 0, before the record) that touch `cfg`."""
    if isinstance(revision, bool) or not isinstance(revision, int):
        revision = 0
    return [c for c in CHANGES if c.revision > revision and c.affects(cfg)]


def describe(revision, changes: list[Change]) -> str:
    """'trained under training revision 1, before <what> (<date>); and before <what> (<date>)'."""
    under = (
        "with no training revision recorded" if revision is None else f"under training revision {revision}"
    )
    return f"trained {under}, before " + "; and before ".join(f"{c.what} ({c.date})" for c in changes)


# --- The code that trains, fingerprinted --------------------------------------------------------

_ROOT = Path(__file__).resolve().parent.parent
"""The folder that holds the ragen_lib package."""

NOT_TRAINING: dict[str, str] = {
    "ragen_lib.runs": "stores, resumes and reuses runs (a killed run resumes to an unbroken run's metrics)",
    "ragen_lib.metrics": "names and summarises what is logged",
    "ragen_lib.progress": "draws progress bars",
    "ragen_lib.bundle": "hashes and packs files",
    "ragen_lib.revisions": "this record",
}
"""Modules the trainer reaches that do not decide what a config trains, and why: the walk in
`training_modules` neither digests them nor follows their imports."""


def _file(module: str) -> Path | None:
    base = _ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(module: str, tree: ast.Module) -> set[str]:
    """The ragen_lib modules that importing `module` runs: those it names (`from ragen_lib import
    rollout` names a module, `from ragen_lib.envs import make` a package) and their packages."""
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{a.name}" for a in node.names)
    found = set()
    for name in named:
        parts = name.split(".")
        if parts[0] != "ragen_lib":
            continue
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if _file(".".join(parts[:i])))
    return found - {module}


def training_modules(start: str = "ragen_lib.trainer") -> list[str]:
    """Every ragen_lib module that `start` imports, directly or not, less NOT_TRAINING."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module in seen or module in NOT_TRAINING:
            continue
        seen.add(module)
        todo.extend(_imports(module, ast.parse(_file(module).read_text(encoding="utf-8"))))
    return sorted(seen)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Drop every statement that is a bare string (docstrings of modules, classes, functions and
    attributes): it does nothing when run."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [
                s
                for s in body
                if not (
                    isinstance(s, ast.Expr)
                    and isinstance(s.value, ast.Constant)
                    and isinstance(s.value.value, str)
                )
            ]
            node.body = kept or [ast.Pass()]
    return tree


def _shape(node) -> str:
    """A syntax tree as text that reads the same on every Python this project supports: empty
    fields (which newer versions add, such as `type_params=[]`) are left out, as are positions."""
    if isinstance(node, ast.AST):
        fields = (
            f"{name}={_shape(value)}"
            for name in node._fields
            if (value := getattr(node, name, None)) is not None and value != []
        )
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_shape(x) for x in node) + "]"
    return repr(node)


def code_digest(source: str) -> str:
    """12 hex digits of the SHA-256 of `source`'s syntax tree without its docstrings: a comment,
    a docstring or a layout change keeps it; any change to what runs changes it."""
    return hashlib.sha256(_shape(_strip_docstrings(ast.parse(source))).encode()).hexdigest()[:12]


def training_code() -> dict[str, str]:
    """{module: code_digest} for every module in `training_modules()`."""
    return {m: code_digest(_file(m).read_text(encoding="utf-8")) for m in training_modules()}


TRAINING_CODE: dict[str, str] = {
    "ragen_lib": "f663630c3214",
    "ragen_lib.algorithms": "58886a10298a",
    "ragen_lib.algorithms.advantages": "24cc583a1ce2",
    "ragen_lib.algorithms.apo": "9a4855b73e6a",
    "ragen_lib.algorithms.estimators": "08f521d3cb23",
    "ragen_lib.algorithms.filtering": "878046ee1ce0",
    "ragen_lib.algorithms.losses": "72100ef76e2e",
    "ragen_lib.algorithms.objectives": "05192c7fb1f2",
    "ragen_lib.attention": "d6e4c20eb7bc",
    "ragen_lib.config": "5dba8c0208d0",
    "ragen_lib.distributed": "98409e024d42",
    "ragen_lib.engine": "854bc9c4db8e",
    "ragen_lib.envs": "3eb4ab2941eb",
    "ragen_lib.envs.bandit": "1f62e57e2faf",
    "ragen_lib.envs.base": "90871cb982c0",
    "ragen_lib.envs.frozenlake": "cd78d0aa7db7",
    "ragen_lib.envs.sokoban": "a5e7e084d912",
    "ragen_lib.envs.webshop": "17e63a47d59f",
    "ragen_lib.generation": "79b9fd627731",
    "ragen_lib.models": "f7f5180babc4",
    "ragen_lib.prompting": "1fdc889db9c3",
    "ragen_lib.rollout": "cff325455e94",
    "ragen_lib.seeds": "f89b648e3869",
    "ragen_lib.trainer": "5778931f5c1a",
    "ragen_lib.warmup": "7b4bfa8f3345",
    "ragen_lib.work": "906d49cff14f",
}
"""`training_code()` as of the last change reviewed against this record (see the module's
docstring): tests/test_revisions.py fails while the code differs from it, and the grid, the CLI and
the plan say so when they take a stored run meanwhile (`unreviewed_note`)."""


def unreviewed() -> list[str]:
    """The training modules whose code differs from `TRAINING_CODE` (added, removed or edited):
    edits nobody has yet said whether they change what a config trains."""
    now = training_code()
    return sorted(m for m in now.keys() | TRAINING_CODE.keys() if now.get(m) != TRAINING_CODE.get(m))


def unreviewed_note(modules: list[str], stored: int) -> str:
    """The line the grid, the CLI and the plan print when they take `stored` runs from the store
    while the code that trains has such edits (a researcher's local change, before `make test` asks)."""
    return (
        f"note: {stored} stored run(s) are taken as trained by today's code, but the code that trains "
        f"has edits revisions.py was not checked against ({', '.join(modules)}). If they change what "
        "a config trains, add a revisions.Change naming the configs they touch, and those runs train "
        "again; if not, set revisions.TRAINING_CODE to the digests test_revisions.py prints."
    )


def note_if_unreviewed(stored: int) -> None:
    """Print `unreviewed_note` where `stored` runs are about to be taken from the store (reused or
    resumed) while the code that trains has such edits: the one check the grid and the CLI make."""
    if stored and (edited := unreviewed()):
        print(unreviewed_note(edited, stored))
