"""FrozenLake as text (RAGEN's variant of Gymnasium's toy-text env): random solvable maps."""

from __future__ import annotations

from collections import deque

import numpy as np

from ragen_lib.envs.base import TextEnv, whole

#: Action name -> (row, column) offset, in the order of `FrozenLakeEnv.actions` (Gymnasium's 0..3).
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
_ORDER = tuple(MOVES)
#: Where a slip sends you: Gymnasium's (a - 1) % 4 and (a + 1) % 4, the two directions
#: perpendicular to the intended one (never backwards), in that order.
PERPENDICULAR = {a: (_ORDER[(i - 1) % 4], _ORDER[(i + 1) % 4]) for i, a in enumerate(_ORDER)}
#: Tile and player symbols.
FROZEN, HOLE, GOAL = "_", "O", "G"
PLAYER, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "X", "√"
#: RAGEN's legend (frozen_lake/config.py:21-22).
LEGEND = "P: player, _: empty, O: hole, G: goal, X: player in hole, √: player on goal"
#: RAGEN's instruction (config/envs.yaml:84, its wording and typos kept: the model reads this text).
INSTRUCTIONS = (
    "You are solving the FrozenLake puzzle. Forbid the whole and go to the target.{slippery} Example "
    "answer format: <think>To forbid the hole and go to the target, I should go left then go up."
    "</think><answer>Left || Up</answer>"
)
SLIPPERY_NOTE = " You may move to the unintended direction due to the slippery ice."
#: Where the player starts and the goal lies: RAGEN draws both (`generate_random_map`, frozen_lake/
#: utils.py:25-47); "corner" is Gymnasium's fixed top-left start and bottom-right goal.
LAYOUTS = ("random", "corner")
#: Map draws before giving up; only an absurdly low `p_frozen` on a large map gets near it.
MAX_GEN_TRIES = 10_000


