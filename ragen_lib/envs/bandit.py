"""Two-armed bandit with symbolic arm names (RAGEN's Bandit and BanditRev)."""

from __future__ import annotations

import numpy as np

from ragen_lib.envs.base import TextEnv

#: The registered variants: keyword fields of BanditEnv.
VARIANTS: dict[str, dict] = {
    # Training pair: "Phoenix" sounds safe, "Dragon" sounds risky; Dragon is the high-risk arm.
    "bandit": {},
    # Held-out pair for generalisation: Librarian is the high-risk arm.
    "bandit-heldout": {"low_risk_name": "Trader", "high_risk_name": "Librarian"},
    # BanditRev: the names' symbolism misleads, Phoenix is now the high-risk arm.
    "bandit-rev": {"low_risk_name": "Dragon", "high_risk_name": "Phoenix"},
}


class BanditEnv(TextEnv):
    """Pull one of two named arms, once.

    ## Actions
    The two arm names, in the order shown (shuffled at each reset). One action, one turn.

    ## Observation
    The arm names and a question; the rules are in `instructions`.

    ## Rewards
    Low-risk arm: `low_risk_reward` always. High-risk arm: `high_risk_reward` with probability
    `high_risk_p`, else 0. With the defaults the high-risk arm has the higher mean (0.25 > 0.15).
    RAGEN's released code paid 0.1 for the low-risk arm; the paper's text says 0.15, the default.

    ## Episode end
    After the single pull (terminated). Success = the high-risk arm was chosen (the paper's
    definition: the better arm in expectation), whatever it paid.

    ## Arguments
    low_risk_name, high_risk_name, low_risk_reward=0.15, high_risk_reward=1.0, high_risk_p=0.25,
    shuffle=True.
    """

    name = "bandit"
    max_turns = 1
    max_actions_per_turn = 1
    max_actions_per_episode = 1

    def __init__(self, low_risk_name: str = "Phoenix", high_risk_name: str = "Dragon",
                 low_risk_reward: float = 0.15, high_risk_reward: float = 1.0, high_risk_p: float = 0.25,
                 shuffle: bool = True):
        super().__init__()
        if low_risk_name.lower() == high_risk_name.lower():
            raise ValueError(f"bandit arm names must differ, got {low_risk_name!r} twice")
        if not 0 <= high_risk_p <= 1:
            raise ValueError(f"high_risk_p must be in [0, 1], got {high_risk_p}")
        self.low_risk_name, self.high_risk_name = low_risk_name, high_risk_name
        self.low_risk_reward, self.high_risk_reward = low_risk_reward, high_risk_reward
        self.high_risk_p, self.shuffle = high_risk_p, shuffle
        self.actions = (low_risk_name, high_risk_name)

    @property
    def instructions(self) -> str:
        a, b = self.actions
        return (
            "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull.\n"
            f"Game Rules:\n1. There are 2 arms, named {a} and {b}\n"
            "2. Each arm has its own reward distribution, related to their names.\n"
            "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution "
            "might behave.\n"
            "4. Based on the symbolic meaning of their names, which arm do you think is more likely to "
            f"give higher rewards on average? Choose between {a} and {b}, and output like "
            f"<answer> {a} </answer> or <answer> {b} </answer>."
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        arms = [self.low_risk_name, self.high_risk_name]
        if self.shuffle and self.np_random.random() < 0.5:
            arms.reverse()
        self.actions = tuple(arms)
        self.pulled: str | None = None
        return self.render(), {"success": False}

    def step(self, action: str):
        if action not in self.actions:
            raise self._invalid(action)
        high = action == self.high_risk_name
        if high:
            reward = self.high_risk_reward if self.np_random.random() < self.high_risk_p else 0.0
        else:
            reward = self.low_risk_reward
        self.pulled = action
        return self.render(), float(reward), True, False, {"success": high, "arm": "high" if high else "low"}

    def render(self) -> str:
        a, b = self.actions
        if getattr(self, "pulled", None):
            return f"You pulled {self.pulled}."
        return f"Arms: {a}, {b}. Which arm do you pull?"

    def expert_action(self) -> str:
        return self.high_risk_name
