"""Run configuration: frozen dataclasses, one per concern, each field documented where declared.

`from_dict` / `load` build a `Config` from YAML plus dotted overrides; `Config.hash()` names runs.
Every value is checked when its dataclass is built, before any model loads: exact types (an int
field takes no float or bool, a list field no text), ranges (`RANGES`), finite floats, names of
envs and built-in models; YAML is read strictly (`read_yaml`: a key given twice is an error, and
every error names the file and line).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from ragen_lib import envs
from ragen_lib.algorithms import (
    ADVANTAGE_ESTIMATORS,
    CRITIC_ESTIMATORS,
    FILTER_MODES,
    KL_ESTIMATORS,
    KL_REWARD_ESTIMATORS,
    POLICY_OBJECTIVES,
)
from ragen_lib.attention import DECODE_KERNELS, require_flex
from ragen_lib.distributed import world_size
from ragen_lib.models import BUILTIN_MODELS, MODEL_ENV, default_model
from ragen_lib.models import DTYPES as MODEL_DTYPES

KV_CACHES = ("dynamic", "static")
"""The decoding caches `generation.generate` knows (rollout.kv_cache)."""


BATCHINGS = ("turn", "continuous")
"""How a rollout batches its episodes' decoding (rollout.batching)."""
MINIBATCH_ORDERS = ("shuffled", "in-order")
LOSS_AGGS = ("token-mean", "micro-batch-mean")


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played out. None means "the env's own default" (RAGEN's settings)."""

    max_turns: int | None = None
    """Model responses per episode. RAGEN (`agent_proxy.max_turn`): 5 (Bandit: 1)."""
    max_actions_per_turn: int | None = None
    """Actions parsed from one answer (split on `||`). RAGEN (`agent_proxy.max_actions_per_turn`): 5
    (Bandit: 1). Ours: the env's; WebShop-lite takes 1, as the A*-PO report's env does (RAGEN's
    real WebShop: 5; docs/FIDELITY.md E15)."""
    max_actions_per_episode: int | None = None
    """Actions per trajectory. RAGEN (`custom_envs.<env>.max_actions_per_traj`): 10 for Sokoban and
    FrozenLake."""
    max_new_tokens: int | None = None
    """New tokens per turn. None: the env's (RAGEN: 400; Bandit 500)."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts; 0 is greedy. RAGEN validates at 0.5."""
    stop_at_answer: bool = True
    """End a turn's generation at `</answer>` rather than running to EOS or the token limit; in think
    mode at the first one written after `</think>` (one the reasoning quotes does not end it)."""
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
    length, one CUDA graph per decode step on a GPU). Same tokens; a speed choice (issue #5).
    "dynamic" by default, for the CPU, where nothing is graphed and static's padding is pure cost;
    the GPU profiles (quick, paper) set "static": `gpu-check` on an H200 and an H100 decoded 8 × 32
    tokens in 0.17-0.19 s against 3.8-5.1 s, with identical log-probs. With
    `batching: continuous`, "static" runs each decode step at fixed shapes (rows rounded up to a
    power of two, every cache column), one CUDA graph per row count on a GPU."""

    keep_kv: bool = True
    """Keep each episode's KV cache from turn to turn, so a turn prefills only the env's reply
    (the same numbers up to float rounding). False re-prefills the whole conversation every turn,
    as before issue #17: for comparison and `make bench`'s before/after."""

    batching: str = "turn"
    """How a rollout's episodes share the decode batch. "turn": every live episode plays its turn
    in one `generate` call, which decodes until the turn's slowest answer ends, then all step
    their envs. "continuous": one decode loop for the whole rollout (`engine.play`); an episode
    whose answer ends steps its env at once and starts its next turn while the others decode,
    and a finished episode leaves the batch. The same episodes in distribution (the samples drawn
    differ); `keep_kv` applies to "turn" only (continuous batching always keeps the cache).
    "turn" by default until "continuous" is measured on a GPU (`make bench`)."""

    decode_attention: str = "sdpa"
    """The attention kernel of a decode step (`attention.DECODE_KERNELS`). "sdpa" reads every
    cache column the step is given, masked or not (up to the longest row's, rounded up to a
    bucket); "flex" (FlexAttention, compiled once per cache shape) reads each row's own columns,
    in blocks of 128. The same attention; needs `kv_cache: static` (fixed shapes). "sdpa" by
    default until a GPU run of `make bench` times both."""

    def __post_init__(self):
        _check_fields("rollout", self)
        if self.max_new_tokens is not None and self.max_new_tokens >= self.max_context_tokens:
            raise ValueError(
                f"rollout.max_new_tokens={self.max_new_tokens} leaves no room for the prompt in "
                f"rollout.max_context_tokens={self.max_context_tokens}: every episode would end "
                "before its first turn. Raise max_context_tokens or lower max_new_tokens"
            )
        _choice("rollout.kv_cache", self.kv_cache, KV_CACHES)
        _choice("rollout.batching", self.batching, BATCHINGS)
        _choice("rollout.decode_attention", self.decode_attention, DECODE_KERNELS)
        if self.decode_attention == "flex":
            if self.kv_cache != "static":
                raise ValueError(
                    f"rollout.decode_attention=flex compiles FlexAttention once per cache shape, and with "
                    f"rollout.kv_cache={self.kv_cache} the shape changes at every decode step: set "
                    "rollout.kv_cache=static, or rollout.decode_attention=sdpa"
                )
            require_flex()

    def limits(self, env: envs.TextEnv | type[envs.TextEnv]) -> envs.Limits:
        """This config's budgets for episodes of `env` (an env or its class): each `rollout.*` limit
        where set, the env's default where None (`TextEnv.limits`)."""
        return env.limits(**{k: getattr(self, k) for k in envs.LIMITS})


# --------------------------------------------------------------------------------------------
# The training configuration. One dataclass per concern; `Config` holds them and is what a run
# saves, hashes and reloads. The algorithm's name selects a preset (ALGO_PRESETS) that fills the
# fields the YAML does not set, so "starpo-s" means the paper's StarPO-S without spelling it out.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    name: str | None = None
    """"smollm2-135m-instruct" (embedded), "tiny-random", a .gguf path, a folder or a hub id.
    Left out (None): RAGEN_MODEL if set, else the embedded model; the config records which, so a
    run's config.yaml and folder hash name the model that trained (another model: another run).
    A relative path is kept as written, not made absolute: the hash names the same folder on every
    machine a store is copied to. What the name loaded is the run's recorded fingerprint
    (`models.fingerprint`): other weights under the name (another working folder, a folder written
    over) train the run again (`runs.other_weights`)."""
    device: str | None = None
    """None: cuda when available, else cpu."""
    dtype: str = "auto"
    """Compute dtype of every forward: auto (bfloat16 autocast on CUDA, float32 on CPU) | float32 |
    bfloat16. Weights and optimizer states stay float32 whatever this says (`models` docstring)."""

    def __post_init__(self):
        if self.name is None:
            object.__setattr__(self, "name", default_model())
        _check_fields("model", self)
        _choice("model.dtype", self.dtype, MODEL_DTYPES)
        check_model_name(self.name)
        if self.device is not None:
            import torch

            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(
                    f"model.device={self.device!r} is not a device; use cpu, cuda or cuda:N"
                ) from None


@dataclass(frozen=True)
class EnvConfig:
    name: str = "bandit"
    """A registered env (see `ragen_lib.envs.REGISTRY`)."""
    kwargs: dict = field(default_factory=dict)
    """Field overrides passed to `envs.make(name, **kwargs)`."""
    eval_envs: tuple[str, ...] = ()
    """Extra envs validated alongside the training env (generalisation, e.g. bandit-rev)."""

    def __post_init__(self):
        _check_fields("env", self)
        for key, name in [("env.name", self.name)] + [("env.eval_envs", n) for n in self.eval_envs]:
            if name not in envs.REGISTRY:
                raise ValueError(
                    f"{key}: unknown env {name!r}{did_you_mean(name, envs.REGISTRY)}; valid envs: "
                    f"{', '.join(sorted(envs.REGISTRY))}"
                )
        seen = set()  # each env is validated once, under its own metric names
        for name in self.eval_envs:
            if name == self.name:
                raise ValueError(
                    f"env.eval_envs: {name!r} is the training env, validated already (val/<quantity>; "
                    "a second pass would overwrite it): list only the other envs"
                )
            if name in seen:
                raise ValueError(
                    f"env.eval_envs: {name!r} is listed twice (its val/<quantity>/{name} metrics "
                    "would be computed twice): list each env once"
                )
            seen.add(name)
        fields = envs.env_fields(self.name)
        _check_keys("env.kwargs.", self.kwargs, fields, f"field(s) of env {self.name!r}")
        # An exponent without a dot ("5e-1") is text to YAML 1.1, as for the dataclass fields
        # (`_coerce`): a number where the env's default is one, so both spellings hash alike. An
        # int where the default is a float is that float, as for the dataclass's float fields:
        # high_risk_p 1 and 1.0 hashed apart, so a grid trained the same run twice.
        converted = {}
        for key, value in self.kwargs.items():
            if isinstance(fields[key], float) and isinstance(value, int) and not isinstance(value, bool):
                converted[key] = float(value)
                continue
            if not (isinstance(value, str) and _is_number_field(fields[key])):
                continue
            try:
                number = float(value)
            except ValueError:
                continue  # left for the kind check below, which names the field
            if math.isfinite(number):  # nan, inf: refused as the dataclass fields refuse them (below)
                is_int = isinstance(fields[key], int) and number.is_integer()
                converted[key] = int(number) if is_int else number
        if converted:
            object.__setattr__(self, "kwargs", {**self.kwargs, **converted})
        for key, value in self.kwargs.items():  # else the env's own checks fail on the type, obscurely
            want = _wrong_kind(value, fields[key])
            if want is not None:
                got = type(value).__name__
                got = f"{'an' if got[0] in 'aeiou' else 'a'} {got}"
                raise ValueError(
                    f"env.kwargs.{key}: {value!r} is {got}; env {self.name!r} takes {want} there "
                    f"(default {fields[key]!r})"
                )
        try:
            envs.make(self.name, **self.kwargs)  # the env's own checks, here rather than mid-rollout
        except (TypeError, ValueError) as e:
            raise ValueError(f"env.kwargs {self.kwargs!r} rejected by env {self.name!r}: {e}") from None
        # One expert step of each env a run plays: a new env's broken contract (a seed it ignores,
        # an info without "success") would otherwise train and report wrong numbers without a word.
        envs.check(self.name, **self.kwargs)
        for name in self.eval_envs:
            envs.check(name)


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
    loss_mask: str | None = None
    """Which tokens the update covers (policy loss, advantage whitening, entropy, KL, critic):
    "paper": every token after the system turn, observations included, as RAGEN's paper runs
    (`enable_response_mask: False` at 385bc30); "response": only the tokens the model generated
    (RAGEN's later default; A*-PO's log-ratio). None: the preset's."""
    gamma: float = 1.0
    """GAE discount over the loss-mask tokens (`loss_mask`; RAGEN: 1)."""
    lam: float = 1.0
    """GAE lambda over the loss-mask tokens (RAGEN: 1)."""
    grpo_scale: bool = True
    """GRPO: divide by the group std (True) or only subtract the group mean (False)."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (eps_low)."""
    clip_high: float | None = None
    """PPO ratio clip above 1 (eps_high); StarPO-S "clip-higher": 0.28. None: the preset's."""
    value_clip: float = 0.5
    """Clip of the critic's update around its old value."""
    kl_coef: float | None = None
    """KL to the reference policy; 0 removes it (StarPO-S; KL is still logged as policy/kl_ref unless
    train.log_kl_ref is off). None: the preset's."""
    kl_estimator: str = "k1"
    """k1 | k2 | k3 (Schulman's estimators)."""
    kl_in_reward: bool | None = None
    """True: -kl_coef·KL is a per-token reward (PPO), which only gae reads (`KL_REWARD_ESTIMATORS`;
    with another estimator and kl_coef > 0 it is a config error). False: a loss term (GRPO). None:
    the preset's."""
    entropy_coef: float = 0.001
    """Entropy bonus over the loss-mask tokens (`loss_mask`: with "paper", observations too, as
    RAGEN's paper runs)."""
    filter_keep: float | None = None
    """Uncertainty filter: fraction of groups kept by the std of their raw rewards (StarPO-S: 0.25;
    RAGEN: `actor_rollout_ref.rollout.rollout_filter_ratio`). None: the preset's."""
    filter_mode: str = "top"
    """top (highest std, StarPO-S; RAGEN's `rollout_filter_type: std`) | bottom (its `std_rev`) |
    random (ours: a control)."""
    reasoning_lambda: float = 0.0
    """Weight of the reasoning–action consistency bonus: A = z(env) + λ·z(reasoning) (report: 0.4)."""
    apo_beta1: float = 0.5
    """A*-PO stage 1 temperature: V* = β1·(logsumexp(r/β1) − ln N)."""
    apo_beta2: float = 1e-3
    """A*-PO stage 2 scale of the log-ratio regressed onto r − V*."""
    apo_ref_samples: int = 8
    """A*-PO stage 1: reference samples per initial state."""
    apo_prompt_pool: int | None = None
    """A*-PO: the fixed set of training initial states whose V* is estimated offline. None:
    train.steps × train.groups, as many distinct states as StarPO sees over the run (A*-PO's stage 1
    covers its whole training set), and at least the groups × group_size states one step draws
    (`Config.apo_pool_size`); stage 1's cost grows with it and is logged as time/v_star."""
    apo_reward_scale: str = "range"
    """How A*-PO's β1 and β2 (set for 0/1 rewards) meet multi-turn returns: "range" divides every
    reward A*-PO sees (stage 1 and 2) by the spread of stage 1's reference rewards (max − min over
    the pool), so returns span about [0, 1] as in A*-PO's setting; "none" uses the raw returns."""
    apo_refresh_every: int = 0
    """Re-estimate V* with the current policy every K steps (0: never, as released)."""
    apo_adaptive: bool = False
    """Spend stage-1 samples preferentially on high-variance states (StarPO-S's filter idea)."""

    def __post_init__(self):
        _choice("algo.name", self.name, tuple(ALGO_PRESETS))
        for key, value in ALGO_PRESETS[self.name].items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)  # frozen: resolved once, at construction
        _check_fields("algo", self)
        _choice("algo.advantage", self.advantage, tuple(ADVANTAGE_ESTIMATORS))
        _choice("algo.objective", self.objective, tuple(POLICY_OBJECTIVES))
        _choice("algo.kl_estimator", self.kl_estimator, tuple(KL_ESTIMATORS))
        _choice("algo.filter_mode", self.filter_mode, FILTER_MODES)
        _choice("algo.loss_mask", self.loss_mask, LOSS_MASKS)
        _choice("algo.apo_reward_scale", self.apo_reward_scale, ("range", "none"))
        if self.advantage in CRITIC_ESTIMATORS and not self.critic:
            raise ValueError(
                f"algo.advantage={self.advantage} needs a critic: set algo.critic=true or use grpo"
            )
        if self.kl_coef > 0 and self.kl_in_reward and self.advantage not in KL_REWARD_ESTIMATORS:
            # The KL reward is a per-token reward; an estimator built on the trajectory reward alone
            # never reads it, so the run would log policy/kl_ref with no KL acting.
            raise ValueError(
                f"algo.kl_in_reward=true with algo.advantage={self.advantage}: only "
                f"{'/'.join(KL_REWARD_ESTIMATORS)} reads a per-token KL reward, so algo.kl_coef="
                f"{self.kl_coef} would act nowhere. Set algo.kl_in_reward=false (a KL loss term, as "
                "starpo-grpo) or algo.kl_coef=0"
            )
        if self.objective == "apo" and self.advantage != "apo":
            # The apo objective regresses β2·log-ratio onto r − V*, reading V* from the apo
            # estimator's unmasked target; grpo and gae mask their advantages, so it would read 0
            # and train on nothing but the pull back to the reference.
            raise ValueError(
                f"algo.objective=apo with algo.advantage={self.advantage}: the A*-PO regression needs "
                "the apo estimator's V* targets. Set algo.advantage=apo (algo.name=apo has both)"
            )
        if self.objective == "apo" and self.loss_mask != "response":
            # A*-PO's log π/π_ref is a sum over the policy's own answer tokens (A-PO c8823a3,
            # verl/trainer/apo/core_algos.py:166-168); over the paper mask it would add the
            # prompt's and the observations' log-probs, which no answer chose.
            raise ValueError(
                f"algo.objective=apo with algo.loss_mask={self.loss_mask}: A*-PO's log-ratio sums the "
                "answer tokens only. Set algo.loss_mask=response (algo.name=apo's own)"
            )
        if self.critic and self.advantage not in CRITIC_ESTIMATORS:
            # Only GAE reads the values; a critic beside grpo or apo costs a model copy and its
            # updates for nothing (verl turns it off for GRPO: ray_trainer.py:283-289).
            raise ValueError(
                f"algo.critic=true with algo.advantage={self.advantage}: only "
                f"{'/'.join(CRITIC_ESTIMATORS)} uses a critic, so it "
                f"would train a value model nothing reads. Add algo.critic=false (e.g. StarPO-S with GRPO, "
                f"RAGEN's sokoban-s-grpo: algo.name=starpo-s algo.advantage=grpo algo.critic=false)"
            )

    @property
    def label(self) -> str:
        """The preset's name, plus the estimator and the objective where they are not the preset's
        (e.g. starpo-s+grpo): a run folder never names one algorithm while the run used another."""
        preset = ALGO_PRESETS[self.name]
        other = [getattr(self, k) for k in ("advantage", "objective") if getattr(self, k) != preset[k]]
        return "+".join([self.name, *other])


