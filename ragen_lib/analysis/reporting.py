"""A notebook's verdict and the report across notebooks.

`headline` (a stated rule over the primary rows), `Verdict` (printed, and written to
`outputs/<profile>/verdicts/`, or a variant's folder for a notebook run with parameters), `decide`
(the one call a notebook makes) and `report()`, which writes REPORT.md: a row per sub-claim, NO
VERDICT rows for notebooks that raised, were killed or never ran (`notebook_run`), STALE marks, the
devices and models the runs trained on, and a line per variant.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from ragen_lib import files, models, runs
from ragen_lib.analysis.claims import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    PILOT,
    REPRODUCED,
    UNRECORDED_MODEL,
    Claim,
    Row,
    _fmt,
    design,
    effect_text,
    format_text,
)
from ragen_lib.analysis.judging import judge


def headline(rows: list[Row], primary: list[str]) -> tuple[str, str]:
    """The notebook's status from its primary rows: REPRODUCED when all of them are, NOT REPRODUCED
    when any is (and none is INCONCLUSIVE), PILOT when all are pilot; else INCONCLUSIVE. PILOT rows
    are left out, and the reason names the rows it rests on and those left out: a headline over
    fewer rows than its claim names (e.g. one env of three judged in a profile) says so."""
    by = {r.id: r for r in rows}
    missing = [p for p in primary if p not in by]
    if missing:
        raise ValueError(f"headline names unknown rows {missing}; rows: {list(by)}")
    pilot = [p for p in primary if by[p].status == PILOT]
    if len(pilot) == len(primary):
        return PILOT, "every primary sub-claim ran at pilot scale"
    judged = [p for p in primary if p not in pilot]
    on = f" (judged: {', '.join(judged)}" + (f"; PILOT, left out: {', '.join(pilot)})" if pilot else ")")
    st = [by[p].status for p in judged]
    if all(s == REPRODUCED for s in st):
        return REPRODUCED, f"every judged primary sub-claim reproduced{on}"
    if NOT_REPRODUCED in st and INCONCLUSIVE not in st:
        return NOT_REPRODUCED, f"a primary sub-claim was not reproduced{on}"
    return INCONCLUSIVE, f"a primary sub-claim is inconclusive{on}"


def scope(statuses: dict[str, str], primary: list[str]) -> str:
    """ "on 1 of 3 primary sub-claims (the rest PILOT)" where PILOT rows were left out of a decided
    headline, else "": printed beside the status, so that a REPRODUCED resting on one env of three
    does not read as the whole claim's (`statuses`: row id → status)."""
    pilot = [p for p in primary if statuses.get(p) == PILOT]
    if not pilot or len(pilot) == len(primary):
        return ""
    return f"on {len(primary) - len(pilot)} of {len(primary)} primary sub-claims (the rest PILOT)"


SMOKE_NOTE = "TINY-RANDOM MODEL: a pipeline check, not evidence for or against the claim"
"""Opens a verdict judged on `models.TINY_RANDOM` runs (the smoke profile): its rows are computed
as any other's, and only the model names said what they are worth."""


@dataclass
class Verdict:
    """A notebook's verdict: one row per sub-claim and a headline from `rule` (the primary rows)."""

    notebook: str
    claim: str
    rows: list[Row]
    primary: list[str]
    rule: str = (
        "REPRODUCED when every judged primary row is; NOT REPRODUCED when one is not and none is "
        "inconclusive; else INCONCLUSIVE (PILOT rows left out)"
    )
    figures: list[str] = field(default_factory=list)
    measured: dict = field(default_factory=dict)  # extra numbers shown, not judged
    planned: int | None = None  # the grid's runs, and how many of them were stored finished
    stored: int | None = None
    parameters: dict = field(default_factory=dict)  # the notebook's seeds/overrides, where given
    status: str = ""
    reason: str = ""

    def __post_init__(self):
        self.status, self.reason = headline(self.rows, self.primary)

    def __str__(self) -> str:
        on = scope({r.id: r.status for r in self.rows}, self.primary)
        head = (
            f"{self.status}{' ' + on if on else ''}: {self.claim}\n  why: {self.reason}\n"
            f"  rule: {self.rule} (primary: {', '.join(self.primary)})"
        )
        if self.planned is not None and self.stored != self.planned:
            head += f"\n  runs: {self.stored} of the grid's {self.planned} stored; the rest not trained"
        if self.parameters:
            head += f"\n  notebook parameters: {given(self.parameters)}"
        if any(models.TINY_RANDOM in r.models for r in self.rows):
            head = f"{SMOKE_NOTE}\n{head}"
        rows = "\n".join(f"  [{r.id}] {r}" for r in self.rows)
        extra = "\n".join(f"  {k}: {_fmt(v)}" for k, v in self.measured.items())
        return "\n".join(x for x in (head, rows, extra) if x)

    def write(self, results: str | Path, wall_s: float | None = None) -> Path:
        """<results>/verdicts/<notebook>.json, `results` the notebook's folder (`df.attrs["results"]`:
        outputs/<profile>, or its variant's, `experiments.results_root`); then the notebook's figures
        an earlier run drew there and this one did not (03's curves of an env no longer stored,
        05's Table 2 bar) are removed, lest they sit beside this verdict as if they were its."""
        results = results_folder(results)
        out = results / "verdicts" / f"{self.notebook}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "wall_s": wall_s, "commit": runs.git_commit()}
        files.write_atomic(out, json.dumps(data, indent=1, default=str))  # a crash leaves the old one
        drawn = {Path(f).name for f in self.figures}
        for stale in (results / "figures").glob(f"{self.notebook}_*.png"):
            if stale.name not in drawn:
                stale.unlink(missing_ok=True)
        return out


