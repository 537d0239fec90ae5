"""The policy objectives, chosen by `algo.objective` from `POLICY_OBJECTIVES`.

One signature: `objective(logp, mb, a, *, token_share, seq_share) -> (loss, stats)`, `a` the run's
`config.AlgoConfig`. `logp` (b, T)
are the current policy's log-probs of a micro-batch `mb` (a dict of (b, T) / (b,) tensors: loss_mask,
old_logp, ref_logp, advantages, rewards). The loss is this micro-batch's part of the mini-batch
mean: `token_share` = its tokens / the mini-batch's tokens (token-mean objectives), `seq_share` =
its sequences / the mini-batch's sequences (sequence-mean ones), so summing the micro-batches'
gradients gives the mini-batch gradient. `stats` are 0-d tensors keyed by metric name (each
declared in `metrics.UPDATE_KEYS` and `METRICS`), each weighted by the same share as the loss, so
that the trainer's sum over micro-batches and ranks is the mini-batch's statistic whatever the
cut (a plain mean over micro-batches moved with the packing and the process count); left on the
device (the trainer reads them once per step: no host sync per micro-batch). The KL loss and
the entropy bonus are not part of an objective: the trainer adds them to any objective.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ragen_lib.algorithms.apo import apo_loss, sequence_logprob
from ragen_lib.algorithms.losses import clipped_policy_loss


def ppo_clip_objective(
    logp: torch.Tensor, mb: dict, a, *, token_share: float, seq_share: float
) -> tuple[torch.Tensor, dict]:
    """PPO's clipped surrogate with decoupled bounds (clip_low, clip_high), token-mean."""
    loss, s = clipped_policy_loss(
        logp, mb["old_logp"], mb["advantages"], mb["loss_mask"], clip_low=a.clip_low, clip_high=a.clip_high
    )
    stats = {
        f"policy/{k}": s[k].detach() * token_share
        for k in ("clip_frac_low", "clip_frac_high", "approx_kl", "ratio_std")
    }
    return loss * token_share, stats


def apo_objective(
    logp: torch.Tensor, mb: dict, a, *, token_share: float, seq_share: float
) -> tuple[torch.Tensor, dict]:
    """A*-PO stage 2: (β2·log π/π_ref − (r − V*))² per sequence, sequence-mean. The advantages hold
    the target r − V*, so V* = r − target. The loss is logged as loss/policy like any objective's;
    its stats say what drives it: how far π moved from π_ref per sequence, and the residual left."""
    seq_lp = sequence_logprob(logp, mb["loss_mask"])
    ref_seq = sequence_logprob(mb["ref_logp"], mb["loss_mask"])
    loss, s = apo_loss(
        seq_lp, ref_seq, mb["rewards"], mb["rewards"] - mb["advantages"][:, 0], beta2=a.apo_beta2
    )
    stats = {
        "policy/apo_log_ratio": s["apo/log_ratio_mean"] * seq_share,
        "policy/apo_residual": s["apo/residual_mean"] * seq_share,
    }
    return loss * seq_share, stats


Objective = Callable[..., tuple[torch.Tensor, dict]]
POLICY_OBJECTIVES: dict[str, Objective] = {
    "ppo-clip": ppo_clip_objective,
    "apo": apo_objective,
}
#: The objectives that read `mb["ref_logp"]`: the trainer runs the reference forward for them.
OBJECTIVES_WITH_REFERENCE = frozenset({"apo"})
