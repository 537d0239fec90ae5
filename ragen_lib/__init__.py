"""ragen_lib: the small library behind the RAGEN / StarPO / A*-PO replication notebooks.

Training-path modules (envs, prompting, models, generation, rollout) import no notebook or
plotting library, so they run on a bare GPU host.
"""

# First, before any module of ours imports transformers (which imports tqdm.auto): the progress
# bar's one warning filter (see progress.py).
from ragen_lib import progress as _progress  # noqa: F401

__version__ = "0.1.0"
