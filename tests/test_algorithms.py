"""Every loss and advantage against values worked out by hand (arithmetic in the comments)."""

import math

import pytest
import torch
from torch.testing import assert_close

from ragen_lib import algorithms as A
from tests.conftest import advantage_inputs


def t(*x):
    return torch.tensor(x, dtype=torch.float)


# --- GAE -------------------------------------------------------------------------------------
def test_gae_skips_observation_tokens_by_hand():
    # mask [0,1,1,0,1], reward 1 on the last policy token, values at policy tokens .5 .2 .4
    # γ = λ = 1: A_4 = 1 − .4 = .6; A_2 = (0 + .4 − .2) + .6 = .8; A_1 = (0 + .2 − .5) + .8 = .5
    mask = t(0, 1, 1, 0, 1)[None]
    rewards = t(0, 0, 0, 0, 1)[None]
    values = t(9, 0.5, 0.2, 9, 0.4)[None]  # 9s sit on observation tokens and must be ignored
    adv, ret = A.gae(rewards, values, mask)
    assert_close(adv, t(0, 0.5, 0.8, 0, 0.6)[None])
    assert_close(ret, t(0, 1.0, 1.0, 0, 1.0)[None])  # returns = A + V = 1 everywhere (γ = 1)


def test_gae_discount_by_hand():
    # two policy tokens, γ = .5, λ = .5, V = (1, 2), r = (0, 4):
    # δ_2 = 4 − 2 = 2; δ_1 = 0 + .5·2 − 1 = 0; A_2 = 2; A_1 = 0 + .25·2 = .5
    adv, _ = A.gae(t(0, 4)[None], t(1, 2)[None], t(1, 1)[None], gamma=0.5, lam=0.5)
    assert_close(adv, t(0.5, 2)[None])


def _gae_loop(r, v, m, gamma, lam):
    out = torch.zeros_like(v)
    for b in range(v.shape[0]):
        idx = [i for i in range(v.shape[1]) if m[b, i] > 0]
        run = 0.0
        for j in reversed(range(len(idx))):
            i = idx[j]
            nv = v[b, idx[j + 1]] if j + 1 < len(idx) else 0.0
            run = r[b, i] + gamma * nv - v[b, i] + gamma * lam * run
            out[b, i] = run
    return out


@pytest.mark.parametrize("gamma, lam", [(1, 1), (0.9, 0.95), (0.5, 0)])
def test_gae_matches_plain_loop(gamma, lam):
    g = torch.Generator().manual_seed(0)
    m = (torch.rand(4, 12, generator=g) > 0.4).float()
    r = torch.randn(4, 12, generator=g) * m
    v = torch.randn(4, 12, generator=g)
    assert_close(A.gae(r, v, m, gamma, lam)[0], _gae_loop(r, v, m, gamma, lam))


def test_whiten_over_mask_only():
    # masked entries 1, 3 → mean 2, population std 1 → −1, 1; the 100 is ignored
    out = A.masked_whiten(t(1, 100, 3)[None], t(1, 0, 1)[None])
    assert_close(out[0, [0, 2]], t(-1, 1), atol=1e-6, rtol=0)


# --- GRPO ------------------------------------------------------------------------------------
def test_grpo_by_hand():
    # group 1: (1, 0, 0, 1) mean .5, unbiased std sqrt(1/3) = .57735 → ±.866; group 2 constant → 0
    adv = A.grpo_advantages(t(1, 0, 0, 1, 2, 2, 2, 2), 4, eps=0)
    s = 0.5 / math.sqrt(1 / 3)
    assert_close(adv[:4], t(s, -s, -s, s))
    assert torch.isfinite(A.grpo_advantages(t(2, 2, 2, 2), 4)).all()
    assert_close(A.grpo_advantages(t(1, 3), 2, scale=False), t(-1, 1))  # mean only
    with pytest.raises(ValueError, match="groups of 3"):
        A.grpo_advantages(t(1, 2, 3, 4), 3)


def test_a_constant_float32_group_gets_exactly_zero_as_in_ragen():
    # Eight 0.9s in float32: mean and unbiased std are off by rounding (std ~6e-8), and before the
    # guard (RAGEN ctx_manager.py:169: std <= 1e-6 -> 0) that became advantages of about ±0.056.
    for v in (0.9, -0.1, -0.3, 0.7):
        for n in (8, 11, 16, 32):
            assert A.grpo_advantages(torch.full((n,), v), n).abs().max().item() == 0.0, (v, n)
    # A group just above the threshold is normalised as before: (0, 2e-6) -> unbiased std 1.41e-6.
    adv = A.grpo_advantages(torch.tensor([0.0, 2e-6], dtype=torch.float64), 2)
    s = math.sqrt(2) * 1e-6
    assert_close(adv, torch.tensor([-1e-6 / (s + 1e-6), 1e-6 / (s + 1e-6)], dtype=torch.float64))


