"""Warm-ups before RL: behaviour cloning on well-formed answers, and the probe that measures them.

The embedded 135M model answers in RAGEN's `<think>…</think><answer>…</answer>` format about once
in 16 zero-shot, so RL would first spend its steps learning the format. `train.warmup` chooses:

- `format`: BC on well-formed answers whose actions are drawn uniformly from the valid ones: the
  format without the task, so a later rise in success is RL's;
- `expert`: BC on the env's scripted expert (also teaches the task);
- `self`: rejection sampling: keep the model's own format-valid first answers and fine-tune on them
  (needs some valid answers to start: on Bandit we measured 0 of 192).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch
from tqdm.auto import tqdm

from ragen_lib import seeds
from ragen_lib.config import Config
from ragen_lib.envs import make
from ragen_lib.models import forward_logp
from ragen_lib.rollout import Episode, RolloutBatch, collect

PROBE_STATES = 32
"""Held-out states the before/after probe plays (the first of the env's evaluation states)."""


def warmup(policy, tok, cfg: Config, device, progress: bool = False) -> dict:
    """Run the config's warm-up on `policy` in place. Returns the format-valid and success rates of
    first answers before and after (`warmup/*` metrics), on the same held-out states."""
    t = cfg.train
    probe = seeds.val_seeds(cfg.env.name, PROBE_STATES)
    before, success_before = first_turn_probe(policy, tok, cfg, probe)
    opt = torch.optim.AdamW(policy.parameters(), lr=t.warmup_lr, weight_decay=0.0)
    policy.train()
    kept = 0
    if t.warmup in ("expert", "format"):
        states = seeds.draw_states(t.seed, -1, seeds.WARMUP_STATES, t.warmup_episodes)
        rows = list(expert_dataset(tok, cfg, states, random_actions=t.warmup == "format"))
        order = seeds.run_rng(t.seed, seeds.WARMUP_ORDER)
        for _ in tqdm(range(t.warmup_steps), desc=f"warm-up ({t.warmup})", disable=not progress):
            pick = order.choice(len(rows), size=min(t.mini_batch_size, len(rows)), replace=False)
            sft_step(policy, opt, [rows[i] for i in pick], device, t.micro_batch_size)
        kept = len(rows)
    elif t.warmup == "self":
        rcfg = dataclasses.replace(cfg.rollout, max_turns=1)
        for i in tqdm(range(t.warmup_steps), desc="warm-up (self)", disable=not progress):
            states = seeds.draw_states(t.seed, -100 - i, seeds.TRAIN_STATES, t.groups)
            policy.eval()
            b = collect(
                policy,
                tok,
                cfg.env.name,
                states,
                max(1, t.warmup_episodes // len(states)),
                rcfg,
                env_kwargs=dict(cfg.env.kwargs),
                sample_seed=seeds.SELF_WARMUP_SAMPLING + i,
            )
            policy.train()
            good = _valid_first_turns(b)
            kept += len(good)
            if good:
                sft_step(policy, opt, good, device, t.micro_batch_size)
    policy.eval()
    after, success_after = first_turn_probe(policy, tok, cfg, probe)
    return {
        "warmup/format_valid_before": before,
        "warmup/format_valid_after": after,
        "warmup/success_before": success_before,
        "warmup/success_after": success_after,
        "warmup/examples": kept,
    }


def first_turn_probe(policy, tok, cfg: Config, states: list[int]) -> tuple[float, float]:
    """(format-valid rate, success rate) of first answers at the training temperature: the
    warm-up's yardstick. Success after a `format` warm-up shows what the model brings to RL
    (on Bandit, its arm preference) that the warm-up's random actions did not teach."""
    rcfg = dataclasses.replace(cfg.rollout, max_turns=1)
    b = collect(
        policy,
        tok,
        cfg.env.name,
        states,
        1,
        rcfg,
        env_kwargs=dict(cfg.env.kwargs),
        sample_seed=seeds.PROBE_SAMPLING,
    )
    return b.format_valid_rate, float(b.success.float().mean())


def expert_dataset(tok, cfg: Config, states: list[int], random_actions: bool = False):
    """Behaviour-cloning data: the env's scripted expert played through the text protocol.

    One row per turn: the chat so far (prompt_ids) and the expert's formatted answer
    (response_ids, closed with EOS). Returned as a `datasets.Dataset`. `random_actions`: the same
    well-formed answers with uniformly random valid actions instead (the `format` warm-up).
    """
    from datasets import Dataset

    rows = []
    for state in states:
        ep = Episode(make(cfg.env.name, **cfg.env.kwargs), state, cfg.rollout)
        pick = np.random.default_rng([cfg.train.seed, state, seeds.FORMAT_ACTIONS])
        while not ep.done:
            shadow = copy.deepcopy(ep.env)  # plan this turn's actions without touching the episode
            acts: list[str] = []
            for _ in range(min(ep.per_turn, ep.actions_left)):
                a = shadow.random_action(pick) if random_actions else shadow.expert_action()
                acts.append(a)
                if shadow.step(a)[2]:
                    break
            answer = " || ".join(acts)
            think = (
                f"I will try: {', '.join(acts)}."
                if random_actions
                else f"The shortest way to the goal from here is: {', '.join(acts)}."
            )
            text = (
                f"<think>{think}</think><answer>{answer}</answer>"
                if cfg.rollout.enable_think
                else f"<answer>{answer}</answer>"
            )
            # The rollout's prompt ends with the prefill (`<think>`): the model learns what follows it.
            text = text.removeprefix(ep.prefill)
            rows.append(
                {
                    "prompt_ids": tok(ep.generation_prompt(tok), add_special_tokens=False)["input_ids"],
                    "response_ids": tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                }
            )
            ep.step(text)
    return Dataset.from_list(rows)


def sft_step(policy, opt, examples: list[dict], device, micro: int) -> float:
    """One optimizer step of next-token NLL on the response tokens of `examples`."""
    opt.zero_grad(set_to_none=True)
    total = sum(len(e["response_ids"]) for e in examples)
    loss_sum = 0.0
    for i in range(0, len(examples), micro):
        part = examples[i : i + micro]
        seqs = [e["prompt_ids"] + e["response_ids"] for e in part]
        width = max(map(len, seqs))
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        attn, mask = torch.zeros_like(ids), torch.zeros((len(seqs), width))
        for j, (e, s) in enumerate(zip(part, seqs)):
            ids[j, : len(s)], attn[j, : len(s)] = torch.tensor(s), 1
            mask[j, len(e["prompt_ids"]) : len(s)] = 1
        ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
        logp, _ = forward_logp(policy, ids, attn, mask, with_entropy=False)
        loss = -(logp * mask).sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return loss_sum


def _valid_first_turns(b: RolloutBatch) -> list[dict]:
    """The episodes' first answers that parsed, as (prompt_ids, response_ids) examples."""
    out = []
    for i in range(len(b)):
        if not b.turn_format_valid[i][0]:
            continue
        first = int(b.loss_mask[i].bool().nonzero()[0])
        ids = b.input_ids[i, : int(b.attention_mask[i].sum())].tolist()
        out.append({"prompt_ids": ids[:first], "response_ids": ids[first:]})
    return out
