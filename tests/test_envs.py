"""Env rules on hand-made boards, the experts, determinism, and the registry's errors."""

import numpy as np
import pytest

from ragen_lib.config import RolloutConfig
from ragen_lib.envs import REGISTRY, TextEnv, env_class, env_fields, make
from ragen_lib.envs.bandit import VARIANTS, BanditEnv
from ragen_lib.envs.frozenlake import FROZEN, FrozenLakeEnv
from ragen_lib.envs.sokoban import SokobanEnv
from ragen_lib.envs.webshop import WebShopEnv, catalogue, eval_seeds


def play_expert(env, limit=200):
    total, info = 0.0, {}
    for _ in range(limit):
        _, r, term, trunc, info = env.step(env.expert_action())
        total += r
        if term or trunc:
            return total, term, info
    return total, False, info


# --- registry ------------------------------------------------------------------------------
def test_unknown_env_and_field_list_the_valid_ones():
    with pytest.raises(ValueError, match="sokoban-large"):
        make("sokobann")
    with pytest.raises(ValueError, match="dim_room"):
        make("sokoban", dim_rom=(5, 5))
    assert env_fields("sokoban-large")["num_boxes"] == 2


def test_limits_are_a_runs_where_set_and_the_envs_defaults_where_none():
    # RAGEN's Sokoban: 5 turns, 5 actions a turn, 10 an episode, 400 tokens; its action budget is
    # min(10, 5 × 5) = 10. Table 3's 7-action arm (35 an episode): min(35, 5 × 7) = 35.
    default = env_class("sokoban").limits()
    assert (default.max_turns, default.max_actions_per_turn, default.max_actions_per_episode) == (5, 5, 10)
    assert (default.max_new_tokens, default.actions) == (400, 10)
    seven = env_class("sokoban").limits(max_actions_per_turn=7, max_actions_per_episode=35, max_turns=None)
    assert (seven.max_turns, seven.max_actions_per_turn, seven.actions) == (5, 7, 35)
    assert env_class("sokoban").limits(max_turns=1).actions == 5  # 1 turn × 5 actions < 10
    bandit = env_class("bandit").limits()
    assert (bandit.max_turns, bandit.actions, bandit.max_new_tokens) == (1, 1, 500)
    # the config reads the same rule, for an env or its class
    cfg = RolloutConfig(max_actions_per_turn=7, max_new_tokens=64)
    assert (
        cfg.limits(make("sokoban"))
        == cfg.limits(SokobanEnv)
        == SokobanEnv.limits(max_actions_per_turn=7, max_new_tokens=64)
    )
    with pytest.raises(TypeError, match="max_actions_per_turn"):
        SokobanEnv.limits(max_action_per_turn=7)
    with pytest.raises(ValueError, match="valid envs"):
        env_class("sokobann")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_env_is_deterministic_given_the_seed(name):
    def trajectory(seed):
        env = make(name)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for _ in range(4):
            obs, r, term, trunc, _ = env.step(env.expert_action())
            out.append((obs, r))
            if term or trunc:
                break
        return out

    assert trajectory(5) == trajectory(5)
    assert len({str(trajectory(s)[0]) for s in range(20)}) > 1


@pytest.mark.parametrize("name", ["sokoban", "frozenlake", "bandit"])
def test_unknown_action_lists_valid_actions(name):
    env = make(name)
    env.reset(seed=0)
    with pytest.raises(ValueError) as e:
        env.step("Jump")
    assert all(a in str(e.value) for a in env.actions)


# --- Sokoban -------------------------------------------------------------------------------
def test_sokoban_push_into_wall_does_not_move():
    env = SokobanEnv.from_text("#####\n#PX##\n#__O#\n#####")
    obs, r, term, *_ = env.step("Right")
    assert obs.splitlines()[1] == "#PX##" and r == pytest.approx(-0.1) and not term


def test_sokoban_box_onto_and_off_target():
    two = SokobanEnv.from_text("#######\n#PXO__#\n#_X__O#\n#######")
    _, r, term, *_ = two.step("Right")  # first box onto its target, the other still off
    assert r == pytest.approx(-0.1 + 1) and not term
    assert two.render().splitlines()[1] == "#_P√__#"
    _, r, *_ = two.step("Right")  # push it further, off the target
    assert r == pytest.approx(-0.1 - 1)
    assert two.render().splitlines()[1] == "#__SX_#"  # player now stands on the target


