"""Batched sampling with a KV cache, our own loop rather than `model.generate`, because we need
(1) a `torch.Generator` we own (HF generate draws from the global RNG), (2) a per-row stop at
`</answer>` found on the device (`StopOnText`), and (3) one place to make fast.

Every forward runs under `models.autocast(model)` (the model's compute dtype) and takes its
logits from the float32 LM head (`models.lm_logits`), as the training forward does.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import warnings
import weakref
from collections import OrderedDict

import torch
from transformers import DynamicCache, StaticCache

from ragen_lib import attention, models, work
from ragen_lib.config import KV_CACHES

LENGTH_BUCKET = 256
"""Static cache lengths are rounded up to a multiple of this (prompt width + max_new_tokens)."""
POOL_SIZE = 16
"""Static decoders (a KV cache and, on CUDA, a captured graph) kept per model for the next call
with the same (rows bucket, length bucket, compute dtype). A multi-turn rollout meets about
(turns × row buckets) shapes, a few of them large; with this many kept, a run captures each
shape once. 0 keeps none: memory is freed after every call, and every call pays the allocation
and the graph capture again."""
POOL_GB = 16.0
"""KV-cache GiB the kept decoders of one model may hold together; the least recently used go
first. They stay allocated between rollouts, through the update: 128 rows × 2560 positions of the
135M model in bf16 are 7.5 GB (`static_decoders`, `release` to free them)."""
LIVENESS_EVERY = {"cuda": 8}
"""Decode steps between host reads of whether any row is still live, per device type (1 where
not named). On a GPU a read is a sync that stalls the queue of launched steps; after the last row
stops, up to this many - 1 steps decode pads nobody reads. On the CPU a read costs nothing and a
wasted step costs a whole forward, so it reads every step."""
LOGPROB_TOLERANCE = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (0.05, 0.5)}
"""(mean, max) absolute difference allowed between the teacher-forced log-probs of two decoding
paths on the same tokens, per compute dtype (`logprob_agreement`). float32: rounding only. bf16:
the two paths multiply in different orders and shapes, and bf16 keeps 8 significant bits, so
greedy tokens may differ at near-ties even when both paths are right; the log-probs stay close."""

# Decoders live outside the model (keyed weakly by it), so copy.deepcopy(model) (how the reference
# is made) and pickling never see KV caches or CUDA graphs, and they go when the model goes.
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _StoreIn:
    """Keeps keys and values in the compute dtype. Under autocast with float32 weights the residual
    stream stays float32, so RoPE hands the cache float32 keys (and bf16 values): stored as they
    come they would take 1.5× the memory, and the static cache's in-place copy needs one dtype.
    Attention casts them to bf16 anyway, so storing them in bf16 changes no number."""

    store_dtype: torch.dtype | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.store_dtype is not None:
            key_states, value_states = key_states.to(self.store_dtype), value_states.to(self.store_dtype)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class _DynamicCache(_StoreIn, DynamicCache):
    pass


class _StaticCache(_StoreIn, StaticCache):
    pass


def _kv_cache(cls, model, **kwargs):
    cache = cls(**kwargs)
    dtype = models.compute_dtype(model)
    cache.store_dtype = dtype if dtype != next(model.parameters()).dtype and dtype != torch.float32 else None
    return cache


def pooled(model, key: tuple, make):
    """The object kept for `model` under `key` (made by `make()` if none), now the most recent of
    the model's pool (static decoders, and the continuous engine's static caches): LRU within
    `POOL_SIZE` objects and `POOL_GB` of their `nbytes`. The one returned is never evicted by the
    byte budget (it may alone exceed it); POOL_SIZE 0 keeps none, this one included (the caller
    still holds it). A new object's bytes count from the next call on, once it is allocated."""
    pool = _DECODERS.setdefault(model, OrderedDict())
    kept = pool.pop(key, None) or make()
    pool[key] = kept  # most recent last
    while len(pool) > POOL_SIZE or (len(pool) > 1 and sum(d.nbytes for d in pool.values()) > POOL_GB * 2**30):
        pool.popitem(last=False)
    return kept


def static_decoders(model) -> dict[tuple, _StaticDecoder]:
    """What the pool keeps for `model`, oldest first: static decoders by (rows, length, compute
    dtype), and continuous batching's static caches (`engine.RaggedKV`) by ("continuous", slots,
    compute dtype)."""
    return dict(_DECODERS.get(model, {}))


