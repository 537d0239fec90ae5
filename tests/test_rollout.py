import itertools
import math

import pytest
import torch

from ragen_lib import models
from ragen_lib.config import RolloutConfig
from ragen_lib.envs import REGISTRY, make
from ragen_lib.rollout import Episode, _to_batch, _TokenTrack, _user_turn_suffix, collect, consistency_bonus
from tests.conftest import LineEnv


@pytest.fixture(scope="module")
def tiny():
    return models.load(models.TINY_RANDOM, device="cpu")


@pytest.mark.parametrize("env_name", sorted(REGISTRY))
def test_tiny_random_rollout_end_to_end(tiny, env_name):
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=12, max_turns=2)
    batch = collect(model, tok, env_name, seeds=[3, 4], group_size=2, cfg=cfg, sample_seed=0)
    B = 4
    assert len(batch) == B and batch.input_ids.shape == batch.loss_mask.shape
    assert batch.group_ids.tolist() == [0, 0, 1, 1] and batch.seeds == [3, 3, 4, 4]
    for b in range(B):
        ids, mask = batch.input_ids[b], batch.loss_mask[b].bool()
        # The loss mask decoded back is exactly the text the model generated, turn after turn.
        assert tok.decode(ids[mask]) == "".join(batch.responses[b])
        assert 1 <= batch.num_turns[b] <= 2
        assert batch.rewards[b].item() == pytest.approx(sum(batch.turn_rewards[b]))
        # The trajectory reward sits on the last generated token and nowhere else.
        last = mask.nonzero().max()
        assert batch.token_rewards[b, last].item() == pytest.approx(batch.rewards[b].item())
        assert batch.token_rewards[b].abs().sum().item() == pytest.approx(abs(batch.rewards[b].item()))
        assert not (batch.terminated[b] and batch.truncated[b])
        assert batch.success[b] <= batch.terminated[b]
        assert (batch.loss_mask[b] <= batch.attention_mask[b]).all()
    assert 0.0 <= batch.format_valid_rate <= 1.0
    # Every float tensor is float32: a float64 reasoning bonus (np.mean's) made a λ > 0 run's
    # advantages and loss float64, while the λ = 0 arm it is compared with trained in float32.
    floats = {k: v.dtype for k, v in vars(batch).items() if torch.is_tensor(v) and v.is_floating_point()}
    assert "reasoning_bonus" in floats and set(floats.values()) == {torch.float32}, floats


def test_the_mask_holds_generated_tokens_of_every_turn_and_no_prompt_token(tiny):
    model, tok = tiny
    batch = collect(
        model,
        tok,
        "sokoban",
        seeds=[0],
        group_size=1,
        cfg=RolloutConfig(max_new_tokens=8, max_turns=3, stop_at_answer=False),
        sample_seed=1,
    )
    ids, mask = batch.input_ids[0], batch.loss_mask[0].bool()
    assert batch.num_turns[0] == 3  # a random model never finishes the level
    # Every user turn (its text rendered by the chat template) lies outside the mask.
    prompt_text = tok.decode(ids[~mask & batch.attention_mask[0].bool()])
    for m in batch.messages[0]:
        if m["role"] == "user":
            assert m["content"] in prompt_text
    assert mask.sum() == 3 * 8  # no stop string: each of the 3 turns generates its 8 tokens
    # Each turn's generated tokens follow the `<think>` prefill, which is a prompt token.
    starts = [j for j in range(1, len(mask)) if mask[j] and not mask[j - 1]]
    assert len(starts) == 3 and mask[0] == 0
    for j in starts:
        assert tok.decode(ids[:j]).endswith("<|im_start|>assistant\n<think>")
    assert all(m["content"].startswith("<think>") for m in batch.messages[0] if m["role"] == "assistant")


def test_without_prefill_the_model_starts_the_reply(tiny):
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=4, max_turns=1, prefill=False)
    batch = collect(model, tok, "bandit", seeds=[0], group_size=1, cfg=cfg, sample_seed=1)
    first = int(batch.loss_mask[0].nonzero()[0])
    assert tok.decode(batch.input_ids[0, :first]).endswith("<|im_start|>assistant\n")