#: Every preset sets exactly these fields: the ones that tell the algorithms apart.
PRESET_FIELDS = (
    "advantage", "objective", "critic", "loss_mask", "kl_coef", "kl_in_reward", "clip_high", "filter_keep",
)  # fmt: skip
LOSS_MASKS = ("paper", "response")
ALGO_PRESETS: dict[str, dict] = {
    # Vanilla StarPO with a critic: KL 0.001 (k1) in the reward, symmetric clip 0.2, no filter.
    "starpo-ppo": {
        "advantage": "gae",
        "objective": "ppo-clip",
        "critic": True,
        "loss_mask": "paper",
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
        "loss_mask": "paper",
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
        "loss_mask": "paper",
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
        "loss_mask": "response",
        "kl_coef": 0.0,
        "kl_in_reward": True,
        "clip_high": 0.2,
        "filter_keep": 1.0,
    },
}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200
    """Updates (RAGEN: `trainer.total_training_steps`, 200): a rollout feeds online_k of them."""
    groups: int = 8
    """P: initial states per step (a group shares its seed; RAGEN: `es_manager.train.env_groups`)."""
    group_size: int = 16
    """N: rollouts per initial state (RAGEN: `es_manager.train.group_size`). A*-PO uses one sample per
    state in stage 2."""
    mini_batch_size: int = 32
    """Episodes per optimizer step (RAGEN: 32, counted after the filter, so vanilla StarPO's 128
    episodes take 4 steps and StarPO-S's 32 kept ones take 1)."""
    mini_batches: int | None = None
    """When set, the kept batch is split into mini-batches of ceil(kept / (this × online_k))
    episodes whatever its size, instead of `mini_batch_size`: a filtered and an unfiltered run then
    both take several optimizer steps per batch, so PPO's clip acts in both. That is this many
    steps where the kept episodes divide evenly (every shipped profile), fewer where they do not
    (6 kept in 4: mini-batches of 2, 3 steps), as verl splits by a size."""
    micro_batch_size: int = 8
    """Episodes per forward/backward (gradient accumulation inside a mini-batch)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    online_k: int = 1
    """RAGEN's freshness study (online-k, Fig. 10): each rollout plays online_k × groups initial
    states and the update takes online_k × as many optimizer steps from it, each on other groups,
    with old log-probs from the behaviour policy. To keep the optimizer steps and episodes of k = 1,
    a run plays steps / online_k rollouts, logged at steps 0, k, 2k, …; where steps is not a
    multiple of k, the last rollout feeds only the updates left (`rollout_updates`)."""
    actor_lr: float = 1e-6
    """Policy learning rate, AdamW (RAGEN: 1e-6)."""
    critic_lr: float = 1e-5
    """Critic learning rate, AdamW (RAGEN: 1e-5)."""
    weight_decay: float = 0.01
    """AdamW weight decay of the policy and the critic (RAGEN/verl: 0.01; the warm-up uses 0)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas of the policy and the critic."""
    grad_clip: float = 1.0
    """Max global grad norm; a non-finite norm skips the optimizer step (counted)."""
    seed: int = 0
    """Seeds initial states, sampling and the filter; a resumed run replays the same numbers."""
    val_every: int = 10
    """Validate every k updates (and the final policy); 0 disables. With online_k, at the first
    logged step at or past each multiple (`crosses`)."""
    val_size: int = 256
    """Fixed validation initial states (RAGEN: 256)."""
    val_temperature: float = 0.5
    """Sampling temperature of validation rollouts (RAGEN: 0.5)."""
    checkpoint_every: int = 10
    """Write a checkpoint every k updates (the last step writes DONE instead); a crash redoes at
    most k updates."""
    samples_every: int = 10
    """Write full trajectories to samples.jsonl every k updates, as val_every counts (the echo-trap
    tables)."""
    samples_per_step: int = 4
    """Trajectories written to samples.jsonl at each `samples_every` step (transcripts to read, not
    N: that is `group_size`)."""
    warmup: str = "none"
    """Format warm-up before RL: none | self (rejection-sample own valid answers) | expert (BC on the
    env's scripted expert) | format (BC on well-formed answers with uniformly random valid actions:
    teaches the format and nothing about the task, so RL's gains are the task's)."""
    warmup_steps: int = 10
    """Optimizer steps of the warm-up: expert and format take each on mini_batch_size answers drawn
    from their set, self one per round on that round's valid answers; micro-batches of
    micro_batch_size. 0 trains nothing."""
    warmup_lr: float = 3e-5
    """10 × 3e-5 measured with the embedded model (format): format-valid 0 → 1.00 on Bandit and
    0.78 on Sokoban; 6 × 1e-5 left Bandit at 0.00; 10 × 1e-4 biased Bandit's arm choice."""
    warmup_episodes: int = 64
    """Episodes the warm-up draws its batches from: expert episodes (expert), well-formed answers
    (format) or sampled prompts per round (self)."""
    max_skipped_frac: float = 0.25
    """Stop with an error (the run stays resumable) once more than this fraction of the optimizer
    steps so far skipped a non-finite gradient (policy or critic); a single skipped step never stops
    a run, and 1 turns the check off. A diverged run must not be marked finished."""
    keep_final_weights: bool = False
    """Keep the policy (and critic) weights of a finished run in `final_weights.pt`. Off: a finished
    run keeps only its metrics and samples (checkpoints and optimizer states are dropped)."""
    micro_batch_tokens: int = 0
    """Token budget of a micro-batch (rows × its longest row): the rows of a mini-batch are sorted
    by length and packed up to it, so short rows share a forward and little padding is computed.
    0: micro_batch_size × the batch's longest row (never more than unsorted micro-batches cost).
    The gradient does not depend on the packing (each micro-batch is weighted by its share)."""
    minibatch_order: str = "shuffled"
    """How a kept batch is cut into mini-batches: "shuffled" (a fresh permutation every pass) or
    "in-order" (RAGEN/verl: `batch.split(ppo_mini_batch_size)`, no shuffle, so a mini-batch of 32
    holds two whole groups of 16; dp_actor.py:271, 288)."""
    loss_agg: str = "token-mean"
    """How a mini-batch's token losses are averaged: "token-mean" (every loss token of the
    mini-batch weighs the same; micro-batches are packed by length) or "micro-batch-mean" (RAGEN/
    verl: each micro-batch of `micro_batch_size` episodes, in order, takes its own token mean, and
    the mini-batch loss is their mean, gradient accumulation / n; dp_actor.py:286-288, 338). Policy
    loss, KL and entropy terms and the value loss alike."""
    shared_prefix: bool = True
    """Forward the tokens every row of a micro-batch shares (the system prompt and instructions; a
    group's whole first prompt) once, with gradients, and repeat its keys and values to the rows.
    The same loss and gradients (tests/test_lean_update.py: float64, 1e-8); off: every row forwards
    its whole sequence."""
    log_kl_ref: bool = True
    """Run the reference forward every step to log `policy/kl_ref` even when no loss or reward uses
    it (algo.kl_coef 0). Off: that forward is skipped and the metric is NaN; a run whose KL term is
    on computes it regardless. `make bench` turns it off for the TRL comparison (TRL's beta=0 has no
    reference model)."""

    def __post_init__(self):
        _check_fields("train", self)
        _choice("train.warmup", self.warmup, ("none", "self", "expert", "format"))
        _choice("train.minibatch_order", self.minibatch_order, MINIBATCH_ORDERS)
        _choice("train.loss_agg", self.loss_agg, LOSS_AGGS)
        episodes = self.groups * self.group_size
        if self.mini_batches is not None and self.mini_batches > episodes:
            raise ValueError(
                f"train.mini_batches={self.mini_batches} is more than the {episodes} episodes a rollout "
                f"plays (train.groups × group_size): the update would take at most {episodes} steps of "
                "one episode. Set train.mini_batches <= that, or leave it unset for mini_batch_size"
            )
        if self.warmup != "none" and self.warmup_steps == 0:
            raise ValueError(
                f"train.warmup={self.warmup} with train.warmup_steps=0 trains nothing (the run would "
                "say it warmed up): set train.warmup_steps >= 1, or train.warmup=none"
            )

    @property
    def logged_steps(self) -> range:
        """The steps a finished run has logged: 0 … steps − 1, every online_k-th (one per rollout)."""
        return range(0, self.steps, self.online_k)

    def rollout_updates(self, step: int) -> int:
        """The updates the rollout of logged step `step` feeds: online_k, or the ones left before
        `steps` (3 steps at online_k 2: 2, then 1). Until 2026-11-28 the last rollout fed
        online_k whatever was left, so online-10 in a 3-step run trained 10 updates' worth."""
        return min(self.online_k, self.steps - step)

    def due(self, step: int, every: int) -> bool:
        """Whether logged step `step` validates or writes samples: its rollout's updates since the
        previous logged step passed a multiple of `every` (step 0 always, unless every is 0)."""
        return self.crosses(step - self.online_k, step, every)

    @staticmethod
    def crosses(before: int, after: int, every: int) -> bool:
        """Whether the updates from `before` to `after` reach a multiple of `every` (0: never): a
        logged step validates, writes samples or a checkpoint when its stride of online_k updates
        passes one. Testing `step % every` on logged steps 0, k, 2k, … met only multiples of
        lcm(k, every): online-2 validated every 10 updates where val_every said 5."""
        return bool(every) and after // every != before // every


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        # Checks across sections: a bad combination fails here, before any model loads.
        t, a, r = self.train, self.algo, self.rollout
        if r.max_new_tokens is None:
            # the env's own budget (Bandit 500, others 400): RolloutConfig checked only a given one,
            # so the default failed in the rollout, after the model loaded
            for name in dict.fromkeys((self.env.name, *self.env.eval_envs)):
                budget = envs.env_class(name).max_new_tokens
                if budget >= r.max_context_tokens:
                    raise ValueError(
                        f"{name}'s default of {budget} new tokens a turn (rollout.max_new_tokens unset) "
                        f"leaves no room for the prompt in rollout.max_context_tokens="
                        f"{r.max_context_tokens}. Raise max_context_tokens or set rollout.max_new_tokens"
                    )
        if r.temperature not in (0.0, 1.0):
            # The recorded, old and new log-probs are all the model's at temperature 1 (verl
            # divides the logits by T in each: FIDELITY D27); sampling at another T would make the
            # PPO ratio's old policy differ from the one that sampled, off-policy without a word.
            raise ValueError(
                f"rollout.temperature={r.temperature}: training rollouts sample at 1 (the paper's), "
                "or at 0 (greedy, for deterministic checks): the trainer's log-probs are the model's at "
                "temperature 1, so another temperature would train off-policy. Validation's is "
                "train.val_temperature"
            )
        if a.advantage == "apo" and t.online_k > 1:
            # stage 2 draws groups × group_size states a rollout, not online_k × as many, so A*-PO
            # would play 1/k of the episodes and take 1/k of the optimizer steps of its k = 1 run
            raise ValueError(
                f"train.online_k={t.online_k} with A*-PO: its states are drawn per rollout without "
                "the online-k multiple (the freshness study runs StarPO-S). Set train.online_k=1"
            )
        if a.advantage == "apo" and a.apo_adaptive and a.apo_ref_samples < 3:
            # half the budget, at least 2 a state (a spread to see), goes uniformly first
            raise ValueError(
                f"algo.apo_adaptive=true with algo.apo_ref_samples={a.apo_ref_samples}: the adaptive "
                "V* estimate spends half its samples, at least 2 a state, uniformly and the rest on the "
                "states whose rewards vary, so it needs apo_ref_samples >= 3. Raise it, or set "
                "algo.apo_adaptive=false"
            )
        if a.advantage == "apo" and a.filter_keep < 1:
            raise ValueError("A*-PO samples one answer per state; the group filter needs algo.filter_keep=1")
        if (
            a.advantage == "apo"
            and a.apo_prompt_pool is not None
            and t.groups * t.group_size > a.apo_prompt_pool
        ):
            raise ValueError(
                f"A*-PO draws train.groups×group_size = {t.groups * t.group_size} distinct states "
                f"per step from a pool of algo.apo_prompt_pool={a.apo_prompt_pool}; raise it"
            )
        if a.advantage == "grpo" and t.group_size < 2:
            raise ValueError(
                "algo.advantage=grpo normalises each reward within its group: with train.group_size=1 "
                "every advantage is 0 and nothing is learned. Set train.group_size >= 2, or use gae"
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

    @property
    def apo_pool_size(self) -> int:
        """algo.apo_prompt_pool, or as many states as StarPO sees over the run (steps × groups), and at
        least the P·N distinct states one step draws."""
        t = self.train
        return self.algo.apo_prompt_pool or max(t.steps * t.groups, t.groups * t.group_size)

    def slug(self) -> str:
        """A readable run name: <algorithm>_<env>_s<seed> (the hash makes a folder unique)."""
        return f"{self.algo.label}_{self.env.name}_s{self.train.seed}"


#: Fields added after runs were stored, with the value they had implicitly before: left out of the
#: hash while at that value, so run folders made before the field existed keep their names and are
#: reused. A new field whose default keeps the old behaviour goes here; one that changes training
#: does not (its runs are new runs).
HASH_NEUTRAL: dict[str, object] = {
    "train.max_skipped_frac": 0.25,
    "train.keep_final_weights": False,
    # How the update is computed, not what: the same gradient up to float rounding.
    "train.micro_batch_tokens": 0,
    "train.shared_prefix": True,
    "rollout.keep_kv": True,
    "rollout.batching": "turn",
    "rollout.decode_attention": "sdpa",
    "train.minibatch_order": "shuffled",
    "train.loss_agg": "token-mean",
    # A diagnostic forward, not part of the update.
    "train.log_kl_ref": True,
}


def dict_hash(d: dict) -> str:
    """The config hash of a plain config dict (what `Config.to_dict` gives and config.yaml holds)."""
    d = copy.deepcopy(d)
    for key, neutral in HASH_NEUTRAL.items():
        section, _, leaf = key.partition(".")
        part = d.get(section)
        if isinstance(part, dict) and leaf in part and part[leaf] == neutral:
            del part[leaf]
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
    if not isinstance(d, dict):
        raise ValueError(f"a config is a mapping of sections {list(SECTIONS)}, got {d!r}")
    for section, name, entry, value in split_overrides(overrides):
        d.setdefault(section, {})
        if not isinstance(d[section], dict):
            raise ValueError(f"config section {section!r} must be a mapping")
        if entry is None:
            d[section][name] = value
            continue
        entries = d[section].setdefault(name, {})  # env.kwargs.high_risk_p=0.3: the others kept
        if not isinstance(entries, dict):
            raise ValueError(f"{section}.{name} must be a mapping, got {entries!r}")
        entries[entry] = value
    _check_keys("", d, SECTIONS)
    parts = {}
    for section, cls in SECTIONS.items():
        given = d.get(section) or {}
        if not isinstance(given, dict):
            raise ValueError(f"config section {section!r} must be a mapping of its fields, got {given!r}")
        names = {f.name: f for f in fields(cls)}
        _check_keys(section + ".", given, names)
        parts[section] = cls(**{k: _coerce(section, names[k], v) for k, v in given.items()})
    return Config(**parts)


def split_overrides(overrides: dict | list[str] | None) -> list[tuple[str, str, str | None, object]]:
    """(section, field, entry, value) for each dotted override, its key checked before any value:
    `algo.clip_high` is (algo, clip_high, None, ...); `env.kwargs.high_risk_p` is one entry of a
    mapping field, (env, kwargs, high_risk_p, ...). A mapping and one of its entries together are
    refused: the one applied later would drop the other's value."""
    out = []
    for key, value in _parse_overrides(overrides).items():
        section, _, leaf = key.partition(".")
        if not leaf:
            raise ValueError(f"override {key!r} must look like section.field, e.g. algo.clip_high")
        _check_keys("", {section: None}, SECTIONS)
        names = {f.name: f for f in fields(SECTIONS[section])}
        head, _, entry = leaf.partition(".")
        if not entry or head not in names:
            _check_keys(section + ".", {leaf: None}, names)
            out.append((section, leaf, None, value))
            continue
        if _kind(names[head].type)[0] != "dict":
            raise ValueError(
                f"override {key!r}: only a mapping field takes a dotted entry (e.g. "
                f"env.kwargs.high_risk_p=0.3); {section}.{head} is not a mapping"
            )
        if "." in entry:
            raise ValueError(
                f"override {key!r}: one entry of {section}.{head} is one name, {section}.{head}.NAME=VALUE"
            )
        out.append((section, head, entry, value))
    whole = {(s, f) for s, f, e, _ in out if e is None}
    both = sorted({f"{s}.{f}" for s, f, e, _ in out if e is not None and (s, f) in whole})
    if both:
        raise ValueError(
            f"overrides set {both[0]} and one of its entries ({both[0]}.NAME): the one applied later "
            "would drop the other's value. Give the whole mapping or its entries, not both"
        )
    return out


def load(path: str | Path, overrides: dict | list[str] | None = None) -> Config:
    """Read a YAML config (sections model/env/rollout/algo/train) and apply dotted overrides.
    Every error names the file (and the line, for YAML errors)."""
    path = Path(path)
    if path.is_dir():
        inside = path / "config.yaml"
        raise FileNotFoundError(
            f"{path} is a folder, not a config file"
            + (
                f"; it holds a run: give its {inside} (with the --out and --finding it was trained "
                "under, to resume it there)"
                if inside.is_file()
                else "; give a YAML file such as params/examples/bandit_ppo.yaml"
            )
        )
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    data = read_yaml(path)
    if isinstance(data, dict) and data and set(data) <= {"base", "grid", "extra"}:
        nb = path.stem[:2] if path.stem[:2].isdigit() else "NN"
        raise ValueError(
            f"{path} is a notebook's grid file (base, grid), not one run's config: its runs train "
            f"from the notebook or `make replicate NB={nb}`; for one of them, give a config with "
            "sections model/env/rollout/algo/train and the grid point as --set keys"
        )
    if isinstance(data, dict) and data and set(data) <= {"smoke", "quick", "paper"}:
        raise ValueError(
            f"{path} is the profiles file (smoke, quick, paper), not one run's config: a profile runs "
            "with `make replicate-all PROFILE=<name>`; a run's config has sections "
            f"{'/'.join(SECTIONS)}"
        )
    if data is None:  # an empty file (or only comments) is more often a mistake than a choice
        raise ValueError(
            f"{path} is empty (or holds only comments): write the sections it changes, e.g. "
            "'env: {name: sokoban}' (one key is enough; every field left out keeps its default)"
        )
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a mapping of sections {list(SECTIONS)}")
    try:
        split_overrides(overrides)  # a typo in a --set key is the overrides', never the file's
    except ValueError as e:
        raise ValueError(f"the overrides on {path}: {e}") from None
    try:
        return from_dict(data, overrides)
    except ValueError as e:
        if overrides:  # a value only the overrides brought: blame them, not the file
            try:
                from_dict(data)
            except ValueError:
                pass
            else:
                raise ValueError(f"the overrides on {path} (the file itself loads): {e}") from None
        raise ValueError(f"{path}: {e}") from None


def save(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


# --- strict YAML ----------------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (PyYAML keeps
    the last one silently: a second `train:` section would drop the first)."""


def _construct_mapping(loader, node, deep=False):
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        # where the key stands, column too: a flow mapping on one line (`{a: 1, a: 2}`, what
        # papermill's -p overrides passes) holds both on that line
        at = (key_node.start_mark.line, key_node.start_mark.column)
        try:
            first = seen.setdefault(key, at)
        except TypeError:  # an unhashable key: SafeLoader says so below
            continue
        if first != at:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} is given twice (first on line {first[0] + 1}, column {first[1] + 1})",
                key_node.start_mark,
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path, text: str | None = None):
    """Parse a YAML file (or `text`, reported as `path`) strictly. A syntax error or a duplicated key
    raises ValueError naming the file, line and column."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path} is not UTF-8 text (a binary file, or another encoding?): {e.reason}"
            ) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
        raise ValueError(f"{where}: {what or e}") from None


