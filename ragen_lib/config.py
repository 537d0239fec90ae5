"""Run configuration: frozen dataclasses, one per concern, each field documented where declared.

`from_dict` / `load` build a `Config` from YAML plus dotted overrides; `Config.hash()` names runs.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from ragen_lib.algorithms import ADVANTAGE_ESTIMATORS, FILTER_MODES, KL_ESTIMATORS, POLICY_OBJECTIVES
from ragen_lib.distributed import world_size

KV_CACHES = ("dynamic", "static")
"""The decoding caches `generation.generate` knows (rollout.kv_cache)."""


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played out. None means "the env's own default" (RAGEN's settings)."""

    max_turns: int | None = None
    """Model responses per episode. RAGEN: 5 (Bandit: 1)."""
    max_actions_per_turn: int | None = None
    """Actions parsed from one answer (split on `||`). RAGEN: 5 (Bandit, WebShop: 1)."""
    max_actions_per_episode: int | None = None
    """Actions per trajectory. RAGEN: 10 for Sokoban and FrozenLake."""
    max_new_tokens: int = 400
    """New tokens per turn (RAGEN: up to 400)."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts; 0 is greedy. RAGEN validates at 0.5."""
    stop_at_answer: bool = True
    """End a turn's generation at `</answer>` rather than running to EOS or the token limit."""
    enable_think: bool = True
    """`<think>…</think><answer>…</answer>` when True; `<answer>…</answer>` only (no-think) when False."""
    prefill: bool = True
    """End the generation prompt with `<think>` (no-think: `<answer>`) and put it back in front of
    the response before parsing, as RAGEN does (ctx_manager.py:239-243, 299). A prompt token:
    never sampled, outside the loss mask. False: the model must open the tag itself."""
    prompt_per_turn_limit: bool = False
    """Also tell the model the per-turn action limit (RAGEN shows only the episode budget, so
    extra actions are cut silently)."""
    max_response_words: int = 100
    """The word limit the prompt states (RAGEN's `max_tokens: 100`; shown, never enforced)."""
    format_penalty: float = -0.1
    """Added to a turn's reward when its answer is malformed or has an invalid action (RAGEN: -0.1)."""
    format_reward: float = 0.0
    """Added to a turn's reward when its answer is well-formed (a reasoning-aware shaping term;
    RAGEN: 0). Never counted in success."""
    max_context_tokens: int = 8192
    """An episode whose next prompt plus `max_new_tokens` would exceed this is truncated."""
    kv_cache: str = "dynamic"
    """Decoding cache: "dynamic" (HF's, grows per token) or "static" (preallocated, bucketed
    length, one CUDA graph per decode step on a GPU). Same tokens; a speed choice (issue #5),
    "dynamic" by default until the static path is measured on an H100 (`make bench`)."""

    def __post_init__(self):
        for name in ("max_turns", "max_actions_per_turn", "max_actions_per_episode"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"rollout.{name} must be >= 1 or None (env default), got {v}")
        if self.max_new_tokens < 1:
            raise ValueError(f"rollout.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"rollout.temperature must be >= 0 (0 is greedy), got {self.temperature}")
        _choice("rollout.kv_cache", self.kv_cache, KV_CACHES)


# --------------------------------------------------------------------------------------------
# The training configuration. One dataclass per concern; `Config` holds them and is what a run
# saves, hashes and reloads. The algorithm's name selects a preset (ALGO_PRESETS) that fills the
# fields the YAML does not set, so "starpo-s" means the paper's StarPO-S without spelling it out.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    name: str | None = None
    """"smollm2-135m-instruct" (embedded), "tiny-random", a .gguf path, a folder or a hub id.
    None: RAGEN_MODEL or the embedded model."""
    device: str | None = None
    """None: cuda when available, else cpu."""


@dataclass(frozen=True)
class EnvConfig:
    name: str = "bandit"
    """A registered env (see `ragen_lib.envs.REGISTRY`)."""
    kwargs: dict = field(default_factory=dict)
    """Field overrides passed to `envs.make(name, **kwargs)`."""
    eval_envs: tuple[str, ...] = ()
    """Extra envs validated alongside the training env (generalisation, e.g. bandit-rev)."""


@dataclass(frozen=True)
class AlgoConfig:
    """The algorithm. `name` picks a preset (`ALGO_PRESETS`) that fills every field left at None,
    wherever the config is built (YAML, overrides or Python); a field given explicitly wins."""

    name: str = "starpo-ppo"
    """starpo-ppo | starpo-grpo | starpo-s | apo (see ALGO_PRESETS)."""
    advantage: str | None = None
    """The advantage estimator (`algorithms.ADVANTAGE_ESTIMATORS`): gae (critic) | grpo
    (group-normalised trajectory reward) | apo (r − V*). None: the preset's."""
    objective: str | None = None
    """The policy objective (`algorithms.POLICY_OBJECTIVES`): ppo-clip | apo. None: the preset's."""
    critic: bool | None = None
    """A value head on a copy of the base model (StarPO-PPO, StarPO-S). None: the preset's."""
    gamma: float = 1.0
    """GAE discount over policy tokens (RAGEN: 1)."""
    lam: float = 1.0
    """GAE lambda (RAGEN: 1)."""
    grpo_scale: bool = True
    """GRPO: divide by the group std (True) or only subtract the group mean (False)."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (eps_low)."""
    clip_high: float | None = None
    """PPO ratio clip above 1 (eps_high); StarPO-S "clip-higher": 0.28. None: the preset's."""
    value_clip: float = 0.5
    """Clip of the critic's update around its old value."""
    kl_coef: float | None = None
    """KL to the reference policy; 0 removes it (StarPO-S), KL is still logged. None: the preset's."""
    kl_estimator: str = "k1"
    """k1 | k2 | k3 (Schulman's estimators)."""
    kl_in_reward: bool | None = None
    """True: -kl_coef·KL is a per-token reward (PPO). False: a loss term (GRPO). None: the preset's."""
    entropy_coef: float = 0.001
    """Entropy bonus on generated tokens."""
    filter_keep: float | None = None
    """Uncertainty filter: fraction of groups kept by the std of their raw rewards (StarPO-S: 0.25).
    None: the preset's."""
    filter_mode: str = "top"
    """top (highest std, StarPO-S) | bottom | random (the controls)."""
    reasoning_lambda: float = 0.0
    """Weight of the reasoning–action consistency bonus: A = z(env) + λ·z(reasoning) (report: 0.4)."""
    apo_beta1: float = 0.5
    """A*-PO stage 1 temperature: V* = β1·(logsumexp(r/β1) − ln N)."""
    apo_beta2: float = 1e-3
    """A*-PO stage 2 scale of the log-ratio regressed onto r − V*."""
    apo_ref_samples: int = 8
    """A*-PO stage 1: reference samples per initial state."""
    apo_prompt_pool: int = 256
    """A*-PO: the fixed set of training initial states whose V* is estimated offline."""
    apo_refresh_every: int = 0
    """Re-estimate V* with the current policy every K steps (0: never, as released)."""
    apo_adaptive: bool = False
    """Spend stage-1 samples preferentially on high-variance states (StarPO-S's filter idea)."""

    def __post_init__(self):
        _choice("algo.name", self.name, tuple(ALGO_PRESETS))
        for key, value in ALGO_PRESETS[self.name].items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: resolved once, at construction
        _choice("algo.advantage", self.advantage, tuple(ADVANTAGE_ESTIMATORS))
        _choice("algo.objective", self.objective, tuple(POLICY_OBJECTIVES))
        _choice("algo.kl_estimator", self.kl_estimator, tuple(KL_ESTIMATORS))
        _choice("algo.filter_mode", self.filter_mode, FILTER_MODES)
        if self.advantage == "gae" and not self.critic:
            raise ValueError("algo.advantage=gae needs a critic: set algo.critic=true or use grpo")
        if not 0 < self.filter_keep <= 1:
            raise ValueError(f"algo.filter_keep must be in (0, 1], got {self.filter_keep}")
        if self.clip_low < 0 or self.clip_high < 0:
            raise ValueError("algo.clip_low and algo.clip_high must be >= 0")

    @property
    def label(self) -> str:
        """The preset's name, plus the estimator when it is not the preset's (e.g. starpo-s+grpo):
        a run folder never names one algorithm while the run used another estimator."""
        usual = ALGO_PRESETS[self.name]["advantage"]
        return self.name if self.advantage == usual else f"{self.name}+{self.advantage}"


#: Every preset sets exactly these fields: the ones that tell the algorithms apart.
PRESET_FIELDS = ("advantage", "objective", "critic", "kl_coef", "kl_in_reward", "clip_high", "filter_keep")
ALGO_PRESETS: dict[str, dict] = {
    # Vanilla StarPO with a critic: KL 0.001 (k1) in the reward, symmetric clip 0.2, no filter.
    "starpo-ppo": {
        "advantage": "gae",
        "objective": "ppo-clip",
        "critic": True,
        "kl_coef": 0.001,
        "kl_in_reward": True,
        "clip_high": 0.2,
        "filter_keep": 1.0,
    },
    # GRPO: group mean/std-normalised trajectory reward, KL 0.001 as a loss term, no critic.
    "starpo-grpo": {
        "advantage": "grpo",
        "objective": "ppo-clip",
        "critic": False,
        "kl_coef": 0.001,
        "kl_in_reward": False,
        "clip_high": 0.2,
        "filter_keep": 1.0,
    },
    # StarPO-S: keep the top 25% of groups by reward std, no KL, clip-higher, critic kept.
    "starpo-s": {
        "advantage": "gae",
        "objective": "ppo-clip",
        "critic": True,
        "kl_coef": 0.0,
        "kl_in_reward": True,
        "clip_high": 0.28,
        "filter_keep": 0.25,
    },
    # A*-PO as released: no critic, no KL, no clipping (the regression loss has no ratio), no filter.
    "apo": {
        "advantage": "apo",
        "objective": "apo",
        "critic": False,
        "kl_coef": 0.0,
        "kl_in_reward": True,
        "clip_high": 0.2,
        "filter_keep": 1.0,
    },
}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200
    """Rollout–update iterations (RAGEN: 200)."""
    groups: int = 8
    """P: initial states per step (a group shares its seed)."""
    group_size: int = 16
    """N: rollouts per initial state. A*-PO uses one sample per state in stage 2."""
    mini_batch_size: int = 32
    """Episodes per optimizer step."""
    micro_batch_size: int = 8
    """Episodes per forward/backward (gradient accumulation inside a mini-batch)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    rollout_reuse: int = 1
    """Updates per rollout batch (the freshness study: 1, 2, 5, 10)."""
    actor_lr: float = 1e-6
    critic_lr: float = 1e-5
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    """Max global grad norm; a non-finite norm skips the optimizer step (counted)."""
    seed: int = 0
    """Seeds initial states, sampling and the filter; a resumed run replays the same numbers."""
    val_every: int = 10
    """Validate every k steps (and at the last step); 0 disables."""
    val_size: int = 256
    """Fixed validation initial states (RAGEN: 256)."""
    val_temperature: float = 0.5
    checkpoint_every: int = 10
    samples_every: int = 10
    """Write full trajectories to samples.jsonl every k steps (the echo-trap tables)."""
    samples_per_step: int = 4
    warmup: str = "none"
    """Format warm-up before RL: none | self (rejection-sample own valid answers) | expert (BC on the
    env's scripted expert) | format (BC on well-formed answers with uniformly random valid actions:
    teaches the format and nothing about the task, so RL's gains are the task's)."""
    warmup_steps: int = 10
    warmup_lr: float = 3e-5
    """10 × 3e-5 measured with the embedded model (format): format-valid 0 → 1.00 on Bandit and
    0.78 on Sokoban; 6 × 1e-5 left Bandit at 0.00; 10 × 1e-4 biased Bandit's arm choice."""
    warmup_episodes: int = 64
    """Expert episodes (expert) or sampled prompts per round (self) used by the warm-up."""

    def __post_init__(self):
        _choice("train.warmup", self.warmup, ("none", "self", "expert", "format"))
        for name in (
            "steps",
            "groups",
            "group_size",
            "mini_batch_size",
            "micro_batch_size",
            "ppo_epochs",
            "rollout_reuse",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        # Checks across sections: a bad combination fails here, before any model loads.
        t, a = self.train, self.algo
        if a.advantage == "apo" and a.filter_keep < 1:
            raise ValueError("A*-PO samples one answer per state; the group filter needs algo.filter_keep=1")
        if a.advantage == "apo" and t.groups * t.group_size > a.apo_prompt_pool:
            raise ValueError(
                f"A*-PO draws train.groups×group_size = {t.groups * t.group_size} distinct states "
                f"per step from a pool of algo.apo_prompt_pool={a.apo_prompt_pool}; raise it"
            )
        world = world_size()
        if t.groups % world:
            raise ValueError(
                f"train.groups={t.groups} is not divisible by the {world} processes: each process "
                "plays whole groups (the group statistics stay on one process)"
            )

    def to_dict(self) -> dict:
        return _plain(asdict(self))

    def hash(self) -> str:
        """Stable across processes and machines: sha256 of the canonical JSON, 12 hex chars."""
        return dict_hash(self.to_dict())

    def slug(self) -> str:
        """A readable run name: <algorithm>_<env>_s<seed> (the hash makes a folder unique)."""
        return f"{self.algo.label}_{self.env.name}_s{self.train.seed}"


def dict_hash(d: dict) -> str:
    """The config hash of a plain config dict (what `Config.to_dict` gives and config.yaml holds)."""
    text = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


SECTIONS = {
    "model": ModelConfig,
    "env": EnvConfig,
    "rollout": RolloutConfig,
    "algo": AlgoConfig,
    "train": TrainConfig,
}


def from_dict(d: dict | None = None, overrides: dict | list[str] | None = None) -> Config:
    """Build a Config from nested dicts plus dotted overrides ({"algo.clip_high": 0.28} or
    ["algo.clip_high=0.28"]). Unknown sections or keys raise ValueError listing the valid ones.
    The algo preset fills only the algo fields that neither `d` nor `overrides` set (AlgoConfig)."""
    d = copy.deepcopy(d or {})
    for key, value in _parse_overrides(overrides).items():
        section, _, leaf = key.partition(".")
        if not leaf:
            raise ValueError(f"override {key!r} must look like section.field, e.g. algo.clip_high")
        _check_keys("", {section: None}, SECTIONS)
        d.setdefault(section, {})
        if not isinstance(d[section], dict):
            raise ValueError(f"config section {section!r} must be a mapping")
        d[section][leaf] = value
    _check_keys("", d, SECTIONS)
    parts = {}
    for section, cls in SECTIONS.items():
        given = dict(d.get(section) or {})
        names = {f.name: f for f in fields(cls)}
        _check_keys(section + ".", given, names)
        parts[section] = cls(**{k: _coerce(section, names[k], v) for k, v in given.items()})
    return Config(**parts)


def load(path: str | Path, overrides: dict | list[str] | None = None) -> Config:
    """Read a YAML config (sections model/env/rollout/algo/train) and apply dotted overrides."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a mapping of sections {list(SECTIONS)}")
    return from_dict(data, overrides)


def save(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


# --- helpers ------------------------------------------------------------------------------------
def _choice(name: str, value, valid: tuple) -> None:
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not valid; choose one of: {', '.join(map(str, valid))}")


def _check_keys(prefix: str, given: dict, valid) -> None:
    unknown = sorted(set(given) - set(valid))
    if unknown:
        close = {u: difflib.get_close_matches(u, list(valid), n=1) for u in unknown}
        hints = "; ".join(
            f"{prefix}{u}" + (f" (did you mean {prefix}{c[0]}?)" if c else "") for u, c in close.items()
        )
        raise ValueError(
            f"unknown config key(s): {hints}. Valid keys: {', '.join(prefix + k for k in valid)}"
        )


def _parse_overrides(overrides) -> dict:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} must look like key=value, e.g. algo.clip_high=0.28")
        out[key.strip()] = yaml.safe_load(text)  # "0.28" -> float, "true" -> bool, "[a, b]" -> list
    return out


def _coerce(section: str, f, value):
    """YAML gives lists where the dataclass wants tuples, ints where it wants floats, and strings
    for exponents without a dot ("3e-5": YAML 1.1 reads it as text, so --set lr=3e-5 would too)."""
    if isinstance(value, list):
        return tuple(value)
    kind = str(f.type).removesuffix(" | None")
    if kind not in ("float", "int") or value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return float(value) if kind == "float" else int(value)
        except ValueError:
            raise ValueError(
                f"{section}.{f.name} must be {'a number' if kind == 'float' else 'an integer'}, got {value!r}"
            ) from None
    if isinstance(value, int) and kind == "float":
        return float(value)
    return value


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
