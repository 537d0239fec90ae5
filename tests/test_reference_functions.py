"""Our losses and advantages against the reference code's own outputs on the same inputs.

`tests/data/reference_functions.json` holds seeded float64 inputs and what verl 797f999, RAGEN
385bc30 and A-PO c8823a3 computed from them (their functions run outside the project; see its
"about"). Where we differ on purpose (FIDELITY D12: population variance in the whitening) the test
asserts the documented relation, so a change of convention fails here as surely as a bug.
"""

import json
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from ragen_lib import algorithms as A
from ragen_lib.config import AlgoConfig
from tests.conftest import advantage_inputs

REF = json.loads((Path(__file__).parent / "data" / "reference_functions.json").read_text())


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def unbiased_over_population(mask: torch.Tensor) -> float:
    """verl whitens with the unbiased variance, we with the population one (D12): on the same
    advantages ours are larger by sqrt(n / (n − 1)), n the loss tokens of the batch."""
    n = float(mask.sum())
    return math.sqrt(n / (n - 1))


@pytest.mark.parametrize("case", range(len(REF["gae"]["cases"])))
def test_starpo_ppo_advantages_are_verls_gae_with_the_kl_reward_whitened_over_the_loss_mask(case):
    # RAGEN's layout: left pads, the system prompt, then the paper's loss mask to the last token,
    # the trajectory score on the last one and −0.001·k1 on every loss token (apply_kl_penalty).
    g, c = REF["gae"], REF["gae"]["cases"][case]
    mask, values = t(g["mask"]), t(g["values"])
    k1 = A.kl_penalty(t(REF["kl"]["logp"]), t(REF["kl"]["ref_logp"]), "k1") * mask
    scores = t(g["token_rewards"]) + 0.001 * k1  # the score alone, the KL term taken back out
    algo = AlgoConfig(name="starpo-ppo", gamma=c["gamma"], lam=c["lam"])
    assert algo.kl_coef == 0.001 and algo.kl_in_reward  # RAGEN's USE_BASE PPO settings

    adv, returns = A.ADVANTAGE_ESTIMATORS["gae"](
        advantage_inputs(mask, token_rewards=scores, values=values, kl=k1), algo
    )

    assert_close(adv, t(c["advantages"]) * unbiased_over_population(mask) * mask, rtol=1e-7, atol=1e-8)
    assert_close(returns, t(c["returns"]) * mask, rtol=1e-9, atol=1e-9)


def test_gae_over_a_mask_with_observation_gaps_matches_verl_at_gamma_lambda_one():
    # The response-only mask leaves observation tokens out. We skip them; verl steps through them
    # with their values. With RAGEN's γ = λ = 1 the sums telescope to the same advantage.
    g = REF["gae"]["gapped"]
    mask = t(g["mask"])
    adv, returns = A.gae(t(g["token_rewards"]), t(g["values"]), mask, gamma=1.0, lam=1.0)
    whitened = A.masked_whiten(adv, mask) * mask
    assert_close(whitened, t(g["advantages"]) * unbiased_over_population(mask) * mask, rtol=1e-7, atol=1e-8)
    assert_close(returns, t(g["returns"]) * mask, rtol=1e-9, atol=1e-9)


def test_starpo_grpo_advantages_are_ragens_group_normalised_score_with_the_format_penalty():
    # RAGEN adds the format penalty to the score, normalises each group (mean_std: unbiased std
    # + 1e-6, a constant group → 0), and verl's GRPO over unique uids passes that through to every
    # loss token. Our trajectory reward already holds the penalty.
    s = REF["scores"]
    rewards = t(s["scores"]) + t(s["penalty"])
    mask = torch.ones(len(rewards), 3, dtype=torch.float64)
    x = advantage_inputs(mask, rewards=rewards, group_size=s["group_size"])
    adv, _ = A.ADVANTAGE_ESTIMATORS["grpo"](x, AlgoConfig(name="starpo-grpo"))
    expected = t(s["mean_std"]["grpo_advantage"])
    assert_close(adv, expected[:, None].expand_as(mask), rtol=1e-5, atol=1e-5)  # RAGEN's sums are fp32