def release(model) -> None:
    """Free what the pool keeps for `model` (KV caches and graphs); the next static call makes new ones."""
    _DECODERS.pop(model, None)


class StopOnText:
    """Per-row stop when the text generated so far contains any of `stops`, found on the device.

    Each stop string is matched by a Knuth–Morris–Pratt automaton that reads a whole token per
    step: a row's state is how many of the stop's first characters its text ends with, and two
    (state × vocabulary) tables, built once from every token's text, give the next state and
    whether the token completes the stop. A decode step then costs two gathers per stop and no
    host sync (the text is never decoded during generation). The text is the tokens' texts
    joined, which is the decoded text wherever a stop string could be (byte-level BPE splits only
    multi-byte characters, and the stops are ASCII). An id the tokenizer does not know (a model's
    vocabulary may be padded beyond it: Qwen2.5's 151,936 rows for 151,665 tokens) decodes to no
    text, so it leaves every state as it is, like any token without text.

    `armed_by`: the stops count only once the text contains this string (its automaton runs beside
    them, and one more state column says whether it has been seen). A turn in think mode is parsed
    from its first `</think>` followed by `<answer>…</answer>`, so a `</answer>` the reasoning
    quotes ("the format is <answer>Up</answer>") must not end it: armed by `</think>`.
    """

    def __init__(self, tokenizer, stops: tuple[str, ...], armed_by: str | None = None):
        if not stops or not all(stops) or armed_by == "":
            raise ValueError(f"stop strings must be non-empty, got {stops!r} (armed by {armed_by!r})")
        self.stops, self.armed_by = tuple(stops), armed_by
        automata = self.stops + ((armed_by,) if armed_by else ())
        vocab = [[i] for i in range(len(tokenizer))]
        # One more column, the last, read by every id past the tokenizer's (`step` clamps to it).
        texts = tokenizer.batch_decode(vocab, clean_up_tokenization_spaces=False) + [""]
        self.unknown = len(texts) - 1
        tables = [_stop_tables(s, texts) for s in automata]
        longest = max(map(len, automata))
        self.next = torch.stack([_pad_states(n, longest) for n, _ in tables])
        self.hit = torch.stack([_pad_states(h, longest) for _, h in tables])
        self._on = {}  # device -> (next, hit) there

    def start(self, rows: int, device) -> torch.Tensor:
        """The automata's state for `rows` rows that have generated nothing yet: (rows, automata),
        plus, with `armed_by`, a last column: 1 once it was seen."""
        if device not in self._on:
            self._on[device] = (self.next.to(device, torch.long), self.hit.to(device))
        columns = len(self.next) + (1 if self.armed_by else 0)
        return torch.zeros((rows, columns), dtype=torch.long, device=device)

    def step(self, state: torch.Tensor, new_tokens: torch.Tensor) -> torch.Tensor:
        """Feed each row's new token: advances `state` in place; (rows,) bool, True where the token
        completes a stop string (with `armed_by`: seen before it or in the same token)."""
        nxt, hit = self._on[state.device]
        done = torch.zeros_like(new_tokens, dtype=torch.bool)
        new_tokens = new_tokens.clamp(max=self.unknown)
        for s in range(len(self.stops)):
            q = state[:, s]
            done |= hit[s, q, new_tokens]
            state[:, s] = nxt[s, q, new_tokens]
        if self.armed_by:
            a = len(self.stops)
            q = state[:, a]
            armed = state[:, a + 1].bool() | hit[a, q, new_tokens]
            state[:, a] = nxt[a, q, new_tokens]
            state[:, a + 1] = armed.long()
            done &= armed
        return done


