"""FrozenLake: rules on hand-made boards, slips, RAGEN's maps, the expert and the exact floor/ceiling."""

import json
from pathlib import Path

import numpy as np
import pytest

from ragen_lib.envs.frozenlake import PERPENDICULAR, FrozenLakeEnv

REFERENCE = json.loads((Path(__file__).parent / "data" / "ragen_385bc30_reference.json").read_text())

N_SEEDS = 300


def play(env, policy, limit=200):
    """Run `policy(env)` until the episode ends; the last info (or {} if it never ended)."""
    for _ in range(limit):
        _, _, term, trunc, info = env.step(policy(env))
        if term or trunc:
            return info
    return {}


def test_stepping_into_a_hole_ends_the_episode_unpaid():
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    obs, r, term, trunc, info = env.step("Right")
    assert obs == "_X\n_G"
    assert r == 0 and term and not trunc and not info["success"]


def test_reaching_the_goal_pays_and_ends():
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    assert env.step("Down")[:3] == ("_O\nPG", 0.0, False)
    obs, r, term, trunc, info = env.step("Right")
    assert obs == "_O\n_√"
    assert r == 1.0 and term and not trunc and info["success"]
    # a step after the end keeps the player on the goal, unpaid, as Gymnasium's terminal tiles do
    assert env.step("Left")[:4] == ("_O\n_√", 0.0, True, False)


def test_a_step_after_falling_keeps_the_player_in_the_hole():
    """The player walked out of a hole on the next step (Gymnasium and RAGEN: stays, done)."""
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    env.step("Right")
    obs, r, term, trunc, info = env.step("Left")
    assert (obs, r, term, trunc, info["success"]) == ("_X\n_G", 0.0, True, False, False)


@pytest.mark.parametrize("action", ["Up", "Left"])
def test_the_border_leaves_you_in_place(action):
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    obs, r, term, _, info = env.step(action)
    assert obs == "PO\n_G" and r == 0 and not term and env.pos == (0, 0)
    assert info["intended"] == info["actual"] == action


def test_truncated_after_max_steps():
    env = FrozenLakeEnv.from_text("P_\n_G", is_slippery=False, max_steps=3)
    results = [env.step("Up") for _ in range(3)]
    assert [res[3] for res in results] == [False, False, True]
    assert not any(res[2] for res in results) and not results[-1][4]["success"]


@pytest.mark.parametrize("intended", ["Left", "Down", "Right", "Up"])
def test_slip_frequencies_match_gymnasium(intended):
    # 3000 draws: a frequency with p = 1/3 has std sqrt(p(1-p)/3000) = 0.0086, so the ±0.04
    # tolerance is over 4.5 sigma and the test does not flake (it is also seeded).
    env = FrozenLakeEnv.from_text("____\n_P__\n____\n___G")
    env.np_random = np.random.default_rng(0)
    counts = dict.fromkeys(env.actions, 0)
    for _ in range(3000):
        env.pos, env.steps = (1, 1), 0
        _, _, term, _, info = env.step(intended)
        assert not term and info["intended"] == intended
        counts[info["actual"]] += 1
    opposite = next(a for a in env.actions if a != intended and a not in PERPENDICULAR[intended])
    assert counts[opposite] == 0
    for a in (intended, *PERPENDICULAR[intended]):
        assert counts[a] / 3000 == pytest.approx(1 / 3, abs=0.04), counts


def test_not_slippery_always_moves_as_intended():
    env = FrozenLakeEnv.from_text("____\n_P__\n____\n___G", is_slippery=False)
    for a in env.actions * 25:
        env.pos = (1, 1)
        assert env.step(a)[4]["actual"] == a


def test_slippery_note_only_when_slippery():
    assert "slippery ice" in FrozenLakeEnv().instructions
    assert "slippery" not in FrozenLakeEnv(is_slippery=False).instructions
    assert FrozenLakeEnv().instructions.endswith("<answer>Left || Up</answer>")
    assert (
        FrozenLakeEnv().legend
        == "P: player, _: empty, O: hole, G: goal, X: player in hole, √: player on goal"
    )


def _reachable(rows):
    """Independent check: flood fill from the player over non-hole tiles."""
    n = len(rows)
    start = next((r, c) for r in range(n) for c in range(n) if rows[r][c] == "P")
    seen, todo = {start}, [start]
    while todo:
        r, c = todo.pop()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and (nr, nc) not in seen and rows[nr][nc] != "O":
                seen.add((nr, nc))
                todo.append((nr, nc))
    return seen


@pytest.mark.parametrize("layout", ["random", "corner"])
def test_every_generated_map_has_a_path(layout):
    for seed in range(N_SEEDS):
        env = FrozenLakeEnv(layout=layout)
        obs, info = env.reset(seed=seed)
        rows = obs.splitlines()
        assert len(rows) == 4 and all(len(r) == 4 for r in rows) and not info["success"]
        assert obs.count("P") == 1 and obs.count("G") == 1
        if layout == "corner":
            assert rows[0][0] == "P" and rows[-1][-1] == "G"
        assert env.optimal_success_probability() > 0, f"seed {seed}"
        goal = next((r, c) for r in range(4) for c in range(4) if rows[r][c] == "G")
        assert goal in _reachable(rows), f"seed {seed}:\n{obs}"


