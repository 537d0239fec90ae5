import errno
from pathlib import Path

import pytest

from ragen_lib import config
from ragen_lib.config import Config, from_dict

PARAMS = Path(__file__).resolve().parents[1] / "params"


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
        # the closest spelling before a field the name ends (train.samples_per_step, reasoning_lambda)
        ({"train": {"step": 5}}, ["did you mean train.steps?"]),
        ({"algo": {"lambda": 0.9}}, ["did you mean algo.lam?"]),
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
    # and in env.kwargs, where the env's default is a number (refused as "a str" before), hashed as
    # the number it is
    with pytest.raises(ValueError, match="env.kwargs.high_risk_p: 'nan' is a str"):
        from_dict({}, ["env.kwargs.high_risk_p=nan"])  # not a number to convert: NaN rewards
    c = from_dict({}, ["env.kwargs.high_risk_p=5e-1"])
    assert (
        c.env.kwargs == {"high_risk_p": 0.5}
        and c.hash() == from_dict({}, ["env.kwargs.high_risk_p=0.5"]).hash()
    )
    # an int where the env's default is a float is that float: 1 and 1.0 hashed apart (two runs)
    one = from_dict({}, ["env.kwargs.high_risk_p=1"])
    assert one.env.kwargs == {"high_risk_p": 1.0} and isinstance(one.env.kwargs["high_risk_p"], float)
    assert one.hash() == from_dict({}, {"env.kwargs": {"high_risk_p": 1.0}}).hash()


def test_override_without_equals_sign_says_how():
    with pytest.raises(ValueError, match="key=value"):
        from_dict({}, ["algo.clip_high"])


def test_an_override_given_twice_is_refused_as_a_repeated_yaml_key_is():
    # `--set train.steps=3 train.steps=4` trained 4 steps without a word
    with pytest.raises(ValueError, match=r"override 'train.steps' is given twice \('train.steps=4' after"):
        from_dict({}, ["train.steps=3", "train.steps=4"])


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


def test_a_folder_a_grid_file_or_the_profiles_file_is_named_for_what_it_is(tmp_path):
    """Each said 'does not exist' or 'unknown config section' of a file that exists and is valid,
    only not a run's config: the message now says what it is and what to give instead."""
    with pytest.raises(FileNotFoundError, match="is a folder, not a config file; give a YAML"):
        config.load(tmp_path)
    run = tmp_path / "runs" / "adhoc" / "bandit-1"
    run.mkdir(parents=True)
    config.save(Config(), run / "config.yaml")
    with pytest.raises(FileNotFoundError, match=f"it holds a run: give its {run / 'config.yaml'}"):
        config.load(run)
    with pytest.raises(ValueError, match=r"grid file \(base, grid\).*make replicate NB=01"):
        config.load(PARAMS / "01_instability.yaml")
    with pytest.raises(ValueError, match="is the profiles file.*make replicate-all PROFILE"):
        config.load(PARAMS / "profiles.yaml")
    odd = tmp_path / "odd.yaml"
    odd.write_text("base: {}\ntrain: {steps: 2}\n")  # a run config with a stray key: the usual error
    with pytest.raises(ValueError, match="base"):
        config.load(odd)


def test_a_preset_resolves_wherever_the_config_is_built(monkeypatch):
    direct = config.AlgoConfig(name="starpo-s")
    assert direct == from_dict({"algo": {"name": "starpo-s"}}).algo  # Python, YAML: the same algorithm
    assert (direct.filter_keep, direct.kl_coef, direct.clip_high) == (0.25, 0.0, 0.28)
    assert config.AlgoConfig(name="starpo-s", clip_high=0.2).clip_high == 0.2  # explicit wins
    for name, preset in config.ALGO_PRESETS.items():
        assert set(preset) == set(config.PRESET_FIELDS), name  # each preset states the whole algorithm
    assert config.AlgoConfig(name="apo").label == "apo"
    assert config.AlgoConfig(name="starpo-s", advantage="grpo", critic=False).label == "starpo-s+grpo"
    # an objective that is not the preset's is named too: two runs' folders never differ by hash alone
    monkeypatch.setitem(config.POLICY_OBJECTIVES, "pg", config.POLICY_OBJECTIVES["ppo-clip"])
    assert config.AlgoConfig(name="starpo-grpo", objective="pg").label == "starpo-grpo+pg"
    # the preset's critic beside an estimator that never reads it: an error naming the fix
    with pytest.raises(ValueError, match="only gae uses a critic.*Add algo.critic=false"):
        config.AlgoConfig(name="starpo-s", advantage="grpo")
    # A*-PO's regression beside an estimator without V* targets would read a target of 0
    for advantage in ("grpo", "gae"):
        with pytest.raises(ValueError, match="objective=apo with algo.advantage=.*Set algo.advantage=apo"):
            config.AlgoConfig(
                name="starpo-grpo", objective="apo", advantage=advantage, critic=advantage == "gae"
            )


