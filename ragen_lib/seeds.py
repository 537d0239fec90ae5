"""Every random choice of a run, as a function of (train.seed, step, salt).

A resumed run replays exactly the numbers of an uninterrupted one because nothing is drawn from a
generator that lives across steps: each draw builds its own `np.random.default_rng` from a key.
Each use has its own salt below, so two uses never share a stream. The warm-up draws at negative
steps (`step % 2**32` keeps the key non-negative), so it never repeats a training step's draws.
"""

from __future__ import annotations

import numpy as np

from ragen_lib.config import Config
from ragen_lib.envs import env_class

# --- salts of step-keyed draws: step_rng(seed, step, SALT) ------------------------------------
TRAIN_STATES = 0
"""The P initial states of a training step."""
WARMUP_STATES = 1
"""The initial states of the expert / format warm-up's episodes (drawn at step -1)."""
APO_PICK = 4
"""A*-PO: which states of the pool a step trains on."""
ROLLOUT_SAMPLING = 5
"""The token-sampling seed of a step's rollout (+ the rank under data parallel)."""
FILTER = 6
"""The random-filter control's choice of groups."""
MINIBATCH_ORDER = 7
"""The permutation that splits a batch into mini-batches."""
V_STAR_SAMPLING = 8
"""A*-PO stage 1: the sampling seed of each chunk of reference samples."""

# --- salts of run-keyed draws: run_rng(seed, SALT) --------------------------------------------
WARMUP_ORDER = 2
"""Which warm-up examples each behaviour-cloning step takes."""
APO_POOL = 3
"""A*-PO's fixed pool of initial states."""

# --- state-keyed draws: np.random.default_rng([train.seed, state seed, FORMAT_ACTIONS]) --------
FORMAT_ACTIONS = 6
"""The `format` warm-up's random valid actions for one initial state."""

# --- fixed sampling seeds (the same at every call, so curves differ by the policy only) ---------
VALIDATION_SAMPLING = 12345
PROBE_SAMPLING = 7
"""The warm-up's before/after probe of first answers."""
OWN_REASONING_SAMPLING = 11
"""The format / expert warm-up's sampling of the model's own `<think>` text (warmup.own_reasoning)."""
SELF_WARMUP_SAMPLING = 1000
"""`self` warm-up round i samples with seed SELF_WARMUP_SAMPLING + i (its states: step -100 - i)."""


def step_rng(seed: int, step: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, step % 2**32, salt])


def run_rng(seed: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, salt])


def torch_seed(seed: int, step: int, salt: int) -> int:
    """A seed for a `torch.Generator` (or a sampling stream) drawn from the step's key."""
    return int(step_rng(seed, step, salt).integers(2**31))


def draw_states(seed: int, step: int, salt: int, n: int) -> list[int]:
    """`n` initial-state seeds in [0, 2**31 - 1): the validation seeds lie above, never drawn here."""
    return [int(s) for s in step_rng(seed, step, salt).integers(0, 2**31 - 1, n)]


def train_seeds(cfg: Config, step: int) -> list[int]:
    """P (× the updates the rollout feeds: online_k) fresh initial states per step (RAGEN samples
    new states every iteration)."""
    return draw_states(cfg.train.seed, step, TRAIN_STATES, cfg.train.groups * cfg.train.rollout_updates(step))


def apo_pool(cfg: Config) -> list[int]:
    """A*-PO's fixed pool of initial states, whose V* stage 1 estimates once."""
    rng = run_rng(cfg.train.seed, APO_POOL)
    return [int(s) for s in rng.integers(0, 2**31 - 1, cfg.apo_pool_size)]


def apo_states(cfg: Config, step: int, pool: list[int]) -> list[int]:
    """A*-PO stage 2: P·N distinct states of the pool, one sample each."""
    pick = step_rng(cfg.train.seed, step, APO_PICK).choice(
        len(pool), cfg.train.groups * cfg.train.group_size, replace=False
    )
    return [pool[i] for i in pick]


def val_seeds(env_name: str, n: int) -> list[int]:
    """The env's fixed evaluation states (`TextEnv.eval_seeds`; WebShop: its 256 instructions)."""
    return env_class(env_name).eval_seeds(n)  # an unknown name fails there, listing the envs