def test_z_scores_of_constant_float32_rewards_are_exactly_zero():
    # 64 rewards of 0.9: float32's std is rounding (~1e-8), which over eps 1e-8 gave z = ±0.86;
    # eight -0.1s per group gave ±0.43. Constant means no signal: 0, in the batch and per group.
    assert A.zscore(torch.full((64,), 0.9)).abs().max().item() == 0.0
    env = torch.cat([torch.full((8,), -0.1), t(0, 1, 0, 1, 0, 1, 0, 1)])
    mixed = A.mix_reasoning_advantage(env, torch.full((16,), 0.3), 8, lam=0.4)
    assert mixed[:8].abs().max().item() == 0.0
    z = 0.5 / math.sqrt(8 * 0.25 / 7)  # (r − .5) / unbiased std
    assert_close(mixed[8:], t(-z, z, -z, z, -z, z, -z, z), atol=1e-5, rtol=0)
    assert A.zscore(torch.zeros(0)).numel() == 0


def test_group_reward_std_is_exactly_zero_for_equal_rewards_and_the_filter_keeps_its_ties_stable():
    # Groups of 8 in float32: all 0.9 (std 6e-8 by rounding), all -0.1 (7e-9), and one that varies.
    r = torch.cat([torch.full((8,), 0.9), torch.full((8,), -0.1), t(0, 1, 0, 1, 0, 1, 0, 1)])
    std = A.group_reward_std(r, 8)
    assert std[:2].tolist() == [0.0, 0.0] and std[2].item() == pytest.approx(0.5)
    # top 2 of 3: the varying group, then the lower-index constant one (not the one whose reward
    # rounds to the larger std); bottom 1: the first constant group.
    assert A.select_groups(r, 8, 2 / 3).tolist() == [0, 2]
    assert A.select_groups(torch.cat([r[8:16], r[:8], r[16:]]), 8, 2 / 3).tolist() == [0, 2]
    assert A.select_groups(r, 8, 1 / 3, mode="bottom").tolist() == [0]


# --- PPO clipped loss --------------------------------------------------------------------------
def test_policy_loss_at_ratio_one_is_minus_mean_advantage_and_gradient():
    logp = torch.zeros(1, 3, requires_grad=True)
    adv, mask = t(1, -2, 5)[None], t(1, 1, 0)[None]
    loss, stats = A.clipped_policy_loss(logp, torch.zeros(1, 3), adv, mask)
    assert_close(loss, torch.tensor(0.5))  # −(1 − 2)/2
    loss.backward()
    assert_close(logp.grad, t(-0.5, 1, 0)[None])  # −A/n on policy tokens, 0 elsewhere
    assert float(stats["clip_frac_low"]) == float(stats["clip_frac_high"]) == 0


def test_clip_higher_caps_positive_advantage_and_kills_its_gradient():
    logp = torch.log(t(1.5))[None].requires_grad_()
    loss, stats = A.clipped_policy_loss(logp, torch.zeros(1, 1), t(2)[None], t(1)[None], clip_high=0.28)
    assert_close(loss, torch.tensor(-1.28 * 2))
    loss.backward()
    assert float(logp.grad) == 0 and float(stats["clip_frac_high"]) == 1


def test_decoupled_clips_hit_different_tokens():
    # ratios .7, 1.25, 1.25 with advantages −1, +1, +1; clip_low .2 (bound .8), clip_high .28 (1.28)
    # token 1: ρ < .8 and A < 0 → clipped low, loss −min(−.7, −.8) = .8
    # tokens 2, 3: ρ = 1.25 < 1.28 → not clipped, loss −1.25 each → mean (.8 − 2.5)/3
    logp = torch.log(t(0.7, 1.25, 1.25))[None]
    loss, s = A.clipped_policy_loss(
        logp, torch.zeros(1, 3), t(-1, 1, 1)[None], torch.ones(1, 3), clip_low=0.2, clip_high=0.28
    )
    assert_close(loss, torch.tensor((0.8 - 2.5) / 3))
    assert_close(s["clip_frac_low"], torch.tensor(1 / 3))
    assert float(s["clip_frac_high"]) == 0
    loss2, s2 = A.clipped_policy_loss(logp, torch.zeros(1, 3), t(-1, 1, 1)[None], torch.ones(1, 3))
    assert_close(s2["clip_frac_high"], torch.tensor(2 / 3))  # symmetric .2 clips them


