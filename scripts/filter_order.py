"""How often RAGEN's GRPO rollout filter keeps the groups a raw-std filter keeps (docs/FIDELITY.md D8).

RAGEN's filter reads the per-group std of `original_rm_scores`, which under GRPO's
`reward_normalization.method=mean_std` (train_all.sh) holds the *normalised* scores (an alias,
ctx_manager.py:198, 255, 267-269). For a group with raw std s the normalised scores have std
s / (s + 1e-6): monotone in s, so in exact arithmetic the order is the raw one, but in float32 its
steps between groups (about 1e-6 * Δs / s**2) fall to rounding size once s is near 1 or more. This
draws groups of episode returns shaped like each env's (a per-group success rate and format-failure
rate, each env's rewards as in ragen_lib/envs, the -0.1 format penalty) and counts how often the
top k groups by the normalised std are the top k by the raw std. Ours filters on the raw std.

    python scripts/filter_order.py [--trials 2000] [--groups 8] [--group-size 16] [--keep 2]
"""

from __future__ import annotations

import argparse
import math

import torch

EPS = 1e-6  # RAGEN's mean_std normaliser: (x - mean) / (std + 1e-6), zeros for a constant group


def normalised(x: torch.Tensor) -> torch.Tensor:
    std = x.std()
    return (x - x.mean()) / (std + EPS) if std.abs() > EPS else torch.zeros_like(x)


def returns(env: str, groups: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """(groups, size) float32 episode returns; each group has its own success and format-failure rate."""
    u = lambda *shape: torch.rand(*shape, generator=gen)  # noqa: E731
    win, bad = u(groups, 1), u(groups, 1) * 0.5
    hit = u(groups, size) < win
    if env == "bandit":  # the high-risk arm pays 1 with p 0.25, the low-risk arm 0.1
        r = torch.where(hit, (u(groups, size) < 0.25).float(), torch.full((groups, size), 0.1))
    elif env == "frozenlake":  # 1 at the goal, 0 otherwise
        r = hit.float()
    else:  # sokoban: +10 solved, -0.1 a step (1-9 steps), box rewards left out
        steps = torch.randint(1, 10, (groups, size), generator=gen).float()
        r = torch.where(hit, 10.0 - 0.1 * steps, -0.1 * steps)
    return r + torch.where(u(groups, size) < bad, -0.1, 0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--groups", type=int, default=8, help="RAGEN's es_manager.train.env_groups")
    p.add_argument("--group-size", type=int, default=16, help="RAGEN's es_manager.train.group_size")
    p.add_argument("--keep", type=int, default=2, help="int(rollout_filter_ratio 0.25 * groups)")
    a = p.parse_args()
    gen = torch.Generator().manual_seed(0)
    chance = 1 / math.comb(a.groups, a.keep)
    print(f"top {a.keep} of {a.groups} groups of {a.group_size}, {a.trials} trials; chance {chance:.1%}")
    for env in ("bandit", "frozenlake", "sokoban"):
        same, decided, spread = 0, 0, []
        for _ in range(a.trials):
            r = returns(env, a.groups, a.group_size, gen)
            raw = r.double().std(-1)  # the raw order, exact enough to tell a tie from a step
            ranked = raw.sort(descending=True).values
            spread.append(float(raw.median()))
            if ranked[a.keep - 1] - ranked[a.keep] < 1e-9:
                continue  # raw stds tie at the cut (binary rewards): either choice is the raw order
            decided += 1
            normed = torch.stack([normalised(g) for g in r])
            raw_top = set(raw.topk(a.keep).indices.tolist())
            same += raw_top == set(normed.std(-1).topk(a.keep).indices.tolist())
        s = sorted(spread)[len(spread) // 2]
        print(
            f"{env:10s} median group std {s:.2f}: of {decided} trials without a tie at the cut, "
            f"the same groups kept in {same / max(decided, 1):.1%}"
        )


if __name__ == "__main__":
    main()
