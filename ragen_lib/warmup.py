"""Warm-ups before RL: behaviour cloning on well-formed answers, and the probe that measures them.

The embedded 135M model answered in RAGEN's `<think>…</think><answer>…</answer>` format 0 times in
64 zero-shot on every env (it opens `<think>` and does not close it; docs/FIDELITY.md), so RL
would first spend its steps learning the format. `train.warmup` chooses:

- `format`: BC on well-formed answers whose actions are drawn uniformly from the valid ones: the
  format without the task, so a later rise in success is RL's;
- `expert`: BC on the env's scripted expert (also teaches the task);

In both, the `<think>` text of every target is the model's own: sampled from the model before the
warm-up, on that very prompt, then closed and followed by the chosen actions (`own_reasoning`).
A fixed sentence there would put templated reasoning into the model at step 0, and the echo trap
(distinct-2, the MI proxy) and the reasoning-length trend would measure drift from our template
rather than the model's own reasoning;
- `self`: rejection sampling: keep the model's own format-valid first answers and fine-tune on them
  (needs some valid answers to start: on Bandit we measured 0 of 192).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from ragen_lib import seeds
from ragen_lib.config import Config
from ragen_lib.envs import make
from ragen_lib.generation import end_token_ids, generate, stop_on_text
from ragen_lib.metrics import reasoning_stats
from ragen_lib.models import forward_logp
from ragen_lib.progress import tqdm
from ragen_lib.rollout import Episode, RolloutBatch, collect

THINK_STOPS = ("</think>", "<answer>", "</answer>")
"""Where the model's own reasoning ends: the first tag it writes after `<think>`."""

PROBE_STATES = 32
"""Held-out states the before/after probe plays (the first of the env's evaluation states)."""


def warmup(policy, tok, cfg: Config, device, progress: bool = False) -> dict:
    """Run the config's warm-up on `policy` in place. Returns the format-valid and success rates of
    first answers before and after (`warmup/*` metrics), on the same held-out states."""
    t = cfg.train
    probe = seeds.val_seeds(cfg.env.name, PROBE_STATES)
    before = first_turn_probe(policy, tok, cfg, probe)
    opt = torch.optim.AdamW(policy.parameters(), lr=t.warmup_lr, weight_decay=0.0)
    policy.train()
    kept = 0
    if t.warmup in ("expert", "format"):
        states = seeds.draw_states(t.seed, -1, seeds.WARMUP_STATES, t.warmup_episodes)
        rows = list(expert_dataset(policy, tok, cfg, states, random_actions=t.warmup == "format"))
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
    after = first_turn_probe(policy, tok, cfg, probe)
    return {
        **{f"warmup/{k}_before": v for k, v in before.items()},
        **{f"warmup/{k}_after": v for k, v in after.items()},
        "warmup/examples": kept,
    }


def first_turn_probe(policy, tok, cfg: Config, states: list[int]) -> dict[str, float]:
    """First answers at the training temperature, the warm-up's yardstick: format-valid rate,
    success, and the reasoning's length (tokens) and distinct-2, measured as the step metrics
    `reasoning/length` and `reasoning/distinct2` are. Success after a `format` warm-up shows what
    the model brings to RL (on Bandit, its arm preference) that the warm-up's random actions did
    not teach; the reasoning numbers show whether the warm-up changed how the model reasons."""
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
    return {
        "format_valid": b.format_valid_rate,
        "success": float(b.success.float().mean()),
        **reasoning_stats(tok, [th for ep in b.reasoning() for th in ep]),
    }


def expert_dataset(policy, tok, cfg: Config, states: list[int], random_actions: bool = False):
    """Behaviour-cloning data: the env's scripted expert played through the text protocol.

    One row per turn: the chat so far (prompt_ids) and the target answer (response_ids, closed with
    EOS): `<think>` + the model's own reasoning (`own_reasoning`) + `</think><answer>` + the
    expert's actions + `</answer>`. `random_actions`: uniformly random valid actions instead (the
    `format` warm-up). The episodes advance turn by turn together, so each turn's reasoning is
    sampled in one batch. Returned as a `datasets.Dataset`.
    """
    from datasets import Dataset

    eps = [Episode(make(cfg.env.name, **cfg.env.kwargs), s, cfg.rollout) for s in states]
    picks = {
        id(e): np.random.default_rng([cfg.train.seed, s, seeds.FORMAT_ACTIONS]) for e, s in zip(eps, states)
    }
    device = next(policy.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seeds.OWN_REASONING_SAMPLING)
    rows = []
    while live := [e for e in eps if not e.done]:
        answers = [
            f"<answer>{' || '.join(_plan_turn(e, picks[id(e)], random_actions))}</answer>" for e in live
        ]
        texts = [e.generation_prompt(tok) for e in live]  # the chat template rendered once a turn
        thinks = [None] * len(live)
        if cfg.rollout.enable_think:
            thinks = own_reasoning(policy, tok, live, answers, cfg, generator, texts)
        for e, prompt, think, answer in zip(live, texts, thinks, answers):
            text, response = _target(tok, e, think, answer, cfg)
            rows.append(
                {"prompt_ids": tok(prompt, add_special_tokens=False)["input_ids"], "response_ids": response}
            )
            e.step(text)
    return Dataset.from_list(rows)


