"""Multi-turn rollouts: P groups × N samples played out together, one generation batch per turn.

Two layers:
- `Episode`: the text protocol for one env (prompt, parse, step the env, budgets, penalty).
  Model-free, so tests can drive it with hand-written responses.
- `collect`: the token level. Each episode keeps its token ids and a loss mask that is 1 exactly
  on the tokens the model generated (the `<think>` prefill is a prompt token); every live episode
  is generated for in one batch per turn. Training sees the sampled tokens as sampled; RAGEN
  re-renders a cleaned reply and re-tokenises it (docs/FIDELITY.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from ragen_lib import attention, engine
from ragen_lib.config import RolloutConfig
from ragen_lib.envs import make
from ragen_lib.envs.base import TextEnv
from ragen_lib.generation import KeptKV, end_token_ids, generate, stop_on_text
from ragen_lib.prompting import (
    PREFILL,
    SYSTEM_PROMPT,
    ParsedTurn,
    first_user_message,
    parse_response,
    turn_prompt,
)

_WORD = re.compile(r"[a-z0-9]+")


def consistency_bonus(think: str, actions: list[str], max_bonus: float = 0.2) -> float:
    """The reasoning–action consistency reward of the WebShop-lite report, in [0, max_bonus]: the
    fraction of the executed actions whose words all appear in the reasoning. No reasoning or no
    action: 0. A shaping term (`algo.reasoning_lambda` weighs it into the advantage), never a part
    of `reward/*` or success."""
    if not actions or not think:
        return 0.0
    said = set(_WORD.findall(think.lower()))
    hits = sum(all(w in said for w in _WORD.findall(a.lower())) for a in actions)
    return max_bonus * hits / len(actions)


@dataclass
class TurnRecord:
    response: str  # the whole response as parsed: the prefill, then the model's text
    parsed: ParsedTurn
    env_reward: float  # summed over the actions executed this turn (RAGEN's `acc_reward`)
    penalty: float  # format term: RolloutConfig.format_reward if well-formed, else .format_penalty
    executed: list[str]
    cut: bool = False  # the answer ran out of its token budget (max_new_tokens) before it closed
    budget: int = 0  # that budget, for the reason below

    @property
    def reward(self) -> float:
        return self.env_reward + self.penalty

    @property
    def invalid_reason(self) -> str:
        """Why the answer failed the format ('' when it did not). An answer cut by the token budget
        says so first: its fix is the budget, not the form (the embedded model after the format
        warm-up, Bandit at 128 tokens: 0.30 of the turns cut, 0.39 closed but malformed)."""
        if self.parsed.format_valid:
            return ""
        return (
            f"cut at the {self.budget}-token budget: {self.parsed.reason}" if self.cut else self.parsed.reason
        )

    @property
    def consistency(self) -> float:
        return consistency_bonus(self.parsed.think, self.executed)


class Episode:
    """One env played through RAGEN's text protocol.

    `terminated`: the env ended the episode (goal, hole, purchase, arm pulled).
    `truncated`: a turn, action or context budget ran out first. Only a terminated episode
    can be a success (RAGEN: success requires the episode to end on its own).

    `step` takes the model's continuation of the generation prompt; with `cfg.prefill` that
    prompt ended with `prefill` (`<think>` or `<answer>`), which is put back in front of the
    text before parsing, as RAGEN does.
    """

    def __init__(self, env: TextEnv, seed: int, cfg: RolloutConfig | None = None):
        cfg = cfg or RolloutConfig()
        self.env, self.seed, self.cfg = env, seed, cfg
        self.observation, _ = env.reset(seed=seed)
        limits = cfg.limits(env)
        self.max_turns, self.max_new_tokens = limits.max_turns, limits.max_new_tokens
        self.per_turn, self.actions_left = limits.max_actions_per_turn, limits.max_actions_per_episode
        self.prefill = PREFILL[cfg.enable_think] if cfg.prefill else ""
        self.turns: list[TurnRecord] = []
        self.terminated = self.truncated = self.success = False
        first = first_user_message(
            env,
            self.observation,
            self.actions_left,
            enable_think=cfg.enable_think,
            per_turn=self.per_turn if cfg.prompt_per_turn_limit else None,
            max_words=cfg.max_response_words,
        )
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": first}]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.turns)

    def generation_prompt(self, tokenizer) -> str:
        """The text the model continues: the chat so far in the tokenizer's template, the
        assistant header, then the prefill."""
        chat = tokenizer.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)
        return chat + self.prefill

    def step(self, continuation: str, cut: bool = False) -> str | None:
        """Apply the model's continuation; returns the next user message, or None when done.
        `cut`: the continuation ran out of `max_new_tokens` before it closed (recorded, not judged)."""
        if self.done:
            raise RuntimeError("episode is over; start a new Episode")
        response = self.prefill + continuation
        parsed = parse_response(
            response,
            self.env,
            max_actions_per_turn=self.per_turn,
            actions_left=self.actions_left,
            enable_think=self.cfg.enable_think,
        )
        # RAGEN sums from the int 0, so a turn that ran nothing shows the model "Reward:\n0".
        env_reward, executed = 0, []
        for action in parsed.actions:
            self.observation, r, terminated, truncated, info = self.env.step(action)
            env_reward += r
            executed.append(action)
            self.actions_left -= 1
            if terminated or truncated:
                self.terminated, self.truncated = terminated, truncated and not terminated
                if "success" not in info:  # else a solved episode would count as failed, silently
                    raise TypeError(
                        f"env {self.env.name!r}: step({action!r}) returned info without 'success' "
                        f"({info!r}); every info carries it (ragen_lib/envs/base.py)"
                    )
                self.success = bool(terminated and info["success"])
                break
        penalty = self.cfg.format_reward if parsed.format_valid else self.cfg.format_penalty
        self.turns.append(
            TurnRecord(response, parsed, env_reward, penalty, executed, cut, self.max_new_tokens)
        )
        self.messages.append({"role": "assistant", "content": response})
        if not self.terminated and (len(self.turns) >= self.max_turns or self.actions_left <= 0):
            self.truncated = True
        if self.done:
            return None
        # The model is shown the env reward only; the format penalty goes into the trajectory
        # reward it is trained on, never into its prompt (RAGEN es_manager.py:157-158).
        nxt = turn_prompt(
            len(self.turns) + 1,
            self.observation,
            self.actions_left,
            enable_think=self.cfg.enable_think,
            reward=env_reward,
            max_words=self.cfg.max_response_words,
        )
        self.messages.append({"role": "user", "content": nxt})
        return nxt


@dataclass
class RolloutBatch:
    """B = P·N episodes, row b belongs to group `group_ids[b]`. Tensors are right-padded."""

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long
    loss_mask: torch.Tensor  # (B, T) float, 1 exactly on model-generated tokens
    context_mask: torch.Tensor  # (B, T) float, 1 on every token after the system turn (RAGEN's paper mask)
    token_rewards: torch.Tensor  # (B, T) float, trajectory reward on the last generated token
    rewards: torch.Tensor  # (B,) trajectory reward: env rewards + format penalties
    success: torch.Tensor  # (B,) bool
    terminated: torch.Tensor  # (B,) bool
    truncated: torch.Tensor  # (B,) bool
    num_turns: torch.Tensor  # (B,) long
    group_ids: torch.Tensor  # (B,) long
    seeds: list[int]
    turn_rewards: list[list[float]]
    turn_format_valid: list[list[bool]]
    responses: list[list[str]]  # per episode, per turn: the decoded generated text
    messages: list[list[dict]]  # the full chat of each episode
    thinks: list[list[str]] = field(default_factory=list)  # parsed <think> text per turn
    actions: list[list[list[str]]] = field(default_factory=list)  # actions executed, per turn
    reasoning_bonus: torch.Tensor | None = None  # (B,) consistency bonus, mean over the episode's turns
    turn_invalid_reasons: list[list[str]] = field(default_factory=list)  # per turn; "" when valid
    turn_cut: list[list[bool]] = field(default_factory=list)  # per turn: the answer hit max_new_tokens
    turn_matched: list[list[bool]] = field(default_factory=list)  # per turn: the format's tags were found
    # per turn: the action pieces the answer wrote, and those the per-turn limit dropped (ParsedTurn)
    turn_written: list[list[int]] = field(default_factory=list)
    turn_dropped: list[list[int]] = field(default_factory=list)
    # per episode: its env's default per-turn limit (5 on Sokoban: what the format warm-up teaches),
    # whatever rollout.max_actions_per_turn set: a larger limit's arm acts only past it
    default_per_turn: list[int] = field(default_factory=list)
    # (B, T) the sampler's log-prob of each generated token (temperature 1), 0 elsewhere
    sample_logprobs: torch.Tensor | None = None

    def reasoning(self) -> list[list[str]]:
        """Per episode, the `<think>` text of each turn whose tags matched. A turn that did not
        match has no reasoning to measure (its `thinks` entry is ""): counted as 0 tokens, it made
        reasoning/length track the format-valid rate, not the reasoning."""
        return self._matched(self.thinks)

    def written(self) -> tuple[list[list[int]], list[list[int]]]:
        """Per episode, the action pieces written and dropped on each turn whose tags matched: a turn
        that did not match wrote no answer to count (as `reasoning`)."""
        return self._matched(self.turn_written), self._matched(self.turn_dropped)

    def _matched(self, per_turn: list[list]) -> list[list]:
        return [[x for x, m in zip(xs, ms) if m] for xs, ms in zip(per_turn, self.turn_matched)]

    @property
    def format_valid_rate(self) -> float:
        """Fraction of all turns in the batch whose answer parsed with only valid actions."""
        flags = [f for ep in self.turn_format_valid for f in ep]
        return sum(flags) / max(len(flags), 1)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def transcript(self, b: int) -> str:
        """Episode b as readable text: each user turn, the model's response, the turn reward."""
        lines = []
        turn = 0
        for m in self.messages[b][1:]:  # the system prompt is the same for all
            if m["role"] == "user":
                lines += [f"--- user (turn {turn + 1}) ---", m["content"]]
            else:
                why = self.turn_invalid_reasons[b][turn] if self.turn_invalid_reasons else ""
                ok = (
                    "valid"
                    if self.turn_format_valid[b][turn]
                    else f"INVALID format{': ' + why if why else ''}"
                )
                lines += [
                    f"--- model (turn {turn + 1}, reward {self.turn_rewards[b][turn]:+g}, {ok}) ---",
                    m["content"],
                ]
                turn += 1
        outcome = "success" if self.success[b] else ("ended" if self.terminated[b] else "truncated")
        lines.append(f"=== {outcome}: reward {self.rewards[b]:+g} in {turn} turn(s)")
        return "\n".join(lines)


