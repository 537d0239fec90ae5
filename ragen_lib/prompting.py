"""RAGEN's text protocol: how a state becomes a prompt and a response becomes actions.

Built as RAGEN 385bc30 builds it (`ragen/llm_agent/ctx_manager.py`, `es_manager.py`). The chat is
one system message (`SYSTEM_PROMPT`) and one user message per turn. The first user message is

    <env instructions>
    The meaning of each symbol in the state is:        (envs with a legend)
    <legend>
    Your available actions are:                        (envs with a fixed action list)
    Up, Down, Left, Right
    You can make up to <episode budget> actions, separated by the action separator " || "

    Turn 1:
    State:
    <grid or page>
    You have <n> actions left. Always output: <think> [Your thoughts] </think> <answer> [your
    answer] </answer> with no extra text. Strictly follow this format. Max response length: 100
    words (tokens).

and each later one is "Reward:\\n<env reward of the last turn>\\n" followed by the next turn block.
The generation prompt ends with the prefill `<think>` (`<answer>` in no-think mode), which the
rollout puts back in front of the model's continuation before parsing (`PREFILL`).

Parsing (`parse_response`) is RAGEN's: the first match of `<think>(.*?)</think>\\s*<answer>(.*?)
</answer>` anywhere in the text; the tags are stripped from both groups; the answer is split on
`||`; the pieces are cut to the per-turn limit *before* they are checked; unknown pieces are
dropped; the actions left in the episode bound what runs. A turn with no valid action, or with any
invalid piece among those kept, is format-invalid and earns the format penalty (RAGEN: -0.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragen_lib.envs.base import TextEnv

#: RAGEN's system message, trailing space included (ctx_manager.py:218).
SYSTEM_PROMPT = "You're a helpful assistant. "
ACTION_SEPARATOR = "||"

THINK_FORMAT = "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
NO_THINK_FORMAT = "<answer> [your answer] </answer>"
#: What the generation prompt ends with, by think mode (ctx_manager.py:239-243).
PREFILL = {True: "<think>", False: "<answer>"}
#: RAGEN prints the env's `max_tokens` (100 for every env) as a word limit; it is never enforced.
MAX_RESPONSE_WORDS = 100

_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
#: Strings removed from the think and answer groups (ctx_manager.py:74).
_SPECIAL = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class ParsedTurn:
    """What the parser made of one response."""

    think: str  # reasoning between the tags, special strings removed ("" in no-think mode or unparsed)
    answer: str  # the answer as kept: pieces cut to the per-turn limit, joined with " || "
    actions: tuple[str, ...]  # canonical valid actions, in order, cut to the actions left
    format_valid: bool  # the tags matched, at least one action, and no invalid piece among those kept
    invalid: tuple[str, ...]  # the kept pieces the env rejected
    reason: str  # why format_valid is False ("" when valid), for logs and the echo-trap tables
    matched: bool = True  # the tag pattern was found
    # The answer's pieces before the per-turn cut, and how many of them the cut dropped unjudged:
    # what the model wrote, where `actions` is what the limit let it play (05's Table 3).
    written: int = 0
    dropped: int = 0

    def cleaned(self, enable_think: bool = True) -> str:
        """The response as RAGEN re-renders it into later prompts and its training sequence
        (ctx_manager.py:146): `<think>{think}</think><answer>{answer}</answer>`, or "" when the
        tags did not match (RAGEN then keeps the raw text). We keep the sampled text instead."""
        if not self.matched:
            return ""
        head = f"<think>{self.think}</think>" if enable_think else ""
        return f"{head}<answer>{self.answer}</answer>"


def parse_response(
    text: str,
    env: TextEnv,
    *,
    max_actions_per_turn: int,
    actions_left: int,
    enable_think: bool = True,
) -> ParsedTurn:
    """Parse a whole response (the prefill included) into env actions. Never raises on model output.

    As RAGEN: the answer's pieces are cut to `max_actions_per_turn` first (an invalid piece uses a
    slot; pieces beyond the limit are neither checked nor penalised), then checked by the env, and
    the valid ones cut to `actions_left` without penalty.
    """
    m = (_THINK_ANSWER if enable_think else _ANSWER).search(text)
    if m is None:
        want = "<think>…</think><answer>…</answer>" if enable_think else "<answer>…</answer>"
        return ParsedTurn("", "", (), False, (), f"no {want} found", matched=False)
    think, answer = (m.group(1), m.group(2)) if enable_think else ("", m.group(1))
    for s in _SPECIAL:
        think, answer = think.replace(s, ""), answer.replace(s, "")
    think, answer = think.strip(), answer.strip()
    pieces = [p.strip() for p in answer.split(ACTION_SEPARATOR) if p.strip()]
    written = len(pieces)
    if len(pieces) > max_actions_per_turn:
        pieces = pieces[:max_actions_per_turn]
        answer = f" {ACTION_SEPARATOR} ".join(pieces)
    actions, invalid = [], []
    for piece in pieces:
        action = env.parse_action(piece)
        if action is None:
            invalid.append(piece)
        else:
            actions.append(action)
    reason = ""
    if not pieces:
        reason = "empty <answer>"
    elif invalid:
        reason = f"invalid action(s) {', '.join(repr(p[:40]) for p in invalid[:3])}"
    return ParsedTurn(
        think,
        answer,
        tuple(actions[: max(actions_left, 0)]),
        not reason,
        tuple(invalid),
        reason,
        written=written,
        dropped=written - len(pieces),
    )


def instruction_prefix(env: TextEnv, budget: int, per_turn: int | None = None) -> str:
    """The part of the first user message above "Turn 1:" (ctx_manager.py:88-102).

    `budget` is the episode's action budget the rollout enforces (RAGEN prints its
    `max_actions_per_traj`). RAGEN never shows the per-turn limit; `per_turn` (when given) adds a
    sentence that does (`rollout.prompt_per_turn_limit`).
    """
    text = env.instructions
    if env.legend:
        text += "\nThe meaning of each symbol in the state is:\n" + env.legend
    if env.actions and env.prompt_lists_actions:
        text += (
            "\nYour available actions are:\n"
            + ", ".join(env.actions)
            + f"\nYou can make up to {budget} actions, "
            + f'separated by the action separator " {ACTION_SEPARATOR} "\n'
        )
        if per_turn is not None:
            text += f"You can take up to {per_turn} actions per turn.\n"
    return text


def turn_prompt(
    turn: int,
    observation: str,
    actions_left: int,
    *,
    enable_think: bool = True,
    reward: float | None = None,
    max_words: int = MAX_RESPONSE_WORDS,
) -> str:
    """The per-turn block (ctx_manager.py:221-232). `reward` is the env reward of the previous turn
    (None on the first turn), printed as Python prints it, as RAGEN does: `0` when no action ran,
    `-0.30000000000000004` after three steps of -0.1."""
    fmt = THINK_FORMAT if enable_think else NO_THINK_FORMAT
    head = "" if reward is None else f"Reward:\n{reward}\n"
    return (
        f"{head}\nTurn {turn}:\nState:\n{observation}\nYou have {actions_left} actions left. "
        f"Always output: {fmt} with no extra text. Strictly follow this format. "
        f"Max response length: {max_words} words (tokens).\n"
    )


def first_user_message(
    env: TextEnv,
    observation: str,
    actions_left: int,
    *,
    enable_think: bool = True,
    per_turn: int | None = None,
    max_words: int = MAX_RESPONSE_WORDS,
) -> str:
    """Instructions, legend, action list and budget, then the first turn block."""
    return instruction_prefix(env, actions_left, per_turn) + turn_prompt(
        1, observation, actions_left, enable_think=enable_think, max_words=max_words
    )