@pytest.mark.parametrize(
    "over, words",
    [
        ({"algo.name": "apo", "algo.filter_keep": 0.5}, "needs algo.filter_keep=1"),
        ({"algo.name": "apo", "algo.apo_prompt_pool": 8}, "raise it"),  # 8 groups × 16 > 8
        (
            {"algo.objective": "dpo"},
            r"algo.objective='dpo' is not valid \(did you mean apo\?\); choose one of: ppo-clip, apo",
        ),
        # a spelling of a choice names it (it listed them all, the closest among them unmarked)
        ({"train.loss_agg": "token_mean"}, r"'token_mean' is not valid \(did you mean token-mean\?\)"),
        ({"algo.name": "starpo_s"}, r"algo.name='starpo_s' is not valid \(did you mean starpo-s\?\); choose"),
        # the paper's name without StarPO's: the choice it ends, not the closest spelling (apo)
        ({"algo.name": "ppo"}, r"algo.name='ppo' is not valid \(did you mean starpo-ppo\?\)"),
        ({"algo.name": "STARPO-GRPO"}, r"\(did you mean starpo-grpo\?\)"),
        # a KL reward only gae reads: with grpo or apo the penalty acted nowhere, yet kl_ref was logged
        ({"algo.name": "starpo-grpo", "algo.kl_in_reward": True}, "only gae reads a per-token KL reward"),
        ({"algo.name": "apo", "algo.kl_coef": 0.01}, "Set algo.kl_in_reward=false .* or algo.kl_coef=0"),
        # one sample per group: every GRPO advantage is 0 (it trained on the entropy and KL terms)
        ({"algo.name": "starpo-grpo", "train.group_size": 1}, "every advantage is 0"),
        # the env's default budget against the context: it failed in the rollout, after the load
        ({"env.name": "sokoban", "rollout.max_context_tokens": 300}, "sokoban's default of 400 new tokens"),
        (
            {"env.name": "sokoban", "env.eval_envs": ["bandit"], "rollout.max_context_tokens": 450},
            "bandit's default of 500 new tokens",
        ),
        # A*-PO drew no online-k multiple of states: 1/k of the episodes and optimizer steps
        ({"algo.name": "apo", "train.online_k": 2, "train.group_size": 1}, "Set train.online_k=1"),
        # n0 = 2 of 1 or 2 samples: a negative (crash after the model loaded) or no adaptive share
        (
            {"algo.name": "apo", "algo.apo_adaptive": True, "algo.apo_ref_samples": 2, "train.group_size": 1},
            "needs apo_ref_samples >= 3",
        ),
        # sampled at T, its log-probs recorded (and recomputed) at 1: off-policy without a word
        ({"rollout.temperature": 0.5}, "rollout.temperature=0.5: training rollouts sample at 1"),
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


# --- values that got through, or failed only after the model loaded (issue 13) ---------------------
@pytest.mark.parametrize(
    "override, message",
    [
        ("train.grad_clip=-1", "train.grad_clip must be > 0, got -1.0 (the largest gradient norm kept"),
        ("algo.kl_coef=-5", "algo.kl_coef must be >= 0, got -5.0"),
        ("algo.gamma=.nan", "algo.gamma must be a finite number, got nan"),
        ("algo.lam=1.5", "algo.lam must be in [0, 1], got 1.5"),
        ("train.actor_lr=0", "train.actor_lr must be > 0, got 0.0"),
        ("train.critic_lr=.inf", "train.critic_lr must be a finite number, got inf"),
        ("train.steps=true", "train.steps must be an integer, got True (a boolean)"),
        ("train.steps=2.5", "train.steps must be an integer, got 2.5"),
        ("train.val_size=0", "train.val_size must be >= 1, got 0"),
        ("train.checkpoint_every=0", "train.checkpoint_every must be >= 1, got 0"),
        ("train.seed=-1", "train.seed must be in [0, 2147483647], got -1"),
        ("train.seed=100000000000000000000", "train.seed must be in [0, 2147483647]"),  # overflowed late
        ("algo.clip_low=1.5", "algo.clip_low must be in [0, 1), got 1.5 (the ratio is clipped below"),
        ("rollout.max_new_tokens=9000", "rollout.max_new_tokens=9000 leaves no room for the prompt"),
        ("train.warmup_steps=0", None),  # with no warm-up, fine
        ("train.seed=1.0", "train.seed must be an integer, got 1.0"),
        ("train.betas=[0.9]", "train.betas must be a list of two numbers"),
        ("train.betas=[0.9, 1.0]", "train.betas must be in [0, 1), got 1.0"),
        ("train.max_skipped_frac=2", "train.max_skipped_frac must be in [0, 1], got 2.0"),
        ("train.keep_final_weights=1", "train.keep_final_weights must be true or false, got 1"),
        ("rollout.temperature=-0.5", "rollout.temperature must be >= 0, got -0.5"),
        ("rollout.enable_think=yes!", "rollout.enable_think must be true or false, got 'yes!'"),
        ("rollout.max_turns=0", "rollout.max_turns must be >= 1, got 0"),
        ("env.kwargs=abc", "env.kwargs must be a mapping, e.g. {size: 8}, got 'abc'"),
        ("env.kwargs={arms: 3}", "unknown field(s) of env 'bandit': env.kwargs.arms"),
        ("env.kwargs={high_risk_p: 2}", "env.kwargs {'high_risk_p': 2.0} rejected by env 'bandit'"),
        # a wrong type read "'<=' not supported between instances of 'int' and 'str'"
        (
            "env.kwargs={high_risk_p: abc}",
            "env.kwargs.high_risk_p: 'abc' is a str; env 'bandit' takes a number",
        ),
        (
            "env.kwargs={shuffle: 1}",
            "env.kwargs.shuffle: 1 is an int; env 'bandit' takes true or false there",
        ),
        ("env.eval_envs=bandit-rev", "env.eval_envs must be a list, e.g. [bandit-rev]"),
        ("env.eval_envs=[bandit-ref]", "env.eval_envs: unknown env 'bandit-ref' (did you mean bandit-rev?)"),
        ("env.name=sokobn", "env.name: unknown env 'sokobn' (did you mean sokoban?)"),
        # each env validated once: the second pass overwrote the first's val/<quantity>/<env>
        ("env.eval_envs=[frozenlake, frozenlake]", "env.eval_envs: 'frozenlake' is listed twice"),
        ("env.eval_envs=[bandit-rev, bandit]", "'bandit' is the training env, validated already"),
        ("env.eval_envs=[bandit-rev, sokoban]", None),
        # 8 x 16 episodes: 200 mini-batches became 128 of one episode, silently
        ("train.mini_batches=200", "train.mini_batches=200 is more than the 128 episodes a rollout plays"),
        ("train.mini_batches=128", None),
        ("model.name=tiny-randm", "did you mean tiny-random?"),
        ("model.name=smollm2", "did you mean smollm2-135m-instruct?"),
        ("model.device=gpu", "model.device='gpu' is not a device"),
    ],
)
def test_bad_values_fail_when_the_config_is_built_and_say_what_is_wrong(override, message):
    if message is None:
        from_dict({}, [override])
        return
    with pytest.raises(ValueError) as e:
        from_dict({}, [override])
    assert message in str(e.value)


def test_a_warm_up_of_zero_steps_is_refused():
    with pytest.raises(ValueError, match="train.warmup=format with train.warmup_steps=0 trains nothing"):
        from_dict({}, ["train.warmup=format", "train.warmup_steps=0"])


def test_a_misspelt_model_is_caught_before_any_hub_lookup(monkeypatch):
    import transformers

    def no_hub(*a, **k):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_hub)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_hub)
    with pytest.raises(ValueError, match="did you mean tiny-random"):
        from_dict({}, ["model.name=tiny-randm"])
    assert from_dict({}, ["model.name=Qwen/Qwen2.5-0.5B-Instruct"]).model.name == "Qwen/Qwen2.5-0.5B-Instruct"


