"""Fast pins of the training loop's small pieces, each worked by hand: the divergence threshold, a
skipped non-finite step, the seed streams, A*-PO's stage 1 and V* refresh, and the warm-ups' data.
Each test names the slip it catches (found by mutation testing; the training-loop tests run a model
for seconds and did not)."""

import math
import types

import numpy as np
import pytest
import torch

from ragen_lib import config, models, seeds, trainer, warmup
from ragen_lib.distributed import Ranks, Shard


def apo_cfg(**over) -> config.Config:
    return config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}, "algo": {"name": "apo"}}, over
    )


def test_divergence_stops_only_past_max_skipped_frac_of_the_optimizer_steps():
    """Slip pinned: `worst >= max(1, frac · total)`, which stops a run at exactly the allowed share."""
    t = config.TrainConfig(max_skipped_frac=0.25)
    trainer._stop_if_diverged({"policy": 2, "critic": 0, "optimizer_steps": 8}, t, 3, None)  # 2/8: at it
    trainer._stop_if_diverged({"policy": 1, "critic": 0, "optimizer_steps": 1}, t, 0, None)  # 1: never
    with pytest.raises(trainer.TrainingDiverged, match=r"3 of 8 optimizer steps .* by step 3"):
        trainer._stop_if_diverged({"policy": 0, "critic": 3, "optimizer_steps": 8}, t, 3, None)


def test_an_infinite_gradient_is_skipped_and_counted_like_a_nan():
    """Slip pinned: `if not math.isnan(norm)`: an inf norm stepped and poisoned the weights."""
    lin = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in lin.parameters()]
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    for p in lin.parameters():
        p.grad = torch.full_like(p, float("inf"))
    skipped = {"policy": 0, "critic": 0}
    norm = trainer._step(lin, opt, 1.0, Shard(Ranks("cpu"), torch.arange(1), 0, 1), skipped, "policy")
    assert math.isinf(norm) and skipped == {"policy": 1, "critic": 0}
    assert all(torch.equal(p, b) for p, b in zip(lin.parameters(), before))


def test_every_step_keyed_draw_has_its_own_salt():
    """Slip pinned: two uses sharing a salt (FILTER = ROLLOUT_SAMPLING) draw the same stream."""
    salts = [seeds.TRAIN_STATES, seeds.WARMUP_STATES, seeds.APO_PICK, seeds.ROLLOUT_SAMPLING, seeds.FILTER,
             seeds.MINIBATCH_ORDER, seeds.V_STAR_SAMPLING]  # fmt: skip
    assert len(set(salts)) == len(salts)
    assert seeds.WARMUP_ORDER != seeds.APO_POOL  # the run-keyed ones


def test_drawn_states_stay_below_the_validation_states(monkeypatch):
    """Slip pinned: an upper bound past 2**31 - 1, so training could draw a validation state (2**31 + i).
    The generator is replaced by one that returns the highest value its bounds allow."""

    class Highest:
        def integers(self, lo, hi, n):
            return np.full(n, hi - 1, dtype=np.int64)

    monkeypatch.setattr(seeds, "step_rng", lambda *a: Highest())
    assert seeds.draw_states(0, 3, seeds.TRAIN_STATES, 2) == [2**31 - 2] * 2
    assert max(seeds.draw_states(0, 3, seeds.TRAIN_STATES, 1)) < min(seeds.val_seeds("sokoban", 4))


def _fake_collect(table, calls):
    """A `collect` for estimate_v_star: state s's samples are table[s] (cycled), n per state."""

    def collect(model, tok, env, states, n, rcfg, env_kwargs=None, sample_seed=None):
        assert rcfg.temperature == 1.0  # V* is an expectation under the model itself
        calls.append((list(states), n))
        return types.SimpleNamespace(
            rewards=torch.tensor([table[s][j % len(table[s])] for s in states for j in range(n)])
        )

    return collect


