"""Advantage estimators: pure functions of tensors and a policy-token mask (1 on model tokens)."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of x over entries where mask is 1; 0 when the mask is empty (denominator clamped to 1).

    x, mask (B, T); dim None → 0-d, dim=1 → (B,).
    """
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8):
    """(x − mean) / sqrt(var + eps), mean and var over the masked entries only.

    Normalisation: population variance (unbiased=False); verl's and TRL's `masked_whiten` take the
    unbiased one (FIDELITY D12: √(n / (n − 1)) over thousands of tokens). RAGEN whitens the GAE
    advantages over the loss mask's tokens. shift_mean=False adds the mean back (only the scale changes).
    x, mask (B, T) → (B, T); off-mask entries are transformed too but carry no meaning.
    """
    mean = masked_mean(x, mask)  # ()
    var = masked_mean((x - mean) ** 2, mask)  # () population variance
    out = (x - mean) * torch.rsqrt(var + eps)  # (B, T)
    return out if shift_mean else out + mean


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over policy tokens only (Schulman et al. 2016, eq. 16):
    A_t = Σ_l (γλ)^l δ_{t+l},  δ_t = r_t + γ V(next) − V_t.

    Observation tokens (mask 0) are skipped, not treated as steps: the "next" value of a policy
    token is the value of the next policy token in the same row, 0 after the last one (no bootstrap
    at the end of the episode), so the environment's text between turns neither discounts nor
    bootstraps. verl's GAE (core_algos.py:98-103) instead steps through masked tokens with their
    values and the discount: the two agree at γ = λ = 1 (the sums telescope), RAGEN's setting and
    every run's, and differ at γ·λ < 1 with a gapped mask (the "response" loss mask; the "paper"
    mask has no gaps). Rewards off the mask are ignored.
    No normalisation here (whiten afterwards with `masked_whiten`).

    token_rewards, values, mask (B, T). Returns (advantages, returns = advantages + values), both
    (B, T) and 0 off the mask. Vectorised over B, loop over T backwards.
    """
    mask = mask.to(values.dtype)  # (B, T)
    B, T = values.shape
    adv = torch.zeros_like(values)  # (B, T)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)  # (B,) V of next policy token
    running = torch.zeros_like(next_value)  # (B,) A of next policy token
    for t in reversed(range(T)):
        on = mask[:, t] > 0  # (B,)
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        # Off-mask positions carry the running state through unchanged.
        running = torch.where(on, delta + gamma * lam * running, running)
        next_value = torch.where(on, values[:, t], next_value)
        adv[:, t] = running * mask[:, t]
    return adv, (adv + values) * mask


def _check_groups(n: int, group_size: int) -> None:
    if group_size < 1 or n % group_size:
        raise ValueError(
            f"batch of {n} is not divisible by group_size={group_size} "
            f"(cannot split into groups of {group_size})"
        )


CONSTANT_GROUP_STD = 1e-6
"""A group whose reward std is at most this gets advantage 0 (RAGEN 385bc30 `ctx_manager.py:169`,
"stable to bf16"). Without it a constant group is not 0: float32's mean and std of eight equal
rewards are off by rounding (std 6e-8 for eight 0.9s), and dividing by std + 1e-6 turns that into
advantages of up to ±0.1 whose signs are rounding's. The threshold alone misses larger rewards:
eight 10.9s (a Sokoban success) have a mean one ulp off and, taken as one group (RAGEN's 1-D
tensor per group; here a batch of one group), a std of 1.02e-6, which turns into −0.47 on all
eight (over a batch of several groups torch's CPU std of each is exactly 0; a GPU's is unmeasured).
So a group whose rewards are all equal gets 0 too (FIDELITY D18b)."""


def grpo_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-6):
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath §4.1.2): Â_i = (r_i − mean(r)) / (std(r) + eps).

    Normalisation: within each group of `group_size` contiguous trajectories (same prompt), with
    the *unbiased* std (Bessel, torch's default; TRL does the same). scale=False gives r − mean only
    (Dr. GRPO). A constant group gets 0: with scale, every group whose std is at most
    `CONSTANT_GROUP_STD` does, as in RAGEN, and every group of equal rewards. A group of 1 has
    std 0 by convention (not NaN).
    rewards (B,), B = P·N → (B,). Raises ValueError when B is not divisible by group_size.
    """
    _check_groups(rewards.numel(), group_size)
    g = rewards.view(-1, group_size)  # (P, N)
    centred = g - g.mean(dim=1, keepdim=True)  # (P, N)
    if scale:
        std = g.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(g[:, :1])  # (P, 1)
        varies = (std > CONSTANT_GROUP_STD) & (g.amax(1, keepdim=True) > g.amin(1, keepdim=True))  # (P, 1)
        centred = torch.where(varies, centred / (std + eps), torch.zeros_like(centred))
    return centred.reshape(-1)  # (B,)


def zscore(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / (population std + eps) over the whole batch (unbiased=False); constant → 0
    exactly: float32's mean and std of equal values are off by rounding (std 1e-8 for 0.9s), and
    over an eps of 1e-8 that rounding became z-scores of up to ±0.86. (B,) → (B,)."""
    if not x.numel():
        return x
    z = (x - x.mean()) / (x.std(unbiased=False) + eps)
    return torch.where(x.amax() == x.amin(), torch.zeros_like(z), z)


def mix_reasoning_advantage(
    env_rewards: torch.Tensor,
    reasoning_rewards: torch.Tensor,
    group_size: int,
    lam: float = 0.4,
    scale: bool = True,
) -> torch.Tensor:
    """GRPO's advantage with the reasoning bonus: A = grpo(env) + λ·grpo(reasoning) (WebShop-lite
    report, λ = 0.4), each term normalised within its group as `grpo_advantages` does (unbiased std,
    a constant group → 0, scale=False: centred only). The env term is therefore exactly the λ = 0
    arm's, so an arm with the bonus differs from one without it by the bonus alone (a z-score with
    the population std scaled it by sqrt(N / (N − 1)) and ignored `algo.grpo_scale`). The bonus
    shapes the update only; success is still measured on env rewards. (B,), (B,) → (B,).
    """
    env = grpo_advantages(env_rewards, group_size, scale=scale)
    return env + lam * grpo_advantages(reasoning_rewards, group_size, scale=scale) if lam else env
