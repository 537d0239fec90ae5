"""Metric names and the step's metric dictionary: one name per concept, from the trainer to
metrics.jsonl, the DataFrame, the plots' axis labels and the docs.

Naming rule: `<where>/<quantity>` in lower snake case, where `<where>` says what was measured:
`rollout` (the step's training episodes), `reward`, `policy`, `critic`, `loss`, `response`,
`reasoning`, `val` (fixed validation states; `val/<quantity>/<env>` for an extra env), `warmup`,
`time`, `throughput`, `memory`. `METRICS` lists every name with its axis label and meaning;
`docs/ARCHITECTURE.md` carries the same table (`markdown_table()`; a test keeps them equal).

Text diagnostics for the echo trap live here as plain functions of strings:
- `distinct_n`: the fraction of distinct n-grams across a batch of reasoning texts (diversity),
  rarefied to a fixed number of n-grams (`DISTINCT_AT`) in the step metrics;
- `reasoning_stats`: the step's `reasoning/length` and `reasoning/distinct2`, over the turns whose
  tags matched, as the trainer, the warm-up probe and the `zeroshot` command all measure them;
- `reasoning_mi`: a mutual-information proxy between the initial state and the reasoning
  ("template collapse": the reasoning stops depending on the input while looking varied).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from ragen_lib.algorithms import masked_mean

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Metric:
    label: str
    """Axis label for figures."""
    doc: str
    """What it measures."""
    when: str = "every step"


VAL_WHEN = (
    "steps 0, val_every, 2·val_every, …: the policy that plays that step (step 0: before any update); "
    "the last step: the final policy"
)
"""RAGEN's schedule (docs/FIDELITY.md D10): before training, every val_every updates, after the last."""