def test_v_star_stage_one_and_its_refresh_keep_stage_ones_reward_scale(monkeypatch):
    """V*(x) = β1·(logsumexp(r/β1) − ln n), β1 = 0.5, rewards / (their range over stage 1: 4).
    Stage 1, state 10: r = (0, 4)/4 → 0.5·(ln(1 + e²) − ln 2) = 0.716890; state 20: (2, 2)/4 → 0.5.
    Slip pinned: each state's samples sliced as rewards[j : j + n] (state 20 got (4, 2)).
    Refresh, state 10 now (0, 2): still / 4 → 0.5·(ln(1 + e) − ln 2) = 0.310057, state 20: 0.5.
    Slip pinned: the refresh not passing stage 1's scale (it chose 2 again: 0.716890 and 1.0)."""
    calls = []
    cfg = apo_cfg(**{"algo.apo_ref_samples": 2})
    monkeypatch.setattr(trainer, "collect", _fake_collect({10: [0.0, 4.0], 20: [2.0, 2.0]}, calls))
    values, scale = trainer.estimate_v_star(None, None, cfg, [10, 20], -1)
    assert scale == 4.0 and calls == [([10, 20], 2)]
    assert values[10] == pytest.approx(0.716890, abs=1e-6) and values[20] == pytest.approx(0.5)
    v = trainer.VStar([10, 20], values, scale)
    monkeypatch.setattr(trainer, "collect", _fake_collect({10: [0.0, 2.0], 20: [2.0, 2.0]}, calls))
    v.refresh(None, None, cfg, 5)
    assert v.reward_scale == 4.0
    assert v.values[10] == pytest.approx(0.310057, abs=1e-6) and v.values[20] == pytest.approx(0.5)


def test_adaptive_v_star_spends_the_second_half_of_the_budget_on_the_varying_states(monkeypatch):
    """apo_ref_samples 4 on a pool of 2: 2 samples each (4), then the other 4 all to state 10, the one
    whose rewards varied. Slip pinned: `extra = apo_ref_samples − n0` (2: half that budget lost)."""
    calls = []
    cfg = apo_cfg(**{"algo.apo_ref_samples": 4, "algo.apo_adaptive": True})
    monkeypatch.setattr(trainer, "collect", _fake_collect({10: [0.0, 1.0], 20: [1.0]}, calls))
    trainer.estimate_v_star(None, None, cfg, [10, 20], -1)
    assert calls == [([10, 20], 2), ([10], 4)]


class _Batch:
    """What `_valid_first_turns` reads of a RolloutBatch."""

    def __init__(self, ids, attn, loss, valid):
        self.input_ids, self.attention_mask, self.loss_mask = ids, attn, loss
        self.turn_format_valid = valid

    def __len__(self):
        return len(self.input_ids)


def test_self_warmup_examples_split_at_the_first_generated_token():
    """Row 0: prompt 5 6 7, answer 8 9, padding; row 1 did not parse. Slip pinned: the split one
    token late (the answer's first token moved into the prompt, which the loss does not train)."""
    b = _Batch(
        torch.tensor([[5, 6, 7, 8, 9, 0], [5, 6, 4, 4, 0, 0]]),
        torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]),
        torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0]]),
        [[True, False], [False]],
    )
    assert warmup._valid_first_turns(b) == [{"prompt_ids": [5, 6, 7], "response_ids": [8, 9]}]


@pytest.mark.parametrize("micro", [1, 2])
def test_sft_step_averages_the_response_tokens_of_all_examples(monkeypatch, micro):
    """A stand-in model whose log-prob at every position is −w·(token id), w = 1. Examples (prompt |
    response): (1 2 | 3 4) and (5 | 6 7 8): the NLL of the 5 response tokens, (3+4 + 6+7+8) / 5 = 5.6,
    whatever the micro-batches. Slips pinned: dividing by the micro-batch's examples (28 at micro 1)
    and a mask that starts one token early (the last prompt token trained: (2+3+4 + 5+6+7+8) / 5 = 7)."""
    policy = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.ones_(policy.weight)
    monkeypatch.setattr(warmup, "forward_logp", lambda m, ids, attn, mask, **k: (-m.weight.sum() * ids, None))
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    examples = [
        {"prompt_ids": [1, 2], "response_ids": [3, 4]},
        {"prompt_ids": [5], "response_ids": [6, 7, 8]},
    ]
    assert warmup.sft_step(policy, opt, examples, "cpu", micro) == pytest.approx(5.6)


