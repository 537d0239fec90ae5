"""Section `update`: forward+backward tokens/s on a padded batch, on length-sorted micro-batches,
and through the trainer's own forward (`models.forward_logp`)."""

from __future__ import annotations

import contextlib

import torch

from ragen_lib import models
from ragen_lib.bench.common import Row, timed


def random_batch(
    lengths: list[int], vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random token ids (B, T) and their attention mask, one row per length."""
    T = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), T), generator=generator)
    attn = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * attn, attn


def sorted_micro_batches(attn: torch.Tensor, micro_batch_size: int) -> list[torch.Tensor]:
    """Row indices, shortest first, in chunks: rows of similar length share a micro-batch, so
    trimming each to its own longest row removes most of the padding."""
    order = attn.sum(1).argsort(stable=True)
    return list(order.split(micro_batch_size))


def _fwd_bwd(model, ids, attn, rows, width) -> None:
    """A plain HF forward (padding mask, the head on every position) and backward, in the model's
    compute dtype: what an update written without this project's forward costs."""
    from ragen_lib.algorithms import masked_mean, token_logprobs

    i, a = ids[rows, :width], attn[rows, :width]
    with models.autocast(model):
        logits = model(input_ids=i, attention_mask=a).logits
    (-masked_mean(token_logprobs(logits.float(), i), a.float())).backward()


def _ours_fwd_bwd(model, ids, attn, rows, width) -> None:
    """The trainer's forward (`models.forward_logp`): right-padded rows need no mask, the head runs
    in float32 on the trained positions only, entropies too; every real token counts as trained
    here (a multi-turn batch trains its answers only, a fraction: the worst case for ours)."""
    from ragen_lib.algorithms import masked_mean

    i, a = ids[rows, :width], attn[rows, :width]
    logp, ent = models.forward_logp(model, i, a, a, with_entropy=True, causal_only=True)
    (-masked_mean(logp + 1e-3 * ent, a.float())).backward()


@contextlib.contextmanager
def tf32_matmuls():
    """CUDA's float32 matmuls in TF32 while inside: under bf16 autocast the only float32 GEMMs left
    are the LM head's (`models.lm_logits`), which at Qwen2.5's vocabulary cost a token about as much
    as the whole bf16 body. Not what the trainer does: the bench measures the lever and its error
    first. CPU matmuls are left alone. The new API only: torch refuses to read the TF32 state once
    the legacy `allow_tf32` and the new `fp32_precision` have both been set."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def _head_error(model, ids, attn, rows, width) -> float:
    """Largest |log-prob difference| of the trainer's forward with a TF32 head against float32."""
    i, a = ids[rows, :width], attn[rows, :width]
    with torch.no_grad():
        full = models.forward_logp(model, i, a, a, with_entropy=False, causal_only=True)[0]
        with tf32_matmuls():
            tf32 = models.forward_logp(model, i, a, a, with_entropy=False, causal_only=True)[0]
    return float((full - tf32).abs().max())


def measure_update(model, device: str, size: dict) -> list[Row]:
    g = torch.Generator().manual_seed(0)
    L, B, mb = size["update_max_len"], size["update_rows"], size["micro_batch_size"]
    # Multi-turn trajectories vary in length: uniform between an eighth of the longest and all of it.
    lengths = torch.randint(L // 8, L + 1, (B,), generator=g).tolist()
    ids, attn = random_batch(lengths, model.config.vocab_size, g)
    ids, attn = ids.to(device), attn.to(device)
    tokens = int(attn.sum())
    model.train()

    def padded():
        for rows in torch.arange(B, device=device).split(mb):
            _fwd_bwd(model, ids, attn, rows, attn.shape[1])

    def packed(fwd_bwd=_fwd_bwd):
        for rows in sorted_micro_batches(attn, mb):
            fwd_bwd(model, ids, attn, rows, int(attn[rows].sum(1).max()))

    try:
        for warm in (_fwd_bwd, _ours_fwd_bwd):
            warm(model, ids, attn, torch.arange(min(2, B), device=device), 16)
        t_pad = timed(padded, device, size["repeats"])
        t_sorted = timed(packed, device, size["repeats"])
        t_ours = timed(lambda: packed(_ours_fwd_bwd), device, size["repeats"])
        first = sorted_micro_batches(attn, mb)[-1]  # the longest rows
        try:
            with tf32_matmuls():
                t_tf32 = timed(lambda: packed(_ours_fwd_bwd), device, size["repeats"])
            error = _head_error(model, ids, attn, first, int(attn[first].sum(1).max()))
            tf32 = f"max |Δ log-prob| {error:.2g}"
        except (RuntimeError, AttributeError) as e:  # a torch without the new API, or one that refuses it
            t_tf32, tf32 = None, f"not measured: {type(e).__name__}: {str(e)[:200]}"
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    note = (
        f"{B} rows, lengths {min(lengths)}–{max(lengths)}, micro-batch {mb}, fwd+bwd (no optimizer "
        f"step), {str(models.compute_dtype(model)).removeprefix('torch.')} compute"
    )
    return [
        Row("update: padded batch (naive)", tokens / t_pad, "tokens/s", vs_naive=1.0, note=note),
        Row(
            "update: sorted micro-batches",
            tokens / t_sorted,
            "tokens/s",
            vs_naive=t_pad / t_sorted,
            note=note,
        ),
        Row(
            "update: ours (forward_logp, sorted micro-batches)",
            tokens / t_ours,
            "tokens/s",
            "≥ 250k tokens/s (H100)",
            t_pad / t_ours,
            note + "; no padding mask, float32 head on trained positions only, with entropies",
        ),
        Row(
            "update: ours with a TF32 head (a candidate, not the trainer's)",
            None if t_tf32 is None else tokens / t_tf32,
            "tokens/s",
            vs_naive=None if t_tf32 is None else t_pad / t_tf32,
            note=note + f"; as the row above, CUDA's float32 matmuls in TF32; {tf32} against the "
            f"float32 head on the {len(first)} longest rows"
            + ("" if device.startswith("cuda") else " (TF32 acts on CUDA only: here the same computation)"),
        ),
    ]
