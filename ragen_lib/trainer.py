"""The StarPO loop (RAGEN, Wang et al. 2025) and A*-PO (Brantley et al. 2025), top to bottom.

    rollout → uncertainty filter → no-grad forwards → advantages → mini-batch updates → metrics
            → validation → checkpoint

`train(cfg, run)` is the whole algorithm. The advantage estimator and the policy objective come
from the registries in `ragen_lib.algorithms` (`algo.advantage`, `algo.objective`); envs are
reached only through the rollout; seeds come from `ragen_lib.seeds`; the data-parallel bookkeeping
from `ragen_lib.distributed`. It imports no notebook or plotting library.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
import warnings

import numpy as np
import torch

from ragen_lib import algorithms as A
from ragen_lib import generation, models, runs, seeds
from ragen_lib import metrics as M
from ragen_lib.config import Config
from ragen_lib.distributed import Ranks, Shard, local_device
from ragen_lib.progress import tqdm
from ragen_lib.rollout import RolloutBatch, check_first_turn_fits, collect
from ragen_lib.warmup import warmup

TRAINED_FIELDS = ("input_ids", "attention_mask", "loss_mask", "token_rewards", "rewards", "reasoning_bonus")
"""The rollout batch's fields the update reads, for the rows the filter kept."""
REUSE_UPDATE_LOGP = True
"""Take the old log-probs from the update's forward when a batch gets one optimizer step (exact;
saves a policy forward). False forces the separate no-grad forward (tests compare the two)."""
VAL_CHUNK = 0
"""Validation states generated per batch; 0: all `val_size` in one batch (one decode loop per turn
instead of one per chunk, one after another). A host short of memory may set a chunk size."""


