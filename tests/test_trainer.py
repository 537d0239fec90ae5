"""The training loop on `tiny-random` (CPU): every algorithm steps, learns something, replays
identically, survives NaN and SIGKILL."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from ragen_lib import algorithms as A
from ragen_lib import config, metrics, models, runs, seeds, trainer, warmup

TINY = {
    "model": {"name": "tiny-random", "device": "cpu"},
    "rollout": {"max_new_tokens": 12},
    "train": {
        "steps": 2,
        "groups": 2,
        "group_size": 2,
        "mini_batch_size": 4,
        "micro_batch_size": 2,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "val_every": 0,
        "samples_every": 1,
    },
}


def comparable(rows) -> str:
    """Metric rows without timings, as JSON (so NaN equals NaN)."""
    return json.dumps(
        [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in rows],
        sort_keys=True,
    )


def tiny(**overrides) -> config.Config:
    return config.from_dict(TINY, overrides)


@pytest.mark.parametrize("algo", ["starpo-ppo", "starpo-grpo", "starpo-s", "apo"])
@pytest.mark.parametrize("env", ["bandit", "sokoban"])
def test_every_algorithm_runs_and_logs_the_step_keys(algo, env):
    over = {"algo.name": algo, "env.name": env}
    if algo == "apo":
        over.update({"algo.apo_prompt_pool": 6, "algo.apo_ref_samples": 2})
    rows = trainer.train(tiny(**over), progress=False)
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert 0 <= r["rollout/success"] <= 1 and 0 <= r["rollout/format_valid"] <= 1
        assert math.isfinite(r["policy/grad_norm"]) and r["policy/grad_norm"] > 0
        assert not any(k.startswith("warmup/") for k in r)
    if algo == "starpo-s":
        assert rows[0]["rollout/kept"] == 2  # top 25% of 2 groups -> 1 group of 2 episodes
    assert set(metrics.STEP_KEYS) <= set(rows[0])  # the names plots rely on
    assert set(rows[0]) - {"step"} <= set(metrics.METRICS)  # and nothing unnamed
    assert ("time/v_star" in rows[0]) == (algo == "apo")  # stage 1's cost, at step 0
    # the seconds before step 0, stage 1 included (backlog estimates a whole run from it); once
    assert rows[0]["time/setup"] > 0 and rows[0]["time/setup"] >= rows[0].get("time/v_star", 0)
    assert "time/setup" not in rows[1]
    if algo not in ("starpo-ppo", "starpo-s"):
        assert all(math.isnan(r["critic/explained_var"]) for r in rows)  # no critic, nothing to explain
    assert all(math.isfinite(r["loss/policy"]) for r in rows)  # A*-PO's regression loss too
    apo = ("policy/apo_log_ratio", "policy/apo_residual")  # what drives A*-PO's loss; NaN elsewhere
    assert all(math.isfinite(r[k]) == (algo == "apo") for r in rows for k in apo)
    # the KL reward's size: only StarPO-PPO puts a KL in the reward (GRPO's is a loss term)
    assert all(math.isfinite(r["reward/kl_penalty"]) == (algo == "starpo-ppo") for r in rows)
    # entropy over the loss mask (the paper mask: prompt and observations too) and over the sampled
    # tokens alone; A*-PO trains on the sampled tokens, where the two are one number
    same = [r["policy/entropy"] == pytest.approx(r["policy/entropy_response"]) for r in rows]
    assert all(same) if algo == "apo" else not any(same)


def test_the_kl_reward_size_is_the_coefficient_times_the_summed_kl():
    """Step 0's policy is the reference (KL 0), so the first update is the same at any coefficient
    and step 1 meets the same KL: its logged size scales with kl_coef exactly, and is above 0."""
    rows = {
        c: trainer.train(tiny(**{"algo.name": "starpo-ppo", "algo.kl_coef": c}), progress=False)
        for c in (1e-3, 2e-3)
    }
    assert rows[1e-3][0]["reward/kl_penalty"] == 0.0 == rows[2e-3][0]["reward/kl_penalty"]
    small, big = rows[1e-3][1]["reward/kl_penalty"], rows[2e-3][1]["reward/kl_penalty"]
    assert small > 0 and math.isclose(big, 2 * small, rel_tol=1e-6)


def test_update_changes_the_policy_and_only_through_the_optimizer(monkeypatch):
    seen = {}
    real_load = trainer.models.load

    def spy(*a, **k):
        model, tok = real_load(*a, **k)
        seen["before"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        seen["model"] = model
        return model, tok

    monkeypatch.setattr(trainer.models, "load", spy)
    trainer.train(tiny(**{"train.steps": 1}), progress=False)
    changed = [n for n, p in seen["model"].named_parameters() if not torch.equal(p, seen["before"][n])]
    assert changed, "no parameter moved after an update"


def test_same_config_gives_identical_metrics():
    cfg = tiny(**{"algo.name": "starpo-grpo"})
    assert comparable(trainer.train(cfg, progress=False)) == comparable(trainer.train(cfg, progress=False))


def test_nan_loss_skips_the_step_and_counts_it(monkeypatch):
    from ragen_lib.algorithms import objectives

    real = objectives.clipped_policy_loss

    def poisoned(*a, **k):
        loss, stats = real(*a, **k)
        return loss * float("nan"), stats

    monkeypatch.setattr(objectives, "clipped_policy_loss", poisoned)
    rows = trainer.train(tiny(**{"algo.name": "starpo-grpo", "train.max_skipped_frac": 1}), progress=False)
    assert rows[-1]["policy/skipped_steps"] == 2  # one optimizer step per rollout step, both skipped
    assert all(math.isnan(r["policy/grad_norm"]) for r in rows)


def test_a_non_finite_critic_step_is_skipped_and_counted(monkeypatch):
    real = trainer.A.clipped_value_loss
    monkeypatch.setattr(trainer.A, "clipped_value_loss", lambda *a, **k: real(*a, **k) * float("nan"))
    rows = trainer.train(tiny(**{"train.max_skipped_frac": 1}), progress=False)
    assert [r["critic/skipped_steps"] for r in rows] == [1, 2] and rows[-1]["policy/skipped_steps"] == 0


def test_a_run_that_skips_most_steps_stops_with_an_error_and_is_not_finished(monkeypatch, tmp_path):
    """Before: a run that skipped 5 of 6 steps exited 0 as finished."""
    from ragen_lib.algorithms import objectives

    real = objectives.clipped_policy_loss
    monkeypatch.setattr(
        objectives, "clipped_policy_loss", lambda *a, **k: (real(*a, **k)[0] * float("nan"), real(*a, **k)[1])
    )
    cfg = tiny(**{"algo.name": "starpo-grpo", "train.steps": 6, "train.checkpoint_every": 1})
    run = runs.Run(runs.run_dir(tmp_path, "t", cfg), cfg)
    with pytest.raises(
        trainer.TrainingDiverged, match=r"2 of 2 optimizer steps .* by step 1 .*max_skipped_frac"
    ):
        trainer.train(cfg, run, progress=False)
    assert not run.done and [m["step"] for m in run.metrics()] == [0, 1]  # the evidence is kept
    with runs.Run(run.path, cfg) as again:  # and the run stays resumable: metrics and checkpoint agree
        assert again.resume()[0] == 1 and [m["step"] for m in again.metrics()] == [0, 1]


@pytest.mark.parametrize("warmup", ["expert", "format", "self"])
def test_warmup_records_format_rate_before_and_after(warmup):
    rows = trainer.train(
        tiny(
            **{
                "train.warmup": warmup,
                "train.warmup_steps": 2,
                "train.steps": 1,
                "train.warmup_episodes": 4,
                "env.name": "sokoban",
            }
        ),
        progress=False,
    )
    r = rows[0]
    assert r["warmup/examples"] >= 0
    assert 0 <= r["warmup/format_valid_before"] <= 1 and 0 <= r["warmup/format_valid_after"] <= 1
    assert 0 <= r["warmup/success_before"] <= r["warmup/format_valid_before"] + 1e-9


def test_expert_dataset_turns_are_well_formed():
    cfg = tiny(**{"env.name": "sokoban", "rollout.max_new_tokens": 64})
    from ragen_lib.models import load

    policy, tok = load("tiny-random")
    data = warmup.expert_dataset(policy, tok, cfg, [0, 1])
    assert len(data) >= 2 and set(data.column_names) == {"prompt_ids", "response_ids"}
    text = tok.decode(data[0]["response_ids"])
    # The rollout's prompt ends with the <think> prefill, so the BC target is what follows it.
    assert tok.decode(data[0]["prompt_ids"]).endswith("<|im_start|>assistant\n<think>")
    assert not text.startswith("<think>") and "</think><answer>" in text and "</answer>" in text
    # the whole target fits the rollout's token budget: a response the rollout could have produced
    assert all(len(r["response_ids"]) <= cfg.rollout.max_new_tokens for r in data)


def test_warmup_targets_carry_the_models_own_reasoning_not_a_fixed_sentence():
    """The <think> text of the format warm-up's targets is sampled from the model: another model
    (the same weights, perturbed) gives other reasoning before the same actions, and no two targets
    share their reasoning (a template would)."""
    import copy

    from ragen_lib.models import load

    policy, tok = load("tiny-random")
    cfg = tiny(**{"env.name": "sokoban", "rollout.max_new_tokens": 48})

    def split(data):
        texts = [tok.decode(r["response_ids"], skip_special_tokens=True) for r in data]
        return [t.split("</think>")[0] for t in texts], [t.split("</think>")[1] for t in texts]

    thinks, answers = split(warmup.expert_dataset(policy, tok, cfg, list(range(6)), random_actions=True))
    other = copy.deepcopy(policy)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    thinks2, answers2 = split(warmup.expert_dataset(other, tok, cfg, list(range(6)), random_actions=True))
    assert answers == answers2  # the same states, the same random valid actions
    assert thinks != thinks2  # the reasoning is the model's
    assert len(set(thinks)) == len(thinks) and all(t.strip() for t in thinks)
    assert not any("I will try" in t or "shortest way" in t for t in thinks + thinks2)


def test_format_dataset_has_random_valid_actions():
    from ragen_lib.models import load

    policy, tok = load("tiny-random")
    cfg = tiny(**{"env.name": "bandit"})
    answers = [
        tok.decode(r["response_ids"])
        for r in warmup.expert_dataset(policy, tok, cfg, list(range(40)), random_actions=True)
    ]
    picks = [a.split("<answer>")[1].split("</answer>")[0] for a in answers]
    assert set(picks) == {"Dragon", "Phoenix"}  # the expert would always say Dragon
    assert 10 <= picks.count("Dragon") <= 30  # uniform: 40 draws, p = 0.5
    expert = [tok.decode(r["response_ids"]) for r in warmup.expert_dataset(policy, tok, cfg, list(range(5)))]
    assert all("<answer>Dragon</answer>" in a for a in expert)
    shop = [
        tok.decode(r["response_ids"])
        for r in warmup.expert_dataset(
            policy, tok, tiny(**{"env.name": "webshop"}), list(range(5)), random_actions=True
        )
    ]
    assert all("<answer>" in a for a in shop) and any("search:" in a for a in shop)


def test_format_targets_do_not_depend_on_the_runs_actions_per_turn():
    """The warm-up cloned rollout.max_actions_per_turn random actions a turn ('Down' for k = 1,
    eight for k = 8), so Table 3's arms began RL with different learned habits. Each arm's first
    target now plans the env's own 5 (the run cuts the rest, as RAGEN cuts extra actions)."""
    from ragen_lib.models import load

    policy, tok = load("tiny-random")

    def first_answers(k):
        limits = {"rollout.max_actions_per_turn": k, "rollout.max_actions_per_episode": 5 * k}
        cfg = tiny(
            **{"env.name": "sokoban", "rollout.max_new_tokens": 64, "rollout.enable_think": False, **limits}
        )
        data = warmup.expert_dataset(policy, tok, cfg, list(range(4)), random_actions=True)
        return [tok.decode(r["response_ids"], skip_special_tokens=True) for r in data][:4]  # first turns

    one, eight = first_answers(1), first_answers(8)
    counts = [a.split("</answer>")[0].count("||") + 1 for a in one]
    assert one == eight and max(counts) == 5, (one, eight)


