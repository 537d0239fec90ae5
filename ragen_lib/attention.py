"""Decode attention on the K/V heads as stored, whatever the transformers version.

SmolLM2-135M has 9 query heads over 3 K/V heads (Qwen2.5-0.5B: 14 over 2). A one-token decode
step with an attention mask (every decode step of both rollout paths: rows of different lengths
share the batch) cannot use SDPA's `enable_gqa` on CUDA, whose masked kernels then fall back to
the math one; transformers before 5.23 therefore copies K/V to every query head first
(`repeat_kv`): at batch 128 over 1,000 columns that is 3x the attention's reads plus a write of
the copy, on every layer of every decode step, and decode attention is what a decode step's time
goes to at that size (see `engine.columns_bucket`). transformers 5.23 instead folds each K/V
head's query heads into the query length (`pack_gqa`), which this module does for earlier
versions: the GPU images have 5.17, and the offline bundle never replaces a package the host has.

`install()` (called by `models.load`) registers `sdpa_on_kv_heads` as the "sdpa" attention of
this process when the installed transformers does not pack; everything else (prefills, the
updates' causal forwards, softcap or position bias) goes to transformers' own function.
"""

from __future__ import annotations

import importlib

import torch

# transformers' own "sdpa" function, which `sdpa_on_kv_heads` falls back to: looked up once (by
# `install`) and read as a global, which torch.compile traces (TRL's compiled decode steps, in
# `bench --only trl`), where an import inside the function breaks its graph on torch 2.11.
_LIBRARY_SDPA = None


def library_packs() -> bool:
    """Whether the installed transformers runs a masked one-token SDPA step on the K/V heads."""
    return hasattr(importlib.import_module("transformers.integrations.sdpa_attention"), "pack_gqa")


def sdpa_on_kv_heads(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention function, except that a one-token step with a mask shared by
    the heads runs on the K/V heads as stored: the g query heads of each K/V head become g
    queries of it, (B, Hkv·g, 1, D) → (B, Hkv, g, D), under the same (B, 1, 1, L) mask. The same
    dot products and softmax as the copy's, without the copy."""
    g = getattr(module, "num_key_value_groups", 1)
    plain = (
        query.shape[2] != 1
        or g == 1
        or attention_mask is None
        or attention_mask.shape[1] != 1  # a mask per head would have to be folded as well
        or kwargs.get("dropout", 0.0) > 0
        or any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "s_aux"))
    )
    if plain:
        return _library_sdpa()(module, query, key, value, attention_mask, **kwargs)
    B, H, _, D = query.shape
    out = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(B, H // g, g, D),
        key,
        value,
        attn_mask=attention_mask[..., : key.shape[-2]],
        scale=kwargs.get("scaling"),
    )
    return out.reshape(B, H, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _library_sdpa():
    global _LIBRARY_SDPA
    if _LIBRARY_SDPA is None:
        module = importlib.import_module("transformers.integrations.sdpa_attention")
        _LIBRARY_SDPA = module.sdpa_attention_forward
    return _LIBRARY_SDPA


def install(force: bool = False) -> str:
    """Make masked one-token SDPA steps run on the K/V heads in this process; returns who does it
    (`who_packs`): "transformers" (>= 5.23: nothing to do) or "ragen_lib" (`sdpa_on_kv_heads`
    registered as "sdpa"). `force` registers it on any version (the tests, on a recent one)."""
    from transformers.modeling_utils import AttentionInterface

    if force or not library_packs():
        _library_sdpa()
        AttentionInterface.register("sdpa", sdpa_on_kv_heads)
    return who_packs()


def uninstall() -> None:
    """Give "sdpa" back to transformers' own function (tests that forced `install`)."""
    from transformers.modeling_utils import AttentionInterface

    module = importlib.import_module("transformers.integrations.sdpa_attention")
    AttentionInterface.register("sdpa", module.sdpa_attention_forward)  # not `_LIBRARY_SDPA`: tests patch it


def who_packs() -> str | None:
    """Who runs masked one-token SDPA steps on the K/V heads now: "transformers", "ragen_lib", or
    None (K/V copied to every query head: `install` was not called)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_on_kv_heads:
        return "ragen_lib"
    return "transformers" if library_packs() else None
