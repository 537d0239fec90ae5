"""RAGEN's text protocol: the prompts (checked against RAGEN's own output), the parser's leniency,
budgets, the prefill, and the rewards shown to the model."""

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_lib.config import RolloutConfig
from ragen_lib.envs import make
from ragen_lib.prompting import first_user_message, parse_response, turn_prompt
from ragen_lib.rollout import Episode
from tests.conftest import LineEnv

RAGEN_PROMPTS = json.loads((Path(__file__).parent / "data" / "ragen_385bc30_prompts.json").read_text())
RAGEN_PARSING = json.loads((Path(__file__).parent / "data" / "ragen_385bc30_parsing.json").read_text())


def parse(text, env, per_turn=5, left=10, think=True):
    return parse_response(text, env, max_actions_per_turn=per_turn, actions_left=left, enable_think=think)


def chatml(ep: Episode) -> str:
    """The first generation prompt in the ChatML layout of RAGEN's Qwen2.5 (what its tokenizer's
    template renders for an explicit system message), the prefill at the end."""
    system, user = ep.messages[0]["content"], ep.messages[1]["content"]
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n{ep.prefill}"
    )


# --- the parser against RAGEN's own ------------------------------------------------------------
def test_the_parser_agrees_with_ragens_on_600_random_responses():
    """tests/data/ragen_385bc30_parsing.json: seeded random responses (missing, repeated and
    misplaced tags, special tokens, odd separators, valid and invalid actions in any case, think and
    no-think, per-turn limits 1-5, 0-10 actions left) and what RAGEN's own parser, action lookup and
    penalty rule made of them. Ours must agree on all four outputs of every case."""
    cases = RAGEN_PARSING["cases"]
    kinds = {(c["matched"], c["penalty"]) for c in cases}
    assert kinds == {(False, True), (True, True), (True, False)}  # unmatched, penalised, valid all occur
    envs = {name: make(name) for name in ("sokoban", "frozenlake", "bandit")}
    for env in envs.values():
        env.reset(seed=0)
    disagree = []
    for c in cases:
        p = parse(c["text"], envs[c["env"]], c["max_actions_per_turn"], c["actions_left"], c["enable_think"])
        ours = (
            p.matched,
            p.cleaned(c["enable_think"]) if p.matched else c["text"],  # RAGEN keeps an unmatched text
            list(p.actions),
            not p.format_valid,
        )
        if ours != (c["matched"], c["cleaned"], c["executed"], c["penalty"]):
            disagree.append((c["text"], ours, c))
    assert not disagree, f"{len(disagree)} of {len(cases)} differ from RAGEN; first: {disagree[0]}"


# --- the prompt, character for character -----------------------------------------------------
def test_first_prompts_are_ragens():
    """RAGEN 385bc30's first prompts at its validation seed 123 (tests/data): our FrozenLake and
    Bandit states for a seed are RAGEN's, so the whole prompt matches, prefill included."""
    assert chatml(Episode(make("frozenlake"), 123)) == RAGEN_PROMPTS["frozenlake_seed123"]
    assert chatml(Episode(make("bandit"), 123)) == RAGEN_PROMPTS["bandit_seed123"]


def test_sokoban_instruction_legend_and_actions_are_ragens():
    # Sokoban levels follow RAGEN's distribution, not its exact levels: compare what precedes "Turn 1:".
    first = Episode(make("sokoban"), 123).messages[1]["content"]
    assert first.startswith(RAGEN_PROMPTS["sokoban_instruction_prefix"] + "\nTurn 1:\nState:\n")
    # RAGEN's other-vocabulary prompt shows the default legend (its bug), available behind a field.
    ragen_new = Episode(make("sokoban-newvocab", legend="ragen"), 123).messages[1]["content"]
    assert ragen_new.startswith(RAGEN_PROMPTS["sokoban_newvocab_instruction_prefix"])
    ours = Episode(make("sokoban-newvocab"), 123).messages[1]["content"]
    assert "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target" in ours