def test_validation_uses_fixed_states():
    assert seeds.val_seeds("sokoban", 4) == seeds.val_seeds("sokoban", 4)
    assert set(seeds.val_seeds("sokoban", 8)).isdisjoint(seeds.train_seeds(tiny(), 0))
    assert seeds.val_seeds("webshop", 3) == warmup.make("webshop").eval_seeds(3)  # the env's own
    with pytest.raises(ValueError, match="unknown env 'sokobn'"):
        seeds.val_seeds("sokobn", 2)


def test_validation_follows_ragens_schedule_from_the_initial_policy_to_the_final_one(monkeypatch):
    """RAGEN validates before any update, after every val_every updates and after the last. Row s holds
    the validation of the policy that played step s's rollout (s updates); the last row, the final
    policy's."""
    seen, inside = [], []  # ("val" | "rollout", fingerprint of the weights)
    real_collect, real_validate, real_load = trainer.collect, trainer.validate, trainer.models.load

    def weights(model) -> tuple:
        flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
        return (float(flat.sum()), float(flat.abs().sum()))

    def collect(policy, *a, **k):
        if not inside:
            seen.append(("rollout", weights(policy)))
        return real_collect(policy, *a, **k)

    def validate(policy, *a, **k):
        seen.append(("val", weights(policy)))
        inside.append(1)
        try:
            return real_validate(policy, *a, **k)
        finally:
            inside.pop()

    def load(*a, **k):
        model, tok = real_load(*a, **k)
        loaded.append(model)
        return model, tok

    loaded = []
    monkeypatch.setattr(trainer, "collect", collect)
    monkeypatch.setattr(trainer, "validate", validate)
    monkeypatch.setattr(trainer.models, "load", load)
    cfg = tiny(**{"algo.name": "starpo-grpo", "train.steps": 5, "train.val_every": 2, "train.val_size": 2})
    rows = trainer.train(cfg, progress=False)

    assert [r["step"] for r in rows if "val/success" in r] == [0, 2, 4]
    assert [what for what, _ in seen] == [
        "val",
        "rollout",
        "rollout",
        "val",
        "rollout",
        "rollout",
        "rollout",
        "val",
    ]
    rollout = [w for what, w in seen if what == "rollout"]  # the policy after s updates, s = 0..4
    val = [w for what, w in seen if what == "val"]
    assert len(set(rollout)) == 5, "every update must change the weights, or this test shows nothing"
    assert val[0] == rollout[0]  # before any update: RAGEN's val_before_train
    assert val[1] == rollout[2]  # after 2 updates, logged in row 2 beside the rollout it played
    assert val[2] == weights(loaded[0]) != rollout[4]  # after the 5th update: the final policy


