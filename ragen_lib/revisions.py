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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
