"""The advantage estimators, chosen by `algo.advantage` from `ADVANTAGE_ESTIMATORS`.

One signature: `estimate(x: AdvantageInputs, a) -> (advantages, returns)`, both (B, T)
over this process's kept rows; `returns` are the critic's regression targets (zeros without a
critic). Batch-wide statistics (whitening, z-scores, std) go through `x.batch`, which computes
them over every data-parallel rank's rows, so an estimator reads the same with one process or many.
Adding one: a function here and a line in the registry (`algo.advantage=<name>`; a preset in
`config.ALGO_PRESETS` is optional); one that reads `x.values` is also listed in `CRITIC_ESTIMATORS`,
one that reads `x.kl` as a reward in `KL_REWARD_ESTIMATORS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ragen_lib.algorithms.advantages import gae, mix_reasoning_advantage


class BatchStats(Protocol):
    """Statistics over the whole kept batch (all ranks), returned for this rank's rows."""

    def whiten(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor: ...

    def zscore(self, x: torch.Tensor) -> torch.Tensor: ...

    def std(self, x: torch.Tensor) -> torch.Tensor: ...


@dataclass
class AdvantageInputs:
    """What an estimator may read, for the B kept rows this process holds."""

    token_rewards: torch.Tensor  # (B, T) the trajectory reward on its last generated token
    rewards: torch.Tensor  # (B,) trajectory rewards (env rewards + format terms)
    mask: torch.Tensor  # (B, T) the loss mask
    values: torch.Tensor  # (B, T) the critic's values (zeros without a critic)
    kl: torch.Tensor  # (B, T) per-token KL(π_old ‖ π_ref) estimate (algo.kl_estimator), masked
    reasoning: torch.Tensor  # (B,) the reasoning–action consistency bonus of each episode
    v_star: torch.Tensor  # (B,) A*-PO's V*(initial state) (zeros for the others)
    group_size: int  # N: consecutive rows sharing an initial state
    batch: BatchStats


def gae_estimator(x: AdvantageInputs, a) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO (StarPO-PPO, StarPO-S): GAE over the loss mask with the critic, then whitened over the
    batch (RAGEN/verl). With `kl_in_reward` the KL penalty is a per-token reward. The reasoning
    bonus, when weighted, is added after whitening as λ·z(bonus)."""
    token_rewards = x.token_rewards - (a.kl_coef * x.kl if a.kl_in_reward else 0.0)
    adv, returns = gae(token_rewards, x.values, x.mask, gamma=a.gamma, lam=a.lam)
    z = x.batch.zscore(x.reasoning) if a.reasoning_lambda else torch.zeros(len(x.rewards))
    adv = x.batch.whiten(adv, x.mask) + a.reasoning_lambda * z[:, None]
    return adv * x.mask, returns


def grpo_estimator(x: AdvantageInputs, a) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (StarPO-GRPO): the group-normalised trajectory reward on every token; with a reasoning
    weight, grpo(env) + λ·grpo(bonus), the bonus normalised as the reward is (WebShop-lite report)."""
    lam, scale = a.reasoning_lambda, a.grpo_scale
    seq = mix_reasoning_advantage(x.rewards, x.reasoning, x.group_size, lam=lam, scale=scale)
    return seq[:, None] * x.mask, torch.zeros_like(x.mask)


def apo_estimator(x: AdvantageInputs, a) -> tuple[torch.Tensor, torch.Tensor]:
    """A*-PO: the regression target r − V*(x), one value per sequence (broadcast over tokens). The
    reasoning bonus enters as λ·z(bonus) scaled by the batch std of the targets."""
    target = x.rewards - x.v_star
    z = x.batch.zscore(x.reasoning) if a.reasoning_lambda else torch.zeros(len(x.rewards))
    target = target + a.reasoning_lambda * z * x.batch.std(target)
    return target[:, None].expand_as(x.mask).contiguous(), torch.zeros_like(x.mask)


Estimator = Callable[[AdvantageInputs, object], tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "gae": gae_estimator,
    "grpo": grpo_estimator,
    "apo": apo_estimator,
}
CRITIC_ESTIMATORS: tuple[str, ...] = ("gae",)
"""The estimators that read `x.values`: a config with one of them needs `algo.critic`, and a critic
beside any other is refused (nothing would read it)."""
KL_REWARD_ESTIMATORS: tuple[str, ...] = ("gae",)
"""The estimators that read `x.kl` as a per-token reward (`algo.kl_in_reward`); the others are built
on the trajectory reward alone, so with them the KL acts only as a loss term (kl_in_reward false)."""