METRICS: dict[str, Metric] = {
    "rollout/success": Metric("success (train)", "fraction of the step's episodes that ended in success"),
    "rollout/format_valid": Metric(
        "format-valid (train)", "fraction of the step's turns whose answer parsed with only valid actions"
    ),
    "rollout/truncated": Metric(
        "truncated episodes",
        "fraction of episodes cut by a turn, action or context budget (not the token budget: see "
        "rollout/answer_cut; on one-turn Bandit, the episodes whose answer pulled no arm)",
    ),
    "rollout/answer_cut": Metric(
        "answers cut by the token budget",
        "fraction of the step's turns whose answer used every one of rollout.max_new_tokens without "
        "closing: format-invalid for want of room, not of form (samples.jsonl's invalid_reasons says "
        "which turns)",
    ),
    "rollout/turns": Metric("turns", "mean turns per episode"),
    "rollout/actions_written": Metric(
        "actions written a turn",
        "mean action pieces an answer wrote, valid or not, before the per-turn cut, over the turns "
        "whose tags matched (NaN: none did): what the model tried to play, where "
        "rollout.max_actions_per_turn says what it could (05's Table 3)",
    ),
    "rollout/actions_dropped": Metric(
        "answers past the per-turn limit",
        "fraction of the turns whose tags matched where the answer wrote more actions than "
        "rollout.max_actions_per_turn, the rest dropped unjudged as RAGEN does (NaN: none matched): "
        "how often the limit bound",
    ),
    "rollout/actions_past_default": Metric(
        "answers past the env's default per-turn limit",
        "fraction of the turns whose tags matched where the answer wrote more actions than the env's "
        "default per-turn limit (5 on Sokoban and FrozenLake, which the format warm-up teaches), "
        "whatever rollout.max_actions_per_turn allowed (NaN: none matched): how often a larger "
        "limit's arm played what the default would have cut (05's Table 3)",
    ),
    "rollout/logprob_gap": Metric(
        "sampler–trainer log-prob gap",
        "mean |log π_sampler − log π_old| over the generated tokens: the sampler's log-probs (KV cache, "
        "compute dtype, static or dynamic) against the update's forward of the same weights; float32: "
        "about 1e-6, bf16: larger (generation.LOGPROB_TOLERANCE)",
    ),
    "rollout/kept": Metric("episodes kept", "episodes the uncertainty filter kept for the update"),
    "reward/mean": Metric("reward (per trajectory)", "mean trajectory reward (env rewards + format terms)"),
    "reward/std": Metric(
        "reward std (all episodes)",  # not the paper's "reward std", which is reward/group_std
        "population std of the trajectory rewards, over all episodes (within and between groups)",
    ),
    "reward/group_std": Metric(
        "in-group reward std",
        "mean over groups of the std of their raw rewards, before the filter: the paper's reward std, "
        "RAGEN's rollout/in_group_std for PPO (for GRPO RAGEN logs the std of normalised scores, about "
        "1 − reward/frac_zero_std: docs/FIDELITY.md D8); 0 under A*-PO, one sample a state",
    ),
    "reward/group_std_kept": Metric("in-group reward std (kept)", "the same over the groups the filter kept"),
    "reward/frac_zero_std": Metric("groups with zero std", "fraction of groups whose rewards are all equal"),
    "reward/kl_penalty": Metric(
        "KL reward size",
        "kl_coef × the sum of the absolute per-token KL over an episode's loss tokens, mean over the "
        "trained episodes: the most the KL reward (algo.kl_in_reward) moves any return of an "
        "episode, to set beside reward/std; NaN when no KL reward runs",
    ),
    "policy/entropy": Metric(
        "entropy (nats/token)",
        "mean per-token entropy of the policy on the loss mask of the kept episodes (a filter's "
        "selection moves it too)",
    ),
    "policy/entropy_response": Metric(
        "entropy (sampled tokens)",
        "the same over the tokens the model sampled alone, of the kept episodes: with the paper's loss "
        "mask, policy/entropy "
        "also averages the prompt and observations (RAGEN's, D2)",
    ),
    "policy/kl_ref": Metric(
        "KL to reference (k1 est.)",  # k1 goes negative: a reader took it for a bug
        "k1 estimate of KL(π ‖ π_ref) on the loss mask of the kept episodes, before the update "
        "(NaN when train.log_kl_ref is off and no KL term runs)",
    ),
    "policy/grad_norm": Metric(
        "grad norm", "global gradient norm before clipping (mean over optimizer steps)"
    ),
    "policy/grad_norm_max": Metric(
        "grad norm (max)",
        "the largest of the step's optimizer steps' gradient norms before clipping: a spike of one "
        "mini-batch, which the mean divides by their number (RAGEN logs the last one's: FIDELITY D33)",
    ),
    "policy/clip_frac_low": Metric(
        "clip fraction (low)", "fraction of tokens with A<0 and ratio < 1−clip_low"
    ),
    "policy/clip_frac_high": Metric(
        "clip fraction (high)", "fraction of tokens with A>0 and ratio > 1+clip_high"
    ),
    "policy/approx_kl": Metric("approx KL (old‖new)", "k3 estimate of KL(π_old ‖ π) during the update"),
    "policy/ratio_std": Metric(
        "ratio std",
        "spread (std over each micro-batch's tokens, averaged) of the PPO ratio π/π_old during the update",
    ),
    "policy/apo_log_ratio": Metric(
        "A*-PO log-ratio",
        "mean over sequences of ln π/π_ref of the whole answer (its tokens' log-probs summed) during "
        "the A*-PO update: how far the policy moved from the reference (NaN for other objectives)",
    ),
    "policy/apo_residual": Metric(
        "A*-PO residual",
        "mean of β2·ln π/π_ref − (r − V*) during the A*-PO update: the regression's error, whose square "
        "is loss/policy (NaN for other objectives)",
    ),
    "policy/optimizer_steps": Metric(
        "optimizer steps", "optimizer steps the step's batch got (1: the ratio stays 1, clipping cannot act)"
    ),
    "policy/skipped_steps": Metric(
        "skipped policy steps", "optimizer steps skipped for a non-finite gradient, since the start"
    ),
    "critic/explained_var": Metric(
        "explained variance",
        "1 − Var(R − V)/Var(R) of the critic on the kept episodes' loss mask (NaN without a critic, or "
        "when the returns are one number up to float32 rounding: every kept episode got the same reward)",
    ),
    "critic/skipped_steps": Metric(
        "skipped critic steps", "critic optimizer steps skipped for a non-finite gradient, since the start"
    ),
    "loss/policy": Metric(
        "policy loss", "the objective's loss of each mini-batch (mean over the step's mini-batches)"
    ),
    "loss/value": Metric("value loss", "the critic's clipped value loss of each mini-batch (mean over them)"),
    "response/length": Metric("response tokens", "generated tokens per turn"),
    "reasoning/length": Metric(
        "reasoning tokens", "tokens of the parsed <think> text per turn whose tags matched (NaN: none did)"
    ),
    "reasoning/matched": Metric(
        "format tags matched",  # <think> and <answer>, or <answer> alone with thinking off
        "share of the turns whose format tags matched (the turns reasoning/length measures)",
    ),
    "reasoning/distinct2": Metric(
        "distinct-2", "distinct share of 128 bigrams drawn from the reasoning texts (rarefied; NaN: fewer)"
    ),
    "reasoning/mi": Metric(
        "MI proxy (nats/word)", "mutual-information proxy between initial state and reasoning"
    ),
    "reasoning/consistency": Metric(
        "consistency bonus", "mean reasoning–action consistency bonus of the kept episodes"
    ),
    "time/rollout": Metric("rollout s", "seconds generating and stepping the envs"),
    "time/forward": Metric("forward s", "seconds of the no-grad old-policy, reference and critic forwards"),
    "time/update": Metric("update s", "seconds of the mini-batch updates"),
    "time/step": Metric("step s", "seconds of the whole step, validation included"),
    "time/v_star": Metric("V* s", "A*-PO stage 1 seconds", "A*-PO: step 0 and each V* refresh"),
    "time/setup": Metric(
        "setup s",
        "seconds before the first step: model load, warm-up, reference and optimizers, A*-PO's stage 1",
        "step 0 (not after a resume)",
    ),
    "time/train_step": Metric(
        "train s / step",
        "time/rollout + time/forward + time/update: no validation, no V*",
        "07's figures (derived)",
    ),
    "time/train_total": Metric(
        "train s", "time/train_step + time/v_star (A*-PO's stage 1 and refreshes)", "07's figures (derived)"
    ),
    "throughput/gen_tokens_per_s": Metric("generated tokens/s", "generated tokens / rollout seconds"),
    "throughput/train_tokens_per_s": Metric(
        "trained tokens/s", "tokens forwarded with gradients (every attention-mask token) / update seconds"
    ),
    "memory/peak_gb": Metric(
        "peak GB",
        "peak CUDA memory of the step's V* refresh, rollout and update (NaN on CPU): not its validation, "
        "nor A*-PO's stage 1 at setup",
    ),
    "val/success": Metric(
        "success (val)", "success on the fixed validation states at val_temperature", VAL_WHEN
    ),
    "val/format_valid": Metric("format-valid (val)", "format-valid rate on the validation states", VAL_WHEN),
    "warmup/format_valid_before": Metric(
        "format-valid before warm-up", "first answers on 32 held-out states, before", "step 0 with a warm-up"
    ),
    "warmup/format_valid_after": Metric(
        "format-valid after warm-up", "the same after the warm-up", "step 0 with a warm-up"
    ),
    "warmup/success_before": Metric(
        "success before warm-up", "first-answer success on the same states, before", "step 0 with a warm-up"
    ),
    "warmup/success_after": Metric(
        "success after warm-up", "the same after the warm-up", "step 0 with a warm-up"
    ),
    "warmup/reasoning_length_before": Metric(
        "reasoning tokens before warm-up",
        "reasoning/length of the first answers on the same states, before",
        "step 0 with a warm-up",
    ),
    "warmup/reasoning_length_after": Metric(
        "reasoning tokens after warm-up", "the same after the warm-up", "step 0 with a warm-up"
    ),
    "warmup/distinct2_before": Metric(
        "distinct-2 before warm-up",
        "reasoning/distinct2 of the first answers on the same states, before",
        "step 0 with a warm-up",
    ),
    "warmup/distinct2_after": Metric(
        "distinct-2 after warm-up", "the same after the warm-up", "step 0 with a warm-up"
    ),
    "warmup/examples": Metric(
        "warm-up examples",
        "the warm-up's examples: the expert or format dataset's rows, which its mini-batches draw "
        "from, or the self warm-up's valid first turns",
        "step 0 with a warm-up",
    ),
}
#: The update's statistics, one value per mini-batch (the micro-batches' weighted shares summed over
#: micro-batches and ranks, as the loss is; the grad norm: per optimizer step), averaged per step
#: (the grad norm's largest is `policy/grad_norm_max` too).
UPDATE_KEYS = (
    "loss/policy",
    "loss/value",
    "policy/clip_frac_low",
    "policy/clip_frac_high",
    "policy/approx_kl",
    "policy/ratio_std",
    "policy/apo_log_ratio",
    "policy/apo_residual",
    "policy/grad_norm",
)
#: The keys every training step writes (plots and notebooks may rely on them).
STEP_KEYS = tuple(k for k, m in METRICS.items() if m.when == "every step")


