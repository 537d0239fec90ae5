"""Bandit: arm order, payouts, the success definition, and the registered variants."""

import numpy as np
import pytest

from ragen_lib.envs.bandit import VARIANTS, BanditEnv


def test_arm_order_shuffled_across_seeds_and_fixed_per_seed():
    seen = set()
    for s in range(50):
        env = BanditEnv()
        obs, info = env.reset(seed=s)
        assert not info["success"] and obs == env.render()
        assert obs == f"Arms: {env.actions[0]}, {env.actions[1]}. Which arm do you pull?"
        assert env.instructions.count(f"named {env.actions[0]} and {env.actions[1]}.") == 1
        seen.add(env.actions)
        again = BanditEnv()
        assert again.reset(seed=s) == (obs, info) and again.actions == env.actions
    assert seen == {("Phoenix", "Dragon"), ("Dragon", "Phoenix")}


def test_no_shuffle_keeps_the_given_order():
    assert {BanditEnv(shuffle=False).reset(seed=s)[0] for s in range(20)} == {
        "Arms: Phoenix, Dragon. Which arm do you pull?"
    }


def test_actions_and_instructions_exist_before_reset():
    env = BanditEnv()
    assert env.actions == ("Phoenix", "Dragon")
    assert "You are playing a bandit game" in env.instructions
    assert "<answer> Phoenix </answer> or <answer> Dragon </answer>" in env.instructions


def test_high_arm_pays_one_a_quarter_of_the_time():
    env = BanditEnv()
    env.reset(seed=0)
    pays = [env.step("Dragon")[1] for _ in range(4000)]
    # Mean of 4000 Bernoulli(0.25): std 0.0068, so ±0.03 is over 4 sigma (and seeded).
    assert set(pays) == {0.0, 1.0} and np.mean(pays) == pytest.approx(0.25, abs=0.03)


def test_low_arm_pays_exactly_0_15():
    env = BanditEnv()
    env.reset(seed=0)
    assert {env.step("Phoenix")[1] for _ in range(100)} == {0.15}


def test_success_iff_high_arm_chosen_whatever_it_paid():
    env = BanditEnv()
    env.reset(seed=1)
    for _ in range(50):
        obs, r, term, trunc, info = env.step("Dragon")
        assert info == {"success": True, "arm": "high"} and term and not trunc
        assert obs == env.render() and "Dragon" in obs
    obs, r, term, trunc, info = env.step("Phoenix")
    assert info == {"success": False, "arm": "low"} and term and r == 0.15


@pytest.mark.parametrize(
    "variant, high, low",
    [
        ("bandit", "Dragon", "Phoenix"),
        ("bandit-heldout", "Librarian", "Trader"),
        ("bandit-rev", "Phoenix", "Dragon"),
    ],
)
def test_variants_have_the_right_high_arm(variant, high, low):
    env = BanditEnv(**VARIANTS[variant])
    env.reset(seed=0)
    assert set(env.actions) == {high, low}
    assert env.expert_action() == high
    assert env.step(high)[4]["arm"] == "high" and env.step(low)[4]["arm"] == "low"
    assert high in env.instructions and low in env.instructions


def test_variants_are_the_three_registered():
    assert set(VARIANTS) == {"bandit", "bandit-heldout", "bandit-rev"}


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