def test_seq_mean_token_mean_aggregation():
    # row 1: tokens with A 1, 1 → −1; row 2: one token A 4 → −4; seq-mean −2.5, token-mean −2
    logp = torch.zeros(2, 2)
    adv, mask = t(1, 1, 4, 0).view(2, 2), t(1, 1, 1, 0).view(2, 2)
    assert_close(
        A.clipped_policy_loss(logp, logp, adv, mask, agg="seq-mean-token-mean")[0], torch.tensor(-2.5)
    )
    assert_close(A.clipped_policy_loss(logp, logp, adv, mask)[0], torch.tensor(-2.0))
    # a row with no token is no sequence: it counted as a loss of 0 (−5 / 3 instead of −2.5)
    logp3, adv3, mask3 = torch.zeros(3, 2), torch.cat([adv, t(9, 9)[None]]), torch.cat([mask, t(0, 0)[None]])
    assert_close(
        A.clipped_policy_loss(logp3, logp3, adv3, mask3, agg="seq-mean-token-mean")[0], torch.tensor(-2.5)
    )


def test_value_loss_clip_by_hand():
    # old .0, new 1.0, return 2, clip .5: unclipped (1−2)² = 1, clipped (.5−2)² = 2.25 → .5·2.25
    loss = A.clipped_value_loss(t(1)[None], t(0)[None], t(2)[None], t(1)[None], clip=0.5)
    assert_close(loss, torch.tensor(1.125))


# --- KL, entropy, log-probs ------------------------------------------------------------------
def test_kl_estimators_by_hand():
    # d = log π − log π_ref = ln 2: k1 = .6931, k2 = .2402, k3 = 1/2 − 1 + .6931 = .1931
    lp, ref = torch.log(t(0.5)), torch.log(t(0.25))
    assert_close(A.kl_penalty(lp, ref, "k1"), torch.log(t(2)))
    assert_close(A.kl_penalty(lp, ref, "k2"), 0.5 * torch.log(t(2)) ** 2)
    assert_close(A.kl_penalty(lp, ref, "k3"), t(0.5 - 1 + math.log(2)))
    # d = −3: exp(3) + (−3) − 1 = 16.09, clamped at 10 as verl's low_var_kl; d = −2: 4.39, kept
    far = A.kl_penalty(t([[-3.0, -2.0]]), t([[0.0, 0.0]]), "k3")
    assert_close(far, t([[10.0, math.exp(2) - 3]]))
    with pytest.raises(ValueError, match="k3"):
        A.kl_penalty(lp, ref, "k4")


def test_k1_and_k3_average_to_the_true_kl():
    p, q = t(0.7, 0.3), t(0.4, 0.6)
    true = float((p * (p / q).log()).sum())
    x = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    lp, lq = p.log()[x], q.log()[x]
    k3 = A.kl_penalty(lp, lq, "k3")
    assert (k3 >= 0).all()
    assert float(A.kl_penalty(lp, lq, "k1").mean()) == pytest.approx(true, abs=0.01)
    assert float(k3.mean()) == pytest.approx(true, abs=0.01)


def test_entropy_uniform_and_onehot():
    assert_close(A.entropy_from_logits(torch.zeros(3, 8)), torch.full((3,), math.log(8)))
    assert float(A.entropy_from_logits(t(0, -1e4, -1e4))) == pytest.approx(0, abs=1e-6)


def test_token_logprobs_match_loop():
    g = torch.Generator().manual_seed(1)
    logits, ids = torch.randn(2, 5, 7, generator=g), torch.randint(0, 7, (2, 5), generator=g)
    out = A.token_logprobs(logits, ids)
    for b in range(2):
        assert out[b, 0] == 0
        for i in range(1, 5):
            assert_close(out[b, i], torch.log_softmax(logits[b, i - 1], -1)[ids[b, i]])