def test_prompt_layout_hand_written(line_env):
    text = first_user_message(line_env, "P___", 10)
    assert text == (
        "Walk to the goal.\nYour available actions are:\nLeft, Right\n"
        'You can make up to 10 actions, separated by the action separator " || "\n'
        "\nTurn 1:\nState:\nP___\nYou have 10 actions left. Always output: <think> [Your thoughts] "
        "</think> <answer> [your answer] </answer> with no extra text. Strictly follow this format. "
        "Max response length: 100 words (tokens).\n"
    )
    assert "<think>" not in turn_prompt(1, "x", 1, enable_think=False)
    assert turn_prompt(2, "_P__", 9, reward=-0.1).startswith("Reward:\n-0.1\n\nTurn 2:\nState:\n_P__\n")


def test_the_prompt_states_the_budgets_the_rollout_enforces(line_env):
    ep = Episode(line_env, 0, RolloutConfig(max_actions_per_episode=7, max_actions_per_turn=2))
    first = ep.messages[1]["content"]
    assert "You can make up to 7 actions" in first and "You have 7 actions left" in first
    assert "per turn" not in first  # RAGEN never states the per-turn limit ...
    told = Episode(LineEnv(), 0, RolloutConfig(max_actions_per_turn=2, prompt_per_turn_limit=True))
    assert "You can take up to 2 actions per turn." in told.messages[1]["content"]  # ... unless asked
    words = Episode(LineEnv(), 0, RolloutConfig(max_response_words=50)).messages[1]["content"]
    assert "Max response length: 50 words (tokens)." in words


# --- parsing: RAGEN's leniency ------------------------------------------------------------------
def test_valid_answer_with_several_actions(line_env):
    p = parse("<think>go right twice</think> <answer>Right || right</answer>", line_env)
    assert p.format_valid and p.reason == "" and p.matched
    assert p.actions == ("Right", "Right") and p.think == "go right twice"
    assert p.cleaned() == "<think>go right twice</think><answer>Right || right</answer>"


def test_pieces_are_cut_to_the_per_turn_limit_before_they_are_checked(line_env):
    # The 3rd piece is beyond the limit of 2: never checked, never penalised.
    p = parse("<think>t</think><answer>Right || Right || Jump</answer>", line_env, per_turn=2)
    assert p.format_valid and p.actions == ("Right", "Right") and p.answer == "Right || Right"
    # An invalid piece within the limit uses a slot and makes the turn invalid.
    p = parse("<think>t</think><answer>Jump || Right || Right</answer>", line_env, per_turn=2)
    assert not p.format_valid and p.actions == ("Right",) and p.invalid == ("Jump",)


def test_the_pieces_written_and_those_the_per_turn_limit_dropped_are_counted(line_env):
    """05's Table 3 manipulates the limit: what a model wrote past it is the evidence the limit bound
    (rollout/actions_written, rollout/actions_dropped). Empty pieces are no pieces; an invalid piece
    counts; the actions-left cut drops valid actions after the per-turn one and is not counted."""
    p = parse("<think>t</think><answer>Right || Jump || Right ||  || Right</answer>", line_env, per_turn=2)
    assert (p.written, p.dropped) == (4, 2)
    p = parse("<think>t</think><answer>Right || Right || Right</answer>", line_env, per_turn=5, left=1)
    assert (p.written, p.dropped, p.actions) == (3, 0, ("Right",))
    assert (
        parse("<answer>Right</answer>", line_env).written,
        parse("<think>t</think><answer></answer>", line_env).written,
    ) == (0, 0)


def test_valid_actions_cut_to_the_actions_left_without_penalty(line_env):
    p = parse("<think>t</think><answer>Right || Right || Right</answer>", line_env, left=2)
    assert p.actions == ("Right", "Right") and p.format_valid


def test_one_invalid_action_makes_the_turn_invalid_but_keeps_valid_ones(line_env):
    p = parse("<think>t</think><answer>Right || Jump</answer>", line_env)
    assert not p.format_valid and p.actions == ("Right",) and p.invalid == ("Jump",)
    assert "Jump" in p.reason