class FrozenLakeEnv(TextEnv):
    """Walk to the goal without falling in a hole.

    ## Actions
    Left, Down, Right, Up. A move into the border leaves you where you are (as Gymnasium).
    On slippery ice one uniform draw u picks the move actually made: the first perpendicular one
    if u < ``slip_prob / 2``, the intended one if u < ``slip_prob / 2 + 1 - slip_prob``, else the
    second perpendicular one (with the default 2/3: Gymnasium's 1/3 each, in its order); never the
    opposite one. ``info["intended"]`` and ``info["actual"]`` record both.

    ## Observation
    The map, one row per line, one character per tile: ``P`` player, ``_`` frozen (the start tile
    too), ``O`` hole, ``G`` goal, ``X`` player in a hole, ``√`` player on the goal.

    ## Rewards
    `goal_reward` (1) on reaching the goal, 0 otherwise (no step or hole penalty, as Gymnasium).

    ## Episode end
    Terminated on the goal (``info["success"]``) or in a hole; truncated after `max_steps` moves.

    ## Arguments
    ``size=4`` (size x size map); ``p_frozen=0.8`` (every tile is frozen with this probability,
    else a hole, before the start and goal are written over it); ``layout="random"`` (RAGEN: start
    and goal drawn uniformly at distinct tiles, the whole map redrawn until a path joins them) or
    ``"corner"`` (start top-left, goal bottom-right); ``is_slippery=True``; ``slip_prob=2/3``;
    ``goal_reward=1.0``; ``max_steps=100``. The map is a function of the seed: with
    ``layout="random"`` the map of seed s is RAGEN's map of seed s, and so are the slips.
    """

    name = "frozenlake"
    actions = _ORDER
    instructions = INSTRUCTIONS.format(slippery=SLIPPERY_NOTE)
    legend = LEGEND
    max_turns = 5
    max_actions_per_turn = 5
    max_actions_per_episode = 10

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        layout: str = "random",
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
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        if not 0 <= slip_prob <= 1:
            raise ValueError(f"slip_prob must be in [0, 1], got {slip_prob}")
        if whole("max_steps", max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.size, self.p_frozen, self.layout = int(size), float(p_frozen), layout
        self.is_slippery, self.slip_prob = bool(is_slippery), float(slip_prob)
        self.goal_reward, self.max_steps = float(goal_reward), int(max_steps)
        # Telling the model about slips it will never see would mislead it.
        self.instructions = INSTRUCTIONS.format(slippery=SLIPPERY_NOTE if self.is_slippery else "")
        self.grid = np.full((self.size, self.size), FROZEN)
        self.grid[-1, -1] = GOAL
        self.pos: tuple[int, int] = (0, 0)
        self.steps = 0
        self._values: np.ndarray | None = None  # finite-horizon plan, cached per map
        self._trans: np.ndarray | None = None  # slip dynamics, the same for every map

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        grid, start = self._draw_map()
        if seed is not None:
            # RAGEN builds a fresh Gymnasium env for the seed, whose reset seeds a second generator
            # with the same seed and spends one draw picking the start tile; slips then come from
            # that stream. Doing the same gives RAGEN's slips for the same seed and actions.
            self.np_random = np.random.default_rng(seed)
            self.np_random.random()
        self._set_state(grid, start)
        return self.render(), {"success": False}

    def _draw_map(self) -> tuple[np.ndarray, tuple[int, int]]:
        """The map and the start, drawn in RAGEN's order (frozen_lake/utils.py:35-45): every tile
        frozen or a hole, then start and goal; a draw with start == goal or without a path from
        start to goal is thrown away whole."""
        n, rng = self.size, self.np_random
        for _ in range(MAX_GEN_TRIES):
            grid = np.where(rng.random((n, n)) < self.p_frozen, FROZEN, HOLE)
            if self.layout == "corner":
                start, goal = (0, 0), (n - 1, n - 1)
            else:
                start = tuple(int(x) for x in rng.integers(n, size=2))
                goal = tuple(int(x) for x in rng.integers(n, size=2))
                if start == goal:
                    continue
            grid[start], grid[goal] = FROZEN, GOAL
            if _shortest_path(grid, start) is not None:
                return grid, start
        raise RuntimeError(
            f"no solvable {n}x{n} map in {MAX_GEN_TRIES} draws at p_frozen={self.p_frozen}: raise p_frozen"
        )

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in self.actions:
            raise self._invalid(action)
        if self.grid[self.pos] in (HOLE, GOAL):
            # Gymnasium's terminal tiles keep the player (frozen_lake.py:274-275): reward 0, done;
            # success is where the player stands, as RAGEN's info reads it (frozen_lake/env.py:43)
            success = bool(self.grid[self.pos] == GOAL)
            return self.render(), 0.0, True, False, {"success": success, "intended": action, "actual": None}
        actual = action
        if self.is_slippery:
            u, side = self.np_random.random(), self.slip_prob / 2
            if u < side:
                actual = PERPENDICULAR[action][0]
            elif u >= side + (1 - self.slip_prob):
                actual = PERPENDICULAR[action][1]
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

    def success_probability(self, steps: int, policy: str = "best") -> float:
        """The chance of reaching the goal from the current tile within `steps` moves, for the
        best policy ("best": finite-horizon value iteration) or a uniformly random one ("random").
        Exact, slips included: the floor and ceiling `ragen_lib.baselines` reports."""
        if policy not in ("best", "random"):
            raise ValueError(f"policy must be 'best' or 'random', got {policy!r}")
        t = self._transitions()  # (A, S, S')
        flat = self.grid.ravel()
        frozen = flat == FROZEN
        values = (flat == GOAL).astype(float)  # holes stay 0: both are absorbing
        for _ in range(steps):
            q = t @ values  # (A, S): chance of success after this move, per action
            values = np.where(frozen, q.max(axis=0) if policy == "best" else q.mean(axis=0), values)
        return float(values[self.pos[0] * self.size + self.pos[1]])

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
        slip = self.slip_prob if self.is_slippery else 0.0
        t = np.zeros((len(self.actions), n * n, n * n))
        for a, action in enumerate(self.actions):
            for r in range(n):
                for c in range(n):
                    outcomes = [(action, 1 - slip)] + [(s, slip / 2) for s in PERPENDICULAR[action]]
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
