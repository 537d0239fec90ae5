"""Continuous batching of episodes (rollout.batching=continuous, ragen_lib/engine.py)."""

import pytest
import torch

from ragen_lib import config, generation, models, rollout, work
from ragen_lib.config import RolloutConfig
from ragen_lib.rollout import collect


@pytest.fixture(scope="module")
def tiny():
    return models.load(models.TINY_RANDOM, device="cpu")


def _collect(tiny, env="sokoban", **kw):
    model, tok = tiny
    kw = dict(dict(max_new_tokens=10, max_turns=3), **kw)
    return collect(model, tok, env, [2, 7, 9], 3, RolloutConfig(**kw), sample_seed=4)


@pytest.mark.parametrize("stop_at_answer,kv_cache", [(False, "dynamic"), (True, "dynamic"), (True, "static")])
def test_greedy_continuous_batching_plays_the_episodes_of_turn_batching(tiny, stop_at_answer, kv_cache):
    """Greedy decoding does not depend on how rows share the batch: the same episodes, token for
    token, over turns where rows end their answers and their episodes at different steps; and with
    static decode steps (rows rounded up to a power of two, every cache column read)."""
    kw = dict(temperature=0.0, stop_at_answer=stop_at_answer)
    with work.counting() as t:
        turn = _collect(tiny, **kw)
    with work.counting() as k:
        cont = _collect(tiny, batching="continuous", kv_cache=kv_cache, **kw)
    # Greedy rows of a group stay identical, and the engine prefills a group once whenever its
    # rows are (turn batching: the first turn only), so it prefills fewer tokens, never more.
    assert k["rollout"]["prefill_real"] < t["rollout"]["prefill_real"]
    assert torch.equal(turn.input_ids, cont.input_ids) and torch.equal(turn.loss_mask, cont.loss_mask)
    assert turn.responses == cont.responses and torch.equal(turn.num_turns, cont.num_turns)
    assert turn.rewards.tolist() == cont.rewards.tolist()
    assert ((turn.sample_logprobs - cont.sample_logprobs) * turn.loss_mask).abs().max() < 1e-4


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_sampled_trajectories_have_the_log_probs_of_a_full_sequence_forward(tiny, kv_cache):
    """The behaviour log-probs the engine records are those of one forward over each finished
    conversation (what the update computes): each row's cache holds its tokens at their true
    positions, however the rows' turns interleaved (and, static, whatever the free slots that
    round the rows up compute)."""
    model, _ = tiny
    b = _collect(tiny, batching="continuous", kv_cache=kv_cache, temperature=1.0, stop_at_answer=False)
    assert b.num_turns.min() >= 2 and len({len(r) for resp in b.responses for r in resp}) > 1
    with torch.no_grad():
        logp, _ = models.forward_logp(model, b.input_ids, b.attention_mask, b.loss_mask, with_entropy=False)
    assert ((logp - b.sample_logprobs) * b.loss_mask).abs().max() < 1e-4
    assert (b.sample_logprobs * (1 - b.loss_mask)).abs().max() == 0


def _turn_lengths(b) -> list[list[int]]:
    """Tokens generated per turn, per row: the runs of the loss mask (turns are separated by the
    env's reply, outside the mask)."""
    out = []
    for row in b.loss_mask.long().tolist():
        runs, n = [], 0
        for m in row + [0]:
            if m:
                n += 1
            elif n:
                runs, n = runs + [n], 0
        out.append(runs)
    return out


