"""Bandit: arm order, payouts, the success definition, RAGEN's stream, and the registered variants."""

import json
from pathlib import Path

import numpy as np
import pytest

from ragen_lib.envs.bandit import VARIANTS, BanditEnv

REFERENCE = json.loads((Path(__file__).parent / "data" / "ragen_385bc30_reference.json").read_text())


def test_arm_order_shuffled_across_seeds_and_fixed_per_seed():
    seen = set()
    for s in range(50):
        env = BanditEnv()
        obs, info = env.reset(seed=s)
        assert not info["success"] and obs == env.render()
        a, b = env.actions
        assert f"1. There are 2 arms, named {a} and {b}\n" in obs
        assert obs.endswith(f"output like <answer> {a} </answer> or <answer> {b} </answer>.\n")
        seen.add(env.actions)
        again = BanditEnv()
        assert again.reset(seed=s) == (obs, info) and again.actions == env.actions
    assert seen == {("Phoenix", "Dragon"), ("Dragon", "Phoenix")}


def test_order_and_payout_are_ragens_for_the_same_seed():
    """RAGEN 385bc30's Bandit for seeds 0..199 (tests/data): which arm is listed first, and
    whether the high arm pays 1 when pulled. Same seed, same order and payout."""
    for seed, (low_first, pays) in enumerate(
        zip(REFERENCE["bandit_low_arm_first"], REFERENCE["bandit_high_arm_pays"])
    ):
        env = BanditEnv()
        env.reset(seed=seed)
        assert (env.actions[0] == "Phoenix") == low_first, seed
        assert (env.step("Dragon")[1] == 1.0) == pays, seed


def test_no_shuffle_keeps_the_given_order():
    for s in range(20):
        env = BanditEnv(shuffle=False)
        env.reset(seed=s)
        assert env.actions == ("Phoenix", "Dragon")


def test_the_task_is_the_observation_as_in_ragen():
    env = BanditEnv()
    assert env.actions == ("Phoenix", "Dragon")  # set before any reset
    assert env.instructions == "" and env.legend == "" and not env.prompt_lists_actions
    obs, _ = env.reset(seed=0)
    assert obs.startswith(
        "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
    )


def test_high_arm_pays_one_a_quarter_of_the_time():
    env = BanditEnv()
    env.reset(seed=0)
    pays = [env.step("Dragon")[1] for _ in range(4000)]
    # Mean of 4000 Bernoulli(0.25): std 0.0068, so ±0.03 is over 4 sigma (and seeded).
    assert set(pays) == {0.0, 1.0} and np.mean(pays) == pytest.approx(0.25, abs=0.03)


def test_low_arm_pays_ragens_0_1_by_default_and_the_papers_0_15_as_a_field():
    env = BanditEnv()
    env.reset(seed=0)
    assert {env.step("Phoenix")[1] for _ in range(100)} == {0.1}
    paper = BanditEnv(low_risk_reward=0.15)
    paper.reset(seed=0)
    assert paper.step("Phoenix")[1] == 0.15


def test_success_iff_high_arm_chosen_whatever_it_paid():
    env = BanditEnv()
    env.reset(seed=1)
    for _ in range(50):
        obs, r, term, trunc, info = env.step("Dragon")
        assert info == {"success": True, "arm": "high"} and term and not trunc
        assert obs == env.render() and obs == f"Dragon: {r} points"
    obs, r, term, trunc, info = env.step("Phoenix")
    assert info == {"success": False, "arm": "low"} and term and r == 0.1 and obs == "Phoenix: 0.1 points"


@pytest.mark.parametrize(
    "variant, high, low",
    [
        ("bandit", "Dragon", "Phoenix"),
        ("bandit-heldout", "Librarian", "Trader"),
        ("bandit-rev", "Phoenix", "Dragon"),
        ("bandit-gen", "Teacher", "Engineer"),
        ("bandit-gen-rev", "Engineer", "Teacher"),
        ("bandit-heldout-rev", "Trader", "Librarian"),
    ],
)
def test_variants_have_the_right_high_arm(variant, high, low):
    env = BanditEnv(**VARIANTS[variant])
    obs, _ = env.reset(seed=0)
    assert set(env.actions) == {high, low}
    assert env.expert_action() == high
    assert env.step(high)[4]["arm"] == "high" and env.step(low)[4]["arm"] == "low"
    assert high in obs and low in obs


def test_registered_variants():
    assert set(VARIANTS) == {
        "bandit",
        "bandit-heldout",
        "bandit-rev",
        "bandit-gen",
        "bandit-gen-rev",
        "bandit-heldout-rev",
    }


def test_single_turn_single_action():
    assert (BanditEnv.max_turns, BanditEnv.max_actions_per_turn, BanditEnv.max_actions_per_episode) == (
        1,
        1,
        1,
    )


def test_parse_action_ignores_case():
    env = BanditEnv()
    env.reset(seed=0)
    assert env.parse_action("dragon") == "Dragon"
    assert env.parse_action("  PHOENIX ") == "Phoenix"
    assert env.parse_action("Unicorn") is None


def test_unknown_action_lists_the_arms():
    env = BanditEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="Phoenix") as e:
        env.step("Unicorn")
    assert "Dragon" in str(e.value)


@pytest.mark.parametrize(
    "kwargs",
    [{"low_risk_name": "Dragon"}, {"low_risk_name": "dragon"}, {"high_risk_name": ""}, {"high_risk_p": 1.5}],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        BanditEnv(**kwargs)


def test_equal_names_message():
    with pytest.raises(ValueError, match="differ"):
        BanditEnv(low_risk_name="Dragon", high_risk_name="Dragon")


def test_without_shuffle_the_payout_is_still_ragens_second_draw():
    # The order draw is made even when the order is kept, so the high arm's payout for a seed is the
    # same with and without shuffling (pins a `shuffle and random() >= 0.5` that skips the first draw).
    for seed, pays in enumerate(REFERENCE["bandit_high_arm_pays"]):
        env = BanditEnv(shuffle=False)
        env.reset(seed=seed)
        assert env.actions == ("Phoenix", "Dragon")
        assert (env.step("Dragon")[1] == 1.0) == pays, seed


def test_high_risk_p_may_be_zero_or_one():
    # [0, 1] both ends included: a never-paying and an always-paying high arm are valid fields.
    never, always = BanditEnv(high_risk_p=0.0), BanditEnv(high_risk_p=1.0)
    for seed in range(20):
        never.reset(seed=seed)
        always.reset(seed=seed)
        assert never.step("Dragon")[1] == 0.0 and always.step("Dragon")[1] == 1.0
