"""`make bench`: where the time goes on this machine, each figure beside its naive baseline.

    python -m ragen_lib bench [--model NAME] [--device cpu|cuda] [--out outputs/bench] [--quick]
                              [--only work,generation,...] [--before OTHER.json]

Writes <out>/<device>.md (a table) and <device>.json. Every row holds the figure, the target
from issue #5 where there is one (targets are for one H100), and its ratio to the naive way of
doing the same thing measured in the same run (>1 means faster than naive). Baselines are
re-measured every run because a ratio taken across machines or versions means nothing.

`work` rows (section `work`): one Sokoban training step (`WORK_SIZE`: 2×4 episodes, 2 turns, 64
new tokens) under `ragen_lib.work.counting()`: the tokens each phase computed (decode steps per
turn, prefill tokens, trained tokens, padding fractions), deterministic on CPU, beside its wall
times. `--before X.json` adds the figures of an earlier run (an older commit, same machine, run
just before) as a column and their ratio before/after: `make bench-before-after` does both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import traceback
import types
import warnings
from pathlib import Path

import torch

from ragen_lib import attention, models, runs, work
from ragen_lib import metrics as M

# Workload per device. cuda is the paper's scale (P=8 prompts × N=16 samples, 400 tokens a turn,
# 5 turns); cpu and quick only prove that every measurement runs.
SIZES = {
    "cuda": dict(
        groups=8,
        group_size=16,
        gen_tokens=128,
        attention_rows=128,
        attention_columns=1024,
        max_new_tokens=400,
        max_turns=5,
        micro_batch_size=16,
        update_rows=128,
        update_max_len=2048,
        repeats=3,
        trl_steps=5,
        trl_new_tokens=(100, 400),
        trl_setups=("dynamic cache", "static cache", "static cache + compile", "paged"),
        pool_runs=(1, 2, 4),
        pool_steps=6,
        head_positions=9000,  # the quick profile's 32-row micro-batch (loss mask "paper")
    ),
    "cpu": dict(
        groups=2,
        group_size=4,
        gen_tokens=32,
        attention_rows=64,
        attention_columns=1024,
        max_new_tokens=32,
        max_turns=2,
        micro_batch_size=4,
        update_rows=8,
        update_max_len=256,
        repeats=1,
        trl_steps=5,
        trl_new_tokens=(16, 32),
        trl_setups=("dynamic cache", "static cache"),
        pool_runs=(1, 2),
        pool_steps=2,
        head_positions=9000,  # as cuda: the quick profile's scale
    ),
    "quick": dict(
        groups=2,
        group_size=2,
        gen_tokens=8,
        attention_rows=8,
        attention_columns=256,
        max_new_tokens=8,
        max_turns=1,
        micro_batch_size=2,
        update_rows=4,
        update_max_len=64,
        repeats=1,
        trl_steps=1,
        trl_new_tokens=(8,),
        trl_setups=("dynamic cache",),
        pool_runs=(1, 2),
        pool_steps=1,
        head_positions=4160,  # 2,080 with gradient: two chunks of HEAD_CHUNK, so checkpointing runs
    ),
}
WORK_SIZE = dict(groups=2, group_size=4, max_new_tokens=64, max_turns=2, micro_batch_size=4)
"""The work section's step: issue #17's real-model CPU row (2×4 episodes, 2 turns, 64 new tokens)."""
SECTIONS = ("load", "generation", "prefill", "update", "train", "work", "turns", "trl", "pool", "memory")
"""In the order they run."""
TRL_HINT = "trl not installed (pip install -e .[bench])"


@dataclasses.dataclass
class Row:
    what: str
    value: float | None
    unit: str
    target: str = ""
    vs_naive: float | None = None  # speed-up over the naive baseline of the same row group
    note: str = ""
    before: float | None = None  # the same row of the `--before` run (an older commit, same machine)


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def header(device: str, model: str, quick: bool) -> dict:
    import transformers

    return {
        "device": M.device_name(device),
        "model": model,
        "sizes": "quick" if quick else ("cuda" if device.startswith("cuda") else "cpu"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": _version("trl"),
        "python": platform.python_version(),
        "torch threads": torch.get_num_threads(),  # OMP_NUM_THREADS, where set, decides it on CPU
        "commit": runs.git_commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(fn, device: str, repeats: int = 1) -> float:
    """Best wall time of `repeats` calls: the minimum is the figure least disturbed by other jobs."""
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


# ----------------------------------------------------------------------------------------------
# a. model load
# ----------------------------------------------------------------------------------------------
def measure_load(name: str, device: str) -> tuple[list[Row], object, object]:
    before = set(models.cache_dir().glob("*/config.json"))
    t0 = time.perf_counter()
    model, tok = models.load(name, device=device)
    _sync(device)
    first = time.perf_counter() - t0
    converted = set(models.cache_dir().glob("*/config.json")) - before
    del model
    t0 = time.perf_counter()
    model, tok = models.load(name, device=device)
    _sync(device)
    second = time.perf_counter() - t0
    note = (
        "converted the GGUF (cold cache)"
        if converted
        else "cache was warm; includes imports and first allocations"
    )
    return (
        [
            Row("load: first in this process", first, "s", note=note),
            Row("load: second (cached safetensors)", second, "s", "≤ 3 s", first / second),
        ],
        model,
        tok,
    )


# ----------------------------------------------------------------------------------------------
# b, c. generation and group prefix sharing
# ----------------------------------------------------------------------------------------------
def group_prompts(tok, groups: int, group_size: int) -> list[list[int]]:
    """First-turn Sokoban prompts, `group_size` identical rows per seed, as rollouts make them."""
    from ragen_lib.config import RolloutConfig
    from ragen_lib.envs import make
    from ragen_lib.rollout import Episode

    out = []
    for seed in range(groups):
        e = Episode(make("sokoban"), seed, RolloutConfig())
        text = tok.apply_chat_template(e.messages, tokenize=False, add_generation_prompt=True)
        out += [tok(text, add_special_tokens=False)["input_ids"]] * group_size
    return out


def hf_generate(model, tok, prompts, new_tokens: int) -> None:
    """The naive baseline: transformers' own sampling loop with its dynamic cache, forced to
    the same length as ours (min_new_tokens) so the token counts match."""
    from transformers import GenerationConfig

    from ragen_lib.generation import _left_pad

    ids, attn = _left_pad(prompts, tok.pad_token_id, next(model.parameters()).device)
    cfg = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with torch.no_grad(), models.autocast(model):  # the compute dtype ours runs in
        model.generate(input_ids=ids, attention_mask=attn, generation_config=cfg)


def ours_generate(
    model,
    tok,
    prompts,
    new_tokens: int,
    group_size: int = 1,
    kv_cache: str = "dynamic",
    temperature: float = 1.0,
) -> list[list[int]]:
    from ragen_lib.generation import generate

    g = torch.Generator(device=next(model.parameters()).device).manual_seed(0)
    # eos_token_id=-1 never fires: every row runs to new_tokens, like min_new_tokens above.
    return generate(
        model,
        prompts,
        max_new_tokens=new_tokens,
        temperature=temperature,
        eos_token_id=-1,
        pad_token_id=tok.pad_token_id,
        generator=g,
        group_size=group_size,
        kv_cache=kv_cache,
    )


def measure_generation(model, tok, device: str, size: dict) -> list[Row]:
    prompts = group_prompts(tok, size["groups"], size["group_size"])
    n, B, r = size["gen_tokens"], len(prompts), size["repeats"]
    shape = f"batch {B} × {n} new tokens, prompt ≈ {len(prompts[0])} tokens"
    hf_generate(model, tok, prompts[:2], 2)  # warm-up: kernels, allocator
    ours_generate(model, tok, prompts[:2], 2)
    t_hf = timed(lambda: hf_generate(model, tok, prompts, n), device, r)
    t_ours = timed(lambda: ours_generate(model, tok, prompts, n), device, r)
    t_shared = timed(lambda: ours_generate(model, tok, prompts, n, size["group_size"]), device, r)
    gs = size["group_size"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours_generate(model, tok, prompts, n, gs, kv_cache="static")  # allocation + graph capture
    t_static = timed(lambda: ours_generate(model, tok, prompts, n, gs, kv_cache="static"), device, r)
    how = "CUDA graph per step" if device.startswith("cuda") else "eager (no CUDA graphs on CPU)"
    how = "; ".join([how, *dict.fromkeys(str(w.message) for w in caught)])  # each warning once
    # The fast path must compute what the plain one does: teacher-forced log-probs of the same
    # sampled tokens by both decoders and the training forward (greedy identity is no test in bf16).
    from ragen_lib.generation import logprob_agreement

    sampled = ours_generate(model, tok, prompts, n, gs)
    agree = logprob_agreement(model, prompts, sampled, pad_token_id=tok.pad_token_id)
    worst = max(agree[k]["max_abs"] for k in ("static_vs_dynamic", "static_vs_forward", "dynamic_vs_forward"))
    tokens = B * n
    return [
        Row("generate: HF model.generate (naive)", tokens / t_hf, "tokens/s", vs_naive=1.0, note=shape),
        Row("generate: ours", tokens / t_ours, "tokens/s", vs_naive=t_hf / t_ours, note=shape),
        Row(
            "generate: ours + group prefix sharing",
            tokens / t_shared,
            "tokens/s",
            vs_naive=t_hf / t_shared,
            note=shape,
        ),
        Row(
            "generate: ours + sharing + static cache",
            tokens / t_static,
            "tokens/s",
            "≥ 30k tokens/s (H100)",
            vs_naive=t_hf / t_static,
            note=f"{shape}; {how}",
        ),
        Row(
            "generate: static vs dynamic vs forward log-probs, max |Δ|",
            worst,
            "nats",
            f"≤ {agree['tolerance'][1]:g} ({agree['dtype']})",
            note=f"{shape}; {agree['tokens']} tokens; ok={agree['ok']}",
        ),
    ]


def measure_decode_attention(model, device: str, size: dict) -> list[Row]:
    """One layer's attention in a masked decode step at the model's head counts: K/V copied to
    every query head, as transformers < 5.23 does (the GPU images' 5.17), against
    `attention.sdpa_on_kv_heads`, which the project uses there; rows of uneven lengths."""
    from transformers.integrations.sdpa_attention import repeat_kv

    cfg = model.config
    H = cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    B, L, g = size["attention_rows"], size["attention_columns"], H // Hkv
    dtype, gen = models.compute_dtype(model), torch.Generator(device).manual_seed(0)
    q = torch.randn(B, H, 1, D, device=device, dtype=dtype, generator=gen)
    k, v = (torch.randn(B, Hkv, L, D, device=device, dtype=dtype, generator=gen) for _ in range(2))
    lengths = torch.randint(L // 4, L + 1, (B,), device=device, generator=gen)
    mask = (torch.arange(L, device=device)[None] < lengths[:, None])[:, None, None]
    layer = types.SimpleNamespace(num_key_value_groups=g, is_causal=True, training=False)

    def copied():
        out = torch.nn.functional.scaled_dot_product_attention(
            q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=mask
        )
        return out.transpose(1, 2)

    def folded():
        return attention.sdpa_on_kv_heads(layer, q, k, v, mask)[0]

    def flex():  # FlexAttention, compiled, over each row's own blocks (rollout.decode_attention=flex)
        out = attention._flex_step(q.reshape(B, Hkv, g, D), k, v, mask[:, 0, 0], None)
        return out.reshape(B, H, 1, D).transpose(1, 2)

    calls = 50 if device.startswith("cuda") else 5
    per_call, compile_s = {}, None
    for name, fn in (("copied", copied), ("folded", folded), ("flex", flex)):
        t0 = time.perf_counter()
        fn()  # warm-up (flex: compiles for this shape)
        if name == "flex":
            compile_s = time.perf_counter() - t0
            if attention.flex_failed():
                break
        per_call[name] = timed(lambda f=fn: [f() for _ in range(calls)], device, size["repeats"]) / calls
    worst = float((copied().float() - folded().float()).abs().max())
    note = (
        f"one layer, {B} rows × {L} columns (rows {L // 4}–{L} long), {H} query heads over {Hkv} K/V, "
        f"{dtype}; max |Δ| {worst:.1e}; this process folds with: {attention.who_packs()}"
    )
    read = sum(attention.flex_columns(n, L) for n in lengths.tolist())
    if "flex" in per_call:
        flex_note = (
            f"{note}; flex max |Δ| {float((flex().float() - folded().float()).abs().max()):.1e}, reads "
            f"{read / (B * L):.2f} of the columns (blocks of {attention.FLEX_BLOCK}), "
            f"compiled in {compile_s:.1f} s"
        )
    else:
        flex_note = f"{note}; FlexAttention failed here: {attention.flex_failed()}"
    return [
        Row(
            "decode attention: K/V copied per query head (naive)",
            per_call["copied"] * 1e3,
            "ms",
            vs_naive=1.0,
            note=note,
        ),
        Row(
            "decode attention: on the K/V heads",
            per_call["folded"] * 1e3,
            "ms",
            vs_naive=per_call["copied"] / per_call["folded"],
            note=note,
        ),
        Row(
            "decode attention: on the K/V heads, each row's own blocks (flex)",
            per_call["flex"] * 1e3 if "flex" in per_call else None,
            "ms",
            vs_naive=per_call["copied"] / per_call["flex"] if "flex" in per_call else None,
            note=flex_note,
        ),
    ]


def measure_prefill(model, tok, device: str, size: dict) -> list[Row]:
    """Prefill alone: one sampled token, so no decode step runs."""
    prompts = group_prompts(tok, size["groups"], size["group_size"])
    r, gs = max(size["repeats"], 2), size["group_size"]
    t_rows = timed(lambda: ours_generate(model, tok, prompts, 1), device, r)
    t_shared = timed(lambda: ours_generate(model, tok, prompts, 1, gs), device, r)
    note = f"{size['groups']} prompts × {gs} samples"
    return [
        Row("prefill: per row (naive)", t_rows, "s", vs_naive=1.0, note=note),
        Row("prefill: shared per group", t_shared, "s", vs_naive=t_rows / t_shared, note=note),
    ]


# ----------------------------------------------------------------------------------------------
# e. one training step, by phase (the trainer's own metrics)
# ----------------------------------------------------------------------------------------------
def train_config(
    name: str,
    device: str,
    size: dict,
    env: str = "sokoban",
    steps: int = 2,
    algo: dict | None = None,
    one_update: bool = False,
    extra: dict | None = None,
):
    """`one_update`: the whole batch in one optimizer step (TRL's default), else the trainer's
    default mini-batch (the paper's 4 optimizer steps per batch of 128). `extra`: more settings by
    section ({"rollout": {...}, "train": {...}})."""
    from ragen_lib import config
    from ragen_lib.config import TrainConfig

    rows = size["groups"] * size["group_size"]
    extra = extra or {}
    return config.from_dict(
        {
            "model": {"name": name, "device": device},
            "env": {"name": env},
            "rollout": {
                "max_new_tokens": size["max_new_tokens"],
                "max_turns": 1 if env == "bandit" else size["max_turns"],
                **extra.get("rollout", {}),
            },
            "algo": {"name": "starpo-ppo", **(algo or {})},
            "train": {
                "steps": steps,
                "groups": size["groups"],
                "group_size": size["group_size"],
                "mini_batch_size": rows if one_update else min(TrainConfig.mini_batch_size, rows),
                "micro_batch_size": size["micro_batch_size"],
                "val_every": 0,
                "samples_every": 0,
                **extra.get("train", {}),
            },
        }
    )


def last_train_step(name: str, device: str, size: dict, env: str = "sokoban", **kw) -> dict:
    """Metrics of the second step: the first pays for kernel selection and allocator growth."""
    from ragen_lib import trainer

    return trainer.train(train_config(name, device, size, env, **kw), run=None, progress=False)[-1]


ROLLOUT_VARIANTS = {
    "turn batching, static cache": {"batching": "turn", "kv_cache": "static"},
    "continuous batching, static cache": {"batching": "continuous", "kv_cache": "static"},
    "continuous batching, static cache, flex attention": {
        "batching": "continuous",
        "kv_cache": "static",
        "decode_attention": "flex",
    },
}
"""The rollout settings the `train` section times beside the default (turn batching, dynamic
cache): which of them becomes the default is for a GPU run of this section to say."""


def measure_train_step(name: str, device: str, size: dict):
    """Yields the default setting's rows, then each of `ROLLOUT_VARIANTS`' as it finishes: at the
    paper's scale on an H200 the four took over 350 s, more than a GPU lease had left, and a
    section is otherwise saved only whole."""
    m = last_train_step(name, device, size)
    shape = (
        f"Sokoban, starpo-ppo, {size['groups']}×{size['group_size']}, ≤{size['max_turns']} turns × "
        f"{size['max_new_tokens']} tokens, {m.get('rollout/turns', float('nan')):.1f} turns done"
    )
    rows = [
        Row(f"train step: {k}", m[k], "s", note=shape)
        for k in ("time/rollout", "time/forward", "time/update")
    ]
    rows.append(Row("train step: time/step", m["time/step"], "s", "≤ 2 s (paper scale, H100)", note=shape))
    rows += [
        Row(f"train step: {k}", m[k], "tokens/s")
        for k in ("throughput/gen_tokens_per_s", "throughput/train_tokens_per_s")
    ]
    yield rows
    # The same step with each other rollout setting; vs naive = the default's time / this one's.
    for label, rollout in ROLLOUT_VARIANTS.items():
        v = last_train_step(name, device, size, extra={"rollout": rollout})
        note = ", ".join(f"rollout.{key}={value}" for key, value in rollout.items()) + f"; {shape}"
        rows = [
            Row(f"train step [{label}]: {k}", v[k], "s", vs_naive=m[k] / v[k], note=note)
            for k in ("time/rollout", "time/step")
        ]
        rows.append(
            Row(
                f"train step [{label}]: throughput/gen_tokens_per_s",
                v["throughput/gen_tokens_per_s"],
                "tokens/s",
                vs_naive=v["throughput/gen_tokens_per_s"] / m["throughput/gen_tokens_per_s"],
                note=note,
            )
        )
        yield rows


# ----------------------------------------------------------------------------------------------
# e2. the work of one step, counted (deterministic on CPU), beside its times
# ----------------------------------------------------------------------------------------------
def work_step(name: str, device: str, size: dict | None = None) -> tuple[dict, dict]:
    """(counters, metrics) of one StarPO-PPO Sokoban step of `size` (default `WORK_SIZE`)."""
    from ragen_lib import trainer

    size = {**WORK_SIZE, **(size or {})}
    cfg = train_config(name, device, size, steps=1)
    with work.counting() as c:
        m = trainer.train(cfg, run=None, progress=False)[-1]
    return c.plain(), m


def work_rows(counters: dict, m: dict, size: dict | None = None) -> list[Row]:
    """The work section's rows: counters first (deterministic), then wall times (not)."""
    size = {**WORK_SIZE, **(size or {})}
    r, f, u = (counters.get(p, {}) for p in ("rollout", "forward", "update"))
    shape = (
        f"Sokoban, starpo-ppo, {size['groups']}×{size['group_size']}, ≤{size['max_turns']} turns × "
        f"{size['max_new_tokens']} tokens, {m.get('rollout/turns', float('nan')):.1f} turns done, 1 step"
    )
    per_call = r.get("decode_steps_per_call", [])
    total = sum(
        x.get(k, 0) for x, k in ((r, "prefill_tokens"), (r, "decode_row_steps"), (f, "tokens"), (u, "tokens"))
    )
    rows = [
        Row(
            "work: decode steps (sum over turns)",
            r.get("decode_steps", 0),
            "steps",
            note=f"per turn {per_call}",
        ),
        Row(
            "work: decode row-steps computed",
            r.get("decode_row_steps", 0),
            "row-steps",
            note=f"{r.get('gen_tokens', 0)} tokens kept; padding "
            f"{work.padding(r, 'decode_row_steps', 'gen_tokens'):.2f}",
        ),
        Row(
            "work: decode attention reads",
            r.get("decode_kv_read", 0),
            "row × columns",
            note=f"{r.get('decode_kv_real', 0)} needed by the tokens kept; padding "
            f"{work.padding(r, 'decode_kv_read', 'decode_kv_real'):.2f}",
        ),
        Row(
            "work: prefill tokens computed",
            r.get("prefill_tokens", 0),
            "tokens",
            note=f"{r.get('prefill_real', 0)} real in {r.get('prefill_calls', 0)} forwards; padding "
            f"{work.padding(r, 'prefill_tokens', 'prefill_real'):.2f}",
        ),
        Row(
            "work: no-grad forward tokens (old, ref, critic)",
            f.get("tokens", 0),
            "tokens",
            note=f"{f.get('real', 0)} real, {f.get('calls', 0)} forwards; padding {work.padding(f):.2f}",
        ),
        Row(
            "work: trained tokens (update fwd+bwd)",
            u.get("tokens", 0),
            "tokens",
            note=f"{u.get('real', 0)} real, {u.get('calls', 0)} forwards; padding {work.padding(u):.2f}",
        ),
        Row(
            "work: all token positions computed",
            total,
            "tokens",
            "≥ 3× lower than before (issue #17)",
            note=shape,
        ),
    ]
    rows += [
        Row(f"work: {k} (wall)", m[k], "s", note=shape)
        for k in ("time/rollout", "time/forward", "time/update", "time/step")
    ]
    return rows


def measure_work(name: str, device: str) -> list[Row]:
    counters, m = work_step(name, device)
    return work_rows(counters, m)


# ----------------------------------------------------------------------------------------------
# e3. a multi-turn rollout with each episode's KV cache kept between turns, and without
# ----------------------------------------------------------------------------------------------
def measure_turns(name: str, device: str, quick: bool = False) -> list[Row]:
    """The work step's rollout (Sokoban, `WORK_SIZE`) played three times in this process, same
    seeds: re-prefilling the whole conversation every turn (`rollout.keep_kv=false`, the naive
    column), prefilling only the env's reply (`keep_kv`), and with continuous batching of episodes
    (`rollout.batching=continuous`). Counters are deterministic; the same tokens must come out of
    the first two (the note says whether they did); continuous batching draws other samples from
    the same distribution, so its rows give the tokens generated beside the steps. Then both
    batchings with static decode steps (`rollout.kv_cache=static`: CUDA graphs on a GPU)."""
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    size = {**WORK_SIZE, **({"max_new_tokens": 12} if quick else {})}
    model, tok = models.load(name, device=device)
    got = {}
    for keep, batching in ((False, "turn"), (True, "turn"), (True, "continuous")):
        turns = {"max_new_tokens": size["max_new_tokens"], "max_turns": size["max_turns"]}
        cfg = RolloutConfig(**turns, keep_kv=keep, batching=batching)
        t0 = time.perf_counter()
        with work.counting() as c:
            batch = collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        got[keep, batching] = (c.plain()["rollout"], time.perf_counter() - t0, batch.input_ids)
    (fresh, t_fresh, ids_fresh), (kept, t_kept, ids_kept) = got[False, "turn"], got[True, "turn"]
    cont, t_cont, _ = got[True, "continuous"]
    # Static decode steps (CUDA graphs on a GPU), both batchings, and continuous with FlexAttention
    # (rollout.decode_attention=flex: each row's own blocks), each timed after one untimed rollout
    # of the same shapes that allocates, compiles and captures.
    t_static, static = {}, {}
    for batching, kernel in (("turn", "sdpa"), ("continuous", "sdpa"), ("continuous", "flex")):
        cfg = RolloutConfig(**turns, batching=batching, kv_cache="static", decode_attention=kernel)
        # The untimed rollout captures, and is the one counted (counting reads masks: host syncs).
        with work.counting() as c:
            collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        key = batching if kernel == "sdpa" else kernel
        static[key] = c.plain()["rollout"]
        t0 = time.perf_counter()
        collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        t_static[key] = time.perf_counter() - t0
    same = "same tokens" if torch.equal(ids_fresh, ids_kept) else "DIFFERENT tokens (float rounding)"

    failed = attention.flex_failed()
    flex_failed = f"FlexAttention FAILED here ({failed}): SDPA ran; " if failed else ""

    def reads(r: dict) -> float:  # attention reads per column the kept tokens needed
        return r["decode_kv_read"] / max(r["decode_kv_real"], 1)

    shape = (
        f"Sokoban, 2×{size['group_size']}, ≤{size['max_turns']} turns × {size['max_new_tokens']} tokens; "
        f"{same}"
    )
    return [
        Row(
            "turns: prefill tokens, kept KV vs re-prefill",
            kept["prefill_tokens"],
            "tokens",
            vs_naive=fresh["prefill_tokens"] / max(kept["prefill_tokens"], 1),
            note=f"re-prefill {fresh['prefill_tokens']}; {shape}",
        ),
        Row(
            "turns: rollout wall, kept KV vs re-prefill",
            t_kept,
            "s",
            vs_naive=t_fresh / t_kept if t_kept else None,
            note=f"re-prefill {t_fresh:.1f} s; {shape}",
        ),
        Row(
            "turns: decode row-steps, continuous vs turn batching",
            cont["decode_row_steps"],
            "row-steps",
            vs_naive=kept["decode_row_steps"] / max(cont["decode_row_steps"], 1),
            note=(
                f"turn batching {kept['decode_row_steps']} row-steps in {kept['decode_steps']} steps and "
                f"{kept['prefill_calls']} prefills for {kept['gen_tokens']} tokens; continuous "
                f"{cont['decode_steps']} steps and {cont['prefill_calls']} prefills for "
                f"{cont['gen_tokens']} tokens (other samples, same distribution); {shape}"
            ),
        ),
        Row(
            "turns: decode attention reads per column needed, continuous vs turn batching",
            reads(cont),
            "×",
            vs_naive=reads(kept) / reads(cont),
            note=(
                f"row × cache columns read over `work.kv_needed`: turn batching {reads(kept):.2f}, "
                f"continuous {reads(cont):.2f}; static decode steps: turn {reads(static['turn']):.2f}, "
                f"continuous {reads(static['continuous']):.2f}; {shape}"
            ),
        ),
        Row(
            "turns: rollout wall, continuous vs turn batching",
            t_cont,
            "s",
            vs_naive=t_kept / t_cont if t_cont else None,
            note=f"turn batching (kept KV) {t_kept:.1f} s; {shape}",
        ),
        Row(
            "turns: rollout wall, continuous vs turn batching, static decode steps",
            t_static["continuous"],
            "s",
            vs_naive=t_static["turn"] / t_static["continuous"] if t_static["continuous"] else None,
            note=(
                f"turn batching {t_static['turn']:.1f} s; rollout.kv_cache=static (on a GPU a CUDA "
                f"graph per shape of decode step and, continuous, of admission), each after an "
                f"untimed rollout that captures; {shape}"
            ),
        ),
        Row(
            "turns: rollout wall, continuous static steps, flex vs sdpa decode attention",
            t_static["flex"],
            "s",
            vs_naive=t_static["continuous"] / t_static["flex"] if t_static["flex"] else None,
            note=(
                f"rollout.decode_attention=sdpa {t_static['continuous']:.1f} s; attention reads per column "
                f"needed {reads(static['continuous']):.2f} (sdpa) against {reads(static['flex']):.2f} "
                f"(flex, blocks of {attention.FLEX_BLOCK}); {flex_failed}same seeds, each after an "
                f"untimed rollout that compiles and captures; {shape}"
            ),
        ),
    ]


# ----------------------------------------------------------------------------------------------
# f. update throughput: padded batch vs length-sorted micro-batches
# ----------------------------------------------------------------------------------------------
def random_batch(
    lengths: list[int], vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random token ids (B, T) and their attention mask, one row per length."""
    T = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), T), generator=generator)
    attn = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * attn, attn


def sorted_micro_batches(attn: torch.Tensor, micro_batch_size: int) -> list[torch.Tensor]:
    """Row indices, shortest first, in chunks: rows of similar length share a micro-batch, so
    trimming each to its own longest row removes most of the padding."""
    order = attn.sum(1).argsort(stable=True)
    return list(order.split(micro_batch_size))


def _fwd_bwd(model, ids, attn, rows, width) -> None:
    """A plain HF forward (padding mask, the head on every position) and backward, in the model's
    compute dtype: what an update written without this project's forward costs."""
    from ragen_lib.algorithms import masked_mean, token_logprobs

    i, a = ids[rows, :width], attn[rows, :width]
    with models.autocast(model):
        logits = model(input_ids=i, attention_mask=a).logits
    (-masked_mean(token_logprobs(logits.float(), i), a.float())).backward()


def _ours_fwd_bwd(model, ids, attn, rows, width) -> None:
    """The trainer's forward (`models.forward_logp`): right-padded rows need no mask, the head runs
    in float32 on the trained positions only, entropies too; every real token counts as trained
    here (a multi-turn batch trains its answers only, a fraction: the worst case for ours)."""
    from ragen_lib.algorithms import masked_mean

    i, a = ids[rows, :width], attn[rows, :width]
    logp, ent = models.forward_logp(model, i, a, a, with_entropy=True, causal_only=True)
    (-masked_mean(logp + 1e-3 * ent, a.float())).backward()


def measure_update(model, device: str, size: dict) -> list[Row]:
    g = torch.Generator().manual_seed(0)
    L, B, mb = size["update_max_len"], size["update_rows"], size["micro_batch_size"]
    # Multi-turn trajectories vary in length: uniform between an eighth of the longest and all of it.
    lengths = torch.randint(L // 8, L + 1, (B,), generator=g).tolist()
    ids, attn = random_batch(lengths, model.config.vocab_size, g)
    ids, attn = ids.to(device), attn.to(device)
    tokens = int(attn.sum())
    model.train()

    def padded():
        for rows in torch.arange(B, device=device).split(mb):
            _fwd_bwd(model, ids, attn, rows, attn.shape[1])

    def packed(fwd_bwd=_fwd_bwd):
        for rows in sorted_micro_batches(attn, mb):
            fwd_bwd(model, ids, attn, rows, int(attn[rows].sum(1).max()))

    try:
        for warm in (_fwd_bwd, _ours_fwd_bwd):
            warm(model, ids, attn, torch.arange(min(2, B), device=device), 16)
        t_pad = timed(padded, device, size["repeats"])
        t_sorted = timed(packed, device, size["repeats"])
        t_ours = timed(lambda: packed(_ours_fwd_bwd), device, size["repeats"])
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    note = (
        f"{B} rows, lengths {min(lengths)}–{max(lengths)}, micro-batch {mb}, fwd+bwd (no optimizer "
        f"step), {str(models.compute_dtype(model)).removeprefix('torch.')} compute"
    )
    return [
        Row("update: padded batch (naive)", tokens / t_pad, "tokens/s", vs_naive=1.0, note=note),
        Row(
            "update: sorted micro-batches",
            tokens / t_sorted,
            "tokens/s",
            vs_naive=t_pad / t_sorted,
            note=note,
        ),
        Row(
            "update: ours (forward_logp, sorted micro-batches)",
            tokens / t_ours,
            "tokens/s",
            "≥ 250k tokens/s (H100)",
            t_pad / t_ours,
            note + "; no padding mask, float32 head on trained positions only, with entropies",
        ),
    ]


# ----------------------------------------------------------------------------------------------
# g. TRL's GRPOTrainer on the same single-turn workload, on equal terms
# ----------------------------------------------------------------------------------------------
TRL_SETUPS = {
    "dynamic cache": {},
    "static cache": {"cache_implementation": "static"},
    # TRL builds its GenerationConfig with disable_compile=True; this setup turns compile back on.
    "static cache + compile": {"cache_implementation": "static", "compile": True},
    # transformers' continuous batching (paged attention): TRL's fastest path without vLLM.
    "paged": {"use_transformers_paged": True},
}
"""TRL's generation setups without vLLM; ours is compared with the fastest that runs."""
TRL_TERMS = (
    "Bandit, one turn; stop at EOS only (ours rollout.stop_at_answer=false); GRPO advantages; no KL "
    "and no reference forward (TRL beta=0; ours algo.kl_coef=0, train.log_kl_ref=false); no entropy "
    "bonus; token mean over the batch (TRL loss_type=dapo; ours train.loss_agg=token-mean); one "
    "optimizer step per batch; temperature 1, no top-p/top-k"
)


def measure_trl(name: str, device: str, size: dict) -> list[Row]:
    """Our step against TRL's GRPOTrainer on equal terms (`TRL_TERMS`, checked by `trl_mismatches`):
    per new-token cap, `trl_steps` measured steps after one warm-up step on each side; the median
    s/step and its range, the generated tokens (recorded: the counts differ by sampling, so
    tokens/s is the fair figure) and tokens/s; TRL in each of its setups, ours against its best."""
    try:
        import trl
    except ImportError:
        return [Row("TRL GRPOTrainer step (Bandit)", None, "s", "ours ≥ 3× faster", note=TRL_HINT)]
    rows: list[Row] = []
    for n in size["trl_new_tokens"]:
        shape = f"{size['groups']}×{size['group_size']}, ≤{n} new tokens"
        ours = summarize_steps(our_grpo_steps(name, device, size, n))
        theirs = {}
        for setup in size["trl_setups"]:
            try:
                theirs[setup] = summarize_steps(trl_step_times(name, device, size, n, TRL_SETUPS[setup]))
            except UnequalTerms:
                raise  # our bug, not the host's: an unfair figure is never reported
            except Exception as e:  # noqa: BLE001 (a setup this host cannot run is reported, not fatal)
                rows.append(
                    Row(
                        f"TRL {setup}: s/step, {shape}",
                        None,
                        "s",
                        note=f"failed: {type(e).__name__}: {e}"[:300],
                    )
                )
                continue
            rows.append(
                Row(
                    f"TRL {setup}: s/step, {shape}",
                    theirs[setup]["median_s"],
                    "s",
                    note=_steps_note(theirs[setup]),
                )
            )
        rows.append(Row(f"ours: s/step, {shape}", ours["median_s"], "s", note=_steps_note(ours)))
        if not theirs:
            continue
        best = max(theirs, key=lambda k: theirs[k]["tokens_per_s"])  # token counts differ by sampling
        b = theirs[best]
        note = f"against TRL {best} (trl {trl.__version__}); {TRL_TERMS}"
        rows.append(
            Row(
                f"TRL comparison: our step, {shape}",
                ours["median_s"],
                "s",
                "ours ≥ 3× faster",
                b["median_s"] / ours["median_s"],
                note,
            )
        )
        rows.append(
            Row(
                f"TRL comparison: our tokens/s, {shape}",
                ours["tokens_per_s"],
                "tokens/s",
                "ours ≥ 3× faster",
                ours["tokens_per_s"] / b["tokens_per_s"],
                note,
            )
        )
    return rows


def summarize_steps(steps: list[tuple[float, float]]) -> dict:
    """(seconds, generated tokens) of each measured step → median s/step, its range, the mean
    generated tokens per step and tokens/s (total tokens over total seconds)."""
    if not steps:
        raise ValueError("no measured steps (the warm-up step is not one): raise trl_steps")
    secs = [s for s, _ in steps]
    tokens = sum(t for _, t in steps)
    return {"steps": len(secs), "median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs),
            "tokens_per_step": tokens / len(secs), "tokens_per_s": tokens / sum(secs)}  # fmt: skip


def _steps_note(x: dict) -> str:
    return (
        f"median of {x['steps']} steps after a warm-up one (range {x['min_s']:.3g}–{x['max_s']:.3g} s); "
        f"{x['tokens_per_step']:.0f} generated tokens/step, {x['tokens_per_s']:.0f} tokens/s"
    )


def our_grpo_config(name: str, device: str, size: dict, n: int, steps: int):
    """Our side of the comparison: StarPO-GRPO on Bandit under `TRL_TERMS`."""
    return train_config(
        name,
        device,
        {**size, "max_new_tokens": n},
        env="bandit",
        steps=steps,
        algo={"name": "starpo-grpo", "kl_coef": 0.0, "entropy_coef": 0.0},
        one_update=True,
        extra={
            "rollout": {"stop_at_answer": False},
            "train": {"log_kl_ref": False, "loss_agg": "token-mean"},
        },
    )


def our_grpo_steps(name: str, device: str, size: dict, n: int) -> list[tuple[float, float]]:
    """(seconds, generated tokens) of each of our steps after the first."""
    from ragen_lib import trainer

    cfg = our_grpo_config(name, device, size, n, size["trl_steps"] + 1)
    out = trainer.train(cfg, run=None, progress=False)[1:]
    return [(m["time/step"], m["throughput/gen_tokens_per_s"] * m["time/rollout"]) for m in out]


def trl_args(size: dict, n: int, setup: dict, output_dir: str, device: str):
    """GRPOConfig for `TRL_TERMS` (TRL's own defaults where they already match)."""
    from trl import GRPOConfig

    P, N = size["groups"], size["group_size"]
    knobs = {k: v for k, v in setup.items() if k != "compile"}
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=P * N,
        num_generations=N,
        max_completion_length=n,
        max_steps=size["trl_steps"] + 1,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="dapo",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        report_to=[],
        save_strategy="no",
        logging_steps=1,  # each step's completions/mean_length
        gradient_checkpointing=False,  # ours does not checkpoint either
        use_cpu=not device.startswith("cuda"),
        bf16=device.startswith("cuda"),
        disable_tqdm=True,
        **knobs,
    )


class UnequalTerms(ValueError):
    """Our config and TRL's differ on a term of `TRL_TERMS` (`trl_mismatches` names which)."""


def trl_mismatches(cfg, args) -> list[str]:
    """Where our config (`our_grpo_config`) and TRL's (`trl_args`) differ on `TRL_TERMS`: each a
    reason the comparison would not be fair. `measure_trl` refuses to report while any remains."""
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    rows = t.groups * t.group_size
    stop = (args.generation_kwargs or {}).get("stop_strings")
    checks = {
        "stop rule (ours stops at </answer> as well as EOS)": r.stop_at_answer or bool(stop),
        "new-token cap": r.max_new_tokens != args.max_completion_length,
        "temperature": r.temperature != args.temperature or args.top_p != 1.0 or args.top_k not in (0, None),
        "rows per step": rows != args.per_device_train_batch_size or t.group_size != args.num_generations,
        "KL term (TRL beta)": bool(a.kl_coef) or args.beta != 0.0,
        "reference forward (ours logs policy/kl_ref)": t.log_kl_ref,
        "entropy bonus (TRL has none)": a.entropy_coef != 0,
        "loss aggregation (token mean over the batch)": t.loss_agg != "token-mean"
        or args.loss_type not in ("dapo", "bnpo"),
        "optimizer steps per batch": t.mini_batch_size < rows
        or t.ppo_epochs != 1
        or args.num_iterations != 1
        or (args.steps_per_generation or 1) != 1
        or args.gradient_accumulation_steps != 1,
        "advantage (group-normalized GRPO)": a.advantage != "grpo"
        or args.scale_rewards not in ("group", True),
        "learning rate": t.actor_lr != args.learning_rate,
    }
    return [k for k, bad in checks.items() if bad]


def trl_step_times(name: str, device: str, size: dict, n: int, setup: dict) -> list[tuple[float, float]]:
    """(seconds, generated tokens) of each GRPOTrainer step after the first (generation in
    transformers, no vLLM), under `setup` (a `TRL_SETUPS` value)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from ragen_lib.config import RolloutConfig
    from ragen_lib.envs import make
    from ragen_lib.rollout import Episode

    model, tok = models.load(name, device=device)
    P, N = size["groups"], size["group_size"]
    prompts = [Episode(make("bandit"), s, RolloutConfig(max_turns=1)).messages for s in range(P)]

    def reward(completions, **_):
        return [float("</answer>" in (c[-1]["content"] if isinstance(c, list) else c)) for c in completions]

    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            _sync(device)
            times.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            _sync(device)
            times[-1] = time.perf_counter() - times[-1]

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"] * P * N)

    with tempfile.TemporaryDirectory() as tmp:
        args = trl_args(size, n, setup, tmp, device)
        unfair = trl_mismatches(our_grpo_config(name, device, size, n, 2), args)
        if unfair:
            raise UnequalTerms(f"the TRL comparison is not on equal terms: {unfair}")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            processing_class=tok,
            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 64),
            callbacks=[Clock()],
        )
        trainer.remove_callback(PrinterCallback)  # with tqdm off it prints every step's logs
        if setup.get("compile"):
            trainer.generation_config.disable_compile = False
        trainer.train()
    if len(lengths) != len(times):
        raise RuntimeError(f"TRL logged {len(lengths)} completion lengths for {len(times)} steps")
    return list(zip(times, lengths))[1:]


# ----------------------------------------------------------------------------------------------
# g2. several runs per device (profiles' `runs_per_device`), measured
# ----------------------------------------------------------------------------------------------
def measure_runs_per_device(name: str, device: str, size: dict) -> list[Row]:
    """The same max(pool_runs) training runs (Sokoban, this size, `pool_steps` steps, seeds 0…),
    trained as a grid with `runs_per_device: k` trains them, for each k of `pool_runs` (`grid_rate`:
    k = 1 in this process, more in spawned workers): runs' steps per second over all of them, model
    loads included. The k with the highest rate is what a profile's `runs_per_device` should say
    for this device; on a GPU, whether CUDA MPS was running is noted (without it the runs' kernels
    time-share the GPU instead of running side by side)."""
    n = max(size["pool_runs"])
    cfgs = [
        train_config(name, device, size, steps=size["pool_steps"], extra={"train": {"seed": seed}})
        for seed in range(n)
    ]
    shape = f"{n} runs × {size['pool_steps']} steps (Sokoban {size['groups']}×{size['group_size']})"
    mps = f"; CUDA MPS {'on' if mps_running() else 'off'}" if device.startswith("cuda") else ""
    rows, base = [], None
    for k in size["pool_runs"]:
        wall, rate = grid_rate(cfgs, k)
        base = base or rate
        note = f"{shape}, wall {wall:.1f} s{mps}"
        rows.append(
            Row(f"runs per device {k}: steps/s of all runs", rate, "steps/s", vs_naive=rate / base, note=note)
        )
    return rows


def grid_rate(cfgs: list, runs_per_device: int) -> tuple[float, float]:
    """Wall seconds, and steps per second of all runs, of `cfgs` trained through
    `workers.run_grid` (in a scratch folder) with `runs_per_device` worker slots per device, as a
    grid with that setting trains them: one slot trains in this process, two or more in that many
    spawned workers whose process starts and imports count, as a grid pays them (the comparison
    leans against pooling). Model loads count in both.

    On CPU every k gets the whole machine's cores: the k slots split them, and the one slot's
    share (all of them) is set on this process for the run, which may run under fewer (the full
    CPU bench runs under OMP_NUM_THREADS=1; k = 1 would otherwise get half of k = 2's cores)."""
    from ragen_lib import workers

    slots = workers.worker_slots(runs_per_device)
    threads = torch.get_num_threads()
    # Earlier sections, and an earlier k = 1 call, grow this process's heap, which sits beside the
    # k >= 2 workers (beside two 8.5 GB CPU workers, a 24 GiB machine ran out of memory): give it
    # back before every grid.
    _trim_host_memory()
    # A fresh host converts a GGUF on its first load (once, then cached): do it before the clock,
    # so whichever k is timed first does not pay it (on an H100, 2026-11-27, both workers of the
    # first pool converted it at once). tiny-random takes its tokenizer from the embedded model.
    for name in {c.model.name for c in cfgs}:
        models.resolve(models.EMBEDDED if name == models.TINY_RANDOM else name)
    try:
        if len(slots) == 1 and "OMP_NUM_THREADS" in slots[0]:
            torch.set_num_threads(int(slots[0]["OMP_NUM_THREADS"]))
        with tempfile.TemporaryDirectory() as root:
            t0 = time.perf_counter()
            workers.run_grid(root, f"pool-{runs_per_device}", cfgs, progress=False, slots=slots)
            wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return wall, sum(c.train.steps for c in cfgs) / wall


def _trim_host_memory() -> None:
    """Free unreachable objects and return the freed heap to the system (glibc keeps it otherwise)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def mps_running() -> bool:
    """Whether a CUDA MPS control daemon runs for this user (its pipe directory exists)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe, "control"))


# ----------------------------------------------------------------------------------------------
# h. memory, and the report
# ----------------------------------------------------------------------------------------------
def peak_memory(device: str) -> Row:
    if device.startswith("cuda"):
        return Row(
            "peak memory: torch.cuda.max_memory_allocated",
            torch.cuda.max_memory_allocated(device) / 2**30,
            "GB",
        )
    # ru_maxrss is KiB on Linux, bytes on macOS; it is the whole process, Python and tokenizer included.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**30 if sys.platform == "darwin" else 2**20)
    return Row("peak memory: process RSS (ru_maxrss)", rss, "GB")


def measure_head_memory(name: str, device: str, size: dict) -> list[Row]:
    """Peak memory of one `forward_logp` with entropies through the LM head in one pass against
    chunks of `models.HEAD_CHUNK` (the same log-probs): without gradient over `head_positions`
    positions of 32 rows (the old-policy forward), and with gradient, forward and backward, over
    16 such rows (a quick mini-batch's pack; the chunks recomputed in the backward, as on
    `models.HEAD_CHUNK_GRAD_DEVICES`, which this turns on for the device measured). Each in a fresh
    process (`_head_peak`), so none inherits another's peak or cached blocks."""
    import concurrent.futures
    import multiprocessing

    how = "CUDA max_memory_allocated" if device.startswith("cuda") else "peak RSS growth"
    _trim_host_memory()  # each child peaks at up to 12 GB (CPU) beside this process's heap
    out = []
    for grad in (False, True):
        got = {}
        for chunk in (models.HEAD_CHUNK, 0):
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
                job = pool.submit(_head_peak, name, device, size["head_positions"], chunk, grad)
                got[chunk] = job.result()
        whole, t_whole, v_whole, positions = got[0]
        chunked, t_chunked, v_chunked, _ = got[models.HEAD_CHUNK]
        diff = float((v_chunked - v_whole).abs().max())
        kind = (
            "forward_logp with entropies, forward and backward"
            if grad
            else "no-grad forward_logp with entropies"
        )
        what = f"head memory: {kind}, {positions} positions"
        compared = "loss and gradient norm" if grad else "log-prob"
        out += [
            Row(f"{what}, head in one pass", whole, "GB", note=f"{how}; {t_whole:.2f} s"),
            Row(
                f"{what}, head in {'checkpointed ' if grad else ''}chunks of {models.HEAD_CHUNK}",
                chunked,
                "GB",
                vs_naive=whole / chunked if chunked > 0 else None,
                note=f"{how}; {t_chunked:.2f} s; {compared} max |Δ| {diff:.1e}",
            ),
        ]
    return out


def _head_peak(name: str, device: str, positions: int, chunk: int, grad: bool):
    """(peak GB above the start, seconds, what to compare, loss positions) of one `forward_logp`
    with entropies over random tokens of 32 rows (16 with `grad`) × positions / 32, HEAD_CHUNK =
    `chunk` (0: one pass). Without `grad` the (K,) log-probs are compared; with it, forward and
    backward, (loss, gradient norm)."""
    model, _ = models.load(name, device=device)
    rows, T = (16 if grad else 32), positions // 32 + 1
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, T), generator=g).to(device)
    attn, mask = torch.ones_like(ids), torch.ones(rows, T, device=device)
    models.HEAD_CHUNK = chunk or rows * T
    models.HEAD_CHUNK_GRAD_DEVICES = (torch.device(device).type,)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with torch.set_grad_enabled(grad):
        logp, ent = models.forward_logp(model, ids, attn, mask, with_entropy=True, causal_only=True)
        if grad:
            loss = -logp.sum() / mask.sum() - 0.001 * ent.sum() / mask.sum()
            loss.backward()
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            value = torch.stack([loss.detach(), norm]).cpu()
        else:
            value = logp[:, 1:].reshape(-1).cpu()
    if cuda:
        torch.cuda.synchronize(device)
        peak = (torch.cuda.max_memory_allocated(device) - base) / 2**30
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 2**20
    return peak, time.perf_counter() - t, value, int(mask[:, 1:].sum())


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def markdown(head: dict, rows: list[Row]) -> str:
    lines = [f"# Benchmark: {head['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in head.items()]
    with_before = any(r.before is not None for r in rows)
    extra = " before | before / now |" if with_before else ""
    lines += [
        "",
        "| what | figure | unit | target | vs naive |" + extra + " note |",
        "| --- | ---: | --- | --- | ---: |" + (" ---: | ---: |" if with_before else "") + " --- |",
    ]
    for r in rows:
        ratio = "—" if r.vs_naive is None else f"{r.vs_naive:.2f}×"
        cells = [r.what, _fmt(r.value), r.unit, r.target or "—", ratio]
        if with_before:
            gain = r.before / r.value if r.before is not None and r.value else None
            cells += [_fmt(r.before), "—" if gain is None else f"{gain:.2f}×"]
        lines.append("| " + " | ".join(cells + [r.note]) + " |")
    return "\n".join(lines) + "\n"


def attach_before(rows: list[Row], before: dict) -> None:
    """Put the figure of the same row (by `what`) of an earlier report (its JSON) beside each row."""
    old = {r["what"]: r["value"] for r in before["rows"]}
    for r in rows:
        r.before = old.get(r.what)


def write(out: Path, head: dict, rows: list[Row]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / M.device_slug(head["device"])
    stem.with_suffix(".md").write_text(markdown(head, rows))
    stem.with_suffix(".json").write_text(
        json.dumps({"header": head, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2) + "\n"
    )
    return stem.with_suffix(".md")


class SectionsFailed(RuntimeError):
    """Sections of a bench run raised; the report holds every other section's rows."""


def run(
    model: str | None = None,
    device: str | None = None,
    out: str | Path = "outputs/bench",
    quick: bool = False,
    only: tuple[str, ...] | None = None,
    before: str | Path | None = None,
) -> Path:
    """Measure every section (or `only` those of `SECTIONS`), one printed line per measurement, and
    write the report; `before`: an earlier report's JSON whose figures go beside this run's.

    The report is written again after each section, its `status` saying which are done, so a run
    stopped partway (a GPU lease's time limit, a crash) keeps what it measured. A section that
    raises is recorded in the header's `failed` and the others still run; `SectionsFailed` is
    raised at the end, after the report is written. Nothing is written before the first row is
    measured: a run where every section fails (a hub id offline, a model that does not load on this
    device) leaves an earlier report in `out` as it was instead of replacing it with an empty one."""
    only = tuple(only or SECTIONS)
    unknown = set(only) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown bench sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    old = json.loads(Path(before).read_text()) if before is not None else None  # a bad path fails now
    name = model or models.default_model()
    device = device or models.default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
    size = SIZES["quick" if quick else ("cuda" if device.startswith("cuda") else "cpu")]
    head = header(device, name, quick)
    if old is not None:
        head["before"] = f"{old['header'].get('commit')} ({before})"
    print(f"[bench] {head['device']}, model {name}, sizes {head['sizes']}", flush=True)
    rows: list[Row] = []
    done: list[str] = []
    failed: dict[str, str] = {}
    t_all = time.perf_counter()
    todo = [s for s in SECTIONS if s in only]

    def save(status: str) -> Path | None:
        head["wall_s"] = round(time.perf_counter() - t_all, 1)
        head["status"] = status
        if failed:
            head["failed"] = "; ".join(f"{k}: {v}" for k, v in failed.items())
        if not rows:  # nothing measured yet: keep whatever report is there
            return None
        if old is not None:
            attach_before(rows, old)
        return write(Path(out), head, rows)

    def step(label, fn):
        if label not in only:
            return
        t0 = time.perf_counter()

        def keep(got):
            rows.extend(got)
            for r in got:
                print(
                    f"[bench] {r.what}: {_fmt(r.value)} {r.unit}"
                    + ("" if r.vs_naive is None else f" ({r.vs_naive:.2f}× naive)"),
                    flush=True,
                )

        try:
            got = fn()
            if isinstance(got, types.GeneratorType):  # a long section, saved part by part
                for part in got:
                    keep(part)
                    save(f"running: {label} partly done")
            else:
                keep(got)
        except Exception as e:  # one broken section must not cost the others' figures (a lease is short)
            traceback.print_exc()
            failed[label] = f"{type(e).__name__}: {e}"
            print(f"[bench] {label} FAILED: {failed[label]}", flush=True)
        print(f"[bench]   ({label} took {time.perf_counter() - t0:.1f} s)", flush=True)
        done.append(label)
        left = [s for s in todo if s not in done]
        save(f"running: done {', '.join(done)}; not yet run {', '.join(left)}" if left else "finishing")

    loaded = {}

    def load():
        got, loaded["model"], loaded["tok"] = measure_load(name, device)
        return got

    if set(only) & {"load", "generation", "prefill", "update"}:
        if "load" in only:
            step("load", load)
        else:
            loaded["model"], loaded["tok"] = models.load(name, device=device)
    m, tok = loaded.get("model"), loaded.get("tok")
    step(
        "generation",
        lambda: measure_generation(m, tok, device, size) + measure_decode_attention(m, device, size),
    )
    step("prefill", lambda: measure_prefill(m, tok, device, size))
    step("update", lambda: measure_update(m, device, size))
    m = loaded["model"] = None  # free it: the trainer loads its own policy, reference and critic
    step("train", lambda: measure_train_step(name, device, size))
    step("work", lambda: measure_work(name, device))
    step("turns", lambda: measure_turns(name, device, quick))
    step("trl", lambda: measure_trl(name, device, size))
    step("pool", lambda: measure_runs_per_device(name, device, size))

    def memory():
        # The process's peak is that of the sections before this one; alone (`--only memory`) it
        # ran nothing here and its 0 GB (an H100, 2026-11-27) said nothing. The head rows measure
        # in fresh processes of their own.
        own = [peak_memory(device)] if done else []
        return own + measure_head_memory(name, device, size)

    step("memory", memory)
    path = save("complete" if not failed else f"complete except failed sections: {', '.join(failed)}")
    if path is None:
        kept = Path(out) / f"{M.device_slug(head['device'])}.md"
        kept = f"{kept} is left as it was" if kept.exists() else "no report is written"
        raise SectionsFailed(f"bench measured nothing: {head.get('failed', '')} (tracebacks above); {kept}")
    print(f"[bench] wrote {path} and {path.with_suffix('.json')} in {head['wall_s']} s", flush=True)
    if failed:
        raise SectionsFailed(
            f"bench sections failed: {head['failed']} (tracebacks above); {path} holds the others"
        )
    return path