def _stop_tables(stop: str, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """KMP tables of one stop string over token texts: next state and hit, each (len(stop), V).
    State q means the text ends with stop[:q]; after token text t it is the longest proper prefix
    of `stop` that stop[:q] + t ends with, and the token hits when stop[:q] + t contains `stop`."""
    m, chars = len(stop), set(stop)
    nxt = torch.zeros((m, len(texts)), dtype=torch.int16)
    hit = torch.zeros((m, len(texts)), dtype=torch.bool)
    for v, t in enumerate(texts):
        if not t:  # no text: the text so far is unchanged, and so is the state
            nxt[:, v] = torch.arange(m)
            continue
        if not chars.intersection(t):
            continue  # most tokens: no character of the stop, back to state 0
        for q in range(m):
            u = stop[:q] + t
            if stop in u:
                hit[q, v] = True
                continue
            nxt[q, v] = next((k for k in range(min(m - 1, len(u)), 0, -1) if u.endswith(stop[:k])), 0)
    return nxt, hit


def _pad_states(table: torch.Tensor, states: int) -> torch.Tensor:
    """Rows for states a shorter stop never reaches, so the stops' tables stack."""
    return torch.cat([table, table.new_zeros((states - len(table), table.shape[1]))])


@functools.lru_cache(maxsize=8)
def stop_on_text(tokenizer, stops: tuple[str, ...], armed_by: str | None = None) -> StopOnText:
    """`StopOnText`, built once per tokenizer, stops and `armed_by`: the tables read the whole
    vocabulary (about 0.8 s for 49k tokens), and a run generates hundreds of batches (training,
    validation, warm-up, V* estimation)."""
    return StopOnText(tokenizer, stops, armed_by)


def end_token_ids(model, tokenizer) -> tuple[int, ...]:
    """The ids that end an answer: the tokenizer's end of turn, then every id the model's generation
    config lists. Qwen2.5-Instruct lists <|im_end|> and <|endoftext|>, and RAGEN's vLLM rollouts
    stop at both; with the tokenizer's <|im_end|> alone, a reply ended by <|endoftext|> ran on to
    the token budget, and what followed was parsed and trained. SmolLM2 lists its <|im_end|> only."""
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    listed = [listed] if isinstance(listed, numbers.Integral) else list(listed or [])
    return tuple(dict.fromkeys(int(i) for i in [tokenizer.eos_token_id, *listed] if i is not None))


def ends_answer(new: torch.Tensor, end_ids) -> torch.Tensor:
    """Which sampled tokens `new` are one of `end_ids` (an int or a sequence: `end_token_ids`;
    none, a model without an end id: no token ends an answer, it runs to the budget)."""
    ids = (end_ids,) if isinstance(end_ids, numbers.Integral) else tuple(end_ids)
    if not ids:
        return torch.zeros_like(new, dtype=torch.bool)
    hit = new == ids[0]
    for i in ids[1:]:  # one or two ids: no tensor to build per step
        hit |= new == i
    return hit


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos_token_id: int | tuple[int, ...],
    pad_token_id: int,
    stop: StopOnText | None = None,
    generator: torch.Generator | None = None,
    group_size: int = 1,
    kv_cache: str = "dynamic",
    kept: KeptKV | None = None,
    keys: list | None = None,
    logprobs: list | None = None,
) -> list[list[int]]:
    """Sample continuations of `prompts` (lists of token ids, any lengths), all in one batch.

    Each row stops at `eos_token_id` (kept; a tuple: at any of its ids, `end_token_ids`), at a
    stop string (kept through the token that completes it) or after `max_new_tokens`.
    temperature 0 is greedy and ignores `generator`.
    `group_size` > 1 says the prompts come in contiguous groups of that many identical rows
    (a GRPO/StarPO group on its first turn): each distinct prompt is prefilled once and its KV
    cache copied to the group's rows. The samples drawn are the same as with group_size=1.
    `kv_cache`: "dynamic" grows the cache a token at a time; "static" decodes over a preallocated
    cache of bucketed rows and length, replayed as one CUDA graph per step on a GPU (see
    `_StaticDecoder`). The two compute the same function; in float32 they give the same tokens,
    in bf16 their log-probs agree within `LOGPROB_TOLERANCE`. Returns the new token ids per row.

    `kept` (a `KeptKV`, one per rollout): rows named by `keys` (default 0..B-1) that it holds
    resume from their cached prefix and prefill only what their prompt appends; after the call it
    holds every row of this call. `logprobs`, a list, receives per row the model's log-prob of
    each sampled token at temperature 1, as the update computes them: the behaviour policy's when
    it sampled at 1, which is why a training config refuses another rollout.temperature.
    """
    device = next(model.parameters()).device
    B = len(prompts)
    keys = list(range(B)) if keys is None else list(keys)
    if kept:
        logits, decode, next_pos = _resume(model, prompts, keys, kept, max_new_tokens, pad_token_id, kv_cache)
    else:
        logits, decode, next_pos = _start(model, prompts, max_new_tokens, pad_token_id, group_size, kv_cache)
    token_logp = torch.zeros((B, max_new_tokens), device=device) if logprobs is not None else None

    # Tokens, stops and liveness stay on the device: the host reads only whether any row is
    # live, every `every` steps (on a GPU each read waits for the queued steps to finish).
    tokens = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    live = torch.ones(B, dtype=torch.bool, device=device)
    stop_state = stop.start(B, device) if stop is not None else None
    every = LIVENESS_EVERY.get(device.type, 1)
    steps = 0  # decode forwards run (work counters)
    for i_step in range(max_new_tokens):
        new = torch.where(live, sample(logits, temperature, generator), pad_token_id)
        tokens[:, i_step] = new
        if token_logp is not None:
            token_logp[:, i_step] = torch.log_softmax(logits, dim=-1).gather(1, new[:, None])[:, 0]
        finished = live & ends_answer(new, eos_token_id)
        if stop is not None:
            finished |= live & stop.step(stop_state, new)
        lengths = torch.where(finished, i_step + 1, lengths)
        live &= ~finished
        if i_step == max_new_tokens - 1 or ((i_step + 1) % every == 0 and not live.any()):
            break  # no forward for a token nobody will sample
        logits = decode(new, next_pos)
        next_pos = next_pos + 1
        steps += 1
    decode.finish()
    out = [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())]
    if kept is not None:
        kept.store(keys, prompts, out, steps, *decode.kept())
    if token_logp is not None:
        logprobs.extend(row[: len(o)] for row, o in zip(token_logp.tolist(), out))
    if work.active() is not None:
        work.add("rollout", generate_calls=1, decode_steps=steps, gen_tokens=sum(map(len, out)))
        rows = getattr(decode, "rows", B)
        work.add("rollout", decode_row_steps=steps * rows, decode_kv_read=decode.kv_read)
        needed = sum(work.kv_needed(len(p), len(o)) for p, o in zip(prompts, out))
        work.add("rollout", decode_kv_real=needed)
        work.add_decode_call(steps)
    return out


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from float32 logits (B, V): temperature 0 is greedy (ignores `generator`)."""
    if temperature > 0:
        return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)[:, 0]
    return logits.argmax(-1)


@torch.no_grad()
def teacher_forced_logprobs(
    model,
    prompts: list[list[int]],
    continuations: list[list[int]],
    *,
    pad_token_id: int,
    kv_cache: str = "dynamic",
    group_size: int = 1,
) -> list[list[float]]:
    """Log-probs of `continuations` after `prompts`, fed one token per step through the same
    prefill and decoder `generate` uses (`kv_cache` picks which): the sampler's own view of
    given tokens, to compare decoding paths on identical tokens rather than on their samples."""
    device = next(model.parameters()).device
    width = max(map(len, continuations))
    forced = torch.full((len(prompts), width), pad_token_id, dtype=torch.long, device=device)
    for i, c in enumerate(continuations):
        forced[i, : len(c)] = torch.tensor(c, dtype=torch.long)
    logits, decode, next_pos = _start(model, prompts, width, pad_token_id, group_size, kv_cache)
    out = torch.zeros(forced.shape, dtype=torch.float, device=device)
    for i_step in range(width):
        out[:, i_step] = torch.log_softmax(logits, dim=-1).gather(1, forced[:, i_step : i_step + 1])[:, 0]
        if i_step < width - 1:
            logits = decode(forced[:, i_step], next_pos)
            next_pos = next_pos + 1
    decode.finish()
    return [row[: len(c)] for row, c in zip(out.tolist(), continuations)]


def logprob_agreement(
    model, prompts: list[list[int]], continuations: list[list[int]], *, pad_token_id: int
) -> dict:
    """Teacher-forced log-probs of the same tokens by the static and the dynamic decoder, and by
    the training forward (`models.forward_logp` over the whole sequence: what the update sees).
    Returns the mean and max absolute differences, the tolerance of the model's compute dtype and
    `ok`. Token identity is no test in bf16 (near-ties flip); these numbers are."""
    paths = {
        c: teacher_forced_logprobs(model, prompts, continuations, pad_token_id=pad_token_id, kv_cache=c)
        for c in KV_CACHES
    }
    paths["forward"] = _forward_logprobs(model, prompts, continuations, pad_token_id)
    flat = {k: torch.tensor(list(itertools.chain(*v))) for k, v in paths.items()}
    dtype = models.compute_dtype(model)
    mean_tol, max_tol = LOGPROB_TOLERANCE.get(dtype, LOGPROB_TOLERANCE[torch.bfloat16])
    out: dict = {
        "dtype": str(dtype).removeprefix("torch."),
        "tokens": len(flat["static"]),
        "tolerance": (mean_tol, max_tol),
    }
    ok = True
    for a, b in (("static", "dynamic"), ("static", "forward"), ("dynamic", "forward")):
        d = (flat[a] - flat[b]).abs()
        mean, worst = float(d.mean()), float(d.max())
        out[f"{a}_vs_{b}"] = {"mean_abs": mean, "max_abs": worst}
        ok &= mean <= mean_tol and worst <= max_tol
    out["ok"] = ok
    return out


def _forward_logprobs(model, prompts, continuations, pad_token_id: int) -> list[list[float]]:
    """The update's log-probs of `continuations` (right-padded sequences, one forward)."""
    seqs = [p + c for p, c in zip(prompts, continuations)]
    width = max(map(len, seqs))
    device = next(model.parameters()).device
    ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    attn, mask = torch.zeros_like(ids), torch.zeros((len(seqs), width))
    for i, (p, s) in enumerate(zip(prompts, seqs)):
        ids[i, : len(s)], attn[i, : len(s)], mask[i, len(p) : len(s)] = torch.tensor(s), 1, 1
    with torch.no_grad():
        logp, _ = models.forward_logp(
            model, ids.to(device), attn.to(device), mask.to(device), with_entropy=False
        )
    return [logp[i, len(p) : len(s)].tolist() for i, (p, s) in enumerate(zip(prompts, seqs))]


