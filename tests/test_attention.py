"""Decode attention on the K/V heads as stored (ragen_lib/attention.py)."""

import types

import pytest
import torch

from ragen_lib import attention, models, work
from ragen_lib.config import RolloutConfig
from ragen_lib.rollout import collect


@pytest.fixture
def forced():
    """`sdpa_on_kv_heads` as the process's "sdpa" (as on transformers < 5.23), given back after."""
    yield attention.install(force=True)
    attention.uninstall()
    attention.install()  # what models.load leaves: the default for the tests after this one


def _by_hand(q, k, v, mask, g):
    """Masked softmax attention of each query head h on K/V head h // g, written out."""
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h] @ k[b, h // g].T) / q.shape[-1] ** 0.5  # (1, L)
            s = s.masked_fill(~mask[b, 0], float("-inf"))
            out[b, h] = torch.softmax(s, -1) @ v[b, h // g]
    return out.transpose(1, 2)  # (B, 1, H, D): the attention functions' layout


def test_a_masked_decode_step_equals_attention_written_out_and_copies_nothing(monkeypatch):
    from transformers.integrations import sdpa_attention

    g, B, Hkv, L, D = 3, 3, 2, 7, 8
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, Hkv * g, 1, D, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(B, Hkv, L, D, generator=gen, dtype=torch.float64) for _ in range(2))
    lengths = torch.tensor([7, 4, 1])  # rows of different lengths, as in a decode batch
    mask = (torch.arange(L)[None] < lengths[:, None])[:, None, None]  # (B, 1, 1, L)
    module = types.SimpleNamespace(num_key_value_groups=g, is_causal=True, training=False)

    def no_copy(*a):
        raise AssertionError("K/V copied to every query head")

    monkeypatch.setattr(sdpa_attention, "repeat_kv", no_copy)
    out, _ = attention.sdpa_on_kv_heads(module, q, k, v, mask, dropout=0.0, scaling=None)
    assert out.shape == (B, 1, Hkv * g, D)
    assert torch.allclose(out, _by_hand(q, k, v, mask, g), atol=1e-12)
    # The third row sees its first column only: its heads return that column's values.
    assert torch.allclose(out[2, 0], v[2, :, 0].repeat_interleave(g, 0), atol=1e-12)


def test_anything_but_a_masked_one_token_step_goes_to_transformers(monkeypatch):
    """Prefills (several query tokens) and unmasked steps are transformers' own function's."""
    from transformers.integrations import sdpa_attention

    calls = []
    monkeypatch.setattr(
        attention, "_LIBRARY_SDPA", lambda m, q, *a, **kw: calls.append(q.shape) or ("lib", None)
    )

    def run(q_len, mask, **kw):
        return attention.sdpa_on_kv_heads(module, torch.zeros(1, 3, q_len, 4), k, k, mask, **kw)

    module, k = types.SimpleNamespace(num_key_value_groups=3), torch.zeros(1, 1, 5, 4)
    mask = torch.ones(1, 1, 2, 5, dtype=torch.bool)
    assert run(2, mask)[0] == run(1, None)[0] == run(1, mask[:, :, :1], softcap=30.0)[0] == "lib"
    assert calls == [(1, 3, 2, 4), (1, 3, 1, 4), (1, 3, 1, 4)]
    assert sdpa_attention.sdpa_attention_forward is not attention.sdpa_on_kv_heads


def test_install_registers_it_only_where_transformers_does_not_pack(forced):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert forced == "ragen_lib" and attention.who_packs() == "ragen_lib"
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention.sdpa_on_kv_heads
    attention.uninstall()
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is not attention.sdpa_on_kv_heads
    assert attention.who_packs() != "ragen_lib"
    assert attention.install() == ("transformers" if attention.library_packs() else "ragen_lib")
    attention.install(force=True)
    assert attention.install() == "ragen_lib"  # it tells who folds now, not who would


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(kv_cache="static"),
        dict(batching="continuous"),
        dict(batching="continuous", kv_cache="static"),
    ],
    ids=["turn", "turn-static", "continuous", "continuous-static"],
)
def test_rollouts_are_unchanged_and_their_decode_steps_copy_no_key_value_heads(kw, monkeypatch):
    """The tiny model has 2 query heads per K/V head. Sampled rollouts in every decode path give
    the same tokens and log-probs with `sdpa_on_kv_heads` as "sdpa" as without it, and then no
    decode step copies K/V per query head (only prefills do, through transformers)."""
    from transformers.integrations import sdpa_attention

    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    cfg = RolloutConfig(max_new_tokens=10, max_turns=2, temperature=1.0, stop_at_answer=False, **kw)
    attention.uninstall()
    before = collect(model, tok, "sokoban", [2, 7], 2, cfg, sample_seed=4)

    library, repeat_kv, query_length, copies = attention._library_sdpa(), sdpa_attention.repeat_kv, [], []

    def seen(module, query, *a, **k):  # transformers' function, noting each call's query length
        query_length.append(query.shape[2])
        return library(module, query, *a, **k)

    def counted(x, n_rep):
        copies.append((query_length[-1], n_rep))
        return repeat_kv(x, n_rep)

    monkeypatch.setattr(attention, "_LIBRARY_SDPA", seen)
    monkeypatch.setattr(sdpa_attention, "repeat_kv", counted)
    try:
        attention.install(force=True)
        with work.counting() as c:
            after = collect(model, tok, "sokoban", [2, 7], 2, cfg, sample_seed=4)
    finally:
        attention.uninstall()
        monkeypatch.undo()
        attention.install()
    assert c["rollout"]["decode_steps"] > 5
    assert after.responses == before.responses and torch.equal(after.input_ids, before.input_ids)
    assert ((after.sample_logprobs - before.sample_logprobs) * before.loss_mask).abs().max() < 1e-5
    # Every decode step ran on the K/V heads here; the prefills went to transformers, and copy.
    assert 1 not in query_length and copies and all(q > 1 for q, _ in copies)