def test_self_warmup_samples_a_new_stream_each_round_and_counts_every_kept_example(monkeypatch):
    """3 rounds, each keeping 1 answer: 3 examples, played with seeds 1000, 1001, 1002 on new states.
    Slips pinned: one sampling seed for every round, and `kept = len(good)` (the last round's only)."""
    seen = []
    monkeypatch.setattr(warmup, "first_turn_probe", lambda *a, **k: {"format_valid": 0.0})
    monkeypatch.setattr(warmup, "collect", lambda p, t, e, states, n, *a, sample_seed, **k: seen.append(
        (tuple(states), n, sample_seed)))  # fmt: skip
    monkeypatch.setattr(warmup, "_valid_first_turns", lambda b: [{"prompt_ids": [1], "response_ids": [2]}])
    monkeypatch.setattr(warmup, "sft_step", lambda *a, **k: 0.0)
    cfg = config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}},
        {"train.warmup": "self", "train.warmup_steps": 3, "train.groups": 2, "train.warmup_episodes": 8},
    )
    out = warmup.warmup(torch.nn.Linear(1, 1), None, cfg, "cpu")
    assert out["warmup/examples"] == 3
    assert [s for _, _, s in seen] == [1000, 1001, 1002] and [n for _, n, _ in seen] == [4, 4, 4]
    assert len({states for states, _, _ in seen}) == 3


@pytest.mark.slow  # three rollouts and two model loads: about 50 s on a busy 2-core runner
def test_online_k_cadences_and_a_resume_continue_exactly_where_the_checkpoint_left(monkeypatch, tmp_path):
    """5 steps at online_k 2, one mini-batch per update: rollouts at 0, 2, 4 feeding 2, 2, 1 updates.
    checkpoint_every 3: the checkpoint after update 3 is the one written at step 2 (its updates 3-4).
    Step 0's two policy steps are non-finite (skipped, counted; max_skipped_frac 1 trains through);
    the run is killed at step 4's rollout and resumed. Slips pinned: n_updates = online_k (step 4's
    one update cut in 2 optimizer steps); the checkpoint cadence tested on the updates before the
    step (`due`: at step 0, not 2); the resume starting at checkpoint + 1 (3: not a logged step); the
    skip count not restored (0 at step 4); optimizer steps counted once per rollout (2 skipped of
    "1" stopped the run at step 0); the setup metrics logged again at the resumed step."""
    from ragen_lib import runs
    from ragen_lib.algorithms import objectives

    cfg = config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}, "rollout": {"max_new_tokens": 4}},
        {"algo.name": "starpo-grpo", "train.steps": 5, "train.online_k": 2, "train.groups": 2,
         "train.group_size": 2, "train.mini_batches": 1, "train.micro_batch_size": 4, "train.val_every": 0,
         "train.samples_every": 0, "train.checkpoint_every": 3, "train.max_skipped_frac": 1},
    )  # fmt: skip
    real_loss, losses = objectives.clipped_policy_loss, []

    def first_nan(*a, **k):
        loss, stats = real_loss(*a, **k)
        losses.append(1)
        return (loss * float("nan") if len(losses) <= 2 else loss), stats

    monkeypatch.setattr(objectives, "clipped_policy_loss", first_nan)
    real_collect, rollouts = trainer.collect, []

    def killed_at_the_third(*a, **k):
        rollouts.append(1)
        if len(rollouts) == 3:
            raise KeyboardInterrupt
        return real_collect(*a, **k)

    monkeypatch.setattr(trainer, "collect", killed_at_the_third)
    run = runs.Run(runs.run_dir(tmp_path, "t", cfg), cfg)
    saved, real_save = [], run.save_checkpoint
    monkeypatch.setattr(
        run, "save_checkpoint", lambda step, state: saved.append(step) or real_save(step, state)
    )
    with pytest.raises(KeyboardInterrupt):
        trainer.train(cfg, run, progress=False)
    run.close()
    assert saved == [2] and [m["step"] for m in run.metrics()] == [0, 2]
    assert [m["policy/optimizer_steps"] for m in run.metrics()] == [2, 2]
    assert [m["policy/skipped_steps"] for m in run.metrics()] == [2, 2]
    monkeypatch.setattr(trainer, "collect", real_collect)
    with runs.Run(run.path, cfg) as again:
        [row] = trainer.train(cfg, again, progress=False)
    assert row["step"] == 4 and row["policy/optimizer_steps"] == 1 and row["policy/skipped_steps"] == 2
    assert not any(k.startswith(("time/setup", "warmup/")) for k in row)


