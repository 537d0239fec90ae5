"""Policy, value, KL and entropy terms: pure functions of tensors and a policy-token mask."""

from __future__ import annotations

import torch

from ragen_lib.algorithms.advantages import masked_mean


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: the one log-probability computation of the library.

    Memory-lean: gather − logsumexp, never materialising a log_softmax over the vocabulary.
    logits (…, V), targets (…) long → (…).
    """
    return logits.gather(-1, targets[..., None]).squeeze(-1) - logits.logsumexp(-1)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log π(input_ids[:, t] | input_ids[:, :t]) aligned with input_ids and the loss mask.

    Position t is scored by the logits at t−1; position 0 (no prefix) gets 0.
    logits (B, T, V), input_ids (B, T) → (B, T).
    """
    lp = gather_logprobs(logits[:, :-1], input_ids[:, 1:])  # (B, T-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)  # (B, T)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits): H = logsumexp(z) − Σ_v softmax(z)_v · z_v, per position.

    Stable: logsumexp and softmax subtract the max; −inf logits (masked vocabulary) contribute 0
    instead of 0·(−inf) = NaN, in the value and in the gradient (they are zeroed before the
    product: a product masked after would still send NaN back through softmax to every logit).
    (…, V) → (…), e.g. (B, T, V) → (B, T).
    """
    p = torch.softmax(logits, dim=-1)  # (…, V)
    z = torch.where(torch.isfinite(logits), logits, torch.zeros_like(logits))  # (…, V)
    return logits.logsumexp(-1) - (p * z).sum(-1)


POLICY_AGGS = ("token-mean", "seq-mean-token-mean")


def clipped_policy_loss(
    logp, old_logp, advantages, mask, clip_low: float = 0.2, clip_high: float = 0.2, agg: str = "token-mean"
):
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7) with DAPO's decoupled bounds (clip-higher).

    per token: ℓ_t = −min(ρ_t·A_t, clip(ρ_t, 1−clip_low, 1+clip_high)·A_t), ρ_t = exp(logp − old_logp).
    Aggregation ("normalisation"): "token-mean" = Σ over policy tokens / their count in the whole
    batch (DAPO; long responses weigh more); "seq-mean-token-mean" = mean over sequences of each
    sequence's token mean (original GRPO; biased towards short responses).
    logp, old_logp, mask (B, T); advantages (B, T), or (B,) broadcast over tokens.
    Returns (loss 0-d, stats of detached 0-d tensors): clip_frac_low (A<0, ρ<1−clip_low),
    clip_frac_high (A>0, ρ>1+clip_high), approx_kl (k3 of KL(old‖new) = mean((ρ−1) − log ρ)),
    ratio_mean, ratio_std (the ratio's spread) — all masked over the batch.
    """
    if agg not in POLICY_AGGS:
        raise ValueError(f"agg={agg!r}; valid: {', '.join(POLICY_AGGS)}")
    mask = mask.to(logp.dtype)  # (B, T)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)  # (B,) → (B, T)
    log_ratio = logp - old_logp  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    surrogate = torch.minimum(
        ratio * advantages, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages
    )  # (B, T)
    per_token = -surrogate  # (B, T)
    if agg == "token-mean":
        loss = masked_mean(per_token, mask)
    else:  # over the rows with a token: an empty row is no sequence (it counted as a loss of 0)
        rows = mask.sum(dim=1) > 0  # (B,)
        loss = masked_mean(per_token, mask, dim=1)[rows].mean() if rows.any() else (per_token * mask).sum()
    with torch.no_grad():
        low = ((ratio < 1 - clip_low) & (advantages < 0)).to(mask.dtype)  # (B, T)
        high = ((ratio > 1 + clip_high) & (advantages > 0)).to(mask.dtype)  # (B, T)
        stats = {
            "clip_frac_low": masked_mean(low, mask),
            "clip_frac_high": masked_mean(high, mask),
            "approx_kl": masked_mean((ratio - 1) - log_ratio, mask),  # k3 of KL(old ‖ new)
            "ratio_std": masked_mean((ratio - masked_mean(ratio, mask)) ** 2, mask).sqrt(),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def clipped_value_loss(values, old_values, returns, mask, clip: float = 0.5) -> torch.Tensor:
    """PPO's clipped value loss: 0.5 · masked mean of max((v − R)², (clip(v, old − c, old + c) − R)²).

    Token-mean over the policy tokens of the whole batch. All inputs (B, T) → 0-d.
    """
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)  # (B, T)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)


def _k1(d):
    return d


def _k2(d):
    return 0.5 * d**2


K3_MAX = 10.0
"""verl clamps k3 (`low_var_kl`) to [−10, 10] (core_algos.py:377 at 797f999); as there: one token
far below the reference (d < −2.4) would otherwise weigh exp(−d) in the penalty."""


def _k3(d):
    return (torch.exp(-d) + d - 1).clamp(max=K3_MAX)  # = π_ref/π − 1 − log(π_ref/π), ≥ 0


KL_ESTIMATORS = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimators of KL(π ‖ π_ref) from samples of π (Schulman 2020, "Approximating KL").

    With d = log π − log π_ref: k1 = d (unbiased, can be negative); k2 = ½d² (biased, low
    variance, ≥ 0); k3 = exp(−d) + d − 1 = π_ref/π − 1 − log(π_ref/π) (unbiased, always ≥ 0),
    clamped at K3_MAX as verl's `low_var_kl` is.
    No reduction: (B, T) → (B, T); mask and average with `masked_mean`.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"kl kind={kind!r}; valid: {', '.join(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[kind](logp - ref_logp)