def _start(model, prompts, max_new_tokens: int, pad_token_id: int, group_size: int, kv_cache: str):
    """Prefill every distinct prompt once and set up the decoder: (logits of the next token (B, V)
    float32, the decoder, the next position (B, 1))."""
    _check_groups(prompts, group_size)
    device = next(model.parameters()).device
    input_ids, attn = _left_pad(prompts[::group_size], pad_token_id, device)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (P, T) positions ignore the padding
    cache = _kv_cache(_DynamicCache, model)
    logits = _prefill(model, input_ids, attn, position_ids, cache)
    if group_size > 1:
        # Prefill is O(P·T²) attention plus O(P·T) MLP: with N samples per prompt, copying the
        # cache rows costs a memcpy where recomputing them would cost N× the prefill.
        logits, attn, position_ids = (
            x.repeat_interleave(group_size, dim=0) for x in (logits, attn, position_ids)
        )
    decode = _decoder(model, cache, attn, max_new_tokens, group_size, kv_cache)
    return logits, decode, position_ids[:, -1:] + 1


def _resume(model, prompts, keys, kept: KeptKV, max_new_tokens: int, pad_token_id: int, kv_cache: str):
    """`_start` for rows whose conversation prefix is in `kept`: prefill only what each prompt
    appends to it. The appended segments are left-padded, so padding sits between a row's turns:
    masked, and skipped by the positions (cumulative sum of the mask), as at the left edge."""
    rows = kept.rows_of(keys, prompts)
    device = next(model.parameters()).device
    cache = kept.cache
    if rows != list(range(len(kept.keys))):
        cache.batch_select_indices(torch.tensor(rows, device=device))
    segments = [p[len(kept.ids[j]) :] for p, j in zip(prompts, rows)]
    input_ids, seg_attn = _left_pad(segments, pad_token_id, device)
    attn = torch.cat([kept.attn[rows], seg_attn], dim=1)
    kept.clear()  # the cache now belongs to this call (it grows in place)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
    logits = _prefill(model, input_ids, attn, position_ids, cache)
    decode = _decoder(model, cache, attn, max_new_tokens, 1, kv_cache)
    return logits, decode, position_ids[:, -1:] + 1