def test_run_store_round_trip_and_the_disk_a_finished_run_leaves(tmp_path, monkeypatch):
    cfg = tiny(**{"train.checkpoint_every": 1})
    run = runs.Run(runs.run_dir(tmp_path, "t", cfg), cfg)
    monkeypatch.setenv("RAGEN_RUNS_PER_DEVICE", "2")  # as a grid worker of a 2-per-device profile
    trainer.train(cfg, run, progress=False)
    assert run.done and [m["step"] for m in run.metrics()] == [0, 1] and run.problems() == []
    done = json.loads((run.path / runs.DONE).read_text())
    assert done["device"] == "cpu" and done["commit"] == runs.git_commit() != ""  # provenance
    assert done["processes"] == 1  # part of the sampling streams (a resume with another count warns)
    assert done["runs_per_device"] == 2  # its seconds were shared: 07's time rows compare like with like
    assert done["config_hash"] == cfg.hash() and done["final"]["step"] == 1
    # the weights it trained on: a grid retrains the run where the name loads other weights later
    assert done["model_fingerprint"] == models.fingerprint("tiny-random")
    samples = (run.path / "samples.jsonl").read_text().splitlines()
    assert samples and "transcript" in json.loads(samples[0])
    df = runs.load(tmp_path, "t")
    assert len(df) == 2 and (df["cfg.algo.name"] == "starpo-ppo").all()
    assert (df["model_fingerprint"] == done["model_fingerprint"]).all()
    # a finished run keeps its metrics and samples only: no checkpoint, no optimizer state
    left = runs.disk_usage(run.path)
    files = sorted(p.name for p in run.path.iterdir())
    assert files == ["DONE", "config.yaml", "lock", "metrics.jsonl", "samples.jsonl"], files
    assert left < 200_000, left
    print(f"a finished 2-step tiny-random run leaves {left} bytes")


