"""Per-step metrics with one name per concept (config, metrics.jsonl and plots use the same keys).

Text diagnostics for the echo trap live here as plain functions of strings:
- `distinct_n`: the fraction of distinct n-grams across a batch of reasoning texts (diversity);
- `reasoning_mi`: a mutual-information proxy between the initial state and the reasoning
  ("template collapse": the reasoning stops depending on the input while looking varied);
- `consistency_bonus`: the reasoning–action consistency reward of the WebShop-lite report.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import torch

_WORD = re.compile(r"[a-z0-9]+")

#: The keys `trainer.train` writes every step (`time/v_star`: A*-PO only, at step 0 and at each
#: V* refresh; warm-up and validation add `warmup/*` and `val/*`). Plots and notebooks read these.
STEP_KEYS = (
    "success", "reward/mean", "reward/std", "reward/group_std", "reward/group_std_kept",
    "reward/frac_zero_std", "format_valid", "policy/entropy", "policy/grad_norm", "policy/kl_ref",
    "policy/clip_frac_low", "policy/clip_frac_high", "policy/approx_kl", "loss/policy", "loss/value",
    "loss/apo", "response/length", "reasoning/length", "reasoning/distinct2", "reasoning/mi",
    "reasoning/consistency", "rollout/kept", "rollout/truncated", "rollout/turns", "skipped_steps", "warmup",
    "time/rollout", "time/forward", "time/update", "time/step", "time/v_star",
    "throughput/gen_tokens_per_s", "throughput/train_tokens_per_s",
    "memory/peak_gb",
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def distinct_n(texts: list[str], n: int = 2) -> float:
    """Distinct n-grams / all n-grams, pooled over the batch (Li et al. 2016). 1 = no repetition."""
    grams = [tuple(w[i:i + n]) for t in texts for w in [words(t)] for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def reasoning_mi(texts: list[str], states: list[int]) -> float:
    """Mutual-information proxy I(state; reasoning) in nats per word.

    For each text: the log-likelihood gain of its words under a unigram model fitted on the
    *other* texts of the same initial state over one fitted on *all other* texts (leave-one-out,
    add-one smoothing). About 0 when every state gets the same template; positive when the
    reasoning carries information about the state. Needs at least 2 texts per state.
    """
    vocab = {w for t in texts for w in words(t)}
    if not vocab:
        return 0.0
    V = len(vocab) + 1
    all_counts = Counter(w for t in texts for w in words(t))
    by_state: dict[int, Counter] = {}
    for t, s in zip(texts, states):
        by_state.setdefault(s, Counter()).update(words(t))
    gains, total_words = 0.0, 0
    for t, s in zip(texts, states):
        own = Counter(words(t))
        if not own or sum(by_state[s].values()) == sum(own.values()):
            continue  # no other text of this state to compare with
        n_state = sum(by_state[s].values()) - sum(own.values())
        n_all = sum(all_counts.values()) - sum(own.values())
        for w, c in own.items():
            p_state = (by_state[s][w] - c + 1) / (n_state + V)
            p_all = (all_counts[w] - c + 1) / (n_all + V)
            gains += c * (math.log(p_state) - math.log(p_all))
        total_words += sum(own.values())
    return gains / total_words if total_words else 0.0


def consistency_bonus(think: str, actions: list[str], max_bonus: float = 0.2) -> float:
    """Reasoning–action consistency in [0, max_bonus]: the fraction of the executed actions whose
    words all appear in the reasoning. No reasoning or no action: 0."""
    if not actions or not think:
        return 0.0
    said = set(words(think))
    hits = sum(all(w in said for w in words(a)) for a in actions)
    return max_bonus * hits / len(actions)


def group_reward_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(P,) std of each group's raw trajectory rewards (population std, as the filter sees it)."""
    return rewards.view(-1, group_size).std(dim=1, unbiased=False)


def device_name(device) -> str:
    """"cpu", or the GPU's name ("NVIDIA H100 80GB HBM3"): what a run or a table says it ran on."""
    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"


def peak_memory_gb(device) -> float:
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return float("nan")