# --- checks ---------------------------------------------------------------------------------------
#: The allowed range of every numeric field ("a, b" with [ ] closed and ( ) open ends, or ">= x",
#: "> x"). Types come from the annotations (`_check_fields`); a float must also be finite.
RANGES: dict[str, str] = {
    **{f"rollout.{k}": ">= 1" for k in ("max_turns", "max_actions_per_turn", "max_actions_per_episode")},
    "rollout.max_new_tokens": ">= 1",
    "rollout.temperature": ">= 0",
    "rollout.max_context_tokens": ">= 1",
    "algo.gamma": "[0, 1]",
    "algo.lam": "[0, 1]",
    "algo.clip_low": "[0, 1)",
    "algo.clip_high": ">= 0",
    "algo.value_clip": "> 0",
    "algo.kl_coef": ">= 0",
    "algo.entropy_coef": ">= 0",
    "algo.filter_keep": "(0, 1]",
    "algo.reasoning_lambda": ">= 0",
    "algo.apo_beta1": "> 0",
    "algo.apo_beta2": "> 0",
    "algo.apo_ref_samples": ">= 1",
    "algo.apo_prompt_pool": ">= 1",
    "train.mini_batches": ">= 1",
    "algo.apo_refresh_every": ">= 0",
    **{
        f"train.{k}": ">= 1"
        for k in (
            "steps",
            "groups",
            "group_size",
            "mini_batch_size",
            "micro_batch_size",
            "ppo_epochs",
            "online_k",
            "val_size",
            "checkpoint_every",
            "warmup_episodes",
        )
    },  # fmt: skip
    **{f"train.{k}": "> 0" for k in ("actor_lr", "critic_lr", "grad_clip", "warmup_lr")},
    **{f"train.{k}": ">= 0" for k in ("weight_decay", "val_every", "val_temperature")},
    "train.seed": "[0, 2147483647]",
    **{f"train.{k}": ">= 0" for k in ("samples_every", "samples_per_step", "warmup_steps")},
    "train.betas": "[0, 1)",
    "train.max_skipped_frac": "[0, 1]",
    "train.micro_batch_tokens": ">= 0",
}
#: Why a range matters, where the reason is not obvious.
WHY: dict[str, str] = {
    "train.grad_clip": "the largest gradient norm kept; a negative one would turn descent into ascent",
    "algo.kl_coef": "0 removes the KL term; a negative one would reward drifting from the reference",
    "train.seed": "seeds key numpy and torch generators, which take non-negative integers; a bound "
    "within every generator's range (10**20 overflowed at the first step)",
    "algo.clip_low": "the ratio is clipped below at 1 - clip_low; at 1 or more that bound is never reached",
    "train.checkpoint_every": "a checkpoint every k steps; at most k steps are redone after a crash",
    "algo.entropy_coef": "a negative one would push entropy down",
}