# --- the uncertainty filter -----------------------------------------------------------------
def test_select_groups_top_bottom_random():
    # group stds (population): g0 (0,0) 0; g1 (0,1) .5; g2 (0,4) 2; g3 (1,1) 0
    r = t(0, 0, 0, 1, 0, 4, 1, 1)
    assert A.select_groups(r, 2, 0.5).tolist() == [1, 2]
    assert A.select_groups(r, 2, 0.25).tolist() == [2]
    assert A.select_groups(r, 2, 0.5, mode="bottom").tolist() == [0, 3]  # tie → lower index first
    assert A.select_groups(r, 2, 0.75).tolist() == [0, 1, 2]  # of the zero-std pair, g0 stays
    rnd = A.select_groups(r, 2, 0.5, mode="random", generator=torch.Generator().manual_seed(0))
    assert len(rnd) == 2 and rnd.tolist() == sorted(rnd.tolist())
    assert A.select_groups(r, 2, 0.01).numel() == 1  # at least one group
    # k = round(keep · P), not RAGEN's int() (docs/FIDELITY.md D9): 0.7 · 5 = 3.5 keeps 4 (int: 3)
    assert A.select_groups(t(0, 0, 0, 1, 0, 4, 1, 1, 0, 2), 2, 0.7).numel() == 4
    assert A.expand_group_mask(torch.tensor([1]), 4, 2).tolist() == [False, False, True, True] + [False] * 4
    with pytest.raises(ValueError, match="keep_fraction"):
        A.select_groups(r, 2, 0)


# --- A*-PO -----------------------------------------------------------------------------------
def test_v_star_by_hand_and_limits():
    # r = (0, 1), β1 = 1: ln((1 + e)/2) = .6201
    assert_close(A.apo_v_star(t(0, 1)[None], beta1=1.0), t(math.log((1 + math.e) / 2)))
    r = t(0, 0.2, 1, 0.5)[None]
    assert float(A.apo_v_star(r, beta1=1e-3)) == pytest.approx(1, abs=1e-2)  # → max
    assert float(A.apo_v_star(r, beta1=1e4)) == pytest.approx(0.425, abs=1e-3)  # → mean
    v = float(A.apo_v_star(r, beta1=0.5))
    assert 0.425 < v < 1


def test_apo_loss_by_hand_and_gradient_sign():
    # β2 = .1, log-ratio 2 → .2; r − V* = 1 − .5 = .5; residual −.3 → loss .09
    lp = t(2.0).requires_grad_()
    loss, stats = A.apo_loss(lp, t(0.0), t(1.0), t(0.5), beta2=0.1)
    assert_close(loss, torch.tensor(0.09))
    loss.backward()
    assert float(lp.grad) < 0  # descending the loss raises log π when r > V* + β2·log-ratio
    assert_close(A.sequence_logprob(t(1, 2, 3)[None], t(0, 1, 1)[None]), t(5))


def test_mix_reasoning_advantage_by_hand():
    # A pair's GRPO advantage is ±(1/2) / (unbiased std 1/√2) = ±1/√2 whatever its spread:
    # env (0, 1) and reasoning (0, .2), λ = .4 → ±1.4/√2.
    h = 1 / math.sqrt(2)
    assert_close(A.mix_reasoning_advantage(t(0, 1), t(0, 0.2), 2), t(-1.4 * h, 1.4 * h), atol=1e-5, rtol=0)
    # (0, 1 | 5, 5) → (−1/√2, 1/√2 | 0, 0); a constant bonus adds 0
    mixed = A.mix_reasoning_advantage(t(0, 1, 5, 5), t(0.1, 0.1, 0.1, 0.1), 2)
    assert_close(mixed, t(-h, h, 0, 0), atol=1e-5, rtol=0)
    # grpo_scale off (Dr. GRPO) centres both terms: (−.5, .5) + .4·(−.1, .1)
    centred = A.mix_reasoning_advantage(t(0, 1), t(0, 0.2), 2, scale=False)
    assert_close(centred, t(-0.54, 0.54), atol=1e-6, rtol=0)


def test_the_reasoning_bonus_leaves_grpos_env_term_as_the_arm_without_it():
    # WebShop's λ = 0.4 arm against its λ = 0 arm: the env term must be the same numbers, or the arms
    # differ by a normalisation too. A population-std z-score gave sqrt(8/7) = 1.069x the λ = 0
    # advantage for any λ > 0 (and dropped grpo_scale=False).
    env, bonus = t(0, 1, 0, 1, 0, 0, 0, 1), t(0.2, 0.1, 0, 0.2, 0.1, 0, 0.2, 0)
    for scale in (True, False):
        without = A.grpo_advantages(env, 8, scale=scale)
        assert torch.equal(A.mix_reasoning_advantage(env, bonus, 8, lam=0.0, scale=scale), without)
        tiny = A.mix_reasoning_advantage(env, bonus, 8, lam=1e-9, scale=scale)
        assert_close(tiny, without, atol=1e-8, rtol=0)
        assert_close(
            A.mix_reasoning_advantage(env, bonus, 8, lam=0.4, scale=scale) - without,
            0.4 * A.grpo_advantages(bonus, 8, scale=scale),
        )