def test_same_seed_same_batch_and_greedy_ignores_the_seed(tiny):
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=10, max_turns=2)
    a = collect(model, tok, "frozenlake", seeds=[1, 2], group_size=2, cfg=cfg, sample_seed=5)
    b = collect(model, tok, "frozenlake", seeds=[1, 2], group_size=2, cfg=cfg, sample_seed=5)
    c = collect(model, tok, "frozenlake", seeds=[1, 2], group_size=2, cfg=cfg, sample_seed=6)
    assert torch.equal(a.input_ids, b.input_ids)
    assert not torch.equal(a.input_ids, c.input_ids)
    greedy = RolloutConfig(max_new_tokens=10, max_turns=2, temperature=0.0)
    g1 = collect(model, tok, "frozenlake", seeds=[1], group_size=2, cfg=greedy, sample_seed=5)
    g2 = collect(model, tok, "frozenlake", seeds=[1], group_size=2, cfg=greedy, sample_seed=6)
    assert torch.equal(g1.input_ids, g2.input_ids)
    assert torch.equal(g1.input_ids[0], g1.input_ids[1])  # a group shares its initial state


def test_static_kv_cache_plays_the_same_multi_turn_rollout(tiny):
    """rollout.kv_cache=static changes how decoding runs, not what it samples: same tokens over
    several turns, where prompts grow and groups stop sharing a prefix."""
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=10, max_turns=3, stop_at_answer=False)
    dyn = collect(model, tok, "sokoban", seeds=[2, 7], group_size=2, cfg=cfg, sample_seed=4)
    sta = collect(
        model,
        tok,
        "sokoban",
        seeds=[2, 7],
        group_size=2,
        cfg=RolloutConfig(max_new_tokens=10, max_turns=3, stop_at_answer=False, kv_cache="static"),
        sample_seed=4,
    )
    assert torch.equal(dyn.num_turns, sta.num_turns) and dyn.num_turns.max() == 3
    assert torch.equal(dyn.input_ids, sta.input_ids)


@pytest.mark.parametrize("env_name", ["bandit", "sokoban", "frozenlake", "webshop"])
def test_expert_answers_through_the_text_protocol(env_name):
    """Feeding the scripted expert's actions as well-formed answers reaches the goal: the prompt,
    parser and budgets do not get in the way of a competent agent."""
    wins = 0
    for seed in range(10):
        env = make(env_name, **({"is_slippery": False} if env_name == "frozenlake" else {}))
        ep = Episode(env, seed=seed, cfg=RolloutConfig(max_turns=10, max_actions_per_episode=40))
        while not ep.done:
            ep.step(f"the expert knows</think><answer>{env.expert_action()}</answer>")
        assert all(t.parsed.format_valid for t in ep.turns)
        wins += ep.success
    assert wins == 10


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_kept_kv_plays_the_rollout_of_a_fresh_prefill_and_logs_the_behaviour_log_probs(tiny, kv_cache):
    """rollout.keep_kv resumes each episode's cache at the next turn: the same tokens as
    re-prefilling the conversation, and the log-probs the sampler saw are those of the update's
    forward over the finished episode (float32: rounding only)."""
    model, tok = tiny
    kw = dict(max_new_tokens=10, max_turns=3, stop_at_answer=False, kv_cache=kv_cache)
    kept = collect(model, tok, "sokoban", [2, 7], 2, RolloutConfig(**kw), sample_seed=4)
    fresh = collect(model, tok, "sokoban", [2, 7], 2, RolloutConfig(keep_kv=False, **kw), sample_seed=4)
    assert torch.equal(kept.input_ids, fresh.input_ids) and kept.num_turns.min() >= 2
    mask = kept.loss_mask
    with torch.no_grad():
        logp, _ = models.forward_logp(model, kept.input_ids, kept.attention_mask, mask, with_entropy=False)
    assert ((logp - kept.sample_logprobs) * mask).abs().max() < 1e-4
    assert (kept.sample_logprobs * (1 - mask)).abs().max() == 0
    assert ((kept.sample_logprobs - fresh.sample_logprobs) * mask).abs().max() < 1e-4


