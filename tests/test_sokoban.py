"""Sokoban: rules on hand-made boards, RAGEN's generator, determinism, and the BFS expert."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from ragen_lib.envs import make
from ragen_lib.envs.sokoban import SYMBOLS, SokobanEnv, _reverse_search

VARIANTS = ("sokoban", "sokoban-large", "sokoban-newvocab")
REFERENCE = json.loads((Path(__file__).parent / "data" / "ragen_385bc30_reference.json").read_text())


def play_expert(env, limit=None):
    limit = env.max_steps if limit is None else limit
    rewards, info, term = [], {}, False
    for _ in range(limit):
        _, r, term, trunc, info = env.step(env.expert_action())
        rewards.append(r)
        if term or trunc:
            break
    return rewards, term, info


# --- rules on hand-made boards ---------------------------------------------------------------
def test_push_into_wall_does_not_move():
    env = SokobanEnv.from_text("#####\n#PX##\n#__O#\n#####")
    obs, r, term, trunc, info = env.step("Right")
    assert obs.splitlines()[1] == "#PX##"
    assert r == pytest.approx(-0.1) and not term and not trunc
    assert info == {"success": False, "action_effective": False}


def test_walk_into_wall_does_not_move():
    env = SokobanEnv.from_text("#####\n#PX_#\n#__O#\n#####")
    obs, r, *_, info = env.step("Up")
    assert obs.splitlines()[1] == "#PX_#" and r == pytest.approx(-0.1) and not info["action_effective"]


def test_push_onto_target_solves():
    env = SokobanEnv.from_text("#####\n#PXO#\n#___#\n#####")
    obs, r, term, trunc, info = env.step("Right")
    assert obs.splitlines()[1] == "#_P√#"
    assert r == pytest.approx(-0.1 + 1 + 10) and term and not trunc and info["success"]


def test_push_onto_and_off_target_with_two_boxes():
    env = SokobanEnv.from_text("#######\n#PXO__#\n#_X__O#\n#######")
    _, r, term, *_ = env.step("Right")
    assert r == pytest.approx(-0.1 + 1) and not term
    assert env.render().splitlines()[1] == "#_P√__#"
    _, r, term, *_ = env.step("Right")
    assert r == pytest.approx(-0.1 - 1) and not term
    assert env.render().splitlines()[1] == "#__SX_#"  # walking onto a target renders S


def test_push_from_target_to_target():
    env = SokobanEnv.from_text("#######\n#P√O__#\n#_X__O#\n#######")
    _, r, term, *_ = env.step("Right")
    # the count on targets did not change: exactly the step penalty, as gym-sokoban gives and the
    # model reads it (-1 then +1 printed "Reward: -0.10000000000000009")
    assert r == -0.1 and str(r) == "-0.1" and not term
    assert env.render().splitlines()[1] == "#_S√__#"


def test_box_cannot_push_box():
    env = SokobanEnv.from_text("######\n#PXX_#\n#_OO_#\n######")
    _, r, _, _, info = env.step("Right")
    assert not info["action_effective"] and r == pytest.approx(-0.1)
    assert env.render().splitlines()[1] == "#PXX_#"


def test_walking_onto_target_renders_s():
    env = SokobanEnv.from_text("#####\n#PO_#\n#X_O#\n#####")
    obs, *_ = env.step("Right")
    assert obs.splitlines()[1] == "#_S_#"
    obs, *_ = env.step("Right")
    assert obs.splitlines()[1] == "#_OP#"


def test_truncated_after_max_steps():
    env = SokobanEnv.from_text("#####\n#PX_#\n#__O#\n#####", max_steps=3)
    outs = [env.step("Up") for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True] and not any(o[2] for o in outs)


def test_from_text_round_trips_and_rejects_unknown_symbols():
    board = "######\n#P_X_#\n#_√O_#\n######"
    assert SokobanEnv.from_text(board).render() == board
    with pytest.raises(ValueError, match="valid symbols"):
        SokobanEnv.from_text("#####\n#PZO#\n#####")


# --- arguments and actions -------------------------------------------------------------------
def test_unknown_action_lists_valid_actions():
    env = SokobanEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="Up") as e:
        env.step("Jump")
    assert all(a in str(e.value) for a in env.actions)
    assert env.parse_action(" right ") == "Right" and env.parse_action("jump") is None


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="default"):
        SokobanEnv(symbols="klingon")
    with pytest.raises(ValueError, match="dim_room"):
        SokobanEnv(dim_room=(3, 6))
    with pytest.raises(ValueError, match="num_boxes"):
        SokobanEnv(num_boxes=0)
    with pytest.raises(ValueError, match="search_depth"):
        SokobanEnv(search_depth=2)
    with pytest.raises(ValueError, match="legend"):
        SokobanEnv(legend="mine")
    # counts are whole numbers: int() made num_boxes=2.5 two boxes, search_depth='10' a TypeError
    for field, value in (
        ("num_boxes", 2.5),
        ("search_depth", "10"),
        ("max_steps", 9.5),
        ("num_gen_steps", 3.5),
    ):
        with pytest.raises(ValueError, match=f"{field} must be a whole number, got {value!r}"):
            SokobanEnv(**{field: value})


def test_instructions_legend_and_example_answer():
    env = SokobanEnv()
    assert env.instructions.endswith("like <answer>Right || Right || Up</answer>")
    assert (
        env.legend == "#: wall, _: empty, O: target, √: box on target, X: box, P: player, S: player on target"
    )
    # The other vocabulary's legend names the symbols its board uses ...
    new = make("sokoban-newvocab")
    assert (
        new.legend == "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target"
    )
    # ... unless RAGEN's prompt is wanted, which shows the default legend whatever the board.
    assert make("sokoban-newvocab", legend="ragen").legend == env.legend


def test_registered_variants_carry_ragens_search_depths():
    assert [make(v).search_depth for v in VARIANTS] == [300, 10, 30]
    assert make("sokoban").num_gen_steps == 20 and make("sokoban-large").num_gen_steps == 27


# --- generation ------------------------------------------------------------------------------
def test_generation_is_deterministic_given_the_seed():
    for name in VARIANTS:
        assert make(name).reset(seed=7)[0] == make(name).reset(seed=7)[0]
        assert len({make(name).reset(seed=s)[0] for s in range(20)}) >= 15


@pytest.mark.parametrize("name", VARIANTS)
def test_generated_levels_are_well_formed_and_start_unsolved(name):
    for seed in range(60):
        env = make(name)
        obs, info = env.reset(seed=seed)
        rows, (r, c) = obs.splitlines(), env.dim_room
        ch = env.chars
        assert info == {"success": False} and len(rows) == r and all(len(row) == c for row in rows)
        assert rows[0] == rows[-1] == ch[0] * c and all(row[0] == row[-1] == ch[0] for row in rows)
        assert len(env.boxes) == len(env.targets) == env.num_boxes
        assert not env.boxes & env.targets  # RAGEN's search keeps no box on a target
        assert sum(row.count(ch[5]) + row.count(ch[6]) for row in rows) == 1
        assert set(obs.replace("\n", "")) <= set(ch)


def test_newvocab_board_uses_ragens_other_symbols():
    assert SYMBOLS["newvocab"] == "W.GCBA@"  # wall, empty, target, box on target, box, player, on target
    env = make("sokoban-newvocab")
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        assert set(obs.replace("\n", "")) <= set("W.GCBA@") and ("A" in obs or "@" in obs)
    board = "WWWWW\nWAB.W\nW..GW\nWWWWW"
    assert SokobanEnv.from_text(board, symbols="newvocab").render() == board


def test_reverse_search_hand_worked_corridor():
    # Corridor (1,1)..(1,5); the box starts on its target (1,2), the player at (1,3). Up and Down
    # hit walls, Left hits the box; Right steps to (1,4) dragging the box to (1,3) (score 1 swap
    # x distance 1), then again to (1,5) with the box at (1,4) (score 2). Nothing else is reachable.
    walls = np.ones((3, 7), dtype=bool)
    walls[1, 1:6] = False
    assert _reverse_search(walls, ((1, 2),), (1, 3), 300) == ((1, 5), ((1, 4),), 2)
    # search_depth 3 allows one reverse move: the state two moves deep is never scored.
    assert _reverse_search(walls, ((1, 2),), (1, 3), 3) == ((1, 4), ((1, 3),), 1)
    # A player that cannot move: no box leaves its target, no level.
    assert _reverse_search(walls, ((1, 2),), (1, 1), 300) is None


@pytest.mark.parametrize("name", VARIANTS)
def test_difficulty_matches_ragens_generator(name):
    """Shortest solutions of seeds 0..199, ours vs RAGEN 385bc30's generator on its seeds 0..199
    (tests/data): the same distribution, not the same levels (RAGEN draws from Python's random).
    The bounds are 3 standard errors of the difference of two independent samples of 200."""
    ours = np.array(_shortest(name))
    ragen = np.array(REFERENCE["sokoban_shortest"][name])
    se = np.sqrt(ours.var(ddof=1) / len(ours) + ragen.var(ddof=1) / len(ragen))
    assert abs(ours.mean() - ragen.mean()) < 3 * se, (ours.mean(), ragen.mean(), se)
    for short in (1, 2, 4):  # the share of levels solved in at most `short` moves
        p, q = np.mean(ours <= short), np.mean(ragen <= short)
        se = np.sqrt(p * (1 - p) / len(ours) + q * (1 - q) / len(ragen))
        assert abs(p - q) < 3 * max(se, 0.01), (short, p, q)


def _shortest(name, n=200):
    out = []
    for seed in range(n):
        env = make(name)
        env.reset(seed=seed)
        out.append(len(env.solve()))
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_128_resets_cost_little_next_to_a_rollout(name):
    # A rollout of 128 episodes generates for seconds; 128 resets take ~0.1 s here (the 80x
    # margin is for loaded machines).
    env = make(name)
    t0 = time.perf_counter()
    for seed in range(1000, 1128):
        env.reset(seed=seed)
    assert time.perf_counter() - t0 < 8.0


# --- the expert ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", VARIANTS)
def test_expert_solves_200_levels_of_every_variant(name):
    for seed in range(200):
        env = make(name)
        env.reset(seed=seed)
        rewards, term, info = play_expert(env)
        assert term and info["success"], f"{name} seed {seed}"
        assert rewards[-1] >= -0.1 + 10 - 1e-9  # the final step pays the solve bonus


def test_expert_plan_is_shortest_and_replans_after_a_detour():
    env = SokobanEnv.from_text("######\n#P_XO#\n#____#\n######")
    assert env.solve() == ["Right", "Right"]
    env.step("Down")  # leave the plan's path: the expert must replan
    assert env.expert_action() in ("Up", "Right")
    rewards, term, _ = play_expert(env)
    assert term


def test_solve_reports_a_stuck_box():
    env = SokobanEnv.from_text("#####\n#X__#\n#P_O#\n#####")
    with pytest.raises(RuntimeError):
        env.solve()


def test_reward_sum_along_an_expert_solution():
    env = SokobanEnv()
    env.reset(seed=3)
    on = off = 0
    rewards = []
    while True:
        before = env.boxes & env.targets
        _, r, term, trunc, _ = env.step(env.expert_action())
        after = env.boxes & env.targets
        on += len(after - before)
        off += len(before - after)
        rewards.append(r)
        if term or trunc:
            break
    assert term
    assert sum(rewards) == pytest.approx(-0.1 * len(rewards) + on - off + 10)


class _Scripted:
    """A stand-in for `np_random`: every uniform draw is `u`, every integer draw the top of its range."""

    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u

    def integers(self, low, high=None):
        return (low if high is None else high) - 1


def test_the_random_walk_never_revisits_a_tile():
    # Corridor (1,1)..(1,3), player at (1,1), always taking the last option and always going on:
    # (1,2), then (1,3) (back to (1,1) is visited), then no unvisited neighbour: it stops at (1,3).
    # Pins a walk that may step back (it would end on (1,2)).
    walls = np.ones((3, 5), dtype=bool)
    walls[1, 1:4] = False
    env = SokobanEnv()
    env.np_random = _Scripted(0.0)
    assert env._random_walk(walls, frozenset(), (1, 1), displacement=2) == (1, 3)
    env.np_random = _Scripted(0.9)  # 0.9 > MOVE_PROB: the player stays put
    assert env._random_walk(walls, frozenset(), (1, 1), displacement=2) == (1, 1)


def test_the_room_walk_may_start_on_the_border():
    # gym-sokoban draws the walk's start in 1..rows-1 (the bottom/right border included), then clamps.
    # Scripted: start (5, 5), direction Left, never turning, mask 4 = (0,0),(0,1),(1,0). One step:
    # (5,5) -> clamped (4,4); the mask's (4,5) and (5,4) lie on the border, so only (4,4) is floor.
    # Pins a start drawn inside the border (it would carve (4,3) and (4,4)).
    env = SokobanEnv(num_gen_steps=1)
    env.np_random = _Scripted(0.9)
    walls = env._carve_room()
    assert [tuple(int(x) for x in p) for p in np.argwhere(~walls)] == [(4, 4)]


def test_reverse_search_scores_box_swaps_times_distance():
    # Two boxes on targets (1,1) and (1,4), player at (2,3), room:
    #   ######
    #   #____#
    #   ##___#
    #   ###__#
    #   ######
    # The depth-first search reaches boxes (1,3),(2,3) (distance 2 + 2 = 4) with 2 box swaps: score 8,
    # and later boxes (1,2),(2,3) (distance 1 + 2 = 3) with 3 swaps: score 9, the level. Pins a score
    # without the swaps, and one that counts every pull as a swap (both pick the distance-4 state).
    walls = np.ones((5, 6), dtype=bool)
    for r, c in ((1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 3), (2, 4), (3, 3), (3, 4)):
        walls[r, c] = False
    assert _reverse_search(walls, ((1, 1), (1, 4)), (2, 3), 300) == ((2, 2), ((1, 2), (2, 3)), 3)


def test_reverse_search_scores_zero_while_the_player_covers_a_target():
    # Boxes on (3,1) and (1,1) (a dead end above (2,1)), player at (2,1), room:
    #   #####
    #   #_###
    #   #___#
    #   #___#
    #   #####
    # The one state with both boxes off their targets, boxes (3,2),(2,1), has the player on the target
    # (3,1): it scores 0, so no level. Pins a score that ignores the player on a target.
    walls = np.ones((5, 5), dtype=bool)
    for r, c in ((1, 1), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3)):
        walls[r, c] = False
    assert _reverse_search(walls, ((3, 1), (1, 1)), (2, 1), 300) is None


def test_the_expert_drops_a_cached_plan_the_state_left():
    env = SokobanEnv.from_text("######\n#P_XO#\n#____#\n######")
    assert env.expert_action() == "Right"  # caches the plan Right, Right
    env.step("Right")
    env.step("Down")  # off the plan: from (2,2) the one shortest solution is Up, Right
    # Pins a stale plan reused: its "Right" would walk under the box, two moves longer.
    assert env.expert_action() == "Up"
    assert play_expert(env)[1]


def test_reset_starts_the_step_count_again():
    # An env reused across episodes: the steps of the last one must not truncate the next one early.
    env = SokobanEnv(max_steps=2)
    env.reset(seed=0)
    env.step("Up")
    assert env.step("Up")[3]  # truncated after 2 steps
    env.reset(seed=0)
    assert env.steps == 0
    _, _, term, trunc, _ = env.step("Up")
    assert not term and not trunc


def test_num_boxes_bound_is_a_third_of_the_inner_room():
    # A 6x6 room has 4x4 = 16 inner tiles: at most 16 // 3 = 5 boxes.
    assert SokobanEnv(num_boxes=5).num_boxes == 5
    with pytest.raises(ValueError, match="between 1 and 5 for a 6x6 room, got 6"):
        SokobanEnv(num_boxes=6)