# --- edge cases and extra hand checks ------------------------------------------------------------
def test_masked_mean_dims_and_empty_mask():
    x, m = t(1, 2, 3, 4).view(2, 2), t(1, 1, 0, 0).view(2, 2)
    assert_close(A.masked_mean(x, m), torch.tensor(1.5))  # (1 + 2)/2
    assert_close(A.masked_mean(x, m, dim=1), t(1.5, 0))  # row 2 empty → 0, not NaN
    assert_close(A.masked_mean(x, torch.zeros(2, 2)), torch.tensor(0.0))


def test_whiten_without_mean_shift():
    # masked 1, 3: mean 2, std 1 → whitened −1, 1; shift_mean=False adds the mean back → 1, 3
    out = A.masked_whiten(t(1, 100, 3)[None], t(1, 0, 1)[None], shift_mean=False)
    assert_close(out[0, [0, 2]], t(1, 3), atol=1e-6, rtol=0)


def test_gae_returns_and_empty_rows_match_loop():
    g = torch.Generator().manual_seed(3)
    m = (torch.rand(3, 9, generator=g) > 0.5).float()
    m[1] = 0  # a row with no policy tokens
    r, v = torch.randn(3, 9, generator=g) * m, torch.randn(3, 9, generator=g)
    adv, ret = A.gae(r, v, m, gamma=0.95, lam=0.9)
    ref = _gae_loop(r, v, m, 0.95, 0.9)
    assert_close(adv, ref)
    assert_close(ret, (ref + v) * m)
    assert (adv[1] == 0).all() and (ret[1] == 0).all()


def test_grpo_edge_cases():
    # group of 1: std taken as 0, so the advantage is (r − r)/(0 + eps) = 0, never NaN
    assert_close(A.grpo_advantages(t(3, 5), 1), t(0, 0))
    with pytest.raises(ValueError, match="divisible"):
        A.grpo_advantages(t(1, 2, 3), 2)


@pytest.mark.parametrize("reward", [10.9, 10.7, 1000.1, 0.9, -0.1])
def test_a_group_of_equal_rewards_gets_zero_whatever_its_size(reward):
    # Eight equal float32 10.9s (a Sokoban success): the mean is one ulp off and, as one group (a
    # batch of one: groups=1 fails on the old code), the unbiased std 1.02e-6 passes RAGEN's 1e-6
    # threshold, and (r − mean)/(std + 1e-6) gave all eight −0.47, a push down on the best outcome
    # whose sign was rounding's (over several groups the CPU's std is exactly 0; a GPU's may not
    # be). Equal rewards: nothing to prefer.
    for groups in (1, 2, 3):
        for n in (2, 4, 8, 16):
            rewards = torch.full((groups * n,), reward)
            assert torch.equal(A.grpo_advantages(rewards, n), torch.zeros(groups * n)), (groups, n)


def test_policy_loss_broadcasts_sequence_advantages_and_approx_kl():
    # ρ = (2, .5) on one row, A = 1 (broadcast): clip at .8/1.2 → −min(2, 1.2) = −1.2, −min(.5, .8) = −.5
    # loss −(1.2 + .5)/2 = −.85; k3 = ((2 − 1) − ln 2 + (.5 − 1) − ln .5)/2 = (1 − .5)/2 = .25
    logp = torch.log(t(2, 0.5))[None]
    loss, s = A.clipped_policy_loss(logp, torch.zeros(1, 2), t(1), torch.ones(1, 2))
    assert_close(loss, torch.tensor(-0.85))
    assert_close(s["approx_kl"], torch.tensor(0.25))
    assert_close(s["ratio_mean"], torch.tensor(1.25))
    assert_close(s["clip_frac_high"], torch.tensor(0.5))
    assert float(s["clip_frac_low"]) == 0  # ρ = .5 < .8 but A > 0: the min keeps ρ·A, no clip
    with pytest.raises(ValueError, match="token-mean"):
        A.clipped_policy_loss(logp, logp, t(1), torch.ones(1, 2), agg="sum")


