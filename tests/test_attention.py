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


# ------------------------------------------------------------------------------------------------
# rollout.decode_attention=flex: FlexAttention over each row's own blocks
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def flex_state(monkeypatch):
    """FlexAttention's process state (compiled function, failure) restored after the test."""
    monkeypatch.setattr(attention, "_FLEX_FAILED", None)
    yield
    assert attention.kernel() == "sdpa"


def _poisoned(B, Hkv, g, L, D, lengths, dtype, beyond_blocks=True):
    """q (B, Hkv, g, D), k, v (B, Hkv, L, D) and the visible columns (B, L) of rows of the given
    lengths, the fourth left-padded; NaN in every column past a row's last block of FLEX_BLOCK
    (a kernel that reads them returns NaN: softmax weight 0 times NaN)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, Hkv, g, D, generator=gen, dtype=dtype)
    k, v = (torch.randn(B, Hkv, L, D, generator=gen, dtype=dtype) for _ in range(2))
    n = torch.tensor(lengths)
    visible = torch.arange(L)[None] < n[:, None]
    visible[3, :50] = False  # left padding (the turn path's static cache)
    if beyond_blocks:
        for b, end in enumerate((-(-n // attention.FLEX_BLOCK) * attention.FLEX_BLOCK).tolist()):
            k[b, :, end:] = v[b, :, end:] = float("nan")
    return q, k, v, visible


@pytest.mark.parametrize("g", [3, 1])
def test_a_flex_decode_step_equals_attention_written_out(g, monkeypatch, flex_state):
    """Inside decode_kernel("flex") a masked one-token step runs FlexAttention (unfused here:
    float64), on the K/V heads, with left padding and rows of 1 to 300 columns."""
    from transformers.integrations import sdpa_attention

    monkeypatch.setattr(attention, "FLEX_COMPILED", False)
    B, Hkv, L, D = 4, 2, 512, 8
    q, k, v, visible = _poisoned(B, Hkv, g, L, D, [1, 128, 129, 300], torch.float64, beyond_blocks=False)
    query = q.reshape(B, Hkv * g, 1, D)
    mask = visible[:, None, None]
    module = types.SimpleNamespace(num_key_value_groups=g, is_causal=True, training=False)
    calls = []
    flex = attention._flex_on_kv_heads
    monkeypatch.setattr(attention, "_flex_on_kv_heads", lambda *a: calls.append(a[0].shape) or flex(*a))
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda *a: pytest.fail("K/V copied per query head"))
    with attention.decode_kernel("flex"):
        out, _ = attention.sdpa_on_kv_heads(module, query, k, v, mask, dropout=0.0, scaling=None)
    assert calls == [(B, Hkv, g, D)] and attention.flex_failed() is None
    assert torch.allclose(out, _by_hand(query, k, v, mask[:, 0], g), atol=1e-12)


def test_compiled_flex_reads_only_each_rows_blocks(flex_state):
    """Compiled (as in a run), FlexAttention skips every block past a row's last visible column:
    NaN there leaves the output finite, where any kernel reading them (SDPA, or flex with every
    block listed) returns NaN; and it equals attention written out on what it reads."""
    B, Hkv, g, L, D = 4, 2, 2, 512, 16
    q, k, v, visible = _poisoned(B, Hkv, g, L, D, [1, 128, 129, 300], torch.float32)
    out = attention._flex_step(q, k, v, visible, None)
    assert attention.flex_failed() is None and out is not None
    assert not out.isnan().any()
    clean = [torch.nan_to_num(x, nan=0.0) for x in (k, v)]
    query = q.reshape(B, Hkv * g, 1, D)
    expected = _by_hand(query, *clean, visible[:, None, None][:, 0], g).reshape(B, Hkv, g, D)
    assert torch.allclose(out, expected, atol=1e-5)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, None, None])
    assert sdpa.isnan().any()  # the poison works: a kernel that reads every column sees it


def test_columns_read_counts_each_rows_blocks_under_flex():
    assert attention.columns_read([1], 512) == 512  # outside decode_kernel("flex"): SDPA reads all
    with attention.decode_kernel("flex"):
        reads = [attention.columns_read([n], 512) for n in (1, 128, 129, 300, 600)]
        assert reads == [128, 128, 256, 384, 512]
    assert attention.kernel() == "sdpa"


@pytest.mark.parametrize("batching", ["turn", "continuous"])
def test_flex_rollouts_equal_sdpa_and_read_fewer_columns(batching, monkeypatch, flex_state):
    """A sampled static rollout gives the same tokens and log-probs (1e-5) with
    decode_attention=flex as with sdpa, its decode steps all went through FlexAttention, and its
    attention read fewer cache columns (rows shorter than the bucket read their own blocks)."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    monkeypatch.setattr(attention, "FLEX_COMPILED", False)  # the same numbers; no compile per shape
    base = dict(max_new_tokens=40, max_turns=3, temperature=1.0, stop_at_answer=False, kv_cache="static")
    got, reads, steps, flex = {}, {}, [], attention._flex_on_kv_heads
    monkeypatch.setattr(attention, "_flex_on_kv_heads", lambda *a: steps.append(1) or flex(*a))
    for kernel in ("sdpa", "flex"):
        cfg = RolloutConfig(**base, batching=batching, decode_attention=kernel)
        steps.clear()
        with work.counting() as c:
            got[kernel] = collect(model, tok, "sokoban", [2, 7, 9], 2, cfg, sample_seed=4)
        reads[kernel] = c["rollout"]["decode_kv_read"]
        layers = model.config.num_hidden_layers
        assert len(steps) == (layers * c["rollout"]["decode_steps"] if kernel == "flex" else 0)
        assert c["rollout"]["decode_kv_real"] <= reads[kernel]
    a, b = got["sdpa"], got["flex"]
    assert attention.flex_failed() is None
    assert a.responses == b.responses and torch.equal(a.input_ids, b.input_ids)
    assert ((a.sample_logprobs - b.sample_logprobs) * a.loss_mask).abs().max() < 1e-5
    assert reads["flex"] < reads["sdpa"]
    # A captured graph replays the kernel it was captured with: the two are pooled apart.
    from ragen_lib import generation

    kernels = {key[-1] for key in generation.static_decoders(model)}
    assert {"sdpa", "flex"} <= kernels
    generation.release(model)


