"""Advantage estimators: pure functions of tensors and a policy-token mask."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of x over entries where mask is 1 (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8):
    """(x − mean) / std over the masked entries (population variance). RAGEN whitens GAE
    advantages over policy tokens; with shift_mean=False only the scale changes."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    return out if shift_mean else out + mean


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over policy tokens only (Schulman et al. 2016).

    Observation tokens (mask 0) are skipped, not treated as steps: the "next" value of a policy
    token is the value of the next policy token in the row, 0 after the last one, so the
    environment's text between turns does not discount or bootstrap. All tensors (B, T).
    Returns (advantages, returns = advantages + values), both 0 off the mask.
    """
    mask = mask.to(values.dtype)
    B, T = values.shape
    adv = torch.zeros_like(values)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)  # (B,)
    running = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        # Off-mask positions carry the running state through unchanged.
        running = torch.where(m > 0, delta + gamma * lam * running, running)
        next_value = torch.where(m > 0, values[:, t], next_value)
        adv[:, t] = running * m
    return adv, (adv + values) * mask


def grpo_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-6):
    """GRPO (Shao et al. 2024): each trajectory reward minus its group's mean, divided by the
    group's *unbiased* std (as TRL) when `scale`. rewards (B,), groups contiguous, B = P·N."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    g = rewards.view(-1, group_size)  # (P, N)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale:
        std = g.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(g[:, :1])
        centred = centred / (std + eps)
    return centred.reshape(-1)


def zscore(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / population std over the batch; all-equal input gives zeros."""
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


def mix_reasoning_advantage(env_rewards: torch.Tensor, reasoning_rewards: torch.Tensor, lam: float = 0.4,
                            group_size: int | None = None) -> torch.Tensor:
    """A = z(env) + λ·z(reasoning) (WebShop-lite report, λ = 0.4). z over the whole batch, or
    within each group of `group_size` when given. The bonus shapes the update, never success."""
    if group_size is None:
        return zscore(env_rewards) + lam * zscore(reasoning_rewards)

    def z(x):
        g = x.view(-1, group_size)
        return ((g - g.mean(1, keepdim=True)) / (g.std(1, unbiased=False, keepdim=True) + 1e-8)).reshape(-1)

    return z(env_rewards) + lam * z(reasoning_rewards)