def test_value_loss_takes_the_larger_term_per_token():
    # old 0, new .9, return 2, clip .5: (.9 − 2)² = 1.21, clipped (.5 − 2)² = 2.25 → .5·2.25
    # old 0, new 3, return 2: (3 − 2)² = 1, clipped (.5 − 2)² = 2.25 → max 2.25 too;
    # old 0, new −1, return −2: (−1 + 2)² = 1, clipped (−.5 + 2)² = 2.25; mask drops a 4th token
    loss = A.clipped_value_loss(
        t(0.9, 3, -1, 7)[None], torch.zeros(1, 4), t(2, 2, -2, 0)[None], t(1, 1, 1, 0)[None], clip=0.5
    )
    assert_close(loss, torch.tensor(1.125))
    # inside the clip range the loss is plain ½(v − R)²: v .2 (old 0), R 1 → ½·.64 = .32
    assert_close(A.clipped_value_loss(t(0.2)[None], t(0)[None], t(1)[None], t(1)[None]), torch.tensor(0.32))


def test_entropy_with_masked_vocabulary_is_finite():
    # two live logits equal, two −inf: entropy of a fair coin = ln 2
    z = t(0.0, 0.0, -math.inf, -math.inf).requires_grad_()
    h = A.entropy_from_logits(z)
    assert_close(h, torch.tensor(math.log(2)))
    # and its gradient: a fair coin is entropy's maximum, so 0 on the live logits, 0 on the masked
    # (a product masked after the fact sent NaN to all four through softmax)
    h.backward()
    assert torch.equal(z.grad, torch.zeros(4))
    z = t(1.0, 0.0, -math.inf).requires_grad_()
    A.entropy_from_logits(z).backward()
    p = torch.softmax(t(1.0, 0.0), -1)
    hand = -p * (torch.log(p) + A.entropy_from_logits(t(1.0, 0.0)))  # dH/dz_i = −p_i (log p_i + H)
    assert_close(z.grad[:2], hand)
    assert z.grad[2] == 0


def test_select_groups_ties_random_and_errors():
    # stds: g0 .5, g1 .5, g2 0, g3 .5 → top-2 picks the lower-indexed tied pair g0, g1
    r = t(0, 1, 2, 3, 5, 5, 7, 8)
    assert A.select_groups(r, 2, 0.5).tolist() == [0, 1]
    assert A.select_groups(r, 2, 0.25, mode="bottom").tolist() == [2]
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = A.select_groups(r, 2, 0.75, mode="random", generator=g1)
    assert a.tolist() == A.select_groups(r, 2, 0.75, mode="random", generator=g2).tolist()  # reproducible
    assert len(set(a.tolist())) == 3 and a.dtype == torch.long  # without replacement
    with pytest.raises(ValueError, match="mode"):
        A.select_groups(r, 2, 0.5, mode="middle")
    with pytest.raises(ValueError, match="divisible"):
        A.select_groups(r, 3, 0.5)
    with pytest.raises(ValueError, match="keep_fraction"):
        A.select_groups(r, 2, 1.5)


def test_v_star_between_min_and_max():
    r = torch.rand(6, 5, generator=torch.Generator().manual_seed(2))
    for beta1 in (1e-2, 0.1, 0.5, 2.0, 50.0):
        v = A.apo_v_star(r, beta1=beta1)
        assert (v <= r.max(1).values + 1e-6).all() and (v >= r.min(1).values - 1e-6).all()
        assert (v >= r.mean(1) - 1e-6).all()  # Jensen: the soft max is at least the mean


def test_apo_gradient_lowers_logp_when_reward_below_v_star():
    # β2 = .1, log-ratio 0; r − V* = 0 − .5 = −.5; residual .5 → loss .25, d/dlogp = 2·.5·.1 = .1 > 0
    lp = t(0.0).requires_grad_()
    loss, s = A.apo_loss(lp, t(0.0), t(0.0), t(0.5), beta2=0.1)
    loss.backward()
    assert_close(loss, torch.tensor(0.25))
    assert_close(lp.grad, t(0.1))  # descent lowers log π
    assert_close(s["apo/adv_mean"], torch.tensor(-0.5))
    assert_close(s["apo/residual_mean"], torch.tensor(0.5))


