"""The fast paths `make bench` measures must compute what the slow ones do."""

import dataclasses
import json
import os
import types
from pathlib import Path

import pytest
import torch

from ragen_lib import bench, models
from ragen_lib import metrics as M
from ragen_lib.algorithms import masked_mean, token_logprobs
from ragen_lib.generation import generate


@pytest.fixture(scope="module")
def tiny():
    return models.load(models.TINY_RANDOM, device="cpu")


def _grouped_prompts(tok, group_size):
    # Different lengths, so the distinct prompts are left-padded to a common width.
    texts = ["<think>", "Turn 1:\nState:\n#_P#", "a much longer prompt to force left padding in the batch"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return [p for p in ids for _ in range(group_size)]


def test_group_prefix_sharing_is_exact_under_greedy_decoding(tiny):
    model, tok = tiny
    prompts = _grouped_prompts(tok, group_size=3)
    kw = dict(max_new_tokens=8, temperature=0.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    shared = generate(model, prompts, group_size=3, **kw)
    plain = generate(model, prompts, **kw)
    assert shared == plain
    assert all(len(g) == 8 for g in shared)  # no early EOS hides a difference
    for p, got in zip(prompts[::3], shared[::3]):
        ref = model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        assert got == ref[0, len(p) :].tolist()


def test_group_prefix_sharing_draws_the_same_samples(tiny):
    """The shared cache gives each row the distribution of its own prefill, and the generator is
    consumed identically, so sampling matches too (up to float ties, absent here)."""
    model, tok = tiny
    prompts = _grouped_prompts(tok, group_size=4)
    kw = dict(max_new_tokens=6, temperature=1.0, eos_token_id=-1, pad_token_id=tok.pad_token_id)
    a = generate(model, prompts, group_size=4, generator=torch.Generator().manual_seed(3), **kw)
    b = generate(model, prompts, generator=torch.Generator().manual_seed(3), **kw)
    assert a == b
    assert len({tuple(g) for g in a[:4]}) > 1  # the samples of one group still differ


def test_group_size_rejects_groups_whose_rows_differ(tiny):
    model, tok = tiny
    prompts = _grouped_prompts(tok, group_size=2)
    prompts[1] = prompts[1] + [5]
    with pytest.raises(ValueError, match="rows of a group differ"):
        generate(
            model,
            prompts,
            group_size=2,
            max_new_tokens=2,
            temperature=0.0,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    with pytest.raises(ValueError, match="divide"):
        generate(
            model,
            prompts[:5],
            group_size=2,
            max_new_tokens=2,
            temperature=0.0,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )


def test_loss_on_sorted_micro_batches_equals_the_padded_batch(tiny):
    model, _ = tiny
    g = torch.Generator().manual_seed(0)
    lengths = [5, 17, 9, 30, 12, 3]
    ids, attn = bench.update.random_batch(lengths, vocab=model.config.vocab_size, generator=g)
    mask = attn.float()
    mask[:, :2] = 0  # a "prompt" the loss ignores

    def mean_logp(logits, ids_, mask_):
        return masked_mean(token_logprobs(logits.float(), ids_), mask_)

    with torch.no_grad():
        padded = mean_logp(model(input_ids=ids, attention_mask=attn).logits, ids, mask)
        # Token-mean over micro-batches: each weighted by its share of the loss tokens.
        total = torch.zeros(())
        for rows in bench.update.sorted_micro_batches(attn, micro_batch_size=2):
            w = int(attn[rows].sum(1).max())
            m = mask[rows, :w]
            logits = model(input_ids=ids[rows, :w], attention_mask=attn[rows, :w]).logits
            total += mean_logp(logits, ids[rows, :w], m) * m.sum() / mask.sum()
    assert torch.isfinite(padded)
    torch.testing.assert_close(total, padded, atol=1e-5, rtol=0)


def test_the_tf32_head_row_restores_the_matmul_precision_and_says_when_it_cannot_measure(tiny, monkeypatch):
    """The GPU audit's largest lever (the float32 LM head as plain fp32 GEMMs) measured, not adopted:
    a row beside the trainer's, with its log-prob error, that leaves torch's setting as it found it."""
    model, _ = tiny
    size = {"update_max_len": 24, "update_rows": 4, "micro_batch_size": 2, "repeats": 1}
    before = torch.backends.cuda.matmul.fp32_precision
    rows = {r.what: r for r in bench.update.measure_update(model, "cpu", size)}
    row = rows["update: ours with a TF32 head (a candidate, not the trainer's)"]
    assert row.value > 0 and "max |Δ log-prob| 0 against the float32 head on the 2 longest rows" in row.note
    assert torch.backends.cuda.matmul.fp32_precision == before

    def refuse():
        raise RuntimeError("mix of the legacy and new APIs")

    monkeypatch.setattr(bench.update, "tf32_matmuls", refuse)
    rows = {r.what: r for r in bench.update.measure_update(model, "cpu", size)}
    row = rows["update: ours with a TF32 head (a candidate, not the trainer's)"]
    assert row.value is None and "not measured: RuntimeError: mix of the legacy" in row.note
    assert rows["update: ours (forward_logp, sorted micro-batches)"].value > 0  # the rest is kept


def test_sorted_micro_batches_cover_every_row_once_shortest_first():
    attn = torch.zeros(5, 10, dtype=torch.long)
    for i, n in enumerate([7, 2, 10, 4, 4]):
        attn[i, :n] = 1
    chunks = bench.update.sorted_micro_batches(attn, micro_batch_size=2)
    assert sorted(torch.cat(chunks).tolist()) == [0, 1, 2, 3, 4]
    widths = [int(attn[c].sum(1).max()) for c in chunks]
    assert widths == sorted(widths) and widths[-1] == 10 and widths[0] == 4


def test_device_slug():
    assert M.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert M.device_slug("cpu") == "cpu"


@pytest.mark.slow
def test_bench_quick_writes_markdown_and_json(tmp_path):
    from ragen_lib.__main__ import main

    assert (
        main(["bench", "--quick", "--model", "tiny-random", "--device", "cpu", "--out", str(tmp_path)]) == 0
    )
    md, js = (tmp_path / "cpu.md").read_text(), json.loads((tmp_path / "cpu.json").read_text())
    for header in ("device", "torch", "transformers", "commit", "date"):
        assert header in js["header"]
    whats = [r["what"] for r in js["rows"]]
    for needle in (
        "load: first",
        "load: second",
        "generate: HF",
        "generate: ours",
        "prefill: shared",
        "prefill: per row",
        "decode attention: K/V copied per query head (naive)",
        "decode attention: on the K/V heads",
        "decode attention: on the K/V heads, each row's own blocks (flex)",
        "train step: time/step",
        "train step [continuous batching, static cache]: time/step",
        "train step [continuous batching, static cache, flex attention]: time/step",
        "update: padded",
        "update: sorted",
        "update: ours (forward_logp",
        "update: ours with a TF32 head (a candidate",
        "TRL",
        "turns: prefill tokens, kept KV",
        "turns: decode row-steps, continuous vs turn batching",
        "turns: decode attention reads per column needed, continuous vs turn batching",
        "turns: rollout wall, continuous vs turn batching, static decode steps",
        "turns: rollout wall, continuous static steps, flex vs sdpa decode attention",
        "runs per device 2",
        "peak memory",
        "head memory: no-grad forward_logp with entropies, 4160 positions, head in one pass",
        "head memory: no-grad forward_logp with entropies, 4160 positions, head in chunks of 2048",
        "head memory: forward_logp with entropies, forward and backward, 2080 positions, head in one pass",
    ):
        assert any(needle in w for w in whats), (needle, whats)
        assert needle in md
    ours = next(r for r in js["rows"] if r["what"].startswith("generate: ours"))
    assert ours["value"] > 0 and ours["unit"] == "tokens/s" and ours["vs_naive"] > 0
    assert all(r["value"] == r["value"] for r in js["rows"] if r["value"] is not None)  # no NaN figures
    folded = next(r for r in js["rows"] if r["what"] == "decode attention: on the K/V heads")
    assert float(folded["note"].split("max |Δ| ")[1].split(";")[0]) < 1e-5  # both compute the same
    tf32 = next(r for r in js["rows"] if "TF32 head" in r["what"])
    assert float(tf32["note"].split("max |Δ log-prob| ")[1].split(" ")[0]) == 0  # CUDA only: no change here
    chunks = next(r for r in js["rows"] if "head in chunks" in r["what"])
    assert float(chunks["note"].split("max |Δ| ")[1]) < 1e-4  # the same log-probs, chunked or not
    grads = next(r for r in js["rows"] if "head in checkpointed chunks" in r["what"])
    assert float(grads["note"].split("max |Δ| ")[1]) < 1e-4  # the same loss and gradient norm
    flex = next(r for r in js["rows"] if r["what"].endswith("each row's own blocks (flex)"))
    assert flex["value"] > 0, flex["note"]  # FlexAttention compiled and ran here
    assert float(flex["note"].split("flex max |Δ| ")[1].split(",")[0]) < 1e-5


TINY_WORK = dict(groups=2, group_size=2, max_new_tokens=12, max_turns=2, micro_batch_size=2)


def test_work_counters_are_deterministic_and_add_up():
    """Two runs of the same step count the same work, and the counters describe the step."""
    first, m = bench.training.work_step(models.TINY_RANDOM, "cpu", TINY_WORK)
    second, _ = bench.training.work_step(models.TINY_RANDOM, "cpu", TINY_WORK)
    assert first == second
    r, f, u = first["rollout"], first["forward"], first["update"]
    turns = len(r["decode_steps_per_call"])
    assert 1 <= turns <= TINY_WORK["max_turns"] and r["generate_calls"] == turns
    assert sum(r["decode_steps_per_call"]) == r["decode_steps"]
    assert all(s <= TINY_WORK["max_new_tokens"] - 1 for s in r["decode_steps_per_call"])
    assert 0 < r["prefill_real"] <= r["prefill_tokens"]
    assert (
        0 < r["gen_tokens"] <= r["decode_row_steps"] + r["generate_calls"] * 4
    )  # 4 rows sample once before any decode step
    assert u["real"] <= u["tokens"] and f["real"] <= f["tokens"] and u["real"] > 0
    rows = bench.training.work_rows(first, m, TINY_WORK)
    assert any(x.what.startswith("work: all token positions") and x.value > 0 for x in rows)
    assert 0 < r["decode_kv_real"] <= r["decode_kv_read"]
    assert any(x.what == "work: decode attention reads" and x.value == r["decode_kv_read"] for x in rows)
    md = bench.report.markdown({"device": "cpu"}, rows)
    assert "work: decode steps" in md


def test_before_column_reads_an_earlier_report():
    rows = [bench.common.Row("work: a", 10.0, "tokens"), bench.common.Row("work: new", 1.0, "tokens")]
    bench.report.attach_before(rows, {"rows": [{"what": "work: a", "value": 30.0}]})
    assert rows[0].before == 30.0 and rows[1].before is None
    md = bench.report.markdown({"device": "cpu"}, rows)
    assert "| before | before / now |" in md and "3.00×" in md


def test_work_counters_are_off_outside_counting(tiny):
    from ragen_lib import work

    model, tok = tiny
    assert work.active() is None
    generate(model, [[1, 2, 3]], max_new_tokens=2, temperature=0.0, eos_token_id=-1, pad_token_id=0)
    with work.counting() as c:
        generate(
            model, [[1, 2, 3], [4, 5]], max_new_tokens=3, temperature=0.0, eos_token_id=-1, pad_token_id=0
        )
    assert c.plain()["rollout"] == {
        "prefill_calls": 1,
        "prefill_tokens": 6,
        "prefill_real": 5,
        "generate_calls": 1,
        "decode_steps": 2,
        "gen_tokens": 6,
        "decode_row_steps": 4,
        # Left-padded to 3 columns: step 0 reads 4 columns of both rows, step 1 reads 5: 18.
        # The least: row 0's tokens 1 and 2 need 3+1 and 3+2 columns, row 1's 2+1 and 2+2: 16.
        "decode_kv_read": 18,
        "decode_kv_real": 16,
        "decode_steps_per_call": [2],
    }


def test_summarize_steps_by_hand():
    x = bench.vs_trl.summarize_steps([(2.0, 100), (1.0, 80), (4.0, 120), (3.0, 100)])
    assert x == {"steps": 4, "median_s": 2.5, "min_s": 1.0, "max_s": 4.0,
                 "tokens_per_step": 100.0, "tokens_per_s": 40.0}  # fmt: skip
    assert bench.vs_trl.summarize_steps([(3.0, 9), (1.0, 1), (2.0, 2)])["median_s"] == 2.0
    with pytest.raises(ValueError, match="no measured steps"):
        bench.vs_trl.summarize_steps([])


def _trl_args(**over):
    """What `bench.vs_trl.trl_args` sets, as plain attributes (CI has no trl)."""
    size = bench.common.SIZES["cpu"]
    args = dict(max_completion_length=16, temperature=1.0, top_p=1.0, top_k=0,
                per_device_train_batch_size=size["groups"] * size["group_size"],
                num_generations=size["group_size"], beta=0.0, loss_type="dapo", num_iterations=1,
                steps_per_generation=1, gradient_accumulation_steps=1, scale_rewards="group",
                learning_rate=1e-6, generation_kwargs=None)  # fmt: skip
    return types.SimpleNamespace(**{**args, **over})


def test_the_trl_comparison_refuses_unequal_terms():
    """Ours and TRL's settings must match on every term of TRL_TERMS; each difference is named."""
    size = bench.common.SIZES["cpu"]
    ours = bench.vs_trl.our_grpo_config(models.TINY_RANDOM, "cpu", size, 16, 2)
    assert bench.vs_trl.trl_mismatches(ours, _trl_args()) == []
    for over, named in (
        ({"beta": 0.04}, "KL term"),
        ({"loss_type": "grpo"}, "loss aggregation"),
        ({"max_completion_length": 32}, "new-token cap"),
        ({"num_iterations": 2}, "optimizer steps"),
        ({"generation_kwargs": {"stop_strings": ["</answer>"]}}, "stop rule"),
        ({"top_k": 50}, "temperature"),
    ):
        assert [m for m in bench.vs_trl.trl_mismatches(ours, _trl_args(**over)) if m.startswith(named)], over
    for section, key, value, named in (
        ("rollout", "stop_at_answer", True, "stop rule"),
        ("train", "log_kl_ref", True, "reference forward"),
        ("algo", "entropy_coef", 0.001, "entropy bonus"),
        ("train", "loss_agg", "micro-batch-mean", "loss aggregation"),
        ("train", "mini_batch_size", 2, "optimizer steps"),
    ):
        part = dataclasses.replace(getattr(ours, section), **{key: value})
        other = dataclasses.replace(ours, **{section: part})
        assert [m for m in bench.vs_trl.trl_mismatches(other, _trl_args()) if m.startswith(named)], key


def test_an_unequal_trl_comparison_is_refused_not_reported(monkeypatch):
    """A term that differs is our bug, not the host's: measure_trl raises instead of reporting a
    failed setup (needs trl: `pip install -e .[bench]`)."""
    pytest.importorskip("trl")
    monkeypatch.setattr(bench.vs_trl, "our_grpo_steps", lambda *a: [(1.0, 8.0)])
    monkeypatch.setattr(bench.vs_trl, "trl_mismatches", lambda cfg, args: ["KL term (TRL beta)"])
    size = {**bench.common.SIZES["quick"], "trl_steps": 1}
    with pytest.raises(bench.vs_trl.UnequalTerms, match="KL term"):
        bench.vs_trl.measure_trl(models.TINY_RANDOM, "cpu", size)


def test_a_failing_section_costs_only_its_own_rows(tmp_path, monkeypatch):
    """A section that raises is named in the report, with its error, and the sections after it still
    run and are written; the command then exits 1 (a GPU lease is too short to lose a whole run)."""
    from ragen_lib.__main__ import main

    def broken(*a, **k):
        raise RuntimeError("no kernel image for this GPU")

    monkeypatch.setattr(bench, "measure_prefill", broken)
    argv = ["bench", "--quick", "--model", "tiny-random", "--device", "cpu", "--out", str(tmp_path)]
    assert main(argv + ["--only", "load,prefill,memory"]) == 1
    js = json.loads((tmp_path / "cpu.json").read_text())
    whats = [r["what"] for r in js["rows"]]
    assert any(w.startswith("load: first") for w in whats) and any(w.startswith("peak memory") for w in whats)
    assert not any(w.startswith("prefill") for w in whats)
    assert js["header"]["failed"] == "prefill: RuntimeError: no kernel image for this GPU"
    assert js["header"]["status"] == "complete except failed sections: prefill"
    assert "no kernel image" in (tmp_path / "cpu.md").read_text()


def test_a_run_stopped_partway_keeps_what_it_measured(tmp_path, monkeypatch):
    """The report is rewritten after every section: a run killed in a later section (the lease's
    time limit, Ctrl-C) leaves the rows of the sections done and says which did not run."""

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "peak_memory", stopped)
    with pytest.raises(KeyboardInterrupt):
        bench.run(models.TINY_RANDOM, "cpu", tmp_path, quick=True, only=("load", "prefill", "memory"))
    js = json.loads((tmp_path / "cpu.json").read_text())
    whats = [r["what"] for r in js["rows"]]
    assert any(w.startswith("load: first") for w in whats) and any(w.startswith("prefill") for w in whats)
    assert js["header"]["status"] == "running: done load, prefill; not yet run memory"


def test_a_missing_before_report_fails_before_any_model_loads(tmp_path, monkeypatch):
    def no_load(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load", no_load)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        bench.run(models.TINY_RANDOM, "cpu", tmp_path, quick=True, before=tmp_path / "nope.json")


def test_a_warning_of_the_static_decoder_is_noted_once(tiny, monkeypatch):
    """A warning raised while the static decoder allocates and captures goes into the row's note,
    once however many decode steps raise it."""
    import warnings

    real = bench.generation.ours_generate

    def warning(*args, kv_cache="dynamic", **kwargs):
        if kv_cache == "static":
            for _ in range(5):
                warnings.warn("CUDA graph capture failed here; decoding eagerly", stacklevel=2)
        return real(*args, kv_cache=kv_cache, **kwargs)

    monkeypatch.setattr(bench.generation, "ours_generate", warning)
    model, tok = tiny
    rows = bench.generation.measure_generation(model, tok, "cpu", bench.common.SIZES["quick"])
    static = next(r for r in rows if r.what == "generate: ours + sharing + static cache")
    assert static.note.count("CUDA graph capture failed here") == 1, static.note


def test_each_runs_per_device_k_trains_as_a_grid_with_that_setting(monkeypatch):
    """Each k goes through run_grid with the slots `runs_per_device: k` gives a grid, so the table
    compares what a profile would choose between. On CPU each k gets the whole machine: k = 1 trains
    in this process (run_grid spawns no worker for one slot) under all the cores, though the bench
    runs under fewer, and the bench's own thread count comes back after."""
    from ragen_lib import workers

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    calls = []

    def grid(root, name, cfgs, progress, slots):
        calls.append((slots, torch.get_num_threads()))

    monkeypatch.setattr(workers, "run_grid", grid)
    size = {**bench.common.SIZES["quick"], "pool_runs": (1, 2)}
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as under the full CPU bench's OMP_NUM_THREADS=1
    try:
        rows = bench.pool.measure_runs_per_device(models.TINY_RANDOM, "cpu", size)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert calls == [(workers.worker_slots(1), 4), (workers.worker_slots(2), 1)]
    assert workers.worker_slots(2) == [{"OMP_NUM_THREADS": "2", "RAGEN_RUNS_PER_DEVICE": "2"}] * 2
    assert [r.what for r in rows] == [f"runs per device {k}: steps/s of all runs" for k in (1, 2)]


def test_a_long_section_keeps_the_parts_it_finished(tmp_path, monkeypatch):
    """The train section yields each rollout setting's rows as it finishes: a lease that ends, or a
    setting that breaks, partway through it keeps the settings already measured, on disk."""

    def train_step(name, device, size):
        yield [bench.common.Row("train step: time/step", 1.5, "s")]
        assert json.loads((tmp_path / "cpu.json").read_text())["rows"][0]["value"] == 1.5  # saved
        raise RuntimeError("the second setting broke")

    monkeypatch.setattr(bench, "measure_train_step", train_step)
    with pytest.raises(bench.SectionsFailed, match="the second setting broke"):
        bench.run(models.TINY_RANDOM, "cpu", tmp_path, quick=True, only=("train",))
    report = json.loads((tmp_path / "cpu.json").read_text())
    assert [r["what"] for r in report["rows"]] == ["train step: time/step"]
    assert "train: RuntimeError" in report["header"]["failed"]


def test_a_bench_that_measures_nothing_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    """A model name that passes the up-front check but loads nowhere (a hub id the hub lists, whose
    download then fails) fails every section: the committed report in `out` must survive it, and
    the error must say why and that the report was kept."""
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "check_hub", lambda name, key: None)

    def offline(*a, **k):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load someone/some-model")

    (tmp_path / "cpu.md").write_text("the committed report\n")
    (tmp_path / "cpu.json").write_text('{"rows": ["kept"]}\n')
    monkeypatch.setattr(bench, "measure_load", offline)
    monkeypatch.setattr(bench, "peak_memory", offline)
    argv = ["bench", "--quick", "--model", "someone/some-model", "--device", "cpu", "--out", str(tmp_path)]
    assert main(argv + ["--only", "load,memory"]) == 1
    assert (tmp_path / "cpu.md").read_text() == "the committed report\n"
    assert json.loads((tmp_path / "cpu.json").read_text()) == {"rows": ["kept"]}
    err = capsys.readouterr().err
    assert "bench measured nothing: load: OSError" in err and "memory: OSError" in err, err
    assert f"{tmp_path / 'cpu.md'} is left as it was" in err, err
    # Into an empty folder nothing is written either, and the error says so.
    empty = tmp_path / "new"
    assert main(argv[:-1] + [str(empty), "--only", "load"]) == 1
    assert not empty.exists() or not any(empty.iterdir())
    assert "no report is written" in capsys.readouterr().err


def test_memory_alone_reports_no_process_peak(tmp_path, monkeypatch):
    """The process's peak row is the peak of the sections run before it in this process. With
    `--only memory` nothing ran here (the head rows measure in fresh processes), and an H100 bench
    printed a peak of 0 GB; the row is left out then and kept when a section ran first."""
    head_row = bench.common.Row("head memory: stand-in", 1.0, "GB")
    monkeypatch.setattr(bench, "measure_head_memory", lambda *a, **k: [head_row])
    bench.run(models.TINY_RANDOM, "cpu", tmp_path / "alone", quick=True, only=("memory",))
    whats = [r["what"] for r in json.loads((tmp_path / "alone" / "cpu.json").read_text())["rows"]]
    assert whats == ["head memory: stand-in"]
    bench.run(models.TINY_RANDOM, "cpu", tmp_path / "after", quick=True, only=("load", "memory"))
    whats = [r["what"] for r in json.loads((tmp_path / "after" / "cpu.json").read_text())["rows"]]
    assert any(w.startswith("peak memory") for w in whats) and whats[-1] == "head memory: stand-in"


def test_bench_refuses_a_bad_device_a_missing_before_file_and_an_empty_only_in_one_line(tmp_path, capsys):
    """Each was a traceback (torch's device parser, a FileNotFoundError or, for a --before file that
    is no report, a JSONDecodeError or KeyError, bench.run's RuntimeError) or, for `--only ""`, every
    section run; now one line naming the fix, before any model loads."""
    from ragen_lib.__main__ import main

    out = ["--quick", "--model", "tiny-random", "--out", str(tmp_path / "b")]
    with pytest.raises(SystemExit) as e:
        main(["bench", "--device", "gpu", *out])
    assert (
        e.value.code == 2
        and "argument --device: 'gpu' is not a device: cpu, cuda or cuda:N" in capsys.readouterr().err
    )
    assert main(["bench", "--device", "cpu", "--before", str(tmp_path / "nope.json"), *out]) == 2
    assert f"error: --before {tmp_path / 'nope.json'}: no such file" in capsys.readouterr().err
    for name, text, why in (
        ("torn.json", '{"header": {"commit": "abc"}, "rows": [{"wh', "JSONDecodeError"),
        ("list.json", "[]", "no header and rows"),
        ("rows.json", '{"header": {}, "rows": [{"what": "load"}]}', "a row without what and value"),
    ):
        (tmp_path / name).write_text(text)
        assert main(["bench", "--device", "cpu", "--before", str(tmp_path / name), *out]) == 2
        assert f"error: --before {tmp_path / name}: not a bench report ({why}" in capsys.readouterr().err
    assert main(["bench", "--device", "cpu", "--only", " , ", *out]) == 2
    assert "error: --only names no section: give one or more of load,generation" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["bench", "--device", "cuda", *out]) == 2
        assert "sees no CUDA device here; use --device cpu" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # nothing written


def test_a_part_of_the_bench_writes_beside_the_full_report_not_over_it(monkeypatch):
    """`bench --only trl` (trl not installed) replaced the committed 75-line CPU report with one
    row, and `plan` lost the train step it reads; without --out a part now goes to a folder of its
    own."""
    from ragen_lib.__main__ import OUTPUTS, main

    seen = []
    monkeypatch.setattr(bench, "run", lambda model, device, out, **kw: seen.append(out))
    base = ["bench", "--model", "tiny-random", "--device", "cpu"]
    for extra, want in (
        ([], "bench"),
        (["--only", ",".join(bench.SECTIONS)], "bench"),
        (["--only", "trl"], "bench/trl"),
        (["--only", "load,memory", "--quick"], "bench/load+memory-quick"),
        (["--quick"], "bench/quick"),
        (["--only", "trl", "--out", "x"], None),
    ):
        assert main(base + extra) == 0
        assert seen.pop() == (str(OUTPUTS / want) if want else "x"), extra


def test_bench_refuses_an_out_that_is_a_file_before_it_measures(tmp_path, monkeypatch, capsys):
    """`--out` naming a file failed after the minutes of measuring; and the default folder is the
    checkout's outputs/bench, where `plan` reads the train step, wherever bench is called from."""
    from ragen_lib.__main__ import OUTPUTS, main

    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("measured before checking --out"))
    (tmp_path / "report").write_text("")
    assert main(["bench", "--quick", "--model", "tiny-random", "--out", str(tmp_path / "report")]) == 2
    assert "is a file: name a folder" in capsys.readouterr().err
    assert OUTPUTS == Path(bench.__file__).resolve().parents[2] / "outputs"


@pytest.mark.parametrize("suffix", [".md", ".json"])
def test_a_bench_killed_while_it_rewrites_its_report_keeps_the_previous_one(
    tmp_path, monkeypatch, kill_at_rename, suffix
):
    """The report is rewritten after every section, and a GPU lease ends the bench where it stands:
    killed inside a plain write_text, the JSON was left torn, and `plan` (replicate-all's first step)
    failed reading it. Now each file is replaced whole or not at all."""
    first = [bench.common.Row("load: first in this process", 1.0, "s")]
    md = bench.report.write(tmp_path, {"device": "cpu"}, first)
    kill_at_rename(suffix)
    with pytest.raises(KeyboardInterrupt):
        bench.report.write(tmp_path, {"device": "cpu"}, [*first, bench.common.Row("prefill", 2.0, "s")])
    monkeypatch.undo()
    if suffix == ".json":
        assert [r["what"] for r in json.loads(md.with_suffix(".json").read_text())["rows"]] == [first[0].what]
    else:
        assert "prefill" not in md.read_text() and first[0].what in md.read_text()