def _prefill(model, input_ids, attn, position_ids, cache) -> torch.Tensor:
    """Run `input_ids` (the last columns of `attn`) into `cache`; float32 logits of the next token."""
    if work.active() is not None:
        real = int(attn[:, -input_ids.shape[1] :].sum())
        work.add("rollout", prefill_calls=1, prefill_tokens=input_ids.numel(), prefill_real=real)
    return _decode_step(model, input_ids, attn, position_ids, cache)


def _decoder(model, cache, attn, max_new_tokens: int, group_size: int, kv_cache: str):
    """The decoder that continues from a prefilled `cache` (P rows, each to be repeated
    `group_size` times) under the mask `attn` (B = P·group_size rows)."""
    if kv_cache not in KV_CACHES:
        raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {kv_cache!r}")
    if kv_cache == "static":
        decode = _StaticDecoder.for_shape(model, len(attn), _bucket(attn.shape[1] + max_new_tokens))
        decode.load(cache, attn, group_size)
        return decode
    if group_size > 1:
        cache.batch_repeat_interleave(group_size)
    return _DynamicDecoder(model, cache, attn)


class KeptKV:
    """Each row's KV cache, kept from one `generate` call to the next: the turns of a multi-turn
    rollout, whose next prompt is the last prompt, the tokens generated, then the env's reply. With
    it a turn prefills only the reply (about 60 tokens) instead of the whole conversation (about
    300 to 2,000), and the tokens generated are never run through the model a second time.

    Rows are named by the caller's `keys` (the episode index); a call resumes the named rows and
    the rows it does not name are dropped. Holds, per row, the token ids its cache holds and a mask
    of the cache columns that hold them (a row that stopped early has pad tokens fed after its end:
    masked). The numbers are those of a fresh prefill up to float rounding (a test compares the
    sampled tokens' log-probs with one forward over the finished conversation)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.cache, self.attn, self.ids, self.keys = None, None, [], []

    def __bool__(self) -> bool:
        return self.cache is not None

    def rows_of(self, keys, prompts) -> list[int]:
        """Rows of the cache for `keys`; each prompt must extend its row's cached tokens."""
        index = {k: j for j, k in enumerate(self.keys)}
        rows = []
        for k, p in zip(keys, prompts):
            j = index.get(k)
            if j is None:
                raise ValueError(f"row {k!r} is not in the kept KV cache (rows kept: {self.keys})")
            held = self.ids[j]
            if len(p) <= len(held) or p[: len(held)] != held:
                raise ValueError(
                    f"the prompt of row {k!r} does not extend the tokens its KV cache holds; "
                    "a kept cache serves only a conversation that grows (rollout.keep_kv=false re-prefills)"
                )
            rows.append(j)
        return rows

    def store(self, keys, prompts, out, steps: int, cache, attn) -> None:
        """After a call: row i fed its prompt and the first min(len(out[i]), steps) new tokens
        (decode step k feeds token k; a row that finished earlier fed pads after it)."""
        attn = attn.clone()
        start = attn.shape[1] - steps  # the column of decode step 0
        self.ids = []
        for i, (p, gen) in enumerate(zip(prompts, out)):
            fed = min(len(gen), steps)
            attn[i, start + fed :] = 0
            self.ids.append(list(p) + gen[:fed])
        self.cache, self.attn, self.keys = cache, attn, list(keys)