def label(name: str) -> str:
    """Axis label of a metric or a `val/<quantity>/<env>` column; the name itself otherwise."""
    if name in METRICS:
        return METRICS[name].label
    base, _, env = name.rpartition("/")
    return f"{METRICS[base].label} on {env}" if base in METRICS and name.startswith("val/") else name


def is_rate(metric: str) -> bool:
    """A success or format-valid rate: a share of binary episodes, in [0, 1]."""
    return "success" in metric or "format_valid" in metric


def format_rate_of(success: str) -> str | None:
    """The format-valid rate measured on the same episodes as a success metric: rollout/success →
    rollout/format_valid, val/success[/env] → val/format_valid[/env]; None for any other metric.
    With a small model a success number may be format learning: this rate says which."""
    if success == "rollout/success":
        return "rollout/format_valid"
    if success.startswith("val/success"):
        return success.replace("val/success", "val/format_valid", 1)
    return None


def natural_key(value) -> tuple:
    """Sort key that orders the numbers inside labels by value: "top 25%" < "top 100%", "k=2" < "k=10",
    "P=1×N=11" < "P=16×N=1". The order of every figure's legend and every late-score table."""
    parts = re.split(r"(\d+(?:\.\d+)?)", str(value))
    return tuple((0, float(p)) if re.fullmatch(r"\d+(?:\.\d+)?", p) else (1, p) for p in parts)