def train(cfg: Config, run=None, *, progress: bool = True, checkpoints: bool = True) -> list[dict]:
    """Train per `cfg`; log to `run` (a `runs.Run`) when given and resume from its checkpoint.
    `checkpoints=False` writes none (a GPU lease's backlog: no checkpoint comes back from the host
    and none is resumed there, and quick's are 3.8 GB each, outside `time/step`); the training is
    the same, only a crash then restarts the run from step 0.

    Under `accelerate launch` / `torchrun` (data parallel) only rank 0 uses `run`; the others may
    pass None. Returns the metric rows of the steps run in this call (the same on every rank).
    """
    t, a = cfg.train, cfg.algo
    t_setup = time.perf_counter()
    torch.manual_seed(t.seed)
    device = local_device(cfg.model.device or models.default_device())
    ranks = Ranks(device)
    policy, tok = models.load(cfg.model.name, device=device, dtype=cfg.model.dtype)
    for name in (cfg.env.name, *cfg.env.eval_envs):  # a context too small fails now, not after a warm-up
        kwargs = dict(cfg.env.kwargs) if name == cfg.env.name else {}
        check_first_turn_fits(tok, name, seeds.val_seeds(name, 8), cfg.rollout, kwargs)
    critic = models.ValueModel(policy) if a.critic else None

    # ---- resume: rank 0 reads the store and names its checkpoint; the others load the same file ----
    start, state = _resume(run, ranks)
    run = run if ranks.main else None  # only rank 0 writes metrics, samples and checkpoints
    if run is not None:
        # Recorded in its checkpoints and DONE: a grid that later finds other weights under this
        # name here trains the run again rather than reuse or resume it (`runs.other_weights`).
        run.model_fingerprint = models.fingerprint_here(cfg.model.name)
    warm = {}
    if state is None and t.warmup != "none":
        warm = warmup(policy, tok, cfg, device, progress=progress and ranks.main)
    # The reference is the policy RL starts from (after any warm-up); KL is logged against it.
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    opt, critic_opt = _optimizers(policy, critic, t, device)
    if state is not None:
        _restore(state, policy, reference, opt, critic, critic_opt)
    ranks.copy_weights(policy, reference, *([critic] if critic else []))  # they agree already: make sure
    first = 0 if start is None else start + t.online_k
    skipped = {"policy": 0, "critic": 0, "optimizer_steps": 0, **(state or {}).get("skipped", {})}

    # ---- A*-PO stage 1: V* offline, once, on a fixed pool of initial states (kept in the checkpoint) ----
    v_star = None  # the other algorithms have no stage 1
    if a.advantage == "apo":
        t_vs = time.perf_counter()
        v_star = VStar.restore(state, cfg) if state is not None else VStar.estimate(reference, tok, cfg)
        # Stage 1 is the reference's only generation: its pooled decoders (static KV caches and
        # CUDA graphs, up to generation.POOL_GB) would otherwise stay for the whole run.
        generation.release(reference)
        warm["time/v_star"] = time.perf_counter() - t_vs  # stage 1's one-off cost, logged at step 0
    # What a run costs before its first step (load, warm-up, stage 1): `backlog` adds it to the
    # steps' seconds when it decides whether a run fits what is left of a GPU lease.
    warm["time/setup"] = time.perf_counter() - t_setup

    rows = []
    group_size = 1 if v_star else t.group_size  # A*-PO: one sample per state in stage 2
    last = t.logged_steps[-1]
    bar = tqdm(t.logged_steps[t.logged_steps.index(first) if first <= last else len(t.logged_steps) :],
               desc="train", unit="step", initial=first // t.online_k, total=len(t.logged_steps),
               disable=not (progress and ranks.main))  # fmt: skip
    for step in bar:
        t0 = time.perf_counter()
        m: dict = {}
        # ---- validation, RAGEN's schedule: the policy after `step` updates (the one that plays this
        # step's rollout; at step 0 the policy before any update, RAGEN's val_before_train), every
        # val_every updates; the final policy is validated at the end of the last step instead ----
        if t.due(step, t.val_every) and step != last:
            m.update(_validation(policy, tok, cfg, ranks))
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        if v_star and a.apo_refresh_every and step and step % a.apo_refresh_every == 0:
            t_vs = time.perf_counter()
            v_star.refresh(policy, tok, cfg, step)  # with the current policy
            m["time/v_star"] = time.perf_counter() - t_vs

        # ---- rollout: P (× the updates it feeds: online_k) fresh initial states, N samples each ----
        t_r = time.perf_counter()
        states = seeds.apo_states(cfg, step, v_star.pool) if v_star else seeds.train_seeds(cfg, step)
        policy.eval()
        # Each rank plays its contiguous share of the groups (the states the single-process run
        # plays there) with its own sampling stream.
        full = collect(
            policy,
            tok,
            cfg.env.name,
            ranks.shard(states),
            group_size,
            cfg.rollout,
            env_kwargs=dict(cfg.env.kwargs),
            sample_seed=seeds.torch_seed(t.seed, step, seeds.ROLLOUT_SAMPLING) + ranks.rank,
        )
        t_rollout = time.perf_counter() - t_r
        episodes = ranks.cat(_episode_stats(full))  # every rank's episodes, in single-process order

        # ---- uncertainty filter (StarPO-S): keep the groups whose raw rewards vary most ----
        # The top-k runs over all ranks' groups, identically on every rank; each keeps its own rows.
        group_std = A.group_reward_std(episodes["rewards"], group_size)  # the filter's own statistic
        keep = A.select_groups(
            episodes["rewards"],
            group_size,
            a.filter_keep,
            mode=a.filter_mode,
            generator=torch.Generator().manual_seed(seeds.torch_seed(t.seed, step, seeds.FILTER)),
        )
        kept = A.expand_group_mask(keep, len(group_std), group_size).nonzero().flatten()  # (B_all,)
        shard = ranks.keep(kept, len(full))
        data = {k: getattr(full, k)[shard.rows] for k in TRAINED_FIELDS}
        if a.loss_mask == "paper":  # RAGEN's paper runs: every token after the system turn
            data["loss_mask"] = full.context_mask[shard.rows]
        if v_star:  # A*-PO's betas are set for rewards spanning about [0, 1]
            data["rewards"] = data["rewards"] / v_star.reward_scale
        mask = data["loss_mask"]
        # The state each row played: a group's rows share their first prompt, which packing keeps
        # together so that train.shared_prefix forwards it once per micro-batch (`_packs`).
        groups = torch.tensor([full.seeds[i] for i in shard.rows.tolist()], dtype=torch.long)

        # ---- old-policy, reference and critic forwards (no grad, once per batch) ----
        # With one optimizer step per batch the update's own forward runs the policy the old
        # log-probs would come from, so they are taken from it (ratio 1, same gradient; TRL and
        # verl do the same). Not when the KL penalty sits in the GAE rewards: they need them first.
        n_updates = t.rollout_updates(step)  # online_k, or the ones left at the end
        mb_size = -(-shard.total // (t.mini_batches * n_updates)) if t.mini_batches else t.mini_batch_size
        one_step = t.ppo_epochs == 1 and mb_size >= shard.total
        old_from_update = (
            REUSE_UPDATE_LOGP and one_step and not (a.kl_coef and a.kl_in_reward)  # (gae: config checks)
        )
        # A*-PO's objective is a log-ratio to the reference and a KL term needs it; else only the
        # policy/kl_ref diagnostic does (without it ref_logp stays 0: no term reads it).
        with_ref = bool(a.kl_coef) or a.objective in A.OBJECTIVES_WITH_REFERENCE or t.log_kl_ref
        t1 = time.perf_counter()
        fwd = _no_grad_forwards(
            data,
            policy,
            reference,
            critic,
            t.micro_batch_size,
            device,
            with_policy=not old_from_update,
            with_reference=with_ref,
            micro_tokens=t.micro_batch_tokens,
            share=t.shared_prefix,
            groups=groups,
        )
        kl = A.kl_penalty(fwd["old_logp"], fwd["ref_logp"], kind=a.kl_estimator) * mask  # (B, T)
        t_forward = time.perf_counter() - t1
        # The most the KL reward moves any return of an episode, kl_coef · Σ|KL_t|: beside the
        # rewards' spread it tells a KL study whether its KL acted at all (analysis, "kl"). Taken
        # after the forwards' clock: on several ranks it gathers, which is no forward's cost.
        kl_reward = (
            float(shard.cat(a.kl_coef * kl.abs().sum(1)).mean())
            if a.kl_coef and a.kl_in_reward
            else float("nan")
        )

        # ---- advantages (per group on each rank; batch-wide statistics over all ranks) ----
        v_star_rows = (
            torch.tensor([v_star.values[full.seeds[i]] for i in shard.rows.tolist()])
            if v_star
            else torch.zeros(len(shard))
        )
        adv, returns = A.ADVANTAGE_ESTIMATORS[a.advantage](
            A.AdvantageInputs(
                token_rewards=data["token_rewards"],
                rewards=data["rewards"],
                mask=mask,
                values=fwd["values"],
                kl=kl,
                reasoning=data["reasoning_bonus"],
                v_star=v_star_rows,
                group_size=group_size,
                batch=shard,
            ),
            a,
        )
        data.update(fwd, advantages=adv, returns=returns)
        if not with_ref:  # its zeros are no reference: an objective that reads it fails by name (below)
            del data["ref_logp"]

        # ---- mini-batch updates ----
        t2 = time.perf_counter()
        update = _update(
            data,
            shard,
            (policy, opt),
            (critic, critic_opt),
            cfg,
            step,
            device,
            skipped,
            mb_size=mb_size,
            old_from_update=old_from_update,
            groups=groups,
        )
        t_update = time.perf_counter() - t2
        skipped["optimizer_steps"] += len(update["policy/grad_norm"])  # one norm per optimizer step

        # ---- metrics (names: ragen_lib.metrics.METRICS) over all ranks' episodes; times are this rank's ----
        m.update(M.step_metrics(
            episodes, tokenizer=tok, group_std=group_std, keep=keep, update=update,
            kept_reasoning=shard.cat(data["reasoning_bonus"]),
            **_batch_metrics(data, returns, ranks, critic is not None, full, shard, with_ref), **{
                "policy/skipped_steps": skipped["policy"], "critic/skipped_steps": skipped["critic"],
                "policy/optimizer_steps": len(update["policy/grad_norm"]),
                "reward/kl_penalty": kl_reward,
                "time/rollout": t_rollout, "time/forward": t_forward, "time/update": t_update,
                "throughput/gen_tokens_per_s": int(episodes["gen_tokens"].sum()) / max(t_rollout, 1e-9),
                "throughput/train_tokens_per_s": float(ranks.sum(data["attention_mask"].sum())) * t.ppo_epochs
                / max(t_update, 1e-9),
                "memory/peak_gb": M.peak_memory_gb(device),
            }))  # fmt: skip
        if step == first and start is None:
            m.update(warm)

        if t.val_every and step == last:  # the final policy, after every update
            m.update(_validation(policy, tok, cfg, ranks))
        m["time/step"] = time.perf_counter() - t0
        rows.append({"step": step, **m})
        bar.set_postfix(
            success=f"{m['rollout/success']:.2f}",
            fmt=f"{m['rollout/format_valid']:.2f}",
            cut=f"{m['rollout/answer_cut']:.2f}",  # out of tokens: what a larger budget fixes
        )

        # ---- store: metrics, samples, checkpoint ----
        if run is not None:
            run.log(step, m)
            if t.due(step, t.samples_every):
                run.log_samples(
                    step, [_sample(full, i, cfg) for i in range(min(t.samples_per_step, len(full)))]
                )
            due = checkpoints and t.crosses(step, step + n_updates, t.checkpoint_every)
            if due and step != last:  # last: DONE follows
                run.save_checkpoint(
                    step,
                    {
                        **_checkpoint(policy, reference, opt, critic, critic_opt, skipped, v_star, cfg),
                        "processes": ranks.world,  # the sampling streams depend on it (_resume)
                    },
                )
        _stop_if_diverged(skipped, t, step, run)
    if run is not None and not run.done:
        run.mark_done(
            {
                "final": rows[-1] if rows else {},
                "commit": runs.git_commit(),
                "device": M.device_name(device),
                "processes": ranks.world,
                # the grid's runs that trained at once on this device (its time is theirs too)
                "runs_per_device": int(os.environ.get(runs.SHARING_ENV, "1")),
            },
            final_weights=_final_weights(policy, critic) if t.keep_final_weights else None,
        )
    ranks.barrier()  # the others leave once rank 0 has written its last checkpoint
    ranks.close()
    return rows


# ----------------------------------------------------------------------------------------------
# The pieces of a step
# ----------------------------------------------------------------------------------------------
def _no_grad_forwards(
    data: dict,
    policy,
    reference,
    critic,
    micro: int,
    device,
    *,
    with_policy: bool,
    with_reference: bool = True,
    micro_tokens: int = 0,
    share: bool = False,
    groups: torch.Tensor | None = None,
) -> dict:
    """Old-policy log-probs and entropies (unless the update supplies them), reference log-probs
    (0 when nothing reads them, `with_reference` false) and critic values of every row, all (B, T)
    on the CPU, 0 off the loss mask (values: everywhere)."""
    out = {k: torch.zeros_like(data["loss_mask"]) for k in ("old_logp", "ref_logp", "values", "entropy")}
    with torch.no_grad():
        # One pass over the data: each packed micro-batch goes to the device once and through the
        # policy, the reference and the critic in turn.
        rows_all = torch.arange(len(data["loss_mask"]))
        shared = (data["input_ids"], groups) if share else None
        for rows in _packs(rows_all, data["attention_mask"], micro, micro_tokens, shared):
            mb, how = _micro(data, rows, device, share)
            ids, attn, lm = mb["input_ids"], mb["attention_mask"], mb["loss_mask"]
            w = ids.shape[1]
            if with_policy:
                lp, e = models.forward_logp(policy, ids, attn, lm, with_entropy=True, **how)
                out["old_logp"][rows, :w], out["entropy"][rows, :w] = lp.cpu(), e.cpu()
            if with_reference:
                out["ref_logp"][rows, :w] = models.forward_logp(
                    reference, ids, attn, lm, with_entropy=False, **how
                )[0].cpu()
            if critic:
                out["values"][rows, :w] = critic(ids, attn, **how).cpu()
    return out


def _update(
    data: dict, shard: Shard, actor: tuple, value: tuple, cfg: Config, step: int, device, skipped: dict, *,
    mb_size: int, old_from_update: bool, groups: torch.Tensor | None = None
) -> dict[str, list[float]]:  # fmt: skip
    """`ppo_epochs` passes of mini-batch updates over the kept batch; returns the per-micro-batch
    statistics of all ranks (losses: per mini-batch; grad norm: per optimizer step).

    Mini-batches are drawn from the global kept batch (the same permutation on every rank); each
    rank runs the rows it holds and the gradients are summed over ranks before clipping. `actor` is
    (policy, optimizer), `value` (critic, optimizer) or (None, None). With
    `old_from_update` (one optimizer step) the old log-probs and entropies are written into `data`
    from the update's own forward.
    """
    t, a = cfg.train, cfg.algo
    (policy, opt), (critic, critic_opt) = actor, value
    objective = A.POLICY_OBJECTIVES[a.objective]
    # A micro-batch's loss and statistics are its weighted shares of the mini-batch's: summed over
    # the micro-batches (and ranks), so what is logged does not depend on how a mini-batch was cut.
    loss_keys = ["loss/policy", *(["loss/value"] if critic else [])]
    losses: dict[str, list] = {k: [] for k in loss_keys}  # this rank's share, per mini-batch
    norms: list[float] = []  # per optimizer step, taken after the sum over ranks
    # The objective's statistics (every rank reduces the same keys), per mini-batch: this rank's
    # summed shares and whether it returned them (a rank may hold no row of a mini-batch; PPO
    # returns no A*-PO statistic)
    stat_keys = [k for k in M.UPDATE_KEYS if not k.startswith("loss/") and k != "policy/grad_norm"]
    shares: dict[str, list] = {k: [] for k in stat_keys}
    seen: dict[str, list] = {k: [] for k in stat_keys}
    order = torch.Generator().manual_seed(seeds.torch_seed(t.seed, step, seeds.MINIBATCH_ORDER))
    row_tokens = shard.cat(data["loss_mask"].sum(1))  # (B_all,) loss tokens per global kept row
    policy.train()
    for _ in range(t.ppo_epochs):
        perm = torch.randperm(shard.total, generator=order)  # drawn either way: one random stream
        if t.minibatch_order == "in-order":  # RAGEN/verl: kept rows in group order, no shuffle
            perm = torch.arange(shard.total)
        for mb_rows in perm.split(mb_size):
            opt.zero_grad(set_to_none=True)
            if critic:
                critic_opt.zero_grad(set_to_none=True)
            part = {k: torch.zeros((), device=device) for k in loss_keys}  # this rank's share
            stat_part = {k: torch.zeros((), device=device) for k in stat_keys}
            returned: set[str] = set()
            for rows, token_share in _micro_batches(shard, mb_rows, row_tokens, data, t, groups):
                mb, how = _micro(data, rows, device, t.shared_prefix)
                logp, ent = models.forward_logp(
                    policy,
                    mb["input_ids"],
                    mb["attention_mask"],
                    mb["loss_mask"],
                    with_entropy=a.entropy_coef > 0 or old_from_update,
                    **how,
                )
                if old_from_update:
                    w = mb["input_ids"].shape[1]
                    data["old_logp"][rows, :w], data["entropy"][rows, :w] = (
                        logp.detach().cpu(),
                        ent.detach().cpu(),
                    )
                    mb["old_logp"] = logp.detach()
                try:
                    loss, s = objective(
                        logp, mb, a, token_share=token_share, seq_share=len(rows) / len(mb_rows)
                    )
                except KeyError as e:
                    if e.args != ("ref_logp",):
                        raise
                    raise KeyError(
                        f"algo.objective={a.objective!r} reads mb['ref_logp'], which the trainer computes "
                        "only for the objectives in algorithms.OBJECTIVES_WITH_REFERENCE: add it there"
                    ) from None
                part["loss/policy"] += loss.detach()  # read once, at the end of the update
                for k, v in s.items():
                    if k in stat_part:
                        stat_part[k] += v
                        returned.add(k)
                    else:  # every rank reduces the same keys, declared before the first update
                        raise KeyError(
                            f"algo.objective={a.objective!r} returned the stat {k!r}, which "
                            "metrics.UPDATE_KEYS does not list: add it there, and its meaning to "
                            "metrics.METRICS"
                        )
                if a.kl_coef and not a.kl_in_reward:  # GRPO's KL: a loss term
                    kl_now = A.kl_penalty(logp, mb["ref_logp"], kind=a.kl_estimator)
                    loss = loss + a.kl_coef * A.masked_mean(kl_now, mb["loss_mask"]) * token_share
                if a.entropy_coef:
                    loss = loss - a.entropy_coef * A.masked_mean(ent, mb["loss_mask"]) * token_share
                loss.backward()
                if critic:
                    v = critic(mb["input_ids"], mb["attention_mask"], **how)
                    vl = (
                        A.clipped_value_loss(
                            v, mb["values"], mb["returns"], mb["loss_mask"], clip=a.value_clip
                        )
                        * token_share
                    )
                    vl.backward()
                    part["loss/value"] += vl.detach()
            for k, v in part.items():
                losses[k].append(v)
            for k, v in stat_part.items():
                shares[k].append(v)
                seen[k].append(float(k in returned))
            norms.append(_step(policy, opt, t.grad_clip, shard, skipped, "policy"))
            if critic:
                _step(critic, critic_opt, t.grad_clip, shard, skipped, "critic")
    policy.eval()
    # One value per mini-batch: the losses and statistics are summed over ranks; the grad norm is
    # taken after the sum over ranks, so it is the same on every rank. A statistic no rank returned
    # for a mini-batch is left out (none at all: NaN in the step's metrics). The values stayed on
    # the device: one read each.
    out = {k: shard.ranks.sum(torch.stack(v)).tolist() for k, v in losses.items() if v}
    out["policy/grad_norm"] = norms
    for k in stat_keys:
        total = shard.ranks.sum(torch.stack(shares[k])).tolist() if shares[k] else []
        by = shard.ranks.sum(torch.tensor(seen[k], dtype=torch.float64)).tolist() if seen[k] else []
        out[k] = [x for x, n in zip(total, by) if n > 0]
    return {k: out.get(k, []) for k in M.UPDATE_KEYS}  # loss/value without a critic: NaN


def _batch_metrics(
    data: dict,
    returns: torch.Tensor,
    ranks: Ranks,
    has_critic: bool,
    full: RolloutBatch,
    shard: Shard,
    with_ref: bool = True,
) -> dict:
    """Entropy, KL to the reference and the critic's explained variance over every rank's loss tokens
    (entropy also over the generated tokens alone);
    the sampler–update log-prob gap over the kept rows' generated tokens (read from the rollout batch
    here, not carried in `data`, which every micro-batch copies to the device)."""
    mask, sampled = data["loss_mask"], full.loss_mask[shard.rows]  # the loss's tokens; the model's own
    kl = A.kl_penalty(data["old_logp"], data["ref_logp"], kind="k1") if with_ref else None
    gap = (full.sample_logprobs[shard.rows] - data["old_logp"]).abs()
    return {
        "rollout/logprob_gap": float(ranks.masked_mean(gap, sampled)),
        "policy/entropy": float(ranks.masked_mean(data["entropy"], mask)),
        # the paper mask's loss covers the prompt and observations too: the sampled tokens' alone
        "policy/entropy_response": float(ranks.masked_mean(data["entropy"], sampled)),
        "policy/kl_ref": float(ranks.masked_mean(kl, mask)) if with_ref else float("nan"),
        "critic/explained_var": M.explained_variance(data["values"], returns, mask, ranks.masked_mean)
        if has_critic
        else float("nan"),
    }


def _optimizers(policy, critic, t, device: str):
    """AdamW for the policy and (when there is one) the critic, fused kernels on CUDA."""
    fused = torch.device(device).type == "cuda"

    def adamw(module, lr):
        return torch.optim.AdamW(
            module.parameters(), lr=lr, betas=t.betas, weight_decay=t.weight_decay, fused=fused
        )

    return adamw(policy, t.actor_lr), (adamw(critic, t.critic_lr) if critic else None)


def _step(module, opt, grad_clip: float, shard: Shard, skipped: dict, name: str) -> float:
    """Sum gradients over ranks, clip, and step, unless the norm is not finite: a NaN/inf gradient
    would poison the weights, so that step is skipped and counted. Returns the norm before clipping."""
    shard.ranks.sum_grads(module)
    norm = float(torch.nn.utils.clip_grad_norm_(module.parameters(), grad_clip))
    if math.isfinite(norm):
        opt.step()
    else:
        skipped[name] += 1
    return norm


def _micro_batches(shard: Shard, mb_rows: torch.Tensor, row_tokens: torch.Tensor, data: dict, t, groups=None):
    """This rank's micro-batches of a mini-batch (`mb_rows`, global kept rows; `row_tokens`, every
    global row's loss tokens), as indices into this rank's rows, and each one's weight in the
    mini-batch loss, which multiplies its own token mean.

    token-mean: packed by length (`_packs`); weight = its loss tokens / the global mini-batch's, so
    every token weighs the same. micro-batch-mean (RAGEN/verl): the mini-batch cut into
    `micro_batch_size` rows at a time in the given order, as one process cuts it, each weighing
    1 / their number; a rank takes its rows of each (none: it skips it), weighted by its share of
    that micro-batch's loss tokens, so the ranks' parts sum to one process's loss. (Cut per rank,
    a rank holding none of a mini-batch forwarded an empty micro-batch and crashed, and a rank's
    share not a multiple of the micro-batch made the weights sum past 1.)"""
    if t.loss_agg == "micro-batch-mean":
        cut = mb_rows.split(t.micro_batch_size)
        out = []
        for micro in cut:
            rows = shard.local(micro)
            if len(rows):
                share = float(data["loss_mask"][rows].sum()) / float(row_tokens[micro].sum().clamp(min=1))
                out.append((rows, share / len(cut)))  # CPU: no sync
        return out
    n_tok = float(row_tokens[mb_rows].sum().clamp(min=1))  # token-mean over the GLOBAL mini-batch
    shared = (data["input_ids"], groups) if t.shared_prefix else None
    packs = _packs(
        shard.local(mb_rows), data["attention_mask"], t.micro_batch_size, t.micro_batch_tokens, shared
    )
    return [(rows, float(data["loss_mask"][rows].sum()) / n_tok) for rows in packs]  # CPU: no sync


def _packs(
    rows: torch.Tensor, attn: torch.Tensor, size: int, tokens: int, shared: tuple | None = None
) -> list[torch.Tensor]:
    """`rows` (of the CPU mask `attn`) in micro-batches packed to a token budget: sorted by length,
    each takes rows while rows × its longest row ≤ `tokens` (0: `size` × the longest row of
    `attn`, the most an unsorted micro-batch of `size` rows could cost). Each micro-batch keeps its
    rows in their given order. Any grouping gives the same gradient (each micro-batch is weighted
    by its share of the mini-batch); similar lengths together compute far less padding.

    `shared` = (ids, groups or None) when train.shared_prefix forwards a micro-batch's common prefix once
    (`models.hidden_states`): rows are sorted by group (the state they played), then length, and a
    micro-batch's cost is the positions it computes, prefix + rows × (longest − prefix). A row
    joins the micro-batch when that stays within the budget and costs no more than forwarding the
    row on its own: a group's rows share its whole first prompt (one forward of it, not N), and
    rows of different groups join only where their padding costs less than their second prompt."""
    if not len(rows):
        return []  # a rank may hold no row of a mini-batch
    lengths = attn.sum(1)
    budget = tokens or size * int(lengths.max())
    if shared is None:
        order = lengths[rows].argsort(stable=True)  # positions in `rows`, shortest first
        packs, start = [], 0
        for i in range(1, len(order) + 1):
            if i == len(order) or (i + 1 - start) * int(lengths[rows[order[i]]]) > budget:
                packs.append(rows[order[start:i].sort().values])
                start = i
        return packs
    ids, groups = shared
    groups = torch.zeros(len(attn), dtype=torch.long) if groups is None else groups
    key = groups[rows] * (attn.shape[1] + 1) + lengths[rows]  # by group, then length
    packs, pack, prefix, longest = [], [], 0, 0
    for i in key.argsort(stable=True).tolist():
        r, n = int(rows[i]), int(lengths[rows[i]])
        if pack:
            first = int(rows[pack[0]])
            m = min(n, longest)
            same = int((ids[r, :m] == ids[first, :m]).long().cumprod(0).sum())
            p = min(prefix, same, n - 1)  # `models.common_prefix` of the pack with this row
            w = max(longest, n)
            cost = p + (len(pack) + 1) * (w - p)
            if cost <= min(budget, prefix + len(pack) * (longest - prefix) + n):
                pack, prefix, longest = pack + [i], p, w
                continue
            packs.append(rows[sorted(pack)])
        pack, prefix, longest = [i], n - 1, n
    packs.append(rows[sorted(pack)])
    return packs


def _micro(batch: dict, rows: torch.Tensor, device, share: bool = False) -> tuple[dict, dict]:
    """Rows of a batch, trimmed to their longest sequence (right padding is never computed), on
    `device`; and how to forward them: `causal_only` when all are right-padded (no attention mask
    needed), `prefix` the tokens they all share (forwarded once, `models.hidden_states`) when
    `share` (train.shared_prefix). Both read from the CPU copy: no device sync."""
    attn = batch["attention_mask"][rows]
    width = int(attn.sum(1).max())
    attn = attn[:, :width]
    causal = models.right_padded(attn)
    prefix = models.common_prefix(batch["input_ids"][rows, :width], attn) if share and causal else 0
    mb = {k: (v[rows][:, :width] if v.dim() == 2 else v[rows]).to(device) for k, v in batch.items()}
    return mb, {"causal_only": causal, "prefix": prefix}


def _validation(policy, tok, cfg: Config, ranks) -> dict:
    """`validate` on the training env and each of `env.eval_envs` (`val/<quantity>/<env>`): rank 0
    plays them all, the rest wait and receive its numbers."""
    m = {}
    for name in (cfg.env.name, *cfg.env.eval_envs) if ranks.main else ():
        suffix = "" if name == cfg.env.name else f"/{name}"
        m.update({f"{k}{suffix}": v for k, v in validate(policy, tok, cfg, name).items()})
    return ranks.broadcast(m)


def validate(policy, tok, cfg: Config, env_name: str) -> dict:
    """`val/success` and `val/format_valid` on the env's fixed validation states at val_temperature."""
    rcfg = dataclasses.replace(cfg.rollout, temperature=cfg.train.val_temperature)
    states = seeds.val_seeds(env_name, cfg.train.val_size)
    kwargs = dict(cfg.env.kwargs) if env_name == cfg.env.name else {}
    success, valid = 0.0, 0.0
    chunk = VAL_CHUNK or len(states)
    for i in range(0, len(states), chunk):
        b = collect(
            policy,
            tok,
            env_name,
            states[i : i + chunk],
            1,
            rcfg,
            env_kwargs=kwargs,
            sample_seed=seeds.VALIDATION_SAMPLING,
        )
        success += float(b.success.float().sum())
        valid += b.format_valid_rate * len(b)
    return {"val/success": success / len(states), "val/format_valid": valid / len(states)}


@dataclasses.dataclass
class VStar:
    """A*-PO's stage 1: the fixed pool of initial states stage 2 draws from, V* on each and the reward
    scale stage 1 chose (`estimate_v_star`); kept in the checkpoint under `v_star`, `reward_scale`."""

    pool: list[int]
    values: dict[int, float]
    reward_scale: float

    @classmethod
    def estimate(cls, reference, tok, cfg: Config) -> VStar:
        """Stage 1 from the reference policy, before any update."""
        pool = seeds.apo_pool(cfg)
        return cls(pool, *estimate_v_star(reference, tok, cfg, pool, -1))

    @classmethod
    def restore(cls, state: dict, cfg: Config) -> VStar:
        """What a checkpoint kept; the pool is a function of the config, so it is drawn again."""
        return cls(seeds.apo_pool(cfg), state["v_star"], state["reward_scale"])

    def refresh(self, policy, tok, cfg: Config, step: int) -> None:
        """`algo.apo_refresh_every`: V* again from `policy`, under stage 1's reward scale."""
        self.values, _ = estimate_v_star(policy, tok, cfg, self.pool, step, self.reward_scale)


def estimate_v_star(model, tok, cfg: Config, pool: list[int], step: int, reward_scale: float | None = None):
    """A*-PO stage 1: V*(x) = β1·(logsumexp(r/β1) − ln n) from n samples of `model` per state.

    Returns (V* per state, reward scale). With `algo.apo_reward_scale: range` the rewards are first
    divided by their spread over all of stage 1's samples (max − min; 1 when they do not vary):
    A*-PO's β1 = 0.5 and β2 = 1e-3 were set for rewards in {0, 1}, while a Sokoban return spans about
    12. `reward_scale` given (a V* refresh) reuses stage 1's. With apo_adaptive, half the sample
    budget goes uniformly and the other half to the states whose first rewards vary (a constant
    reward says V* = that reward already).
    """
    # V* is an expectation under π_ref itself, the distribution stage 2's log-ratio scores: T = 1,
    # whatever temperature the training rollouts sample at.
    a, rcfg = cfg.algo, dataclasses.replace(cfg.rollout, temperature=1.0)
    n0 = max(2, a.apo_ref_samples // 2) if a.apo_adaptive else a.apo_ref_samples
    rewards: dict[int, list[float]] = {s: [] for s in pool}

    def sample(states: list[int], n: int, salt: int):
        per_call = max(1, 128 // n)
        for k, i in enumerate(range(0, len(states), per_call)):
            part = states[i : i + per_call]
            seed = seeds.torch_seed(cfg.train.seed, step, seeds.V_STAR_SAMPLING) + 1000 * salt + k
            b = collect(
                model, tok, cfg.env.name, part, n, rcfg, env_kwargs=dict(cfg.env.kwargs), sample_seed=seed
            )
            for j, s in enumerate(part):
                rewards[s] += b.rewards[j * n : (j + 1) * n].tolist()

    sample(pool, n0, 0)
    if a.apo_adaptive:
        varying = [s for s in pool if np.std(rewards[s]) > 0] or pool
        extra = len(pool) * (a.apo_ref_samples - n0) // len(varying)
        if extra:
            sample(varying, extra, 1)
    if reward_scale is None:
        every = [r for rs in rewards.values() for r in rs]
        spread = max(every) - min(every)
        reward_scale = spread if a.apo_reward_scale == "range" and spread > 0 else 1.0
    v_star = {
        s: float(A.apo_v_star(torch.tensor([r]) / reward_scale, beta1=a.apo_beta1)[0])
        for s, r in rewards.items()
    }
    return v_star, reward_scale


# ----------------------------------------------------------------------------------------------
# Resume and checkpoints
# ----------------------------------------------------------------------------------------------
def _resume(run, ranks: Ranks):
    """(step, state) of the checkpoint to continue from, or (None, None). Rank 0 asks the run store,
    which checks the checkpoint (config hash, step, plain tensors only) and makes the metrics agree
    with it, and names the checkpoint file to the others, which load the same file."""
    start, state, ckpt = None, None, None
    if run is not None and ranks.main:
        start, state = run.resume()
        ckpt = None if start is None else run.checkpoint_file()
    start, ckpt = ranks.broadcast((start, ckpt))
    if state is None and ckpt is not None:
        state = runs.read_state(ckpt)  # weights_only: a planted file cannot run code
    written_by = None if state is None else state.get("processes")  # older checkpoints: unrecorded
    if ranks.main and written_by is not None and written_by != ranks.world:
        # Each process samples its share of the groups with sample_seed + rank, so the split is part
        # of the random stream: the same distribution, not the same numbers.
        warnings.warn(
            f"{run.path}: its checkpoint was written by {written_by} process(es) and resumes with "
            f"{ranks.world}: after step {start} its rollouts are sampled from other streams than an "
            f"uninterrupted {written_by}-process run's (the same distribution, not the same numbers). "
            f"Resume with {written_by} to continue it exactly",
            runs.RunStoreWarning,
            stacklevel=2,
        )
    return start, state


def _stop_if_diverged(skipped: dict, t, step: int, run) -> None:
    """A run that skips most of its optimizer steps (non-finite gradients) learns nothing: stop it
    with an error rather than mark it finished. Its metrics up to this step and its last checkpoint
    are kept, so the evidence stays and the store stays resumable."""
    total = skipped["optimizer_steps"]
    worst = max(skipped["policy"], skipped["critic"])
    if worst > max(1, t.max_skipped_frac * total):
        where = f" ({run.path})" if run is not None else ""
        raise TrainingDiverged(
            f"{worst} of {total} optimizer steps so far skipped a non-finite gradient (policy "
            f"{skipped['policy']}, critic {skipped['critic']}) by step {step}{where}, more than "
            f"train.max_skipped_frac={t.max_skipped_frac}: the run diverged and is not marked finished. "
            "Its metrics and last checkpoint are kept. Train a changed config (e.g. a lower "
            "train.actor_lr or algo.kl_coef > 0), or set train.max_skipped_frac=1 to train through "
            "(either is a new run in its own folder: both are part of the run's hash)."
        )


class TrainingDiverged(RuntimeError):
    """Too many optimizer steps skipped for a non-finite gradient (`train.max_skipped_frac`)."""


def _checkpoint(
    policy, reference, opt, critic, critic_opt, skipped: dict, v_star: VStar | None, cfg: Config
) -> dict:
    ck = {"policy": policy.state_dict(), "opt": opt.state_dict(), "skipped": dict(skipped)}
    if critic:
        ck.update(critic=critic.state_dict(), critic_opt=critic_opt.state_dict())
    if cfg.train.warmup != "none":
        # A warmed-up start is not the loaded weights. Without a warm-up the reference is rebuilt by
        # loading the model, so it is not stored (docs/RELIABILITY.md: the sizes and the choice).
        ck["reference"] = reference.state_dict()
    if v_star:
        ck.update(v_star=v_star.values, reward_scale=v_star.reward_scale)
    return ck


def _final_weights(policy, critic) -> dict:
    """What a finished run keeps with train.keep_final_weights: weights, no optimizer states."""
    return {"policy": policy.state_dict(), **({"critic": critic.state_dict()} if critic else {})}


def _restore(state: dict, policy, reference, opt, critic, critic_opt) -> None:
    policy.load_state_dict(state["policy"])
    if "reference" in state:
        reference.load_state_dict(state["reference"])
    opt.load_state_dict(state["opt"])
    if critic:
        critic.load_state_dict(state["critic"])
        critic_opt.load_state_dict(state["critic_opt"])


def _episode_stats(b: RolloutBatch) -> dict:
    """What the filter and the step metrics need of each episode (small: gathered across ranks)."""
    written, dropped = b.written()  # the matched turns': an unmatched one wrote no answer to count
    return {
        "rewards": b.rewards,
        "success": b.success,
        "truncated": b.truncated,
        "num_turns": b.num_turns,
        "gen_tokens": b.loss_mask.sum(1),
        "seeds": b.seeds,
        "thinks": b.reasoning(),  # the turns whose tags matched: the reasoning there is to measure
        "turn_format_valid": b.turn_format_valid,
        "turn_cut": b.turn_cut,
        "turn_written": written,
        "turn_dropped": dropped,
        "default_per_turn": b.default_per_turn,
    }


def _sample(b: RolloutBatch, i: int, cfg: Config) -> dict:
    return {
        "env": cfg.env.name,
        "seed": b.seeds[i],
        "group": int(b.group_ids[i]),
        "reward": float(b.rewards[i]),
        "success": bool(b.success[i]),
        "format_valid": b.turn_format_valid[i],
        "invalid_reasons": b.turn_invalid_reasons[i],
        "thinks": b.thinks[i],
        "responses": b.responses[i],
        "transcript": b.transcript(i),
    }