class _DynamicDecoder:
    """One decode step over HF's DynamicCache: the cache and the mask grow by a column per step."""

    def __init__(self, model, cache: DynamicCache, attn: torch.Tensor):
        self.model, self.cache, self.attn = model, cache, attn
        self.kv_read = 0  # row × cache columns the steps' attention read (work counters)

    def __call__(self, new: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((len(new), 1), dtype=self.attn.dtype, device=self.attn.device)
        self.attn = torch.cat([self.attn, ones], dim=1)
        self.kv_read += self.attn.numel()
        return _decode_step(self.model, new[:, None], self.attn, pos, self.cache)

    def finish(self) -> None:
        pass

    def kept(self) -> tuple[DynamicCache, torch.Tensor]:
        """The cache and the mask of its columns, one row per row of the call."""
        return self.cache, self.attn


def _decode_step(model, ids, attn, pos, cache) -> torch.Tensor:
    """`ids` (one token per row, or a prompt: the last columns of `attn`) through the model into
    `cache`: float32 logits (B, V) of the next token."""
    with models.autocast(model):
        base = model.base_model
        hidden = base(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            use_cache=True,
            **models.with_cache(base, cache),
        ).last_hidden_state
    # The head on the last position only: over every prompt position it would cost more than the
    # rest of a prefill for a small model with a 49k vocabulary, and only the last is sampled.
    return models.lm_logits(model, hidden[:, -1:])[:, -1]


class _StaticDecoder:
    """Decode steps over a preallocated KV cache of shape (R rows, L positions).

    Every step then has the same tensor shapes and addresses, which is what a CUDA graph needs:
    on a GPU one step is captured once and replayed, one launch instead of ~15 kernels per layer
    (a 135M model's decode step is launch-bound). Shapes are bucketed so a run meets few of them:
    R is the call's row count rounded up to a power of two (rows beyond it are padding that
    decodes a pad token and is never read: at most 2× the rows, about log2(P·N)+1 buckets), L
    the prompt width + max_new_tokens rounded up to `LENGTH_BUCKET`. Decoders are kept per
    (model, R, L, compute dtype) outside the model (`_DECODERS`), LRU within `POOL_SIZE` and
    `POOL_GB`. Masked cache slots cost attention reads, hence small buckets.

    Checks, because a graph fails silently: the decoder holds the model weakly and records the
    storage of its parameters and buffers when it captures; a later `.to()`, `load_state_dict(...,
    assign=True)` or any swap of a parameter's storage makes the next call re-capture instead of
    replaying a graph that reads freed memory. The host's write column (`t`) is checked against
    the cache's own device counter (`cumulative_length`) after the prefill is loaded and at the
    end of every call, and a step past the cache's end is refused. If capture fails the decoder
    runs the same step eagerly and says why once.
    """

    @classmethod
    def for_shape(cls, model, batch: int, length: int) -> _StaticDecoder:
        # The kernel too: a captured graph replays the attention it was captured with.
        key = (rows_bucket(batch), length, models.compute_dtype(model), attention.kernel())
        return pooled(model, key, lambda: cls(model, key[0], length))

    def __init__(self, model, rows: int, length: int):
        device = next(model.parameters()).device
        if not hasattr(StaticCache(config=model.config, max_cache_len=1).layers[0], "cumulative_length"):
            raise RuntimeError(
                "kv_cache=static needs transformers >= 5 (a static cache that counts its own write "
                "position); upgrade transformers or use rollout.kv_cache=dynamic"
            )
        self.model = weakref.ref(model)  # a strong reference would keep the model alive via _DECODERS
        self.rows, self.length, self.t, self.live = rows, length, 0, 0
        self.cache = _kv_cache(_StaticCache, model, config=model.config, max_cache_len=length)
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.attn = torch.zeros((rows, length), dtype=torch.long, device=device)
        self.graph, self.logits = None, None
        self.storage = None  # (data_ptr, dtype, device) of every parameter and buffer when captured
        self.captures = 0  # how many times the step was (re-)captured (CPU: prepared)
        self.kv_read = 0  # row × cache columns this call's steps read: every row (`attention.columns_read`)

    @property
    def nbytes(self) -> int:
        if not self.cache.is_initialized:
            return 0
        return sum(
            x.numel() * x.element_size() for layer in self.cache.layers for x in (layer.keys, layer.values)
        )

    def _model(self):
        model = self.model()
        if model is None:
            raise RuntimeError("the model of this static decoder was freed")
        return model

    def _step(self) -> torch.Tensor:
        return _decode_step(self._model(), self.ids, self.attn, self.pos, self.cache)

    def load(self, prefill: DynamicCache, attn: torch.Tensor, group_size: int) -> None:
        """Copy a prefill's keys and values (P rows, each repeated `group_size` times) into the
        first B rows of the cache, positions 0..T-1; decoding continues at T. Re-captures first
        when the model's parameter storage changed since the last capture."""
        B, T = attn.shape
        if B > self.rows or T >= self.length:
            raise ValueError(
                f"{B} rows × {T} columns do not fit the static cache of {self.rows} × {self.length}"
            )
        if not self.cache.is_initialized:
            self._allocate(prefill)
        storage = parameter_storage(self._model())
        if storage != self.storage:
            self._capture()
            self.storage = storage
        self.cache.reset()  # zeroes in place (device counter too): the graph keeps pointing at these tensors
        for i, layer in enumerate(prefill.layers):
            k, v = layer.keys, layer.values
            if group_size > 1:
                k, v = k.repeat_interleave(group_size, dim=0), v.repeat_interleave(group_size, dim=0)
            if B < self.rows:  # padding rows: zero keys, and a mask that opens only their own new slots
                pad = torch.zeros((self.rows - B, *k.shape[1:]), dtype=k.dtype, device=k.device)
                k, v = torch.cat([k, pad]), torch.cat([v, pad])
            self.cache.update(k, v, i)
        self.attn.zero_()
        self.attn[:B, :T] = attn
        self.ids.zero_()
        self.pos.zero_()
        self.t, self.live, self.kv_read = T, B, 0
        self._check_position()

    def _allocate(self, prefill: DynamicCache) -> None:
        """Allocate the cache from one token's worth of keys (dtype and heads of the prefill's)."""
        for i, layer in enumerate(prefill.layers):
            k, v = (x.new_zeros((self.rows, x.shape[1], 1, x.shape[3])) for x in (layer.keys, layer.values))
            self.cache.update(k, v, i)

    def _capture(self) -> None:
        """Capture one decode step as a CUDA graph (on CPU: nothing to capture; counted alike).
        Its warm-up steps write into the cache, which `load` resets afterwards."""
        self.captures += 1
        self.graph, self.logits = None, None  # free the old graph's memory before the new capture
        if not self.ids.is_cuda:
            return
        self.attn[:, 0] = 1  # no fully masked row during warm-up
        self.graph, self.logits = capture_graph(
            self._step, "kv_cache=static", "decoding eagerly over the static cache instead"
        )

    def _check_position(self) -> None:
        """The cache writes each step's key at its own device counter; the mask opens column `t`
        (the host's). Were they to differ, keys would land in masked slots and decoding would go
        on, wrong, with no error: so they are compared (one sync per call)."""
        written = {
            int(n) for n in torch.stack([layer.cumulative_length for layer in self.cache.layers]).tolist()
        }
        if written != {self.t}:
            raise RuntimeError(
                f"static KV cache out of step: the cache's write positions are {sorted(written)}, "
                f"the decoder's column is {self.t}. A bug: report it, and use rollout.kv_cache=dynamic"
            )

    def __call__(self, new: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if self.t >= self.length:
            raise RuntimeError(f"static KV cache full: column {self.t} of {self.length} (a bug in _bucket)")
        B = self.live
        self.ids[:B].copy_(new[:, None])
        self.pos[:B].copy_(pos)
        self.attn[:, self.t] = 1  # the slot the cache writes this step's key into
        self.t += 1
        self.kv_read += attention.columns_read([self.t] * self.rows, self.length)  # columns 0..t-1 visible
        if self.graph is not None:
            self.graph.replay()
            return self.logits[:B]
        return self._step()[:B]

    def finish(self) -> None:
        self._check_position()

    def kept(self) -> tuple[DynamicCache, torch.Tensor]:
        """The call's rows and columns of the static cache, copied out into a dynamic one (the
        static cache is reused by the next call of this shape)."""
        B, t = self.live, self.t
        cache = _kv_cache(_DynamicCache, self._model())
        for i, layer in enumerate(self.cache.layers):
            cache.update(layer.keys[:B, :, :t].clone(), layer.values[:B, :, :t].clone(), i)
        return cache, self.attn[:B, :t].clone()


def capture_graph(step, what: str, fallback: str) -> tuple:
    """(CUDA graph, its output) of `step()`, a decode step of fixed shapes; warm-up runs on a side
    stream first (cuBLAS handles, the allocator). If the capture fails: (None, None) and a warning
    "`what`: CUDA graph capture failed (why); `fallback`", for the caller to run `step` eagerly."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        return graph, out
    except Exception as e:  # noqa: BLE001 (any capture failure: fall back, say why)
        torch.cuda.synchronize()
        why = f"{type(e).__name__}: {e}"
        warnings.warn(f"{what}: CUDA graph capture failed ({why}); {fallback}", stacklevel=3)
        return None, None


def parameter_storage(model) -> tuple:
    """Where the model's parameters and buffers live: a captured graph reads these addresses."""
    return tuple(
        (t.data_ptr(), t.dtype, t.device) for t in itertools.chain(model.parameters(), model.buffers())
    )


def rows_bucket(n: int) -> int:
    """The next power of two ≥ n: the row count of the static cache serving n rows."""
    return 1 << max(0, n - 1).bit_length()


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