def test_zeroshot_cli_reports_the_rates_and_the_reasoning_numbers(capsys):
    import json

    from ragen_lib.__main__ import main

    args = ["zeroshot", "--envs", "bandit", "--n", "3", "--batch", "2", "--max-new-tokens", "6"]
    assert main([*args, "--model", models.TINY_RANDOM, "--compare"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["prefill"] for r in rows] == [True, False]
    for r in rows:
        assert r["n"] == 3 and r["max_new_tokens"] == 6 and 0 <= r["format_valid"] <= 1
        assert r["hit_token_cap"] <= 3 and 0 < r["mean_tokens"] <= 6
        # NaN where no answer's tags matched (the tiny model's): nothing to measure, not 0 tokens
        assert r["reasoning_length"] >= 0 or (r["format_valid"] == 0 and math.isnan(r["reasoning_length"]))
        assert 0 <= r["distinct2"] <= 1 or math.isnan(r["distinct2"])


def test_an_answer_cut_by_the_token_budget_says_so_in_the_batch_and_the_transcript(tiny):
    """The tiny random model never closes its answer in 6 tokens: every turn is cut, and its reason
    names the budget first (with the 135M model, most invalid answers are this, and the fix is
    rollout.max_new_tokens, not the form)."""
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=6, max_turns=2)
    batch = collect(model, tok, "sokoban", seeds=[3], group_size=2, cfg=cfg, sample_seed=0)
    assert batch.turn_cut == [[True, True], [True, True]]
    # no tags matched, so no answer to count: the metrics average the matched turns alone
    assert batch.turn_written == [[0, 0], [0, 0]] and batch.written() == ([[], []], [[], []])
    assert batch.default_per_turn == [5, 5]  # Sokoban's, which rollout.max_actions_per_turn may change
    reasons = [r for ep in batch.turn_invalid_reasons for r in ep]
    assert all(r.startswith("cut at the 6-token budget: no <think>") for r in reasons), reasons
    assert "INVALID format: cut at the 6-token budget: no <think>" in batch.transcript(0)


def test_an_invalid_answer_that_closed_in_time_gives_the_parsers_reason_and_a_valid_one_none():
    ep = Episode(make("sokoban"), seed=3, cfg=RolloutConfig(max_turns=3))
    ep.step("push it</think><answer>Jump</answer>")
    ep.step("so</think><answer>Up</answer>")
    assert [t.cut for t in ep.turns] == [False, False]
    assert [t.invalid_reason for t in ep.turns] == ["invalid action(s) 'Jump'", ""]
    ep.step("I will think about this for a very long", cut=True)
    assert ep.turns[-1].invalid_reason == (
        f"cut at the {ep.max_new_tokens}-token budget: no <think>…</think><answer>…</answer> found"
    )


def test_a_first_prompt_that_leaves_no_room_for_a_turn_is_an_error_not_an_empty_batch(tiny):
    """Every episode used to end truncated before its first turn (turns 0, no generated token) and
    the run still updated and finished."""
    model, tok = tiny
    cfg = RolloutConfig(max_new_tokens=50, max_context_tokens=100)
    with pytest.raises(
        ValueError,
        match=r"sokoban: a first prompt of \d+ tokens plus 50 new tokens per turn \(rollout.max_new_tokens\)",
    ):
        collect(model, tok, "sokoban", seeds=[3], group_size=2, cfg=cfg, sample_seed=0)