def results_folder(results: str | Path) -> Path:
    """A notebook's results folder, refusing a bare profile name: `write("quick")` and
    `plots.save(fig, "quick", ...)`, as notebooks called them before variants had folders, would
    write into ./quick of the working folder, where no report looks."""
    if os.sep not in str(results):
        raise ValueError(
            f"{results!r} is not a results folder: pass the notebook's df.attrs['results'] "
            "(outputs/<profile>, or its variant's folder), not the profile's name"
        )
    return Path(results)


def given(parameters: dict) -> str:
    """The notebook parameters a verdict ran with, where given (`papermill -p seeds ... -p overrides
    ...`): whoever reads the verdict, wherever it is copied to, learns that it is not the profile's
    design."""
    return "; ".join(f"{k} {json.dumps(v, default=str)}" for k, v in parameters.items())


def notebook_run(path: Path) -> tuple[str, float | None]:
    """How papermill's last execution of a notebook ended, from the executed copy at `path`:
    ("finished" | "failed" | "interrupted" | "unfinished" | "not run", its start as a POSIX time
    or None). papermill records `exception: true` when a cell raised and `end_time` when it
    stopped; a copy without `end_time` was killed (or is still running). Ctrl-C is neither: papermill
    2.7 writes `end_time` and no exception, and only the interrupted cell's KeyboardInterrupt
    output says the cells after it never ran."""
    from datetime import datetime

    if not path.exists():
        return "not run", None
    try:
        nb = json.loads(path.read_text())
        meta = nb.get("metadata", {}).get("papermill", {})
        errors = {
            o.get("ename")
            for c in nb.get("cells", [])
            for o in c.get("outputs", [])
            if o.get("output_type") == "error"
        }
    except (OSError, json.JSONDecodeError, AttributeError):
        return "unfinished", None  # papermill was killed while writing it
    start = meta.get("start_time")
    start_s = datetime.fromisoformat(start).timestamp() if start else None
    if "KeyboardInterrupt" in errors:
        return "interrupted", start_s
    if meta.get("exception") or errors:
        return "failed", start_s
    return ("finished" if meta.get("end_time") else "unfinished"), start_s


COPIES = ("", ".failed", ".running")
"""The executed copies of a notebook `make replicate` leaves (<name><suffix>.ipynb): the last finished
run's, the last failed run's, and one papermill was writing when it was killed or interrupted."""


def last_copy(folder: Path, name: str) -> Path:
    """The executed copy of the notebook's last run: the one written last (papermill writes it cell
    by cell) of `COPIES`; <name>.ipynb where none exists. A failed rerun no longer overwrites the
    last finished copy, so the report reads the failure beside it."""
    paths = [p for p in (folder / f"{name}{s}.ipynb" for s in COPIES) if p.exists()]
    return max(paths, key=lambda p: p.stat().st_mtime, default=folder / f"{name}.ipynb")


def trained_on(base: Path) -> str:
    """The devices and models the finished runs under `base` trained, from their DONE records and
    configs (the report may be written elsewhere, e.g. on a laptop from a GPU host's outputs). A
    copy of another finding's run (REUSED_FROM) is counted once, as the run it copies."""
    devices, names = Counter(), Counter()
    for done in sorted(base.glob("runs/*/*/" + runs.DONE)):
        if (done.parent / runs.REUSED_FROM).exists():
            continue
        info = runs.read_done(done.parent)
        devices["unreadable DONE" if info is None else info.get("device") or "unrecorded"] += 1
        try:
            names[runs.Run(done.parent).saved_config().get("model", {}).get("name") or UNRECORDED_MODEL] += 1
        except (OSError, ValueError, runs.CorruptRunError):  # said, not fatal to the report
            names["unreadable config.yaml"] += 1
    if not devices:
        return "no finished runs"

    def counts(c: Counter) -> str:
        return ", ".join(f"{k} ({n} runs)" for k, n in c.items())

    return f"{counts(devices)}; models {counts(names)}{models.paper_note(names)}"


