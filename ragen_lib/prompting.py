"""RAGEN's text protocol: how a state becomes a prompt and a response becomes actions.

The model sees one system message and one user message per turn:

    <env instructions and symbol legend>
    <available actions, the ` || ` separator and the per-turn action budget>
    Turn k:
    State:
    <grid or page>
    You have n actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer]
    </answer> with no extra text. Strictly follow this format. Max response length: 100 words (tokens).

Later user turns open with the reward of the previous turn. The response is parsed with
`<think>(.*?)</think>\\s*<answer>(.*?)</answer>` (RAGEN's regex), the answer split on `||`,
each piece matched by the env, cut to the action budget. A turn with no valid action, or with
any invalid one, is format-invalid and earns FORMAT_PENALTY (RAGEN: -0.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragen_lib.envs.base import TextEnv

SYSTEM_PROMPT = "You're a helpful assistant."
FORMAT_PENALTY = -0.1
ACTION_SEPARATOR = "||"

THINK_FORMAT = "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
NO_THINK_FORMAT = "<answer> [your answer] </answer>"

_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


@dataclass(frozen=True)
class ParsedTurn:
    """What the parser made of one response."""

    think: str  # reasoning text between <think> tags ("" in no-think mode or when malformed)
    answer: str  # raw text between <answer> tags ("" when malformed)
    actions: tuple[str, ...]  # canonical valid actions, in order, cut to the budget
    format_valid: bool  # tags well formed, at least one action, and no invalid action
    invalid: tuple[str, ...]  # the pieces the env rejected
    reason: str  # why format_valid is False ("" when valid), for logs and the echo-trap tables


def parse_response(text: str, env: TextEnv, *, max_actions: int, enable_think: bool = True) -> ParsedTurn:
    """Parse a model response into env actions. Never raises on model output.

    `max_actions` is the budget this turn (per-turn limit and what is left of the episode's);
    valid actions beyond it are dropped without penalty, as in RAGEN.
    """
    think, answer, reason = _split_tags(text, enable_think)
    if reason:
        return ParsedTurn(think, answer, (), False, (), reason)
    actions, invalid = [], []
    for piece in answer.split(ACTION_SEPARATOR):
        if not piece.strip():
            continue
        action = env.parse_action(piece)
        (actions if action is not None else invalid).append(action if action is not None else piece.strip())
    if not actions and not invalid:
        reason = "empty <answer>"
    elif invalid:
        shown = ", ".join(repr(p[:40]) for p in invalid[:3])
        reason = f"invalid action(s) {shown}"
    return ParsedTurn(
        think, answer, tuple(actions[: max(max_actions, 0)]), not reason, tuple(invalid), reason
    )


def _split_tags(text: str, enable_think: bool) -> tuple[str, str, str]:
    """Returns (think, answer, reason); reason is "" when the tags are well formed."""
    wanted = _TAGS if enable_think else _TAGS[2:]
    for tag in wanted:
        n = text.count(tag)
        if n != 1:
            # Nested, repeated or unclosed tags are all malformed: exactly one of each.
            return "", "", f"{tag} appears {n} times (expected once)"
    if not enable_think and ("<think>" in text or "</think>" in text):
        return "", "", "<think> used in no-think mode"
    m = (_THINK_ANSWER if enable_think else _ANSWER).search(text)
    if m is None:
        return "", "", "tags out of order or text between </think> and <answer>"
    if enable_think:
        return m.group(1).strip(), m.group(2).strip(), ""
    return "", m.group(1).strip(), ""


def action_help(env: TextEnv) -> str:
    """The line that tells the model which actions exist and how to separate them."""
    if env.actions:
        listed = f" {ACTION_SEPARATOR} ".join(env.actions)
    else:  # free-form actions (WebShop) describe their own syntax
        listed = env.action_help
    per_turn = env.max_actions_per_turn
    budget = (
        "You may take exactly 1 action per turn."
        if per_turn == 1
        else f"You may take up to {per_turn} actions per turn, separated by ' {ACTION_SEPARATOR} '."
    )
    return f"Available actions: {listed}\n{budget}"


def turn_prompt(
    turn: int, observation: str, actions_left: int, *, enable_think: bool = True, reward: float | None = None
) -> str:
    """The per-turn block. `reward` is the previous turn's reward (None on the first turn)."""
    fmt = THINK_FORMAT if enable_think else NO_THINK_FORMAT
    head = "" if reward is None else f"Reward:\n{reward:g}\n"
    return (
        f"{head}Turn {turn}:\nState:\n{observation}\nYou have {actions_left} actions left. "
        f"Always output: {fmt} with no extra text. Strictly follow this format. "
        "Max response length: 100 words (tokens)."
    )


def first_user_message(
    env: TextEnv, observation: str, actions_left: int, *, enable_think: bool = True
) -> str:
    return f"{env.instructions}\n{action_help(env)}\n\n" + turn_prompt(
        1, observation, actions_left, enable_think=enable_think
    )
