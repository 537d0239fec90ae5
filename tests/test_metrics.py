"""Metric names and diagnostics, checked against values worked out by hand."""

import math
import re
from pathlib import Path

import pytest
import torch

from ragen_lib import metrics as M
from ragen_lib.rollout import consistency_bonus


def test_every_name_follows_the_naming_rule_and_the_docs_carry_the_table():
    rule = re.compile(
        r"^(rollout|reward|policy|critic|loss|response|reasoning|val|warmup|time|throughput|memory)"
        r"/[a-z0-9_]+$"
    )
    assert all(rule.match(k) for k in M.METRICS), [k for k in M.METRICS if not rule.match(k)]
    assert set(M.UPDATE_KEYS) <= set(M.STEP_KEYS)
    docs = (Path(__file__).parent.parent / "docs" / "ARCHITECTURE.md").read_text()
    assert M.markdown_table() in docs, (
        "docs/ARCHITECTURE.md's metric table is stale: paste metrics.markdown_table()"
    )


def test_labels_for_metrics_and_extra_validation_envs():
    assert M.label("rollout/success") == "success (train)"
    assert M.label("val/success/bandit-rev") == "success (val) on bandit-rev"
    assert M.label("cfg.algo.name") == "cfg.algo.name"


def test_explained_variance_by_hand():
    R = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])  # the last column is off the mask: ignored
    assert M.explained_variance(R, R, mask) == pytest.approx(1.0)
    assert M.explained_variance(torch.zeros_like(R), R, mask) == pytest.approx(0.0)
    # R − V = [0, 0, 0, −1]: Var = 0.25 − 0.0625 = 0.1875; Var R = 1.25 → 1 − 0.15
    V = torch.tensor([[1.0, 2.0, 3.0, 5.0, -7.0]])
    assert M.explained_variance(V, R, mask) == pytest.approx(0.85)
    assert math.isnan(M.explained_variance(V, torch.ones_like(R), mask))  # constant returns: undefined
    # constant up to float32 rounding, as GAE's returns are when every episode got the same reward
    # (the golden StarPO-S runs logged -1.1e11 and -3.2e11): still constant
    noisy = -0.7 * (1 + 1e-7 * torch.tensor([[1.0, -1.0, 0.5, -0.5, 0.0]]))
    assert math.isnan(M.explained_variance(V, noisy, mask))
    # a small spread that is real (1e-3 of the returns' size) is explained as usual
    small = 100.0 + torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]])
    assert M.explained_variance(small, small, mask) == pytest.approx(1.0)


def test_distinct_n_by_hand():
    # bigrams (a,b), (b,a), (a,b): 2 distinct of 3
    assert M.distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)
    assert M.distinct_n(["Left, then UP", "left then up"], 2) == pytest.approx(2 / 4)
    assert math.isnan(M.distinct_n(["one"], 2))  # no bigram: nothing measured, not "no diversity"
    # rarefied to 2 of the 3 bigrams: the pairs of positions {1,2} ab ba, {1,3} ab ab, {2,3} ba ab
    # hold 2, 1, 2 distinct: 5/3 expected, 5/6 of 2
    assert M.distinct_n(["a b a b"], 2, at=2) == pytest.approx(5 / 6)
    assert M.distinct_n(["a b a b"], 2, at=3) == pytest.approx(2 / 3)  # the whole pool
    assert math.isnan(M.distinct_n(["a b a b"], 2, at=4))  # fewer bigrams than asked for


def test_rarefied_distinct_n_is_the_mean_over_every_subset_of_that_size():
    from itertools import combinations

    texts = ["go left go left then up", "up up left go", "left go left"]
    grams = [tuple(w[i : i + 2]) for t in texts for w in [M.words(t)] for i in range(len(w) - 1)]
    for at in (1, 3, 5):
        subsets = list(combinations(range(len(grams)), at))
        brute = sum(len({grams[i] for i in sub}) for sub in subsets) / len(subsets) / at
        assert M.distinct_n(texts, 2, at=at) == pytest.approx(brute)


