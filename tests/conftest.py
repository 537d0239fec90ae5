import os
from pathlib import Path

import pytest

from ragen_lib import files
from ragen_lib.envs.base import TextEnv


def advantage_inputs(
    mask, *, token_rewards=None, values=None, kl=None, rewards=None, reasoning=None, v_star=None, group_size=1
):
    """`AdvantageInputs` for an estimator test: one process holding every row (the estimators' batch
    statistics over all of them), zeros wherever a test leaves an input out, in the mask's dtype."""
    import torch

    from ragen_lib.algorithms import AdvantageInputs
    from ragen_lib.distributed import Ranks, Shard

    B = mask.shape[0]
    zeros, tokens = torch.zeros(B, dtype=mask.dtype), torch.zeros_like(mask)
    return AdvantageInputs(
        token_rewards=tokens if token_rewards is None else token_rewards,
        rewards=zeros if rewards is None else rewards,
        mask=mask,
        values=tokens if values is None else values,
        kl=tokens if kl is None else kl,
        reasoning=zeros if reasoning is None else reasoning,
        v_star=zeros if v_star is None else v_star,
        group_size=group_size,
        batch=Shard(Ranks("cpu"), rows=torch.arange(B), lo=0, total=B),
    )


class LineEnv(TextEnv):
    """A 1-D corridor for protocol tests: walk Right `length` times to reach the goal."""

    name = "line"
    actions = ("Left", "Right")
    instructions = "Walk to the goal."

    def __init__(self, length: int = 3):
        super().__init__()
        self.length, self.pos = length, 0

    def reset(self, *, seed=None, options=None):
        self.pos = 0
        return self.render(), {"success": False}

    def step(self, action):
        if action not in self.actions:
            raise self._invalid(action)
        self.pos = max(0, self.pos + (1 if action == "Right" else -1))
        done = self.pos >= self.length
        return self.render(), (1.0 if done else 0.0), done, False, {"success": done}

    def render(self):
        return "".join("P" if i == self.pos else "_" for i in range(self.length + 1))

    def expert_action(self):
        return "Right"


@pytest.fixture
def line_env():
    return LineEnv()


@pytest.fixture
def kill_at_rename(monkeypatch):
    """`kill_at_rename(".json")`: from then on, renaming a written temporary file into place as a
    file of that suffix raises KeyboardInterrupt, as a job killed (a GPU lease's end) with the new
    bytes written but not yet in place. `monkeypatch.undo()` ends it."""

    def arm(suffix: str) -> None:
        real = os.replace

        def killed(src, dst):
            if Path(dst).suffix == suffix:
                raise KeyboardInterrupt
            real(src, dst)

        monkeypatch.setattr(files.os, "replace", killed)

    return arm