def _check_fields(section: str, obj) -> None:
    """Exact types from the annotations, then `RANGES`. Normalises in place (frozen) what YAML and
    Python spell differently: an int where a float is meant becomes a float, a list a tuple."""
    for f in fields(obj):
        key, value = f"{section}.{f.name}", getattr(obj, f.name)
        kind, optional = _kind(f.type)
        if kind is None or (value is None and optional):
            continue  # an annotation this check does not know: the field's own code checks it
        new = _conform(key, kind, value)
        if new is not value:
            object.__setattr__(obj, f.name, new)
        if key in RANGES and new is not None:
            for v in new if isinstance(new, tuple) else (new,):
                _in_range(key, v, RANGES[key])


def _kind(annotation) -> tuple[str | None, bool]:
    """("int" | "float" | "bool" | "str" | "dict" | "tuple[str, ...]" | "tuple[float, float]" | None,
    optional) from a field's annotation (a string: this module uses postponed annotations)."""
    text = str(annotation).replace(" ", "")
    optional = text.endswith("|None")
    text = text.removesuffix("|None")
    known = ("int", "float", "bool", "str", "dict", "tuple[str,...]", "tuple[float,float]")
    return (text if text in known else None), optional


def _conform(key: str, kind: str, value):
    def bad(what: str):
        got = f"{value!r} (a boolean)" if isinstance(value, bool) else repr(value)
        return ValueError(f"{key} must be {what}, got {got}")

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        if not math.isfinite(value):
            raise bad("a finite number")
        return float(value) if isinstance(value, int) else value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise bad("text")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise bad("a mapping, e.g. {size: 8}")
        return value
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        example = "[bandit-rev]" if kind == "tuple[str,...]" else "[0.9, 0.999]"
        raise bad(
            f"a list, e.g. {example}"
            + (" (the text is not split into one)" if isinstance(value, str) else "")
        )
    if kind == "tuple[float,float]":
        if len(value) != 2:
            raise bad("a list of two numbers")
        return tuple(_conform(key, "float", v) for v in value)
    return tuple(_conform(key, "str", v) for v in value)


