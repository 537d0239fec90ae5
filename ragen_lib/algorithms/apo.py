"""A*-PO (Brantley et al. 2025): estimate the optimal value offline, then regress onto it."""

from __future__ import annotations

import math

import torch


def apo_v_star(ref_rewards: torch.Tensor, beta1: float = 0.5) -> torch.Tensor:
    """Stage 1: V*(x) = β1·ln((1/N)·Σ_i exp(r_i/β1)) from N reference samples per state.
    ref_rewards (P, N) → (P,). A soft maximum: β1 → 0 gives max r, β1 → ∞ gives mean r."""
    n = ref_rewards.shape[1]
    return beta1 * (torch.logsumexp(ref_rewards / beta1, dim=1) - math.log(n))


def sequence_logprob(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ over policy tokens of the log-probabilities: (B, T) → (B,)."""
    return (token_logp * mask.to(token_logp.dtype)).sum(dim=1)


def apo_loss(logp_seq, ref_logp_seq, rewards, v_star, beta2: float = 1e-3):
    """Stage 2: mean over the batch of (β2·ln(π(y|x)/π_ref(y|x)) − (r − V*(x)))², one sample per
    state. Its gradient raises log π(y|x) when r > V* + β2·log-ratio, and lowers it otherwise."""
    log_ratio = logp_seq - ref_logp_seq
    adv = rewards - v_star
    residual = beta2 * log_ratio - adv
    stats = {"apo/residual_mean": residual.mean().detach(), "apo/adv_mean": adv.mean().detach(),
             "apo/log_ratio_mean": log_ratio.mean().detach()}
    return (residual**2).mean(), stats
