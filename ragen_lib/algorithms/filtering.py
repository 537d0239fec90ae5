"""StarPO-S's uncertainty filter: train on the initial states whose outcomes vary most."""

from __future__ import annotations

import torch

FILTER_MODES = ("top", "bottom", "random")


def group_reward_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(P,) population std of each group's raw rewards (unbiased=False), exactly 0 where a group's
    rewards are all equal: float32's std of equal values is not (7e-9 for eight −0.1s, 6e-8 for
    eight 0.9s), which would rank constant groups by their reward value and hide them from
    `reward/frac_zero_std`. rewards (B,), B = P·N → (P,), on the CPU."""
    g = rewards.detach().float().view(-1, group_size).cpu()  # (P, N)
    std = g.std(dim=1, unbiased=False)  # (P,)
    return torch.where(g.amax(dim=1) == g.amin(dim=1), torch.zeros_like(std), std)


def select_groups(
    rewards: torch.Tensor,
    group_size: int,
    keep_fraction: float,
    mode: str = "top",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Indices (LongTensor, ascending) of the groups kept, k = max(1, round(keep_fraction · P)).

    Uncertainty = std of each group's RAW trajectory rewards (population std, unbiased=False),
    measured before any GRPO normalisation. RAGEN's released code ranks its reward scores as they
    are after its normalisation (`agent_trainer.py:331-341`): raw for PPO (`identity`), as here;
    for GRPO (`mean_std`) s/(s + 1e-6) of the raw std s, the same order in exact arithmetic but
    decided by float32 rounding as s grows (docs/FIDELITY.md D8). Note round() is Python's (half
    to even).
    mode "top": highest std (StarPO-S; zero-variance groups are dropped first); "bottom": lowest
    std; "random": uniform without replacement using `generator` (the two controls). Ties keep the
    lower index (stable sort); constant groups tie at exactly 0 (`group_reward_std`).
    rewards (B,), B = P·N → (k,).
    """
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    if mode not in FILTER_MODES:
        raise ValueError(f"filter mode={mode!r}; valid: {', '.join(FILTER_MODES)}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards are not divisible by group_size={group_size}")
    std = group_reward_std(rewards, group_size)  # (P,)
    P = std.numel()
    k = max(1, round(keep_fraction * P))
    if mode == "random":
        idx = torch.randperm(P, generator=generator)[:k]  # (k,)
    else:
        idx = torch.argsort(-std if mode == "top" else std, stable=True)[:k]  # (k,)
    return torch.sort(idx).values.long().to(rewards.device)


def expand_group_mask(group_idx: torch.Tensor, num_groups: int, group_size: int) -> torch.Tensor:
    """(B,) bool, B = num_groups · group_size: True on every episode of the kept groups."""
    keep = torch.zeros(num_groups, dtype=torch.bool, device=group_idx.device)  # (P,)
    keep[group_idx] = True
    return keep.repeat_interleave(group_size)  # (B,)
