"""Two-armed bandit with symbolic arm names (RAGEN's Bandit and BanditRev), a single pull."""

from __future__ import annotations

from ragen_lib.envs.base import TextEnv

#: The registered variants: name -> keyword fields of `BanditEnv`.
VARIANTS: dict[str, dict] = {
    # Training pair: "Phoenix" sounds safe and steady, "Dragon" risky; Dragon is the high-risk arm,
    # so the names' symbolism and the better arm in expectation agree.
    "bandit": {},
    # Held-out pair for generalisation (names never seen in training): Librarian is the high-risk arm.
    "bandit-heldout": {"low_risk_name": "Trader", "high_risk_name": "Librarian"},
    # BanditRev (RAGEN Sec. 4.3): the same names with the roles swapped, so following the symbolism
    # learned on "bandit" now picks the worse arm; Phoenix is the high-risk arm.
    "bandit-rev": {"low_risk_name": "Dragon", "high_risk_name": "Phoenix"},
}


class BanditEnv(TextEnv):
    """Pull one of two named arms, once.

    ## Actions
    The two arm names, in the order shown (``actions`` is shuffled at each reset when `shuffle`,
    so the prompt's order carries no hint). One action in one turn.

    ## Observation
    The arm names and a question; the rules are in ``instructions``.

    ## Rewards
    Low-risk arm: `low_risk_reward` always. High-risk arm: `high_risk_reward` with probability
    `high_risk_p`, else 0. With the defaults the high-risk arm has the higher mean (0.25 > 0.15).
    RAGEN's released code pays 0.1 for the low-risk arm; the paper's text says 0.15, which is the
    default here.

    ## Episode end
    Terminated after the single pull. ``info["success"]`` is True iff the high-risk arm was chosen
    (the paper's definition: the better arm in expectation), whatever it paid; ``info["arm"]`` is
    "high" or "low".

    ## Arguments
    ``low_risk_name="Phoenix"``, ``high_risk_name="Dragon"`` (must differ, ignoring case);
    ``low_risk_reward=0.15``; ``high_risk_reward=1.0``; ``high_risk_p=0.25``; ``shuffle=True``.
    See `VARIANTS` for the registered name pairs.
    """

    name = "bandit"
    max_turns = 1
    max_actions_per_turn = 1
    max_actions_per_episode = 1

    def __init__(
        self,
        low_risk_name: str = "Phoenix",
        high_risk_name: str = "Dragon",
        low_risk_reward: float = 0.15,
        high_risk_reward: float = 1.0,
        high_risk_p: float = 0.25,
        shuffle: bool = True,
    ):
        super().__init__()
        if not (
            isinstance(low_risk_name, str)
            and isinstance(high_risk_name, str)
            and low_risk_name.strip()
            and high_risk_name.strip()
        ):
            raise ValueError(
                f"arm names must be non-empty strings, got {low_risk_name!r}, {high_risk_name!r}"
            )
        # parse_action matches names ignoring case, so "Dragon" and "dragon" would be one arm.
        if low_risk_name.strip().lower() == high_risk_name.strip().lower():
            raise ValueError(f"bandit arm names must differ (ignoring case), got {low_risk_name!r} twice")
        if not 0 <= high_risk_p <= 1:
            raise ValueError(f"high_risk_p must be in [0, 1], got {high_risk_p}")
        self.low_risk_name, self.high_risk_name = low_risk_name.strip(), high_risk_name.strip()
        self.low_risk_reward, self.high_risk_reward = float(low_risk_reward), float(high_risk_reward)
        self.high_risk_p, self.shuffle = float(high_risk_p), bool(shuffle)
        # An instance attribute, set before any reset so the prompt builder can already read it.
        self.actions: tuple[str, ...] = (self.low_risk_name, self.high_risk_name)
        self._observation = self._question()

    @property
    def instructions(self) -> str:
        """RAGEN's bandit prompt, naming the arms in the current (possibly shuffled) order."""
        a, b = self.actions
        return (
            "You are playing a bandit game. Goal: maximize your total reward by choosing which arm to pull.\n"
            "Game rules:\n"
            f"1. There are 2 arms, named {a} and {b}.\n"
            "2. Each arm has its own reward distribution, related to their names.\n"
            "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution "
            "might behave.\n"
            "4. Based on the symbolic meaning of their names, which arm do you think is more likely to "
            f"give higher rewards on average? Choose between {a} and {b}, and output like "
            f"<answer> {a} </answer> or <answer> {b} </answer>."
        )

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        arms = (self.low_risk_name, self.high_risk_name)
        # A fixed order would let the policy learn "pick the second arm" instead of reading names.
        if self.shuffle and self.np_random.random() < 0.5:
            arms = arms[::-1]
        self.actions = arms
        self._observation = self._question()
        return self.render(), {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in self.actions:
            raise self._invalid(action)
        high = action == self.high_risk_name
        if high:
            reward = self.high_risk_reward if self.np_random.random() < self.high_risk_p else 0.0
        else:
            reward = self.low_risk_reward
        self._observation = f"You pulled {action} and received a reward of {reward:g}."
        return self.render(), float(reward), True, False, {"success": high, "arm": "high" if high else "low"}

    def render(self) -> str:
        return self._observation

    def expert_action(self) -> str:
        # The high-risk arm has the higher mean with the paper's payouts (0.25 > 0.15).
        return self.high_risk_name

    def _question(self) -> str:
        a, b = self.actions
        return f"Arms: {a}, {b}. Which arm do you pull?"
