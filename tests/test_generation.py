import copy
import gc
import pickle
import random

import pytest
import torch

from ragen_lib import generation, models, work
from ragen_lib.config import RolloutConfig
from ragen_lib.generation import StopOnText, generate


@pytest.fixture(scope="module")
def tiny():
    return models.load(models.TINY_RANDOM, device="cpu")


def _prompts(tok):
    texts = ["<think>", "Turn 1:\nState:\n#_P#", "a much longer prompt to force left padding in the batch"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_greedy_matches_hf_generate(tiny):
    """The fast path (our batched, left-padded KV-cache loop) must give exactly the tokens of
    transformers' own greedy decoding of each prompt alone."""
    model, tok = tiny
    prompts = _prompts(tok)
    ours = generate(
        model,
        prompts,
        max_new_tokens=12,
        temperature=0.0,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    for p, got in zip(prompts, ours):
        ref = model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        assert got == ref[0, len(p) :].tolist()


def test_sampling_is_deterministic_given_the_generator(tiny):
    model, tok = tiny
    prompts = _prompts(tok)

    def run(seed, temperature=1.0):
        g = torch.Generator().manual_seed(seed)
        return generate(
            model,
            prompts,
            max_new_tokens=10,
            temperature=temperature,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            generator=g,
        )

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(1, temperature=0.0) == run(2, temperature=0.0)


def _first_stop(stop, ids) -> int | None:
    """Feed `ids` one token per step to `stop`'s automaton; the 1-based step that fires, if any."""
    state = stop.start(1, torch.device("cpu"))
    for n, i in enumerate(ids, start=1):
        if stop.step(state, torch.tensor([i]))[0]:
            return n
    return None


def test_stop_on_text_fires_on_the_token_that_completes_the_stop(tiny):
    _, tok = tiny
    stop = StopOnText(tok, ("</answer>",))
    ids = tok("<think>x</think><answer>Up</answer> trailing", add_special_tokens=False)["input_ids"]
    fired_at = _first_stop(stop, ids)
    assert fired_at is not None
    assert tok.decode(ids[:fired_at]).endswith("</answer>")
    assert "</answer>" not in tok.decode(ids[: fired_at - 1])


def test_a_stop_armed_by_think_skips_an_answer_the_reasoning_quotes(tiny):
    """Think mode parses the answer after the first </think>: stopping at a </answer> quoted in the
    reasoning cut the turn before it, unparsed (-0.1, no action) where RAGEN, generating to EOS,
    parses it."""
    _, tok = tiny
    text = " The format is <answer>Up</answer>, so</think><answer>Up || Left</answer> trailing"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    plain, armed = StopOnText(tok, ("</answer>",)), StopOnText(tok, ("</answer>",), armed_by="</think>")
    cut = tok.decode(ids[: _first_stop(plain, ids)])  # a token may carry the next character
    assert "<answer>Up</answer>" in cut and "</think>" not in cut
    cut = tok.decode(ids[: _first_stop(armed, ids)])
    assert "</think><answer>Up || Left</answer>" in cut and "trailing" not in cut
    # a row re-started for its next turn (a zeroed state) is unarmed again
    state = armed.start(1, torch.device("cpu"))
    for i in ids:
        armed.step(state, torch.tensor([i]))
    state[0] = 0
    quoted = tok(" <answer>Up</answer>", add_special_tokens=False)["input_ids"]
    assert not any(armed.step(state, torch.tensor([i]))[0] for i in quoted)


def test_stop_on_text_agrees_with_decoding_the_text_on_random_token_streams(tiny):
    """The device automaton against the definition (the first prefix whose decoded text contains a
    stop), on streams built from pieces that split the stops at every place, partial matches that
    restart (`<</answer>`, `</ans</answer>`), unrelated tokens and ids the tokenizer does not know;
    two stops at once."""
    _, tok = tiny
    stops = ("</answer>", "</think>")
    stop = StopOnText(tok, stops)
    armed, armed_fired = StopOnText(tok, ("</answer>",), armed_by="</think>"), 0
    pieces = ["<", "/", "a", "n", "s", "w", "e", "r", ">", "</", "answer", "></", "think", "<<", "</ans",
              "wer>", " </answer>", "x", " Up", "\n", "<think>", "</think>"]  # fmt: skip
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in pieces]
    # Ids past the tokenizer's, as a padded vocabulary can sample: they decode to no text, so a
    # partial match goes on across them.
    ids += [[len(tok)], [len(tok) + 270]]
    rng = random.Random(0)
    fired = 0
    for _ in range(300):
        stream = [i for _ in range(rng.randint(1, 12)) for i in rng.choice(ids)]
        want = next(
            (n for n in range(1, len(stream) + 1) if any(s in tok.decode(stream[:n]) for s in stops)), None
        )
        assert _first_stop(stop, stream) == want, tok.decode(stream)
        fired += want is not None
        # armed by </think>: the first token that completes a </answer> once </think> was written
        texts = [tok.decode(stream[:n]) for n in range(len(stream) + 1)]
        want = next(
            (
                n
                for n in range(1, len(stream) + 1)
                if texts[n].count("</answer>") > texts[n - 1].count("</answer>") and "</think>" in texts[n]
            ),
            None,
        )
        assert _first_stop(armed, stream) == want, texts[-1]
        armed_fired += want is not None
    assert 50 < fired < 250  # both outcomes are exercised
    assert 10 < armed_fired < fired


def test_checking_liveness_every_few_steps_changes_no_output(tiny, monkeypatch):
    """On a GPU the loop reads whether any row is live every LIVENESS_EVERY steps; the extra steps
    decode pads that nobody reads: same tokens and log-probs, and a kept cache that still resumes."""
    model, tok = tiny
    prompts = _prompts(tok)
    stop = StopOnText(tok, ("a",))  # rows stop early, at different steps

    def run(every):
        monkeypatch.setitem(generation.LIVENESS_EVERY, "cpu", every)
        kept, logps = generation.KeptKV(), []
        kw = _kw(tok, temperature=1.0, max_new_tokens=24)
        with work.counting() as c:
            first = generate(model, prompts, stop=stop, kept=kept, logprobs=logps,
                             generator=torch.Generator().manual_seed(3), **kw)  # fmt: skip
        second = generate(model, [p + f + [tok.eos_token_id] for p, f in zip(prompts, first)], stop=stop,
                          kept=kept, generator=torch.Generator().manual_seed(4), **kw)  # fmt: skip
        return first, logps, second, c["rollout"]["decode_steps"]

    (a, la, a2, steps_a), (b, lb, b2, steps_b) = run(1), run(5)
    assert a == b and a2 == b2 and la == lb
    assert steps_a == max(map(len, a)) - 1 < steps_b  # the period's extra steps ran, and changed nothing


def _kw(tok, **over):
    return dict(
        dict(
            max_new_tokens=12, temperature=0.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
        ),
        **over,
    )


def test_static_cache_gives_the_tokens_of_the_dynamic_cache(tiny):
    """The static path (preallocated, bucketed cache; CUDA graphs on a GPU) decodes the same
    tokens as the dynamic one: greedy, with group prefix sharing, and with a stop string."""
    model, tok = tiny
    prompts = _prompts(tok)
    assert generate(model, prompts, kv_cache="static", **_kw(tok)) == generate(model, prompts, **_kw(tok))
    grouped = [p for p in prompts for _ in range(3)]
    stop = StopOnText(tok, ("a",))  # fires early on some rows of the random model
    a = generate(model, grouped, group_size=3, kv_cache="static", stop=stop, **_kw(tok))
    b = generate(model, grouped, stop=stop, **_kw(tok))
    assert a == b
    assert len({len(r) for r in a}) > 1  # rows stopped at different lengths


def test_static_cache_draws_the_same_samples_and_is_reusable(tiny):
    """A second call with the same (rows, bucketed length) reuses the pooled cache; reset must
    leave nothing of the first call behind."""
    model, tok = tiny
    prompts = _prompts(tok)
    kw = _kw(tok, temperature=1.0, eos_token_id=-1)
    ref = generate(model, prompts, generator=torch.Generator().manual_seed(5), **kw)
    first = generate(model, prompts, kv_cache="static", generator=torch.Generator().manual_seed(5), **kw)
    again = generate(model, prompts, kv_cache="static", generator=torch.Generator().manual_seed(5), **kw)
    assert ref == first == again
    assert (4, generation.LENGTH_BUCKET, torch.float32, "sdpa") in generation.static_decoders(
        model
    )  # 3 rows → 4


def test_unknown_kv_cache_is_an_error_naming_the_choices(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="dynamic"):
        generate(model, _prompts(tok), kv_cache="paged", **_kw(tok))


def test_static_pool_size_zero_keeps_nothing_and_still_decodes(tiny, monkeypatch):
    model, tok = tiny
    prompts = _prompts(tok)
    monkeypatch.setattr(generation, "POOL_SIZE", 0)
    generation.release(model)
    got = generate(model, prompts, kv_cache="static", **_kw(tok))
    assert got == generate(model, prompts, **_kw(tok))
    assert generation.static_decoders(model) == {}


@pytest.fixture
def fresh():
    """A model of its own: these tests change its decoders or its storage."""
    return models.load(models.TINY_RANDOM, device="cpu")


def test_decoders_live_outside_the_model_so_deepcopy_and_pickle_never_see_them(fresh):
    """The reference is `copy.deepcopy(policy)` after a warm-up that may have generated: the copy
    must not drag KV caches or CUDA graphs along (nor fail on them), and must decode on its own."""
    model, tok = fresh
    prompts = _prompts(tok)
    size_before = len(pickle.dumps(model))
    want = generate(model, prompts, kv_cache="static", **_kw(tok))
    assert generation.static_decoders(model)
    assert not any("decoder" in k for k in vars(model))
    assert len(pickle.dumps(model)) == size_before  # nothing of the decoders in a pickle
    twin = copy.deepcopy(model)
    assert generation.static_decoders(twin) == {}
    assert generate(twin, prompts, kv_cache="static", **_kw(tok)) == want
    (d_model,), (d_twin,) = (
        generation.static_decoders(model).values(),
        generation.static_decoders(twin).values(),
    )
    assert d_model is not d_twin and d_model.cache is not d_twin.cache
    # The map holds the model weakly: its decoders go with it.
    kept = len(generation._DECODERS)
    del twin, d_twin
    gc.collect()
    assert len(generation._DECODERS) == kept - 1


def test_row_buckets_are_reused_across_calls_and_turns(fresh):
    """Rows are rounded up to a power of two, so calls with 3 and 4 live rows share a decoder,
    and a multi-turn rollout captures each (rows, length) shape once, not once per turn."""
    from ragen_lib.rollout import collect

    model, tok = fresh
    prompts = _prompts(tok)
    four = prompts + prompts[:1]
    generate(model, prompts, kv_cache="static", **_kw(tok))
    (first,) = generation.static_decoders(model).values()
    assert generate(model, four, kv_cache="static", **_kw(tok)) == generate(model, four, **_kw(tok))
    assert generate(model, prompts[:2], kv_cache="static", **_kw(tok)) == generate(
        model, prompts[:2], **_kw(tok)
    )
    pool = generation.static_decoders(model)
    assert [k[0] for k in pool] == [4, 2] and pool[(4, 256, torch.float32, "sdpa")] is first
    assert {d.captures for d in pool.values()} == {1}

    cfg = RolloutConfig(max_new_tokens=8, max_turns=3, kv_cache="static")
    generation.release(model)
    a = collect(model, tok, "sokoban", seeds=[1, 2, 3], group_size=2, cfg=cfg, sample_seed=0)
    shapes = dict(generation.static_decoders(model))
    b = collect(model, tok, "sokoban", seeds=[1, 2, 3], group_size=2, cfg=cfg, sample_seed=0)
    assert torch.equal(a.input_ids, b.input_ids)
    assert generation.static_decoders(model) == shapes  # the same decoder objects, none new
    assert all(d.captures == 1 for d in shapes.values())
    assert {k[0] for k in shapes} <= {8}  # 6 rows, fewer on later turns: one bucket here


def test_a_change_of_parameter_storage_makes_the_decoder_recapture(fresh):
    """A captured graph reads the parameters at the addresses they had at capture; `.to()` and
    `load_state_dict(assign=True)` move them. The decoder notices and re-captures (on CPU the
    capture is a no-op, but it is counted the same), and decodes the moved weights."""
    model, tok = fresh
    prompts = _prompts(tok)
    generate(model, prompts, kv_cache="static", **_kw(tok))
    (decoder,) = generation.static_decoders(model).values()
    generate(model, prompts, kv_cache="static", **_kw(tok))
    assert decoder.captures == 1  # same storage: replayed
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # in place (what an optimizer step does): same storage, no re-capture
    generate(model, prompts, kv_cache="static", **_kw(tok))
    assert decoder.captures == 1

    model.to(torch.float64).to(torch.float32)  # new storage for every parameter
    assert generate(model, prompts, kv_cache="static", **_kw(tok)) == generate(model, prompts, **_kw(tok))
    assert decoder.captures == 2
    state = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}
    model.load_state_dict(state, assign=True)
    assert generate(model, prompts, kv_cache="static", **_kw(tok)) == generate(model, prompts, **_kw(tok))
    assert decoder.captures == 3


