"""Batched sampling with a KV cache, our own loop rather than `model.generate`, because we need
(1) a `torch.Generator` we own (HF generate draws from the global RNG), (2) a per-row stop at
`</answer>` without decoding every row at every step, and (3) one place to make fast later.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import torch
from transformers import DynamicCache, StaticCache

from ragen_lib.config import KV_CACHES

LENGTH_BUCKET = 256
"""Static cache lengths are rounded up to a multiple of this (prompt width + max_new_tokens)."""
POOL_SIZE = 2
"""Static decoders (a KV cache and, on CUDA, a captured graph) kept per model for the next call
with the same shape. They hold their KV caches between rollouts, through the update: about
7.5 GB each for 128 rows × 2560 positions of the 135M model in bf16. 0 keeps none: memory is
freed after every call, and every call pays the allocation and the graph capture again."""


class StopOnText:
    """Per-row stop when the decoded tail contains any of `stops` (e.g. "</answer>").

    Only rows whose new token can end a stop string are decoded, which keeps the check off the
    hot path: for "</answer>" that is the few tokens whose text contains ">".
    """

    def __init__(self, tokenizer, stops: tuple[str, ...], tail_tokens: int = 8):
        self.tokenizer, self.stops, self.tail = tokenizer, stops, tail_tokens
        last_chars = {s[-1] for s in stops}
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.candidates = torch.tensor(
            [any(c in (tok or "") for c in last_chars) for tok in vocab], dtype=torch.bool
        )

    def __call__(self, tokens: torch.Tensor, new_tokens: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """tokens: (B, t) generated so far, `new_tokens` its last column; returns (B,) bool."""
        hit = torch.zeros_like(live)
        maybe = live & self.candidates.to(new_tokens.device)[new_tokens]
        for i in maybe.nonzero().flatten().tolist():
            tail = self.tokenizer.decode(tokens[i, -self.tail :].tolist())
            hit[i] = any(s in tail for s in self.stops)
        return hit


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_token_id: int,
    pad_token_id: int,
    stop: StopOnText | None = None,
    generator: torch.Generator | None = None,
    group_size: int = 1,
    kv_cache: str = "dynamic",
) -> list[list[int]]:
    """Sample continuations of `prompts` (lists of token ids, any lengths), all in one batch.

    Each row stops at `eos_token_id` (kept), at a stop string (kept through the token that
    completes it) or after `max_new_tokens`. temperature 0 is greedy and ignores `generator`.
    `group_size` > 1 says the prompts come in contiguous groups of that many identical rows
    (a GRPO/StarPO group on its first turn): each distinct prompt is prefilled once and its KV
    cache copied to the group's rows. The samples drawn are the same as with group_size=1.
    `kv_cache`: "dynamic" grows the cache a token at a time; "static" decodes over a preallocated
    cache of bucketed length, replayed as one CUDA graph per step on a GPU (see `_StaticDecoder`).
    Both give the same tokens. Returns the new token ids per row.
    """
    if kv_cache not in KV_CACHES:
        raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {kv_cache!r}")
    device = next(model.parameters()).device
    B = len(prompts)
    _check_groups(prompts, group_size)
    input_ids, attn = _left_pad(prompts[::group_size], pad_token_id, device)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (P, T) positions ignore the padding
    cache = DynamicCache()
    # logits_to_keep=1: the LM head over every prompt position would cost more than the rest of
    # the prefill for a small model with a 49k vocabulary, and only the last position is sampled.
    out = model(
        input_ids=input_ids,
        attention_mask=attn,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1, :].float()  # (P, V)
    if group_size > 1:
        # Prefill is O(P·T²) attention plus O(P·T) MLP: with N samples per prompt, copying the
        # cache rows costs a memcpy where recomputing them would cost N× the prefill.
        logits, attn, position_ids = (
            x.repeat_interleave(group_size, dim=0) for x in (logits, attn, position_ids)
        )
    if kv_cache == "static":
        decode = _StaticDecoder.for_shape(model, B, _bucket(attn.shape[1] + max_new_tokens))
        decode.load(cache, attn, group_size)
    else:
        if group_size > 1:
            cache.batch_repeat_interleave(group_size)
        decode = _DynamicDecoder(model, cache, attn)

    # Tokens stay on the device until the end: per step the host touches only the rows whose
    # new token could complete a stop string, not all B rows.
    tokens = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    live = torch.ones(B, dtype=torch.bool, device=device)
    next_pos = position_ids[:, -1:] + 1  # (B, 1)
    for i_step in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            new = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            new = logits.argmax(-1)
        new = torch.where(live, new, torch.full_like(new, pad_token_id))
        tokens[:, i_step] = new
        finished = live & (new == eos_token_id)
        if stop is not None:
            finished |= stop(tokens[:, : i_step + 1], new, live)
        lengths = torch.where(finished, i_step + 1, lengths)
        live &= ~finished
        if i_step == max_new_tokens - 1 or not live.any():
            break  # no forward for a token nobody will sample
        logits = decode(new, next_pos)
        next_pos = next_pos + 1
    return [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())]


class _DynamicDecoder:
    """One decode step over HF's DynamicCache: the cache and the mask grow by a column per step."""

    def __init__(self, model, cache: DynamicCache, attn: torch.Tensor):
        self.model, self.cache, self.attn = model, cache, attn

    def __call__(self, new: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((len(new), 1), dtype=self.attn.dtype, device=self.attn.device)
        self.attn = torch.cat([self.attn, ones], dim=1)
        out = self.model(
            input_ids=new[:, None],
            attention_mask=self.attn,
            position_ids=pos,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1, :].float()  # (B, V)


class _StaticDecoder:
    """Decode steps over a preallocated KV cache of shape (B rows, L positions).

    Every step then has the same tensor shapes and addresses, which is what a CUDA graph needs:
    on a GPU one step is captured once and replayed, one launch instead of ~15 kernels per layer
    (a 135M model's decode step is launch-bound). L is rounded up to `LENGTH_BUCKET`, so the
    growing prompts of a multi-turn rollout land in a few shapes, and decoders are kept per
    (model, B, L) for the next call with that shape (LRU, `POOL_SIZE` per model: each holds a
    KV cache of B·L positions). Masked cache slots cost attention reads, hence a small bucket.
    If capture fails the decoder runs the same step eagerly and says why once.
    """

    @classmethod
    def for_shape(cls, model, batch: int, length: int) -> _StaticDecoder:
        # Kept on the model, so the caches go when the model does.
        pool = model.__dict__.setdefault("_ragen_static_decoders", OrderedDict())
        key = (batch, length)
        decoder = pool.pop(key, None) or cls(model, batch, length)
        pool[key] = decoder  # most recent last
        while len(pool) > POOL_SIZE:
            pool.popitem(last=False)
        return decoder

    def __init__(self, model, batch: int, length: int):
        device = next(model.parameters()).device
        self.model, self.length, self.t = model, length, 0
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.attn = torch.zeros((batch, length), dtype=torch.long, device=device)
        self.graph, self.logits = None, None

    def _step(self) -> torch.Tensor:
        out = self.model(
            input_ids=self.ids,
            attention_mask=self.attn,
            position_ids=self.pos,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1, :].float()

    def load(self, prefill: DynamicCache, attn: torch.Tensor, group_size: int) -> None:
        """Copy a prefill's keys and values (P rows, each repeated `group_size` times) into the
        cache, positions 0..T-1; decoding continues at T."""
        T = attn.shape[1]
        if T >= self.length:
            raise ValueError(f"prompt width {T} does not fit the static cache of {self.length}")
        if not self.cache.is_initialized:
            self._allocate(prefill)
        self.cache.reset()  # zeroes in place: the captured graph keeps pointing at these tensors
        for i, layer in enumerate(prefill.layers):
            k, v = layer.keys, layer.values
            if group_size > 1:
                k, v = k.repeat_interleave(group_size, dim=0), v.repeat_interleave(group_size, dim=0)
            self.cache.update(k, v, i)
        self.attn.zero_()
        self.attn[:, :T] = attn
        self.t = T

    def _allocate(self, prefill: DynamicCache) -> None:
        """Allocate the cache from one token's worth of keys, then capture the step on CUDA."""
        for i, layer in enumerate(prefill.layers):
            shape = (len(self.ids),) + tuple(layer.keys.shape[1:2]) + (1,) + tuple(layer.keys.shape[3:])
            zeros = torch.zeros(shape, dtype=layer.keys.dtype, device=layer.keys.device)
            self.cache.update(zeros, zeros.clone(), i)
        if self.ids.is_cuda:
            self._capture()

    def _capture(self) -> None:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):  # warm-up outside the graph: cuBLAS handles, allocator
                    self._step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.logits = self._step()
            self.graph = graph
        except Exception as e:  # noqa: BLE001 (any capture failure: fall back, say why)
            self.graph = None
            torch.cuda.synchronize()
            warnings.warn(
                f"kv_cache=static: CUDA graph capture failed ({type(e).__name__}: {e}); "
                "decoding eagerly over the static cache instead",
                stacklevel=2,
            )

    def __call__(self, new: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(new[:, None])
        self.pos.copy_(pos)
        self.attn[:, self.t] = 1  # the slot the cache writes this step's key into
        self.t += 1
        if self.graph is not None:
            self.graph.replay()
            return self.logits
        return self._step()


def _bucket(n: int) -> int:
    return -(-n // LENGTH_BUCKET) * LENGTH_BUCKET


def _left_pad(prompts: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (B, T). Left padding puts every row's last prompt token at
    the same column, so one decode step serves every row."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p) :] = 1
    return input_ids.to(device), attn.to(device)


def _check_groups(prompts: list[list[int]], group_size: int) -> None:
    if group_size < 1 or len(prompts) % group_size:
        raise ValueError(f"group_size={group_size} must be ≥ 1 and divide the {len(prompts)} prompts")
    if group_size > 1 and any(prompts[i] != prompts[i - i % group_size] for i in range(len(prompts))):
        raise ValueError(
            "group_size > 1 shares one prefill per group, but the rows of a group differ; "
            "pass group_size=1 (later turns of a multi-turn rollout diverge)"
        )
