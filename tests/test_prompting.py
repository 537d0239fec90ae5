from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_lib.config import RolloutConfig
from ragen_lib.prompting import FORMAT_PENALTY, first_user_message, parse_response, turn_prompt
from ragen_lib.rollout import Episode
from tests.conftest import LineEnv


def test_valid_answer_with_several_actions(line_env):
    p = parse_response(
        "<think>go right twice</think> <answer>Right || right</answer>", line_env, max_actions=5
    )
    assert p.format_valid and p.reason == ""
    assert p.actions == ("Right", "Right")
    assert p.think == "go right twice"


def test_actions_cut_to_budget_without_penalty(line_env):
    p = parse_response("<think>t</think><answer>Right || Right || Right</answer>", line_env, max_actions=2)
    assert p.actions == ("Right", "Right") and p.format_valid


def test_one_invalid_action_makes_the_turn_invalid_but_keeps_valid_ones(line_env):
    p = parse_response("<think>t</think><answer>Right || Jump</answer>", line_env, max_actions=5)
    assert not p.format_valid
    assert p.actions == ("Right",) and p.invalid == ("Jump",)
    assert "Jump" in p.reason


MALFORMED = {
    "no tags": "Right",
    "empty": "",
    "answer only in think mode": "<answer>Right</answer>",
    "unclosed think": "<think>hmm <answer>Right</answer>",
    "nested think": "<think><think>a</think></think><answer>Right</answer>",
    "two answers": "<think>a</think><answer>Right</answer><answer>Left</answer>",
    "reversed": "<answer>Right</answer><think>a</think>",
    "text between": "<think>a</think> so <answer>Right</answer>",
    "empty answer": "<think>a</think><answer>  ||  </answer>",
    "unknown action": "<think>a</think><answer>Fly</answer>",
    "non-ascii": "<think>向右</think><answer>右 || 🚀</answer>",
    "10 kB junk": "<" * 5000 + "answer>" * 700,
}


def test_malformed_answers_are_invalid_never_crash(line_env):
    for label, text in MALFORMED.items():
        p = parse_response(text, line_env, max_actions=5)
        assert not p.format_valid, label
        assert p.reason, label


def test_no_think_mode(line_env):
    ok = parse_response("<answer>Right</answer>", line_env, max_actions=5, enable_think=False)
    assert ok.format_valid and ok.actions == ("Right",)
    bad = parse_response(
        "<think>a</think><answer>Right</answer>", line_env, max_actions=5, enable_think=False
    )
    assert not bad.format_valid


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("<>/|thinkanswerRightLeft \n爱é")) | st.characters(), max_size=300)
)
def test_parser_fuzz_never_raises_and_is_consistent(text):
    line_env = LineEnv()
    p = parse_response(text, line_env, max_actions=3)
    assert len(p.actions) <= 3
    assert all(a in line_env.actions for a in p.actions)
    if p.format_valid:
        assert p.actions and not p.invalid and p.reason == ""
    else:
        assert p.reason


@settings(max_examples=200, deadline=None)
@given(
    think=st.text(max_size=50).filter(lambda s: "<" not in s and ">" not in s),
    acts=st.lists(st.sampled_from(["Left", "Right", "left", " RIGHT "]), min_size=1, max_size=6),
)
def test_parser_fuzz_well_formed_answers_parse(think, acts):
    line_env = LineEnv()
    text = f"<think>{think}</think>\n<answer>{' || '.join(acts)}</answer>"
    p = parse_response(text, line_env, max_actions=5)
    assert p.format_valid
    assert p.actions == tuple(a.strip().capitalize() for a in acts)[:5]


def test_prompt_holds_the_paper_pieces(line_env):
    text = first_user_message(line_env, "P___", 10)
    assert text.startswith("Walk to the goal.")
    assert "Left || Right" in text and "up to 5 actions per turn" in text
    assert "Turn 1:\nState:\nP___\nYou have 10 actions left." in text
    assert "<think> [Your thoughts] </think> <answer> [your answer] </answer>" in text
    later = turn_prompt(2, "_P__", 9, reward=-0.1)
    assert later.startswith("Reward:\n-0.1\nTurn 2:")
    assert "<think>" not in turn_prompt(1, "x", 1, enable_think=False)


def test_episode_penalty_budgets_and_success(line_env):
    ep = Episode(line_env, seed=0, cfg=RolloutConfig(max_turns=5, max_actions_per_episode=10))
    nxt = ep.step("no tags at all")
    assert ep.turns[-1].reward == FORMAT_PENALTY and ep.turns[-1].executed == []
    assert nxt.startswith("Reward:\n-0.1\nTurn 2:")
    ep.step("<think>a</think><answer>Right || Right</answer>")
    assert ep.turns[-1].reward == 0.0 and ep.actions_left == 8 and not ep.done
    assert ep.step("<think>a</think><answer>Right || Right</answer>") is None  # goal after 1 action
    assert ep.terminated and ep.success and not ep.truncated
    assert ep.turns[-1].executed == ["Right"]  # stops executing once the episode ends
    assert ep.total_reward == FORMAT_PENALTY + 1.0
    assert [m["role"] for m in ep.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_running_out_of_actions_is_truncation_not_success(line_env):
    ep = Episode(line_env, seed=0, cfg=RolloutConfig(max_actions_per_episode=2))
    ep.step("<think>a</think><answer>Right || Right || Right</answer>")
    assert ep.truncated and not ep.terminated and not ep.success
    ep2 = Episode(line_env, seed=0, cfg=RolloutConfig(max_turns=1))
    ep2.step("<think>a</think><answer>Left</answer>")
    assert ep2.truncated and not ep2.success
