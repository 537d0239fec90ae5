"""The contract every text environment follows (Gymnasium style, text in and text out).

An environment owns its dynamics and nothing else: the per-turn and per-trajectory action
budgets, the prompt and the format penalty live in `ragen_lib.prompting`, so that one env file
reads like Gymnasium's toy-text envs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass(frozen=True)
class Limits:
    """The budgets one episode plays under: a run's `rollout.*` limit where it sets one, the env's
    own default where it leaves it None (`TextEnv.limits`, the one place that rule is written)."""

    max_turns: int
    max_actions_per_turn: int
    max_actions_per_episode: int
    max_new_tokens: int

    @property
    def actions(self) -> int:
        """The actions an episode can take: the episode budget, or turns × actions per turn when that
        is smaller (RAGEN's defaults: 10 for Sokoban and FrozenLake)."""
        return min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn)


LIMITS = tuple(f.name for f in fields(Limits))
"""The `rollout.*` fields whose None means "the env's default"."""


class TextEnv:
    """Base class of the text environments.

    Subclasses set the class attributes and implement `reset` (calling `super().reset(seed=seed)`
    first, which reseeds `np_random`), `step`, `render` and `expert_action`; envs with free-form
    actions also set `action_help` and override `parse_action` and `random_action`. Everything the
    rest of the library asks of an env is declared here: the Gymnasium API, the text interface
    (`instructions`, `legend`, `actions` / `action_help`, `parse_action`), the budgets, the fixed evaluation
    states (`eval_seeds`), and the two scripted policies (`random_action`, `expert_action`).
    """

    #: Registry name, e.g. "sokoban".
    name: str = "base"
    #: Canonical action names for envs with a fixed action set (empty for free-form actions).
    actions: tuple[str, ...] = ()
    #: The task description shown once at the top of the first user turn (RAGEN's
    #: `env_instruction`, config/envs.yaml at 385bc30).
    instructions: str = ""
    #: The symbol meanings, "sym: meaning, ..." ("" for none), shown after the instructions.
    legend: str = ""
    #: Whether the prompt lists `actions` and the per-trajectory budget. RAGEN lists them only for
    #: envs whose config has an action lookup (Sokoban, FrozenLake), not for Bandit.
    prompt_lists_actions: bool = True
    #: Actions the agent may take per turn and per trajectory (RAGEN's defaults per env).
    max_actions_per_turn: int = 5
    max_actions_per_episode: int = 10
    #: Turns (model responses) per episode; RAGEN uses 5 for the multi-turn envs, 1 for Bandit.
    max_turns: int = 5
    #: New tokens per response (RAGEN: 400, config/base.yaml; Bandit 500, config/_1_bandit.yaml:9).
    max_new_tokens: int = 400
    #: Free-form actions only: their syntax, for error messages (the prompt's instructions say it).
    action_help: str = ""

    def __init__(self) -> None:
        self.np_random = np.random.default_rng()

    @classmethod
    def limits(cls, **given: int | None) -> Limits:
        """The budgets an episode of this env plays under: each limit in `given` (the `LIMITS`
        names, as `rollout.*` spells them) where it is set, this env's default where it is None or
        absent. A class method: the defaults are class attributes, so no env need be built."""
        unknown = sorted(set(given) - set(LIMITS))
        if unknown:
            raise TypeError(f"unknown limit(s) {unknown}; limits: {', '.join(LIMITS)}")
        return Limits(**{k: int(given[k]) if given.get(k) else getattr(cls, k) for k in LIMITS})

    # --- Gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Subclasses call this first, then draw the initial state from `np_random`; they return
        (observation, info). Every env reseeds its own generator: no module-level randomness."""
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        return "", {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Apply one canonical action. Returns (observation, reward, terminated, truncated, info).

        `info["success"]` is always present. An action that `parse_action` would reject raises
        ValueError naming the valid actions.
        """
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    # --- text interface ------------------------------------------------------------------
    def parse_action(self, text: str) -> str | None:
        """Map the model's text for one action to a canonical action, or None if invalid.

        Default: case-insensitive match against `actions`, surrounding white space ignored.
        """
        key = text.strip().lower()
        for a in self.actions:
            if a.lower() == key:
                return a
        return None

    def random_action(self, rng: np.random.Generator) -> str:
        """A uniformly random valid action: the `format` warm-up's answers (the format, no task
        knowledge). Envs with free-form actions override it."""
        if not self.actions:
            raise NotImplementedError(f"{self.name}: free-form actions; override random_action")
        return str(rng.choice(self.actions))

    @classmethod
    def eval_seeds(cls, n: int) -> list[int]:
        """The `n` fixed initial states validation plays. Default: 2**31 + i, above every seed a
        training step draws (`seeds.draw_states`), so validation states are never trained on."""
        return [2**31 + i for i in range(n)]

    def expert_action(self) -> str:
        """The scripted expert's next action from the current state (used by tests and BC)."""
        raise NotImplementedError

    def _invalid(self, action: str) -> ValueError:
        return ValueError(f"{self.name}: unknown action {action!r}; valid actions: {', '.join(self.actions)}")


