import pytest
import torch

from ragen_lib import models
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
    ours = generate(model, prompts, max_new_tokens=12, temperature=0.0,
                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    for p, got in zip(prompts, ours):
        ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
        assert got == ref[0, len(p):].tolist()


def test_sampling_is_deterministic_given_the_generator(tiny):
    model, tok = tiny
    prompts = _prompts(tok)

    def run(seed, temperature=1.0):
        g = torch.Generator().manual_seed(seed)
        return generate(model, prompts, max_new_tokens=10, temperature=temperature,
                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, generator=g)

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(1, temperature=0.0) == run(2, temperature=0.0)


def test_stop_on_text_fires_on_the_token_that_completes_the_stop(tiny):
    _, tok = tiny
    stop = StopOnText(tok, ("</answer>",))
    ids = tok("<think>x</think><answer>Up</answer> trailing", add_special_tokens=False)["input_ids"]
    fired_at = None
    for n in range(1, len(ids) + 1):
        hit = stop([ids[:n]], torch.tensor([ids[n - 1]]), torch.tensor([True]))
        if hit[0]:
            fired_at = n
            break
    assert fired_at is not None
    assert tok.decode(ids[:fired_at]).endswith("</answer>")
    assert "</answer>" not in tok.decode(ids[: fired_at - 1])
