"""Two-armed bandit with symbolic arm names (RAGEN's Bandit and its variants), a single pull."""

from __future__ import annotations

from ragen_lib.envs.base import TextEnv

#: The registered variants: name -> keyword fields of `BanditEnv`. RAGEN 385bc30 pairs: the default
#: Bandit / BanditTest configs (config/envs.yaml:63-79) and the Section 5.1 generalisation runs
#: (scripts train_all.sh:53-77), which train on Engineer/Teacher and validate on Trader/Librarian,
#: or on the reversed pairs.
VARIANTS: dict[str, dict] = {
    # Training pair: "Phoenix" sounds safe and steady, "Dragon" risky; Dragon is the high-risk arm,
    # so the names' symbolism and the better arm in expectation agree (RAGEN's `Bandit`).
    "bandit": {},
    # Held-out pair (RAGEN's `BanditTest`): Librarian is the high-risk arm.
    "bandit-heldout": {"low_risk_name": "Trader", "high_risk_name": "Librarian"},
    # Ours: the training names with the roles swapped, so the symbolism learned on "bandit" now
    # picks the worse arm (RAGEN has no Phoenix/Dragon swap; its reversed runs use the pairs below).
    "bandit-rev": {"low_risk_name": "Dragon", "high_risk_name": "Phoenix"},
    # RAGEN Section 5.1 (`bandit-generalization`): train on Engineer (low) / Teacher (high) ...
    "bandit-gen": {"low_risk_name": "Engineer", "high_risk_name": "Teacher"},
    # ... and `bandit-generalization-rev`: train on Teacher (low) / Engineer (high) ...
    "bandit-gen-rev": {"low_risk_name": "Teacher", "high_risk_name": "Engineer"},
    # ... validated on Librarian (low) / Trader (high).
    "bandit-heldout-rev": {"low_risk_name": "Librarian", "high_risk_name": "Trader"},
}

#: RAGEN's Bandit state (bandit/env.py:6-12): the whole task is in the observation, the
#: instruction prefix is empty. Its spacing and missing full stops are kept: the model reads it.
STATE = (
    "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
    "Game Rules: \n"
    "1. There are 2 arms, named {a} and {b}\n"
    "2. Each arm has its own reward distribution, related to their names. \n"
    "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might "
    "behave.\n"
    "4. Based on the symbolic meaning of their names, which arm do you think is more likely to give "
    "higher rewards on average? Choose between {a} and {b}, and output like <answer> {a} </answer> or "
    "<answer> {b} </answer>.\n"
)


class BanditEnv(TextEnv):
    """Pull one of two named arms, once.

    ## Actions
    The two arm names, in the order shown (``actions`` is shuffled at each reset when `shuffle`,
    so the prompt's order carries no hint). One action in one turn.

    ## Observation
    RAGEN's game description naming the two arms (`STATE`); after the pull, ``"{arm}: {reward}
    points"``. There are no separate instructions and no action list in the prompt (as RAGEN).

    ## Rewards
    Low-risk arm: `low_risk_reward` always. High-risk arm: `high_risk_reward` with probability
    `high_risk_p`, else 0. Defaults are RAGEN's released code (bandit/config.py:9-12): 0.1, 1.0,
    0.25, so the high-risk arm has the higher mean (0.25 > 0.1). The paper's text says 0.15 for
    the low-risk arm; set ``low_risk_reward=0.15`` for that.

    ## Episode end
    Terminated after the single pull. ``info["success"]`` is True iff the high-risk arm was chosen
    (the paper's definition: the better arm in expectation), whatever it paid; ``info["arm"]`` is
    "high" or "low".

    ## Arguments
    ``low_risk_name="Phoenix"``, ``high_risk_name="Dragon"`` (must differ, ignoring case);
    ``low_risk_reward=0.1``; ``high_risk_reward=1.0``; ``high_risk_p=0.25``; ``shuffle=True``.
    See `VARIANTS` for the registered name pairs. The random stream is RAGEN's: the seed's first
    draw orders the arms (< 0.5: low-risk arm first), the second decides the high arm's payout, so
    a seed gives RAGEN's order and payout.
    """

    name = "bandit"
    max_turns = 1
    max_new_tokens = 500  # RAGEN config/_1_bandit.yaml:9 (docs/FIDELITY.md E14)
    max_actions_per_turn = 1
    max_actions_per_episode = 1
    # RAGEN's Bandit config has no action lookup when the prompt is built: no action list, no legend.
    prompt_lists_actions = False

    def __init__(
        self,
        low_risk_name: str = "Phoenix",
        high_risk_name: str = "Dragon",
        low_risk_reward: float = 0.1,
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
        self._observation = STATE.format(a=self.actions[0], b=self.actions[1])

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        arms = (self.low_risk_name, self.high_risk_name)
        # A fixed order would let the policy learn "pick the first arm" instead of reading names.
        # The draw is made even without shuffling, so the payout draw stays RAGEN's second number.
        if self.np_random.random() >= 0.5 and self.shuffle:
            arms = arms[::-1]
        self.actions = arms
        self._observation = STATE.format(a=arms[0], b=arms[1])
        return self.render(), {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in self.actions:
            raise self._invalid(action)
        high = action == self.high_risk_name
        if high:
            reward = self.high_risk_reward if self.np_random.random() < self.high_risk_p else 0.0
        else:
            reward = self.low_risk_reward
        self._observation = f"{action}: {reward} points"
        return self.render(), float(reward), True, False, {"success": high, "arm": "high" if high else "low"}

    def render(self) -> str:
        return self._observation

    def expert_action(self) -> str:
        # The high-risk arm has the higher mean with RAGEN's payouts (0.25 > 0.1).
        return self.high_risk_name
