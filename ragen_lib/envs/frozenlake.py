"""FrozenLake as text (RAGEN's variant of Gymnasium's toy-text env): random solvable maps."""

from __future__ import annotations

from collections import deque

import numpy as np

from ragen_lib.envs.base import TextEnv

# Moves in the order of `actions`: (row delta, column delta).
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
# The two directions perpendicular to each move (where a slip sends you).
PERPENDICULAR = {"Left": ("Up", "Down"), "Right": ("Up", "Down"), "Up": ("Left", "Right"),
                 "Down": ("Left", "Right")}
FROZEN, HOLE, GOAL = "_", "O", "G"
PLAYER, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "X", "√"
LEGEND = "Symbols: P You | _ Frozen | O Hole | G Goal | X You in a hole | √ You on the goal"


class FrozenLakeEnv(TextEnv):
    """Walk from the top-left corner to the goal in the bottom-right without falling in a hole.

    ## Actions
    Left, Down, Right, Up.

    ## Observation
    The map, one row per line: P you, _ frozen, O hole, G goal, X you in a hole, √ you on the goal.

    ## Rewards
    `goal_reward` (1) on reaching the goal, 0 otherwise.

    ## Episode end
    Terminated on the goal (success) or in a hole; truncated after `max_steps` moves.

    ## Arguments
    size=4; p_frozen=0.8 (each non-start/goal tile frozen with this probability, maps redrawn
    until a path exists); is_slippery=True; slip_prob=2/3 (the move goes perpendicular with this
    probability, split evenly: intended 1/3, each side 1/3, as Gymnasium); goal_reward=1.0;
    max_steps=100.
    """

    name = "frozenlake"
    actions = ("Left", "Down", "Right", "Up")
    max_turns = 5
    max_actions_per_turn = 5
    max_actions_per_episode = 10

    def __init__(self, size: int = 4, p_frozen: float = 0.8, is_slippery: bool = True,
                 slip_prob: float = 2 / 3, goal_reward: float = 1.0, max_steps: int = 100):
        super().__init__()
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        if not 0 < p_frozen <= 1:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        if not 0 <= slip_prob <= 1:
            raise ValueError(f"slip_prob must be in [0, 1], got {slip_prob}")
        self.size, self.p_frozen, self.is_slippery = size, p_frozen, is_slippery
        self.slip_prob, self.goal_reward, self.max_steps = slip_prob, goal_reward, max_steps
        slippery = " The ice is slippery: you may move perpendicular to your intended direction." \
            if is_slippery else ""
        self.instructions = (
            "You are walking on a frozen lake. Reach the goal G without falling into a hole O." + slippery
            + f"\n{LEGEND}"
        )
        self.grid = np.full((size, size), FROZEN)
        self.pos, self.steps, self.fell, self._plan = (0, 0), 0, False, None

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        n = self.size
        while True:  # redraw until the goal is reachable (RAGEN: random solvable maps)
            grid = np.where(self.np_random.random((n, n)) < self.p_frozen, FROZEN, HOLE)
            grid[0, 0], grid[n - 1, n - 1] = FROZEN, GOAL
            if _path(grid, (0, 0)) is not None:
                break
        self.grid, self.pos, self.steps, self.fell, self._plan = grid, (0, 0), 0, False, None
        return self.render(), {"success": False}

    def step(self, action: str):
        if action not in self.actions:
            raise self._invalid(action)
        actual = action
        if self.is_slippery and self.np_random.random() < self.slip_prob:
            actual = PERPENDICULAR[action][int(self.np_random.integers(2))]
        dr, dc = MOVES[actual]
        r = min(max(self.pos[0] + dr, 0), self.size - 1)  # the border stops you, as in Gymnasium
        c = min(max(self.pos[1] + dc, 0), self.size - 1)
        self.pos, self.steps = (r, c), self.steps + 1
        tile = self.grid[r, c]
        self.fell = tile == HOLE
        success = tile == GOAL
        terminated = bool(success or self.fell)
        truncated = not terminated and self.steps >= self.max_steps
        reward = self.goal_reward if success else 0.0
        info = {"success": bool(success), "intended": action, "actual": actual}
        return self.render(), float(reward), terminated, truncated, info

    def render(self) -> str:
        rows = [list(row) for row in self.grid]
        r, c = self.pos
        rows[r][c] = {HOLE: PLAYER_IN_HOLE, GOAL: PLAYER_ON_GOAL}.get(self.grid[r, c], PLAYER)
        return "\n".join("".join(row) for row in rows)

    @classmethod
    def from_text(cls, board: str, **kwargs) -> FrozenLakeEnv:
        """An env in the state drawn by `board` (P marks the player; for tests)."""
        rows = [list(line.strip()) for line in board.strip().splitlines()]
        env = cls(size=len(rows), **kwargs)
        grid = np.array(rows)
        (r, c), = zip(*np.nonzero(grid == PLAYER))
        grid[r, c] = FROZEN
        env.grid, env.pos, env.steps, env.fell = grid, (int(r), int(c)), 0, False
        return env

    # --- the scripted expert -------------------------------------------------------------------
    def expert_action(self) -> str:
        """Shortest path without slips; with slips, the action that maximises the probability of
        reaching the goal (value iteration on the known map)."""
        if not self.is_slippery:
            path = _path(self.grid, self.pos)
            return path[0] if path else self.actions[0]
        if self._plan is None:
            self._plan = self._value_iteration()
        return self._plan[self.pos]

    def _value_iteration(self, sweeps: int = 200) -> dict:
        n = self.size
        value = np.zeros((n, n))
        value[self.grid == GOAL] = 1.0

        def outcomes(r, c, a):
            p_side = self.slip_prob / 2
            for move, p in ((a, 1 - self.slip_prob), *((s, p_side) for s in PERPENDICULAR[a])):
                dr, dc = MOVES[move]
                yield p, (min(max(r + dr, 0), n - 1), min(max(c + dc, 0), n - 1))

        def q(r, c, a):
            return sum(p * value[t] for p, t in outcomes(r, c, a))

        for _ in range(sweeps):
            for r in range(n):
                for c in range(n):
                    if self.grid[r, c] == FROZEN:
                        value[r, c] = max(q(r, c, a) for a in self.actions)
        return {(r, c): max(self.actions, key=lambda a: q(r, c, a)) for r in range(n) for c in range(n)}


def _path(grid: np.ndarray, start: tuple[int, int]) -> list[str] | None:
    """Breadth-first search over frozen tiles; the moves to the goal, or None."""
    n = grid.shape[0]
    prev = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if grid[cur] == GOAL:
            moves = []
            while prev[cur] is not None:
                cur, move = prev[cur]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (cur[0] + dr, cur[1] + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and nxt not in prev and grid[nxt] != HOLE:
                prev[nxt] = (cur, move)
                queue.append(nxt)
    return None
