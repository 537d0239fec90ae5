"""The floor (random policy) and ceiling (expert within the budget) of every env."""

import pytest

from ragen_lib import baselines
from ragen_lib.envs import REGISTRY, make
from ragen_lib.envs.sokoban import SokobanEnv

#: RAGEN 385bc30's generators measured on seeds 0..999 (exact per level; docs/FIDELITY.md):
#: (random success, its standard error, expert success within 10 actions, its standard error).
RAGEN = {
    "sokoban": (0.179, 0.007, 0.998, 0.001),
    "sokoban-large": (0.026, 0.002, 0.991, 0.003),
    "sokoban-newvocab": (0.180, 0.007, 0.999, 0.001),
    "frozenlake": (0.215, 0.006, 0.499, 0.008),
}


def test_sokoban_random_success_hand_worked():
    # Only Right solves; the other three actions bump into walls and change nothing, so
    # P(solved within k random actions) = 1 - (3/4)^k.
    env = SokobanEnv.from_text("#####\n#PXO#\n#####")
    for k in (1, 2, 5):
        assert baselines.sokoban_random_success(env, k) == pytest.approx(1 - 0.75**k)
    assert baselines.level_success(env, 1) == (pytest.approx(0.25), 1.0, False)
    # Two pushes needed: the expert fits a budget of 2, not of 1.
    far = SokobanEnv.from_text("######\n#PX_O#\n######")
    assert baselines.level_success(far, 1)[1] == 0.0 and baselines.level_success(far, 2)[1] == 1.0
    assert baselines.sokoban_random_success(far, 1) == 0.0
    assert baselines.sokoban_random_success(far, 2) == pytest.approx(1 / 16)


@pytest.mark.parametrize("name", sorted(RAGEN))
def test_floor_and_ceiling_agree_with_ragens_generators(name):
    ours = baselines.reference_success(name)
    r, r_se, e, e_se = RAGEN[name]
    assert ours["n"] == 256 and ours["actions"] == 10 and ours["random_method"] == "exact"
    assert abs(ours["random"] - r) < 3 * (ours["random_se"] ** 2 + r_se**2) ** 0.5, ours
    assert abs(ours["expert"] - e) < 3 * max((ours["expert_se"] ** 2 + e_se**2) ** 0.5, 0.005), ours


def test_bandit_and_webshop():
    for name in ("bandit", "bandit-rev", "bandit-heldout", "bandit-gen"):
        ref = baselines.reference_success(name, n=16)
        assert (ref["random"], ref["expert"], ref["actions"]) == (0.5, 1.0, 1)
    shop = baselines.reference_success("webshop", n=32)
    assert shop["random_method"] == "monte-carlo" and shop["actions"] == 5
    assert shop["random"] < 0.05 and shop["expert"] == 1.0


def test_cached_deterministic_and_budget_aware():
    a = baselines.reference_success("frozenlake", n=32)
    assert baselines.reference_success("frozenlake", n=32) is a  # computed once per process
    assert baselines.success_on("frozenlake", list(range(5))) == baselines.success_on(
        "frozenlake", list(range(5))
    )
    more = baselines.reference_success("frozenlake", n=32, actions=20)
    assert more["random"] > a["random"] and more["expert"] > a["expert"]


def test_every_registered_env_has_a_floor_and_a_ceiling():
    for name in REGISTRY:
        ref = baselines.success_on(name, [0, 1])
        assert 0 <= ref["random"] <= ref["expert"] <= 1, name


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="valid envs"):
        baselines.reference_success("sokobann")
    with pytest.raises(ValueError, match="actions"):
        baselines.success_on("sokoban", [0], actions=0)
    assert baselines.shortest_solutions("sokoban", [0, 1]) == [len(_solved(s)) for s in (0, 1)]
    with pytest.raises(ValueError, match="not a Sokoban"):
        baselines.shortest_solutions("frozenlake", [0])


def _solved(seed):
    env = make("sokoban")
    env.reset(seed=seed)
    return env.solve()