class _TokenTrack:
    """Token ids of one episode as they grow, with the generated-token mask."""

    def __init__(self, ids: list[int]):
        self.ids, self.mask, self.logp = list(ids), [0] * len(ids), [0.0] * len(ids)

    def extend(self, ids: list[int], generated: bool, logp: list[float] | None = None):
        self.ids += ids
        self.mask += [int(generated)] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)


def _user_turn_suffix(tokenizer, messages: list[dict], ended_with_eos: bool) -> str:
    """The template text that follows the last assistant response up to the next generation
    prompt (for ChatML: "<|im_end|>\\n<|im_start|>user\\n…<|im_end|>\\n<|im_start|>assistant\\n").

    Rendered by the tokenizer's own chat template with a sentinel in place of the assistant's
    words, so any model's template works without knowing its markup.
    """
    sentinel = "\x00RAGEN_SENTINEL\x00"
    probe = messages[:-2] + [{"role": "assistant", "content": sentinel}, messages[-1]]
    text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    suffix = text[text.rindex(sentinel) + len(sentinel) :]
    eos = tokenizer.eos_token or ""
    if ended_with_eos and eos and suffix.startswith(eos):
        suffix = suffix[len(eos) :]  # the model already closed its turn; do not close it twice
    return suffix


class ContextTooSmall(ValueError):
    """rollout.max_context_tokens leaves an env's first prompt no room for one turn."""


