import pytest
import torch

from ragen_lib import generation, models
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


def test_stop_on_text_fires_on_the_token_that_completes_the_stop(tiny):
    _, tok = tiny
    stop = StopOnText(tok, ("</answer>",))
    ids = tok("<think>x</think><answer>Up</answer> trailing", add_special_tokens=False)["input_ids"]
    fired_at = None
    for n in range(1, len(ids) + 1):
        hit = stop(torch.tensor([ids[:n]]), torch.tensor([ids[n - 1]]), torch.tensor([True]))
        if hit[0]:
            fired_at = n
            break
    assert fired_at is not None
    assert tok.decode(ids[:fired_at]).endswith("</answer>")
    assert "</answer>" not in tok.decode(ids[: fired_at - 1])


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
    assert (len(prompts), generation.LENGTH_BUCKET) in model._ragen_static_decoders


def test_unknown_kv_cache_is_an_error_naming_the_choices(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="dynamic"):
        generate(model, _prompts(tok), kv_cache="paged", **_kw(tok))


def test_static_pool_size_zero_keeps_nothing_and_still_decodes(tiny, monkeypatch):
    model, tok = tiny
    prompts = _prompts(tok)
    monkeypatch.setattr(generation, "POOL_SIZE", 0)
    model.__dict__.pop("_ragen_static_decoders", None)
    got = generate(model, prompts, kv_cache="static", **_kw(tok))
    assert got == generate(model, prompts, **_kw(tok))
    assert len(model._ragen_static_decoders) == 0