@pytest.mark.parametrize("batching", ["turn", "continuous"])
def test_an_episode_ended_by_the_context_cap_trains_no_observation_after_its_last_answer(tiny, batching):
    """The cap ends an episode when its next prompt would not leave room for a turn. That next
    observation was appended first and kept: under the paper mask 100+ Sokoban tokens after the
    reward token, trained with return 0. RAGEN drops the unplayed n+1 state before an update."""
    model, tok = tiny
    first = collect(model, tok, "sokoban", [3], 1, RolloutConfig(max_new_tokens=8, max_turns=1))
    room = first.input_ids.shape[1] + 20  # one 8-token turn fits, the next observation does not
    cfg = RolloutConfig(max_new_tokens=8, max_turns=5, max_context_tokens=room, batching=batching)
    batch = collect(model, tok, "sokoban", seeds=[3], group_size=2, cfg=cfg, sample_seed=0)
    for b in range(2):
        assert batch.truncated[b] and batch.num_turns[b] == 1
        n = int(batch.attention_mask[b].sum())
        last = int(batch.loss_mask[b].nonzero().max())
        assert last == n - 1  # the ids end with the last generated token
        assert int(batch.context_mask[b].nonzero().max()) == last
        assert tok.decode(batch.input_ids[b, :n][batch.loss_mask[b, :n].bool()]) == batch.responses[b][0]
        assert batch.messages[b][-1]["role"] == "assistant"  # the transcript ends where training does


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--samples", "0"], "argument --samples: must be at least 1, got 0"),
        (["demo", "--temperature", "-1"], "argument --temperature: must be at least 0.0"),
        (["demo", "--seed", "-1"], "argument --seed: must be at least 0"),
        (["zeroshot", "--n", "0"], "argument --n: must be at least 1"),  # was a ZeroDivisionError
        (["zeroshot", "--batch", "0"], "argument --batch: must be at least 1"),
        (["zeroshot", "--n", "x"], "argument --n: 'x' is not an integer"),
        (["zeroshot", "--envs"], "argument --envs: expected at least one argument"),  # printed nothing
        # these failed after the model loaded, in a traceback (a ValueError, an overflow in numpy)
        (["demo", "--temperature", "inf"], "argument --temperature: must be finite, got inf"),
        (["demo", "--seed", "99999999999999999999"], "argument --seed: must be at most 2147483647"),
    ],
)
def test_demo_and_zeroshot_refuse_bad_numbers_before_the_model_loads(argv, message, capsys, monkeypatch):
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model loaded first"))
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "zeroshot"])
def test_a_token_cap_over_the_context_is_refused_before_the_model_loads(command, capsys, monkeypatch):
    """The RolloutConfig was built after the model loaded, its ValueError a traceback."""
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model loaded first"))
    assert main([command, "--max-new-tokens", "9000"]) == 2
    assert "rollout.max_new_tokens=9000 leaves no room" in capsys.readouterr().err


@pytest.mark.parametrize("batching", ["turn", "continuous"])
def test_an_answer_quoted_in_the_reasoning_does_not_end_the_turn(tiny, monkeypatch, batching):
    """The Sokoban and FrozenLake instructions show `<answer>…</answer>`, which a model may quote
    while it reasons. Stopping at that first </answer> cut the turn unparsed (-0.1, no action),
    where RAGEN, generating to EOS, parses the answer after </think>."""
    from ragen_lib import engine, generation

    model, tok = tiny
    reply = " The format is <answer>Up</answer>, so I push.</think><answer>Up || Left</answer>"
    script = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    steps = itertools.count()

    def scripted(logits, temperature, generator):
        step = min(next(steps), len(script) - 1)
        return torch.full((logits.shape[0],), script[step], dtype=torch.long)

    monkeypatch.setattr(generation, "sample", scripted)
    monkeypatch.setattr(engine, "sample", scripted)
    cfg = RolloutConfig(max_new_tokens=len(script) + 4, max_turns=1, batching=batching)
    b = collect(model, tok, "sokoban", [0], 1, cfg, sample_seed=0)
    assert b.format_valid_rate == 1.0, b.transcript(0)
    assert "</think><answer>Up || Left</answer>" in b.transcript(0)


