"""Training a profile a lease at a time (ragen_lib/backlog.py) and judging the runs stored so far
(RAGEN_TRAIN=stored): the order, the estimates and the budget worked out by hand on a small profile
of our own; then what a notebook, a verdict, a figure and the report say of runs not trained."""

import dataclasses
import json
from pathlib import Path

import pytest

from ragen_lib import analysis, backlog, config, experiments, metrics, plots, runs, workers
from ragen_lib.__main__ import main
from ragen_lib.runs import Run

H100 = "NVIDIA H100 80GB HBM3"
PROFILES = """
p:
  seeds: [0]
  overrides: {model.name: tiny-random, model.device: cpu, train.steps: 4, train.groups: 2,
              train.group_size: 2, rollout.max_new_tokens: 8, rollout.max_turns: 2, train.val_every: 0}
  judged:
    - {finding: 01_a, where: {env.name: bandit}, seeds: [0, 1]}
    - {finding: 02_b, where: {study: x}, seeds: [0, 1, 2]}
"""
# 01_a: Bandit PPO and GRPO judged on seeds 0, 1 (S1: 4 runs); Sokoban PPO and GRPO pilots (seed 0).
# 02_b: study x, Bandit PPO on seeds 0-2 (S2), two of them 01_a's runs; study y, Bandit GRPO seed 0:
# a pilot point whose config is 01_a's judged GRPO seed 0, so one run serves S1 and the pilot.
GRIDS = {
    "01_a": "grid:\n  env.name: [bandit, sokoban]\n  algo.name: [starpo-ppo, starpo-grpo]\n",
    "02_b": "base: {env.name: bandit}\ngrid:\n  - {study: x, algo.name: starpo-ppo}\n"
    "  - {study: y, algo.name: starpo-grpo}\n",
}
S1, S2 = "01_a (env.name=bandit)", "02_b (study=x)"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project of two findings (params/ under tmp_path) and its empty run store; nothing measured
    by `make bench`, so every estimate comes from the store."""
    params = tmp_path / "params"
    params.mkdir()
    (params / "profiles.yaml").write_text(PROFILES)
    for name, text in GRIDS.items():
        (params / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(experiments, "ROOT", tmp_path)
    monkeypatch.setattr(experiments, "measured_step", lambda *a, **k: None)
    return tmp_path / "store"


def finish(path: Path, cfg, *, device=H100, step_s=2.0, setup_s=30.0) -> None:
    """A finished run of `cfg` at `path` that took `step_s` a step after `setup_s` of setup."""
    run = Run(path, cfg)
    for s in cfg.train.logged_steps:
        run.log(s, {"time/step": step_s, **({"time/setup": setup_s} if s == 0 else {})})
    run.mark_done({"device": device})
    run.close()


def names(items):
    return [(i.cfg.env.name, i.cfg.algo.name, i.cfg.train.seed, i.finding) for i in items]


def test_the_backlog_finishes_the_cheapest_study_first_seed_by_seed_and_lists_a_shared_run_once(project):
    items, studies = backlog.backlog("p", project, device=H100)
    # nothing measured: the cost is steps × episodes × turns × tokens. S2 has 3 Bandit runs, S1 4:
    # S2 first; then only S1's GRPO runs are left (its PPO ones are S2's); then the pilots.
    assert names(items) == [
        ("bandit", "starpo-ppo", 0, "01_a"),
        ("bandit", "starpo-ppo", 1, "01_a"),
        ("bandit", "starpo-ppo", 2, "02_b"),
        ("bandit", "starpo-grpo", 0, "01_a"),
        ("bandit", "starpo-grpo", 1, "01_a"),
        ("sokoban", "starpo-ppo", 0, "01_a"),
        ("sokoban", "starpo-grpo", 0, "01_a"),
    ]
    assert [i.studies for i in items[:5]] == [(S1, S2), (S1, S2), (S2,), (S1, "pilot"), (S1,)]
    assert [i.judged for i in items] == [True] * 5 + [False] * 2
    assert all(i.seconds is None for i in items)  # nothing stored, nothing benchmarked
    assert studies == {S1: (0, 4), S2: (0, 3)}
    text = backlog.format_backlog(items, studies, "p")
    assert f"S1 {S1}: 0 of 4 runs stored (4 to train)" in text
    assert "01_a/starpo-grpo_bandit_s0-" in text and "S1, pilot" in text

    for item in items[:3]:  # S2 complete (its third run under 02_b)
        finish(item.path, item.cfg)
    items, studies = backlog.backlog("p", project, device=H100)
    assert studies == {S1: (2, 4), S2: (3, 3)}
    assert names(items)[0] == ("bandit", "starpo-grpo", 0, "01_a")
    assert "(complete)" in backlog.format_backlog(items, studies, "p")


def test_estimates_scale_the_stored_runs_seconds_by_work_and_add_their_setup(project):
    items, _ = backlog.backlog("p", project, device=H100)
    ppo0, grpo0, sokoban = items[0], items[3], items[5]
    finish(ppo0.path, ppo0.cfg, step_s=2.0, setup_s=30.0)
    est = backlog.Estimator(project, H100, None)
    # the same env and algorithm on this GPU: 4 steps × 2 s + its 30 s of setup
    assert est.estimate(ppo0.cfg) == (pytest.approx(38.0), False)
    # GRPO on Bandit: no run of it stored, so any run on this GPU, scaled by work (the same work):
    # extrapolated, so --train wants EXTRAPOLATED_MARGIN of it
    assert est.estimate(grpo0.cfg) == (pytest.approx(38.0), True)
    # twice the episodes a step: twice the seconds a step (Sokoban: no Sokoban run stored either)
    wide = config.from_dict(sokoban.cfg.to_dict(), {"train.groups": 4})
    assert backlog.work(wide) == 2 * backlog.work(sokoban.cfg) == 2 * backlog.work(ppo0.cfg)
    assert est.estimate(wide)[0] == pytest.approx(4 * 4.0 + 30.0)
    # another GPU measured it: an H200 takes the H100's figure (the same class), a CPU does not
    assert backlog.Estimator(project, "NVIDIA H200", None).estimate(ppo0.cfg)[0] == pytest.approx(38.0)
    assert backlog.Estimator(project, "cpu", None).estimate(ppo0.cfg)[0] is None
    # the GRPO run measured on this GPU takes precedence over the PPO one for GRPO, its step and its
    # setup (A*-PO's holds its stage 1: another algorithm's would hide it)
    finish(grpo0.path, grpo0.cfg, step_s=5.0, setup_s=100.0)
    est = backlog.Estimator(project, H100, None)
    assert est.estimate(grpo0.cfg) == (pytest.approx(4 * 5.0 + 100.0), False)
    assert est.estimate(ppo0.cfg) == (pytest.approx(38.0), False)
    # nothing stored on a CPU: `make bench`'s step, scaled (experiments.estimate_seconds), + SETUP_S
    bench = {"s_per_step": 3.0, "shape": None, "model": "tiny-random"}
    assert backlog.Estimator(project, "cpu", bench).estimate(ppo0.cfg) == (
        pytest.approx(12.0 + backlog.SETUP_S),
        True,
    )


def test_work_counts_validation_episodes_and_a_rate_is_per_update(project):
    """A judged run validates more than the pilot that often measured the speed, and an online-k row
    holds k updates: both scale the estimate."""
    items, _ = backlog.backlog("p", project, device=H100)
    cfg = items[0].cfg  # 2 × 2 episodes, 2 turns × 8 tokens, no validation (val_every 0)
    assert backlog.work(cfg) == 4 * 2 * 8
    validated = config.from_dict(cfg.to_dict(), {"train.val_every": 5, "train.val_size": 40})
    assert backlog.work(validated) == (4 + backlog.VAL_WEIGHT * 40 / 5) * 2 * 8
    # an online-2 run: 2 logged steps of 6 s for 4 updates, 3 s an update
    online = config.from_dict(cfg.to_dict(), {"train.online_k": 2})
    finish(runs.run_dir(project, "01_a", online), online, step_s=6.0, setup_s=0.0)
    assert backlog.Estimator(project, H100, None).estimate(cfg)[0] == pytest.approx(4 * 3.0)


def test_next_run_passes_over_a_run_too_long_for_what_is_left():
    def item(name, seconds):
        cfg = config.from_dict({"model": {"name": "tiny-random"}})
        return backlog.Item("f", cfg, Path(name), ("s",), True, seconds)

    long, short, unknown = item("a", 300.0), item("b", 100.0), item("c", None)
    guessed = dataclasses.replace(item("g", 100.0), extrapolated=True)
    assert backlog.next_run([guessed, short], 150) is short  # 100 s from other runs: 200 s wanted
    assert backlog.next_run([guessed, short], 200) is guessed
    assert backlog.next_run([long, short], 400) is long
    assert backlog.next_run([long, short], 200) is short
    assert backlog.next_run([long, short], 110) is None  # 100 s with the margin: 115 s
    assert backlog.next_run([long, short], 50) is None
    assert backlog.next_run([long, short], 400, skip={"a"}) is short
    # unknown beside known: not started (it might not finish); all unknown: the first run of a
    # budget measures them, a later one is not started (nothing would be known to fit)
    assert backlog.next_run([unknown, short], 50) is None
    assert backlog.next_run([unknown, item("d", None)], 100) is unknown  # the first of equals
    assert backlog.next_run([unknown, item("d", None)], 1e9, first=False) is None
    assert backlog.next_run([unknown], backlog.SETUP_S) is None  # not even a setup fits
    # knowing nothing, the smallest run measures the rest: a 30-step pilot before a 150-step run
    pilot = backlog.Item("f", config.from_dict({"model": {"name": "tiny-random"}, "train": {"steps": 30}}),
                         Path("e"), ("pilot",), False, None)  # fmt: skip
    assert backlog.next_run([unknown, pilot], 100) is pilot
    # what no budget of this length starts, however many leases come: said, not passed over forever
    assert backlog.beyond([long, short, unknown, guessed], 250) == [long]
    assert backlog.beyond([long, short, unknown, guessed], 150) == [long, guessed]


def test_train_measures_its_first_run_then_starts_only_what_fits_and_passes_over_a_failure(
    project, monkeypatch, capsys
):
    """A fake clock: each run takes 100 s of it. Run 1 (no estimate) measures 4 × 15 s + 30 s = 90 s
    a PPO run, 103.5 s with the margin; of 390 s, run 2 fits the 290 s left, run 3 (S2's seed 2)
    fits the 190 s then left but fails and is passed over, taking none; run 4, GRPO, estimated from
    the PPO runs, wants twice 90 s and fits the same 190 s; then nothing fits the 90 s left."""
    clock = {"t": 0.0}
    monkeypatch.setattr(backlog.time, "monotonic", lambda: clock["t"])
    calls = []

    def fake_grid(root, finding, cfgs, train_fn=None, **_):
        [cfg] = cfgs
        assert train_fn.keywords == {"checkpoints": True}
        calls.append((cfg.algo.name, cfg.train.seed))
        if (cfg.algo.name, cfg.train.seed) == ("starpo-ppo", 2):
            raise RuntimeError("1 of 1 runs failed")
        clock["t"] += 100.0
        finish(runs.run_dir(root, finding, cfg), cfg, device="cpu", step_s=15.0, setup_s=30.0)

    monkeypatch.setattr(workers, "run_grid", fake_grid)
    out = backlog.train("p", 390, project)
    assert calls == [("starpo-ppo", 0), ("starpo-ppo", 1), ("starpo-ppo", 2), ("starpo-grpo", 0)]
    assert len(out["trained"]) == 3 and [f.split("/")[0] for f in out["failed"]] == ["02_b"]
    assert out["failed"][0] in [name for name, _ in out["left"]]  # still to train, by a later budget
    assert out["beyond"] == []  # each run left fits 390 s
    printed = capsys.readouterr().out
    assert "estimated unknown: nothing measured here yet" in printed and "(estimated 90 s)" in printed
    # a lease's runs (--no-checkpoints) reach the trainer without checkpoints
    seen = []
    monkeypatch.setattr(workers, "run_grid", lambda root, finding, cfgs, train_fn, **_: seen.append(train_fn))
    backlog.train("p", 390, project, checkpoints=False)
    assert seen and seen[0].func is workers.train_quietly and seen[0].keywords == {"checkpoints": False}


def test_a_grid_told_not_to_train_reuses_what_is_stored_and_trains_nothing(tmp_path, capsys):
    cfgs = [
        config.from_dict({"model": {"name": "tiny-random"}, "train": {"steps": 2, "seed": s}}) for s in (0, 1)
    ]
    finish(runs.run_dir(tmp_path, "f", cfgs[0]), cfgs[0])
    workers.run_grid(tmp_path, "f", cfgs, lambda *a: pytest.fail("trained"), progress=False, train=False)
    assert "f: 1 of 2 runs stored; 1 not trained (RAGEN_TRAIN=stored" in capsys.readouterr().out
    missing = experiments.missing_runs(tmp_path, "f", [(c, {"judged": True}) for c in cfgs])
    assert [(m["cfg.train.seed"], m["judged"]) for m in missing] == [(1, True)]
    assert missing[0]["run_id"] == runs.run_dir(tmp_path, "f", cfgs[1]).name


def test_ragen_train_names_its_modes(monkeypatch):
    monkeypatch.setenv("RAGEN_TRAIN", "stord")
    with pytest.raises(ValueError, match=r"RAGEN_TRAIN='stord' is not a mode \(did you mean stored\?\)"):
        experiments.train_mode()
    monkeypatch.setenv("RAGEN_TRAIN", " ")
    assert experiments.train_mode() == "all"


def test_a_notebook_frame_with_nothing_stored_keeps_its_grids_columns_and_names_what_is_missing(
    project, monkeypatch, capsys
):
    monkeypatch.setenv("RAGEN_TRAIN", "stored")
    df = experiments.run_finding("01_a", "p", root=project, progress=False)
    assert df.empty and {"cfg.env.name", "cfg.algo.name", "cfg.train.seed", "judged"} <= set(df.columns)
    assert set(metrics.METRICS) <= set(df.columns)  # what the notebook's tables and figures read
    assert df.attrs["planned"] == 6 and len(df.attrs["missing"]) == 6
    assert df.attrs["parameters"] == {}  # the profile's design, whose verdict goes to outputs/p
    assert df.attrs["results"] == str(experiments.results_root("p"))
    # a notebook's parameters, which its verdict and REPORT.md then name, in a folder of their own
    df = experiments.run_finding(
        "01_a", "p", root=project, progress=False, seeds="[5]", overrides='{"train.actor_lr": 0.5}'
    )
    assert df.attrs["parameters"] == {"seeds": [5], "overrides": {"train.actor_lr": 0.5}}
    assert df.attrs["results"] == str(experiments.results_root("p", df.attrs["parameters"]))
    assert "/variants/train.actor_lr=0.5_seeds=-5-" in df.attrs["results"]
    # `make replicate SEEDS=... OVERRIDES=...` puts the executed copy where `plan --results-folder`
    # says, from the same text: the folder the notebook then writes its verdict to
    from ragen_lib.__main__ import main

    capsys.readouterr()
    given = ["--seeds", "[5]", "--overrides", '{"train.actor_lr": 0.5}']
    assert main(["plan", "p", "--finding", "01_a", *given, "--results-folder"]) == 0
    assert capsys.readouterr().out == df.attrs["results"] + "\n"
    assert main(["plan", "p", "--finding", "01_a", "--seeds", "", "--overrides", "", "--results-folder"]) == 0
    assert capsys.readouterr().out == str(experiments.results_root("p")) + "\n"  # the design's
    assert main(["plan", "p", *given, "--results-folder"]) == 2  # a grid point of which notebook?
    err = capsys.readouterr().err
    assert "--seeds and --overrides are one notebook's parameters: give one --finding" in err
    typo = ["--overrides", '{"train.actr_lr": 0.5}', "--results-folder"]
    assert main(["plan", "p", "--finding", "01_a", *typo]) == 2  # a misspelt key, before a kernel starts
    assert "did you mean train.actor_lr?" in capsys.readouterr().err


def _frame(seeds_a, seeds_b, rate_a=0.8, rate_b=0.2):
    """Late validation success, 9 steps, per seed of arm a (PPO) and b (GRPO), judged."""
    import pandas as pd

    rows = []
    for algo, seeds, rate in (("starpo-ppo", seeds_a, rate_a), ("starpo-grpo", seeds_b, rate_b)):
        for s in seeds:
            for step in range(9):
                rows.append(
                    {"run_id": f"{algo}{s}", "cfg.algo.name": algo, "cfg.train.seed": s, "step": step,
                     "val/success": rate + 0.01 * s, "cfg.train.val_size": 512, "done": True, "judged": True}
                )  # fmt: skip
    return pd.DataFrame(rows)


CLAIM = analysis.Claim("late", "PPO beats GRPO late", "val/success", 0.1)
A, B = {"cfg.algo.name": "starpo-ppo"}, {"cfg.algo.name": "starpo-grpo"}


def test_a_row_whose_arms_lack_a_planned_run_is_inconclusive_and_names_them():
    df = _frame([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    full = analysis.judge(df, CLAIM, A, B, floor_ceiling=None)
    assert full.status == analysis.REPRODUCED  # the design's five seeds decide it
    part = df[df["cfg.train.seed"] < 3]
    missing = [
        {"run_id": f"{a}{s}", "cfg.algo.name": a, "cfg.train.seed": s, "judged": True}
        for a, seeds in (("starpo-ppo", (3, 4)), ("starpo-grpo", (4,)))
        for s in seeds
    ]
    row = analysis.judge(part, CLAIM, A, B, floor_ceiling=None, missing=missing)
    assert row.status == analysis.INCONCLUSIVE
    assert row.reason.startswith("not trained: arm a seeds [3, 4]; arm b seed 4 (")
    # another arm's missing runs leave this row alone
    other = [{**m, "cfg.algo.name": "apo"} for m in missing]
    assert analysis.judge(part, CLAIM, A, B, floor_ceiling=None, missing=other).status == analysis.REPRODUCED
    # a pilot arm stays PILOT and names them
    pilot = analysis.judge(
        part.assign(judged=False), CLAIM, A, B, floor_ceiling=None,
        missing=[{**m, "judged": False} for m in missing],
    )  # fmt: skip
    assert pilot.status == analysis.PILOT and "not trained: arm a seeds [3, 4]" in pilot.reason
    # an arm selected on a label the notebook derives from data: a missing run cannot be placed
    derived = analysis.judge(
        part.assign(variant=part["cfg.algo.name"]), CLAIM, {"variant": "starpo-ppo"},
        {"variant": "starpo-grpo"}, floor_ceiling=None, missing=missing,
    )  # fmt: skip
    assert derived.status == analysis.INCONCLUSIVE
    assert "3 of the grid's runs, which the arms' selector ['variant'] cannot tell apart" in derived.reason
    # ... even where those runs are pilots: they could be anyone's, and the arms are judged
    pilots = [{**m, "judged": False} for m in missing]
    derived = analysis.judge(
        part.assign(variant=part["cfg.algo.name"]), CLAIM, {"variant": "starpo-ppo"},
        {"variant": "starpo-grpo"}, floor_ceiling=None, missing=pilots,
    )  # fmt: skip
    assert derived.status == analysis.INCONCLUSIVE and "cannot tell apart" in derived.reason


def test_a_label_the_notebook_derives_is_given_to_the_runs_not_stored_too():
    """`experiments.label`: the missing runs carry the notebook's label, so a row whose arms are
    whole decides while another arm's runs are missing, and a row whose arm lacks one does not."""
    df = _frame([0, 1, 2], [0, 1, 2])
    other = {"run_id": "apo0", "cfg.algo.name": "apo", "cfg.train.seed": 0, "judged": False}
    own = {"run_id": "starpo-ppo3", "cfg.algo.name": "starpo-ppo", "cfg.train.seed": 3, "judged": True}
    df.attrs["missing"] = [other, own]
    experiments.label(df, "variant", lambda r: r["cfg.algo.name"].upper())
    assert [m["variant"] for m in df.attrs["missing"]] == ["APO", "STARPO-PPO"]
    a, b = {"variant": "STARPO-PPO"}, {"variant": "STARPO-GRPO"}
    row = analysis.judge(df, CLAIM, a, b, floor_ceiling=None, missing=df.attrs["missing"])
    assert row.status == analysis.INCONCLUSIVE and row.reason.startswith("not trained: arm a seed 3 (")
    row = analysis.judge(df, CLAIM, a, b, floor_ceiling=None, missing=[other])
    assert row.status == analysis.REPRODUCED
    empty = df.iloc[:0].copy()  # no run stored: still a column
    experiments.label(empty, "variant", lambda r: r["cfg.algo.name"].upper())
    assert "variant" in empty and empty.empty


def test_the_verdict_the_figure_and_the_report_say_runs_are_missing(tmp_path, monkeypatch):
    import pandas as pd

    df = _frame([0, 1, 2], [0, 1, 2])
    df.attrs.update(finding="09_x", planned=10, missing=[
        {"run_id": "starpo-ppo3", "cfg.algo.name": "starpo-ppo", "cfg.train.seed": 3, "judged": True}
    ])  # fmt: skip
    verdict = analysis.decide(df, "PPO beats GRPO", [(CLAIM, A, B)], ["late"], floor_ceiling=None)
    assert (verdict.planned, verdict.stored, verdict.status) == (10, 9, analysis.INCONCLUSIVE)
    assert "runs: 9 of the grid's 10 stored; the rest not trained" in str(verdict)
    # an empty selection of a grid with runs not stored: a figure that says so, not an error
    fig = plots.curves(df[df["cfg.algo.name"] == "apo"], ["val/success"], hue="cfg.algo.name", title="T")
    assert "not trained yet" in fig.axes[0].texts[0].get_text()
    with pytest.raises(ValueError, match="no rows to draw"):  # with nothing missing, a filter's typo
        plots.curves(pd.DataFrame(columns=df.columns), ["val/success"], hue="cfg.algo.name")
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(experiments, "findings", lambda: ["09_x"])
    verdict.write(runs.output_root("smoke"))
    report = analysis.report("smoke").read_text()
    assert "**Stored runs only: 09_x judged the runs stored" in report
    assert "9 of the grid's 10 runs stored, the rest not trained" in report
    assert json.loads((tmp_path / "smoke" / "verdicts" / "09_x.json").read_text())["stored"] == 9
    assert "notebook parameters" not in str(verdict) + report  # the profile's design


def test_a_notebook_run_with_parameters_writes_its_own_folder_and_the_design_verdict_stays(
    tmp_path, monkeypatch
):
    """A researcher's grid (`papermill -p overrides ...`, one point per run) once wrote each point's
    verdict and figures over the profile's design's, each point over the last. Now a set of
    parameters has a folder of its own; the verdict, its JSON and REPORT.md name the parameters,
    and the report's table stays the design's."""
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(experiments, "findings", lambda: ["09_x"])
    design = _frame([0, 1, 2], [0, 1, 2])
    design.attrs.update(finding="09_x", parameters={}, results=str(experiments.results_root("smoke", {})))
    v = analysis.decide(design, "PPO beats GRPO", [(CLAIM, A, B)], ["late"], floor_ceiling=None)
    v.write(design.attrs["results"])
    points = [{"seeds": [0, 1, 2], "overrides": {"algo.kl_coef": k}} for k in (0.5, 0.05)]
    folders = []
    for given in points:
        df = _frame([0, 1, 2], [0, 1, 2])
        results = str(experiments.results_root("smoke", given))
        df.attrs.update(finding="09_x", parameters=given, results=results)
        verdict = analysis.decide(df, "PPO beats GRPO", [(CLAIM, A, B)], ["late"], floor_ceiling=None)
        fig = plots.curves(df, ["val/success"], hue="cfg.algo.name", title="T")
        verdict.figures = [plots.save(fig, df.attrs["results"], "09_x_curves")]
        fig.clf()  # drawn and saved: a test suite's open figures add up (matplotlib warns past 20)
        folders.append(verdict.write(df.attrs["results"]).parent.parent)
        kl = given["overrides"]["algo.kl_coef"]
        assert f'notebook parameters: seeds [0, 1, 2]; overrides {{"algo.kl_coef": {kl}}}' in str(verdict)
    base = tmp_path / "smoke"
    assert folders[0] != folders[1] and all(f.parent == base / "variants" for f in folders)
    assert folders[0].name.startswith("algo.kl_coef=0.5_seeds=-0-1-2-")  # readable, then a hash
    for folder, given in zip(folders, points):
        assert json.loads((folder / "verdicts" / "09_x.json").read_text())["parameters"] == given
        assert (folder / "figures" / "09_x_curves.png").exists()
    assert json.loads((base / "verdicts" / "09_x.json").read_text())["parameters"] == {}  # the design's
    assert not (base / "figures").exists()  # no point's figure drawn over the design's
    report = analysis.report("smoke").read_text()
    table, variants = report.split("## Variants: notebooks run with parameters (2)")
    assert "notebook parameters" not in table
    assert 'overrides {"algo.kl_coef": 0.05}' in variants and 'overrides {"algo.kl_coef": 0.5}' in variants
    assert f"](variants/{folders[0].name}/figures/09_x_curves.png)" in variants
    # a bare profile name, as notebooks passed before variants had folders, would write to ./smoke
    with pytest.raises(ValueError, match=r"pass the notebook's df.attrs\['results'\]"):
        v.write("smoke")
    with pytest.raises(ValueError, match="not a results folder"):
        plots.save(fig, "smoke", "09_x_curves")


def test_run_finding_names_the_results_folder_of_its_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    assert experiments.results_root("smoke") == experiments.results_root("smoke", {}) == tmp_path / "smoke"
    a = experiments.results_root("smoke", {"overrides": {"train.steps": 50}})
    # the same parameters again, or in another order: one folder; another value: another
    assert a == experiments.results_root("smoke", {"overrides": {"train.steps": 50}})
    two = {"overrides": {"train.steps": 50, "algo.kl_coef": 0.1}, "seeds": [0, 1]}
    again = {"seeds": [0, 1], "overrides": {"algo.kl_coef": 0.1, "train.steps": 50}}
    assert experiments.results_root("smoke", two) == experiments.results_root("smoke", again)
    assert a != experiments.results_root("smoke", {"overrides": {"train.steps": 51}})
    long = {"overrides": {f"algo.key_{i}": "x" * 30 for i in range(5)}}
    assert len(experiments.results_root("smoke", long).name) <= 60 + 9


def test_the_cli_lists_the_backlog_and_refuses_a_bad_profile_or_budget(project, capsys):
    assert main(["backlog", "p", "--root", str(project)]) == 0
    assert "backlog of profile p" in capsys.readouterr().out
    assert main(["backlog", "fast"]) == 2
    assert "unknown profile 'fast'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["backlog", "p", "--train", "0"])


def _store(root: Path, finding: str, cfg, rng) -> None:
    """A finished run of `cfg` with random metrics at every logged step (no training), on an H100."""
    path = runs.run_dir(root, finding, cfg)
    path.mkdir(parents=True)
    shifted = ["val/success/bandit-heldout", "val/success/bandit-heldout-rev", "val/success/frozenlake"]
    keys = [*metrics.METRICS, *shifted]
    lines = (
        json.dumps({"step": s, **dict(zip(keys, rng.random(len(keys)).tolist()))})
        for s in cfg.train.logged_steps
    )
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")  # one write: 150 fsyncs a run add up
    with Run(path, cfg) as run:
        run.mark_done({"device": H100})


def _notebook_verdict(name: str):
    """Run notebook `name`'s source at the quick profile (figures not saved) and return its verdict."""
    import re
    from unittest import mock

    import matplotlib.pyplot as plt

    source = Path(f"notebooks/{name}.py").read_text()
    source = re.sub(r"^profile = None\b", "profile = 'quick'", source, count=1, flags=re.M)
    space = {"__name__": "__main__"}
    with (
        mock.patch.object(plots, "save", mock.MagicMock(return_value="figure.png")),
        mock.patch("IPython.display.display"),
    ):
        exec(compile(source, f"notebooks/{name}.py", "exec"), space)
    plt.close("all")
    return space["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize("stored", ["some", "none"])
@pytest.mark.parametrize("name", [f for f in experiments.findings()])
def test_every_notebook_renders_the_quick_runs_stored_so_far_and_judges_none_on_part_of_a_design(
    name, stored, tmp_path, monkeypatch
):
    """RAGEN_TRAIN=stored on a store a few GPU leases would leave: seed 0 of the quick runs but the
    GRPO ones (a whole arm missing: empty selections in figures) and every third config; or none of
    the finding's runs, as before the first lease reaches it. The notebook runs to its verdict, and
    no row whose arms miss a planned run reads REPRODUCED or NOT REPRODUCED."""
    import numpy as np

    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    monkeypatch.setenv("RAGEN_TRAIN", "stored")
    rng = np.random.default_rng(0)
    finding, pairs = experiments.variants(name, "quick")
    configs = list({c.hash(): c for c, _ in pairs}.values())
    kept = {
        c.hash(): c
        for n, c in enumerate(configs)
        if stored == "some" and c.train.seed == 0 and c.algo.name != "starpo-grpo" and n % 3 != 1
    }
    for cfg in kept.values():
        _store(tmp_path / "quick", finding, cfg, rng)
    verdict = _notebook_verdict(name)
    assert verdict.stored == len({runs.run_dir(tmp_path, finding, c).name for c in kept.values()})
    assert verdict.stored < verdict.planned
    decided = [r for r in verdict.rows if r.status in (analysis.REPRODUCED, analysis.NOT_REPRODUCED)]
    assert not decided, [(r.id, r.status, r.reason) for r in decided]
    inconclusive = [r for r in verdict.rows if r.status == analysis.INCONCLUSIVE]
    assert all(r.reason.startswith("not trained: ") for r in inconclusive), [r.reason for r in inconclusive]
    judges = {j["finding"] for j in experiments.load_profile("quick")["judged"]}
    assert bool(inconclusive) == (finding in judges)  # quick's other findings are all pilots


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({j["finding"] for j in experiments.load_profile("quick")["judged"]}))
def test_a_judged_study_whose_runs_are_all_stored_is_judged_while_pilots_wait(name, tmp_path, monkeypatch):
    """The backlog trains judged studies first: once a study's runs are stored, its rows are judged
    (not PILOT, not "not trained") although the finding's pilot runs are not trained yet."""
    import numpy as np

    monkeypatch.setenv("RAGEN_OUTPUTS", str(tmp_path))
    monkeypatch.setenv("RAGEN_TRAIN", "stored")
    rng = np.random.default_rng(0)
    finding, pairs = experiments.variants(name, "quick")
    for cfg in {c.hash(): c for c, labels in pairs if labels["judged"]}.values():
        _store(tmp_path / "quick", finding, cfg, rng)
    verdict = _notebook_verdict(name)
    assert verdict.stored < verdict.planned  # the pilots
    judged = [r for r in verdict.rows if r.status != analysis.PILOT]
    assert judged and not [r.reason for r in judged if r.reason.startswith("not trained")]


def test_the_plan_says_a_stored_replication_trains_nothing(project, monkeypatch):
    monkeypatch.setenv("RAGEN_TRAIN", "stored")
    text = experiments.format_plan(experiments.plan("p", root=project))
    assert "RAGEN_TRAIN=stored: nothing trains; the notebooks judge the stored runs" in text
    assert "`python -m ragen_lib backlog p` lists them in training order" in text