def test_a_row_whose_answer_ends_early_starts_its_next_turn_without_waiting(tiny, monkeypatch):
    """Work counters. Turn batching decodes each turn until its slowest answer ends; continuous
    batching decodes until the slowest episode ends, at most (its tokens - 1) steps, and only the
    episodes still playing, here where a stop string ends the answers at uneven lengths."""
    model, tok = tiny
    # The random model writes "a" now and then: answers of uneven lengths.
    monkeypatch.setattr(rollout, "stop_on_text", lambda tok, *_: generation.StopOnText(tok, ("a",)))
    cfg = dict(max_new_tokens=16, max_turns=3)
    counts = {}
    for batching in ("turn", "continuous"):
        with work.counting() as c:
            b = collect(model, tok, "sokoban", list(range(8)), 2, RolloutConfig(batching=batching, **cfg),
                        sample_seed=1)  # fmt: skip
        counts[batching] = (_turn_lengths(b), dict(c["rollout"]))
    # Episodes ended at different steps, so live slots moved into finished ones' places: each
    # conversation's log-probs are still those of one forward over it.
    assert len({sum(r) for r in counts["continuous"][0]}) > 3
    with torch.no_grad():
        logp, _ = models.forward_logp(model, b.input_ids, b.attention_mask, b.loss_mask, with_entropy=False)
    assert ((logp - b.sample_logprobs) * b.loss_mask).abs().max() < 1e-4
    (turn_lengths, t), (cont_lengths, k) = counts["turn"], counts["continuous"]
    per_turn = [[r[j] for r in turn_lengths if len(r) > j] for j in range(3)]
    assert t["decode_steps"] == sum(max(x) - 1 for x in per_turn if x)
    assert k["decode_steps"] <= max(map(sum, cont_lengths)) - 1
    # Row-steps (rows in each decode forward, what a step costs): turn batching carries every row of
    # the turn to its slowest answer's end (368 here), continuous only the live ones (165).
    assert k["decode_row_steps"] < t["decode_row_steps"] / 1.5
    assert k["generate_calls"] == 1
    # A prefill per turn with turn batching; the engine prefills whenever answers ended since the
    # last liveness read: more prefill forwards, each smaller (what a GPU run weighs).
    assert t["prefill_calls"] == t["generate_calls"] == len(per_turn) < k["prefill_calls"]
    # Attention reads per column the tokens need (`work.kv_needed`): turn batching reads its
    # finished rows and left padding too (3.8× here), the engine the live rows up to the longest
    # (1.7×).
    assert k["decode_kv_read"] / k["decode_kv_real"] < t["decode_kv_read"] / t["decode_kv_real"] / 1.5


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_reading_liveness_every_few_steps_plays_the_same_greedy_episodes(tiny, monkeypatch, kv_cache):
    """As on a GPU: rows that ended decode pads until the next read, then their caches roll back."""
    # 14 new tokens: answers end between reads.
    kw = dict(temperature=0.0, max_new_tokens=14, batching="continuous", kv_cache=kv_cache)
    with work.counting() as c1:
        every_step = _collect(tiny, **kw)
    monkeypatch.setitem(generation.LIVENESS_EVERY, "cpu", 4)
    with work.counting() as c4:
        every_four = _collect(tiny, **kw)
    assert torch.equal(every_step.input_ids, every_four.input_ids) and every_step.num_turns.min() == 3
    diff = (every_step.sample_logprobs - every_four.sample_logprobs) * every_step.loss_mask
    assert diff.abs().max() < 1e-4
    # Every answer runs to the cap: 13 decode steps per turn; between reads, pad steps ran.
    assert c1["rollout"]["decode_steps"] == 3 * 13 < c4["rollout"]["decode_steps"]


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_a_decode_step_copies_nothing_from_the_host(tiny, monkeypatch, kv_cache):
    """On a GPU a tensor built from a Python list is a synchronous copy, once per decode step if the
    positions came from the host's lengths. A decode step reads the device's lengths instead, and
    those stay equal to the host's through admissions, roll-backs (liveness read every 3 steps)
    and slot moves (episodes end at different steps)."""
    from ragen_lib import engine

    decode, building = engine.RaggedKV.decode, []
    real_tensor = torch.tensor

    def tensor(*args, **kwargs):
        if building:
            raise AssertionError("a decode step built a tensor from host data")
        return real_tensor(*args, **kwargs)

    def checked(self, model, new):
        assert self.n_dev.tolist() == self.n + [0] * self.static  # static: the scratch slot stays empty
        building.append(True)
        try:
            return decode(self, model, new)
        finally:
            building.pop()
            assert self.n_dev.tolist() == self.n + [0] * self.static

    monkeypatch.setattr(torch, "tensor", tensor)
    monkeypatch.setattr(engine.RaggedKV, "decode", checked)
    monkeypatch.setitem(generation.LIVENESS_EVERY, "cpu", 3)
    with work.counting() as c:
        b = _collect(tiny, batching="continuous", kv_cache=kv_cache, temperature=1.0, stop_at_answer=False)
    assert c["rollout"]["decode_steps"] > 10 and len({len(r) for resp in b.responses for r in resp}) > 1


def test_a_decode_step_attends_on_the_key_value_heads_as_they_are(tiny, monkeypatch):
    """The tiny model has 2 query heads per K/V head. A one-token decode step with the engine's
    (R, 1, 1, L) mask runs on the K/V heads as stored (transformers >= 5.23 does it, else
    `ragen_lib.attention`, which `models.load` installs); only prefills copy them per query head."""
    from transformers.integrations import sdpa_attention

    from ragen_lib import engine

    forward, decoding, copies = engine.RaggedKV.forward, [], {True: 0, False: 0}
    repeat_kv = sdpa_attention.repeat_kv

    def counted(x, n_rep):
        copies[decoding[-1]] += n_rep > 1
        return repeat_kv(x, n_rep)

    def flagged(self, model, rows, ids, lengths):
        decoding.append(ids.shape[1] == 1)
        try:
            return forward(self, model, rows, ids, lengths)
        finally:
            decoding.pop()

    monkeypatch.setattr(sdpa_attention, "repeat_kv", counted)
    monkeypatch.setattr(engine.RaggedKV, "forward", flagged)
    _collect(tiny, batching="continuous", temperature=1.0, max_turns=2)
    assert copies[True] == 0 and copies[False] > 0  # prefills copy: the count sees them