def test_flex_that_fails_here_warns_and_decodes_with_sdpa(monkeypatch, flex_state):
    """Where FlexAttention cannot run (no compiler, an old GPU), the rollout finishes on SDPA with
    the same tokens, and says why."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    cfg = dict(max_new_tokens=8, max_turns=2, temperature=1.0, stop_at_answer=False, kv_cache="static")
    before = collect(model, tok, "sokoban", [2, 7], 2, RolloutConfig(**cfg), sample_seed=4)

    def broken(*a):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(attention, "FLEX_COMPILED", False)
    monkeypatch.setattr(attention, "_flex_on_kv_heads", broken)
    with pytest.warns(UserWarning, match="FlexAttention failed here .*no C\\+\\+ compiler.*SDPA"):
        after = collect(
            model, tok, "sokoban", [2, 7], 2, RolloutConfig(**cfg, decode_attention="flex"), sample_seed=4
        )
    assert attention.flex_failed() == "RuntimeError: no C++ compiler"
    with attention.decode_kernel("flex"):
        assert attention.columns_read([1], 512) == 512  # SDPA ran: the counters say it read all
    assert after.responses == before.responses
    assert ((after.sample_logprobs - before.sample_logprobs) * before.loss_mask).abs().max() < 1e-5


def test_decode_attention_flex_is_refused_where_it_cannot_work():
    with pytest.raises(ValueError, match="kv_cache=static, or rollout.decode_attention=sdpa"):
        RolloutConfig(decode_attention="flex")  # the dynamic cache: a new shape every step
    with pytest.raises(ValueError, match="choose one of: sdpa, flex"):
        RolloutConfig(decode_attention="flash", kv_cache="static")
    with pytest.raises(ValueError, match="unknown decode attention kernel"):
        with attention.decode_kernel("flash"):
            pass


def test_decode_kernel_gives_back_the_registration_and_kernel_after_an_error():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    before = ALL_ATTENTION_FUNCTIONS["sdpa"]
    with pytest.raises(RuntimeError, match="inside"):
        with attention.decode_kernel("flex"):
            assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention.sdpa_on_kv_heads
            assert attention.kernel() == "flex"
            raise RuntimeError("inside")
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is before and attention.kernel() == "sdpa"