def report(profile: str) -> Path:
    """outputs/<profile>/REPORT.md: one row per sub-claim (verdict, effect and CI, power, design),
    PILOT rows marked; the device, commit and wall time on top. A finding whose notebook failed,
    did not finish or never ran under `make replicate` is listed too, and a verdict older than its
    notebook's failed, interrupted or unfinished last run is marked stale."""
    import torch

    from ragen_lib import experiments, metrics

    experiments.load_profile(profile)  # a misspelt profile: ValueError naming the valid ones
    # the command a notebook not run yet needs: under RAGEN_TRAIN=stored, one that trains nothing
    mode = "RAGEN_TRAIN=stored " if experiments.train_mode() == "stored" else ""
    base = runs.output_root(profile)
    if not base.is_dir():
        raise FileNotFoundError(
            f"nothing has run for profile {profile!r}: {base} does not exist. Run "
            f"`make replicate-all PROFILE={profile}` first (or point RAGEN_OUTPUTS where it ran)"
        )
    verdicts = [_read_verdict(p, profile) for p in sorted((base / "verdicts").glob("*.json"))]
    here = metrics.device_name("cuda" if torch.cuda.is_available() else "cpu")
    lines = [
        f"# Replication report: profile `{profile}`",
        "",
        f"Trained on: {trained_on(base)}. Report written on: {here}, commit {runs.git_commit()}. "
        # each verdict's own notebook run: a rerun that reused its runs took seconds, not the training
        f"Wall time of the notebooks' last runs: {sum(v.get('wall_s') or 0 for v in verdicts) / 60:.1f} "
        "min (a run reused from an earlier one adds none).",
        "",
    ]
    if profile == "smoke":
        lines += [
            "**Smoke profile: a tiny random model on CPU. This proves the pipeline runs end to end; "
            "its verdicts say nothing about the paper's findings.**",
            "",
        ]
    table = "| notebook | sub-claim | verdict | effect [95% CI] | why | power | design | figures |"
    lines += [table, "|---|---|---|---|---|---|---|---|"]
    by_name = {v["notebook"]: v for v in verdicts}
    partial: list[str] = []  # notebooks judged on fewer runs than their grid plans (RAGEN_TRAIN=stored)
    for name in sorted(set(experiments.findings()) | set(by_name)):
        copy = last_copy(base / "notebooks", name)
        state, start = notebook_run(copy)
        link = f"[notebooks/{copy.name}](notebooks/{copy.name})"
        v = by_name.get(name)
        if v is None:
            why = {
                "failed": f"the notebook raised: see {link}",
                "interrupted": f"the notebook was interrupted (Ctrl-C): {link}",
                "unfinished": f"the notebook did not finish (killed, or still running): {link}",
                "finished": f"the notebook finished without writing a verdict: {link}",
                "not run": f"`{mode}make replicate NB={name[:2]} PROFILE={profile}` has not run",
            }[state]
            lines.append(f"| {name} | **headline** | **NO VERDICT** | | {why} | | | |")
            continue
        # An executed copy torn mid-write has no readable start: the verdict may predate that run,
        # and nothing says it does not, so it is marked like one that does.
        cut = state in ("failed", "interrupted", "unfinished")
        unknown = cut and start is None
        stale = cut and (unknown or v["written"] < start)
        on = scope({r["id"]: r["status"] for r in v.get("rows", [])}, v.get("primary", []))
        status = f"**{v['status']}**" + (f" {on}" if on else "")
        reason = v["reason"]
        if stale:
            status = f"**STALE {v['status']}**" + (f" {on}" if on else "")
            last = {"failed": "raised", "interrupted": "was interrupted"}.get(state, "did not finish")
            when = (
                "perhaps from an earlier run (the executed copy is unreadable)"
                if unknown
                else "from an earlier run"
            )
            reason = f"{when}: the notebook's last run {last} ({link}); {reason}"
        figs = " ".join(f"[{Path(f).stem}](figures/{Path(f).name})" for f in v.get("figures", []))
        made = f"verdict of commit {v.get('commit', 'unknown')}"
        if v.get("planned") is not None and v.get("stored") != v["planned"]:
            made += f"; {v['stored']} of the grid's {v['planned']} runs stored, the rest not trained"
            partial.append(name)
        if v.get("parameters"):
            made += f"; notebook parameters: {given(v['parameters'])}"
        lines.append(
            f"| {name} | **headline**: {v['claim']} ({v.get('rule', 'old verdict file')}) | "
            f"{status} | | {reason} | | {made} | {figs} |"
        )
        for r in v.get("rows", []):  # a verdict written before rows existed has none
            status = "PILOT (no verdict)" if r["status"] == PILOT else r["status"]
            status = f"stale {status}" if stale else status
            row = Row(**{**r, "ci": tuple(r["ci"])})
            effect, d, fv = effect_text(row), design(row), format_text(row)
            effect = f"{effect}; {fv}" if effect and fv else effect or fv
            paper = f" (paper: {r['paper']})" if r.get("paper") else ""
            lines.append(
                f"| {name} | {r['id']}: {r['claim']}{paper} | {status} | {effect} | {r['reason']} | "
                f"{r['power']} | {d} | |"
            )
    if partial:
        at = lines.index(table)
        lines[at:at] = [
            f"**Stored runs only: {', '.join(partial)} judged the runs stored, not every run their grids "
            "plan (RAGEN_TRAIN=stored); a row whose arms lack a planned run is "
            'INCONCLUSIVE, "not trained", and names them. `python -m ragen_lib backlog '
            f"{profile}` lists what is left.**",
            "",
        ]
    lines += variant_lines(base, profile)
    out = base / "REPORT.md"
    files.write_atomic(out, "\n".join(lines) + "\n")
    return out