def test_static_decode_steps_keep_their_cache_and_graphs_from_rollout_to_rollout(tiny, monkeypatch):
    """Static: the cache (with the CUDA graph of each row count; on the CPU the count of steps
    prepared) is kept per model, so a second rollout of the same shapes prepares nothing new; a
    moved parameter storage (`load_state_dict(assign=True)`, `.to()`) makes it prepare again,
    since a graph reads the old addresses. Rows run rounded up to a power of two."""
    from ragen_lib import engine

    model, _ = tiny
    generation.release(model)
    kw = dict(batching="continuous", kv_cache="static", temperature=1.0, stop_at_answer=False)
    with work.counting() as c:
        _collect(tiny, **kw)
    (cache,) = [x for x in generation.static_decoders(model).values() if isinstance(x, engine.RaggedKV)]
    assert cache.static and len(cache.n) == 16 and cache.captures >= len(cache.graphs) >= 1
    # A rollout that grows the cache drops its graphs (they read the old tensors): the next one
    # captures the column buckets it meets below the new length again, and then none.
    _collect(tiny, **kw)
    first = cache.captures
    _collect(tiny, **kw)
    assert cache.captures == first  # same row and column buckets, same length: nothing prepared again
    model.load_state_dict(model.state_dict(), assign=True)  # same values, new storage
    _collect(tiny, **kw)
    assert cache.captures > first
    # 9 episodes decode as 16 rows (then 8, 4...): the row-steps count the rounding.
    assert c["rollout"]["decode_row_steps"] > 1.3 * c["rollout"]["gen_tokens"]
    generation.release(model)
    assert generation.static_decoders(model) == {}


def test_batching_is_checked_and_hash_neutral():
    with pytest.raises(ValueError, match="rollout.batching"):
        config.from_dict({"rollout": {"batching": "paged"}})
    assert config.Config().hash() == config.from_dict({"rollout": {"batching": "turn"}}).hash()
    assert config.Config().hash() != config.from_dict({"rollout": {"batching": "continuous"}}).hash()


def test_columns_bucket_by_hand():
    from ragen_lib.engine import LENGTH_STEP, columns_bucket

    assert LENGTH_STEP == 256
    got = [columns_bucket(n) for n in (1, 256, 257, 384, 385, 513, 769, 1025, 1537)]
    assert got == [256, 256, 384, 384, 512, 768, 1024, 1536, 2048]


@pytest.mark.parametrize("batching", ["turn", "continuous"])
def test_one_episode_decodes_reading_exactly_the_columns_it_needs(tiny, batching):
    """Work counters for the decode attention: one episode has no padding rows and no padding
    columns, so with the dynamic cache its decode steps read exactly `work.kv_needed` columns,
    summed over its answers: Σ over each answer's tokens k ≥ 1 of (tokens before the answer + k)."""
    model, tok = tiny
    kw = dict(max_new_tokens=10, max_turns=3, temperature=0.0, stop_at_answer=False)
    cfg = RolloutConfig(batching=batching, **kw)
    with work.counting() as c:
        b = collect(model, tok, "sokoban", [2], 1, cfg, sample_seed=4)
    assert b.num_turns.tolist() == [3]
    mask = b.loss_mask[0].long().tolist()
    real = b.attention_mask[0].long().tolist()
    needed = 0
    for j, m in enumerate(mask):
        if m and not mask[j - 1]:  # an answer starts: the conversation so far is its context
            before, k = sum(real[:j]), 0
        if m:
            needed += before + k if k >= 1 else 0  # token k ≥ 1 of the answer
            k += 1
    assert c["rollout"]["decode_kv_real"] == needed == c["rollout"]["decode_kv_read"] > 0


