import os
from pathlib import Path

import pytest

from ragen_lib import files
from ragen_lib.envs.base import TextEnv


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