def _in_range(key: str, value, spec: str) -> None:
    if spec.startswith(">="):
        ok, text = value >= float(spec[2:]), spec
    elif spec.startswith(">"):
        ok, text = value > float(spec[1:]), spec
    else:
        lo, hi = (float(x) for x in spec[1:-1].split(","))
        ok = (lo <= value if spec[0] == "[" else lo < value) and (
            value <= hi if spec[-1] == "]" else value < hi
        )
        text = f"in {spec}"
    if not ok:
        why = f" ({WHY[key]})" if key in WHY else ""
        raise ValueError(f"{key} must be {text}, got {value!r}{why}")


def check_model_name(name: str, key: str = "model.name") -> None:
    """A name close to a built-in model is a typo, said here rather than after a hub lookup. Paths
    and .gguf files are looked for before a run starts (`models.check`: a config may name a file
    of another machine, e.g. a finished run's, reused without loading), hub ids when they load.
    `key` is where the name was given: a config key, or a command's flag (`--model`)."""
    if name in BUILTIN_MODELS:
        return
    if name.lower().endswith(".gguf") or "/" in name or name.startswith((".", "~")) or Path(name).exists():
        return
    close = difflib.get_close_matches(name, BUILTIN_MODELS, n=1, cutoff=0.75)
    close = close or [b for b in BUILTIN_MODELS if b.startswith(name.lower())]
    # a misspelt short name ("smolm2"): too short beside the whole name for the ratio above
    close = close or [b for b in BUILTIN_MODELS if difflib.get_close_matches(name.lower(), [b.split("-")[0]])]
    if close:
        source = f" (from {MODEL_ENV})" if os.environ.get(MODEL_ENV) == name else ""
        given = f"{key}: {name!r}" if key.startswith("-") else f"{key}={name!r}"  # a flag, or a key
        raise ValueError(
            f"{given}{source} is not a model we know: did you mean {close[0]}? Built-in models: "
            f"{', '.join(BUILTIN_MODELS)}; otherwise a .gguf path, a local folder or a hub id (org/name)"
        )


