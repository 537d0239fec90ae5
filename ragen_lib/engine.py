"""Continuous batching of episodes (`rollout.batching: continuous`): one decode loop over every
episode of a rollout, in which a row whose turn ends is stepped in its env at once and starts its
next turn while the other rows go on decoding.

The per-turn loop (`rollout.collect` with `batching: turn`) decodes each turn until its slowest
row ends: with answers of about 35 tokens and a cap of 400, most rows wait most of the turn. Here
a row waits for nobody, and rows whose episode is over leave the decode batch.

Each episode owns a slot of `RaggedKV`, where its tokens sit contiguously from column 0 at their
true positions: so a row can take new tokens (the env's reply) while the others decode, and its
numbers are those of one forward over the whole conversation (a test compares them). The cache
of slot r always holds the first `n[r]` ids of its episode's track: a new turn prefills
`track.ids[n[r]:]`, which is the last sampled token (never fed) and the env's reply.

With `rollout.kv_cache: static` a decode step has fixed shapes, so a GPU replays it as one CUDA
graph (a 135M model's eager decode step is launch-bound): it runs the live rows rounded up to a
power of two over the cache columns up to the longest live row's, rounded up to a bucket
(`columns_bucket`: at most 1.5×), under the mask: a graph per (rows, columns) bucket. An admission (the env's
reply, prefilled while the others decode) runs likewise at bucketed rows, width and columns, a
graph per bucket: eager, it would cost a whole forward's launches each time answers end. The
cache, with its graphs, is kept per model between rollouts (`generation.pooled`, freed by
`generation.release`).
"""

from __future__ import annotations

import torch

from ragen_lib import attention, models, work
from ragen_lib.generation import (
    LIVENESS_EVERY,
    StopOnText,
    capture_graph,
    ends_answer,
    parameter_storage,
    pooled,
    rows_bucket,
    sample,
)

LENGTH_STEP = 256
"""Cache columns are allocated in multiples of this; a row that needs more grows every slot."""


def columns_bucket(needed: int) -> int:
    """The cache columns a static decode step reads when its longest row needs `needed`, and the
    lengths a static cache grows to: the least of LENGTH_STEP × 2^k and 1.5 × that (256, 384, 512,
    768, 1024, 1536, ...) that holds them. At batch 128 a decode step reads more bytes of KV cache
    than of weights, so a step that read the whole pooled cache (as long as the longest rollout it
    served) would pay for that rollout on every step; these buckets read at most 1.5× the longest
    row's columns, with about two graphs per doubling of the length, per row bucket."""
    n = max(needed, LENGTH_STEP)
    p = 1 << (n - 1).bit_length()
    return 3 * p // 4 if 3 * p // 4 >= n and p > LENGTH_STEP else p


PREFILL_WIDTH = 16
"""A static admission feeds its rows right-padded to a power of two of at least this many tokens."""


def width_bucket(width: int) -> int:
    """The padded width of a static admission of `width` tokens: the next power of two, at least
    PREFILL_WIDTH (an env's reply of 60 to 100 tokens meets one or two buckets)."""
    return max(PREFILL_WIDTH, 1 << (width - 1).bit_length())