def test_a_run_trained_without_checkpoints_writes_none_and_trains_the_same(tmp_path, monkeypatch):
    """A GPU lease's backlog (`--no-checkpoints`): quick's checkpoints are 3.8 GB each, never come
    back from the host and are never resumed there; leaving them out changes no number."""
    cfg = tiny(**{"train.checkpoint_every": 1, "train.steps": 3})
    saved = []
    real = runs.Run.save_checkpoint
    monkeypatch.setattr(
        runs.Run, "save_checkpoint", lambda self, step, state: saved.append(step) or real(self, step, state)
    )
    with_ckpt = trainer.train(cfg, runs.Run(runs.run_dir(tmp_path / "a", "t", cfg), cfg), progress=False)
    assert saved == [0, 1]
    without = trainer.train(
        cfg, runs.Run(runs.run_dir(tmp_path / "b", "t", cfg), cfg), progress=False, checkpoints=False
    )
    assert saved == [0, 1]  # none more
    same = ("rollout/success", "loss/policy", "policy/grad_norm", "policy/entropy")
    assert [[r[k] for k in same] for r in without] == [[r[k] for k in same] for r in with_ckpt]


def test_keep_final_weights_keeps_weights_only(tmp_path):
    cfg = tiny(**{"train.keep_final_weights": True})
    run = runs.Run(runs.run_dir(tmp_path, "t", cfg), cfg)
    trainer.train(cfg, run, progress=False)
    weights = torch.load(run.path / runs.FINAL_WEIGHTS, weights_only=True)
    assert set(weights) == {
        "format",
        "step",
        "config_hash",
        "config",
        "training_revision",
        "model_fingerprint",
        "policy",
        "critic",
    }
    assert weights["step"] == 1 and weights["config_hash"] == cfg.hash() and not (run.path / "ckpt").exists()
    from ragen_lib import experiments

    policy, critic = experiments.model_size("tiny-random")
    size = (run.path / runs.FINAL_WEIGHTS).stat().st_size
    assert size == pytest.approx(4 * (policy + critic), rel=0.02)


@pytest.mark.parametrize(
    "over",
    [
        {"algo.name": "starpo-ppo"},  # critic and its optimizer
        {"algo.name": "apo", "algo.apo_prompt_pool": 6, "algo.apo_ref_samples": 2},  # V*
        {"algo.name": "starpo-grpo", "train.warmup": "format", "train.warmup_steps": 1},  # the reference
    ],
    ids=["ppo", "apo", "warmed-up"],
)
def test_every_checkpoint_loads_as_plain_tensors_and_its_size_is_planned(tmp_path, monkeypatch, over):
    """weights_only=True reads every checkpoint train writes, and experiments.checkpoint_bytes (the
    plan's disk estimate from the parameter count) matches the file written."""
    from ragen_lib import experiments

    kept = []
    real = runs.Run.save_checkpoint

    def keep_a_copy(self, step, state):
        path = real(self, step, state)
        kept.append(tmp_path / f"copy_{step}.pt")
        kept[-1].write_bytes(path.read_bytes())
        return path

    monkeypatch.setattr(runs.Run, "save_checkpoint", keep_a_copy)
    cfg = tiny(**over, **{"train.checkpoint_every": 1, "train.warmup_episodes": 4})
    trainer.train(cfg, runs.Run(runs.run_dir(tmp_path, "t", cfg), cfg), progress=False)
    [ckpt] = kept  # steps 0 and 1: the last step needs no checkpoint (DONE follows)
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 0 and state["config_hash"] == cfg.hash() and state["processes"] == 1
    assert state["model_fingerprint"] == models.fingerprint("tiny-random")  # a resume checks it
    assert ("critic" in state) == cfg.algo.critic and ("reference" in state) == (cfg.train.warmup != "none")
    assert ("v_star" in state) == (cfg.algo.advantage == "apo")
    planned = experiments.checkpoint_bytes(cfg)
    assert ckpt.stat().st_size == pytest.approx(planned, rel=0.02), (ckpt.stat().st_size, planned)


