"""FrozenLake as text (RAGEN's variant of Gymnasium's toy-text env): random solvable maps."""

from __future__ import annotations

from collections import deque

import numpy as np

from ragen_lib.envs.base import TextEnv

#: Action name -> (row, column) offset, in the order of `FrozenLakeEnv.actions` (Gymnasium's 0..3).
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
#: Where a slip sends you: the two directions perpendicular to the intended one (never backwards).
PERPENDICULAR = {
    "Left": ("Up", "Down"),
    "Down": ("Left", "Right"),
    "Right": ("Up", "Down"),
    "Up": ("Left", "Right"),
}
#: Tile and player symbols.
FROZEN, HOLE, GOAL = "_", "O", "G"
PLAYER, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "X", "√"
LEGEND = "Symbols: P You | _ Frozen | O Hole | G Goal | X You in a hole | √ You on the goal"
SLIPPERY_NOTE = " The ice is slippery: you may move perpendicular to your intended direction."


def _instructions(is_slippery: bool) -> str:
    # Telling the model about slips it will never see would mislead it.
    return (
        "You are walking on a frozen lake. Reach the goal G without falling into a hole O."
        + (SLIPPERY_NOTE if is_slippery else "")
        + "\n"
        + LEGEND
    )


#: Map draws before giving up; only an absurdly low `p_frozen` on a large map gets near it.
MAX_GEN_TRIES = 10_000