def markdown_table() -> str:
    """The metric table of docs/ARCHITECTURE.md."""
    rows = ["| metric | label | meaning | logged |", "| --- | --- | --- | --- |"]
    rows += [f"| `{k}` | {m.label} | {m.doc} | {m.when} |" for k, m in METRICS.items()]
    return "\n".join(rows)


def step_metrics(
    episodes: dict,
    *,
    tokenizer,
    group_std: torch.Tensor,
    keep: torch.Tensor,
    kept_reasoning: torch.Tensor,
    update: dict[str, list[float]],
    **measured,
) -> dict:
    """The step's metric dictionary (every key in `STEP_KEYS`).

    `episodes`: every rank's episodes of the step (rewards, success, truncated, num_turns,
    gen_tokens, seeds, thinks: the reasoning of each turn whose tags matched
    (`RolloutBatch.reasoning`), turn_format_valid, turn_cut, turn_written and turn_dropped (the
    matched turns', `RolloutBatch.written`), default_per_turn (each episode's env's per-turn
    limit)); `group_std` (P,) the groups' raw-reward std and `keep` the kept groups' indices;
    `kept_reasoning` (B_all,) the kept episodes' consistency bonus; `update`: per optimizer step /
    micro-batch values of the update, averaged here (NaNs ignored);
    `measured`: the remaining metrics, already reduced (entropy, KL, times, …), by their names.
    """
    thinks = [th for ep in episodes["thinks"] for th in ep]
    think_states = [episodes["seeds"][i] for i, ep in enumerate(episodes["thinks"]) for _ in ep]
    turn_valid = [f for ep in episodes["turn_format_valid"] for f in ep]
    turn_cut = [c for ep in episodes["turn_cut"] for c in ep]
    written = [w for ep in episodes["turn_written"] for w in ep]
    dropped = [d > 0 for ep in episodes["turn_dropped"] for d in ep]
    past = [w > k for ep, k in zip(episodes["turn_written"], episodes["default_per_turn"]) for w in ep]
    reasoning = reasoning_stats(tokenizer, thinks)
    m = {
        "rollout/success": float(episodes["success"].float().mean()),
        "rollout/format_valid": sum(turn_valid) / max(len(turn_valid), 1),
        "rollout/truncated": float(episodes["truncated"].float().mean()),
        "rollout/answer_cut": sum(turn_cut) / max(len(turn_cut), 1),
        "rollout/turns": float(episodes["num_turns"].float().mean()),
        "rollout/actions_written": float(np.mean(written)) if written else math.nan,
        "rollout/actions_dropped": float(np.mean(dropped)) if dropped else math.nan,
        "rollout/actions_past_default": float(np.mean(past)) if past else math.nan,
        "rollout/kept": len(kept_reasoning),
        "reward/mean": float(episodes["rewards"].mean()),
        "reward/std": float(episodes["rewards"].std(unbiased=False)),
        "reward/group_std": float(group_std.mean()),
        "reward/group_std_kept": float(group_std[keep].mean()),
        "reward/frac_zero_std": float((group_std == 0).float().mean()),
        "response/length": int(episodes["gen_tokens"].sum()) / max(int(episodes["num_turns"].sum()), 1),
        "reasoning/length": reasoning["reasoning_length"],
        "reasoning/matched": len(thinks) / max(len(turn_valid), 1),
        "reasoning/distinct2": reasoning["distinct2"],
        "reasoning/mi": reasoning_mi(thinks, think_states),
        "reasoning/consistency": float(kept_reasoning.mean()) if len(kept_reasoning) else 0.0,
        **{k: _finite_mean(v) for k, v in update.items()},
        "policy/grad_norm_max": _finite_max(update.get("policy/grad_norm", [])),
        **measured,
    }
    missing = set(STEP_KEYS) - set(m) - {"time/step"}  # the step's time is taken after validation
    if missing:
        raise KeyError(f"step_metrics is missing {sorted(missing)}: every key of STEP_KEYS must be logged")
    return m


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, mean=masked_mean
) -> float:
    """1 − Var(returns − values) / Var(returns) over the masked tokens: the standard PPO diagnostic of
    the critic (1: perfect, 0: no better than a constant, negative: worse). NaN when the returns do
    not vary. `mean`: a masked mean (a data-parallel one gives the value over every rank's tokens)."""

    def var(x):
        return mean((x - mean(x, mask)) ** 2, mask)

    var_r = float(var(returns))
    # Returns that are one number up to float32 rounding (every kept episode got the same reward;
    # GAE re-adds the values it took off, about 1e-7 relative) have a variance near 1e-14 of their
    # square: dividing by it logged -1e11. Below 1e-10 of the square (a spread under 1e-5 of their
    # size) they count as constant.
    scale = float(mean(returns**2, mask))
    return 1.0 - float(var(returns - values)) / var_r if var_r > 1e-10 * scale else float("nan")