def test_sokoban_solving_pays_ten_and_ends():
    env = SokobanEnv.from_text("#####\n#PXO#\n#___#\n#####")
    obs, r, term, trunc, info = env.step("Right")
    assert r == pytest.approx(-0.1 + 1 + 10) and term and not trunc and info["success"]
    assert obs.splitlines()[1] == "#_P√#"


def test_sokoban_box_cannot_push_box():
    env = SokobanEnv.from_text("######\n#PXX_#\n#_OO_#\n######")
    _, _, _, _, info = env.step("Right")
    assert not info["action_effective"] and env.render().splitlines()[1] == "#PXX_#"


def test_sokoban_expert_solves_200_levels():
    for seed in range(200):
        env = SokobanEnv()
        env.reset(seed=seed)
        total, term, info = play_expert(env)
        assert term and info["success"], f"seed {seed}"


def test_sokoban_large_two_boxes_solved():
    for seed in range(20):
        env = make("sokoban-large")
        env.reset(seed=seed)
        assert len(env.boxes) == 2
        _, term, info = play_expert(env)
        assert term and info["success"], f"seed {seed}"


def test_sokoban_newvocab_uses_only_its_symbols():
    env = make("sokoban-newvocab")
    obs, _ = env.reset(seed=1)
    assert set(obs.replace("\n", "")) <= set("W.GCBA@")
    assert env.legend.startswith("W: wall")


# --- FrozenLake ----------------------------------------------------------------------------
def test_frozenlake_hole_goal_and_border():
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    obs, r, term, _, info = env.step("Right")
    assert obs.splitlines()[0] == "_X" and term and r == 0 and not info["success"]
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    env.step("Down")
    obs, r, term, _, info = env.step("Right")
    assert obs.splitlines()[1] == "_√" and r == 1 and term and info["success"]
    env = FrozenLakeEnv.from_text("PO\n_G", is_slippery=False)
    obs, *_ = env.step("Up")
    assert obs.splitlines()[0] == "PO"


def test_frozenlake_slip_frequencies():
    # 3000 draws: the std of a 1/3 frequency is 0.0086, so ±0.04 is over 4 sigma.
    env = FrozenLakeEnv.from_text("____\n_P__\n____\n___G")
    env.np_random = np.random.default_rng(0)
    counts = {}
    for _ in range(3000):
        env.pos = (1, 1)
        _, _, _, _, info = env.step("Down")
        counts[info["actual"]] = counts.get(info["actual"], 0) + 1
    assert set(counts) == {"Down", "Left", "Right"}  # never the opposite direction
    for a in ("Down", "Left", "Right"):
        assert counts[a] / 3000 == pytest.approx(1 / 3, abs=0.04)


def test_frozenlake_not_slippery_always_intended():
    env = FrozenLakeEnv(is_slippery=False)
    env.reset(seed=0)
    # a frozen tile to step from (a hole or the goal keeps the player: nothing is intended there)
    frozen = next(tuple(int(x) for x in p) for p in np.argwhere(env.grid == FROZEN))
    for _ in range(50):
        env.pos = frozen
        assert env.step("Right")[4]["actual"] == "Right"


def test_frozenlake_maps_solvable_and_expert_solves_nonslippery():
    for seed in range(300):
        env = FrozenLakeEnv(is_slippery=False)
        env.reset(seed=seed)
        _, term, info = play_expert(env)
        assert term and info["success"], f"seed {seed}"


def test_frozenlake_slippery_expert_beats_random():
    rng = np.random.default_rng(0)
    wins = {"expert": 0, "random": 0}
    for seed in range(300):
        for who in wins:
            env = FrozenLakeEnv()
            env.reset(seed=seed)
            for _ in range(100):
                a = env.expert_action() if who == "expert" else env.actions[int(rng.integers(4))]
                _, _, term, trunc, info = env.step(a)
                if term or trunc:
                    wins[who] += info["success"]
                    break
    assert wins["expert"] > 2 * wins["random"], wins


def test_frozenlake_bad_arguments():
    with pytest.raises(ValueError, match="p_frozen"):
        FrozenLakeEnv(p_frozen=0)


# --- Bandit --------------------------------------------------------------------------------
def test_bandit_order_shuffled_but_seeded():
    orders = {BanditEnv().reset(seed=s)[0] for s in range(50)}
    assert len(orders) == 2
    assert BanditEnv().reset(seed=3) == BanditEnv().reset(seed=3)


