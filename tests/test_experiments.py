"""Experiments: grid files, profiles, variants, and training a grid in worker processes."""

import os

import pytest

from ragen_lib import config, experiments, runs
from ragen_lib.runs import Run

CFG = config.from_dict({"algo": {"name": "starpo-ppo"}, "env": {"name": "bandit"}})


def seeds(*values: int) -> list[config.Config]:
    return [config.from_dict(CFG.to_dict(), {"train.seed": s}) for s in values]


def test_points_product_and_list():
    grid = experiments.points({"algo.name": ["a", "b"], "train.seed": [0, 1]})
    assert grid == [
        {"algo.name": "a", "train.seed": 0},
        {"algo.name": "a", "train.seed": 1},
        {"algo.name": "b", "train.seed": 0},
        {"algo.name": "b", "train.seed": 1},
    ]
    assert experiments.points([{"algo.name": "apo"}, {"study": "x"}]) == [
        {"algo.name": "apo"},
        {"study": "x"},
    ]


def test_every_finding_name_is_its_file_notebook_and_grid(tmp_path):
    """One name per finding: params/<name>.yaml, notebooks/<name>.py, and the notebook asks for it."""
    root = experiments.ROOT
    for path in sorted((root / "params").glob("[0-9][0-9]_*.yaml")):
        name, profile_points = experiments.variants(path.stem, "smoke")
        assert name == path.stem and profile_points
        notebook = (root / "notebooks" / f"{name}.py").read_text()
        assert f'experiments.run_finding("{name}"' in notebook
    bad = tmp_path / "x.yaml"
    bad.write_text("finding: x\nbase: {}\n")
    with pytest.raises(ValueError, match="file's name is the finding's name"):
        experiments.variants(bad, "smoke")
    with pytest.raises(FileNotFoundError, match="findings: 01_instability"):
        experiments.variants("01_instabilty", "smoke")


def test_grid_order_defaults_base_profile_variant_and_labels(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "base: {train.steps: 7, algo.name: starpo-s}\n"
        "grid:\n  - {study: a, rollout.max_new_tokens: 5}\n  - {study: b}\n"
    )
    finding, points = experiments.variants(grid, "smoke", seeds=[0, 1])
    assert finding == "g" and len(points) == 4  # the file's name is the finding's
    cfg, labels = points[0]
    assert labels == {"study": "a"}
    assert cfg.rollout.max_new_tokens == 5  # the variant beats the profile's 8
    assert cfg.train.steps == 3  # the profile beats the base's 7
    assert cfg.algo.filter_keep == 0.25  # base algo.name's preset
    assert [c.train.seed for c, _ in points] == [0, 1, 0, 1]
    assert points[2][0].rollout.max_new_tokens == 8  # variant b keeps the profile's


def test_cap_batch_shrinks_p_and_n_alike():
    assert experiments.cap_batch({"train.groups": 32, "train.group_size": 4}, 16) == {
        "train.groups": 11,
        "train.group_size": 2,
    }  # s = sqrt(16/128) = 0.354
    assert experiments.cap_batch({"train.groups": 8, "train.group_size": 16}, 16) == {
        "train.groups": 3,
        "train.group_size": 6,
    }
    small = {"train.groups": 2, "train.group_size": 2}
    assert experiments.cap_batch(small, 16) == small and experiments.cap_batch(small, None) == small


def test_profile_errors_and_cpu_worker_slots(monkeypatch):
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid profiles: smoke, quick, paper"):
        experiments.load_profile("fast")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert experiments.worker_slots(2) == [{"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4"}]
    with pytest.raises(ValueError, match="runs_per_device must be >= 1"):
        experiments.worker_slots(0)


def test_run_grid_reuses_finished_runs_and_load_reads_them(tmp_path):
    calls = []

    def fake_train(cfg, run):
        calls.append(cfg.train.seed)
        for s in range(3):
            run.log(s, {"rollout/success": s / 10 + cfg.train.seed})
        run.mark_done()

    cfgs = seeds(0, 1)
    experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    experiments.run_grid(tmp_path, "f", cfgs, fake_train, progress=False)
    assert calls == [0, 1]  # the second call reused both
    df = runs.load(tmp_path, "f")
    assert len(df) == 6 and set(df["cfg.train.seed"]) == {0, 1} and df["done"].all()
    assert {"run_id", "finding", "step", "rollout/success", "cfg.algo.clip_high"} <= set(df.columns)
    empty = runs.load(tmp_path, "nothing")
    assert empty.empty and {"run_id", "finding", "done", "step"} <= set(empty.columns)


def test_run_grid_reraises_and_names_the_failed_run(tmp_path, capsys):
    def boom(cfg, run):
        run.log(0, {"a": 1})
        raise RuntimeError("diverged")

    with pytest.raises(RuntimeError, match="diverged"):
        experiments.run_grid(tmp_path, "f", [CFG], boom, progress=False)
    assert runs.run_dir(tmp_path, "f", CFG).name in capsys.readouterr().out
    assert not Run(runs.run_dir(tmp_path, "f", CFG), CFG).done


def pooled_train(cfg, run):
    """Module level so that spawned pool workers can unpickle it."""
    if cfg.train.seed == 99:
        raise RuntimeError("diverged")
    run.log(0, {"slot": os.environ["RAGEN_TEST_SLOT"], "pid": os.getpid()})
    run.mark_done()


def test_run_grid_pool_uses_every_slot_env_and_keeps_going_after_a_failure(tmp_path):
    cfgs = seeds(0, 1, 2, 99)
    slots = [{"RAGEN_TEST_SLOT": "a"}, {"RAGEN_TEST_SLOT": "b"}]
    with pytest.raises(RuntimeError, match="1 of 4 runs failed"):
        experiments.run_grid(tmp_path, "f", cfgs, pooled_train, progress=False, slots=slots)
    df = runs.load(tmp_path, "f")
    assert sorted(df["cfg.train.seed"]) == [0, 1, 2]  # the three good runs finished despite the failure
    assert set(df["slot"]) <= {"a", "b"} and os.getpid() not in set(df["pid"])
    assert not Run(runs.run_dir(tmp_path, "f", cfgs[3]), cfgs[3]).done


def test_dict_valued_grid_keys_cross_a_variant_list_and_profiles_gate_variants(tmp_path):
    grid = experiments.points({"env.name": ["a", "b"], "variant": [{"x.y": 1}, {"x.y": 2, "study": "s"}]})
    assert grid == [{"env.name": "a", "x.y": 1}, {"env.name": "a", "x.y": 2, "study": "s"},
                    {"env.name": "b", "x.y": 1}, {"env.name": "b", "x.y": 2, "study": "s"}]  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text("grid:\n  - {train.steps: 2}\n  - {train.steps: 4, profiles: [paper]}\n")
    assert len(experiments.variants(path, "smoke")[1]) == 1
    _, paper = experiments.variants(path, "paper", seeds=[0])
    assert [c.train.steps for c, labels in paper] == [2, 4] and all("profiles" not in lab for _, lab in paper)
