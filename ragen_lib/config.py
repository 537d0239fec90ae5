"""Run configuration: frozen dataclasses, one per concern, each field documented where declared.

(The training issue adds Model/Algo/Train configs, YAML loading and the config hash here.)
"""

from __future__ import annotations

from dataclasses import dataclass


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
    format_penalty: float = -0.1
    """Added to a turn's reward when its answer is malformed or has an invalid action (RAGEN: -0.1)."""
    max_context_tokens: int = 8192
    """An episode whose next prompt plus `max_new_tokens` would exceed this is truncated."""

    def __post_init__(self):
        for name in ("max_turns", "max_actions_per_turn", "max_actions_per_episode"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"rollout.{name} must be >= 1 or None (env default), got {v}")
        if self.max_new_tokens < 1:
            raise ValueError(f"rollout.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"rollout.temperature must be >= 0 (0 is greedy), got {self.temperature}")
