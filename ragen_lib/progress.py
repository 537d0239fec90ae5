"""The progress bar of long work (training, warm-ups, a grid): tqdm's widget bar in a notebook
that can draw one, its text bar everywhere else.

`tqdm.auto` alone picks the widget bar inside any Jupyter kernel, and where ipywidgets is not
installed (the `notebooks` extra does not need it) it warns "IProgress not found. Please update
jupyter and ipywidgets" into the notebook, with the venv's path, on every execution, papermill's
and nbval's included, then draws text anyway. Asking whether ipywidgets is installed (without
importing it: the training path imports no notebook library) gives the same bar without the warning.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm"]
