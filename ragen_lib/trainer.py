"""The StarPO loop (RAGEN, Wang et al. 2025) and A*-PO (Brantley et al. 2025), top to bottom.

    rollout → uncertainty filter → advantages → mini-batch updates → metrics → validation → checkpoint

`train(cfg, run)` is the whole algorithm. Everything it calls is either a pure tensor function
(`ragen_lib.algorithms`), the rollout engine, or the run store. It imports no notebook or
plotting library.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ragen_lib import algorithms as A
from ragen_lib import metrics as M
from ragen_lib import models, runs
from ragen_lib.config import Config, RolloutConfig
from ragen_lib.envs import make
from ragen_lib.rollout import Episode, RolloutBatch, collect

VAL_SAMPLE_SEED = 12345  # validation sampling is the same at every step: curves differ by policy only
REUSE_UPDATE_LOGP = True
"""Take the old log-probs from the update's forward when a batch gets one optimizer step (exact;
saves a policy forward). False forces the separate no-grad forward (tests compare the two)."""


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
class ValueModel(nn.Module):
    """The critic: a copy of the base model's transformer with a scalar head (RAGEN's critic)."""

    def __init__(self, policy):
        super().__init__()
        self.backbone = copy.deepcopy(policy.base_model)
        hidden = policy.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 at the start: the first advantages are the rewards
        nn.init.zeros_(self.head.bias)
        self.head.to(next(self.backbone.parameters()).device, next(self.backbone.parameters()).dtype)

    def forward(self, input_ids, attention_mask):
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        v = self.head(h).squeeze(-1).float()  # (B, T): value of the state after token t
        # Align with token_logprobs: position t holds V(state before token t is generated).
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)


def _forward_logp(model, ids, attn, mask, *, with_entropy: bool):
    """Log-probs (and entropies) of the tokens where `mask` is 1, aligned with `ids`; 0 elsewhere.

    The LM head runs only on the positions that predict a policy token: prompts and observations
    are most of a multi-turn sequence, and the (B, T, vocab) logits are the largest tensor of the
    update, so this is the main saving in memory and time.
    """
    hidden = model.base_model(input_ids=ids, attention_mask=attn).last_hidden_state  # (B, T, H)
    target = mask[:, 1:].bool()  # (B, T-1): position t-1 predicts token t
    logits = model.get_output_embeddings()(hidden[:, :-1][target]).float()  # (K, V)
    picked = logits.gather(-1, ids[:, 1:][target][:, None]).squeeze(-1) - logits.logsumexp(-1)
    logp = torch.zeros(ids.shape, dtype=torch.float, device=ids.device)
    logp[:, 1:][target] = picked
    if not with_entropy:
        return logp, None
    ent = torch.zeros_like(logp)
    ent[:, 1:][target] = A.entropy_from_logits(logits)
    return logp, ent


def _micro(batch: dict, rows: torch.Tensor, device) -> dict:
    """Rows of a batch, trimmed to their longest sequence (right padding is never computed)."""
    width = int(batch["attention_mask"][rows].sum(1).max())
    return {k: (v[rows][:, :width] if v.dim() == 2 else v[rows]).to(device) for k, v in batch.items()}


# ----------------------------------------------------------------------------------------------
# Data parallel: one process per device under `accelerate launch --multi_gpu` or `torchrun`
# ----------------------------------------------------------------------------------------------
class Ranks:
    """This process's place in a data-parallel run. With one process every method is the identity
    (or the single-process function), so `train` has one code path.

    The launcher sets WORLD_SIZE / RANK / LOCAL_RANK and the rendezvous address; we open the
    torch.distributed group ourselves (gloo on CPU, nccl on GPU), because accelerate's state opens
    none for CPU processes. Every rank holds the whole model and plays a contiguous share of the
    step's groups; what is gathered or summed across ranks is named at each call in `train`.
    """

    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.main = self.rank == 0
        self.device = device
        self._opened = self.world > 1 and not dist.is_initialized()
        if self._opened:
            if device.startswith("cuda"):
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")

    def shard(self, xs: list) -> list:
        """This rank's contiguous slice of `xs` (len(xs) divisible by world, checked by `train`)."""
        n = len(xs) // self.world
        return xs[self.rank * n:(self.rank + 1) * n]

    def cat(self, x):
        """Every rank's `x` (a tensor, a list, or a dict of them) concatenated in rank order."""
        if self.world == 1:
            return x
        parts = [None] * self.world
        dist.all_gather_object(parts, x)
        return _concat(parts)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return x
        y = x.detach().to(self.device, torch.float64)
        dist.all_reduce(y)
        return y.to(x.device, x.dtype)

    def masked_mean(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A.masked_mean over the whole batch of all ranks."""
        if self.world == 1:
            return A.masked_mean(x, mask)
        total = self.sum(torch.stack([(x * mask).sum(), mask.sum()]))
        return total[0] / total[1].clamp(min=1)

    def masked_whiten(self, x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """A.masked_whiten with the mean and population variance of the whole batch of all ranks."""
        if self.world == 1:
            return A.masked_whiten(x, mask, eps=eps)
        mean = self.masked_mean(x, mask)
        return (x - mean) * torch.rsqrt(self.masked_mean((x - mean) ** 2, mask) + eps)

    def sum_grads(self, module: nn.Module) -> None:
        """Sum each gradient over ranks. Every rank divides its loss by the token count of the
        GLOBAL mini-batch, so the sum is exactly the single-process token-mean gradient (DDP's
        mean over ranks would be right only if every rank held the same number of tokens)."""
        if self.world == 1:
            return
        for p in module.parameters():
            if p.requires_grad:
                if p.grad is None:  # this rank had no rows in the mini-batch
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (a picklable object)."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def copy_weights(self, *modules) -> None:
        """Every rank takes rank 0's weights (they already agree; this makes sure)."""
        for m in modules if self.world > 1 else ():
            for t in m.state_dict().values():
                dist.broadcast(t, src=0)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self._opened:
            dist.destroy_process_group()


def _concat(parts: list):
    if isinstance(parts[0], dict):
        return {k: _concat([p[k] for p in parts]) for k in parts[0]}
    return torch.cat(parts) if torch.is_tensor(parts[0]) else [y for part in parts for y in part]


# ----------------------------------------------------------------------------------------------
# Seeds: every random choice is a function of (train.seed, step), so a resumed run replays it.
# ----------------------------------------------------------------------------------------------
def _step_rng(cfg: Config, step: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([cfg.train.seed, step % 2**32, salt])  # warm-up uses negative steps


def train_seeds(cfg: Config, step: int) -> list[int]:
    """P fresh initial states per step (RAGEN samples new states every iteration)."""
    return [int(s) for s in _step_rng(cfg, step, 0).integers(0, 2**31 - 1, cfg.train.groups)]


def val_seeds(env_name: str, n: int) -> list[int]:
    """Fixed validation states. WebShop has its own 256 instructions drawn with seed 42."""
    if env_name == "webshop":
        from ragen_lib.envs.webshop import eval_seeds

        return eval_seeds(n)
    return [2**31 + i for i in range(n)]  # outside the range train_seeds draws from


# ----------------------------------------------------------------------------------------------
# Validation, warm-up and A*-PO stage 1 (each a small function the loop calls)
# ----------------------------------------------------------------------------------------------
def _chunks(xs: list, size: int):
    for i in range(0, len(xs), size):
        yield xs[i:i + size]


def validate(policy, tok, cfg: Config, env_name: str, *, chunk: int = 64) -> dict:
    """Success and format-valid rate on the fixed validation states at val_temperature."""
    rcfg = dataclasses.replace(cfg.rollout, temperature=cfg.train.val_temperature)
    success, valid, n = 0.0, 0.0, 0
    for seeds in _chunks(val_seeds(env_name, cfg.train.val_size), chunk):
        b = collect(policy, tok, env_name, seeds, 1, rcfg, env_kwargs=_env_kwargs(cfg, env_name),
                    sample_seed=VAL_SAMPLE_SEED)
        success += float(b.success.float().sum())
        valid += b.format_valid_rate * len(b)
        n += len(b)
    return {"success": success / n, "format_valid": valid / n}


def _env_kwargs(cfg: Config, env_name: str) -> dict:
    return dict(cfg.env.kwargs) if env_name == cfg.env.name else {}


def first_turn_probe(policy, tok, cfg: Config, seeds: list[int], sample_seed: int) -> tuple[float, float]:
    """(format-valid rate, success rate) of first answers at the training temperature: the
    warm-up's yardstick. Success after a `format` warm-up shows what the model brings to RL
    (on Bandit, its arm preference) that the warm-up's random actions did not teach."""
    rcfg = dataclasses.replace(cfg.rollout, max_turns=1)
    b = collect(policy, tok, cfg.env.name, seeds, 1, rcfg, env_kwargs=dict(cfg.env.kwargs),
                sample_seed=sample_seed)
    return b.format_valid_rate, float(b.success.float().mean())


def expert_dataset(tok, cfg: Config, seeds: list[int], random_actions: bool = False):
    """Behaviour-cloning data: the env's scripted expert played through the text protocol.

    One row per turn: the chat so far (prompt_ids) and the expert's formatted answer
    (response_ids, closed with EOS). Returned as a `datasets.Dataset`. `random_actions`: the same
    well-formed answers with uniformly random valid actions instead (the `format` warm-up).
    """
    from datasets import Dataset

    rows = []
    for seed in seeds:
        ep = Episode(make(cfg.env.name, **cfg.env.kwargs), seed, cfg.rollout)
        pick = np.random.default_rng([cfg.train.seed, seed, 6])
        while not ep.done:
            shadow = copy.deepcopy(ep.env)  # plan this turn's actions without touching the episode
            acts: list[str] = []
            for _ in range(min(ep.per_turn, ep.actions_left)):
                a = shadow.random_action(pick) if random_actions else shadow.expert_action()
                acts.append(a)
                if shadow.step(a)[2]:
                    break
            answer = " || ".join(acts)
            think = (f"I will try: {', '.join(acts)}." if random_actions else
                     f"The shortest way to the goal from here is: {', '.join(acts)}.")
            text = f"<think>{think}</think><answer>{answer}</answer>" if cfg.rollout.enable_think \
                else f"<answer>{answer}</answer>"
            prompt = tok.apply_chat_template(ep.messages, tokenize=False, add_generation_prompt=True)
            rows.append({"prompt_ids": tok(prompt, add_special_tokens=False)["input_ids"],
                         "response_ids": tok(text, add_special_tokens=False)["input_ids"]
                         + [tok.eos_token_id]})
            ep.step(text)
    return Dataset.from_list(rows)


def _sft_step(policy, opt, examples: list[dict], device, micro: int) -> float:
    """One optimizer step of next-token NLL on the response tokens of `examples`."""
    opt.zero_grad(set_to_none=True)
    total = sum(len(e["response_ids"]) for e in examples)
    loss_sum = 0.0
    for part in _chunks(examples, micro):
        seqs = [e["prompt_ids"] + e["response_ids"] for e in part]
        width = max(map(len, seqs))
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        attn, mask = torch.zeros_like(ids), torch.zeros((len(seqs), width))
        for i, (e, s) in enumerate(zip(part, seqs)):
            ids[i, :len(s)], attn[i, :len(s)] = torch.tensor(s), 1
            mask[i, len(e["prompt_ids"]):len(s)] = 1
        ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
        logp, _ = _forward_logp(policy, ids, attn, mask, with_entropy=False)
        loss = -(logp * mask).sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    return loss_sum


def warmup(policy, tok, cfg: Config, device, progress: bool = False) -> dict:
    """Format warm-up before RL (the embedded model answers in format ~1 in 16 zero-shot).

    expert: behaviour cloning on the env expert's turns. format: the same with uniformly random
    valid actions (format without task knowledge). self: rejection sampling: generate, keep the
    model's own format-valid first answers (its reasoning stays its own), fine-tune; it needs the
    model to produce some valid answers (measured on Bandit: 0 of 192, so it cannot start there).
    Returns the format-valid and success rates of first answers before and after, measured on
    the same 32 held-out states.
    """
    t = cfg.train
    probe = val_seeds(cfg.env.name, 32)
    before, success_before = first_turn_probe(policy, tok, cfg, probe, sample_seed=7)
    opt = torch.optim.AdamW(policy.parameters(), lr=t.warmup_lr, weight_decay=0.0)
    policy.train()
    kept = 0
    if t.warmup in ("expert", "format"):
        data = expert_dataset(tok, cfg, [int(s) for s in _step_rng(cfg, -1, 1).integers(0, 2**31 - 1,
                                                                                        t.warmup_episodes)],
                              random_actions=t.warmup == "format")
        rows = list(data)
        order = np.random.default_rng([t.seed, 2])
        for _ in _progress(range(t.warmup_steps), progress, desc=f"warm-up ({t.warmup})"):
            pick = order.choice(len(rows), size=min(t.mini_batch_size, len(rows)), replace=False)
            _sft_step(policy, opt, [rows[i] for i in pick], device, t.micro_batch_size)
        kept = len(rows)
    elif t.warmup == "self":
        rcfg = dataclasses.replace(cfg.rollout, max_turns=1)
        for i in _progress(range(t.warmup_steps), progress, desc="warm-up (self)"):
            seeds = train_seeds(cfg, -100 - i)
            policy.eval()
            b = collect(policy, tok, cfg.env.name, seeds, max(1, t.warmup_episodes // len(seeds)), rcfg,
                        env_kwargs=dict(cfg.env.kwargs), sample_seed=1000 + i)
            policy.train()
            good = [b for b in _valid_first_turns(b, tok, cfg)]
            kept += len(good)
            if good:
                _sft_step(policy, opt, good, device, t.micro_batch_size)
    policy.eval()
    after, success_after = first_turn_probe(policy, tok, cfg, probe, sample_seed=7)
    return {"warmup/format_valid_before": before, "warmup/format_valid_after": after,
            "warmup/success_before": success_before, "warmup/success_after": success_after,
            "warmup/examples": kept}


def _valid_first_turns(b: RolloutBatch, tok, cfg: Config) -> list[dict]:
    out = []
    for i in range(len(b)):
        if not b.turn_format_valid[i][0]:
            continue
        mask = b.loss_mask[i].bool()
        first = int(mask.nonzero()[0])
        n = int(b.attention_mask[i].sum())
        ids = b.input_ids[i, :n].tolist()
        out.append({"prompt_ids": ids[:first], "response_ids": ids[first:]})
    return out


def estimate_v_star(model, tok, cfg: Config, pool: list[int], step: int) -> dict[int, float]:
    """A*-PO stage 1: V*(x) = β1·(logsumexp(r/β1) − ln n) from n samples of `model` per state.

    With apo_adaptive, half the sample budget goes uniformly and the other half to the states
    whose first rewards vary (a constant reward says V* = that reward already).
    """
    a, rcfg = cfg.algo, dataclasses.replace(cfg.rollout, temperature=1.0)
    n0 = max(2, a.apo_ref_samples // 2) if a.apo_adaptive else a.apo_ref_samples
    rewards: dict[int, list[float]] = {s: [] for s in pool}

    def sample(seeds: list[int], n: int, salt: int):
        per_call = max(1, 128 // n)
        for k, part in enumerate(_chunks(seeds, per_call)):
            b = collect(model, tok, cfg.env.name, part, n, rcfg, env_kwargs=dict(cfg.env.kwargs),
                        sample_seed=hash((cfg.train.seed, step, salt, k)) % 2**31)
            for j, s in enumerate(part):
                rewards[s] += b.rewards[j * n:(j + 1) * n].tolist()

    sample(pool, n0, 0)
    if a.apo_adaptive:
        varying = [s for s in pool if np.std(rewards[s]) > 0] or pool
        extra = len(pool) * (a.apo_ref_samples - n0) // len(varying)
        if extra:
            sample(varying, extra, 1)
    return {s: float(A.apo_v_star(torch.tensor([r]), beta1=a.apo_beta1)[0]) for s, r in rewards.items()}


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------
def train(cfg: Config, run=None, *, progress: bool = True) -> list[dict]:
    """Train per `cfg`; log to `run` (a `runs.Run`) when given and resume from its checkpoint.

    Under `accelerate launch` / `torchrun` (data parallel) only rank 0 uses `run`; the others may
    pass None. Returns the metric rows of the steps run in this call (the same on every rank).
    """
    t, a = cfg.train, cfg.algo
    if a.advantage == "apo" and a.filter_keep < 1:
        raise ValueError("A*-PO samples one answer per state; the group filter needs algo.filter_keep=1")
    torch.manual_seed(t.seed)
    device = cfg.model.device or models.default_device()
    if device.startswith("cuda") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"  # one GPU per process
    ranks = Ranks(device)
    if t.groups % ranks.world:
        raise ValueError(f"train.groups={t.groups} is not divisible by the {ranks.world} processes: each "
                         "process plays whole groups (the group statistics stay on one process)")
    policy, tok = models.load(cfg.model.name, device=device)
    critic = ValueModel(policy) if a.critic else None

    # Resume: rank 0 reads the run store (dropping the metrics logged after its newest checkpoint)
    # and names that checkpoint (runs.save_checkpoint's file) to the others, which load the same file.
    start, state, ckpt = None, None, None
    if run is not None and ranks.main:
        start, state = run.resume()
        ckpt = None if start is None else run.path / "ckpt" / f"step_{start:06d}.pt"
    start, ckpt = ranks.broadcast((start, ckpt))
    if state is None and ckpt is not None:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
    run = run if ranks.main else None  # only rank 0 writes metrics, samples and checkpoints
    warm = {}
    if state is None and t.warmup != "none":
        warm = warmup(policy, tok, cfg, device, progress=progress and ranks.main)
    # The reference is the policy RL starts from (after any warm-up); KL is logged against it.
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    if state is not None:
        policy.load_state_dict(state["policy"])
        if "reference" in state:  # a warmed-up start is not the loaded weights: restore it
            reference.load_state_dict(state["reference"])

    fused = torch.device(device).type == "cuda"
    opt = torch.optim.AdamW(policy.parameters(), lr=t.actor_lr, betas=t.betas,
                            weight_decay=t.weight_decay, fused=fused)
    critic_opt = (torch.optim.AdamW(critic.parameters(), lr=t.critic_lr, betas=t.betas,
                                    weight_decay=t.weight_decay, fused=fused) if critic else None)
    if state is not None:
        opt.load_state_dict(state["opt"])
        if critic:
            critic.load_state_dict(state["critic"])
            critic_opt.load_state_dict(state["critic_opt"])
    ranks.copy_weights(policy, reference, *([critic] if critic else []))  # they agree already: make sure
    first = 0 if start is None else start + 1
    skipped = 0 if state is None else state["skipped"]

    # A*-PO stage 1 runs offline, once, on a fixed pool of initial states (cached in the checkpoint).
    pool, v_star = [], {}
    if a.advantage == "apo":
        pool = [int(s) for s in np.random.default_rng([t.seed, 3]).integers(0, 2**31 - 1, a.apo_prompt_pool)]
        if t.groups * t.group_size > len(pool):
            raise ValueError(f"A*-PO draws train.groups×group_size = {t.groups * t.group_size} distinct "
                             f"states per step from a pool of algo.apo_prompt_pool={len(pool)}; raise it")
        t_vs = time.perf_counter()
        v_star = state["v_star"] if state is not None else estimate_v_star(reference, tok, cfg, pool, -1)
        warm["time/v_star"] = time.perf_counter() - t_vs  # stage 1's one-off cost, logged at step 0

    bar = _progress(range(first, t.steps), progress and ranks.main, initial=first, total=t.steps)
    rows, full = [], None
    for step in bar:
        t0 = time.perf_counter()
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        refresh_s = None
        if a.advantage == "apo" and a.apo_refresh_every and step and step % a.apo_refresh_every == 0:
            t_vs = time.perf_counter()
            v_star = estimate_v_star(policy, tok, cfg, pool, step)  # re-estimate with the current policy
            refresh_s = time.perf_counter() - t_vs

        # ---- rollout (reused for rollout_reuse consecutive updates: the freshness study) ----
        block = step - step % t.rollout_reuse
        if full is None or step == block:  # a resumed run re-plays its block's initial states
            if a.advantage == "apo":  # one sample per state in stage 2
                pick = _step_rng(cfg, block, 4).choice(len(pool), t.groups * t.group_size, replace=False)
                seeds, n_per = [pool[i] for i in pick], 1
            else:
                seeds, n_per = train_seeds(cfg, block), t.group_size
            policy.eval()
            # Each rank plays its contiguous share of the groups (the same initial states the
            # single-process run plays there) with its own sampling stream.
            full = collect(policy, tok, cfg.env.name, ranks.shard(seeds), n_per, cfg.rollout,
                           env_kwargs=dict(cfg.env.kwargs), sample_seed=int(_step_rng(cfg, block, 5)
                                                                             .integers(2**31)) + ranks.rank)
        t_rollout = time.perf_counter() - t0
        episodes = ranks.cat(_episode_stats(full))  # every rank's episodes, in single-process order

        # ---- uncertainty filter (StarPO-S): keep the groups whose raw rewards vary most ----
        # The top-k runs over all ranks' groups, identically on every rank; each keeps its own rows.
        m: dict[str, float] = {}
        n_groups = len(episodes["rewards"]) // (1 if a.advantage == "apo" else t.group_size)
        group_size = 1 if a.advantage == "apo" else t.group_size
        group_std = M.group_reward_std(episodes["rewards"], group_size)
        keep = A.select_groups(episodes["rewards"], group_size, a.filter_keep, mode=a.filter_mode,
                               generator=torch.Generator().manual_seed(int(_step_rng(cfg, step, 6)
                                                                           .integers(2**31))))
        kept_all = A.expand_group_mask(keep, n_groups, group_size).nonzero().flatten()  # (B_all,) global rows
        mine = len(full) * ranks.rank  # this rank's first global episode
        rows_kept = kept_all[(kept_all >= mine) & (kept_all < mine + len(full))] - mine  # (B,) local rows
        lo, B_all = int((kept_all < mine).sum()), len(kept_all)  # rows_kept are global kept rows lo…lo+B-1
        m["reward/group_std"] = float(group_std.mean())
        m["reward/group_std_kept"] = float(group_std[keep].mean())
        m["reward/frac_zero_std"] = float((group_std == 0).float().mean())
        data = {"input_ids": full.input_ids[rows_kept], "attention_mask": full.attention_mask[rows_kept],
                "loss_mask": full.loss_mask[rows_kept], "token_rewards": full.token_rewards[rows_kept],
                "rewards": full.rewards[rows_kept]}
        B = len(rows_kept)
        reasoning = torch.tensor([np.mean([M.consistency_bonus(th, ex) for th, ex in
                                           zip(full.thinks[i], full.actions[i])] or [0.0])
                                  for i in rows_kept.tolist()])

        # ---- reference / old-policy / critic forwards (no grad, once per batch) ----
        # With a single optimizer step per batch the update's own forward runs the policy that
        # the old log-probs would come from, so they are taken from it (ratio 1, same gradient;
        # TRL and verl do the same) and this no-grad policy forward is skipped. Not when the KL
        # penalty sits in the GAE rewards: those need the old log-probs before the update.
        one_step = t.ppo_epochs == 1 and t.mini_batch_size >= B_all
        old_from_update = REUSE_UPDATE_LOGP and one_step and not (
            a.advantage == "gae" and a.kl_coef and a.kl_in_reward)
        t1 = time.perf_counter()
        old_logp, ref_logp, values, ent = (torch.zeros_like(data["loss_mask"]) for _ in range(4))
        with torch.no_grad():
            for rows_ in _chunks(torch.arange(B), t.micro_batch_size):
                mb = _micro(data, rows_, device)
                w = mb["input_ids"].shape[1]
                if not old_from_update:
                    lp, e = _forward_logp(policy, mb["input_ids"], mb["attention_mask"], mb["loss_mask"],
                                          with_entropy=True)
                    old_logp[rows_, :w], ent[rows_, :w] = lp.cpu(), e.cpu()
                ref_logp[rows_, :w] = _forward_logp(reference, mb["input_ids"], mb["attention_mask"],
                                                    mb["loss_mask"], with_entropy=False)[0].cpu()
                if critic:
                    values[rows_, :w] = critic(mb["input_ids"], mb["attention_mask"]).cpu()
        mask = data["loss_mask"]
        kl = A.kl_penalty(old_logp, ref_logp, kind=a.kl_estimator) * mask  # (B, T)
        t_forward = time.perf_counter() - t1

        # ---- advantages (per group on each rank; batch-wide statistics over all ranks) ----
        reasoning_all = ranks.cat(reasoning)  # (B_all,)
        z_reason = A.zscore(reasoning_all)[lo:lo + B] if a.reasoning_lambda else torch.zeros(B)
        if a.advantage == "gae":
            tok_r = data["token_rewards"] - (a.kl_coef * kl if a.kl_in_reward else 0.0)
            adv, returns = A.gae(tok_r, values, mask, gamma=a.gamma, lam=a.lam)
            adv = ranks.masked_whiten(adv, mask) + a.reasoning_lambda * z_reason[:, None]
            adv = adv * mask
        elif a.advantage == "grpo":
            seq = A.grpo_advantages(data["rewards"], group_size, scale=a.grpo_scale)
            if a.reasoning_lambda:
                seq = A.mix_reasoning_advantage(data["rewards"], reasoning, lam=a.reasoning_lambda,
                                                group_size=group_size)
            adv, returns = seq[:, None] * mask, None
        else:  # apo: the regression target r - V*
            vs = torch.tensor([v_star[full.seeds[i]] for i in rows_kept.tolist()])
            target = data["rewards"] - vs
            target = target + a.reasoning_lambda * z_reason * ranks.cat(target).std(unbiased=False)
            adv, returns = target, None
        data.update(old_logp=old_logp, ref_logp=ref_logp, advantages=adv if adv.dim() == 2 else
                    adv[:, None].expand_as(mask).contiguous(), values=values,
                    returns=returns if returns is not None else torch.zeros_like(mask))

        # ---- mini-batch updates ----
        # Mini-batches are drawn from the global batch (same permutation on every rank); each rank
        # runs the rows it holds and the gradients are summed over ranks before clipping.
        t2 = time.perf_counter()
        policy.train()
        stats = {k: [] for k in ("loss/policy", "loss/value", "loss/apo", "policy/clip_frac_low",
                                 "policy/clip_frac_high", "policy/approx_kl", "policy/grad_norm")}
        gen = torch.Generator().manual_seed(int(_step_rng(cfg, step, 7).integers(2**31)))
        row_tokens = ranks.cat(mask.sum(1))  # (B_all,) policy tokens per global row
        for _ in range(t.ppo_epochs):
            for mb_rows in _chunks(torch.randperm(B_all, generator=gen), t.mini_batch_size):
                n_tok = float(row_tokens[mb_rows].sum().clamp(min=1))  # token-mean over the GLOBAL mini-batch
                local_rows = mb_rows[(mb_rows >= lo) & (mb_rows < lo + B)] - lo
                opt.zero_grad(set_to_none=True)
                if critic:
                    critic_opt.zero_grad(set_to_none=True)
                for rows_ in _chunks(local_rows, t.micro_batch_size):
                    mb = _micro(data, rows_, device)
                    share = float(mb["loss_mask"].sum()) / n_tok  # token-mean over the mini-batch
                    logp, e = _forward_logp(policy, mb["input_ids"], mb["attention_mask"], mb["loss_mask"],
                                            with_entropy=a.entropy_coef > 0 or old_from_update)
                    if old_from_update:
                        w = mb["input_ids"].shape[1]
                        old_logp[rows_, :w], ent[rows_, :w] = logp.detach().cpu(), e.detach().cpu()
                        mb["old_logp"] = logp.detach()
                    if a.advantage == "apo":
                        seq_lp = A.sequence_logprob(logp, mb["loss_mask"])
                        ref_seq = A.sequence_logprob(mb["ref_logp"], mb["loss_mask"])
                        pg, s = A.apo_loss(seq_lp, ref_seq, mb["rewards"], mb["rewards"] - mb["advantages"][:, 0],
                                           beta2=a.apo_beta2)
                        pg = pg * len(rows_) / len(mb_rows)  # sequence-mean over the mini-batch
                        stats["loss/apo"].append(float(pg.detach()))
                    else:
                        pg, s = A.clipped_policy_loss(logp, mb["old_logp"], mb["advantages"], mb["loss_mask"],
                                                      clip_low=a.clip_low, clip_high=a.clip_high)
                        pg = pg * share
                        for k in ("clip_frac_low", "clip_frac_high", "approx_kl"):
                            stats[f"policy/{k}"].append(float(s[k]))
                    loss = pg
                    if a.kl_coef and not a.kl_in_reward:
                        kl_now = A.kl_penalty(logp, mb["ref_logp"], kind=a.kl_estimator)
                        loss = loss + a.kl_coef * A.masked_mean(kl_now, mb["loss_mask"]) * share
                    if a.entropy_coef:
                        loss = loss - a.entropy_coef * A.masked_mean(e, mb["loss_mask"]) * share
                    loss.backward()
                    stats["loss/policy"].append(float(pg.detach()))
                    if critic:
                        v = critic(mb["input_ids"], mb["attention_mask"])
                        vl = A.clipped_value_loss(v, mb["values"], mb["returns"], mb["loss_mask"],
                                                  clip=a.value_clip) * share
                        vl.backward()
                        stats["loss/value"].append(float(vl.detach()))
                ranks.sum_grads(policy)
                grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), t.grad_clip))
                stats["policy/grad_norm"].append(grad_norm)
                if math.isfinite(grad_norm):
                    opt.step()
                else:
                    skipped += 1  # a NaN/inf gradient would poison the weights: skip and count
                if critic:
                    ranks.sum_grads(critic)
                    if math.isfinite(float(torch.nn.utils.clip_grad_norm_(critic.parameters(), t.grad_clip))):
                        critic_opt.step()
        policy.eval()
        t_update = time.perf_counter() - t2

        # ---- metrics (names: ragen_lib.metrics.STEP_KEYS) ----
        # Over all ranks' episodes (`episodes`, `ranks.*`); times and memory are this rank's.
        gen_tokens = int(episodes["gen_tokens"].sum())
        thinks = [th for ep in episodes["thinks"] for th in ep]
        think_states = [episodes["seeds"][i] for i, ep in enumerate(episodes["thinks"]) for _ in ep]
        turn_valid = [f for ep in episodes["turn_format_valid"] for f in ep]
        m.update({
            "success": float(episodes["success"].float().mean()),
            "reward/mean": float(episodes["rewards"].mean()),
            "reward/std": float(episodes["rewards"].std(unbiased=False)),
            "format_valid": sum(turn_valid) / max(len(turn_valid), 1),  # RolloutBatch.format_valid_rate
            "policy/entropy": float(ranks.masked_mean(ent, mask)),
            "policy/kl_ref": float(ranks.masked_mean(A.kl_penalty(old_logp, ref_logp, kind="k1"), mask)),
            "response/length": gen_tokens / max(int(episodes["num_turns"].sum()), 1),
            "reasoning/length": float(np.mean([len(tok(th)["input_ids"]) for th in thinks] or [0])),
            "reasoning/distinct2": M.distinct_n(thinks, 2),
            "reasoning/mi": M.reasoning_mi(thinks, think_states),
            "reasoning/consistency": float(reasoning_all.mean()) if B_all else 0.0,
            "rollout/truncated": float(episodes["truncated"].float().mean()),
            "rollout/turns": float(episodes["num_turns"].float().mean()),
            "rollout/kept": B_all,
            "skipped_steps": skipped,
            "time/rollout": t_rollout, "time/forward": t_forward, "time/update": t_update,
            "throughput/gen_tokens_per_s": gen_tokens / max(t_rollout, 1e-9),
            "throughput/train_tokens_per_s": float(ranks.sum(data["attention_mask"].sum())) * t.ppo_epochs
            / max(t_update, 1e-9),
            "memory/peak_gb": M.peak_memory_gb(device),
        })
        # Per-micro-batch values of every rank; the grad norm is taken after the sum, so it is
        # the same on every rank and not gathered.
        m.update({k: _mean(v if k == "policy/grad_norm" else ranks.cat(v)) for k, v in stats.items()})
        if step == 0:
            m.update(warm)
        if refresh_s is not None:
            m["time/v_star"] = refresh_s
        m["warmup"] = t.warmup

        # ---- validation on fixed states at temperature 0.5 (rank 0 plays them all; the rest wait) ----
        if t.val_every and (step % t.val_every == 0 or step == t.steps - 1):
            for name in (cfg.env.name, *cfg.env.eval_envs) if ranks.main else ():
                v = validate(policy, tok, cfg, name)
                suffix = "" if name == cfg.env.name else f"/{name}"
                m[f"val/success{suffix}"], m[f"val/format_valid{suffix}"] = v["success"], v["format_valid"]
            m.update(ranks.broadcast({k: v for k, v in m.items() if k.startswith("val/")}))
        m["time/step"] = time.perf_counter() - t0
        rows.append({"step": step, **m})
        if progress and ranks.main:
            bar.set_postfix(success=f"{m['success']:.2f}", fmt=f"{m['format_valid']:.2f}")

        # ---- store: metrics, samples, checkpoint ----
        if run is not None:
            run.log(step, m)
            if t.samples_every and step % t.samples_every == 0:
                run.log_samples(step, [_sample(full, i, cfg) for i in range(min(t.samples_per_step, len(full)))])
            end_of_block = (step + 1) % t.rollout_reuse == 0
            if end_of_block and ((step + 1) % t.checkpoint_every == 0 or step == t.steps - 1):
                ck = {"policy": policy.state_dict(), "opt": opt.state_dict(), "skipped": skipped}
                if critic:
                    ck.update(critic=critic.state_dict(), critic_opt=critic_opt.state_dict())
                if t.warmup != "none":
                    ck["reference"] = reference.state_dict()
                if a.advantage == "apo":
                    ck["v_star"] = v_star
                run.save_checkpoint(step, ck)
    if run is not None and not run.done:
        last = run.metrics()[-1] if run.metrics() else {}
        run.mark_done({"steps": t.steps, "final": last, "commit": runs.git_commit(),
                       "device": M.device_name(device)})
    ranks.barrier()  # the others leave once rank 0 has written its last checkpoint
    ranks.close()
    return rows


def _episode_stats(b: RolloutBatch) -> dict:
    """What the filter and the step metrics need of each episode (small: gathered across ranks)."""
    return {"rewards": b.rewards, "success": b.success, "truncated": b.truncated, "num_turns": b.num_turns,
            "gen_tokens": b.loss_mask.sum(1), "seeds": b.seeds, "thinks": b.thinks,
            "turn_format_valid": b.turn_format_valid}


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _sample(b: RolloutBatch, i: int, cfg: Config) -> dict:
    return {"env": cfg.env.name, "seed": b.seeds[i], "group": int(b.group_ids[i]),
            "reward": float(b.rewards[i]), "success": bool(b.success[i]),
            "format_valid": b.turn_format_valid[i], "thinks": b.thinks[i], "responses": b.responses[i],
            "transcript": b.transcript(i)}


def _progress(it, enabled: bool, **kw):
    if not enabled:
        return _NoBar(it)
    from tqdm.auto import tqdm

    return tqdm(it, **{"desc": "train", "unit": "step", **kw})


class _NoBar:
    def __init__(self, it):
        self.it = it

    def __iter__(self):
        return iter(self.it)

    def set_postfix(self, **_):
        pass


__all__ = ["RolloutConfig", "ValueModel", "estimate_v_star", "expert_dataset", "train", "train_seeds",
           "val_seeds", "validate", "warmup"]