def test_good_values_still_load_and_are_normalised():
    c = from_dict({}, ["train.actor_lr=1", "env.name=sokoban", "env.kwargs={dim_room: [8, 8], num_boxes: 2}"])
    assert c.train.actor_lr == 1.0 and isinstance(c.train.actor_lr, float)  # the hash of 1 and 1.0 agree
    assert (
        c.hash()
        == from_dict(
            {}, ["train.actor_lr=1.0", "env.name=sokoban", "env.kwargs={dim_room: [8, 8], num_boxes: 2}"]
        ).hash()
    )
    assert config.TrainConfig(betas=[0.9, 0.99]).betas == (0.9, 0.99)


def test_yaml_errors_name_the_file_and_line_and_duplicates_are_refused(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("train:\n  steps: 3\nalgo:\n  name: apo\ntrain:\n  seed: 2\n")
    with pytest.raises(
        ValueError,
        match=r"dup.yaml, line 5, column 1: key 'train' is given twice \(first on line 1, column 1\)",
    ):
        config.load(dup)  # PyYAML alone keeps the second train: and drops steps: 3 silently
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("train:\n  steps: 3\n  seed: [1, 2\n")
    with pytest.raises(ValueError, match=r"syntax.yaml, line 4, column 1: while parsing a flow sequence"):
        config.load(syntax)
    for text in ("", "# train:\n#   steps: 3\n"):  # trained every default, silently
        empty = tmp_path / "empty.yaml"
        empty.write_text(text)
        with pytest.raises(ValueError, match=r"empty.yaml is empty \(or holds only comments\): write"):
            config.load(empty)
    bad_value = tmp_path / "value.yaml"
    bad_value.write_text("train:\n  grad_clip: -1\n")
    with pytest.raises(ValueError, match=r"value.yaml: train.grad_clip must be > 0"):
        config.load(bad_value)
    with pytest.raises(ValueError, match=r"override 'train.steps=\[1', line 1"):
        from_dict({}, ["train.steps=[1"])


def test_finished_runs_keep_their_folder_names(monkeypatch):
    """New fields at their neutral value stay out of the hash: run folders made before them are
    still found. The pins were recorded after the round that changed training on purpose (loss
    mask, model.dtype, online-k, RAGEN's envs and prompt prefill, the env's own token cap), then
    when a left-out model.name became the model it stands for (default configs only: the quick
    profile named its model and keeps its folders): a field added later either goes into
    HASH_NEUTRAL or updates these pins in the commit that changes what a run does."""
    monkeypatch.delenv("RAGEN_MODEL", raising=False)
    assert Config().hash() == "e62ceb6bff52"
    assert (
        from_dict({}, {"algo.name": "apo", "env.name": "frozenlake", "env.kwargs": {"size": 4}}).hash()
        == "c3eccfefbf41"
    )
    assert from_dict({}, {"train.keep_final_weights": True}).hash() != Config().hash()
    assert from_dict({}, {"train.max_skipped_frac": 1.0}).hash() != Config().hash()


def test_a_left_out_model_is_recorded_as_the_model_that_will_train(monkeypatch):
    """RAGEN_MODEL picks the model where a config leaves it out; the config records it, so runs of
    two models never share a folder (they did: both hashed a None) and config.yaml names it."""
    monkeypatch.delenv("RAGEN_MODEL", raising=False)
    embedded = from_dict({})
    assert embedded.model.name == "smollm2-135m-instruct" == Config().model.name
    assert embedded.hash() == from_dict({}, {"model.name": "smollm2-135m-instruct"}).hash()
    monkeypatch.setenv("RAGEN_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    qwen = from_dict({})
    assert qwen.model.name == "Qwen/Qwen2.5-0.5B-Instruct" and qwen.hash() != embedded.hash()
    assert from_dict({}, {"model.name": "tiny-random"}).model.name == "tiny-random"  # a named model wins
    monkeypatch.setenv("RAGEN_MODEL", "smollm2")
    with pytest.raises(ValueError, match=r"model.name='smollm2' \(from RAGEN_MODEL\) is not a model we know"):
        from_dict({})
    with pytest.raises(ValueError, match=r"^--model: 'smollm2' \(from RAGEN_MODEL\) is not a model"):
        config.check_model_name("smollm2", "--model")  # a command's flag, as the CLI checks it
    monkeypatch.delenv("RAGEN_MODEL")
    with pytest.raises(
        ValueError, match=r"model.name='SmolLM-2' is not a model we know: did you mean smollm2-135m"
    ):
        from_dict({}, {"model.name": "SmolLM-2"})  # a misspelt short name, far from the whole name
    with pytest.raises(
        ValueError, match=r"model.name='tiny-randm' is not a model we know: did you mean tiny-random"
    ):
        from_dict({}, {"model.name": "tiny-randm"})


def test_an_override_error_blames_the_overrides_not_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: {steps: 2}\n")
    with pytest.raises(ValueError, match=r"^the overrides on .*c.yaml: unknown .*train.stpes"):
        config.load(path, ["train.stpes=3"])  # a key: checked alone, before any value
    with pytest.raises(
        ValueError, match=r"^the overrides on .*c.yaml \(the file itself loads\): train.steps"
    ):
        config.load(path, ["train.steps=0"])  # a value the file did not give
    path.write_text("rollout: {max_new_tokens: 9000}\n")  # loads only with a longer context
    with pytest.raises(ValueError, match=r"^the overrides on .*c.yaml: unknown .*train.stpes"):
        config.load(path, ["rollout.max_context_tokens=16384", "train.stpes=3"])
    path.write_text("train: {stpes: 2}\n")  # the file's own typo is still the file's
    with pytest.raises(ValueError, match=r"^/.*c.yaml: .*stpes"):
        config.load(path, ["train.steps=3"])


def test_one_entry_of_a_mapping_field_is_set_by_a_dotted_key():
    """--set env.kwargs.high_risk_p=0.3 was 'unknown config key(s)'; the one way in was the whole
    mapping, which dropped the file's other entries."""
    cfg = from_dict({"env": {"name": "bandit", "kwargs": {"shuffle": False}}}, ["env.kwargs.high_risk_p=0.3"])
    assert cfg.env.kwargs == {"shuffle": False, "high_risk_p": 0.3}
    assert cfg == from_dict({"env": {"name": "bandit", "kwargs": {"shuffle": False, "high_risk_p": 0.3}}})
    with pytest.raises(ValueError, match="unknown field.*env.kwargs.armz.*Valid: env.kwargs.low_risk_name"):
        from_dict({"env": {"name": "bandit"}}, ["env.kwargs.armz=3"])
    with pytest.raises(ValueError, match="train.steps is not a mapping"):
        from_dict({}, ["train.steps.x=1"])
    with pytest.raises(ValueError, match=r"env.kwargs.NAME=VALUE"):
        from_dict({"env": {"name": "bandit"}}, ["env.kwargs.a.b=1"])
    with pytest.raises(ValueError, match="did you mean train.steps"):
        from_dict({}, ["train.stpes.x=1"])
    for both in (
        ["env.kwargs.high_risk_p=0.3", "env.kwargs={shuffle: true}"],
        ["env.kwargs={}", "env.kwargs.shuffle=true"],
    ):
        with pytest.raises(
            ValueError, match=r"set env.kwargs and one of its entries"
        ):  # one would drop the other
            from_dict({"env": {"name": "bandit"}}, both)


# ---- the command line's bad input: one line naming the fix, exit 2, before any model loads ----


@pytest.mark.parametrize(
    "argv, message",
    [
        # --set takes every word after it: the config given after it used to read as "required: config"
        (["run", "--set", "train.steps=1", "params/examples/bandit_ppo.yaml"],
         "'params/examples/bandit_ppo.yaml' is not KEY=VALUE: put the config before --set"),
        (["warmup", "--set", "train.warmup=format", "cfg.yml"],
         "'cfg.yml' is not KEY=VALUE: put the config before"),
        (["run", "params/examples/bandit_ppo.yaml", "--set", "train.steps"],
         "'train.steps' is not KEY=VALUE, e.g. algo.clip_high=0.28"),
    ],
)  # fmt: skip
def test_a_set_item_without_a_value_is_refused_and_a_config_after_set_says_where_it_goes(
    argv, message, capsys
):
    from ragen_lib.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_command_line_paths_and_files_that_cannot_work_are_one_line_each(tmp_path, capsys, monkeypatch):
    from ragen_lib import models
    from ragen_lib.__main__ import main

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model loaded"))
    # a binary or non-UTF-8 config: the decoder's message alone did not name the file
    (binary := tmp_path / "bin.yaml").write_bytes(b"\xff\xfe garbage")
    assert main(["run", str(binary)]) == 2
    assert f"{binary} is not UTF-8 text" in capsys.readouterr().err
    # --out naming a file: was a NotADirectoryError traceback
    (a_file := tmp_path / "file").write_text("")
    over = ["--set", "model.name=tiny-random", "train.steps=1"]
    assert main(["run", "params/examples/bandit_ppo.yaml", "--out", str(a_file), "--quiet", *over]) == 2
    assert f"--out {a_file} must be a folder this user can write" in capsys.readouterr().err
    # the same error under no folder the user named is a bug's: its traceback is kept
    monkeypatch.setattr(
        config, "load", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "no", "/x/y"))
    )
    with pytest.raises(PermissionError):
        main(["run", "params/examples/bandit_ppo.yaml", "--out", str(tmp_path / "out")])
    # a store on a read-only mount (a GPU host's runs copied back to read): was an EROFS traceback
    erofs = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "ro" / "runs"))
    monkeypatch.setattr(config, "load", lambda *a, **k: (_ for _ in ()).throw(erofs))
    assert main(["run", "params/examples/bandit_ppo.yaml", "--out", str(tmp_path / "ro")]) == 2
    assert (
        f"--out {tmp_path / 'ro'} must be a folder this user can write (a file is there, no permission, "
        "or a read-only filesystem)" in capsys.readouterr().err
    )
    # --png with a suffix matplotlib cannot write: was its ValueError after loading and drawing
    assert main(["plot", str(tmp_path), "--png", "fig.pgn"]) == 2
    assert "--png fig.pgn: its suffix names the format; use one of .avif" in capsys.readouterr().err
    assert main(["plot", str(tmp_path), "--png", "fig"]) == 2  # no suffix (a .png) passes the check:
    assert "no runs with metrics under" in capsys.readouterr().err  # it fails on the empty store