def test_random_layout_draws_start_and_goal_anywhere():
    starts, goals = set(), set()
    for seed in range(N_SEEDS):
        env = FrozenLakeEnv()
        env.reset(seed=seed)
        starts.add(env.pos)
        goals.add(tuple(int(x) for x in np.argwhere(env.grid == "G")[0]))
    assert len(starts) == 16 and len(goals) == 16


def test_maps_are_ragens_maps_for_the_same_seed():
    """RAGEN 385bc30's generate_random_map for seeds 0..199 (tests/data): S marks the start, F
    frozen, H holes. Our map of a seed is the same map, tile for tile."""
    for seed, desc in enumerate(REFERENCE["frozenlake_maps"]):
        want = desc.replace("S", "P").replace("F", "_").replace("H", "O")
        assert FrozenLakeEnv().reset(seed=seed)[0] == want, f"seed {seed}"


def test_slips_are_gymnasiums_for_the_same_seed():
    """Gymnasium's rule, written out here: after one draw for the start state, each step draws u
    and moves (a - 1) % 4 if u < 1/3, a if u < 2/3, else (a + 1) % 4 (actions Left, Down, Right,
    Up = 0..3), from a generator seeded with the episode's seed."""
    order = ["Left", "Down", "Right", "Up"]
    plan = ["Right", "Down", "Left", "Up", "Down", "Right"] * 2
    for seed in range(30):
        env = FrozenLakeEnv(layout="corner", p_frozen=1.0)  # no holes: every step is taken
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        rng.random()
        for action in plan:
            a, u = order.index(action), rng.random()
            want = order[(a - 1) % 4] if u < 1 / 3 else action if u < 2 / 3 else order[(a + 1) % 4]
            _, _, term, _, info = env.step(action)
            assert info["actual"] == want, (seed, action)
            if term:
                break


def test_success_probability_hand_worked():
    # From P, one move. Without slips: only Right reaches G, so best 1 and random 1/4.
    # With slips: Right reaches G w.p. 1/3 (intended); Down and Up w.p. 1/3 (slipping Right);
    # Left never (its slips are Up and Down). Best 1/3; random (0 + 1/3 + 1/3 + 1/3) / 4 = 1/4.
    still = FrozenLakeEnv.from_text("PG\n__", is_slippery=False)
    assert still.success_probability(1, "best") == pytest.approx(1.0)
    assert still.success_probability(1, "random") == pytest.approx(0.25)
    slippery = FrozenLakeEnv.from_text("PG\n__")
    assert slippery.success_probability(1, "best") == pytest.approx(1 / 3)
    assert slippery.success_probability(1, "random") == pytest.approx(1 / 4)
    assert slippery.success_probability(0, "best") == 0.0
    # More moves never hurt, and the best policy is never worse than the random one.
    values = [slippery.success_probability(k, p) for k in range(6) for p in ("random", "best")]
    assert all(b >= r for r, b in zip(values[::2], values[1::2]))
    assert values[::2] == sorted(values[::2]) and values[1::2] == sorted(values[1::2])
    with pytest.raises(ValueError, match="policy"):
        slippery.success_probability(1, "greedy")


def test_maps_vary_with_the_seed():
    maps = set()
    for seed in range(50):
        maps.add(FrozenLakeEnv().reset(seed=seed)[0])
    assert len(maps) > 10


def test_expert_solves_every_nonslippery_map():
    for seed in range(N_SEEDS):
        env = FrozenLakeEnv(is_slippery=False)
        env.reset(seed=seed)
        info = play(env, lambda e: e.expert_action())
        assert info.get("success"), f"seed {seed}:\n{env.render()}"


def test_slippery_expert_clearly_beats_random():
    rng = np.random.default_rng(0)
    wins = {"expert": 0, "random": 0}
    predicted = 0.0
    policies = {"expert": lambda e: e.expert_action(), "random": lambda e: e.actions[int(rng.integers(4))]}
    for seed in range(N_SEEDS):
        for who, policy in policies.items():
            env = FrozenLakeEnv()
            env.reset(seed=seed)
            if who == "expert":
                predicted += env.optimal_success_probability()
            wins[who] += bool(play(env, policy).get("success"))
    rate = {k: v / N_SEEDS for k, v in wins.items()}
    print("slippery success rates over", N_SEEDS, "maps:", rate, "predicted", predicted / N_SEEDS)
    assert rate["expert"] > 2 * rate["random"] and rate["expert"] - rate["random"] > 0.2, rate
    # The expert achieves its planned probability: a mean of 300 Bernoullis has std <= 0.029.
    assert rate["expert"] == pytest.approx(predicted / N_SEEDS, abs=0.1)


