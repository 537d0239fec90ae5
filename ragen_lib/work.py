"""Work counters: how many tokens each phase of a step computes, beside how long it takes.

Wall time on a shared 2-core CPU is noise; the work a step does is not. Inside `counting()` the
generation loop, the training forward and the critic add what they computed to the active
`Counters` (outside it, `add` is a no-op and the hot paths pay one attribute read):

- rollout: `generate_calls`, `decode_steps` (forwards of one token per row; `decode_steps_per_call`
  lists them), `decode_row_steps` (rows × decode steps computed, padding rows included),
  `gen_tokens` (tokens sampled and kept), `prefill_calls` (prefill forwards: eager, so on a GPU
  each costs a whole forward's kernel launches, where a graphed decode step costs one; the
  admissions of static continuous batching are graphed too, at bucketed shapes),
  `prefill_tokens` (positions the prefill computed, padding included) and `prefill_real` (those
  that hold a token), `decode_kv_read` (row × cache columns the decode steps' attention read:
  padding rows, masked and empty columns included) and `decode_kv_real` (the least any decoder
  reads for the same tokens, `kv_needed`: at batch 128 a 135M model's decode step reads more
  bytes of KV cache than of weights, so this ratio is the decode step's cost on a GPU);
- forward (no-grad old/reference/critic) and update (with grad): `tokens` computed, `real` tokens,
  `loss_tokens` (where the head runs), `calls`.

Every counter is a function of the token ids alone, so on CPU with fixed seeds two runs count the
same (tests/test_bench.py checks it). `padding(c)` is 1 − real / computed of a phase.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch


class Counters(dict):
    """phase → {counter: int}; `decode_steps_per_call` is a list."""

    def add(self, phase: str, **counts: int) -> None:
        d = self.setdefault(phase, defaultdict(int))
        for k, v in counts.items():
            d[k] += int(v)

    def plain(self) -> dict:
        return {p: dict(d) for p, d in self.items()}


_ACTIVE: list[Counters] = []


def active() -> Counters | None:
    return _ACTIVE[-1] if _ACTIVE else None


def add(phase: str | None = None, **counts: int) -> None:
    """Add to the active counters; `phase` None: "update" with grad enabled, else "forward"."""
    if not _ACTIVE:
        return
    _ACTIVE[-1].add(phase or ("update" if torch.is_grad_enabled() else "forward"), **counts)


def add_decode_call(steps: int) -> None:
    if _ACTIVE:
        _ACTIVE[-1].setdefault("rollout", defaultdict(int)).setdefault("decode_steps_per_call", []).append(
            int(steps)
        )


def count_forward(attn: torch.Tensor, mask: torch.Tensor | None = None, phase: str | None = None) -> None:
    """One training-style forward over (B, T) rows: computed positions, real tokens, head positions.
    Reads the masks only while counting (a host sync on a GPU, so never otherwise)."""
    if not _ACTIVE:
        return
    add(
        phase,
        calls=1,
        tokens=attn.numel(),
        real=int(attn.sum()),
        **({"loss_tokens": int(mask[:, 1:].sum())} if mask is not None else {}),
    )


@contextlib.contextmanager
def counting():
    """Collect the work done inside the block into a fresh `Counters` (yielded)."""
    c = Counters()
    _ACTIVE.append(c)
    try:
        yield c
    finally:
        _ACTIVE.pop()


def padding(phase: dict, computed: str = "tokens", real: str = "real") -> float:
    """Share of the computed positions that held no token (0 when nothing was computed)."""
    n = phase.get(computed, 0)
    return 1.0 - phase.get(real, 0) / n if n else 0.0


def kv_needed(context: int, generated: int) -> int:
    """Cache columns an answer's decode steps must read at least: its token k ≥ 1 comes from the
    step that fed token k − 1, which attends to the `context` tokens before the answer and the k
    answer tokens up to it (token 0 comes from the prefill). Σ_{k=1}^{g-1} (context + k)."""
    g = max(generated - 1, 0)
    return g * context + g * (g + 1) // 2