def _target(tok, ep: Episode, think: str | None, answer: str, cfg: Config) -> tuple[str, list[int]]:
    """The turn's target text after the prefill and its token ids (closed with EOS). The reasoning
    is shortened, by tokens, until the target fits rollout.max_new_tokens: decoded text does not
    always re-tokenise to as few tokens as were sampled."""
    limit = ep.max_new_tokens
    for _ in range(8):
        text = answer if think is None else f"<think>{think}</think>{answer}"
        # The rollout's prompt ends with the prefill (`<think>`): the model learns what follows it.
        text = text.removeprefix(ep.prefill)
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if think is None or not think or len(ids) <= limit:
            return text, ids
        t = tok(think, add_special_tokens=False)["input_ids"]
        think = tok.decode(t[: max(0, len(t) - (len(ids) - limit))], skip_special_tokens=True).strip()
    return _target(tok, ep, "", answer, cfg)


def _plan_turn(ep: Episode, pick: np.random.Generator, random_actions: bool) -> list[str]:
    """This turn's actions (random valid or the expert's), planned on a copy of the env.

    As many as the env's own per-turn default (Sokoban and FrozenLake 5), not the run's
    `rollout.max_actions_per_turn`: cloning k actions a turn taught each arm of the actions-per-turn
    study (Table 3) to write its own k before RL began, a second difference between the arms. A run
    allowed fewer has the rest cut unjudged, as RAGEN cuts a model's extra actions (P6)."""
    shadow = copy.deepcopy(ep.env)
    acts: list[str] = []
    for _ in range(min(ep.env.max_actions_per_turn, ep.actions_left)):
        a = shadow.random_action(pick) if random_actions else shadow.expert_action()
        if shadow.parse_action(a) is None:  # the warm-up would teach an answer scored invalid
            raise ValueError(
                f"env {ep.env.name!r}: {'random' if random_actions else 'expert'}_action() returned "
                f"{a!r}, which parse_action rejects; return an action the parser accepts"
            )
        acts.append(a)
        if shadow.step(a)[2]:
            break
    return acts


@torch.no_grad()
def own_reasoning(
    policy, tok, episodes: list[Episode], answers: list[str], cfg: Config, generator, texts=None
):
    """The model's own `<think>` text for each episode's next turn: sampled at the rollout's
    temperature after the chat and `<think>`, cut at the first tag it writes (`THINK_STOPS`), and
    no longer than leaves room for `</think>`, the answer and EOS within rollout.max_new_tokens (so
    the whole target is a response the rollout could have produced). `texts`: the episodes'
    generation prompts when the caller has rendered them already."""
    r = cfg.rollout
    texts = texts or [e.generation_prompt(tok) for e in episodes]
    opened = [t.removesuffix(e.prefill) + "<think>" for e, t in zip(episodes, texts)]
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in opened]
    own_open = [0 if e.prefill == "<think>" else len(tok("<think>", add_special_tokens=False)["input_ids"])
                for e in episodes]  # fmt: skip
    rooms = [
        max(0, e.max_new_tokens - len(tok(f"</think>{a}", add_special_tokens=False)["input_ids"]) - 1 - o)
        for e, a, o in zip(episodes, answers, own_open)
    ]
    if max(rooms) == 0:
        return ["" for _ in episodes]
    new = generate(
        policy,
        prompts,
        max_new_tokens=max(rooms),
        temperature=r.temperature,
        eos_token_id=end_token_ids(policy, tok),
        pad_token_id=tok.pad_token_id,
        stop=stop_on_text(tok, THINK_STOPS),
        generator=generator,
        kv_cache=r.kv_cache,
    )
    out = []
    for ids, room in zip(new, rooms):
        text = tok.decode(ids[:room], skip_special_tokens=True)
        cut = min([text.find(s) for s in (*THINK_STOPS, "<think>") if s in text] or [len(text)])
        out.append(text[:cut].strip())
    return out


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