def test_policy_loss_is_ragens_clip_higher_loss_and_its_clip_fraction_is_ours_low_plus_high():
    p = REF["policy_loss"]
    loss, stats = A.clipped_policy_loss(
        t(p["logp"]), t(p["old_logp"]), t(p["advantages"]), t(p["mask"]), p["clip_low"], p["clip_high"]
    )
    assert_close(loss, t(p["pg_loss"]), rtol=1e-9, atol=1e-12)
    assert 0 < p["pg_clipfrac"] < 1  # the inputs reach both clips, so the split below is tested
    assert stats["clip_frac_low"] > 0 and stats["clip_frac_high"] > 0
    assert_close(stats["clip_frac_low"] + stats["clip_frac_high"], t(p["pg_clipfrac"]), rtol=1e-9, atol=1e-9)


def test_value_loss_is_verls():
    v = REF["value_loss"]
    loss = A.clipped_value_loss(t(v["vpreds"]), t(v["values"]), t(v["returns"]), t(v["mask"]), clip=v["clip"])
    assert 0 < v["vf_clipfrac"] < 1  # some tokens take the clipped term
    assert_close(loss, t(v["vf_loss"]), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("verl_name, ours", [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")])
def test_kl_estimators_are_verls(verl_name, ours):
    k = REF["kl"]
    assert_close(A.kl_penalty(t(k["logp"]), t(k["ref_logp"]), ours), t(k[verl_name]), rtol=1e-12, atol=1e-12)


def test_entropy_and_logprobs_from_logits_are_verls():
    lg = REF["logits"]
    logits = t(lg["logits"])
    assert_close(A.entropy_from_logits(logits), t(lg["entropy"]), rtol=1e-12, atol=1e-12)
    labels = torch.tensor(lg["labels"])
    assert_close(A.gather_logprobs(logits, labels), t(lg["logprobs"]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("beta2, key", [(1e-3, "loss"), (0.5, "loss_beta2_0.5")])
def test_apo_stage_two_loss_is_a_pos(beta2, key):
    # A-PO sums each sequence's response log-probs and rewards over the response mask.
    a = REF["apo_loss"]
    mask = t(a["attention_mask"])[:, -a["response_length"] :]
    loss, _ = A.apo_loss(
        A.sequence_logprob(t(a["logp"]), mask),
        A.sequence_logprob(t(a["ref_logp"]), mask),
        (t(a["token_rewards"]) * mask).sum(1),
        t(a["v_star"]),
        beta2=beta2,
    )
    assert_close(loss, t(a[key]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("beta1", ["0.5", "2.0"])
def test_apo_v_star_is_a_pos(beta1):
    v = REF["v_star"]
    assert_close(A.apo_v_star(t(v["eval"]), beta1=float(beta1)), t(v[beta1]), rtol=1e-12, atol=1e-12)


def test_ragens_grpo_filter_order_is_the_raw_order_on_bandit_and_mostly_rounding_on_sokoban():
    """FIDELITY D8's numbers, from scripts/filter_order.py on fewer draws: RAGEN's GRPO filter ranks
    groups by s/(s + 1e-6) in float32, which keeps the raw-std groups when s is small (Bandit) and
    hardly better than chance when s is large (Sokoban). A change that made D8's wording wrong fails."""
    import re
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "filter_order.py"
    out = subprocess.run(
        [sys.executable, str(script), "--trials", "400"], capture_output=True, text=True, check=True
    ).stdout
    kept = {m[0]: float(m[1]) for m in re.findall(r"^(\w+) .* same groups kept in ([\d.]+)%", out, re.M)}
    assert set(kept) == {"bandit", "frozenlake", "sokoban"}, out
    assert (
        kept["bandit"] > 80 and kept["sokoban"] < 40 and kept["bandit"] > kept["frozenlake"] > kept["sokoban"]
    )