def test_which_estimators_use_a_critic_is_the_registrys_word(monkeypatch):
    """A new estimator that reads the critic's values is declared once, in CRITIC_ESTIMATORS; the
    config's two critic checks follow it (they once named gae in their code)."""
    from ragen_lib import algorithms as A

    monkeypatch.setitem(A.ADVANTAGE_ESTIMATORS, "gae-raw", A.ADVANTAGE_ESTIMATORS["gae"])
    monkeypatch.setattr(config, "CRITIC_ESTIMATORS", ("gae", "gae-raw"))
    cfg = config.from_dict({}, {"algo.advantage": "gae-raw", "algo.kl_coef": 0.0})
    assert cfg.algo.critic and cfg.algo.advantage == "gae-raw"
    with pytest.raises(ValueError, match="algo.advantage=gae-raw needs a critic"):
        config.from_dict({}, {"algo.advantage": "gae-raw", "algo.critic": False, "algo.kl_coef": 0.0})


def test_apo_sums_its_log_ratio_over_the_answer_tokens_only():
    with pytest.raises(ValueError, match="loss_mask=paper: A.*Set algo.loss_mask=response"):
        from_dict({"algo": {"name": "apo", "loss_mask": "paper"}})
    assert from_dict({"algo": {"name": "apo"}}).algo.loss_mask == "response"


