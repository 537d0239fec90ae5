"""Sections `load`, `generation` and `prefill`: model load, decoding against HF `model.generate`,
group prefix sharing and the static cache, decode attention on the K/V heads, prefill."""

from __future__ import annotations

import time
import types
import warnings

import torch

from ragen_lib import attention, models
from ragen_lib.bench.common import Row, sync, timed


def measure_load(name: str, device: str) -> tuple[list[Row], object, object]:
    before = set(models.cache_dir().glob("*/config.json"))
    t0 = time.perf_counter()
    model, tok = models.load(name, device=device)
    sync(device)
    first = time.perf_counter() - t0
    converted = set(models.cache_dir().glob("*/config.json")) - before
    del model
    t0 = time.perf_counter()
    model, tok = models.load(name, device=device)
    sync(device)
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
