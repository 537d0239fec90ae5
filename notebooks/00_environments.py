# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · The environments, their floor and ceiling, and the prompt the model sees
#
# Every env rendered at reset and its scripted expert solving one episode; per env, the success
# of a uniformly random policy (the floor) and of the expert within the action budget (the
# ceiling), against which every later success curve is read; the difficulty of the Sokoban
# levels; the exact chat the model receives (RAGEN's prompt, ending with the `<think>` prefill);
# and one multi-turn rollout of the model (the embedded SmolLM2-135M-Instruct outside the smoke
# profile). The envs and prompts follow RAGEN's released code (commit 385bc30); every difference
# is listed in `docs/FIDELITY.md`.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: $RAGEN_PROFILE, else quick with CUDA, else smoke
seed = 0
reference_states = 256  # validation states the floor and ceiling are computed on

# %%
import numpy as np
import pandas as pd

from ragen_lib import baselines, experiments, models, seeds
from ragen_lib.config import RolloutConfig
from ragen_lib.envs import make
from ragen_lib.rollout import Episode, collect

experiments.check_parameters()  # a misspelt papermill -p name stops here (papermill only warns)
seed = experiments.check_int("seed", seed, 0)
reference_states = experiments.check_int("reference_states", reference_states, 1)
profile = profile or experiments.default_profile()
model_name = experiments.load_profile(profile)["overrides"].get("model.name")
ENVS = ["bandit", "bandit-rev", "sokoban", "sokoban-large", "sokoban-newvocab", "frozenlake", "webshop"]

# %% [markdown]
# ## Each env at reset, and its expert playing one episode

# %%
# NBVAL_CHECK_OUTPUT
for name in ENVS:
    env = make(name)
    obs, _ = env.reset(seed=seed)
    total, steps, done = 0.0, [], False
    while not done and len(steps) < 30:
        action = env.expert_action()
        obs, r, term, trunc, info = env.step(action)
        total, done = total + r, term or trunc
        steps.append(action)
    print(f"== {name}: expert {' '.join(steps)} -> reward {total:+.2f}, success {info['success']}")

# %% [markdown]
# ## Floor and ceiling: random policy and expert within the action budget
#
# Exact where it can be (Sokoban: the probability that uniformly random actions solve the level
# within the budget, and whether the shortest solution fits it; FrozenLake: dynamic programming
# with the slips for a random and the optimal policy; Bandit: one arm in two), Monte Carlo for
# WebShop-lite. `ragen_lib.baselines.reference_success(env)` returns these numbers, so figures can
# draw them as reference lines. RAGEN's own generators give, on seeds 0..999: Sokoban 0.179 /
# 0.998, LargerSokoban 0.026 / 0.991, SokobanDifferentGridVocab 0.180 / 0.999, FrozenLake 0.215 /
# 0.499 (random / expert; `docs/FIDELITY.md`).

# %%
# NBVAL_CHECK_OUTPUT
rows = []
for name in ENVS:
    ref = baselines.reference_success(name, n=reference_states)
    rows.append(
        {
            "env": name,
            "actions": ref["actions"],
            "random": f"{ref['random']:.3f} ± {ref['random_se']:.3f}",
            "expert": f"{ref['expert']:.3f} ± {ref['expert_se']:.3f}",
            "random policy": ref["random_method"],
        }
    )
print(pd.DataFrame(rows).to_string(index=False))

# %% [markdown]
# ## How hard the Sokoban levels are: shortest solutions

# %%
# NBVAL_CHECK_OUTPUT
for name in ["sokoban", "sokoban-large", "sokoban-newvocab"]:
    lengths = np.array(baselines.shortest_solutions(name, seeds.val_seeds(name, reference_states)))
    counts = np.bincount(lengths, minlength=13)[1:13]
    print(
        f"{name:17s} mean {lengths.mean():.2f} ± {lengths.std(ddof=1) / np.sqrt(len(lengths)):.2f}, "
        f"moves 1..12: {' '.join(map(str, counts))}"
    )

# %% [markdown]
# ## The prompt of the first turn, through the tokenizer's chat template
#
# The generation prompt ends with `<think>`: the model continues inside the reasoning block, and
# the rollout puts `<think>` back in front of its text before parsing (as RAGEN does). Bandit has
# no separate instructions: the game is the state.

# %%
# NBVAL_CHECK_OUTPUT
model, tok = models.load(model_name)
for name in ["sokoban", "bandit"]:
    print(f"===== {name}")
    print(Episode(make(name), seed, RolloutConfig()).generation_prompt(tok))

# %% [markdown]
# ## One multi-turn rollout of the model

# %%
batch = collect(
    model, tok, "sokoban", seeds=[seed], group_size=1, cfg=RolloutConfig(max_new_tokens=100), sample_seed=seed
)
print(batch.transcript(0))
print(f"format-valid rate {batch.format_valid_rate:.2f}")
