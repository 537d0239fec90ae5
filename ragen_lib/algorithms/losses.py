"""Policy, value, KL and entropy terms: pure functions of tensors and a policy-token mask."""

from __future__ import annotations

import torch

from ragen_lib.algorithms.advantages import masked_mean


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log π(input_ids[:, t] | prefix) aligned with input_ids: position t is scored by the
    logits at t−1; position 0 gets 0. logits (B, T, V) → (B, T)."""
    lp = logits[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1) - logits[:, :-1].logsumexp(-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position: logsumexp(z) − Σ softmax(z)·z. (…, V) → (…)."""
    p = torch.softmax(logits, dim=-1)
    return logits.logsumexp(-1) - (p * logits).sum(-1)


def clipped_policy_loss(logp, old_logp, advantages, mask, clip_low: float = 0.2, clip_high: float = 0.2,
                        agg: str = "token-mean"):
    """PPO's clipped surrogate with decoupled bounds (DAPO's clip-higher: 1−clip_low, 1+clip_high).

    per token: −min(ρ·A, clip(ρ, 1−clip_low, 1+clip_high)·A), ρ = exp(logp − old_logp).
    agg "token-mean": Σ over policy tokens / their count in the batch (long answers weigh more);
    "seq-mean-token-mean": the mean over sequences of each one's token mean (the original GRPO).
    advantages (B, T), or (B,) broadcast over tokens. Returns (loss, stats).
    """
    mask = mask.to(logp.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    surrogate = torch.minimum(ratio * advantages,
                              torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages)
    per_token = -surrogate
    if agg == "token-mean":
        loss = masked_mean(per_token, mask)
    elif agg == "seq-mean-token-mean":
        loss = masked_mean(per_token, mask, dim=1).mean()
    else:
        raise ValueError(f"agg={agg!r}; valid: token-mean, seq-mean-token-mean")
    with torch.no_grad():
        low = ((ratio < 1 - clip_low) & (advantages < 0)).to(mask.dtype)
        high = ((ratio > 1 + clip_high) & (advantages > 0)).to(mask.dtype)
        stats = {"clip_frac_low": masked_mean(low, mask), "clip_frac_high": masked_mean(high, mask),
                 "approx_kl": masked_mean((ratio - 1) - log_ratio, mask),  # k3 of KL(old || new)
                 "ratio_mean": masked_mean(ratio, mask)}
    return loss, stats


def clipped_value_loss(values, old_values, returns, mask, clip: float = 0.5) -> torch.Tensor:
    """0.5 · masked mean of max((v − R)², (clip(v, old ± clip) − R)²) (PPO's value clipping)."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimators of KL(π || π_ref) from samples of π (Schulman, "Approximating KL").

    k1 = log π − log π_ref (unbiased, can be negative); k2 = ½(log π − log π_ref)² (biased, low
    variance); k3 = π_ref/π − 1 − log(π_ref/π) (unbiased, always ≥ 0).
    """
    d = logp - ref_logp
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d**2
    if kind == "k3":
        return torch.exp(-d) + d - 1
    raise ValueError(f"kl kind={kind!r}; valid: k1, k2, k3")