@pytest.mark.slow
def test_sigkill_mid_run_resumes_without_loss_or_duplicates(tmp_path):
    """Kill the CLI while it trains; the rerun finishes with the same metrics as an unbroken run."""
    cfg_path = tmp_path / "c.yaml"
    config.save(tiny(**{"train.steps": 6, "train.checkpoint_every": 2, "algo.name": "starpo-grpo"}), cfg_path)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    def cli(out):
        return [sys.executable, "-m", "ragen_lib", "run", str(cfg_path), "--out", str(out), "--quiet"]

    subprocess.run(cli(tmp_path / "ref"), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(
        cli(tmp_path / "kill"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    metrics = None
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "kill").rglob("metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 3:
            metrics = found[0]
            break
        time.sleep(0.05)
    assert metrics is not None, "the run never reached step 3"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(cli(tmp_path / "kill"), check=True, env=env, capture_output=True)

    def rows(root):
        [f] = list(root.rglob("metrics.jsonl"))
        return [json.loads(line) for line in f.read_text().splitlines()]

    killed, ref = rows(tmp_path / "kill"), rows(tmp_path / "ref")
    assert [r["step"] for r in killed] == list(range(6))
    assert comparable(killed) == comparable(ref)


def test_cli_run_names_a_missing_model_file_before_making_the_run_folder(tmp_path, capsys):
    from ragen_lib.__main__ import main

    cfg_path, gone = tmp_path / "c.yaml", tmp_path / "weights" / "model.gguf"
    config.save(tiny(**{"model.name": str(gone)}), cfg_path)
    assert main(["run", str(cfg_path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: model file {gone} does not exist: set model.name") and "Traceback" not in err
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["demo", "--env", "sokobn"], ["zeroshot", "--envs", "bandit", "sokobn"]])
def test_cli_names_a_misspelt_env_before_the_model_loads(argv, capsys, monkeypatch):
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model loaded before the env check"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {argv[1]}: unknown env 'sokobn' (did you mean sokoban?); valid envs: ")


def test_cli_names_a_misspelt_or_missing_model_before_loading_it_or_writing_a_report(
    tmp_path, capsys, monkeypatch
):
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("a model loaded"))
    out = tmp_path / "bench"
    doctor = ["doctor", "--device", "cpu", "--out", str(out)]  # its checks took 90 s to say so
    for argv in (["bench", "--quick", "--device", "cpu", "--out", str(out)], doctor, ["demo"], ["zeroshot"]):
        assert main([*argv, "--model", "tiny-randon"]) == 2
        assert capsys.readouterr().err.startswith(
            "error: --model: 'tiny-randon' is not a model we know: did you mean"
        )
        assert main([*argv, "--model", "qwen-0.5b"]) == 2  # a bare word is no hub id (org/name)
        err = capsys.readouterr().err
        assert err.startswith("error: --model: model 'qwen-0.5b' is not a built-in model") and (
            ": give --model an existing .gguf file" in err
        )
        monkeypatch.setenv("RAGEN_MODEL", str(tmp_path / "gone.gguf"))
        assert main(argv) == 2
        assert "gone.gguf does not exist: it comes from RAGEN_MODEL" in capsys.readouterr().err
        monkeypatch.delenv("RAGEN_MODEL")
    assert not out.exists()  # an earlier report there would have been overwritten by one of failures


@pytest.mark.slow
def test_cli_refuses_a_second_writer_and_names_the_checkpoint_it_resumes_from(tmp_path):
    """A notebook and a CLI on one config: the second is refused at once (before its model loads)
    with the owner's PID; killed, the run resumes and says from which checkpoint step."""
    steps = 8
    cfg_path = tmp_path / "c.yaml"
    config.save(
        tiny(**{"train.steps": steps, "train.checkpoint_every": 2, "algo.name": "starpo-grpo"}), cfg_path
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cli = [sys.executable, "-m", "ragen_lib", "run", str(cfg_path), "--out", str(tmp_path), "--quiet"]
    first = subprocess.Popen(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(tmp_path.rglob("step_*.pt")):
            time.sleep(0.05)
        # Frozen after its first checkpoint, the owner holds the lock for as long as the second
        # writer needs to start: no race with its last step, and no steps to run just to wait.
        first.send_signal(signal.SIGSTOP)
        second = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and f"PID {first.pid}" in second.stderr and "kill" in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    [ckpt] = list(tmp_path.rglob("step_*.pt"))
    k = int(ckpt.stem.split("_")[1])
    assert k < steps - 1  # stopped mid-run: there is something left to resume
    again = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"from its checkpoint at step {k}: steps {k + 1}-{steps - 1} to train" in again.stdout
    [metrics] = list(tmp_path.rglob("metrics.jsonl"))
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == list(range(steps))


def test_online_k_plays_k_times_the_groups_and_steps_k_times_from_each_rollout(monkeypatch):
    """RAGEN's online-k: one rollout of k·P groups, k mini-batches on different groups, old log-probs
    fixed at the behaviour policy (so the ratio departs from 1 after the first), steps/k rollouts."""
    calls, olds = [], []
    real = trainer.collect

    def counting(*args, **kwargs):
        calls.append(list(args[3]))  # the states
        return real(*args, **kwargs)

    real_update = trainer._update

    def spy(data, shard, *a, **k):
        olds.append(data["old_logp"].clone())
        out = real_update(data, shard, *a, **k)
        assert torch.equal(data["old_logp"], olds[-1])  # never re-anchored during the update
        return out

    monkeypatch.setattr(trainer, "collect", counting)
    monkeypatch.setattr(trainer, "_update", spy)
    over = {"algo.name": "starpo-grpo", "train.steps": 4, "train.online_k": 2, "train.mini_batch_size": 4}
    rows = trainer.train(tiny(**over), progress=False)
    assert [r["step"] for r in rows] == [0, 2]  # 4 steps' worth in 2 rollouts of 2k groups
    assert [len(c) for c in calls] == [4, 4] and calls[0] != calls[1]  # k·P = 2·2 states each
    assert all(r["policy/optimizer_steps"] == 2 for r in rows)  # 8 episodes in mini-batches of 4
    assert all(r["policy/ratio_std"] > 0 for r in rows)  # the second mini-batch sees the first's update


def test_online_k_trains_exactly_steps_updates_and_validates_every_val_every_updates(monkeypatch):
    """7 steps at online_k 2: rollouts at 0, 2, 4, 6 feeding 2, 2, 2 and 1 updates (the last played
    2·P groups and took 2 updates before: 8 updates' worth; online-10 in smoke's 3 steps took 10).
    val_every 3: validated at 0, at 4 (the first logged step past update 3) and the final policy;
    `step % val_every` met only multiples of 6, so 4 was never validated."""
    calls = []
    real = trainer.collect

    def counting(*args, **kwargs):
        calls.append(len(args[3]))  # the states
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "collect", counting)
    over = {"algo.name": "starpo-grpo", "train.steps": 7, "train.online_k": 2, "train.val_every": 3}
    over |= {"train.val_size": 2}
    rows = trainer.train(tiny(**over), progress=False)
    assert [r["step"] for r in rows] == [0, 2, 4, 6]
    assert [r["policy/optimizer_steps"] for r in rows] == [2, 2, 2, 1]  # 7 updates of 4 episodes
    assert [r["step"] for r in rows if "val/success" in r] == [0, 4, 6]
    assert calls == [2, 4, 4, 2, 4, 2, 2]  # validation: 2 states (at 0, 4, the end); rollouts: k·P


def test_the_cadences_count_updates_and_the_last_rollout_feeds_only_the_updates_left():
    t = config.TrainConfig(steps=7, online_k=2)
    assert [t.rollout_updates(s) for s in t.logged_steps] == [2, 2, 2, 1]
    assert [s for s in t.logged_steps if t.crosses(s - 2, s, 3)] == [0, 4, 6]
    assert [s for s in t.logged_steps if t.due(s, 3)] == [0, 4, 6]  # what the trainer asks
    assert [s for s in range(7) if config.TrainConfig.crosses(s - 1, s, 3)] == [0, 3, 6]  # online-1
    assert not any(config.TrainConfig.crosses(s - 1, s, 0) for s in range(7))  # 0: never


def test_warmup_cli_prints_the_rates_and_refuses_none(capsys):
    from ragen_lib.__main__ import main

    base = [
        "model.name=tiny-random",
        "model.device=cpu",
        "rollout.max_new_tokens=4",
        "train.warmup_steps=1",
        "train.mini_batch_size=4",
        "train.micro_batch_size=2",
    ]
    assert main(["warmup", "--set", *base, "train.warmup=expert"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["warmup"] == "expert" and out["warmup/examples"] == 64
    assert 0 <= out["warmup/format_valid_before"] <= 1 and 0 <= out["warmup/format_valid_after"] <= 1
    # one line, as every user error (was a bare SystemExit, exit 1, recommending self, which
    # finds no valid answer on Bandit to start from)
    assert main(["warmup", "--set", *base]) == 2
    assert "error: train.warmup is none, so there is no warm-up to run: pass --set train.warmup=format" in (
        capsys.readouterr().err
    )
    if not torch.cuda.is_available():  # checked as `run` checks it (was a traceback from torch)
        on_cuda = [x if x != "model.device=cpu" else "model.device=cuda" for x in base]
        assert main(["warmup", "--set", *on_cuda, "train.warmup=format"]) == 2
        assert "model.device=cuda: this machine has no CUDA" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["starpo-grpo", "starpo-s"])
def test_old_logprobs_from_the_update_forward_change_nothing(monkeypatch, algo):
    """One optimizer step per batch: the old log-probs are taken from the update's own forward
    instead of a separate no-grad pass. Same losses, gradients and metrics up to float noise."""
    cfg = tiny(**{"algo.name": algo, "train.steps": 3})
    calls = []  # True: a forward with grad (the update), False: a no-grad one
    real = trainer.models.forward_logp
    monkeypatch.setattr(
        trainer.models, "forward_logp", lambda *a, **k: calls.append(torch.is_grad_enabled()) or real(*a, **k)
    )
    fast = trainer.train(cfg, progress=False)
    n_grad, n_nograd = calls.count(True), calls.count(False)  # the no-grad ones: the reference only
    calls.clear()
    monkeypatch.setattr(trainer, "REUSE_UPDATE_LOGP", False)
    slow = trainer.train(cfg, progress=False)
    # the skipped no-grad policy pass: one per (packed) micro-batch, beside each reference forward
    assert calls.count(True) == n_grad and calls.count(False) == 2 * n_nograd > 0
    for f, s in zip(fast, slow, strict=True):
        for k in ("loss/policy", "policy/grad_norm", "policy/entropy", "policy/kl_ref", "reward/mean"):
            assert f[k] == pytest.approx(s[k], rel=1e-4, abs=1e-6), k
        assert f["rollout/success"] == s["rollout/success"]
        assert f["rollout/format_valid"] == s["rollout/format_valid"]


def test_the_reference_forward_runs_only_when_something_reads_it(monkeypatch):
    """train.log_kl_ref=false with no KL term: no reference forward, policy/kl_ref NaN, and the
    update unchanged; a KL term (or A*-PO's objective) still gets its reference."""
    calls = []  # one per no-grad forward (GRPO with one optimizer step: the reference's only)
    real = trainer.models.forward_logp

    def counted(*a, **k):
        if not torch.is_grad_enabled():
            calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(trainer.models, "forward_logp", counted)
    base = {"algo.name": "starpo-grpo", "algo.kl_coef": 0.0, "train.steps": 2}
    on = trainer.train(tiny(**base), progress=False)
    assert calls  # the reference, for the diagnostic
    calls.clear()
    off = trainer.train(tiny(**base, **{"train.log_kl_ref": False}), progress=False)
    assert calls == []
    for f, s in zip(on, off, strict=True):
        assert math.isfinite(f["policy/kl_ref"]) and math.isnan(s["policy/kl_ref"])
        for k in ("loss/policy", "policy/grad_norm", "policy/entropy", "reward/mean"):
            assert f[k] == pytest.approx(s[k], rel=1e-6, abs=1e-9), k
    for needs in ({"algo.kl_coef": 0.001}, {"algo.name": "apo"}):
        calls.clear()
        [row] = trainer.train(
            tiny(**{**base, "train.steps": 1, "train.log_kl_ref": False, **needs}), progress=False
        )
        assert calls and math.isfinite(row["policy/kl_ref"]), needs


@pytest.mark.parametrize("algo", ["starpo-ppo", "apo"])
def test_the_logged_losses_and_update_statistics_do_not_depend_on_the_micro_batches(algo):
    """loss/policy and loss/value are each mini-batch's loss: micro-batches of 1 row or of
    the whole batch log the same numbers (they once logged the mini-batch loss / their count). So
    are the clip fractions, the approx KL and A*-PO's statistics, which the clip and staleness
    mechanism checks read: they were plain means over micro-batches, so the packing (and, in a
    data-parallel run, the process count) moved them (clip fractions 1.5x on two processes)."""
    # Mini-batches of 4 rows: micro-batches of 1 row, against 3 + 1 (a mean over those two weighed
    # the lone row as much as the other three) and the whole mini-batch.
    base = {"algo.name": algo, "train.steps": 1, "train.groups": 4, "train.mini_batch_size": 4,
            "train.actor_lr": 0.05, "algo.gamma": 0.9}  # fmt: skip
    if algo == "apo":
        base.update({"algo.apo_prompt_pool": 8, "algo.apo_ref_samples": 2})
    [one] = trainer.train(tiny(**base, **{"train.micro_batch_size": 1}), progress=False)
    [three] = trainer.train(tiny(**base, **{"train.micro_batch_size": 3}), progress=False)
    [all_] = trainer.train(tiny(**base, **{"train.micro_batch_size": 64}), progress=False)
    keys = ["loss/policy", "loss/value"] if algo == "starpo-ppo" else ["loss/policy"]
    stats = (
        ["policy/clip_frac_low", "policy/clip_frac_high", "policy/approx_kl"]
        if algo == "starpo-ppo"
        else ["policy/apo_log_ratio", "policy/apo_residual"]
    )
    for k in keys + stats:
        assert math.isfinite(one[k]), k
        assert one[k] == pytest.approx(all_[k], rel=1e-4, abs=1e-7), k
        assert three[k] == pytest.approx(all_[k], rel=1e-4, abs=1e-7), k
    assert any(one[k] != 0 for k in keys) and any(one[k] != 0 for k in stats), one


def test_four_mini_batches_move_the_ratio_and_the_clip_acts():
    """With one optimizer step per batch the ratio is exactly 1 and clip-higher is inert; with four,
    every mini-batch after the first sees a policy the earlier ones moved."""
    over = {"algo.name": "starpo-ppo", "algo.gamma": 0.9, "train.groups": 4, "train.mini_batches": 4,
            "train.actor_lr": 0.05, "train.steps": 1}  # fmt: skip
    [row] = trainer.train(tiny(**over), progress=False)
    assert row["policy/optimizer_steps"] == 4
    assert row["policy/ratio_std"] > 0.01
    assert row["policy/clip_frac_low"] + row["policy/clip_frac_high"] > 0
    [one] = trainer.train(tiny(**{**over, "train.mini_batches": 1}), progress=False)
    assert one["policy/optimizer_steps"] == 1 and one["policy/ratio_std"] == pytest.approx(0, abs=1e-6)
    assert one["policy/clip_frac_low"] == one["policy/clip_frac_high"] == 0


@pytest.mark.parametrize("mode", ["paper", "response"])
def test_loss_mask_mode_reaches_the_loss_the_whitening_and_the_entropy(monkeypatch, mode):
    """paper: every token after the system turn (observations included); response: generated only."""
    seen = {"collect": [], "estimator": [], "forward": []}
    real_collect, real_gae, real_fwd = (
        trainer.collect,
        A.ADVANTAGE_ESTIMATORS["gae"],
        trainer.models.forward_logp,
    )
    monkeypatch.setattr(trainer, "collect", lambda *a, **k: seen["collect"].append(real_collect(*a, **k))
                        or seen["collect"][-1])  # fmt: skip
    monkeypatch.setitem(
        A.ADVANTAGE_ESTIMATORS, "gae", lambda x, a: seen["estimator"].append(x.mask) or real_gae(x, a)
    )

    def forward(model, ids, attn, mask, **k):
        seen["forward"].append(mask)
        return real_fwd(model, ids, attn, mask, **k)

    monkeypatch.setattr(trainer.models, "forward_logp", forward)
    trainer.train(tiny(**{"env.name": "sokoban", "algo.loss_mask": mode, "train.steps": 1}), progress=False)
    [batch], [mask] = seen["collect"], seen["estimator"]  # no validation: the one collect is training's
    want = batch.context_mask if mode == "paper" else batch.loss_mask
    assert torch.equal(mask, want)  # whitening and GAE run over this mask
    observed = (batch.context_mask > 0) & (batch.loss_mask == 0)
    assert observed.any()  # the prompt and observations: in the paper mask, not in the response mask
    # Three passes over the batch cover exactly this mask: old policy (entropy, KL), reference (KL),
    # and the update (the loss): starpo-ppo's in-reward KL needs the old log-probs before the update.
    assert sum(float(m.sum()) for m in seen["forward"]) == 3 * float(want.sum())


def test_cli_refuses_a_finding_that_is_not_one_folder_name(tmp_path, capsys):
    """`--finding ../../x` wrote a run outside the run store, `--finding ""` into runs/ itself, where
    `plot` does not look."""
    from ragen_lib.__main__ import main

    for bad in ("../../esc", "", "a/b"):
        with pytest.raises(SystemExit) as e:
            main(["run", "params/examples/bandit_ppo.yaml", "--out", str(tmp_path), "--finding", bad])
        assert (
            e.value.code == 2
            and f"argument --finding: {bad!r} is not one folder name" in capsys.readouterr().err
        )
    assert not any(tmp_path.iterdir())


def test_resuming_with_another_process_count_says_the_streams_differ():
    """Each process samples its share with sample_seed + rank, so a checkpoint of a 2-process run
    resumed by 1 process continues on other random streams: said, not silent (the run key does not
    hold the process count: the same config, the same distribution)."""
    import warnings as w
    from types import SimpleNamespace

    from ragen_lib import runs as R
    from ragen_lib.trainer import _resume

    class OneProcess:
        world, main = 1, True

        def broadcast(self, x):
            return x

    def run_with(state):
        return SimpleNamespace(path="runs/x", resume=lambda: (4, state), checkpoint_file=lambda: "ckpt")

    with pytest.warns(R.RunStoreWarning, match="written by 2 process.*resumes with 1: after step 4"):
        assert _resume(run_with({"processes": 2}), OneProcess())[0] == 4
    with w.catch_warnings():
        w.simplefilter("error")
        _resume(run_with({"processes": 1}), OneProcess())
        _resume(run_with({}), OneProcess())  # a checkpoint from before it was recorded


def test_a_context_too_small_for_an_eval_envs_first_prompt_stops_before_the_warm_up(tmp_path, capsys):
    """It raised from the first validation or rollout, after the model load and any warm-up, as a
    traceback that left an empty run folder; now one line, before the warm-up spends minutes."""
    from ragen_lib.__main__ import main

    cfg = tiny(
        **{
            "env.name": "bandit",
            "env.eval_envs": ["sokoban"],  # Sokoban's first prompt is the longer
            "rollout.max_context_tokens": 260,  # bandit 219 + 12 fits, sokoban 273 does not
            "train.warmup": "format",
        }
    )
    path = tmp_path / "c.yaml"
    config.save(cfg, path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer, "warmup", lambda *a, **k: pytest.fail("the warm-up ran first"))
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sokoban: a first prompt of ") and "Traceback" not in err
    assert "raise rollout.max_context_tokens to at least" in err


def test_an_objective_stat_nobody_declared_is_named_with_where_to_declare_it(monkeypatch):
    real = A.POLICY_OBJECTIVES["ppo-clip"]

    def chatty(logp, mb, a, **k):
        loss, s = real(logp, mb, a, **k)
        return loss, {**s, "policy/pg_abs_adv": mb["advantages"].abs().mean()}

    monkeypatch.setitem(A.POLICY_OBJECTIVES, "ppo-clip", chatty)
    with pytest.raises(KeyError, match=r"returned the stat 'policy/pg_abs_adv', which metrics.UPDATE_KEYS"):
        trainer.train(tiny(**{"train.steps": 1}), progress=False)


def test_an_objective_reading_a_reference_nobody_computed_fails_by_name(monkeypatch):
    """Without a KL term or the kl_ref diagnostic no reference forward runs: an objective that reads
    mb["ref_logp"] but is not declared in OBJECTIVES_WITH_REFERENCE would have read zeros."""
    real = A.POLICY_OBJECTIVES["ppo-clip"]

    def to_reference(logp, mb, a, **k):
        loss, s = real(logp, mb, a, **k)
        return loss + (logp - mb["ref_logp"]).pow(2).mean(), s

    monkeypatch.setitem(A.POLICY_OBJECTIVES, "ppo-clip", to_reference)
    over = {"train.steps": 1, "algo.name": "starpo-grpo", "algo.kl_coef": 0.0, "train.log_kl_ref": False}
    with pytest.raises(KeyError, match=r"reads mb\['ref_logp'\].*OBJECTIVES_WITH_REFERENCE: add it there"):
        trainer.train(tiny(**over), progress=False)
    rows = trainer.train(tiny(**{**over, "train.log_kl_ref": True}), progress=False)  # computed: it runs
    assert math.isfinite(rows[0]["policy/kl_ref"])


def test_apo_stage_one_frees_the_reference_models_decoders(monkeypatch):
    """Stage 1 is the only time the reference generates, but its static decoders (KV caches and
    CUDA graphs: up to generation.POOL_GB, 16 GiB, on a GPU) stayed pooled for the whole run."""
    from ragen_lib import generation

    seen = {}
    estimate = trainer.VStar.estimate.__func__

    def spy_estimate(cls, reference, tok, cfg):
        out = estimate(cls, reference, tok, cfg)
        seen["pooled during stage 1"] = bool(generation.static_decoders(reference))
        seen["reference"] = reference
        return out

    def spy_collect(*args, **kwargs):
        if "reference" in seen:  # stage 1 plays through collect too
            seen.setdefault(
                "pooled at the first rollout", bool(generation.static_decoders(seen["reference"]))
            )
        return collect(*args, **kwargs)

    collect = trainer.collect
    monkeypatch.setattr(trainer.VStar, "estimate", classmethod(spy_estimate))
    monkeypatch.setattr(trainer, "collect", spy_collect)
    cfg = tiny(**{"algo.name": "apo", "algo.apo_prompt_pool": 6, "algo.apo_ref_samples": 2,
                  "rollout.kv_cache": "static", "train.steps": 1})  # fmt: skip
    trainer.train(cfg, progress=False)
    assert seen["pooled during stage 1"] and not seen["pooled at the first rollout"], seen.keys()
