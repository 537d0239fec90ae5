"""The run store: one folder per config, written so that a crash loses at most the step in flight.

    <root>/runs/<finding>/<slug>-<hash>/config.yaml     the resolved config
                                        metrics.jsonl   one line per step, appended atomically
                                        samples.jsonl   full trajectories every few steps
                                        ckpt/step_NNNNNN.pt
                                        DONE            written last (a JSON summary)

A finished run (DONE) is reused; an unfinished one resumes from its newest checkpoint, and the
metric lines after that checkpoint are dropped first, so re-running those steps duplicates nothing.
This module is the store only: grids and worker processes live in `experiments`.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import yaml

from ragen_lib import config
from ragen_lib.config import Config

DONE = "DONE"


def output_root(profile: str) -> Path:
    """`outputs/<profile>` of the checkout, or `$RAGEN_OUTPUTS/<profile>` (the notebook tests point
    it at a scratch folder so they never reuse or overwrite a researcher's runs)."""
    base = os.environ.get("RAGEN_OUTPUTS") or Path(__file__).resolve().parent.parent / "outputs"
    return Path(base) / profile


def git_commit() -> str:
    """Short commit of this checkout, or "unknown" (no git, not a repository)."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=Path(__file__).resolve().parent,
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class CorruptRunError(RuntimeError):
    """A run file cannot be read; the message names the file and what to do."""


def run_dir(root, finding: str, cfg: Config) -> Path:
    """`<root>/runs/<finding>/<slug>-<hash>`; the slug makes folders readable, the hash unique."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", cfg.slug()).strip("-_.")  # model or env names may hold "/"
    return Path(root) / "runs" / finding / f"{slug or 'run'}-{cfg.hash()}"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _plain(v):
    """JSON-ready scalars: torch / numpy numbers become Python floats or ints."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        return v.item()
    if hasattr(v, "tolist"):  # numpy arrays and torch tensors with dimensions
        return _plain(v.tolist())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return str(v)


class Run:
    """One run folder. `Run(path, cfg)` opens it to train `cfg` (writing config.yaml, or checking
    that the folder's config is this one); `Run(path)` opens an existing run to read it."""

    def __init__(self, path, cfg: Config | None = None):
        self.path = Path(path)
        cfg_file = self.path / "config.yaml"
        if cfg is None:
            if not cfg_file.exists():
                raise FileNotFoundError(f"{self.path} is not a run folder (no config.yaml)")
        elif cfg_file.exists():
            if config.dict_hash(yaml.safe_load(cfg_file.read_text())) != cfg.hash():
                raise ValueError(
                    f"{cfg_file} holds a different config than this run's; the folder belongs "
                    "to another run. Use another root, or delete the folder to start over."
                )
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            _atomic_write(cfg_file, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self._last_step: int | None = None

    # --- status ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return (self.path / DONE).exists()

    def mark_done(self, summary: dict | None = None) -> None:
        _atomic_write(self.path / DONE, json.dumps(_plain(summary or {})))

    # --- metrics and samples ---------------------------------------------------------------
    def _append(self, name: str, lines: list[dict]) -> None:
        data = "".join(json.dumps(_plain(x)) + "\n" for x in lines).encode()
        fd = os.open(self.path / name, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            # One write: a crash leaves whole lines or a torn tail, never a torn middle. A regular
            # file takes it whole; the loop only covers a short write (a full disk, a signal).
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def log(self, step: int, metrics: dict) -> None:
        if step <= self.last_step:
            raise ValueError(
                f"step {step} already logged in {self.path / 'metrics.jsonl'} (last step {self.last_step})"
            )
        self._append("metrics.jsonl", [{"step": step, **metrics}])
        self._last_step = step

    def log_samples(self, step: int, samples: list[dict]) -> None:
        self._append("samples.jsonl", [{"step": step, **s} for s in samples])

    def _read(self, name: str, repair: bool = True) -> list[dict]:
        """The complete lines of `name`. An unterminated last line is the write in flight at a
        crash: it is dropped, and with `repair` cut from the file so the next append starts clean
        (readers of a run that may be live, like `load`, pass repair=False and touch nothing)."""
        path = self.path / name
        if not path.exists():
            return []
        raw = path.read_bytes()
        complete, newline, tail = raw.rpartition(b"\n")  # tail: an unterminated (torn) last write
        rows = []
        for i, line in enumerate(complete.split(b"\n") if newline else []):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise CorruptRunError(
                    f"{path}, line {i + 1}, is not valid JSON. Remove that line (or everything from it on) "
                    f"to keep the rest, or delete {self.path} to start the run again."
                ) from None
        if (
            tail and repair
        ):  # the step in flight when the process died: cut it so the next append starts clean
            with open(path, "r+b") as f:
                f.truncate(len(complete) + len(newline))
        return rows

    def metrics(self) -> list[dict]:
        return self._read("metrics.jsonl")

    def samples(self) -> list[dict]:
        return self._read("samples.jsonl")

    @property
    def last_step(self) -> int:
        if self._last_step is None:
            rows = self.metrics()
            self._last_step = rows[-1]["step"] if rows else -1
        return self._last_step

    # --- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self, step: int, state: dict, keep: int = 1) -> None:
        import torch

        ck = self.path / "ckpt"
        ck.mkdir(exist_ok=True)
        final = ck / f"step_{step:06d}.pt"
        tmp = final.with_name(final.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, final)
        for old in sorted(ck.glob("step_*.pt"))[:-keep]:
            old.unlink()

    def load_checkpoint(self):
        import torch

        files = sorted((self.path / "ckpt").glob("step_*.pt"))
        if not files:
            return None, None
        newest = files[-1]
        try:
            state = torch.load(newest, map_location="cpu", weights_only=False)
        except Exception as e:
            raise CorruptRunError(
                f"checkpoint {newest} cannot be read ({type(e).__name__}: {e}). Delete it: "
                "the run then resumes from an older checkpoint or from the start."
            ) from e
        return int(newest.stem.split("_")[1]), state

    def truncate_after(self, step: int) -> None:
        """Keep only the lines with step ≤ `step` (atomically), so resumed steps are not doubled."""
        for name in ("metrics.jsonl", "samples.jsonl"):
            if (self.path / name).exists():
                keep = [r for r in self._read(name) if r["step"] <= step]
                _atomic_write(self.path / name, "".join(json.dumps(r) + "\n" for r in keep))
        self._last_step = None

    def resume(self):
        """(step, state) of the newest checkpoint, or (None, None); metrics after it are dropped."""
        step, state = self.load_checkpoint()
        self.truncate_after(-1 if step is None else step)
        return step, state


# --- reading a store -------------------------------------------------------------------------
def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v) if isinstance(v, (list, tuple, dict)) else v
    return out


def load(root, finding: str | None = None, *, include_running: bool = True):
    """One row per (run, step): run_id, finding, done, step, the metrics, and cfg.<dotted> columns."""
    import pandas as pd

    base = Path(root) / "runs"
    folders = sorted(base.glob(f"{finding or '*'}/*/config.yaml"))
    rows = []
    for cfg_file in folders:
        path = cfg_file.parent
        cfg = yaml.safe_load(cfg_file.read_text())
        run = Run(path)
        if not include_running and not run.done:
            continue
        flat = {f"cfg.{k}": v for k, v in _flatten(cfg).items()}
        for m in run._read("metrics.jsonl", repair=False):  # the run may be training right now
            rows.append({"run_id": path.name, "finding": path.parent.name, "done": run.done, **m, **flat})
    if not rows:
        return pd.DataFrame(columns=["run_id", "finding", "done", "step"])
    df = pd.DataFrame(rows)
    return df.replace({None: math.nan}) if df.isna().any().any() else df


def load_samples(root, finding: str, run_ids=None):
    """One row per logged trajectory: run_id, step, env, seed, reward, success, thinks, responses,
    transcript (what `trainer` writes every `train.samples_every` steps)."""
    import pandas as pd

    rows = []
    for cfg_file in sorted((Path(root) / "runs" / finding).glob("*/config.yaml")):
        path = cfg_file.parent
        if run_ids is not None and path.name not in run_ids:
            continue
        run = Run(path)
        rows += [{"run_id": path.name, **s} for s in run._read("samples.jsonl", repair=False)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run_id", "step", "seed", "thinks"])
