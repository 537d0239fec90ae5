"""The progress bar of long work (training, warm-ups, a grid): tqdm's widget bar in a notebook
that can draw one, its text bar everywhere else.

`tqdm.auto` (ours, and the one transformers and huggingface_hub import) picks the widget bar inside
any Jupyter kernel, and where ipywidgets is not installed (the `notebooks` extra does not need it)
it warns "IProgress not found. Please update jupyter and ipywidgets", with the venv's path, into
every executed notebook, papermill's and nbval's included, then draws the text bar anyway. The text
bar is the right one there, so that one warning is silenced; `ragen_lib/__init__.py` imports this
module first, before any of ours imports transformers.
"""

from __future__ import annotations

import warnings

warnings.filterwarnings("ignore", message="IProgress not found")

from tqdm.auto import tqdm  # noqa: E402  (after the filter: the warning is raised on import)

__all__ = ["tqdm"]