LENIENT = {
    # RAGEN searches for the first match anywhere and strips the tags from both groups.
    "the model repeats the prefill": "<think><think>a</think><answer>Right</answer>",
    "text before and after": "sure! <think>a</think>\n<answer>Right</answer> that's it <answer>Left",
    "two answers: the first wins": "<think>a</think><answer>Right</answer><answer>Jump</answer>",
    "nested think": "<think><think>a</think></think><answer>Right</answer>",
    "chat markers inside": "<think>a<|im_end|></think><answer>Right<|im_end|></answer>",
}


def test_ragen_accepts_what_its_regex_finds(line_env):
    for label, text in LENIENT.items():
        p = parse(text, line_env)
        assert p.format_valid and p.actions == ("Right",), label
        assert "<" not in p.think, label


MALFORMED = {
    "no tags": "Right",
    "empty": "",
    "answer only in think mode": "<answer>Right</answer>",
    "unclosed think": "<think>hmm <answer>Right</answer>",
    "reversed": "<answer>Right</answer><think>a</think>",
    "text between": "<think>a</think> so <answer>Right</answer>",
    "empty answer": "<think>a</think><answer>  ||  </answer>",
    "unknown action": "<think>a</think><answer>Fly</answer>",
    "non-ascii": "<think>向右</think><answer>右 || 🚀</answer>",
    "10 kB junk": "<" * 5000 + "answer>" * 700,
}


def test_malformed_answers_are_invalid_never_crash(line_env):
    for label, text in MALFORMED.items():
        p = parse(text, line_env)
        assert not p.format_valid and p.reason and not p.actions, label


def test_no_think_mode(line_env):
    ok = parse("<answer>Right</answer>", line_env, think=False)
    assert ok.format_valid and ok.actions == ("Right",) and ok.cleaned(False) == "<answer>Right</answer>"
    # RAGEN's no-think regex is `<answer>(.*?)</answer>`: reasoning before it is simply ignored.
    assert parse("<think>a</think><answer>Right</answer>", line_env, think=False).format_valid
    assert not parse("Right", line_env, think=False).format_valid


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("<>/|thinkanswerRightLeft \n爱é")) | st.characters(), max_size=300)
)
def test_parser_fuzz_never_raises_and_is_consistent(text):
    line_env = LineEnv()
    p = parse(text, line_env, per_turn=3, left=2)
    assert len(p.actions) <= 2
    assert all(a in line_env.actions for a in p.actions)
    if p.format_valid:
        assert p.actions and not p.invalid and p.reason == "" and p.matched
    else:
        assert p.reason


@settings(max_examples=200, deadline=None)
@given(
    think=st.text(max_size=50).filter(lambda s: "<" not in s and ">" not in s),
    acts=st.lists(st.sampled_from(["Left", "Right", "left", " RIGHT "]), min_size=1, max_size=8),
)
def test_parser_fuzz_well_formed_answers_parse(think, acts):
    line_env = LineEnv()
    p = parse(f"<think>{think}</think>\n<answer>{' || '.join(acts)}</answer>", line_env)
    assert p.format_valid
    assert p.actions == tuple(a.strip().capitalize() for a in acts)[:5]


