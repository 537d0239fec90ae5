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
"""

from __future__ import annotations

import torch

from ragen_lib import models, work
from ragen_lib.generation import LIVENESS_EVERY, StopOnText, sample

LENGTH_STEP = 256
"""Cache columns are allocated in multiples of this; a row that needs more grows every slot."""


class RaggedKV:
    """Per-slot contiguous keys and values, speaking the HF cache protocol (`update`) for the
    forwards `forward` runs: each forward writes W new columns for its rows, row r's at
    n[r]…n[r]+W-1, and attends over the first max(n)+W columns under its own 4-D mask."""

    def __init__(self, model, slots: int, length: int):
        cfg = model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        device, dtype = next(model.parameters()).device, models.compute_dtype(model)
        shape = (slots, heads, length, dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.n = [0] * slots  # host: the columns each slot holds (no device read needed)
        self.length = length

    def reserve(self, columns: int) -> None:
        """Make room for `columns` columns in every slot (rounded up to LENGTH_STEP)."""
        if columns <= self.length:
            return
        new = -(-columns // LENGTH_STEP) * LENGTH_STEP
        grow = lambda x: torch.cat([x, x.new_zeros((*x.shape[:2], new - self.length, x.shape[3]))], dim=2)  # noqa: E731
        self.k, self.v = [grow(x) for x in self.k], [grow(x) for x in self.v]
        self.length = new

    def copy_slot(self, src: int, dst: list[int]) -> None:
        """Give slots `dst` the columns of slot `src` (a group's shared first prompt)."""
        n = self.n[src]
        for x in (*self.k, *self.v):
            x[dst, :, :n] = x[src, :, :n]
        for d in dst:
            self.n[d] = n

    def _begin(self, rows: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Set up a forward of `width` new columns for `rows`: returns (position ids (R, W), 4-D
        mask (R, 1, W, read)). Row r's query i sees columns ≤ n[r] + i: its past and itself."""
        device = self.k[0].device
        start = torch.tensor([self.n[r] for r in rows], device=device)
        self.reserve(max(self.n[r] for r in rows) + width)
        self._read = max(self.n[r] for r in rows) + width
        self._all = rows == list(range(len(self.n)))
        self._rows = torch.tensor(rows, device=device)
        pos = start[:, None] + torch.arange(width, device=device)[None]
        self._cols = pos
        mask = torch.arange(self._read, device=device)[None, None, :] <= pos[:, :, None]
        return pos, mask[:, None]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        out = []
        for store, new in ((self.k[layer_idx], key_states), (self.v[layer_idx], value_states)):
            store[self._rows[:, None], :, self._cols] = new.transpose(1, 2).to(store.dtype)
            # A view when the forward is over every slot in order (most decode steps), else a copy.
            out.append(store[:, :, : self._read] if self._all else store[self._rows, :, : self._read])
        return tuple(out)

    def forward(self, model, rows: list[int], ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Feed row rows[j] its tokens ids[j, :lengths[j]] (right-padded, on the device) at its next
        columns; float32 logits (R, V) of each row's next token."""
        device = self.k[0].device
        pos, mask = self._begin(rows, ids.shape[1])
        if work.active() is not None:
            work.add("rollout", prefill_tokens=ids.numel(), prefill_real=sum(lengths))
        impl = model.config._attn_implementation
        if impl == "eager":  # eager adds the mask to the scores
            mask = torch.zeros(mask.shape, device=device).masked_fill(~mask, torch.finfo(torch.float32).min)
        elif impl != "sdpa":
            raise ValueError(
                f"rollout.batching=continuous gives each row its own 4-D attention mask, which the "
                f"model's attention {impl!r} does not take; load it with sdpa or eager attention, "
                "or use rollout.batching=turn"
            )
        with models.autocast(model):
            hidden = model.base_model(
                input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=self, use_cache=True
            ).last_hidden_state
        for r, n in zip(rows, lengths):
            self.n[r] += n
        # The head on each row's last real position only (right padding: not the last column).
        last = hidden[torch.arange(len(rows), device=device), torch.tensor(lengths, device=device) - 1]
        return models.lm_logits(model, last[:, None])[:, -1]


def _right_pad(seqs: list[list[int]], device) -> torch.Tensor:
    out = torch.zeros((len(seqs), max(map(len, seqs))), dtype=torch.long)
    for j, s in enumerate(seqs):
        out[j, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out.to(device)


def play(model, tracks, start: list[int], max_new: int, on_turn, *, temperature: float, eos: int, pad: int,
         stop: StopOnText | None, generator, group_size: int) -> None:  # fmt: skip
    """Decode every episode to its end. `tracks[i].ids` is row i's conversation; `start` the rows
    that play a first turn. `on_turn(i, tokens, logps)` is called when row i's turn ends: it steps
    the env, extends the track, and returns True when row i plays another turn (its track then
    ends with the next generation prompt). `group_size` > 1: contiguous groups of identical first
    prompts, each prefilled once and its cache copied to the group's rows."""
    device = next(model.parameters()).device
    S = len(tracks)
    cache = RaggedKV(model, S, -(-(max(len(t.ids) for t in tracks) + max_new) // LENGTH_STEP) * LENGTH_STEP)
    logits = None  # (S, V) float32: each row's next-token logits, written by prefills and decodes
    tokens = torch.full((S, max_new + 1), pad, dtype=torch.long, device=device)  # + a column for pads
    logps = torch.zeros((S, max_new + 1), device=device)
    count = torch.zeros(S, dtype=torch.long, device=device)  # tokens sampled this turn
    live = torch.zeros(S, dtype=torch.bool, device=device)
    state = stop.start(S, device) if stop is not None else None
    turn_start = [0] * S
    every = LIVENESS_EVERY.get(device.type, 1)

    def admit(rows: list[int]) -> None:
        nonlocal logits
        lead = rows
        if (
            group_size > 1
            and len(rows) == S
            and all(tracks[i].ids == tracks[i - i % group_size].ids for i in rows)
        ):
            lead = rows[::group_size]
        segments = [tracks[i].ids[cache.n[i] :] for i in lead]
        out = cache.forward(model, lead, _right_pad(segments, device), [len(s) for s in segments])
        if lead is not rows:
            for leader in lead:
                cache.copy_slot(leader, list(range(leader + 1, leader + group_size)))
            out = out.repeat_interleave(group_size, dim=0)
        if logits is None:
            logits = out.new_zeros((S, out.shape[1]))
        index = torch.tensor(rows, device=device)
        logits[index] = out
        live[index], count[index] = True, 0
        if state is not None:
            state[index] = 0
        for i in rows:
            turn_start[i] = cache.n[i]

    rows = sorted(start)
    if rows:
        admit(rows)
    steps = row_steps = gen_tokens = 0
    i_step = 0
    while rows:
        at = torch.tensor(rows, device=device)
        x = logits[at]
        was = live[at]
        new = torch.where(was, sample(x, temperature, generator), pad)
        col = count[at]
        tokens[at, col] = new
        logps[at, col] = torch.log_softmax(x, dim=-1).gather(1, new[:, None])[:, 0]
        count[at] = col + was.long()
        ended = was & ((new == eos) | (count[at] >= max_new))
        if stop is not None:
            sub = state[at]
            ended |= was & stop.step(sub, new)
            state[at] = sub
        live[at] = was & ~ended
        i_step += 1
        admitted: list[int] = []
        if i_step % every == 0:
            flags = live[at].tolist()
            done = [r for r, f in zip(rows, flags) if not f]
            if done:
                lengths = count[done].tolist()
                toks, lps = tokens[done].tolist(), logps[done].tolist()
                for r, g, t, lp in zip(done, lengths, toks, lps):
                    gen_tokens += g
                    cache.n[r] = turn_start[r] + g - 1  # the last token was never fed (or fed, then dropped)
                    if on_turn(r, t[:g], lp[:g]):
                        admitted.append(r)
                keep = [j for j, r in enumerate(rows) if r not in set(done)]
                rows, new = [rows[j] for j in keep], new[torch.tensor(keep, dtype=torch.long, device=device)]
        if rows:
            # One decode step: each row feeds the token it just sampled (a row that ended since
            # the last read feeds a pad, dropped when its end is read).
            logits[torch.tensor(rows, device=device)] = cache.forward(
                model, rows, new[:, None], [1] * len(rows)
            )
            steps += 1
            row_steps += len(rows)
        if admitted:
            admit(admitted)
            rows = sorted(rows + admitted)
    work.add(
        "rollout", generate_calls=1, decode_steps=steps, decode_row_steps=row_steps, gen_tokens=gen_tokens
    )
    work.add_decode_call(steps)
