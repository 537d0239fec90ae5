"""Environment registry: `make(name, **overrides)`.

Each registered name maps to an env class and the keyword fields that define the variant, so
that "bandit-rev" and "sokoban-large" are data, not subclasses.
"""

from __future__ import annotations

import inspect

from ragen_lib.envs.bandit import VARIANTS as _BANDIT_VARIANTS
from ragen_lib.envs.bandit import BanditEnv
from ragen_lib.envs.base import LIMITS, Limits, TextEnv, check_contract
from ragen_lib.envs.frozenlake import FrozenLakeEnv
from ragen_lib.envs.sokoban import SokobanEnv
from ragen_lib.envs.webshop import WebShopEnv

REGISTRY: dict[str, tuple[type[TextEnv], dict]] = {
    **{name: (BanditEnv, kw) for name, kw in _BANDIT_VARIANTS.items()},
    # RAGEN's SimpleSokoban (search_depth 300: the default) and the paper's generalisation
    # variants, LargerSokoban and SokobanDifferentGridVocab, with RAGEN's per-variant search depth
    # (config/envs.yaml:13-37).
    "sokoban": (SokobanEnv, {}),
    "sokoban-large": (SokobanEnv, {"dim_room": (8, 8), "num_boxes": 2, "search_depth": 10}),
    "sokoban-newvocab": (SokobanEnv, {"symbols": "newvocab", "search_depth": 30}),
    "frozenlake": (FrozenLakeEnv, {}),
    "webshop": (WebShopEnv, {}),
}


def env_fields(name: str) -> dict:
    """The keyword fields (with their defaults for this variant) that `make(name, ...)` accepts."""
    cls, variant = _lookup(name)
    params = inspect.signature(cls.__init__).parameters
    fields = {
        k: p.default
        for k, p in params.items()
        if k != "self" and p.kind == p.KEYWORD_ONLY or (k != "self" and p.kind == p.POSITIONAL_OR_KEYWORD)
    }
    fields.update(variant)
    return fields


def make(name: str, **overrides) -> TextEnv:
    """Build a registered env; `overrides` replace the variant's fields.

    Unknown names and unknown fields raise ValueError listing the valid ones.
    """
    cls, variant = _lookup(name)
    valid = env_fields(name)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(f"env {name!r} has no field(s) {unknown}; valid fields: {', '.join(sorted(valid))}")
    return cls(**{**variant, **overrides})


def check(name: str, **overrides) -> None:
    """`base.check_contract` on the env `make(name, **overrides)` builds: the config runs it when it
    names an env, so a broken env is named before any model loads. Once per variant and process."""
    key = (_lookup(name)[0], name, repr(sorted(overrides.items())))  # the class: a test may swap it
    if key not in _CHECKED:
        check_contract(make(name, **overrides))
        _CHECKED.add(key)


_CHECKED: set[tuple] = set()


def env_class(name: str) -> type[TextEnv]:
    """The class a registered name builds: its class attributes (the budgets, `limits`, the action
    set) without building an env. Unknown names raise ValueError listing the valid ones."""
    return _lookup(name)[0]


def _lookup(name: str) -> tuple[type[TextEnv], dict]:
    if name not in REGISTRY:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


__all__ = ["LIMITS", "REGISTRY", "Limits", "TextEnv", "check", "env_class", "env_fields", "make"]