def test_bandit_payouts_and_success():
    env = BanditEnv()
    env.reset(seed=0)
    high = [env.step("Dragon")[1] for _ in range(4000)]
    assert np.mean(high) == pytest.approx(0.25, abs=0.03) and set(high) == {0.0, 1.0}
    _, r, term, _, info = env.step("Phoenix")
    assert r == 0.1 and term and not info["success"]
    assert env.step("Dragon")[4]["success"]


@pytest.mark.parametrize(
    "variant, high", [("bandit", "Dragon"), ("bandit-heldout", "Librarian"), ("bandit-rev", "Phoenix")]
)
def test_bandit_variants(variant, high):
    env = BanditEnv(**VARIANTS[variant])
    env.reset(seed=0)
    assert env.expert_action() == high
    assert env.parse_action(high.lower()) == high
    assert high in env.render()


def test_bandit_names_must_differ():
    with pytest.raises(ValueError, match="differ"):
        BanditEnv(low_risk_name="Dragon", high_risk_name="dragon")


# --- WebShop-lite --------------------------------------------------------------------------
def test_webshop_catalogue():
    items = catalogue()
    assert len(items) == 96 and items == catalogue()
    assert len({(p["colour"], p["size"], p["category"]) for p in items}) == 96
    assert all(20 <= p["price"] <= 150 for p in items)


def shop(seed=0):
    env = WebShopEnv()
    env.reset(seed=seed)
    return env


def product(env, **attrs):
    g = env.goal
    want = {"colour": g["colour"], "size": g["size"], "category": g["category"], **attrs}
    return next(p for p in env.products if all(p[k] == v for k, v in want.items()))


def test_webshop_reward_tiers():
    env = shop()
    right = product(env)
    _, r, term, _, info = env.step(f"buy:{right['id']}")
    assert r == 1.0 and term and info["success"]

    env = shop()
    other = next(c for c in ("black", "white", "red") if c != env.goal["colour"])
    wrong_colour = product(env, colour=other)
    _, r, _, _, info = env.step(f"buy:{wrong_colour['id']}")
    assert 0.5 <= r <= 0.8 and r < 1 and not info["success"]

    env = shop()
    g = env.goal
    nothing = next(
        p
        for p in env.products
        if p["colour"] != g["colour"]
        and p["size"] != g["size"]
        and p["category"] != g["category"]
        and p["price"] > g["cap"]
    )
    assert env.step(f"buy:{nothing['id']}")[1] == 0.5

    env = shop()
    env.goal["cap"] = right["price"] - 1  # same product, now over the cap: a mismatch
    assert env.step(f"buy:{right['id']}")[1] == pytest.approx(0.8)


def test_webshop_search_and_click():
    env = shop(1)
    g = env.goal
    obs, r, term, _, info = env.step(f"search:{g['colour']} {g['size']} {g['category']}")
    lines = obs.splitlines()[2:]
    assert 1 <= len(lines) <= 5 and info["progress"] and not term and r == 0
    pid = lines[0].split(":")[0]
    obs, *_ = env.step(f"click:{pid}")
    assert f"Page: product {pid}" in obs and "Price: $" in obs


@pytest.mark.parametrize(
    "text", ["", "buy:", "buy:zz", "search:", "jump:3", "x" * 10_000, "buy:p0é", "click:p99", "search:héllo"]
)
def test_webshop_rejects_malformed(text):
    env = shop()
    assert env.parse_action(text) is None
    with pytest.raises(ValueError, match="search:"):
        env.step(text)


def test_webshop_accepts_variants():
    env = shop()
    assert env.parse_action("BUY: p03") == "buy:p03"
    assert env.parse_action("  Search:Red Shoe ") == "search:red shoe"


def test_webshop_expert_solves_every_eval_instruction():
    seeds = eval_seeds()
    assert seeds == eval_seeds() and len(set(seeds)) == 256
    for s in seeds:
        env = shop(s)
        steps = [env.step(env.expert_action()) for _ in range(3)]  # search, click, buy
        _, r, term, _, info = steps[-1]
        assert term and info["success"] and r == 1.0


# --- the env contract, checked when a config names the env (before any model loads) ----------
class _Walk(TextEnv):
    """A correct little env: reach position 3 from 0 with Right."""

    name = "walk"
    actions = ("Left", "Right")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(0, 2))
        return self.render(), {"success": False}

    def step(self, action):
        self.pos += 1 if action == "Right" else -1
        done = self.pos >= 3
        return self.render(), float(done), done, False, {"success": done}

    def render(self):
        return f"position {self.pos} of 3"

    def expert_action(self):
        return "Right"


