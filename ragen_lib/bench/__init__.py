"""`make bench`: where the time goes on this machine, each figure beside its naive baseline.

    python -m ragen_lib bench [--model NAME] [--device cpu|cuda] [--out outputs/bench] [--quick]
                              [--only work,generation,...] [--before OTHER.json]

Writes <out>/<device>.md (a table) and <device>.json. Every row holds the figure, the target
from issue #5 where there is one (targets are for one H100), and its ratio to the naive way of
doing the same thing measured in the same run (>1 means faster than naive). Baselines are
re-measured every run because a ratio taken across machines or versions means nothing.

`work` rows (section `work`): one Sokoban training step (`WORK_SIZE`: 2×4 episodes, 2 turns, 64
new tokens) under `ragen_lib.work.counting()`: the tokens each phase computed (decode steps per
turn, prefill tokens, trained tokens, padding fractions), deterministic on CPU, beside its wall
times. `--before X.json` adds the figures of an earlier run (an older commit, same machine, run
just before) as a column and their ratio before/after: `make bench-before-after` does both.

`run` (this file) measures the sections in `SECTIONS`' order and writes the report after each. The
modules, each importing only modules above it:
- `common`: the workloads (`SIZES`, `WORK_SIZE`), `Row`, `timed`, `trim_host_memory`.
- `report`: the header, the Markdown / JSON files (`write`) and a report read back (`read`).
- `generation`: sections `load`, `generation` (with decode attention) and `prefill`.
- `update`: section `update`.
- `training`: sections `train`, `work` and `turns`, and `train_config`, the config of each that trains.
- `vs_trl`: section `trl`, TRL's GRPOTrainer against our step on equal terms.
- `pool`: section `pool`, runs per device.
- `memory`: section `memory`, the process's peak and the LM head's.

`run` reads each section's entry point (`measure_*`) from this module, so a test that replaces one
replaces it here (`monkeypatch.setattr(bench, "measure_prefill", ...)`); a name a section reads is
replaced in that section's module (`monkeypatch.setattr(bench.vs_trl, "our_grpo_steps", ...)`).
"""

from __future__ import annotations

import time
import traceback
import types
from pathlib import Path

import torch

from ragen_lib import metrics as M
from ragen_lib import models
from ragen_lib.bench.common import SIZES, Row
from ragen_lib.bench.generation import (
    measure_decode_attention,
    measure_generation,
    measure_load,
    measure_prefill,
)
from ragen_lib.bench.memory import measure_head_memory, peak_memory
from ragen_lib.bench.pool import measure_runs_per_device
from ragen_lib.bench.report import attach_before, fmt, header, read, write
from ragen_lib.bench.training import measure_train_step, measure_turns, measure_work
from ragen_lib.bench.update import measure_update
from ragen_lib.bench.vs_trl import measure_trl

SECTIONS = ("load", "generation", "prefill", "update", "train", "work", "turns", "trl", "pool", "memory")
"""In the order they run."""


class SectionsFailed(RuntimeError):
    """Sections of a bench run raised; the report holds every other section's rows."""