def _choice(name: str, value, valid: tuple) -> None:
    if value not in valid:  # the closest choice first: token_mean for token-mean, starpo_s for starpo-s
        hint = did_you_mean(value, valid)
        raise ValueError(f"{name}={value!r} is not valid{hint}; choose one of: {', '.join(map(str, valid))}")


_FIELD_KINDS = (
    (bool, "true or false"),
    (int | float, "a number"),
    (str, "a string"),
    (list | tuple, "a list"),
)
"""What an env field takes, by its default's type (bool first: it is an int too)."""


def _is_number_field(default) -> bool:
    return isinstance(default, int | float) and not isinstance(default, bool)


def _wrong_kind(value, default) -> str | None:
    """What an env field with this default takes ("a number", ...) when `value` is not that; None
    when it is, or when the default says nothing (None: the env checks it)."""
    for types, kind in _FIELD_KINDS:
        if isinstance(default, types):
            fits = isinstance(value, types) and (types is bool or not isinstance(value, bool))
            return None if fits else kind
    return None


def did_you_mean(name, choices, prefix: str = "") -> str:
    """' (did you mean <prefix><closest>?)', or '' when no choice is close: the hint every unknown
    name gets (env, config key, notebook parameter). The same name in other case, or the one choice
    it ends (ppo → starpo-ppo, the paper's name without StarPO's), before the closest spelling
    (difflib offered apo, another algorithm, for ppo)."""
    names, want = [str(c) for c in choices], str(name).lower()
    same = [c for c in names if c.lower() == want]
    near = difflib.get_close_matches(str(name), names, n=1, cutoff=0.8)  # train.step → train.steps
    # not "_": train.step would end train.samples_per_step, algo.lambda algo.reasoning_lambda
    ends = [c for c in names if want and c.lower().endswith(("-" + want, "." + want))]
    close = same or near or (ends if len(ends) == 1 else difflib.get_close_matches(str(name), names, n=1))
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _check_keys(prefix: str, given: dict, valid, what: str = "config key(s)") -> None:
    unknown = sorted(set(given) - set(valid), key=str)
    if unknown:
        hints = "; ".join(f"{prefix}{u}{did_you_mean(u, valid, prefix)}" for u in unknown)
        raise ValueError(f"unknown {what}: {hints}. Valid: {', '.join(prefix + k for k in valid)}")