def _finite_mean(values: list[float]) -> float:
    # A step whose gradient overflowed was skipped (and counted in */skipped_steps); its norm, inf
    # as well as NaN, would otherwise make the step's mean inf.
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _finite_max(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]  # a skipped (overflowed) step's norm is not a spike
    return float(max(finite)) if finite else float("nan")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


DISTINCT_AT = 128
"""How many n-grams `reasoning/distinct2` is rarefied to. Pooled distinct-n falls as the pool
grows, the texts unchanged (a fixed vocabulary read 0.84 over 32 texts, 0.51 over 512), and the
pool grows as more turns parse and the reasoning lengthens: the echo-trap trend would then follow
the format-valid rate. 128 bigrams: the warm-up probe's 32 first answers reach it with 5 words of
reasoning each (after the format warm-up Sokoban's averaged 9 tokens), a step's 128 episodes with 2;
fewer is NaN, not measured."""


def distinct_n(texts: list[str], n: int = 2, at: int | None = None) -> float:
    """Distinct n-grams / all n-grams of the texts, pooled (Li et al. 2016). 1 = no repetition.

    `at`: rarefied (Hurlbert 1971): the expected share of distinct n-grams among `at` drawn without
    replacement from the pool, exact (no random draw), so that pools of different sizes from the
    same texts agree; NaN when the pool holds fewer than `at`. Without `at`: the pooled share (NaN
    with no n-gram)."""
    grams = [tuple(w[i : i + n]) for t in texts for w in [words(t)] for i in range(len(w) - n + 1)]
    if at is None:
        return len(set(grams)) / len(grams) if grams else float("nan")
    total = len(grams)
    if total < at or at < 1:
        return float("nan")
    # P(an n-gram seen c times is missed by the draw) = C(total - c, at) / C(total, at)
    base = math.lgamma(total - at + 1) - math.lgamma(total + 1)
    expected = 0.0
    for c in Counter(grams).values():
        rest = total - c
        missed = math.exp(math.lgamma(rest + 1) - math.lgamma(rest - at + 1) + base) if rest >= at else 0.0
        expected += 1.0 - missed
    return expected / at


