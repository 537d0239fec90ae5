"""What changed in how a config trains, so that no verdict mixes runs trained by different code.

A run folder is named by its config's hash, and the grid reuses a finished run of the same hash.
That is right while the code trains a config the same way; when a change alters what a config
trains, a run stored before it would be reused as if it were new. So each such change is listed
here with the configs it touches, every run records the revision it trained under (in DONE and in
its checkpoints), and a run is reused or resumed only when no change since its revision touches
its config. A run from before this record (no revision: 0) is judged against every change listed.

A change that alters training gets an entry here, with REVISION raised to its number, in the same
commit. A new config field does not (it changes the hash; see config.HASH_NEUTRAL), nor does a
change of analysis or plots (verdicts are recomputed from the metrics on every call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ragen_lib.config import Config
from ragen_lib.models import BUILTIN_MODELS


@dataclass(frozen=True)
class Change:
    revision: int
    """The first revision that trains this way."""
    date: str
    what: str
    """What trains differently, in a phrase that completes "trained before ..."."""
    affects: Callable[[Config], bool]
    """Whether a config trains differently since the change (False: its old runs stand)."""


def _online_k_cadence(cfg: Config) -> bool:
    """d38869a: with online_k > 1 the last rollout feeds only the updates left, and validation and
    samples come when a rollout's updates pass a multiple of their cadence; before, at the logged
    steps that were multiples of it. Configs where both rules pick the same steps are untouched."""
    t = cfg.train
    if t.online_k == 1:
        return False
    if t.steps % t.online_k:
        return True
    validated = t.logged_steps[:-1]  # the last logged step validates the final policy, by both rules
    old_val = [s for s in validated if t.val_every and s % t.val_every == 0]
    old_samples = [s for s in t.logged_steps if t.samples_every and s % t.samples_every == 0]
    return old_val != [s for s in validated if t.due(s, t.val_every)] or old_samples != [
        s for s in t.logged_steps if t.due(s, t.samples_every)
    ]


def _end_ids(cfg: Config) -> bool:
    """20f6c09: an answer ends at any end id the model's generation config lists. The built-in
    models list their tokenizer's <|im_end|> only; any other model may list more (Qwen2.5 does)."""
    return cfg.model.name not in BUILTIN_MODELS


CHANGES: tuple[Change, ...] = (
    Change(
        1,
        "2026-11-28",
        "online-k counted updates (validation and samples every val_every/samples_every updates, the "
        "last rollout feeding only the updates left)",
        _online_k_cadence,
    ),
    Change(
        1,
        "2026-11-28",
        "an answer ended at every end id of the model's generation config (Qwen's <|endoftext|>)",
        _end_ids,
    ),
)

REVISION = max(c.revision for c in CHANGES)
"""The revision this code trains under: recorded in DONE and in every checkpoint."""


def since(revision: int | None, cfg: Config) -> list[Change]:
    """The changes after `revision` (None: a run from before the record, 0) that touch `cfg`."""
    return [c for c in CHANGES if c.revision > (revision or 0) and c.affects(cfg)]


def describe(revision: int | None, changes: list[Change]) -> str:
    """'trained under revision 0 (before 2026-11-28), before <what>; <what>'."""
    under = "before revisions were recorded" if revision is None else f"under training revision {revision}"
    return f"trained {under}, before " + "; and before ".join(f"{c.what} ({c.date})" for c in changes)