def test_the_kl_reward_size_is_kl_coef_times_each_episodes_summed_kl(monkeypatch):
    """A stand-in KL of 0.5 on every token: reward/kl_penalty = kl_coef · 0.5 · (the kept rows' mean
    number of loss tokens). Slip pinned: the per-token mean instead of the sum (kl_coef · 0.5 whatever
    the episode's length), which the scaling test in test_trainer.py cannot tell."""
    masks, real_update = [], trainer._update
    monkeypatch.setattr(trainer.A, "kl_penalty", lambda old, ref, kind: torch.full_like(old, 0.5))
    monkeypatch.setattr(trainer, "_update", lambda data, *a, **k: masks.append(data["loss_mask"].clone())
                        or real_update(data, *a, **k))  # fmt: skip
    cfg = config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}, "rollout": {"max_new_tokens": 4}},
        {"algo.name": "starpo-ppo", "algo.kl_coef": 0.01, "train.steps": 1, "train.groups": 2,
         "train.group_size": 2, "train.mini_batch_size": 4, "train.val_every": 0, "train.samples_every": 0},
    )  # fmt: skip
    [row] = trainer.train(cfg, progress=False)
    [mask] = masks
    tokens = float(mask.sum(1).mean())
    assert tokens > 1 and row["reward/kl_penalty"] == pytest.approx(0.01 * 0.5 * tokens, rel=1e-6)


def test_a_warmed_up_runs_checkpoint_keeps_and_restores_its_reference():
    """After a warm-up the reference is not the loaded model: the checkpoint carries it and a resume
    loads it back. Slips pinned: the policy's weights saved as the reference, and `_restore` skipping
    it (a resumed run's KL and A*-PO's log-ratio then measured against the wrong model)."""
    torch.manual_seed(0)
    policy, reference, p2, r2 = (torch.nn.Linear(2, 2) for _ in range(4))
    cfg = config.from_dict({"model": {"name": "tiny-random", "device": "cpu"}}, {"train.warmup": "format"})
    opt = torch.optim.AdamW(policy.parameters())
    ck = trainer._checkpoint(policy, reference, opt, None, None, {"policy": 0}, None, cfg)
    trainer._restore(ck, p2, r2, torch.optim.AdamW(p2.parameters()), None, None)
    for want, got in ((policy, p2), (reference, r2)):
        assert all(torch.equal(a, b) for a, b in zip(want.parameters(), got.parameters()))
    assert not torch.equal(policy.weight, reference.weight)  # else this shows nothing


def test_apo_stage_two_refreshes_v_star_on_schedule_and_scales_rewards_by_stage_ones_range(monkeypatch):
    """Stage 1 (stood in for) chose a reward scale of 4: stage 2's advantages read the rewards / 4
    (each played reward + 1 here, so none is 0). apo_refresh_every 1 over 2 steps: a refresh before
    step 1 only; stage 1 estimated V* from the same policy before step 0. Slips pinned: the rewards
    not divided (A*-PO's betas then meet a Sokoban return of 12), and `step % every == 0` alone (a
    refresh at step 0)."""
    refreshed, played, seen = [], [], []
    monkeypatch.setattr(trainer, "estimate_v_star", lambda m, t, c, pool, step: ({s: 0.0 for s in pool}, 4.0))
    monkeypatch.setattr(trainer.VStar, "refresh", lambda self, policy, tok, cfg, step: refreshed.append(step))
    real_collect, real_apo = trainer.collect, trainer.A.ADVANTAGE_ESTIMATORS["apo"]

    def collect(*a, **k):
        b = real_collect(*a, **k)
        b.rewards = b.rewards + 1.0
        played.append(b.rewards)
        return b

    monkeypatch.setattr(trainer, "collect", collect)
    monkeypatch.setitem(
        trainer.A.ADVANTAGE_ESTIMATORS, "apo", lambda x, a: seen.append(x.rewards) or real_apo(x, a)
    )
    cfg = config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}, "rollout": {"max_new_tokens": 4}},
        {"algo.name": "apo", "algo.apo_prompt_pool": 4, "algo.apo_ref_samples": 2,
         "algo.apo_refresh_every": 1, "train.steps": 2, "train.groups": 2, "train.group_size": 2,
         "train.mini_batch_size": 4, "train.val_every": 0, "train.samples_every": 0},
    )  # fmt: skip
    trainer.train(cfg, progress=False)
    assert refreshed == [1]
    assert len(seen) == len(played) == 2  # every row kept (filter_keep 1), in the order played
    assert all(torch.allclose(x * 4, r.to(x.dtype)) for x, r in zip(seen, played))