class RaggedKV:
    """Per-slot contiguous keys and values, speaking the HF cache protocol (`update`) for the
    forwards `forward` runs: each forward writes W new columns for its rows, row r's at
    n[r]…n[r]+W-1, and attends over the first max(n)+W columns under its own 4-D mask."""

    def __init__(self, model, slots: int, length: int, *, static: bool = False):
        cfg = model.config
        impl = cfg._attn_implementation
        if impl not in ("sdpa", "eager"):
            raise ValueError(
                f"rollout.batching=continuous gives each row its own 4-D attention mask, which the "
                f"model's attention {impl!r} does not take; load it with sdpa or eager attention, "
                "or use rollout.batching=turn"
            )
        self._eager = impl == "eager"  # eager adds the mask to the scores: an additive float mask
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        device, dtype = next(model.parameters()).device, models.compute_dtype(model)
        # Static: one more slot, the scratch, where an admission's padding rows write (never read).
        self.scratch = slots
        shape = (slots + static, heads, length, dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        # The columns each slot holds, twice: on the host, which schedules and never reads the
        # device for it, and on the device, where a decode step's positions and mask come from
        # (built from the host's list, every step would copy it to the GPU synchronously).
        self.n = [0] * slots
        self.n_dev = torch.zeros(slots + static, dtype=torch.long, device=device)
        self._slots = torch.arange(slots + static, device=device)
        self.length = length
        # Static steps (see the module docstring): their inputs' buffers, and per bucket a CUDA
        # graph with its output (on CPU: None, the step runs eagerly). Decode steps are keyed
        # (rows, columns), admissions ("prefill", rows, width, columns); an admission's buffers
        # (token ids, slots, tokens fed per row) are keyed (rows, width).
        self.static = static
        self.ids = torch.zeros((slots, 1), dtype=torch.long, device=device)
        self.graphs: dict[tuple, tuple] = {}
        self._prefill_in: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.storage = None  # the model's parameter storage when the graphs were captured
        self.captures = 0  # static steps (re-)captured (CPU: prepared), over the cache's life
        self.kv_read = 0  # row × cache columns the decode steps' attention read (work counters)

    @classmethod
    def for_rollout(cls, model, slots: int, length: int, *, static: bool) -> RaggedKV:
        """A cache of at least `slots` slots × `length` columns, emptied. Static: the one kept for
        `model` (its graphs replay from rollout to rollout; re-captured if the model's parameters
        moved), of a power-of-two slot count. Else a new one."""
        if not static:
            return cls(model, slots, length)
        # The kernel too: a captured graph replays the attention it was captured with.
        key = ("continuous", rows_bucket(slots), models.compute_dtype(model), attention.kernel())
        cache = pooled(model, key, lambda: cls(model, key[1], columns_bucket(length), static=True))
        cache.n, cache.kv_read = [0] * len(cache.n), 0
        cache.n_dev.zero_()  # the scratch slot's too: an admission's padding rows write from column 0
        cache.reserve(length)
        if cache.storage != parameter_storage(model):
            cache.graphs.clear()
        return cache

    @property
    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in (*self.k, *self.v))

    def reserve(self, columns: int) -> None:
        """Make room for `columns` columns in every slot (rounded up to LENGTH_STEP; static: to
        `columns_bucket`, so that every bucket a step reads fits)."""
        if columns <= self.length:
            return
        new = columns_bucket(columns) if self.static else -(-columns // LENGTH_STEP) * LENGTH_STEP
        grow = lambda x: torch.cat([x, x.new_zeros((*x.shape[:2], new - self.length, x.shape[3]))], dim=2)  # noqa: E731
        self.k, self.v = [grow(x) for x in self.k], [grow(x) for x in self.v]
        self.length = new
        self.graphs.clear()  # they read the old tensors

    def prefill(self, model, rows: list[int], segments: list[list[int]]) -> torch.Tensor:
        """An admission: feed row rows[j] the tokens segments[j] at its next columns; float32
        logits (R, V) of each row's next token. Static: at fixed shapes (rows, width and columns
        rounded up, a CUDA graph per bucket); the padding rows write into the scratch slot."""
        lengths = [len(x) for x in segments]
        if not self.static:
            ids = _right_pad(segments, self.k[0].device)
            work.add("rollout", prefill_calls=1, prefill_tokens=ids.numel(), prefill_real=sum(lengths))
            return self.forward(model, rows, ids, lengths)
        R = len(rows)
        P, W = rows_bucket(R), width_bucket(max(lengths))
        needed = max(self.n[r] for r in rows) + W
        self.reserve(needed)
        C = columns_bucket(needed)
        if (P, W) not in self._prefill_in:
            device = self.k[0].device
            self._prefill_in[P, W] = (
                torch.zeros((P, W), dtype=torch.long, device=device),
                torch.zeros(P, dtype=torch.long, device=device),
                torch.zeros(P, dtype=torch.long, device=device),
            )
        ids, index, fed = self._prefill_in[P, W]
        ids.copy_(_right_pad(segments + [[0]] * (P - R), "cpu", width=W))
        index.copy_(torch.tensor(rows + [self.scratch] * (P - R)))
        fed.copy_(torch.tensor(lengths + [1] * (P - R)))
        work.add("rollout", prefill_calls=1, prefill_tokens=P * W, prefill_real=sum(lengths))
        logits = self._run(model, ("prefill", P, W, C), lambda: self._static_prefill(model, P, W, C))
        for r, n in zip(rows, lengths):
            self.n[r] += n
        self.n_dev.index_add_(0, index[:R], fed[:R])
        return logits[:R]

    def _static_prefill(self, model, P: int, W: int, C: int) -> torch.Tensor:
        """The admission of the rows in `_prefill_in[P, W]` over the first C columns at fixed
        shapes, from device tensors only. Padding positions (right of a row's tokens) write into
        columns its next tokens overwrite before any query reads them. Does not advance `n_dev`."""
        ids, index, fed = self._prefill_in[P, W]
        pos = self.n_dev[index][:, None] + torch.arange(W, device=ids.device)[None]
        self._rows, self._sel, self._prefix, self._read = index, index, False, C
        self._cols = pos  # < C: C holds the longest row's columns and W more
        hidden = self._hidden(model, ids, pos)
        last = hidden[self._slots[:P], fed - 1]  # each row's last real position
        return models.lm_logits(model, last[:, None])[:, -1]

    def copy_slot(self, src: int, dst: list[int]) -> None:
        """Give slots `dst` the columns of slot `src` (a group's shared first prompt, or an episode
        moving to keep the live ones first)."""
        n = self.n[src]
        for x in (*self.k, *self.v):
            x[dst, :, :n] = x[src, :, :n]
        for d in dst:
            self.set_length(d, n)

    def set_length(self, slot: int, n: int) -> None:
        """Slot `slot` holds its first `n` columns (a roll-back, or columns copied in)."""
        self.n[slot] = n
        self.n_dev[slot] = n  # a fill with a scalar argument: no copy from the host

    def _begin(self, rows: list[int], width: int) -> torch.Tensor:
        """Set up a forward of `width` new columns for `rows`, reading the first max(n) + width
        columns; returns their position ids (R, W). Rows 0..R-1 (every decode step) are read from
        the device's lengths as views, so a decode step copies nothing from the host; other rows
        (a prefill) index them with a small copy."""
        device = self.k[0].device
        self._read = max(self.n[r] for r in rows) + width
        self.reserve(self._read)
        self._prefix = rows == list(range(len(rows)))  # slots 0..R-1: read them as a view
        self._rows = self._slots[: len(rows)] if self._prefix else torch.tensor(rows, device=device)
        self._sel = slice(0, len(rows)) if self._prefix else self._rows  # a slice reads a view
        self._cols = self.n_dev[self._sel][:, None] + torch.arange(width, device=device)[None]
        return self._cols

    def _hidden(self, model, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Last hidden states (R, W, H) of `ids` at positions `pos` in the rows set up: row r's
        query i sees columns ≤ pos[r, i] (its past and itself) of the first `_read`, a 4-D mask."""
        mask = (torch.arange(self._read, device=pos.device)[None, None, :] <= pos[:, :, None])[:, None]
        if self._eager:  # eager adds the mask to the scores: an additive float mask
            mask = torch.zeros(mask.shape, device=pos.device).masked_fill(~mask, torch.finfo().min)
        with models.autocast(model):
            base = model.base_model
            return base(
                input_ids=ids,
                attention_mask=mask,
                position_ids=pos,
                use_cache=True,
                **models.with_cache(base, self),
            ).last_hidden_state

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """For transformers 4.x, whose models derive a `cache_position` from it when none is given
        (our 4-D mask and position ids make it unused)."""
        return max(self.n)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        out = []
        for store, new in ((self.k[layer_idx], key_states), (self.v[layer_idx], value_states)):
            store[self._rows[:, None], :, self._cols] = new.transpose(1, 2).to(store.dtype)
            # A view when the rows are the first slots in order (every decode step: `play` keeps the
            # live episodes in slots 0..R-1), else a copy (a prefill of some rows).
            R = len(self._rows)
            out.append(store[:R, :, : self._read] if self._prefix else store[self._rows, :, : self._read])
        return tuple(out)

    def forward(self, model, rows: list[int], ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Feed row rows[j] its tokens ids[j, :lengths[j]] (right-padded, on the device) at its next
        columns; float32 logits (R, V) of each row's next token."""
        device = self.k[0].device
        hidden = self._hidden(model, ids, self._begin(rows, ids.shape[1]))
        for r, n in zip(rows, lengths):
            self.n[r] += n
        if ids.shape[1] == 1:  # a decode step: one token per row, no copy from the host
            self.n_dev[self._sel] += 1
            return models.lm_logits(model, hidden)[:, -1]
        fed = torch.tensor(lengths, device=device)
        self.n_dev[self._sel] += fed
        # The head on each row's last real position only (right padding: not the last column).
        last = hidden[torch.arange(len(rows), device=device), fed - 1]
        return models.lm_logits(model, last[:, None])[:, -1]

    def decode(self, model, new: torch.Tensor) -> torch.Tensor:
        """One decode step of slots 0..R-1, R = len(new): each feeds its token `new[r]`; float32
        logits (R, V). Static: slots 0..B-1 run, B = R rounded up to a power of two, over the first
        C columns, C = `columns_bucket` of the longest live row's (fixed shapes: a CUDA graph per
        (B, C)); slots R..B-1 hold no live episode, and what they compute is never read."""
        R = len(new)
        if not self.static:
            logits = self.forward(model, list(range(R)), new[:, None], [1] * R)
            self.kv_read += R * self._read
            return logits
        needed = max(self.n[:R]) + 1
        self.reserve(needed)
        B, C = rows_bucket(R), columns_bucket(needed)  # C ≤ length: a static cache's is a bucket
        self.ids[:R, 0] = new
        logits = self._run(model, (B, C), lambda: self._static_step(model, B, C))
        # Row r sees columns 0..n[r] (a free slot: up to C); SDPA reads all C, flex r's own blocks.
        self.kv_read += attention.columns_read([n + 1 for n in self.n[:B]], C)
        for r in range(R):
            self.n[r] += 1
        self.n_dev[:R] += 1  # slots R..B-1 keep their lengths: their writes go to a free column
        return logits[:R]

    def _static_step(self, model, B: int, C: int) -> torch.Tensor:
        """The decode step of slots 0..B-1 over the first C columns at fixed shapes; reads only
        device tensors, so a CUDA graph of it replays with this step's tokens and lengths. It does
        not advance `n_dev`."""
        pos = self.n_dev[:B, None]
        self._rows, self._sel, self._prefix, self._read = self._slots[:B], slice(0, B), True, C
        # A free slot's length may be past C (its episode was longer): its write, clamped into its
        # own columns, is never read.
        self._cols = pos.clamp(max=C - 1)
        return models.lm_logits(model, self._hidden(model, self.ids[:B], pos))[:, -1]

    def _run(self, model, key: tuple, step) -> torch.Tensor:
        """The output of static `step` (a decode step or an admission, bucket `key`): its CUDA
        graph replayed, captured the first time; eagerly where there is none (CPU, or a failed
        capture)."""
        if key not in self.graphs:
            self.graphs[key] = self._capture(step)
            self.storage = parameter_storage(model)
        graph, out = self.graphs[key]
        if graph is None:
            return step()
        graph.replay()
        return out

    def _capture(self, step) -> tuple:
        """(CUDA graph, its logits) of a static step; (None, None) on the CPU, or if the capture
        fails (then the step runs eagerly, and a warning says why). The warm-up runs write what
        the step writes (a decode step: the slots' next columns, which nothing reads until they
        are written again; an admission: its own tokens' keys and values)."""
        self.captures += 1
        if not self.ids.is_cuda:
            return None, None
        return capture_graph(
            step,
            "rollout.kv_cache=static with batching=continuous",
            "decoding eagerly at the same shapes instead",
        )


def _right_pad(seqs: list[list[int]], device, width: int | None = None) -> torch.Tensor:
    out = torch.zeros((len(seqs), width or max(map(len, seqs))), dtype=torch.long)
    for j, s in enumerate(seqs):
        out[j, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out.to(device)


@torch.no_grad()  # the trainer calls the rollout with grad enabled: a graph would keep every step
def play(model, tracks, start: list[int], max_new: int, on_turn, *, temperature: float, eos, pad: int,
         stop: StopOnText | None, generator, group_size: int, static: bool = False) -> None:  # fmt: skip
    """Decode every episode to its end (an answer ends at any id of `eos`, an int or a tuple:
    `generation.end_token_ids`). `tracks[i].ids` is episode i's conversation; `start` the
    episodes that play a first turn. `on_turn(i, tokens, logps)` is called when episode i's answer
    ends: it steps the env, extends the track, and returns True when episode i plays another turn
    (its track then ends with the next generation prompt). `group_size` > 1: contiguous groups;
    whenever every slot starts a turn and each group's rows are identical (the first turn; greedy
    decoding keeps them so), each group is prefilled once and its cache copied to its slots.

    The live episodes occupy slots 0..R-1, so a decode step reads the cache as a view; when an
    episode is over, the last live slot moves into its place (one slot's columns, once)."""
    device = next(model.parameters()).device
    S = len(tracks)
    length = -(-(max(len(t.ids) for t in tracks) + max_new) // LENGTH_STEP) * LENGTH_STEP
    cache = RaggedKV.for_rollout(model, S, length, static=static)
    # Per slot, on the device: next-token logits (float32, written by prefills and decodes), the
    # answer so far and its log-probs (+ a column that takes the pads of rows that ended), tokens
    # sampled this turn, whether the answer is still going, the stop automata's state.
    logits = None
    tokens = torch.full((S, max_new + 1), pad, dtype=torch.long, device=device)
    logps = torch.zeros((S, max_new + 1), device=device)
    count = torch.zeros(S, dtype=torch.long, device=device)
    live = torch.zeros(S, dtype=torch.bool, device=device)
    state = stop.start(S, device) if stop is not None else None
    turn_start = [0] * S  # per slot: the column where its current answer began
    episode = list(start) + sorted(set(range(S)) - set(start))  # slot -> episode
    R = len(start)  # live slots
    every = LIVENESS_EVERY.get(device.type, 1)

    def admit(slots: list[int]) -> None:
        nonlocal logits
        lead = slots
        if (
            group_size > 1
            and slots == list(range(S))
            and episode == list(range(S))
            and all(tracks[i].ids == tracks[i - i % group_size].ids for i in slots)
        ):
            lead = slots[::group_size]
        out = cache.prefill(model, lead, [tracks[episode[s]].ids[cache.n[s] :] for s in lead])
        if lead is not slots:
            for leader in lead:
                cache.copy_slot(leader, list(range(leader + 1, leader + group_size)))
            out = out.repeat_interleave(group_size, dim=0)
        if logits is None:
            logits = out.new_zeros((S, out.shape[1]))
        index = torch.tensor(slots, device=device)
        logits[index] = out
        live[index], count[index] = True, 0
        if state is not None:
            state[index] = 0
        for s in slots:
            turn_start[s] = cache.n[s]

    def move(src: int, dst: int) -> None:
        cache.copy_slot(src, [dst])
        for x in (tokens, logps, count, live, logits) + ((state,) if state is not None else ()):
            x[dst] = x[src]
        turn_start[dst], episode[dst] = turn_start[src], episode[src]

    if R:
        admit(list(range(R)))
    steps = row_steps = gen_tokens = kv_real = 0
    i_step = 0
    while R:
        at = torch.arange(R, device=device)
        x = logits[:R]
        was = live[:R].clone()
        new = torch.where(was, sample(x, temperature, generator), pad)
        col = count[:R]
        tokens[at, col] = new
        logps[at, col] = torch.log_softmax(x, dim=-1).gather(1, new[:, None])[:, 0]
        count[:R] += was.long()
        ended = was & (ends_answer(new, eos) | (count[:R] >= max_new))
        if stop is not None:
            ended |= was & stop.step(state[:R], new)  # a view: the automata advance in place
        live[:R] = was & ~ended
        i_step += 1
        done: dict[int, int] = {}  # slot -> its cache length once the answer's end is read
        if i_step % every == 0:
            flags = live[:R].tolist()
            ended_slots = [s for s in range(R) if not flags[s]]
            if ended_slots:
                lengths = count[ended_slots].tolist()
                toks, lps = tokens[ended_slots].tolist(), logps[ended_slots].tolist()
                for s, g, t, lp in zip(ended_slots, lengths, toks, lps):
                    gen_tokens += g
                    kv_real += work.kv_needed(turn_start[s], g)
                    # The answer's last token was never fed (or fed, then dropped): the next
                    # turn's prefill starts with it.
                    done[s] = turn_start[s] + g - 1
                    if not on_turn(episode[s], t[:g], lp[:g]):
                        done[s] = -1  # the episode is over
        if len(done) < R:
            # One decode step over the live slots as a view: each feeds the token it just sampled
            # (a slot whose answer ended feeds a pad, undone just below).
            logits[:R] = cache.decode(model, new)
            steps += 1
            row_steps += rows_bucket(R) if static else R
        for s, n in done.items():
            cache.set_length(s, max(n, 0))
        for s in sorted((s for s, n in done.items() if n < 0), reverse=True):
            R -= 1  # finished slots go from the highest down, so slot R is never a finished one
            del done[s]
            if s != R:
                move(R, s)
                if R in done:
                    done[s] = done.pop(R)  # the moved slot's own end: admitted below
        again = sorted(s for s, n in done.items() if n >= 0 and s < R)
        if again:
            admit(again)
    work.add(
        "rollout", generate_calls=1, decode_steps=steps, decode_row_steps=row_steps, gen_tokens=gen_tokens
    )
    work.add("rollout", decode_kv_read=cache.kv_read, decode_kv_real=kv_real)
    work.add_decode_call(steps)
