"""The report: its header (device, versions, commit, date) and the Markdown / JSON files."""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from pathlib import Path

import torch

from ragen_lib import files, runs
from ragen_lib import metrics as M
from ragen_lib.bench.common import Row


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def header(device: str, model: str, quick: bool) -> dict:
    import transformers

    return {
        "device": M.device_name(device),
        "model": model,
        "sizes": "quick" if quick else ("cuda" if device.startswith("cuda") else "cpu"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": _version("trl"),
        "python": platform.python_version(),
        "torch threads": torch.get_num_threads(),  # OMP_NUM_THREADS, where set, decides it on CPU
        "commit": runs.git_commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def markdown(head: dict, rows: list[Row]) -> str:
    lines = [f"# Benchmark: {head['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in head.items()]
    with_before = any(r.before is not None for r in rows)
    extra = " before | before / now |" if with_before else ""
    lines += [
        "",
        "| what | figure | unit | target | vs naive |" + extra + " note |",
        "| --- | ---: | --- | --- | ---: |" + (" ---: | ---: |" if with_before else "") + " --- |",
    ]
    for r in rows:
        ratio = "—" if r.vs_naive is None else f"{r.vs_naive:.2f}×"
        cells = [r.what, fmt(r.value), r.unit, r.target or "—", ratio]
        if with_before:
            gain = r.before / r.value if r.before is not None and r.value else None
            cells += [fmt(r.before), "—" if gain is None else f"{gain:.2f}×"]
        lines.append("| " + " | ".join(cells + [r.note]) + " |")
    return "\n".join(lines) + "\n"


def attach_before(rows: list[Row], before: dict) -> None:
    """Put the figure of the same row (by `what`) of an earlier report (its JSON) beside each row."""
    old = {r["what"]: r["value"] for r in before["rows"]}
    for r in rows:
        r.before = old.get(r.what)


def read(path: str | Path) -> dict:
    """The JSON of a report `write` wrote: a header and rows of what and value. Anything else (a
    report torn by a bench killed mid-write before reports were written whole, a foreign JSON)
    raises ValueError with the reason, which `bench --before` and `plan` print beside the path; a
    file that cannot be read raises its OSError (FileNotFoundError names the path)."""
    raw = Path(path).read_bytes()
    try:
        data = json.loads(raw)  # bytes: text that is not UTF-8 is a reason too, not a traceback
    except ValueError as e:
        raise ValueError(f"{type(e).__name__}: {e}") from e
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("header"), dict) or not isinstance(rows, list):
        raise ValueError("no header and rows")
    if not all(isinstance(r, dict) and "what" in r and "value" in r for r in rows):
        raise ValueError("a row without what and value")
    return data


def write(out: Path, head: dict, rows: list[Row]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / M.device_slug(head["device"])
    # Rewritten after every section: a bench killed mid-write keeps the previous report whole.
    files.write_atomic(stem.with_suffix(".md"), markdown(head, rows))
    rows_json = {"header": head, "rows": [dataclasses.asdict(r) for r in rows]}
    files.write_atomic(stem.with_suffix(".json"), json.dumps(rows_json, indent=2) + "\n")
    return stem.with_suffix(".md")