class FrozenLakeEnv(TextEnv):
    """Walk from the top-left corner to the goal in the bottom-right corner without falling in a hole.

    ## Actions
    Left, Down, Right, Up. A move into the border leaves you where you are (as Gymnasium).
    On slippery ice the move actually made is the intended one with probability ``1 - slip_prob``
    and each of the two perpendicular ones with ``slip_prob / 2`` (1/3 each with the default, as
    Gymnasium); never the opposite one. ``info["intended"]`` and ``info["actual"]`` record both.

    ## Observation
    The map, one row per line, one character per tile: ``P`` you, ``_`` frozen, ``O`` hole,
    ``G`` goal, ``X`` you in a hole, ``√`` you on the goal.

    ## Rewards
    `goal_reward` (1) on reaching the goal, 0 otherwise (no step or hole penalty, as Gymnasium).

    ## Episode end
    Terminated on the goal (``info["success"]``) or in a hole; truncated after `max_steps` moves.

    ## Arguments
    ``size=4`` (size x size map); ``p_frozen=0.8`` (each tile other than start and goal is frozen
    with this probability, else a hole; maps are redrawn until a path exists); ``is_slippery=True``;
    ``slip_prob=2/3``; ``goal_reward=1.0``; ``max_steps=100``.
    """

    name = "frozenlake"
    actions = ("Left", "Down", "Right", "Up")
    instructions = _instructions(True)
    max_turns = 5
    max_actions_per_turn = 5
    max_actions_per_episode = 10

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        is_slippery: bool = True,
        slip_prob: float = 2 / 3,
        goal_reward: float = 1.0,
        max_steps: int = 100,
    ):
        super().__init__()
        if not isinstance(size, (int, np.integer)) or size < 2:
            raise ValueError(f"size must be an integer >= 2, got {size!r}")
        if not 0 < p_frozen <= 1:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        if not 0 <= slip_prob <= 1:
            raise ValueError(f"slip_prob must be in [0, 1], got {slip_prob}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.size, self.p_frozen, self.is_slippery = int(size), float(p_frozen), bool(is_slippery)
        self.slip_prob, self.goal_reward, self.max_steps = (
            float(slip_prob),
            float(goal_reward),
            int(max_steps),
        )
        self.instructions = _instructions(self.is_slippery)
        self.grid = np.full((self.size, self.size), FROZEN)
        self.grid[-1, -1] = GOAL
        self.pos: tuple[int, int] = (0, 0)
        self.steps = 0
        self._values: np.ndarray | None = None  # finite-horizon plan, cached per map
        self._trans: np.ndarray | None = None  # slip dynamics, the same for every map

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        n = self.size
        for _ in range(MAX_GEN_TRIES):
            # Redraw with the same generator, so the map is still a function of the seed alone.
            grid = np.where(self.np_random.random((n, n)) < self.p_frozen, FROZEN, HOLE)
            grid[0, 0], grid[-1, -1] = FROZEN, GOAL
            if _shortest_path(grid, (0, 0)) is not None:
                break
        else:  # pragma: no cover - needs an absurd p_frozen
            raise RuntimeError(
                f"no solvable {n}x{n} map in {MAX_GEN_TRIES} draws at p_frozen={self.p_frozen}"
            )
        self._set_state(grid, (0, 0))
        return self.render(), {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in self.actions:
            raise self._invalid(action)
        actual = action
        if self.is_slippery and self.np_random.random() < self.slip_prob:
            actual = PERPENDICULAR[action][int(self.np_random.integers(2))]
        self.pos = self._move(self.pos, actual)
        self.steps += 1
        tile = self.grid[self.pos]
        success = tile == GOAL
        terminated = bool(success or tile == HOLE)
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
        """An env in the state drawn by `board` (for tests): ``P`` marks you on a frozen tile,
        ``G`` the goal, ``O`` holes, ``_`` frozen tiles. The board must be square."""
        rows = [list(line.strip()) for line in board.strip().splitlines()]
        n = len(rows)
        if any(len(row) != n for row in rows):
            raise ValueError(f"board must be square, got row lengths {[len(row) for row in rows]}")
        grid = np.array(rows)
        bad = set(grid.ravel()) - {FROZEN, HOLE, GOAL, PLAYER}
        if bad:
            raise ValueError(f"unknown symbols {sorted(bad)}; valid symbols: {FROZEN} {HOLE} {GOAL} {PLAYER}")
        if (grid == PLAYER).sum() != 1 or (grid == GOAL).sum() != 1:
            raise ValueError("board needs exactly one P and one G")
        ((r, c),) = zip(*np.nonzero(grid == PLAYER))
        grid[r, c] = FROZEN
        env = cls(size=n, **kwargs)
        env._set_state(grid, (int(r), int(c)))
        return env

    # --- the scripted expert -------------------------------------------------------------------
    def expert_action(self) -> str:
        """Without slips, the first move of a shortest path (BFS). With slips, the move that
        maximises the probability of reaching the goal before `max_steps` runs out."""
        if not self.is_slippery:
            path = _shortest_path(self.grid, self.pos)
            return path[0] if path else self.actions[0]  # no path: every move is as good
        return self.actions[int(np.argmax(self._q_values()))]

    def optimal_success_probability(self) -> float:
        """The best policy's chance of reaching the goal from here within the steps left."""
        if self.grid[self.pos] != FROZEN:
            return float(self.grid[self.pos] == GOAL)
        if not self.is_slippery:
            path = _shortest_path(self.grid, self.pos)
            return float(path is not None and len(path) <= self.max_steps - self.steps)
        return float(self._q_values().max())

    # --- helpers -------------------------------------------------------------------------------
    def _set_state(self, grid: np.ndarray, pos: tuple[int, int]) -> None:
        self.grid, self.pos, self.steps, self._values = grid, pos, 0, None

    def _move(self, pos: tuple[int, int], action: str) -> tuple[int, int]:
        dr, dc = MOVES[action]
        # The border stops you (as Gymnasium) instead of wrapping or ending the episode.
        return min(max(pos[0] + dr, 0), self.size - 1), min(max(pos[1] + dc, 0), self.size - 1)

    def _q_values(self) -> np.ndarray:
        """Per action, the probability of reaching the goal from `pos` with the steps left.

        Finite-horizon value iteration rather than the undiscounted fixed point: in the
        fixed point, bumping into a wall has the same value as progress, and an expert that
        picks it can stall until truncation; with a horizon, wasting a step costs value.
        """
        if self._values is None:
            self._values = self._finite_horizon_values()
        left = max(self.max_steps - self.steps, 1)
        v_next = self._values[left - 1]
        return self._transitions()[:, self.pos[0] * self.size + self.pos[1]] @ v_next

    def _transitions(self) -> np.ndarray:
        """T[a, s, s']: probability that action a from tile s lands on tile s'."""
        if self._trans is not None:
            return self._trans
        n = self.size
        sides = self.slip_prob / 2
        t = np.zeros((len(self.actions), n * n, n * n))
        for a, action in enumerate(self.actions):
            for r in range(n):
                for c in range(n):
                    outcomes = [(action, 1 - self.slip_prob)] + [(s, sides) for s in PERPENDICULAR[action]]
                    for move, p in outcomes:
                        nr, nc = self._move((r, c), move)
                        t[a, r * n + c, nr * n + nc] += p
        self._trans = t
        return t

    def _finite_horizon_values(self) -> np.ndarray:
        """V[k, s]: the best probability of reaching the goal from tile s within k moves."""
        t = self._transitions()
        flat = self.grid.ravel()
        frozen, goal = flat == FROZEN, flat == GOAL
        values = np.zeros((self.max_steps + 1, flat.size))
        values[:, goal] = 1.0  # holes stay 0: both are absorbing
        for k in range(1, self.max_steps + 1):
            values[k, frozen] = (t @ values[k - 1]).max(axis=0)[frozen]
        return values


def _shortest_path(grid: np.ndarray, start: tuple[int, int]) -> list[str] | None:
    """Breadth-first search over non-hole tiles: the moves of a shortest path to the goal, or None."""
    n = grid.shape[0]
    prev: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if grid[cur] == GOAL:
            moves = []
            while (link := prev[cur]) is not None:
                cur, move = link
                moves.append(move)
            return moves[::-1]
        if grid[cur] == HOLE:  # a hole ends the episode: no path leads through or out of it
            continue
        for move, (dr, dc) in MOVES.items():
            nxt = (cur[0] + dr, cur[1] + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and nxt not in prev and grid[nxt] != HOLE:
                prev[nxt] = (cur, move)
                queue.append(nxt)
    return None