def reasoning_stats(tokenizer, thinks: list[str]) -> dict[str, float]:
    """`reasoning_length`: mean tokens of the reasoning texts; `distinct2`: their distinct-2 rarefied
    to `DISTINCT_AT` bigrams (the names the warm-up probe and `zeroshot` report; the step metrics'
    are reasoning/length and reasoning/distinct2). `thinks`: the texts of the turns whose tags
    matched only (a turn that did not parse has no reasoning, not an empty one); both NaN when there
    is none to measure."""
    lengths = [len(tokenizer(th)["input_ids"]) for th in thinks]
    return {
        "reasoning_length": float(np.mean(lengths)) if lengths else float("nan"),
        "distinct2": distinct_n(thinks, 2, at=DISTINCT_AT),
    }


def reasoning_mi(texts: list[str], states: list[int]) -> float:
    """Mutual-information proxy I(state; reasoning) in nats per word.

    For each text: the log-likelihood gain of its words under a unigram model fitted on the
    *other* texts of the same initial state over one fitted on *all other* texts (leave-one-out,
    add-one smoothing). About 0 when every state gets the same template; positive when the
    reasoning carries information about the state. Needs at least 2 texts per state.
    """
    vocab = {w for t in texts for w in words(t)}
    if not vocab:
        return float("nan")  # no reasoning: nothing to measure (0 would read as "one template")
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
    return gains / total_words if total_words else float("nan")  # no state with two texts


def device_name(device) -> str:
    """ "cpu", or the GPU's name ("NVIDIA H100 80GB HBM3"): what a run or a table says it ran on."""
    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"


def device_slug(name: str) -> str:
    """A device's name as a file name ("NVIDIA H100 80GB HBM3" → nvidia-h100-80gb-hbm3): the stem of
    its bench and doctor reports, and how `plan` finds this GPU's measured step."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def peak_memory_gb(device) -> float:
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return float("nan")