def test_rarefied_distinct_n_does_not_fall_with_the_number_of_texts():
    # The same kind of text, 128 or 512 of them: pooled distinct-2 falls with the pool (it read the
    # echo trap from a rising format-valid rate alone); rarefied to DISTINCT_AT bigrams it does not.

    import numpy as np

    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(60)]
    p = 1 / np.arange(1, 61)
    p /= p.sum()

    def texts(n):
        return [" ".join(rng.choice(vocab, size=12, p=p)) for _ in range(n)]

    def mean(n, at):  # over 8 pools: one pool's rarefied share varies by about 0.015
        return float(np.mean([M.distinct_n(texts(n), 2, at=at) for _ in range(8)]))

    assert mean(128, None) - mean(512, None) > 0.2  # pooled: 0.47 vs 0.26
    assert abs(mean(128, M.DISTINCT_AT) - mean(512, M.DISTINCT_AT)) < 0.01  # 0.82 vs 0.81
    # and a template still reads low: the measure keeps its meaning
    assert M.distinct_n(["i will go left then up"] * 64, 2, at=M.DISTINCT_AT) < 0.05


def test_reasoning_stats_measure_only_the_reasoning_there_is():
    tok = lambda t: {"input_ids": t.split()}  # noqa: E731
    assert M.reasoning_stats(tok, ["a b c d", "e f"])["reasoning_length"] == 3.0
    empty = M.reasoning_stats(tok, [])
    assert math.isnan(empty["reasoning_length"]) and math.isnan(empty["distinct2"])


def test_reasoning_mi_by_hand():
    # Each state's texts use their own word. For "left left" in state 0 (V = 3 with smoothing):
    # p_state = (4 − 2 + 1)/(2 + 3) = 0.6, p_all = (4 − 2 + 1)/(6 + 3) = 1/3: ln(1.8) per word.
    texts, states = ["left left", "left left", "right right", "right right"], [0, 0, 1, 1]
    assert M.reasoning_mi(texts, states) == pytest.approx(math.log(1.8))
    template = M.reasoning_mi(["go go"] * 4, states)
    assert template < M.reasoning_mi(texts, states) and template <= 0  # no information about the state
    assert math.isnan(M.reasoning_mi(["a b", "c d"], [0, 1]))  # one text per state: nothing to compare
    assert math.isnan(M.reasoning_mi([], []))  # no reasoning: not "one template" (0)


def test_a_skipped_step_s_infinite_gradient_norm_does_not_make_the_mean_infinite():
    assert M._finite_mean([1.0, float("inf"), 2.0, float("nan")]) == 1.5
    assert math.isnan(M._finite_mean([float("inf")]))


def test_consistency_bonus_by_hand():
    assert consistency_bonus("I go Left then Up", ["Left", "Up"]) == pytest.approx(0.2)
    assert consistency_bonus("I go Left", ["Left", "Down"]) == pytest.approx(0.1)
    assert consistency_bonus("", ["Left"]) == 0.0 and consistency_bonus("Left", []) == 0.0
    assert consistency_bonus("search for a red shoe", ["search:red shoe"]) == pytest.approx(0.2)


