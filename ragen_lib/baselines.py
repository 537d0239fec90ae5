"""The floor and ceiling of every env: what a random policy and the scripted expert reach.

Every success curve is read against two numbers: the success of a uniformly random policy (the
floor: an agent that learned nothing) and the expert's success within the same action budget (the
ceiling: what the budget allows at all). `reference_success(env_name)` computes both on the env's
validation states, from the envs themselves, and caches them per process:

- Sokoban: random = the exact probability that uniformly random actions solve the level within the
  budget (a distribution over board states, pushed forward one action at a time); expert = 1 when
  the breadth-first shortest solution fits the budget, else 0.
- FrozenLake: exact finite-horizon dynamic programming with the slips: a uniformly random action
  each move (random) and the optimal policy (expert).
- Bandit: each arm with probability 1/2 (random: exactly 0.5) and the expert's arm.
- WebShop-lite: Monte Carlo over random valid actions (`random_action`), `WEBSHOP_ROLLOUTS` per
  state; the expert's scripted episode.

A "random policy" here acts with well-formed answers: it is the floor of the task, not of the
format (a model that cannot write the format scores 0).
"""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from ragen_lib.envs import env_class, make
from ragen_lib.envs.bandit import BanditEnv
from ragen_lib.envs.base import TextEnv
from ragen_lib.envs.frozenlake import FrozenLakeEnv
from ragen_lib.envs.sokoban import SokobanEnv
from ragen_lib.envs.webshop import WebShopEnv

#: Random episodes per state where the random policy is estimated by sampling (WebShop-lite).
WEBSHOP_ROLLOUTS = 20


@functools.lru_cache(maxsize=64)
def reference_success(
    env_name: str, n: int = 256, actions: int | None = None, env_kwargs: tuple = ()
) -> dict:
    """Random-policy and expert success of `env_name` on its first `n` validation states.

    `actions`: the action budget (None: the env's default, `TextEnv.limits().actions`).
    `env_kwargs`: the env's constructor arguments a run set (`env.kwargs`), as sorted (name, value)
    pairs: a non-slippery FrozenLake's expert ceiling is 1, not the slippery 0.5. Returns
    ``{"random", "random_se", "expert", "expert_se", "n", "actions", "random_method"}``: means over
    the states, each with its standard error over states (plus, for Monte Carlo, the sampling
    error); ``random_method`` is "exact" or "monte-carlo".
    """
    from ragen_lib import seeds  # seeds imports config, which needs nothing from here

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return success_on(env_name, seeds.val_seeds(env_name, n), actions, dict(env_kwargs))


def success_on(
    env_name: str, states: list[int], actions: int | None = None, env_kwargs: dict | None = None
) -> dict:
    """`reference_success` on the given initial-state seeds (not cached)."""
    cls = env_class(env_name)  # an unknown name fails here, listing the envs
    kwargs = env_kwargs or {}
    budget = cls.limits().actions if actions is None else int(actions)
    if budget < 1:
        raise ValueError(f"actions must be >= 1, got {actions}")
    rand, expert, mc = [], [], False
    for seed in states:
        env = make(env_name, **kwargs)
        env.reset(seed=seed)
        r, e, sampled = level_success(env, budget, seed)
        rand.append(r)
        expert.append(e)
        mc = mc or sampled
    return {
        "random": float(np.mean(rand)),
        "random_se": _se(rand),
        "expert": float(np.mean(expert)),
        "expert_se": _se(expert),
        "n": len(states),
        "actions": budget,
        "random_method": "monte-carlo" if mc else "exact",
    }


def level_success(env: TextEnv, actions: int, seed: int = 0) -> tuple[float, float, bool]:
    """(random-policy success, expert success, whether the random one was sampled) from the env's
    current state, within `actions` actions. `seed` seeds the Monte Carlo policy (WebShop)."""
    if isinstance(env, SokobanEnv):
        return sokoban_random_success(env, actions), float(_sokoban_fits(env, actions)), False
    if isinstance(env, FrozenLakeEnv):
        return env.success_probability(actions, "random"), env.success_probability(actions, "best"), False
    if isinstance(env, BanditEnv):
        # Success is which arm is pulled, whatever it pays: half the arms for a random pull.
        wins = [a == env.high_risk_name for a in env.actions]
        return float(np.mean(wins)), float(env.expert_action() == env.high_risk_name), False
    if isinstance(env, WebShopEnv):
        return _webshop_random(env, actions, seed), _play_expert(env, actions), True
    raise TypeError(f"no reference success for {type(env).__name__}; add it to baselines.level_success")


def sokoban_random_success(env: SokobanEnv, actions: int) -> float:
    """Exact chance that `actions` uniformly random actions solve the level from its state."""
    dist = {(env.player, env.boxes): 1.0}
    solved, share = 0.0, 1.0 / len(env.actions)
    for _ in range(actions):
        nxt: dict = defaultdict(float)
        for (player, boxes), p in dist.items():
            for a in env.actions:
                state = env.transition(player, boxes, a)
                if env.is_solved(state[1]):
                    solved += p * share  # the episode ends on success
                else:
                    nxt[state] += p * share
        dist = nxt
    return solved


def shortest_solutions(env_name: str, seeds: list[int]) -> list[int]:
    """The length of the shortest solution of each level (Sokoban variants): its difficulty."""
    out = []
    for s in seeds:
        env = make(env_name)
        if not isinstance(env, SokobanEnv):
            raise ValueError(f"{env_name} is not a Sokoban variant")
        env.reset(seed=s)
        out.append(len(env.solve()))
    return out


def _sokoban_fits(env: SokobanEnv, actions: int) -> bool:
    try:
        return len(env.solve()) <= actions
    except RuntimeError:  # unsolvable from here (cannot happen right after a reset)
        return False


def _webshop_random(env: WebShopEnv, actions: int, seed: int) -> float:
    wins = 0
    for k in range(WEBSHOP_ROLLOUTS):
        rng = np.random.default_rng([seed, k])
        env.reset(seed=seed)
        for _ in range(actions):
            _, _, term, trunc, info = env.step(env.random_action(rng))
            if term or trunc:
                wins += bool(info["success"])
                break
    env.reset(seed=seed)  # back to the state the caller passed in, for the expert
    return wins / WEBSHOP_ROLLOUTS


def _play_expert(env: TextEnv, actions: int) -> float:
    for _ in range(actions):
        _, _, term, trunc, info = env.step(env.expert_action())
        if term or trunc:
            return float(info["success"])
    return 0.0


def _se(values: list[float]) -> float:
    """Standard error of the mean over states. Where the per-state values are Monte Carlo
    estimates their spread includes that noise too, so this covers both."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float("nan")
    return float(v.std(ddof=1) / np.sqrt(len(v)))