def test_apo_objective_logs_its_log_ratio_and_residual_by_hand():
    """Two sequences, β2 = .5: token log-probs (−1, −1) and (−2, pad) against reference (−2, −2) and
    (−1, pad) give sequence log-ratios 2 and −1 (mean .5); rewards (1, 0) with targets r − V* = (.5, −1)
    give residuals .5·2 − .5 = .5 and .5·(−1) + 1 = .5 (mean .5); loss mean(.25, .25) = .25, scaled
    by the micro-batch's share of the mini-batch's sequences (1/2)."""
    from types import SimpleNamespace

    from ragen_lib.algorithms.objectives import POLICY_OBJECTIVES

    mb = {
        "loss_mask": t([1, 1], [1, 0]),
        "ref_logp": t([-2, -2], [-1, 0]),
        "rewards": t(1, 0),
        "advantages": t([0.5, 0.5], [-1, -1]),
    }
    logp = t([-1, -1], [-2, 0])
    a = SimpleNamespace(apo_beta2=0.5)
    loss, stats = POLICY_OBJECTIVES["apo"](logp, mb, a, token_share=0.3, seq_share=0.5)
    assert_close(loss, torch.tensor(0.125))
    assert set(stats) == {"policy/apo_log_ratio", "policy/apo_residual"}  # loss/policy carries the loss
    # each statistic weighted by the loss's share too (0.5 of the sequences): the trainer sums them
    assert_close(stats["policy/apo_log_ratio"], torch.tensor(0.5 * 0.5))
    assert_close(stats["policy/apo_residual"], torch.tensor(0.5 * 0.5))


def test_zscore_by_hand():
    # (1, 2, 3): mean 2, population std sqrt(2/3) = .8165 → (−1.2247, 0, 1.2247); constant → 0
    s = 1 / math.sqrt(2 / 3)
    assert_close(A.zscore(t(1, 2, 3)), t(-s, 0, s))
    assert_close(A.zscore(t(4, 4)), t(0, 0))


# --- the objectives and estimators through their registries, by hand --------------------------------
# Each test below pins a number that a plausible slip changes while every earlier test still passes
# (found by planting the slips one at a time: tokens weighed as sequences, the clip bounds swapped,
# Dr. GRPO's unscaled mode lost, the reasoning bonus whitened with the advantages, A*-PO's target
# without its bonus scale, an unstable sort of tied groups, a ratio statistic over masked tokens).
def test_ppo_clip_objective_weighs_its_loss_by_tokens_and_clips_each_side_at_its_own_bound():
    from types import SimpleNamespace

    ppo = A.POLICY_OBJECTIVES["ppo-clip"]
    a = SimpleNamespace(clip_low=0.2, clip_high=0.28)  # StarPO-S's decoupled bounds
    mb = {"old_logp": torch.zeros(1, 3), "advantages": torch.ones(1, 3), "loss_mask": torch.ones(1, 3)}
    # ratio 1, A = 1: the micro-batch's token-mean −1 times its share of the mini-batch's tokens
    loss, _ = ppo(torch.zeros(1, 3), mb, a, token_share=0.75, seq_share=0.5)
    assert_close(loss, torch.tensor(-0.75))
    # ratio 1.25, A = +1: inside [1 − 0.2, 1 + 0.28], so unclipped (−1.25); clip_high 0.2 would cap it
    loss, stats = ppo(torch.log(torch.full((1, 3), 1.25)), mb, a, token_share=1.0, seq_share=1.0)
    assert_close(loss, torch.tensor(-1.25))
    assert float(stats["policy/clip_frac_high"]) == 0.0
    # ratio 0.75, A = −1: below 1 − 0.2 and clipped at 0.8 (clip_low 0.28 would leave 0.75)
    mb_neg = {**mb, "advantages": -torch.ones(1, 3)}
    loss, stats = ppo(torch.log(torch.full((1, 3), 0.75)), mb_neg, a, token_share=1.0, seq_share=1.0)
    assert_close(loss, torch.tensor(0.8))
    assert float(stats["policy/clip_frac_low"]) == 1.0


def test_grpo_estimator_scales_by_the_group_std_only_when_asked():
    from ragen_lib.config import AlgoConfig

    # rewards (0, 2) in one group: r − mean = (−1, 1); RAGEN divides by the unbiased std √2 (scaled),
    # Dr. GRPO does not (grpo_scale false); every token of a row carries its row's value
    x = advantage_inputs(torch.ones(2, 2), rewards=t(0, 2), group_size=2)
    scaled, _ = A.ADVANTAGE_ESTIMATORS["grpo"](x, AlgoConfig(name="starpo-grpo"))
    assert_close(scaled, t(-1, -1, 1, 1).view(2, 2) / math.sqrt(2))
    unscaled, _ = A.ADVANTAGE_ESTIMATORS["grpo"](x, AlgoConfig(name="starpo-grpo", grpo_scale=False))
    assert_close(unscaled, t(-1, -1, 1, 1).view(2, 2))