class _NoRender(_Walk):
    render = TextEnv.render

    def reset(self, *, seed=None, options=None):
        super(_Walk, self).reset(seed=seed)
        self.pos = 0
        return "start", {"success": False}


class _NoSuccess(_Walk):
    def step(self, action):
        obs, r, term, trunc, _ = super().step(action)
        return obs, r, term, trunc, {}


class _GymStep(_Walk):
    def step(self, action):
        return super().step(action)[:3] + ({"success": False},)


class _ExpertUnparsed(_Walk):
    def expert_action(self):
        return "Stay"  # step would take it; the parser rejects it, so the warm-up would teach it


class _NoActions(_Walk):
    actions = ()


class _GlobalRandom(_Walk):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(np.random.randint(0, 10**6))  # the module's generator: not reseeded
        return self.render(), {"success": False}


class _SeparatorInName(_Walk):
    actions = ("Left", "Right", "Wait || Look")  # cut at " || " into two pieces: never parses


@pytest.fixture
def registered(monkeypatch):
    import ragen_lib.envs as envs

    def register(cls):
        monkeypatch.setitem(envs.REGISTRY, cls.name, (cls, {}))
        return cls.name

    return register


def test_a_correct_env_passes_the_contract_check(registered):
    from ragen_lib import config

    name = registered(_Walk)
    assert config.from_dict({"env": {"name": name}}).env.name == "walk"


@pytest.mark.parametrize(
    "cls, says",
    [
        (_NoRender, r"does not implement render\(\)"),
        (_NoSuccess, r"info without 'success'"),
        (_GymStep, r"step\(\) returned 4 values"),
        (_ExpertUnparsed, r"expert_action\(\) returned 'Stay', which parse_action rejects"),
        (_NoActions, r"no `actions` and keeps TextEnv.parse_action"),
        (_GlobalRandom, r"reset\(seed=0\) twice gave two states"),
        (_SeparatorInName, r"action 'Wait \|\| Look' holds the action separator '\|\|'"),
    ],
)
def test_a_broken_env_is_named_when_the_config_is_built(registered, cls, says):
    from ragen_lib import config

    class Broken(cls):
        name = "broken"

    name = registered(Broken)
    np.random.seed(0)
    with pytest.raises((TypeError, ValueError), match=says) as e:
        config.from_dict({"env": {"name": name}})
    assert "env 'broken' (Broken)" in str(e.value)


def test_every_registered_env_keeps_the_contract():
    from ragen_lib.envs import check

    for name in REGISTRY:
        check(name)


def test_an_info_without_success_at_the_end_stops_the_episode_not_the_metric():
    from ragen_lib.rollout import Episode

    class QuietEnd(_Walk):  # carries "success" until the step that solves it
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            return obs, r, term, trunc, ({} if term else info)

    ep = Episode(QuietEnd(), 0)
    with pytest.raises(TypeError, match=r"env 'walk': step\('Right'\) returned info without 'success'"):
        ep.step("</think><answer>Right || Right || Right</answer>")


def test_an_expert_the_parser_rejects_midway_stops_the_warmup():
    from ragen_lib.rollout import Episode
    from ragen_lib.warmup import _plan_turn

    class LateStay(_Walk):  # right at first, then an action no parser accepts
        def expert_action(self):
            return "Right" if self.pos < 2 else "Stay"

    ep = Episode(LateStay(), 0)
    with pytest.raises(
        ValueError, match=r"env 'walk': expert_action\(\) returned 'Stay', which parse_action"
    ):
        _plan_turn(ep, np.random.default_rng(0), random_actions=False)


# --- base helpers ----------------------------------------------------------------------------------
def test_whole_refuses_a_bool_and_validation_seeds_are_fixed():
    from ragen_lib.envs.base import whole

    # True is an int to Python: whole() must not read it as 1 box (pins a dropped bool check).
    with pytest.raises(ValueError, match="num_boxes must be a whole number, got True"):
        whole("num_boxes", True)
    with pytest.raises(ValueError, match="num_boxes must be a whole number"):
        SokobanEnv(num_boxes=True)
    assert whole("max_steps", 20.0) == 20 and whole("max_steps", np.int64(3)) == 3
    # The validation states are 2**31 + i from i = 0, above every training seed (pins a shifted range).
    assert TextEnv.eval_seeds(3) == [2**31, 2**31 + 1, 2**31 + 2]
    assert make("frozenlake").eval_seeds(1) == [2147483648]
