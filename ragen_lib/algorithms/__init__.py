"""Pure tensor functions behind StarPO, StarPO-S and A*-PO (each unit-tested by hand)."""

from ragen_lib.algorithms.advantages import (
    gae,
    grpo_advantages,
    masked_mean,
    masked_whiten,
    mix_reasoning_advantage,
    zscore,
)
from ragen_lib.algorithms.apo import apo_loss, apo_v_star, sequence_logprob
from ragen_lib.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    CRITIC_ESTIMATORS,
    KL_REWARD_ESTIMATORS,
    AdvantageInputs,
)
from ragen_lib.algorithms.filtering import FILTER_MODES, expand_group_mask, group_reward_std, select_groups
from ragen_lib.algorithms.losses import (
    KL_ESTIMATORS,
    POLICY_AGGS,
    clipped_policy_loss,
    clipped_value_loss,
    entropy_from_logits,
    gather_logprobs,
    kl_penalty,
    token_logprobs,
)
from ragen_lib.algorithms.objectives import OBJECTIVES_WITH_REFERENCE, POLICY_OBJECTIVES

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "CRITIC_ESTIMATORS",
    "OBJECTIVES_WITH_REFERENCE",
    "POLICY_OBJECTIVES",
    "AdvantageInputs",
    "FILTER_MODES",
    "KL_ESTIMATORS",
    "KL_REWARD_ESTIMATORS",
    "POLICY_AGGS",
    "apo_loss",
    "apo_v_star",
    "clipped_policy_loss",
    "clipped_value_loss",
    "entropy_from_logits",
    "gather_logprobs",
    "expand_group_mask",
    "gae",
    "grpo_advantages",
    "group_reward_std",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "mix_reasoning_advantage",
    "select_groups",
    "sequence_logprob",
    "token_logprobs",
    "zscore",
]