def _check_first_turn(env_name: str, longest: int, max_new: int, cfg: RolloutConfig) -> None:
    if longest + max_new > cfg.max_context_tokens:  # else an episode ends with no turn, yet trains
        raise ContextTooSmall(
            f"{env_name}: a first prompt of {longest} tokens plus {max_new} new tokens per turn "
            f"(rollout.max_new_tokens{'' if cfg.max_new_tokens else ', the env default'}) "
            f"exceeds rollout.max_context_tokens={cfg.max_context_tokens}, so an episode could not "
            f"play one turn: raise rollout.max_context_tokens to at least {longest + max_new}, or "
            "lower rollout.max_new_tokens"
        )


def check_first_turn_fits(tokenizer, env_name: str, seeds, cfg: RolloutConfig, env_kwargs=None) -> None:
    """The check `collect` makes, on the first prompts of `seeds`, without a model: the trainer
    runs it once the tokenizer is loaded, before a warm-up or A*-PO's stage 1 spend minutes."""
    episodes = [Episode(make(env_name, **(env_kwargs or {})), seed, cfg) for seed in seeds]
    longest = max(len(_encode(tokenizer, e.generation_prompt(tokenizer))) for e in episodes)
    _check_first_turn(env_name, longest, episodes[0].max_new_tokens, cfg)


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def collect(
    model,
    tokenizer,
    env_name: str,
    seeds: list[int],
    group_size: int,
    cfg: RolloutConfig | None = None,
    *,
    env_kwargs: dict | None = None,
    sample_seed: int = 0,
) -> RolloutBatch:
    """Play len(seeds) groups × group_size samples of `env_name`; a group shares its seed.

    Generation for every live episode happens in one batch per turn. `sample_seed` seeds the
    sampling generator, so the same call gives the same batch (temperature 0 ignores it).
    """
    cfg = cfg or RolloutConfig()
    episodes = [
        Episode(make(env_name, **(env_kwargs or {})), seed, cfg) for seed in seeds for _ in range(group_size)
    ]
    # The prefill (`<think>`) ends each prompt: a prompt token, outside the loss mask.
    tracks = [_TokenTrack(_encode(tokenizer, e.generation_prompt(tokenizer))) for e in episodes]
    responses: list[list[str]] = [[] for _ in episodes]
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(sample_seed)
    # Think mode parses the answer after the first </think>: a </answer> quoted in the reasoning
    # does not end the turn there (RAGEN generates to EOS; its regex skips such a quote).
    armed_by = "</think>" if cfg.enable_think else None
    stop = stop_on_text(tokenizer, ("</answer>",), armed_by) if cfg.stop_at_answer else None
    # Any end id ends an answer (Qwen: <|endoftext|> too); only the template's own closes the turn
    # in the text (`_user_turn_suffix` appends it after another).
    eos, ends, pad = tokenizer.eos_token_id, end_token_ids(model, tokenizer), tokenizer.pad_token_id
    max_new = episodes[0].max_new_tokens  # one env per batch
    # Each episode's KV cache lives from turn to turn: a turn prefills only the env's reply.
    kept = KeptKV() if cfg.keep_kv else None

    def end_turn(i: int, gen: list[int], logp: list[float]) -> bool:
        """Episode i's answer `gen`: step its env, extend its track; True when it plays on."""
        responses[i].append(tokenizer.decode(gen))
        tracks[i].extend(gen, generated=True, logp=logp)
        text = tokenizer.decode(gen, skip_special_tokens=True)
        # Out of budget: every token used, no end of turn, and the answer not closed either.
        cut = len(gen) >= max_new and gen[-1] not in ends and not text.rstrip().endswith("</answer>")
        if episodes[i].step(text, cut=cut) is None:
            return False
        suffix = _user_turn_suffix(tokenizer, episodes[i].messages, bool(gen) and gen[-1] == eos)
        ids = _encode(tokenizer, suffix + episodes[i].prefill)
        if len(tracks[i].ids) + len(ids) + max_new > cfg.max_context_tokens:
            # The next turn would not fit (the first always does: checked below), so the episode
            # ends here, and its next observation, never played, stays out of the trained ids
            # (RAGEN drops the n+1 state before an update), else the paper mask would train on it
            # with return 0 after the reward token.
            episodes[i].truncated = True
            episodes[i].messages.pop()  # the transcript and samples show what was trained
            return False
        tracks[i].extend(ids, generated=False)
        return True

    _check_first_turn(env_name, max(len(t.ids) for t in tracks), max_new, cfg)
    # The decode steps' attention kernel (rollout.decode_attention); the prefills run SDPA.
    with attention.decode_kernel(cfg.decode_attention):
        if cfg.batching == "continuous":
            first = [i for i in range(len(episodes)) if not episodes[i].done]
            engine.play(
                model, tracks, first, max_new, end_turn, temperature=cfg.temperature, eos=ends, pad=pad,
                stop=stop, generator=generator, group_size=group_size, static=cfg.kv_cache == "static",
            )  # fmt: skip
        else:
            while True:
                live = [i for i in range(len(episodes)) if not episodes[i].done]
                if not live:
                    break
                prompts = [tracks[i].ids for i in live]
                logps: list[list[float]] = []
                new = generate(
                    model,
                    prompts,
                    max_new_tokens=max_new,
                    temperature=cfg.temperature,
                    eos_token_id=ends,
                    pad_token_id=pad,
                    stop=stop,
                    generator=generator,
                    group_size=_shared_group(prompts, group_size),
                    kv_cache=cfg.kv_cache,
                    kept=kept,
                    keys=live,
                    logprobs=logps,
                )
                for i, gen, logp in zip(live, new, logps):
                    end_turn(i, gen, logp)

    return _to_batch(
        episodes, tracks, responses, group_size, pad, _system_turn_length(tokenizer, episodes[0])
    )


