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

Either way SDPA reads every column of the cache it is given, masked or not: a row at column 300
of a 1,024-column bucket pays for 1,024. Inside `decode_kernel("flex")` (`rollout.decode_attention:
flex`, static caches only) the same folded step runs FlexAttention instead, with a block mask
built on the device from the mask's last visible column per row: each row reads its own blocks
of `FLEX_BLOCK` columns and skips the rest (`columns_read` counts it for `work`). FlexAttention
is compiled per shape (the static caches' buckets); where it fails to compile, decode steps warn
and go back to SDPA (`flex_failed`).
"""

from __future__ import annotations

import contextlib
import importlib
import warnings

import torch

DECODE_KERNELS = ("sdpa", "flex")
"""Kernels of a masked decode step (rollout.decode_attention): "sdpa" reads every cache column it
is given, "flex" (FlexAttention, compiled) only each row's blocks up to its last visible column."""

FLEX_BLOCK = 128
"""Columns per block of the flex block mask: a row reads its visible columns rounded up to this.
FlexAttention's default; the static caches' column buckets are multiples of 256."""

FLEX_SHAPES = 64
"""Shapes (rows × columns buckets) torch.compile may compile FlexAttention for before it gives
up and runs it unfused (its default limit is 8; the static paths meet up to about 48)."""

FLEX_COMPILED = True
"""Run FlexAttention compiled (its block sparsity and speed); False runs it unfused, as torch
does without compile, which reads every column (the tests: the same numbers without a compile
per shape)."""

_KERNEL = "sdpa"
_FLEX = None  # the compiled `_flex_on_kv_heads`, made on first use
_FLEX_FAILED: str | None = None  # why FlexAttention failed in this process (then SDPA runs)

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
    dot products and softmax as the copy's, without the copy. Inside `decode_kernel("flex")` that
    step runs FlexAttention over each row's own blocks (any g)."""
    g = getattr(module, "num_key_value_groups", 1)
    decode = (
        query.shape[2] == 1
        and attention_mask is not None
        and attention_mask.shape[1] == 1  # a mask per head would have to be folded as well
        and kwargs.get("dropout", 0.0) == 0
        and all(kwargs.get(k) is None for k in ("softcap", "position_bias", "s_aux"))
    )
    B, H, _, D = query.shape
    if decode and _KERNEL == "flex" and _FLEX_FAILED is None and attention_mask.dtype == torch.bool:
        visible = attention_mask[:, 0, 0, : key.shape[-2]]
        out = _flex_step(query.reshape(B, H // g, g, D), key, value, visible, kwargs.get("scaling"))
        if out is not None:
            return out.reshape(B, H, 1, value.shape[-1]).transpose(1, 2).contiguous(), None
    if not decode or g == 1:
        return _library_sdpa()(module, query, key, value, attention_mask, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(B, H // g, g, D),
        key,
        value,
        attn_mask=attention_mask[..., : key.shape[-2]],
        scale=kwargs.get("scaling"),
    )
    return out.reshape(B, H, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _flex_on_kv_heads(query, key, value, visible, scale=None):
    """Attention of the (B, Hkv, g, D) folded queries over the (B, Hkv, L, D) cache where
    `visible` (B, L) is True, reading each row's blocks of FLEX_BLOCK columns up to its last
    visible column only: the block mask is built here from device tensors (no host sync, so a
    CUDA graph of the decode step replays it with the step's own lengths). Columns inside those
    blocks that are not visible (left padding, a pad a row was fed) are masked element-wise."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    B, L = visible.shape
    last = torch.where(visible, torch.arange(L, device=visible.device), -1).amax(-1)  # -1: none
    blocks = -(-L // FLEX_BLOCK)
    kv_num_blocks = torch.div(last + FLEX_BLOCK, FLEX_BLOCK, rounding_mode="floor").to(torch.int32)
    kv_indices = torch.arange(blocks, dtype=torch.int32, device=visible.device).expand(B, 1, 1, blocks)

    def mask_mod(b, h, q_idx, kv_idx):
        return visible[b, kv_idx]

    block_mask = BlockMask.from_kv_blocks(
        kv_num_blocks.view(B, 1, 1),
        kv_indices.contiguous(),
        BLOCK_SIZE=FLEX_BLOCK,
        mask_mod=mask_mod,
        seq_lengths=(query.shape[2], L),
    )
    return flex_attention(query, key, value, block_mask=block_mask, scale=scale)


def _flex_step(query, key, value, visible, scale):
    """`_flex_on_kv_heads`, compiled (FLEX_COMPILED); None, with a warning once, where it fails
    here (then this process decodes with SDPA: the same attention, every column read)."""
    global _FLEX, _FLEX_FAILED
    try:
        if not FLEX_COMPILED:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
                return _flex_on_kv_heads(query, key, value, visible, scale)
        if _FLEX is None:
            import torch._dynamo.config as config

            limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, limit, max(getattr(config, limit), FLEX_SHAPES))
            _FLEX = torch.compile(_flex_on_kv_heads, dynamic=False)
        return _FLEX(query, key, value, visible, scale)
    except Exception as e:  # noqa: BLE001 (a kernel that cannot compile here must not lose a run)
        _FLEX_FAILED = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        warnings.warn(
            f"rollout.decode_attention=flex: FlexAttention failed here ({_FLEX_FAILED}); decode steps "
            "run SDPA on the K/V heads instead (the same attention, every column read). "
            "Set rollout.decode_attention=sdpa to silence this",
            stacklevel=2,
        )
        return None


def flex_failed() -> str | None:
    """Why FlexAttention failed in this process (decode steps then run SDPA), or None."""
    return _FLEX_FAILED


def kernel() -> str:
    """The decode kernel in use ("sdpa" outside `decode_kernel`)."""
    return _KERNEL


@contextlib.contextmanager
def decode_kernel(name: str):
    """Masked decode steps inside this block run `name` (one of DECODE_KERNELS). "flex" registers
    `sdpa_on_kv_heads` as "sdpa" for the block (on transformers >= 5.23 too, which would fold
    with SDPA itself), and gives back what was registered after."""
    global _KERNEL
    if name not in DECODE_KERNELS:
        raise ValueError(f"unknown decode attention kernel {name!r}; known: {', '.join(DECODE_KERNELS)}")
    if name == "flex":
        require_flex()
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    before_kernel, before_fn = _KERNEL, ALL_ATTENTION_FUNCTIONS["sdpa"]
    if name == "flex" and before_fn is not sdpa_on_kv_heads:
        _library_sdpa()
        AttentionInterface.register("sdpa", sdpa_on_kv_heads)
    _KERNEL = name
    try:
        yield
    finally:
        _KERNEL = before_kernel
        AttentionInterface.register("sdpa", before_fn)


def require_flex() -> None:
    """Raise, saying what to do, where this torch has no FlexAttention (torch < 2.5)."""
    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError as e:
        raise ValueError(
            f"rollout.decode_attention=flex needs FlexAttention (torch >= 2.5); this torch is "
            f"{torch.__version__}: upgrade torch, or set rollout.decode_attention=sdpa"
        ) from e


def flex_columns(visible: int, columns: int) -> int:
    """Cache columns FlexAttention reads, out of `columns`, for a row whose last visible column is
    `visible` − 1: the row's blocks of FLEX_BLOCK."""
    return min(columns, -(-visible // FLEX_BLOCK) * FLEX_BLOCK)


def columns_read(visible: list[int], columns: int) -> int:
    """Row × cache columns a masked decode step's attention reads over rows whose last visible
    columns are `visible` − 1, out of the `columns` each is given (what `work`'s `decode_kv_read`
    counts): all of them under SDPA, and where FlexAttention failed here; under flex, each row's
    blocks (`flex_columns`)."""
    if _KERNEL != "flex" or _FLEX_FAILED:
        return len(visible) * columns
    return sum(flex_columns(v, columns) for v in visible)


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