# --- pinned by mutation testing: the ends of ranges and cross-field limits ---------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        # filter_keep is (0, 1]: keeping no group trains on nothing
        (["algo.filter_keep=0"], "algo.filter_keep must be in (0, 1], got 0.0"),
        (["algo.filter_keep=1"], None),
        # a turn's token budget equal to the whole context leaves no room for the prompt (>=, not >)
        (
            ["rollout.max_new_tokens=512", "rollout.max_context_tokens=512"],
            "rollout.max_new_tokens=512 leaves no room for the prompt",
        ),
        (["rollout.max_new_tokens=511", "rollout.max_context_tokens=512"], None),
        # the same with the env's default budget (Bandit: 500 new tokens a turn)
        (["rollout.max_context_tokens=500"], "bandit's default of 500 new tokens a turn"),
        (["rollout.max_context_tokens=501"], None),
        # A*-PO's pool may hold exactly the groups × group_size = 8 × 16 = 128 states one step draws
        (["algo.name=apo", "algo.apo_prompt_pool=128"], None),
        (["algo.name=apo", "algo.apo_prompt_pool=127"], "from a pool of algo.apo_prompt_pool=127; raise it"),
    ],
)
def test_each_limit_is_refused_at_its_end_and_the_value_beside_it_loads(overrides, message):
    if message is None:
        from_dict({}, overrides)
        return
    with pytest.raises(ValueError) as e:
        from_dict({}, overrides)
    assert message in str(e.value)