def test_static_decode_steps_read_the_columns_of_this_rollout_not_of_the_longest_one_before(tiny):
    """The pooled static cache keeps the length of the longest rollout it served; a decode step
    reads the columns of the longest live row, rounded up (`columns_bucket`), not that length."""
    model, tok = tiny
    kw = dict(temperature=0.0, stop_at_answer=False, batching="continuous", kv_cache="static", max_turns=3)

    def reads(max_new: int) -> int:
        with work.counting() as c:
            cfg = RolloutConfig(max_new_tokens=max_new, **kw)
            collect(model, tok, "sokoban", [2, 7], 1, cfg, sample_seed=4)
        return c["rollout"]["decode_kv_read"], c["rollout"]["decode_kv_real"]

    generation.release(model)
    fresh, real = reads(10)
    long_rollout, _ = reads(300)  # grows the pooled cache past 1,000 columns
    (cache,) = generation.static_decoders(model).values()
    assert cache.length >= 1024
    assert reads(10) == (fresh, real)
    generation.release(model)


def test_a_static_admission_computes_what_an_exact_one_does_and_touches_no_other_slot(tiny):
    """Static admissions run at bucketed shapes (3 rows as 4, 5 tokens as 16): the logits and the
    cache of the rows admitted are those of the exact-shape admission, the padding row writes into
    the scratch slot only, and other slots are not touched. Two admissions: a first prompt, then a
    turn's reply after cached columns."""
    from ragen_lib import engine

    model, _ = tiny
    exact = engine.RaggedKV(model, 8, 256)
    static = engine.RaggedKV(model, 8, 256, static=True)
    rows = [5, 0, 2]
    g = torch.Generator().manual_seed(0)
    for widths in ((7, 3, 5), (2, 9, 4)):
        segments = [torch.randint(1, 100, (w,), generator=g).tolist() for w in widths]
        with torch.no_grad():
            with work.counting() as c:
                got = static.prefill(model, rows, segments)
            want = exact.prefill(model, rows, segments)
        assert (got - want).abs().max() < 1e-5
        assert c["rollout"] == {"prefill_calls": 1, "prefill_tokens": 4 * 16, "prefill_real": sum(widths)}
        assert static.n == exact.n and static.n_dev.tolist() == exact.n + [0]
    n = static.n
    for s, (k_static, k_exact) in enumerate(zip(static.k[0], exact.k[0])):
        if s in rows:
            assert (k_static[:, : n[s]] - k_exact[:, : n[s]]).abs().max() < 1e-5
        elif s < 8:
            assert not k_static.any()  # never admitted: untouched
    assert static.k[0][static.scratch].any()  # the padding row wrote there
    assert len([k for k in static.graphs if k[0] == "prefill"]) == 1  # same (rows, width, columns)


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_the_engine_records_no_autograd_graph(tiny, monkeypatch, kv_cache):
    """The trainer plays its rollouts with grad enabled (the policy trains): the engine's forwards
    must record nothing, or each step's activations stay alive through the logits buffer until the
    rollout ends (measured before the fix: +160 MB of live tensors per decode step, real model)."""
    from ragen_lib import engine

    hidden, grad = engine.RaggedKV._hidden, []

    def recorded(self, *a, **k):
        grad.append(torch.is_grad_enabled())
        return hidden(self, *a, **k)

    monkeypatch.setattr(engine.RaggedKV, "_hidden", recorded)
    assert torch.is_grad_enabled()
    _collect(tiny, batching="continuous", kv_cache=kv_cache, temperature=1.0)
    assert len(grad) > 10 and not any(grad)


@pytest.mark.parametrize("batching", ["turn", "continuous"])
def test_an_answer_ends_at_any_end_id_the_models_generation_config_lists(tiny, batching, monkeypatch):
    """Qwen2.5-Instruct's generation config lists <|im_end|> and <|endoftext|>, and RAGEN's vLLM
    rollouts stop at both; we stopped at the tokenizer's <|im_end|> alone, so a reply ended by
    <|endoftext|> ran on to the token budget and what followed was parsed and trained. Here the
    third token of row 0's first greedy answer is made a second end id: the answer ends there
    (kept, as <|im_end|> is), and the template's <|im_end|> closes the turn after it."""
    model, tok = tiny
    kw = dict(temperature=0.0, stop_at_answer=False, batching=batching)
    base = _collect(tiny, **kw)
    first = base.input_ids[0][base.loss_mask[0].bool()].tolist()[: _turn_lengths(base)[0][0]]
    assert len(first) > 3 and tok.eos_token_id not in first[:3]
    end = first[2]
    monkeypatch.setattr(model.generation_config, "eos_token_id", [tok.eos_token_id, end])
    assert generation.end_token_ids(model, tok) == (tok.eos_token_id, end)
    got = _collect(tiny, **kw)
    assert _turn_lengths(got)[0][0] == first.index(end) + 1 and got.num_turns[0] >= 2  # it went on
    after = got.loss_mask[0].tolist().index(1.0) + first.index(end) + 1  # the first token past it
    assert got.loss_mask[0, after] == 0 and got.input_ids[0, after] == tok.eos_token_id