def whole(name: str, value) -> int:
    """`value` as an int where it is one (a count: boxes, steps, depth; 20.0 too, as a DataFrame
    column holds it), else a ValueError naming the field: int() rounded num_boxes=2.5 down to 2."""
    whole_float = isinstance(value, (float, np.floating)) and float(value).is_integer()
    if isinstance(value, bool) or not (isinstance(value, (int, np.integer)) or whole_float):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def check_contract(env: TextEnv) -> None:
    """Play `env` for one expert step from seed 0 and raise, naming the env, the method and the fix,
    where it breaks the contract above in a way a run would not report: a reset that ignores its
    seed, an `info` without "success" (every episode would count as failed), an expert the parser
    rejects (the expert warm-up would teach answers that score as invalid), a fixed-action env with
    no `actions` (every answer would be rejected), an action name holding the separator " || " (it
    never parses). Run when a config names the env, before any model loads; a few milliseconds
    (`ragen_lib.envs.check` runs it once per variant and process)."""
    cls = type(env)
    who = f"env {env.name!r} ({cls.__name__})"

    def call(method: str, *args, **kwargs):
        try:
            return getattr(env, method)(*args, **kwargs)
        except NotImplementedError:
            raise TypeError(
                f"{who} does not implement {method}(): a TextEnv implements reset, step, render and "
                "expert_action (ragen_lib/envs/base.py)"
            ) from None

    if not env.actions and cls.parse_action is TextEnv.parse_action:
        raise TypeError(
            f"{who} has no `actions` and keeps TextEnv.parse_action, so every answer would be rejected: "
            "set `actions` (a fixed action set), or override parse_action and random_action and set "
            "action_help (free-form actions, as WebShopEnv)"
        )
    from ragen_lib.prompting import ACTION_SEPARATOR  # here: prompting imports this module

    for name in env.actions:  # an answer is cut at the separator before its pieces are parsed
        if ACTION_SEPARATOR in name:
            raise ValueError(
                f"{who}: action {name!r} holds the action separator {ACTION_SEPARATOR!r}, so an answer "
                "is cut there and the action never parses: rename it"
            )
    got = call("reset", seed=0)
    if not (
        isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], str) and isinstance(got[1], dict)
    ):
        raise TypeError(f"{who}: reset() must return (observation: str, info: dict), got {got!r}")
    first = call("render")
    if not isinstance(first, str):
        raise TypeError(f"{who}: render() must return the state as text, got {type(first).__name__}")
    action = call("expert_action")
    if not isinstance(action, str) or ACTION_SEPARATOR in action or env.parse_action(action) is None:
        raise ValueError(
            f"{who}: expert_action() returned {action!r}, which parse_action rejects, so the expert "
            "warm-up would teach answers that score as invalid: return an action the parser accepts "
            f"({', '.join(env.actions) or env.action_help})"
        )
    out = call("step", env.parse_action(action))
    if not (isinstance(out, tuple) and len(out) == 5):
        n = len(out) if isinstance(out, tuple) else type(out).__name__
        raise TypeError(
            f"{who}: step() returned {n} values; it returns (observation, reward, terminated, "
            "truncated, info), Gymnasium's five"
        )
    if not isinstance(out[4], dict) or "success" not in out[4]:
        raise TypeError(
            f"{who}: step() returned info without 'success' ({out[4]!r}); every info carries it "
            "(True once the episode is solved), else every episode would count as failed"
        )
    call("reset", seed=0)
    if call("render") != first:
        raise ValueError(
            f"{who}: reset(seed=0) twice gave two states; reset calls super().reset(seed=seed) first "
            "and draws the state from self.np_random only (no module-level randomness)"
        )