def run(
    model: str | None = None,
    device: str | None = None,
    out: str | Path = "outputs/bench",
    quick: bool = False,
    only: tuple[str, ...] | None = None,
    before: str | Path | None = None,
) -> Path:
    """Measure every section (or `only` those of `SECTIONS`), one printed line per measurement, and
    write the report; `before`: an earlier report's JSON whose figures go beside this run's.

    The report is written again after each section, its `status` saying which are done, so a run
    stopped partway (a GPU lease's time limit, a crash) keeps what it measured. A section that
    raises is recorded in the header's `failed` and the others still run; `SectionsFailed` is
    raised at the end, after the report is written. Nothing is written before the first row is
    measured: a run where every section fails (a hub id offline, a model that does not load on this
    device) leaves an earlier report in `out` as it was instead of replacing it with an empty one."""
    only = tuple(only or SECTIONS)
    unknown = set(only) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown bench sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    old = read(before) if before is not None else None  # a bad path or a torn file fails now
    name = model or models.default_model()
    device = device or models.default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
    size = SIZES["quick" if quick else ("cuda" if device.startswith("cuda") else "cpu")]
    head = header(device, name, quick)
    if old is not None:
        head["before"] = f"{old['header'].get('commit')} ({before})"
    print(f"[bench] {head['device']}, model {name}, sizes {head['sizes']}", flush=True)
    rows: list[Row] = []
    done: list[str] = []
    failed: dict[str, str] = {}
    t_all = time.perf_counter()
    todo = [s for s in SECTIONS if s in only]

    def save(status: str) -> Path | None:
        head["wall_s"] = round(time.perf_counter() - t_all, 1)
        head["status"] = status
        if failed:
            head["failed"] = "; ".join(f"{k}: {v}" for k, v in failed.items())
        if not rows:  # nothing measured yet: keep whatever report is there
            return None
        if old is not None:
            attach_before(rows, old)
        return write(Path(out), head, rows)

    def step(label, fn):
        if label not in only:
            return
        t0 = time.perf_counter()

        def keep(got):
            rows.extend(got)
            for r in got:
                print(
                    f"[bench] {r.what}: {fmt(r.value)} {r.unit}"
                    + ("" if r.vs_naive is None else f" ({r.vs_naive:.2f}× naive)"),
                    flush=True,
                )

        try:
            got = fn()
            if isinstance(got, types.GeneratorType):  # a long section, saved part by part
                for part in got:
                    keep(part)
                    save(f"running: {label} partly done")
            else:
                keep(got)
        except Exception as e:  # one broken section must not cost the others' figures (a lease is short)
            traceback.print_exc()
            failed[label] = f"{type(e).__name__}: {e}"
            print(f"[bench] {label} FAILED: {failed[label]}", flush=True)
        print(f"[bench]   ({label} took {time.perf_counter() - t0:.1f} s)", flush=True)
        done.append(label)
        left = [s for s in todo if s not in done]
        save(f"running: done {', '.join(done)}; not yet run {', '.join(left)}" if left else "finishing")

    loaded = {}

    def load():
        got, loaded["model"], loaded["tok"] = measure_load(name, device)
        return got

    if set(only) & {"load", "generation", "prefill", "update"}:
        if "load" in only:
            step("load", load)
        else:
            loaded["model"], loaded["tok"] = models.load(name, device=device)
    m, tok = loaded.get("model"), loaded.get("tok")
    step(
        "generation",
        lambda: measure_generation(m, tok, device, size) + measure_decode_attention(m, device, size),
    )
    step("prefill", lambda: measure_prefill(m, tok, device, size))
    step("update", lambda: measure_update(m, device, size))
    m = loaded["model"] = None  # free it: the trainer loads its own policy, reference and critic
    step("train", lambda: measure_train_step(name, device, size))
    step("work", lambda: measure_work(name, device))
    step("turns", lambda: measure_turns(name, device, quick))
    step("trl", lambda: measure_trl(name, device, size))
    step("pool", lambda: measure_runs_per_device(name, device, size))

    def memory():
        # The process's peak is that of the sections before this one; alone (`--only memory`) it
        # ran nothing here and its 0 GB (an H100, 2026-11-27) said nothing. The head rows measure
        # in fresh processes of their own.
        own = [peak_memory(device)] if done else []
        return own + measure_head_memory(name, device, size)

    step("memory", memory)
    path = save("complete" if not failed else f"complete except failed sections: {', '.join(failed)}")
    if path is None:
        kept = Path(out) / f"{M.device_slug(head['device'])}.md"
        kept = f"{kept} is left as it was" if kept.exists() else "no report is written"
        raise SectionsFailed(f"bench measured nothing: {head.get('failed', '')} (tracebacks above); {kept}")
    print(f"[bench] wrote {path} and {path.with_suffix('.json')} in {head['wall_s']} s", flush=True)
    if failed:
        raise SectionsFailed(
            f"bench sections failed: {head['failed']} (tracebacks above); {path} holds the others"
        )
    return path
