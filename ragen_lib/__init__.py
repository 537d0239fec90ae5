"""ragen_lib: the small library behind the RAGEN / StarPO / A*-PO replication notebooks.

Training-path modules (envs, prompting, models, generation, rollout) import no notebook or
plotting library, so they run on a bare GPU host.
"""

__version__ = "0.1.0"
