import pytest

from ragen_lib import config
from ragen_lib.config import Config, from_dict


def test_presets_fill_only_unset_fields():
    s = from_dict({"algo": {"name": "starpo-s"}})
    assert (s.algo.filter_keep, s.algo.kl_coef, s.algo.clip_low, s.algo.clip_high, s.algo.critic) == (
        0.25,
        0.0,
        0.2,
        0.28,
        True,
    )
    mine = from_dict({"algo": {"name": "starpo-s", "filter_keep": 0.5}})
    assert mine.algo.filter_keep == 0.5 and mine.algo.kl_coef == 0.0
    g = from_dict({"algo": {"name": "starpo-grpo"}})
    assert (g.algo.advantage, g.algo.critic, g.algo.kl_in_reward) == ("grpo", False, False)


def test_dotted_overrides_parse_yaml_scalars():
    c = from_dict(
        {},
        ["algo.clip_high=0.28", "train.steps=3", "rollout.enable_think=false", "env.eval_envs=[bandit-rev]"],
    )
    assert c.algo.clip_high == 0.28 and c.train.steps == 3 and c.rollout.enable_think is False
    assert c.env.eval_envs == ("bandit-rev",)
    assert from_dict({}, {"train.seed": 4}).train.seed == 4


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"algo": {"clip_hihg": 0.3}}, ["algo.clip_hihg", "did you mean algo.clip_high", "algo.clip_low"]),
        ({"trian": {}}, ["trian", "did you mean train", "rollout"]),
        ({"algo": {"name": "ppo2"}}, ["ppo2", "starpo-s", "apo"]),
        ({"algo": {"name": "starpo-grpo", "advantage": "gae"}}, ["critic"]),
        ({"train": {"warmup": "sft"}}, ["none", "self", "expert"]),
        ({"rollout": {"kv_cache": "paged"}}, ["rollout.kv_cache", "dynamic", "static"]),
    ],
)
def test_bad_keys_and_values_name_the_valid_ones(bad, words):
    with pytest.raises(ValueError) as e:
        from_dict(bad)
    for w in words:
        assert w in str(e.value)


def test_exponents_without_a_dot_are_numbers_and_text_in_a_number_field_is_named(tmp_path):
    """YAML 1.1 reads 3e-5 as the string "3e-5"; a float field must still get 3e-05."""
    c = from_dict({}, ["train.warmup_lr=3e-5", "train.steps=7", "rollout.max_turns=2"])
    assert c.train.warmup_lr == 3e-5 and isinstance(c.train.warmup_lr, float)
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  actor_lr: 1e-6\n  steps: '4'\n")
    loaded = config.load(path)
    assert loaded.train.actor_lr == 1e-6 and loaded.train.steps == 4
    with pytest.raises(ValueError, match="train.actor_lr must be a number, got 'fast'"):
        from_dict({}, ["train.actor_lr=fast"])
    with pytest.raises(ValueError, match="train.steps must be an integer, got '2.5'"):
        from_dict({"train": {"steps": "2.5"}})


def test_override_without_equals_sign_says_how():
    with pytest.raises(ValueError, match="key=value"):
        from_dict({}, ["algo.clip_high"])


def test_hash_is_stable_and_round_trips(tmp_path):
    a = from_dict({"algo": {"name": "apo"}}, ["train.steps=5"])
    path = tmp_path / "c.yaml"
    config.save(a, path)
    b = config.load(path)
    assert a == b and a.hash() == b.hash()
    assert a.hash() != from_dict({"algo": {"name": "apo"}}, ["train.steps=6"]).hash()
    assert Config().hash() == from_dict({}).hash()


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        config.load(tmp_path / "nope.yaml")


def test_a_preset_resolves_wherever_the_config_is_built():
    direct = config.AlgoConfig(name="starpo-s")
    assert direct == from_dict({"algo": {"name": "starpo-s"}}).algo  # Python, YAML: the same algorithm
    assert (direct.filter_keep, direct.kl_coef, direct.clip_high) == (0.25, 0.0, 0.28)
    assert config.AlgoConfig(name="starpo-s", clip_high=0.2).clip_high == 0.2  # explicit wins
    for name, preset in config.ALGO_PRESETS.items():
        assert set(preset) == set(config.PRESET_FIELDS), name  # each preset states the whole algorithm
    assert config.AlgoConfig(name="apo").label == "apo"
    assert config.AlgoConfig(name="starpo-s", advantage="grpo", critic=False).label == "starpo-s+grpo"


@pytest.mark.parametrize(
    "over, words",
    [
        ({"algo.name": "apo", "algo.filter_keep": 0.5}, "needs algo.filter_keep=1"),
        ({"algo.name": "apo", "algo.apo_prompt_pool": 8}, "raise it"),  # 8 groups × 16 > 8
        ({"algo.objective": "dpo"}, "algo.objective='dpo' is not valid; choose one of: ppo-clip, apo"),
    ],
)
def test_cross_field_checks_fail_when_the_config_is_built(over, words):
    with pytest.raises(ValueError, match=words):
        from_dict({}, over)


def test_groups_must_split_over_the_launched_processes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="train.groups=8 is not divisible by the 3 processes"):
        from_dict({})
    assert from_dict({}, {"train.groups": 6}).train.groups == 6