def _step_metrics(update=None, episodes_with=None, **measured):
    """step_metrics of two episodes (one turn, then three: 2 of 4 turns valid, 2 cut, 3 matched);
    `episodes_with` replaces some of their entries."""
    episodes = {
        "rewards": torch.tensor([1.0, 0.0]),
        "success": torch.tensor([True, False]),
        "truncated": torch.tensor([False, True]),
        "num_turns": torch.tensor([1, 3]),
        "gen_tokens": torch.tensor([4.0, 6.0]),
        "seeds": [0, 0],
        "thinks": [["a b"], ["c", "e"]],  # the matched turns' reasoning only
        "turn_format_valid": [[True], [False, False, True]],
        "turn_cut": [[False], [True, True, False]],
        # the matched turns' (RolloutBatch.written): 1 piece; 7 (2 past the limit) and 2
        "turn_written": [[1], [7, 2]],
        "turn_dropped": [[0], [2, 0]],
        "default_per_turn": [1, 5],  # the envs' defaults: 1 (Bandit), 5 (Sokoban)
        **(episodes_with or {}),
    }
    return M.step_metrics(
        episodes,
        tokenizer=lambda t: {"input_ids": t.split()},
        group_std=torch.tensor([0.5]),
        keep=torch.tensor([0]),
        kept_reasoning=torch.zeros(2),
        update={**{k: [] for k in M.UPDATE_KEYS}, **(update or {})},
        **measured,
    )


def test_step_metrics_refuses_to_leave_a_name_out():
    with pytest.raises(KeyError, match="policy/entropy"):
        _step_metrics()


def test_a_one_mini_batch_grad_norm_spike_is_logged_whole_beside_the_mean():
    """Four optimizer steps, one of them a spike (the third overflowed and was skipped): the mean
    divides the spike by the steps' number; policy/grad_norm_max, which 01 plots, keeps it (RAGEN
    logs the last step's norm alone: docs/FIDELITY.md D33)."""
    computed = ("rollout/", "reward/", "response/", "reasoning/", "policy/grad_norm")
    from_update = ("rollout/logprob_gap", "reward/kl_penalty")
    measured = {k: 0.0 for k in M.STEP_KEYS if not k.startswith(computed) or k in from_update}
    m = _step_metrics(update={"policy/grad_norm": [1.0, 9.0, math.inf, 2.0]}, **measured)
    assert m["policy/grad_norm"] == pytest.approx(4.0) and m["policy/grad_norm_max"] == 9.0
    nothing = _step_metrics(update={"policy/grad_norm": [math.nan]}, **measured)
    assert math.isnan(nothing["policy/grad_norm_max"])


def test_answer_cut_is_the_fraction_of_turns_that_ran_out_of_the_token_budget():
    computed = ("rollout/", "reward/", "response/", "reasoning/")  # from `episodes`, the rest measured
    from_update = ("rollout/logprob_gap", "reward/kl_penalty")  # the trainer's forwards measure these
    measured = {k: 0.0 for k in M.STEP_KEYS if not k.startswith(computed) or k in from_update}
    m = _step_metrics(**measured)
    assert m["rollout/answer_cut"] == 0.5 and m["rollout/format_valid"] == 0.5
    # 3 of 4 turns matched their tags; the length is over those three (2, 1 and 1 tokens)
    assert m["reasoning/matched"] == 0.75 and m["reasoning/length"] == pytest.approx(4 / 3)


def test_actions_written_and_dropped_are_over_the_turns_whose_tags_matched():
    computed = ("rollout/", "reward/", "response/", "reasoning/")
    from_update = ("rollout/logprob_gap", "reward/kl_penalty")
    measured = {k: 0.0 for k in M.STEP_KEYS if not k.startswith(computed) or k in from_update}
    m = _step_metrics(**measured)
    assert m["rollout/actions_written"] == pytest.approx(10 / 3) and m[
        "rollout/actions_dropped"
    ] == pytest.approx(1 / 3)
    # past each episode's own env default: 1 ≤ 1 no; 7 > 5 yes, 2 ≤ 5 no
    assert m["rollout/actions_past_default"] == pytest.approx(1 / 3)
    # 5 written on a Bandit-default turn would count: the default is the episode's env's, not one number
    m = _step_metrics(
        episodes_with={"turn_written": [[5], [5, 5]], "turn_dropped": [[4], [0, 0]]}, **measured
    )
    assert m["rollout/actions_past_default"] == pytest.approx(1 / 3)
