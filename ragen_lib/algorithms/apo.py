"""A*-PO (Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage
Regression"): estimate the optimal value offline (stage 1), then regress onto it (stage 2)."""

from __future__ import annotations

import math

import torch


def apo_v_star(ref_rewards: torch.Tensor, beta1: float = 0.5) -> torch.Tensor:
    """Stage 1: V*(x) = β1 · ln((1/N) · Σ_i exp(r_i / β1)) from N reference samples per prompt.

    Computed as β1 · (logsumexp(r/β1) − ln N), stable for small β1. A soft maximum bounded by
    min r ≤ V* ≤ max r: β1 → 0 gives max r, β1 → ∞ gives mean r. ref_rewards (P, N) → (P,).
    """
    n = ref_rewards.shape[1]
    return beta1 * (torch.logsumexp(ref_rewards / beta1, dim=1) - math.log(n))  # (P,)


def sequence_logprob(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log π(y|x) = Σ over policy tokens of the token log-probabilities (no length normalisation).
    token_logp, mask (B, T) → (B,)."""
    return (token_logp * mask.to(token_logp.dtype)).sum(dim=1)


def apo_loss(logp_seq, ref_logp_seq, rewards, v_star, beta2: float = 1e-3):
    """Stage 2 least squares: mean_batch (β2 · ln(π(y|x)/π_ref(y|x)) − (r − V*(x)))², one sample
    per prompt; the mean over the batch (no other normalisation).

    Its gradient raises log π(y|x) when r − V* > β2·log-ratio (a better-than-optimal-estimate
    sample), lowers it otherwise. All inputs (B,). Returns (loss 0-d, stats of detached 0-d
    tensors "apo/residual_mean", "apo/adv_mean" (mean r − V*), "apo/log_ratio_mean").
    """
    log_ratio = logp_seq - ref_logp_seq  # (B,)
    adv = rewards - v_star  # (B,)
    residual = beta2 * log_ratio - adv  # (B,)
    stats = {
        "apo/residual_mean": residual.mean().detach(),
        "apo/adv_mean": adv.mean().detach(),
        "apo/log_ratio_mean": log_ratio.mean().detach(),
    }
    return (residual**2).mean(), stats
