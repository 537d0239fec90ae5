"""StarPO-S's uncertainty filter: train on the initial states whose outcomes vary most."""

from __future__ import annotations

import torch


def select_groups(rewards: torch.Tensor, group_size: int, keep_fraction: float, mode: str = "top",
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices (ascending) of the groups kept, k = max(1, round(keep_fraction · P)).

    The std is of each group's RAW trajectory rewards (population std). RAGEN's released code
    measured it after GRPO normalisation, where every std is about 1 (or 0), so its filter kept
    an almost arbitrary subset; we measure before. mode "top": highest std (StarPO-S); "bottom":
    lowest std; "random": uniform (the two controls). Ties keep the lower index.
    """
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    std = rewards.view(-1, group_size).std(dim=1, unbiased=False)  # (P,)
    P = std.numel()
    k = max(1, round(keep_fraction * P))
    if mode == "random":
        idx = torch.randperm(P, generator=generator)[:k]
    elif mode in ("top", "bottom"):
        order = torch.argsort(-std if mode == "top" else std, stable=True)
        idx = order[:k]
    else:
        raise ValueError(f"filter mode={mode!r}; valid: top, bottom, random")
    return torch.sort(idx).values


def expand_group_mask(group_idx: torch.Tensor, num_groups: int, group_size: int) -> torch.Tensor:
    """(B,) bool: True on every episode of the kept groups."""
    keep = torch.zeros(num_groups, dtype=torch.bool)
    keep[group_idx] = True
    return keep.repeat_interleave(group_size)