def test_slippery_expert_avoids_the_risky_edge():
    # Walking Right along the top row risks slipping Down into the holes; the planner knows that
    # the only safe way is to keep pushing into the wall side (Up), sliding Left/Right only.
    env = FrozenLakeEnv.from_text("P__G\nOOOO\n____\n____")
    assert env.expert_action() == "Up"
    assert env.optimal_success_probability() > 0.9


def test_maps_and_slips_are_deterministic_given_the_seed():
    def run(seed):
        env = FrozenLakeEnv()
        out = [env.reset(seed=seed)[0]]
        for a in ["Right", "Down"] * 5:
            obs, r, term, trunc, info = env.step(a)
            out.append((obs, info["actual"]))
            if term or trunc:
                break
        return out

    assert run(7) == run(7)
    assert {str(run(s)) for s in range(20)} != {str(run(7))}


def test_unknown_action_lists_the_valid_ones():
    env = FrozenLakeEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError) as e:
        env.step("Jump")
    assert all(a in str(e.value) for a in env.actions)
    assert env.parse_action(" down ") == "Down" and env.parse_action("Jump") is None


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"size": 1}, "size"),
        ({"p_frozen": 0}, "p_frozen"),
        ({"p_frozen": 1.5}, "p_frozen"),
        ({"slip_prob": -0.1}, "slip_prob"),
        ({"slip_prob": 2}, "slip_prob"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),  # was 2 steps without a word
        ({"layout": "diagonal"}, "layout"),
    ],
)
def test_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        FrozenLakeEnv(**kwargs)


@pytest.mark.parametrize("board", ["P_\n_", "PP\n_G", "P_\n__", "P_\nZG"])
def test_from_text_rejects_bad_boards(board):
    with pytest.raises(ValueError):
        FrozenLakeEnv.from_text(board)


class _Draws:
    """A stand-in for `np_random` that returns the given uniform draws, one per slippery step."""

    def __init__(self, *draws):
        self.draws = list(draws)

    def random(self):
        return self.draws.pop(0)


def test_slip_thresholds_follow_a_non_default_slip_prob():
    # slip_prob=0.4: first perpendicular if u < 0.2, intended if u < 0.2 + 0.6 = 0.8, else the second
    # one. Right's perpendiculars are Down then Up. Pins `u >= slip_prob` for the upper threshold,
    # which agrees with the right one only at the default 2/3 (u = 0.5 would slip Up).
    env = FrozenLakeEnv.from_text("___\n_P_\n__G", slip_prob=0.4)
    actual = []
    for u in (0.1, 0.5, 0.9):
        env._set_state(env.grid, (1, 1))
        env.np_random = _Draws(u)
        actual.append(env.step("Right")[4]["actual"])
    assert actual == ["Down", "Right", "Up"]


def test_the_goal_pays_goal_reward():
    # Pins a hard-coded 1.0 in place of the `goal_reward` field.
    env = FrozenLakeEnv.from_text("PG\n__", is_slippery=False, goal_reward=2.5)
    assert env.step("Right")[1:4] == (2.5, True, False)


def test_optimal_success_probability_counts_the_steps_left():
    # One step left on "PG / __" with slips: Right, Down and Up each reach G w.p. 1/3 (see the hand-worked
    # test above), so the best chance is 1/3, not the larger two-step chance. Pins the horizon off by one
    # (the plan read one step further) and a horizon that forgets the steps already taken.
    one_left = FrozenLakeEnv.from_text("PG\n__", max_steps=1)
    assert one_left.optimal_success_probability() == pytest.approx(1 / 3)
    env = FrozenLakeEnv.from_text("PG\n__", max_steps=2)
    env.np_random = _Draws(0.5)  # Left as intended: into the border, a step spent in place
    env.step("Left")
    assert env.pos == (0, 0) and env.steps == 1
    assert env.optimal_success_probability() == pytest.approx(1 / 3)
    # Without slips the one-move path fits a one-step budget exactly (pins `<` for `<=`).
    still = FrozenLakeEnv.from_text("PG\n__", is_slippery=False, max_steps=1)
    assert still.optimal_success_probability() == 1.0


def test_the_goal_is_absorbing_and_stays_a_success():
    # Gymnasium keeps the player on a terminal tile: a step from the goal pays 0, ends, and still reads
    # success there (RAGEN's info); the chance of success from the goal is 1, slips or not.
    env = FrozenLakeEnv.from_text("PG\n__", max_steps=2)
    env.np_random = _Draws(0.5)
    assert env.step("Right")[1:4] == (1.0, True, False)
    assert env.optimal_success_probability() == 1.0
    obs, r, term, trunc, info = env.step("Down")
    assert (obs, r, term, trunc, info["success"], info["actual"]) == ("_√\n__", 0.0, True, False, True, None)
