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
# # 00 · The environments, their experts, and the prompt the model sees
#
# Every env rendered at reset, its scripted expert solving one episode, the exact chat the
# model receives, and one multi-turn rollout of the model (the embedded SmolLM2-135M-Instruct
# outside the smoke profile). Zero-shot the embedded model answers in the
# `<think>…</think><answer>…</answer>` format about once in 16 tries, so expect format penalties.

# %% tags=["parameters"]
profile = None  # smoke | quick | paper; None: quick with CUDA, else smoke
seed = 0

# %%
from ragen_lib import experiments, models
from ragen_lib.config import RolloutConfig
from ragen_lib.envs import make
from ragen_lib.rollout import Episode, collect

profile = profile or experiments.default_profile()
model_name = experiments.load_profile(profile)["overrides"].get("model.name")

# %% [markdown]
# ## Each env at reset, and its expert playing one episode

# %%
# NBVAL_CHECK_OUTPUT
for name in ["bandit", "bandit-rev", "sokoban", "sokoban-large", "sokoban-newvocab", "frozenlake", "webshop"]:
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
# ## The prompt of the first turn (Sokoban), through the tokenizer's chat template

# %%
# NBVAL_CHECK_OUTPUT
model, tok = models.load(model_name)
episode = Episode(make("sokoban"), seed, RolloutConfig())
print(tok.apply_chat_template(episode.messages, tokenize=False, add_generation_prompt=True))

# %% [markdown]
# ## One multi-turn rollout of the model

# %%
batch = collect(
    model, tok, "sokoban", seeds=[seed], group_size=1, cfg=RolloutConfig(max_new_tokens=100), sample_seed=seed
)
print(batch.transcript(0))
print(f"format-valid rate {batch.format_valid_rate:.2f}")