def test_gae_estimator_adds_the_reasoning_bonus_after_whitening():
    from ragen_lib.config import AlgoConfig

    # one token a row, γ = λ = 1, values 0: GAE is the reward (0, 2), whitened to (−1, 1); the bonus
    # (0, 1) z-scores to (−1, 1) and adds λ = 0.5 of it: (−1.5, 1.5). Added before the whitening it
    # would be whitened away to (−1, 1); z-scored from the rewards it would add nothing.
    x = advantage_inputs(torch.ones(2, 1), token_rewards=t(0, 2)[:, None], reasoning=t(0, 1))
    algo = AlgoConfig(name="starpo-ppo", gamma=1.0, lam=1.0, kl_coef=0.0, reasoning_lambda=0.5)
    adv, _ = A.ADVANTAGE_ESTIMATORS["gae"](x, algo)
    assert_close(adv, t(-1.5, 1.5)[:, None])


def test_apo_estimator_target_is_r_minus_v_star_on_every_token_plus_its_scaled_bonus():
    from ragen_lib.config import AlgoConfig

    # r (1, 0), V* (0.5, 0.5): the target (0.5, −0.5) on every token, the prompt's column 0 too (the
    # objective reads column 0); with λ = 0.5 the bonus z (−1, 1) enters scaled by the targets' std 0.5
    mask = t(0, 1, 0, 1).view(2, 2)
    x = advantage_inputs(mask, rewards=t(1, 0), v_star=t(0.5, 0.5))
    adv, _ = A.ADVANTAGE_ESTIMATORS["apo"](x, AlgoConfig(name="apo"))
    assert_close(adv, t(0.5, 0.5, -0.5, -0.5).view(2, 2))
    x.reasoning = t(0, 1)
    adv, _ = A.ADVANTAGE_ESTIMATORS["apo"](x, AlgoConfig(name="apo", reasoning_lambda=0.5))
    assert_close(adv, t(0.25, 0.25, -0.25, -0.25).view(2, 2))


def test_one_group_of_equal_rewards_has_a_std_of_exactly_zero():
    # a single group (P = 1: a data-parallel rank holding one) is where float32 leaves 6e-8 for 0.9s
    assert A.group_reward_std(torch.full((8,), 0.9), 8).tolist() == [0.0]


def test_tied_groups_keep_the_lower_index_however_many_groups_there_are():
    # 20 groups of 2, constant but for groups 3 and 7: top 5 keeps those two, then the lowest-indexed
    # constant groups 0, 1, 2 (an unstable sort picks other ties once P is large: [3, 7, 10, 18, 19])
    r = torch.zeros(40)
    r[7], r[15] = 1.0, 1.0
    assert A.select_groups(r, 2, 0.25).tolist() == [0, 1, 2, 3, 7]


def test_the_ratio_statistics_read_the_loss_tokens_alone():
    # ratios (2, 0.5, e) with mask (1, 1, 0), advantages (1, 0, 1): over the two loss tokens the mean
    # is 1.25 and the (population) std 0.75; the 0.5 token has A = 0, so nothing is clipped low
    logp = torch.log(t(2, 0.5, math.e))[None]
    _, s = A.clipped_policy_loss(logp, torch.zeros(1, 3), t(1, 0, 1)[None], t(1, 1, 0)[None])
    assert_close(s["ratio_mean"], torch.tensor(1.25))
    assert_close(s["ratio_std"], torch.tensor(0.75))
    assert float(s["clip_frac_low"]) == 0.0


def test_sequence_advantages_broadcast_along_each_row_and_an_empty_batch_has_no_gradient():
    # B = T = 2 and advantages (1, −1), one per row: row 0's tokens gain, row 1's lose
    logp = torch.zeros(2, 2, requires_grad=True)
    loss, _ = A.clipped_policy_loss(logp, torch.zeros(2, 2), t(1, -1), torch.ones(2, 2))
    loss.backward()
    assert_close(loss, torch.tensor(0.0))
    assert_close(logp.grad, t(-0.25, -0.25, 0.25, 0.25).view(2, 2))
    # no loss token at all, sequence-mean: a loss of 0 with no gradient, whatever the advantages
    logp = torch.zeros(2, 2, requires_grad=True)
    loss, _ = A.clipped_policy_loss(
        logp, torch.zeros(2, 2), t(5, 5), torch.zeros(2, 2), agg="seq-mean-token-mean"
    )
    loss.backward()
    assert loss.item() == 0.0 and logp.grad.abs().sum() == 0