# --- the episode: prefill, penalty, shown reward, budgets -------------------------------------
def test_episode_prefill_penalty_shown_reward_and_success(line_env):
    ep = Episode(line_env, seed=0, cfg=RolloutConfig(max_turns=5, max_actions_per_episode=10))
    assert ep.prefill == "<think>"
    nxt = ep.step("no tags at all")
    assert ep.turns[-1].reward == RolloutConfig().format_penalty == -0.1 and ep.turns[-1].executed == []
    assert ep.messages[-2]["content"] == "<think>no tags at all"  # the prefill is part of the reply
    # The model sees the env reward (RAGEN's int 0: nothing ran), never the format penalty.
    assert nxt.startswith("Reward:\n0\n\nTurn 2:")
    ep.step("a</think><answer>Right || Right</answer>")  # the continuation of "<think>"
    assert ep.turns[-1].reward == 0.0 and ep.actions_left == 8 and not ep.done
    assert ep.messages[-1]["content"].startswith("Reward:\n0.0\n")
    assert ep.step("a</think><answer>Right || Right</answer>") is None  # goal after 1 action
    assert ep.terminated and ep.success and not ep.truncated
    assert ep.turns[-1].executed == ["Right"]  # stops executing once the episode ends
    assert ep.total_reward == RolloutConfig().format_penalty + 1.0
    assert [m["role"] for m in ep.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


class CostlyLine(LineEnv):
    """LineEnv whose every step costs 0.1, like a Sokoban move."""

    def step(self, action):
        obs, r, done, trunc, info = super().step(action)
        return obs, r - 0.1, done, trunc, info


def test_shown_reward_is_pythons_running_sum_of_the_env_rewards():
    ep = Episode(CostlyLine(length=9), seed=0)
    nxt = ep.step("x</think><answer>Left || Left || Left</answer>")
    # RAGEN prints str() of 0 - 0.1 - 0.1 - 0.1, float noise included.
    assert nxt.startswith("Reward:\n-0.30000000000000004\n\nTurn 2:")


def test_no_prefill_and_no_think_prefill():
    assert Episode(LineEnv(), 0, RolloutConfig(prefill=False)).prefill == ""
    ep = Episode(LineEnv(), 0, RolloutConfig(enable_think=False))
    assert ep.prefill == "<answer>"
    ep.step("Right</answer>")
    assert ep.turns[-1].parsed.format_valid and ep.turns[-1].executed == ["Right"]


def test_running_out_of_actions_is_truncation_not_success(line_env):
    ep = Episode(line_env, seed=0, cfg=RolloutConfig(max_actions_per_episode=2))
    ep.step("a</think><answer>Right || Right || Right</answer>")
    assert ep.truncated and not ep.terminated and not ep.success
    ep2 = Episode(LineEnv(), seed=0, cfg=RolloutConfig(max_turns=1))
    ep2.step("a</think><answer>Left</answer>")
    assert ep2.truncated and not ep2.success


class _Ends(LineEnv):
    """LineEnv whose first step ends the episode with the given (terminated, truncated, success)."""

    def __init__(self, terminated, truncated, success):
        super().__init__()
        self.end = (terminated, truncated, success)

    def step(self, action):
        terminated, truncated, success = self.end
        return self.render(), 0.0, terminated, truncated, {"success": success}


def test_an_ended_episode_is_terminated_or_truncated_never_both():
    # Bandit's one turn ends the episode on its own and uses up the turn budget: terminated, not
    # truncated (pins a turn-budget check that also marks a terminated episode truncated).
    ep = Episode(make("bandit"), seed=0)
    assert ep.step("x</think><answer>Dragon</answer>") is None
    assert ep.terminated and not ep.truncated and ep.success
    # An env that reports both: terminated wins (pins `truncated` copied as the env gave it).
    both = Episode(_Ends(True, True, True), seed=0)
    both.step("x</think><answer>Right</answer>")
    assert both.terminated and not both.truncated and both.success
    # Only a terminated episode is a success, whatever the env's info says (pins success on truncation).
    cut = Episode(_Ends(False, True, True), seed=0)
    cut.step("x</think><answer>Right</answer>")
    assert cut.truncated and not cut.terminated and not cut.success


def test_the_prompt_prints_the_episode_budget_even_above_turns_times_per_turn(line_env):
    # RAGEN prints max_actions_per_traj (10 here) and counts down from it, even where 2 turns x 1
    # action can only spend 2 (pins Limits.actions, min(10, 2), in its place).
    ep = Episode(line_env, 0, RolloutConfig(max_turns=2, max_actions_per_turn=1, max_actions_per_episode=10))
    first = ep.messages[1]["content"]
    assert "You can make up to 10 actions" in first and "You have 10 actions left" in first
    assert ep.step("x</think><answer>Right</answer>").count("You have 9 actions left") == 1