def variant_lines(base: Path, profile: str) -> list[str]:
    """REPORT.md's section on the verdicts of notebooks run with parameters (a researcher's grid,
    `experiments.results_root`): a line each, its headline, parameters and figures; the table above
    is the profile's design alone."""
    from ragen_lib.experiments import VARIANTS

    found = sorted((base / VARIANTS).glob("*/verdicts/*.json"))
    if not found:
        return []
    lines = [
        "",
        f"## Variants: notebooks run with parameters ({len(found)})",
        "",
        "Each was run with `papermill -p seeds ... -p overrides ...` and judged by the same rule as "
        "the design above, on its own runs; none of them is the profile's design, and none changes "
        "a verdict above.",
        "",
        "| notebook | parameters | verdict | why | figures |",
        "|---|---|---|---|---|",
    ]
    for path in found:
        v = _read_verdict(path, profile)
        folder = path.parent.parent.relative_to(base).as_posix()
        on = scope({r["id"]: r["status"] for r in v.get("rows", [])}, v.get("primary", []))
        figs = " ".join(f"[{Path(f).stem}]({folder}/figures/{Path(f).name})" for f in v.get("figures", []))
        lines.append(
            f"| {v['notebook']} | {given(v.get('parameters') or {}) or folder} | "
            f"**{v['status']}**{' ' + on if on else ''} ([verdict]({folder}/verdicts/{path.name})) | "
            f"{v['reason']} | {figs} |"
        )
    return lines


def _read_verdict(path: Path, profile: str) -> dict:
    """A notebook's verdict file, or a ValueError naming the file and the notebook to rerun (a
    torn file read as "Invalid control character at: line 1 column 49" and named neither)."""
    try:
        v = json.loads(path.read_text())
        if not isinstance(v, dict) or not isinstance(v.get("rows", []), list) or "notebook" not in v:
            raise ValueError("not a verdict (a mapping with notebook and a list of rows)")
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} does not read as a verdict ({e}): rerun its notebook, `make replicate "
            f"NB={path.stem[:2]} PROFILE={profile}`, which rewrites it, or move the file aside"
        ) from None
    return {**v, "written": path.stat().st_mtime}


def decide(
    df: pd.DataFrame,
    claim: str,
    studies: list[tuple[Claim, dict, dict | None]],
    primary: list[str],
    *,
    measured: dict | None = None,
    floor_ceiling="env",
) -> Verdict:
    """Judge every (Claim, arm a, arm b) and build the notebook's verdict (`df.attrs`: the finding,
    and the grid's runs not stored, `missing`, which every row checks its arms against)."""
    missing = df.attrs.get("missing") or []
    rows = [judge(df, c, a, b, floor_ceiling=floor_ceiling, missing=missing) for c, a, b in studies]
    planned = df.attrs.get("planned")
    stored = None if planned is None else planned - len({m["run_id"] for m in missing})
    finding = df.attrs.get("finding", "?")
    return Verdict(
        finding,
        claim,
        rows,
        primary,
        measured=measured or {},
        planned=planned,
        stored=stored,
        parameters=df.attrs.get("parameters") or {},
    )