def _system_turn_length(tokenizer, episode: Episode) -> int:
    """Tokens of the rendered system turn, the prefix every episode's ids start with. RAGEN's
    paper-time loss mask (`enable_response_mask: False`) covers every target token predicted from
    the first user turn's role token onwards, i.e. positions ≥ this length + 1."""
    system = tokenizer.apply_chat_template(episode.messages[:1], tokenize=False)
    full = tokenizer.apply_chat_template(episode.messages[:2], tokenize=False, add_generation_prompt=True)
    if not full.startswith(system):
        raise ValueError(
            "the chat template does not render the system turn as a prefix of the conversation; "
            "use algo.loss_mask=response with this model"
        )
    return len(_encode(tokenizer, system))


def _shared_group(prompts: list[list[int]], group_size: int) -> int:
    """group_size when every group's rows are still identical (the first turn: a group shares
    its seed), so generation can prefill each group once; 1 once the samples have diverged."""
    if (
        group_size > 1
        and len(prompts) % group_size == 0
        and all(prompts[i] == prompts[i - i % group_size] for i in range(len(prompts)))
    ):
        return group_size
    return 1


def _to_batch(episodes, tracks, responses, group_size, pad, system_length: int) -> RolloutBatch:
    B, T = len(episodes), max(len(t.ids) for t in tracks)
    input_ids = torch.full((B, T), pad, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T))
    context_mask = torch.zeros((B, T))
    token_rewards = torch.zeros((B, T))
    sample_logprobs = torch.zeros((B, T))
    rewards = torch.tensor([e.total_reward for e in episodes], dtype=torch.float)
    for b, t in enumerate(tracks):
        n = len(t.ids)
        input_ids[b, :n] = torch.tensor(t.ids)
        attention_mask[b, :n] = 1
        loss_mask[b, :n] = torch.tensor(t.mask, dtype=torch.float)
        context_mask[b, system_length + 1 : n] = 1
        sample_logprobs[b, :n] = torch.tensor(t.logp)
        last = max(j for j, m in enumerate(t.mask) if m) if any(t.mask) else n - 1
        token_rewards[b, last] = rewards[b]
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        context_mask=context_mask,
        token_rewards=token_rewards,
        rewards=rewards,
        success=torch.tensor([e.success for e in episodes]),
        terminated=torch.tensor([e.terminated for e in episodes]),
        truncated=torch.tensor([e.truncated for e in episodes]),
        num_turns=torch.tensor([len(e.turns) for e in episodes]),
        group_ids=torch.arange(B) // group_size,
        seeds=[e.seed for e in episodes],
        turn_rewards=[[t.reward for t in e.turns] for e in episodes],
        turn_format_valid=[[t.parsed.format_valid for t in e.turns] for e in episodes],
        responses=responses,
        messages=[e.messages for e in episodes],
        thinks=[[t.parsed.think for t in e.turns] for e in episodes],
        actions=[[t.executed for t in e.turns] for e in episodes],
        reasoning_bonus=torch.tensor(
            [np.mean([t.consistency for t in e.turns] or [0.0]) for e in episodes], dtype=torch.float
        ),  # float32 as every other float here: np.mean's float64 made a λ > 0 run's loss float64
        sample_logprobs=sample_logprobs,
        turn_invalid_reasons=[[t.invalid_reason for t in e.turns] for e in episodes],
        turn_cut=[[t.cut for t in e.turns] for e in episodes],
        turn_matched=[[t.parsed.matched for t in e.turns] for e in episodes],
        turn_written=[[t.parsed.written for t in e.turns] for e in episodes],
        turn_dropped=[[t.parsed.dropped for t in e.turns] for e in episodes],
        default_per_turn=[e.env.max_actions_per_turn for e in episodes],
    )