def test_a_turn_whose_tags_did_not_match_has_no_reasoning_to_measure(tiny, monkeypatch):
    """reasoning/length averaged the parsed <think> text of every turn, "" where nothing parsed:
    half the turns parsing with 4 tokens each logged 2, so the metric followed the format-valid
    rate. `RolloutBatch.reasoning` keeps the turns whose tags matched."""
    from ragen_lib import engine, generation
    from ragen_lib.metrics import reasoning_stats

    model, tok = tiny
    replies = [" I push up.", " Push up.</think><answer>Up</answer>"]
    scripts = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in replies]
    width = max(map(len, scripts))
    steps = itertools.count()

    def scripted(logits, temperature, generator):  # row i writes reply i
        step = next(steps)
        return torch.tensor([s[min(step, len(s) - 1)] for s in scripts[: logits.shape[0]]])

    monkeypatch.setattr(generation, "sample", scripted)
    monkeypatch.setattr(engine, "sample", scripted)
    cfg = RolloutConfig(max_new_tokens=width + 4, max_turns=1, batching="turn")
    b = collect(model, tok, "sokoban", [0, 1], 1, cfg, sample_seed=0)
    assert b.turn_matched == [[False], [True]], [b.transcript(i) for i in range(2)]
    assert b.reasoning() == [[], ["Push up."]]
    length = reasoning_stats(tok, [t for ep in b.reasoning() for t in ep])["reasoning_length"]
    assert length == len(tok("Push up.")["input_ids"])  # not halved by the turn that did not parse


def test_the_next_turn_must_fit_its_answer_too_or_the_episode_ends(tiny):
    """The cap checks the next prompt plus a whole answer (max_new_tokens): a room that holds the
    next prompt but not 8 more tokens ends the episode after turn 1 (pins a check that forgets the
    answer, which let turn 2 write past rollout.max_context_tokens)."""
    model, tok = tiny
    big = collect(model, tok, "sokoban", [3], 1, RolloutConfig(max_new_tokens=8, max_turns=2), sample_seed=0)
    assert big.num_turns[0] == 2
    mask = big.loss_mask[0].tolist()
    # where turn 2's answer starts: the ids up to there are the whole turn-2 prompt
    second_start = [j for j in range(1, len(mask)) if mask[j] and not mask[j - 1]][1]
    room = second_start + 4  # the turn-2 prompt fits, an 8-token answer does not
    cfg = RolloutConfig(max_new_tokens=8, max_turns=2, max_context_tokens=room)
    batch = collect(model, tok, "sokoban", [3], 1, cfg, sample_seed=0)
    assert batch.num_turns[0] == 1 and batch.truncated[0]
    assert int(batch.attention_mask[0].sum()) <= room


def test_a_template_closed_turn_is_not_closed_twice(tiny):
    """When the model ended its answer with the template's end token (<|im_end|>), the user turn that
    follows starts without another one (pins the EOS strip dropped: "<|im_end|><|im_end|>")."""
    _, tok = tiny
    chat = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "V"},
    ]
    after_eos = "\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"
    assert _user_turn_suffix(tok, chat, ended_with_eos=True) == after_eos
    assert _user_turn_suffix(tok, chat, ended_with_eos=False) == "<|im_end|>" + after_eos


def test_batch_masks_and_the_reward_token_by_hand():
    """A hand-made track: 6 prompt ids (3 of them the system turn), 2 generated, 1 prompt id after.
    The paper mask covers positions >= system length + 1 (pins system length + 0); the trajectory
    reward sits on the last generated token, not the last token (pins `n - 1`)."""
    ep = Episode(LineEnv(), seed=0)
    ep.step("no tags")  # format penalty: a nonzero trajectory reward, -0.1
    assert ep.total_reward == -0.1
    track = _TokenTrack([11, 12, 13, 14, 15, 16])
    track.extend([17, 18], generated=True, logp=[-0.5, -0.25])
    track.extend([19], generated=False)
    b = _to_batch([ep], [track], [["x"]], group_size=1, pad=0, system_length=3)
    assert b.loss_mask[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0]
    assert b.context_mask[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert b.token_rewards[0].tolist() == pytest.approx([0] * 7 + [-0.1, 0])  # float32
    assert b.sample_logprobs[0].tolist() == [0] * 6 + [-0.5, -0.25, 0]


def test_the_consistency_bonus_needs_every_word_of_an_action():
    # "search:red shoe" has the words search, red, shoe; the reasoning says search and shoe only:
    # not consistent (pins `any` for `all`). The other action, Up, is said: 0.2 * 1 / 2.
    assert consistency_bonus("I search for a shoe", ["search:red shoe"]) == 0.0
    assert consistency_bonus("go up, then search for a shoe", ["search:red shoe", "Up"]) == pytest.approx(0.1)