def test_the_write_position_is_checked(fresh):
    model, tok = fresh
    generate(model, _prompts(tok), kv_cache="static", **_kw(tok))
    (decoder,) = generation.static_decoders(model).values()
    decoder.finish()  # in step after a call
    decoder.cache.layers[1].cumulative_length.add_(1)  # the device counter drifts from the host's
    with pytest.raises(RuntimeError, match="out of step"):
        decoder.finish()
    decoder.t = decoder.length
    with pytest.raises(RuntimeError, match="cache full"):
        decoder(torch.zeros(decoder.live, dtype=torch.long), torch.zeros((decoder.live, 1), dtype=torch.long))


def _continuations(model, tok, prompts):
    g = torch.Generator().manual_seed(0)
    return generate(model, prompts, generator=g, **_kw(tok, temperature=1.0, eos_token_id=-1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_static_and_dynamic_log_probs_agree_with_the_training_forward(dtype):
    """The agreement check compares teacher-forced log-probs of the same tokens, by the static
    and dynamic decoders and by the update's forward, within the compute dtype's tolerance."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu", dtype=dtype)
    prompts = [p for p in _prompts(tok) for _ in range(2)]
    conts = _continuations(model, tok, prompts)
    got = generation.logprob_agreement(model, prompts, conts, pad_token_id=tok.pad_token_id)
    assert got["ok"], got
    assert got["dtype"] == dtype and got["tokens"] == sum(map(len, conts))
    if dtype == "float32":
        assert got["static_vs_dynamic"]["max_abs"] < 1e-5


def test_the_agreement_check_fails_on_a_broken_static_path(monkeypatch):
    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    prompts = _prompts(tok)
    conts = _continuations(model, tok, prompts)
    real = generation._StaticDecoder.__call__
    monkeypatch.setattr(
        generation._StaticDecoder, "__call__", lambda self, new, pos: real(self, new, pos + 7)
    )
    got = generation.logprob_agreement(model, prompts, conts, pad_token_id=tok.pad_token_id)
    assert not got["ok"] and got["static_vs_dynamic"]["max_abs"] > 1e-3


class _StopAt:
    """Stops row i after `lengths[i]` new tokens: rows that end at different steps, so the kept
    cache holds pad tokens fed after a row's end, which its mask must hide."""

    def __init__(self, lengths):
        self.lengths = torch.tensor(lengths)

    def start(self, rows, device):
        return torch.zeros((rows, 1), dtype=torch.long, device=device)  # tokens seen so far

    def step(self, state, new):
        state += 1
        return self.lengths == state[:, 0]


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_a_kept_cache_resumes_each_row_and_its_log_probs_match_one_forward(tiny, kv_cache):
    """Three calls, each prompt the last prompt + what was generated + a reply of its own length,
    rows dropping out between calls: the sampler's log-probs of every generated token equal those
    of one forward over the finished sequence, and the samples equal those of a fresh prefill."""
    model, tok = tiny
    replies = [
        tok(t, add_special_tokens=False)["input_ids"] for t in ("ok", "State:\n#P_#", "a longer reply")
    ]
    prompts = _prompts(tok)

    def play(kept):
        seqs, gen_at = {k: list(p) for k, p in enumerate(prompts)}, {k: [] for k in range(3)}
        logps = {k: [] for k in range(3)}
        g = torch.Generator().manual_seed(3)
        for turn, live in enumerate([[0, 1, 2], [0, 1, 2], [0, 2]]):
            lp: list = []
            out = generate(
                model,
                [seqs[k] for k in live],
                max_new_tokens=6,
                temperature=1.0,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
                stop=_StopAt([2, 6, 4][: len(live)] if turn < 2 else [5, 1]),
                generator=g,
                kv_cache=kv_cache,
                kept=kept,
                keys=live,
                logprobs=lp,
            )
            for k, o, p in zip(live, out, lp):
                gen_at[k] += range(len(seqs[k]), len(seqs[k]) + len(o))
                logps[k] += p
                seqs[k] += o + replies[(k + turn) % 3]
        return seqs, gen_at, logps

    seqs, gen_at, logps = play(generation.KeptKV())
    fresh_seqs, _, fresh_logps = play(None)
    assert seqs == fresh_seqs
    for k in range(3):
        ids = torch.tensor([seqs[k]])
        mask = torch.zeros_like(ids, dtype=torch.float)
        mask[0, gen_at[k]] = 1
        with torch.no_grad():
            logp, _ = models.forward_logp(model, ids, torch.ones_like(ids), mask, with_entropy=False)
        assert logp[0, gen_at[k]].tolist() == pytest.approx(logps[k], abs=1e-4)
        assert logps[k] == pytest.approx(fresh_logps[k], abs=1e-4)


def test_a_kept_cache_refuses_a_prompt_that_does_not_extend_its_row(tiny):
    model, tok = tiny
    kept = generation.KeptKV()
    kw = dict(max_new_tokens=3, temperature=0.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    prompts = _prompts(tok)[:2]
    generate(model, prompts, kept=kept, keys=["a", "b"], **kw)
    with pytest.raises(ValueError, match="does not extend"):
        generate(model, [prompts[0] + [5]], kept=kept, keys=["a"], **kw)
    kept = generation.KeptKV()
    generate(model, prompts, kept=kept, keys=["a", "b"], **kw)
    with pytest.raises(ValueError, match="not in the kept KV cache"):
        generate(model, [prompts[0] + [5]], kept=kept, keys=["c"], **kw)


def test_end_token_ids_read_the_tokenizer_and_the_generation_config():
    """Qwen2.5-Instruct: the tokenizer's <|im_end|> (151645), the config's [151645, 151643]; a
    numpy int or none at all works too (an empty set: no token ends an answer; it was an
    IndexError on the first decode step)."""
    from types import SimpleNamespace as NS

    import numpy as np

    qwen = NS(generation_config=NS(eos_token_id=[151645, 151643]))
    assert generation.end_token_ids(qwen, NS(eos_token_id=151645)) == (151645, 151643)
    assert generation.end_token_ids(
        NS(generation_config=NS(eos_token_id=np.int64(7))), NS(eos_token_id=7)
    ) == (7,)
    assert generation.end_token_ids(NS(), NS(eos_token_id=None)) == ()
    new = torch.tensor([151643, 5, 151645])
    assert generation.ends_answer(new, (151645, 151643)).tolist() == [True, False, True]
    assert generation.ends_answer(new, 151645).tolist() == [False, False, True]
    assert generation.ends_answer(new, ()).tolist() == [False, False, False]