def _parse_overrides(overrides) -> dict:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    if isinstance(overrides, str):
        raise ValueError(
            f"overrides must be a list of key=value strings or a mapping, got the text {overrides!r}"
        )
    out = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} must look like key=value, e.g. algo.clip_high=0.28")
        if key.strip() in out:  # the last would win silently; a YAML file refuses a repeated key too
            raise ValueError(
                f"override {key.strip()!r} is given twice ({item!r} after an earlier one): give it once"
            )
        out[key.strip()] = read_yaml(
            f"override {item!r}", text
        )  # "0.28" -> float, "true" -> bool, "[a, b]" -> list
    return out


def _coerce(section: str, f, value):
    """YAML gives lists where the dataclass wants tuples, and strings for exponents without a dot
    ("3e-5": YAML 1.1 reads it as text, so --set lr=3e-5 would too). Everything else is checked,
    not converted, by the dataclass (`_check_fields`)."""
    kind, _ = _kind(f.type)
    if isinstance(value, list) and kind in ("tuple[str,...]", "tuple[float,float]"):
        return tuple(value)
    if kind not in ("float", "int") or not isinstance(value, str):
        return value
    try:
        return float(value) if kind == "float" else int(value)
    except ValueError:
        raise ValueError(
            f"{section}.{f.name} must be {'a number' if kind == 'float' else 'an integer'}, got {value!r}"
        ) from None


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
