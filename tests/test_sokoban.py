"""Sokoban: rules on hand-made boards, generation, determinism, and the BFS expert."""

import pytest

from ragen_lib.envs.sokoban import SYMBOLS, SokobanEnv


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
    assert r == pytest.approx(-0.1 + 1 - 1) and not term
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


def test_instructions_carry_the_legend():
    assert (
        "Symbols: # Wall | _ Empty | O Target | √ Box on target | X Box | P You | S You on target"
        in SokobanEnv().instructions
    )
    assert "B Wall" in SokobanEnv(symbols="newvocab").instructions


# --- generation ------------------------------------------------------------------------------
def test_generation_is_deterministic_given_the_seed():
    env = SokobanEnv()
    assert env.reset(seed=7)[0] == SokobanEnv().reset(seed=7)[0]
    renders = {SokobanEnv().reset(seed=s)[0] for s in range(20)}
    assert len(renders) >= 15


def test_generated_levels_are_unsolved_and_well_formed():
    for seed in range(50):
        env = SokobanEnv(dim_room=(8, 8), num_boxes=2)
        obs, info = env.reset(seed=seed)
        rows = obs.splitlines()
        assert info == {"success": False} and len(rows) == 8 and all(len(r) == 8 for r in rows)
        assert rows[0] == rows[-1] == "#" * 8 and all(r[0] == r[-1] == "#" for r in rows)
        assert len(env.boxes) == len(env.targets) == 2 and not env.boxes <= env.targets
        assert sum(r.count("P") + r.count("S") for r in rows) == 1


def test_newvocab_render_uses_only_newvocab_symbols():
    env = SokobanEnv(symbols="newvocab")
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        assert set(obs.replace("\n", "")) <= set(SYMBOLS["newvocab"])
        assert "A" in obs or "@" in obs
    board = "BBBBB\nBAC.B\nB..TB\nBBBBB"
    assert SokobanEnv.from_text(board, symbols="newvocab").render() == board


# --- the expert ------------------------------------------------------------------------------
def test_expert_solves_200_levels():
    for seed in range(200):
        env = SokobanEnv()
        env.reset(seed=seed)
        rewards, term, info = play_expert(env)
        assert term and info["success"], f"seed {seed}"
        assert len(rewards) <= env.max_steps
        assert rewards[-1] >= -0.1 + 10 - 1e-9  # the final step pays the solve bonus


def test_expert_solves_20_large_two_box_levels():
    for seed in range(20):
        env = SokobanEnv(dim_room=(8, 8), num_boxes=2)
        env.reset(seed=seed)
        rewards, term, info = play_expert(env)
        assert term and info["success"], f"seed {seed}"


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