def test_token_mean_weighs_a_micro_batch_by_its_share_of_its_own_mini_batchs_tokens():
    """5 rows of 1..5 loss tokens; the mini-batch {3, 4} (4 + 5 = 9 tokens) is one micro-batch of
    weight 9/9 = 1. Slip pinned: dividing by the whole batch's 15 tokens (weight 9/15: each of several
    mini-batches' losses shrunk by its share of the batch)."""
    lengths = torch.arange(1, 6)
    attn = (torch.arange(5)[None, :] < lengths[:, None]).long()
    data = {"input_ids": attn * 7, "attention_mask": attn, "loss_mask": attn.double()}
    t = config.TrainConfig(micro_batch_size=2, loss_agg="token-mean")
    rows = torch.arange(5)
    parts = trainer._micro_batches(
        Shard(None, rows, 0, 5), torch.tensor([3, 4]), attn.sum(1).double(), data, t
    )
    assert [(r.tolist(), w) for r, w in parts] == [([3, 4], pytest.approx(1.0))]


def test_the_grpo_kl_term_has_the_same_gradient_whatever_the_micro_batches():
    """GRPO's KL loss term on 4 rows of 3..6 tokens, advantages 0 (the KL alone moves the policy):
    micro-batches of 1 row and of all 4 give one grad norm. Slip pinned: the term not weighted by the
    micro-batch's token share (each micro-batch's KL mean counted whole: 4 of them, about 4× the norm)."""
    policy, _ = models.load("tiny-random", device="cpu", dtype="float32")
    ids, attn = torch.full((4, 6), 5), (torch.arange(6)[None, :] < torch.tensor([[3], [4], [5], [6]])).long()
    mask = attn.float() * (torch.arange(6) >= 1)
    zeros = torch.zeros(4, 6)
    data = {"input_ids": ids * attn, "attention_mask": attn, "loss_mask": mask, "ref_logp": zeros - mask}
    data |= {k: zeros for k in ("old_logp", "advantages", "returns", "values", "entropy")}
    norms = []
    for micro in (1, 4):
        cfg = config.from_dict(
            {"model": {"name": "tiny-random", "device": "cpu"}},
            {"algo.name": "starpo-grpo", "algo.kl_coef": 1.0, "algo.entropy_coef": 0.0,
             "train.micro_batch_size": micro, "train.mini_batch_size": 4},
        )  # fmt: skip
        opt = torch.optim.SGD(policy.parameters(), lr=0.0)
        out = trainer._update(
            {k: v.clone() for k, v in data.items()}, Shard(Ranks("cpu"), torch.arange(4), 0, 4),
            (policy, opt), (None, None), cfg, 0, "cpu", {"policy": 0, "critic": 0},
            mb_size=4, old_from_update=False,
        )  # fmt: skip
        norms += out["policy/grad_norm"]
    assert norms[0] > 0 and norms[0] == pytest.approx(norms[1], rel=1e-4)


def test_validation_samples_at_val_temperature_with_its_fixed_seed(monkeypatch):
    """3 states, one success, half the turns valid. Slip pinned: validating at the rollout's
    temperature (1.0 here) instead of train.val_temperature (0.5)."""
    seen = []

    class Batch(types.SimpleNamespace):
        def __len__(self):
            return 3

    def collect(policy, tok, env, states, n, rcfg, env_kwargs=None, sample_seed=None):
        seen.append((len(states), n, rcfg.temperature, sample_seed))
        return Batch(success=torch.tensor([True, False, False]), format_valid_rate=0.5)

    monkeypatch.setattr(trainer, "collect", collect)
    cfg = config.from_dict(
        {"model": {"name": "tiny-random", "device": "cpu"}},
        {"rollout.temperature": 1.0, "train.val_temperature": 0.5, "train.val_size": 3},
    )
    assert trainer.validate(None, None, cfg, "bandit") == {"val/success": 1 / 3, "val/format_valid": 0.5}
    assert seen == [(3, 1, 0.5, seeds.VALIDATION_SAMPLING)]
