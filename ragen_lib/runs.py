"""The run store: one folder per config, one writer at a time, checked on every resume.

    <root>/runs/<finding>/<slug>-<hash>/config.yaml     the resolved config
                                        lock            flock()ed by the one process writing the run
                                        metrics.jsonl   one line per step, appended atomically
                                        samples.jsonl   full trajectories every few steps
                                        ckpt/step_NNNNNN.pt   the newest checkpoint, while the run trains
                                        final_weights.pt      train.keep_final_weights only
                                        DONE            written last (a JSON summary)
                                        REUSED_FROM     a copy of another finding's run: its folder
                                        quarantine/<time>/    files `repair` moved aside (never deleted)

What it promises (docs/RELIABILITY.md lists the tests that hold it to it):

- One writer. A process writes a run only while it holds the OS lock on `lock`; a second one is
  refused with the owner's PID. The kernel drops the lock when its owner dies, so a dead owner's
  run is taken over by the next process.
- A crash loses at most `train.checkpoint_every` steps. Metric lines are appended in one write and
  fsynced; a checkpoint records its step, the config hash and a copy of the metrics up to its step,
  is written to a temporary file, fsynced and renamed, and only then is the previous one removed.
- Resume checks itself: the checkpoint must be readable as plain tensors (`weights_only=True`),
  belong to this config and lie inside the run; the metrics are trimmed to its step or restored
  from its copy. A run is marked DONE only when its metric steps are exactly 0..N-1.
- Every inconsistency is an error naming the file, what is wrong and the command that repairs it
  (`python -m ragen_lib repair RUN`, which moves files aside and never deletes results).
- A run is the model it trained on, not only its name: DONE and every checkpoint record
  `models.fingerprint` of the weights, and the grid and the CLI treat a run recorded on other
  weights than its model's name loads here like one of older code (retired, results kept, trained
  again: `other_weights`). A run without a record (stored before it) stands, and reading a store
  (`load`) compares nothing with the machine it is read on.
- Bounded disk: one checkpoint per unfinished run; a finished run keeps its metrics and samples
  (and its final weights only with `train.keep_final_weights`); a checkpoint a crash left beside
  DONE is removed by `drop_stale_checkpoint` (the grid calls it when it reuses the run).

This module is the store only: grids and worker processes live in `experiments`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import warnings
import weakref
from pathlib import Path

import yaml

from ragen_lib import config, revisions
from ragen_lib.config import Config
from ragen_lib.files import disk_full, fsync_dir, no_space, save_state, write_atomic

DONE = "DONE"
SHARING_ENV = "RAGEN_RUNS_PER_DEVICE"
"""How many of the grid's runs train at once on the device a worker trains on (its profile's
`runs_per_device`, set by `workers.worker_slots`), recorded in DONE; unset: one, as the CLI trains."""
LOCK = "lock"
CKPT = "ckpt"
FINAL_WEIGHTS = "final_weights.pt"
QUARANTINE = "quarantine"
REUSED_FROM = "REUSED_FROM"
CHECKPOINT_FORMAT = 2
"""2: the checkpoint records step, config_hash, config and metrics (1: model states only)."""


class CorruptRunError(RuntimeError):
    """A run's files disagree or cannot be read; the message names the file, what is wrong and the
    command that repairs it."""


class RunLockedError(RuntimeError):
    """Another process is writing this run; the message names it and says how to wait or stop it."""


class RunStoreWarning(UserWarning):
    """Something the store noticed and handled: a torn last line, metrics restored, a stale lock."""


def output_root(profile: str) -> Path:
    """`outputs/<profile>` of the checkout, or `$RAGEN_OUTPUTS/<profile>` (the notebook tests point
    it at a scratch folder so they never reuse or overwrite a researcher's runs). A relative
    RAGEN_OUTPUTS is the checkout's, as make reads it at the checkout's root: read against the
    working folder, JupyterLab's kernels (in notebooks/) wrote a second store there."""
    checkout = Path(__file__).resolve().parent.parent
    return checkout / (os.environ.get("RAGEN_OUTPUTS") or "outputs") / profile


def read_done(path: Path) -> dict | None:
    """The DONE summary of the run folder `path`, or None when it is missing or unreadable (no lock
    taken, no config needed: a report reads it from another machine's outputs)."""
    try:
        info = json.loads((Path(path) / DONE).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def git_commit() -> str:
    """`RAGEN_COMMIT` where the caller sets it (a copy of the tree sent to a GPU host, whose .git
    may be absent or stale), else the short commit of this checkout, else "unknown"."""
    if os.environ.get("RAGEN_COMMIT", "").strip():
        return os.environ["RAGEN_COMMIT"].strip()
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


def run_dir(root, finding: str, cfg: Config) -> Path:
    """`<root>/runs/<finding>/<slug>-<hash>`; the slug makes folders readable, the hash unique."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", cfg.slug()).strip("-_.")  # model or env names may hold "/"
    return Path(root) / "runs" / finding / f"{slug or 'run'}-{cfg.hash()}"


def repair_command(path) -> str:
    return f"python -m ragen_lib repair {path}"


def _line_row(line: bytes) -> dict | None:
    """A metrics or samples line as its row, or None where it is not one (not JSON, not UTF-8 at
    all, or no integer step: `true` is no step, though Python counts a bool as an int)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return row if isinstance(step, int) and not isinstance(step, bool) else None


def read_state(path: Path) -> dict:
    """A checkpoint or weights file, loaded with `weights_only=True`: tensors and plain containers
    only, so a planted file cannot run code. Unreadable files raise CorruptRunError."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        if found is None:  # not a pickle of ours at all: garbage, a truncated file
            raise CorruptRunError(
                f"{path} cannot be read (not a checkpoint: {str(e).strip().splitlines()[-3].strip()}). "
                f"Move it aside with `{repair_command(_run_of(path))}`"
            ) from e
        raise CorruptRunError(
            f"{path} asks to load {found.group(1)}, not only tensors and plain containers: it was not "
            "written by ragen_lib, and loading it could run code, so it is refused. Move it aside "
            f"with `{repair_command(_run_of(path))}`"
        ) from e
    except Exception as e:
        raise CorruptRunError(
            f"{path} cannot be read ({type(e).__name__}: {e}). Move it aside with "
            f"`{repair_command(_run_of(path))}`: the run then starts again from its previous state"
        ) from e
    if not isinstance(state, dict):
        raise CorruptRunError(
            f"{path} is not a checkpoint (a {type(state).__name__}); `{repair_command(_run_of(path))}`"
        )
    return state


def _run_of(path: Path) -> Path:
    return path.parent.parent if path.parent.name == CKPT else path.parent


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


def _steps_text(steps: list[int]) -> str:
    """[0, 1, 2, 5, 6] -> "0-2, 5-6" (what a metrics file holds, for messages)."""
    if not steps:
        return "no steps"
    parts, start, prev = [], steps[0], steps[0]
    for s in steps[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return "steps " + ", ".join(parts)


# --- the lock -----------------------------------------------------------------------------------
_HELD: dict[str, weakref.ref] = {}
"""Run folders this process holds the lock of, and the handle that holds it."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(text: str) -> dict:
    """{"pid", "host", "since"} from a lock file's text (empty when unreadable)."""
    try:
        info = json.loads(text)
        return info if isinstance(info, dict) else {}
    except ValueError:
        return {}


class Run:
    """One run folder. `Run(path, cfg)` opens it to train `cfg` (writing config.yaml, or checking
    that the folder's config is this one); `Run(path)` opens an existing run to read it.

    Writing (log, checkpoints, resume, mark_done) needs the run's lock: `with Run(path, cfg) as
    run:` holds it for the block; a write outside one takes it and keeps it until `close()`.
    Reading never locks and never changes a file.
    """

    def __init__(self, path, cfg: Config | None = None):
        self.path = Path(path)
        self.cfg = cfg
        self._fd: int | None = None
        self._superseded = False
        self._contexts: list[bool] = []
        self._last_step: int | None = None
        self._resumed: tuple | None = None
        self.model_fingerprint: str | None = None
        """`models.fingerprint` of the model that trains this run, which the trainer sets once it has
        loaded it: recorded in every checkpoint and in DONE (None: nothing recorded)."""
        cfg_file = self.path / "config.yaml"
        if cfg is None:
            recorded = any((self.path / f).exists() for f in (DONE, CKPT, FINAL_WEIGHTS))
            if not cfg_file.exists() and not recorded:  # with a record, repair restores config.yaml
                raise FileNotFoundError(
                    f"{self.path} does not exist"
                    if not self.path.exists()
                    else f"{self.path} is not a run folder (no config.yaml)"
                )
        elif cfg_file.exists():
            saved = self.saved_config()
            if config.dict_hash(saved) != cfg.hash():
                raise CorruptRunError(self._mismatch(saved, cfg))
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomic(cfg_file, yaml.safe_dump(cfg.to_dict(), sort_keys=False))

    # --- config -------------------------------------------------------------------------------
    def saved_config(self) -> dict:
        """config.yaml as a dict (read strictly: errors name the file and line)."""
        cfg_file = self.path / "config.yaml"
        if not cfg_file.exists():
            raise CorruptRunError(
                f"{cfg_file} is missing: `{repair_command(self.path)}` restores it from the config the "
                "run recorded in DONE or its checkpoint"
            )
        try:
            data = config.read_yaml(cfg_file)
        except ValueError as e:  # a YAML error names the file and line; bytes that are not UTF-8 do not
            problem = str(e) if str(e).startswith(str(cfg_file)) else f"{cfg_file}: {e}"
            raise CorruptRunError(
                f"{problem}. The run's config.yaml does not parse: `{repair_command(self.path)}` restores "
                "it from the config the run recorded in DONE or its checkpoint (the damaged file is kept "
                "in quarantine/)"
            ) from None
        if not isinstance(data, dict):
            raise CorruptRunError(
                f"{self.path / 'config.yaml'} is not a config mapping; `{repair_command(self.path)}`"
            )
        return data

    @property
    def config_hash(self) -> str:
        return self.cfg.hash() if self.cfg is not None else config.dict_hash(self.saved_config())

    @property
    def folder_hash(self) -> str | None:
        """The hash in the folder's name (`run_dir`), the config the folder was made for."""
        m = re.search(r"-([0-9a-f]{12})$", self.path.name)
        return m.group(1) if m else None

    @property
    def steps(self) -> int:
        cfg = self.cfg.to_dict() if self.cfg is not None else self.saved_config()
        return int(cfg.get("train", {}).get("steps", config.TrainConfig.steps))

    @property
    def schedule(self) -> list[int]:
        """The steps a finished run logs: 0 … steps − 1, every online_k-th (`TrainConfig.logged_steps`)."""
        cfg = self.cfg.to_dict() if self.cfg is not None else self.saved_config()
        k = int(cfg.get("train", {}).get("online_k", 1))
        return list(range(0, self.steps, k))

    def schedule_to(self, step: int) -> list[int]:
        """The logged steps up to and including `step`."""
        return [s for s in self.schedule if s <= step]

    def _mismatch(self, saved: dict, cfg: Config) -> str:
        cfg_file = self.path / "config.yaml"
        if self.folder_hash == cfg.hash():
            return (
                f"{cfg_file} was edited after the run started: it now hashes to {config.dict_hash(saved)}, "
                f"while this folder holds the results of config {cfg.hash()} (the end of its name). "
                "Editing the file does not change what was trained, and a changed config is a new run "
                "in a folder of its own. To put the original back (your edit is kept beside it): "
                f"`{repair_command(self.path)}`. To train the edited config, copy it elsewhere and "
                "pass the copy to `python -m ragen_lib run COPY.yaml`."
            )
        return (
            f"{self.path} holds the run of another config ({config.dict_hash(saved)}, this one is "
            f"{cfg.hash()}): open this config's own folder (runs.run_dir(root, finding, cfg)) or "
            "another root; the folder's results are left as they are."
        )

    # --- the lock -----------------------------------------------------------------------------
    def lock(self) -> Run:
        """Take the run's OS lock (flock on `lock`) for this handle; raise RunLockedError naming the
        owner when another process holds it. The kernel releases it when its owner dies."""
        if self._superseded:
            raise RuntimeError(f"this handle of {self.path} was superseded by a newer one in this process")
        if self._fd is not None:
            return self
        key = str(self.path.resolve())
        other = _HELD.get(key)
        if other is not None and other() is not None and other() is not self:
            # The same process opened the run again (a notebook cell rerun after an interrupt whose
            # traceback still holds the old handle): the newer handle takes over, the old one stops.
            other()._release(superseded=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)
            pid = owner.get("pid", "?")
            where = f" on {owner['host']}" if owner.get("host") not in (None, socket.gethostname()) else ""
            raise RunLockedError(
                f"{self.path} is being written by another process: PID {pid}{where}, since "
                f"{owner.get('since', '?')} (lock file {self.path / LOCK}). Wait for it to finish "
                f"(`tail -f {self.path / 'metrics.jsonl'}`), or stop it (`kill {pid}`): the run then "
                "resumes from its last checkpoint when you start it again."
            ) from None
        except OSError as e:  # a filesystem without locks (ENOLCK): say so once, carry on unlocked
            warnings.warn(
                f"cannot lock {self.path / LOCK} ({e}); this filesystem does not support flock, so "
                "nothing stops a second process from writing the same run",
                RunStoreWarning,
                stacklevel=2,
            )
        else:
            before = _owner(os.pread(fd, 4096, 0).decode(errors="replace"))
            if (
                before.get("pid")
                and before.get("host") == socket.gethostname()
                and before["pid"] != os.getpid()
                and not (self.path / DONE).exists()  # killed after its DONE: nothing left unfinished
            ):
                if not _pid_alive(int(before["pid"])):
                    warnings.warn(
                        f"{self.path}: taking over from PID {before['pid']}, which stopped without "
                        "finishing (its lock died with it)",
                        RunStoreWarning,
                        stacklevel=2,
                    )
            me = json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%F %T")}
            )
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode() + b"\n", 0)
        self._fd = fd
        _HELD[key] = weakref.ref(self)
        self._remove_stale_tmp()
        return self

    def _release(self, superseded: bool = False) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)  # a PID left in the file means its owner died holding it
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
            key = str(self.path.resolve())
            if _HELD.get(key) is not None and _HELD[key]() is self:
                del _HELD[key]
        self._superseded = self._superseded or superseded

    def close(self) -> None:
        """Release the lock (a handle that only read holds none)."""
        self._release()

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Run:
        self._contexts.append(self._fd is None)  # whether this block takes the lock (and so releases it)
        self.lock()
        return self

    def __exit__(self, *exc) -> None:
        if self._contexts.pop():
            self._release()

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass

    def _writer(self) -> None:
        if self._fd is None:
            self.lock()

    def _remove_stale_tmp(self) -> None:
        """`.tmp` files are writes a dead process left half done; only the lock holder writes them,
        so it removes them (config.yaml's excepted: a process creating the run writes it unlocked)."""
        for tmp in list(self.path.glob("*.tmp")) + list((self.path / CKPT).glob("*.tmp")):
            if not tmp.name.startswith("config.yaml."):
                tmp.unlink(missing_ok=True)

    # --- status ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return (self.path / DONE).exists()

    def done_info(self) -> dict | None:
        """DONE's summary, or None when it is missing or unreadable (see `problems`)."""
        return read_done(self.path)

    def problems(self) -> list[str]:
        """What is wrong with a finished run (empty: DONE is valid). A finished run's metrics hold
        exactly the steps 0..N-1, every line parses, and DONE is a JSON summary of this config."""
        if not self.done:
            return []
        out = []
        info = self.done_info()
        if info is None:
            out.append(f"{self.path / DONE} is not a JSON summary")
        else:
            our_hash, our_steps = self.config_hash, self.steps  # each reads config.yaml: read once
            if info.get("config_hash", our_hash) != our_hash:  # a DONE older than the hash has none
                out.append(
                    f"{self.path / DONE} records config {info['config_hash']}, not this run's {our_hash}"
                )
            elif info.get("steps", our_steps) != our_steps:
                out.append(f"{self.path / DONE} records {info['steps']} steps, not this run's {our_steps}")
        try:
            rows, tail = self._read("metrics.jsonl")
        except CorruptRunError as e:
            return out + [str(e).split(". ")[0]]
        if tail:
            out.append(f"{self.path / 'metrics.jsonl'} ends in an incomplete line")
        steps = [r.get("step") for r in rows]
        if steps != self.schedule:
            where = (
                "is missing" if not (self.path / "metrics.jsonl").exists() else f"holds {_steps_text(steps)}"
            )
            out.append(f"{self.path / 'metrics.jsonl'} {where}, not steps 0-{self.steps - 1}")
        return out

    def check_done(self) -> None:
        """Raise CorruptRunError when a finished run is not what DONE says (see `problems`)."""
        problems = self.problems()
        if problems:
            raise CorruptRunError(
                f"finished run {self.path} is inconsistent: {'; '.join(problems)}. It is not reused. "
                f"`{repair_command(self.path)}` moves its files aside (nothing is deleted) so it trains again"
            )

    def outdated(self, *, model: bool = False) -> str | None:
        """Why this finished run is not reused although its config is the same: the changes to
        training since the revision its DONE records that touch its config (`revisions`), in a
        sentence. None: it stands (or DONE does not read, which `problems` reports). `model`: also
        when it trained on other weights than its model's name loads here (`other_weights`), what
        the grid and the CLI ask before they reuse it; `load` and `plot` read the store alone."""
        info = self.done_info()
        return None if info is None else self._outdated(info, model=model)

    def _outdated(self, record: dict, *, model: bool) -> str | None:
        """`outdated` for `record`, the run's DONE or a checkpoint."""
        try:
            cfg = self.cfg or config.from_dict(self.saved_config())
        except (ValueError, TypeError, CorruptRunError):  # a config today's code refuses: the grid
            return None  # refuses it when it trains, and `problems` names an unreadable one
        revision = record.get("training_revision")
        changes = revisions.since(revision, cfg)
        if changes:
            return revisions.describe(revision, changes)
        return other_weights(record, cfg) if model else None

    def retire(self) -> Path:
        """Move what a training left (DONE, metrics, samples, final weights) to quarantine/<time>/
        so that the run trains again from step 0: an outdated run, whose results are kept for a
        comparison by hand. Its checkpoint is removed: no code resumes it (today's trains the config
        differently), and at the paper's scale it is gigabytes. Returns that folder."""
        self._writer()
        names = (DONE, "metrics.jsonl", "samples.jsonl", FINAL_WEIGHTS, REUSED_FROM)
        box = self._quarantine([self.path / n for n in names])
        shutil.rmtree(self.path / CKPT, ignore_errors=True)
        self._last_step = None
        return box

    def mark_done(self, summary: dict | None = None, final_weights: dict | None = None) -> None:
        """Finish the run: check that the metrics hold exactly the steps 0..N-1, write the final
        weights if given, then DONE, then drop the checkpoints (a finished run is never resumed)."""
        self._writer()
        rows, tail = self._read("metrics.jsonl")
        steps = [r["step"] for r in rows]
        if tail or steps != self.schedule:
            raise CorruptRunError(
                f"{self.path / 'metrics.jsonl'} holds {_steps_text(steps)}"
                + (" and an incomplete last line" if tail else "")
                + f", not 0-{self.steps - 1}: the run is not marked finished. Rerun it to resume from "
                f"its checkpoint, or `{repair_command(self.path)}`"
            )
        if final_weights is not None:
            save_state(self.path / FINAL_WEIGHTS, {**self._identity(self.steps - 1), **final_weights})
        record = self._done_record(summary or {}, revisions.REVISION)
        write_atomic(self.path / DONE, json.dumps(record))
        shutil.rmtree(self.path / CKPT, ignore_errors=True)  # a crash here: drop_stale_checkpoint

    def _done_record(self, summary: dict, revision: int | None) -> dict:
        """What DONE holds: the training revision and the model's fingerprint first (a DONE cut short
        still names them: repair's rebuild reads them back; None: not recorded, which `outdated`
        reads as before the record), the steps, the config and its hash (what `problems` checks),
        then `summary` (mark_done's final row, commit and device; repair's rebuild has only the row)."""
        return {
            **({"training_revision": revision} if revision is not None else {}),
            **self._weights(),
            "steps": self.steps,
            "config_hash": self.config_hash,
            "config": self.cfg.to_dict() if self.cfg is not None else self.saved_config(),
            **_plain(summary),
        }

    def _weights(self) -> dict:
        """The model fingerprint to record, where the trainer gave one (`model_fingerprint`)."""
        return {"model_fingerprint": self.model_fingerprint} if self.model_fingerprint else {}

    def drop_stale_checkpoint(self) -> int:
        """Remove the ckpt/ of a finished run and return the bytes freed (0: there was none). A
        crash between mark_done's DONE and its removal of ckpt/ leaves one, which nothing resumes."""
        ck = self.path / CKPT
        if not self.done or not ck.exists():
            return 0
        self._writer()
        freed = disk_usage(ck)
        shutil.rmtree(ck, ignore_errors=True)
        return freed

    # --- metrics and samples ---------------------------------------------------------------
    def _append(self, name: str, lines: list[dict]) -> None:
        self._writer()
        data = "".join(json.dumps(_plain(x)) + "\n" for x in lines).encode()
        path = self.path / name
        fd = os.open(path, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            # One write: a crash leaves whole lines or a torn tail, never a torn middle. A regular
            # file takes it whole; the loop only covers a short write (a full disk, a signal).
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as e:
            if disk_full(e):
                raise no_space(path, len(data)) from e
            raise
        finally:
            os.close(fd)

    def log(self, step: int, metrics: dict) -> None:
        self._writer()
        if step <= self.last_step:
            raise ValueError(
                f"step {step} already logged in {self.path / 'metrics.jsonl'} (last step {self.last_step})"
            )
        expected = next((s for s in self.schedule if s > self.last_step), self.last_step + 1)
        if step != expected:
            raise ValueError(
                f"step {step} would follow step {self.last_step} in {self.path / 'metrics.jsonl'}: "
                "steps are logged one after another"
            )
        self._append("metrics.jsonl", [{"step": step, **metrics}])
        self._last_step = step

    def log_samples(self, step: int, samples: list[dict]) -> None:
        self._append("samples.jsonl", [{"step": step, **s} for s in samples])

    def _read(self, name: str) -> tuple[list[dict], bytes]:
        """(the complete lines of `name`, its unterminated last line). A line that does not parse
        raises CorruptRunError naming the file and line; the torn tail is what a crash leaves."""
        path = self.path / name
        if not path.exists():
            return [], b""
        raw = path.read_bytes()
        complete, newline, tail = raw.rpartition(b"\n")
        rows = []
        for i, line in enumerate(complete.split(b"\n") if newline else []):
            if not line.strip():
                continue
            row = _line_row(line)
            if row is None:
                kind = "sample" if name == "samples.jsonl" else "metric"
                raise CorruptRunError(
                    f"{path}, line {i + 1}, is not a {kind} line. `{repair_command(self.path)}` restores "
                    "the file from the run's checkpoint (samples: keeps the lines that read), or moves "
                    "the run aside to train again"
                )
            rows.append(row)
        return rows, tail

    def _rows(self, name: str) -> list[dict]:
        rows, tail = self._read(name)
        if tail:
            if self._fd is not None:  # the writer repairs: the next append starts on a clean line
                with open(self.path / name, "r+b") as f:
                    f.truncate(os.fstat(f.fileno()).st_size - len(tail))
            else:
                warnings.warn(
                    f"{self.path / name} ends in an incomplete line (a write in flight, or a crash "
                    "before the run resumed): it is left out",
                    RunStoreWarning,
                    stacklevel=3,
                )
        return rows

    def metrics(self) -> list[dict]:
        return self._rows("metrics.jsonl")

    def samples(self) -> list[dict]:
        return self._rows("samples.jsonl")

    @property
    def last_step(self) -> int:
        if self._last_step is None:
            rows = self.metrics()
            self._last_step = rows[-1]["step"] if rows else -1
        return self._last_step

    # --- checkpoints -------------------------------------------------------------------------
    def _identity(self, step: int) -> dict:
        cfg = self.cfg.to_dict() if self.cfg is not None else self.saved_config()
        return {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "config_hash": self.config_hash,
            "config": cfg,
            "training_revision": revisions.REVISION,
            **self._weights(),
        }

    def save_checkpoint(self, step: int, state: dict) -> Path:
        """Write the newest checkpoint (with the step, the config hash and a copy of the metrics up
        to `step`) atomically, then remove the previous one. Needs the metrics to hold exactly the
        steps 0..step: a checkpoint never covers a hole."""
        self._writer()
        rows = self.metrics()
        steps = [r["step"] for r in rows]
        if steps != self.schedule_to(step):
            raise CorruptRunError(
                f"{self.path / 'metrics.jsonl'} holds {_steps_text(steps)}; a checkpoint at step {step} "
                f"needs exactly 0-{step}. `{repair_command(self.path)}`"
            )
        ck = self.path / CKPT
        ck.mkdir(exist_ok=True)
        final = ck / f"step_{step:06d}.pt"
        metrics_text = "".join(json.dumps(r) + "\n" for r in rows)
        save_state(final, {**self._identity(step), "metrics": metrics_text, **state})
        for old in ck.glob("step_*.pt"):
            if old != final:
                old.unlink()
        return final

    def checkpoint_file(self) -> Path | None:
        """The newest checkpoint file (no check; `load_checkpoint` checks it)."""
        files = sorted((self.path / CKPT).glob("step_*.pt"))
        return files[-1] if files else None

    def load_checkpoint(self):
        """(step, state) of the newest checkpoint, or (None, None), checked: readable as plain
        tensors, written for this config, at a step inside the run."""
        newest = self.checkpoint_file()
        if newest is None:
            return None, None
        name_step = int(newest.stem.split("_")[1])
        state = read_state(newest)
        fix = f"`{repair_command(self.path)}` moves it aside (the run then restarts from step 0)"
        if name_step >= self.steps:
            raise CorruptRunError(
                f"{newest} is at step {name_step}, past this run's last step {self.steps - 1}. {fix}"
            )
        if state.get("format", 1) >= 2:
            if state.get("config_hash") != self.config_hash:
                raise CorruptRunError(
                    f"{newest} was written by another config ({state.get('config_hash')}; this run's "
                    f"is {self.config_hash}): it belongs to another run. {fix}"
                )
            if state.get("step") != name_step:
                raise CorruptRunError(f"{newest} holds step {state.get('step')}, not {name_step}. {fix}")
        return name_step, state

    def resume(self):
        """(step, state) of the newest checkpoint, or (None, None) to start from step 0, after making
        the metrics and samples agree with it: lines after it are trimmed (they are redone); lines
        before it that are missing, torn or changed are restored from the checkpoint's copy. The
        first call does the work (under the lock); a second call returns the same result once, so a
        caller can check a run before the model loads and `trainer.train` still gets the state."""
        if self._resumed is not None:
            result, self._resumed = self._resumed, None
            return result
        self._writer()
        if self.done:
            raise ValueError(f"{self.path} is finished (DONE): nothing to resume")
        step, state = self.load_checkpoint()
        why = None if state is None else self._outdated(state, model=True)
        if why:  # resumed, the run would be half one code's (or one model's) training and half another's
            moved = self.retire()
            warnings.warn(
                f"{self.path}'s checkpoint at step {step} was {why}: training restarts at step 0 "
                f"(the checkpoint is removed; the old metrics and samples are kept in {moved})",
                RunStoreWarning,
                stacklevel=2,
            )
            step, state = None, None
        for extra in sorted((self.path / CKPT).glob("step_*.pt"))[:-1]:
            extra.unlink()  # the newest checks out: a crash came between writing it and removing these
        keep = -1 if step is None else step
        try:
            rows = self.metrics()
        except CorruptRunError:
            rows = None  # a line that does not parse: restored from the checkpoint's copy below
        kept = [r for r in rows or [] if r["step"] <= keep]
        copy = state.get("metrics") if state is not None else None
        agrees = rows is not None and [r["step"] for r in kept] == self.schedule_to(keep)
        if agrees and copy is not None:  # the same lines as when the checkpoint was taken, to the byte
            agrees = "".join(json.dumps(r) + "\n" for r in kept) == copy
        if step is None and (rows is None or rows):  # logged, none checkpointed: say it is redone
            moved = self._quarantine([self.path / "metrics.jsonl", self.path / "samples.jsonl"])
            logged = "metrics that do not parse" if rows is None else _steps_text([r["step"] for r in rows])
            warnings.warn(
                f"{self.path} logged {logged} but has no checkpoint "
                f"(one is written every train.checkpoint_every steps): training restarts at step 0 "
                f"and redoes them (the old metrics and samples are kept in {moved}). A lower "
                f"train.checkpoint_every loses fewer steps to a crash (for the next runs: it is part of "
                f"a run's hash, so changing it here would start this run anew in another folder)",
                RunStoreWarning,
                stacklevel=2,
            )
        elif agrees:
            if len(kept) != len(rows):
                self._rewrite("metrics.jsonl", kept)
        elif copy is not None:
            steps = [r["step"] for r in rows or []]
            what = (
                "does not parse"
                if rows is None
                else f"holds {_steps_text(steps)}"
                if [r["step"] for r in kept] != self.schedule_to(keep)
                else "differs from the checkpoint's copy"
            )
            moved = self._quarantine([self.path / "metrics.jsonl"])
            write_atomic(self.path / "metrics.jsonl", copy)
            warnings.warn(
                f"{self.path / 'metrics.jsonl'} {what}; restored steps 0-{step} from checkpoint step "
                f"{step} (the old file is kept in {moved})",
                RunStoreWarning,
                stacklevel=2,
            )
        else:
            raise CorruptRunError(
                f"{self.path / 'metrics.jsonl'} does not hold steps 0-{step} of checkpoint "
                f"{self.checkpoint_file()}, which has no copy of them (an older format). "
                f"`{repair_command(self.path)}`"
            )
        salvaged = self._salvage_samples(upto=keep)
        if salvaged:
            first, kept, moved = salvaged
            warnings.warn(
                f"{first}: kept the {kept} samples that read, of steps to {keep} (the old file is kept "
                f"in {moved})",
                RunStoreWarning,
                stacklevel=2,
            )
        else:
            samples = self.samples()
            if any(r["step"] > keep for r in samples):
                self._rewrite("samples.jsonl", [r for r in samples if r["step"] <= keep])
        self._last_step = None
        self._resumed = (step, state)
        return step, state

    def _rewrite(self, name: str, rows: list[dict]) -> None:
        if (self.path / name).exists():
            write_atomic(self.path / name, "".join(json.dumps(r) + "\n" for r in rows))

    def _quarantine(self, files: list[Path], *, copy: bool = False) -> Path:
        """Move files into quarantine/<time>/ (results are never deleted); returns that folder. A
        second move of a file of the same name within the same second goes to <time>-2/, … (a resume
        and a repair a moment apart would otherwise replace the first copy). `copy`: copy them
        there instead, for a file about to be replaced in one rename (it never goes missing)."""
        stamp, n = time.strftime("%Y%m%d-%H%M%S"), 1
        box = self.path / QUARANTINE / stamp
        while any((box / f.relative_to(self.path)).exists() for f in files if f.exists()):
            n += 1
            box = self.path / QUARANTINE / f"{stamp}-{n}"
        for f in files:
            if f.exists():
                box.mkdir(parents=True, exist_ok=True)
                dest = box / f.relative_to(self.path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if copy:
                    shutil.copy2(f, dest)
                else:
                    os.replace(f, dest)
        return box

    # --- repair ---------------------------------------------------------------------------------
    def repair(self) -> list[str]:
        """Make a run consistent again without deleting anything: files in the way are moved to
        quarantine/<time>/. Returns what was done (empty: nothing was wrong)."""
        self._writer()
        done: list[str] = []
        cfg_file = self.path / "config.yaml"
        if not cfg_file.exists():
            original = self._recorded_config()
            if original is None:
                raise CorruptRunError(
                    f"{cfg_file} is missing and no config recorded in DONE or a checkpoint has the "
                    f"folder's hash {self.folder_hash}: move the folder aside; the grid trains it again"
                )
            write_atomic(cfg_file, yaml.safe_dump(original, sort_keys=False))
            done.append("config.yaml was missing: restored from the run's own record")
        try:
            saved_hash = config.dict_hash(self.saved_config())
        except (ValueError, CorruptRunError):
            saved_hash = None
        if self.folder_hash and saved_hash != self.folder_hash:
            original = self._recorded_config()
            # Restoring: the edit is copied aside, then replaced in one rename, so a repair stopped
            # half-way never leaves the run without a config.yaml (load, the grid and repair itself
            # would no longer see it as a run).
            box = self._quarantine([cfg_file], copy=original is not None)
            if original is not None:
                shutil.copy(box / "config.yaml", self.path / "config.yaml.edited")
                write_atomic(cfg_file, yaml.safe_dump(original, sort_keys=False))
                # a file that does not parse was cut or damaged (a copy, a full disk), not edited
                was = "your edit" if saved_hash is not None else "the damaged file (it does not parse)"
                done.append(f"config.yaml restored from the run's own record; {was} is config.yaml.edited")
            else:
                everything = [p for p in self.path.iterdir() if p.name not in (QUARANTINE, LOCK)]
                self._quarantine(everything)
                done.append(
                    "config.yaml was edited and no record of the original exists: the run's files "
                    f"were moved to {box}; it trains again from step 0"
                )
                return done
        newest = self.checkpoint_file()
        if newest is not None:
            try:
                step, state = self.load_checkpoint()
            except CorruptRunError as e:
                box = self._quarantine([newest])
                done.append(f"checkpoint moved to {box}: {str(e).split('. ')[0]}")
            else:
                done += self._drop_uncovered_checkpoint(newest, step, state)
        done += self._restore_last_line_of_finished()
        done += self._cut_torn_tail_of_finished()
        done += self._rebuild_unreadable_done()
        problems = self.problems()
        if problems:
            usable = self.checkpoint_file() is not None
            files = [self.path / DONE, self.path / FINAL_WEIGHTS]
            if not usable:
                files += [self.path / "metrics.jsonl", self.path / "samples.jsonl"]
            box = self._quarantine(files)
            done.append(
                f"{'; '.join(problems)}: DONE moved to {box}; the run "
                + ("resumes from its checkpoint" if usable else "trains again from step 0")
            )
        elif not self.done:
            try:
                self._read("metrics.jsonl")
            except CorruptRunError as e:
                if self.checkpoint_file() is None:
                    box = self._quarantine([self.path / "metrics.jsonl", self.path / "samples.jsonl"])
                    done.append(f"{str(e).split('. ')[0]}: moved to {box}; the run trains again from step 0")
                else:  # what resume does, now: the store's other runs can be read (load, plot) again
                    step, state = self.load_checkpoint()
                    copy = state.get("metrics") if state is not None else None
                    if copy is not None:
                        box = self._quarantine([self.path / "metrics.jsonl"], copy=True)
                        write_atomic(self.path / "metrics.jsonl", copy)
                        done.append(
                            f"{str(e).split('. ')[0]}: restored steps 0-{step} from checkpoint step {step} "
                            f"(the old file is kept in {box}); the run resumes from there"
                        )
        salvaged = self._salvage_samples()  # it blocked `load_samples` (02's texts) of a finished run
        if salvaged:
            first, kept, box = salvaged
            done.append(f"{first}: kept the {kept} samples that read (the old file is kept in {box})")
        return done

    def _salvage_samples(self, upto: int | None = None) -> tuple[str, int, Path] | None:
        """samples.jsonl with a line that does not parse: samples have no checkpoint copy, so every
        line that still reads (to step `upto`) is kept, the whole file copied aside first; the
        damaged one was all there was to lose. (the error's first sentence, lines kept, where the
        old file went), or None when every line reads (a torn last line is `_rows`' to cut)."""
        file = self.path / "samples.jsonl"
        try:
            self._read("samples.jsonl")
            return None
        except CorruptRunError as e:
            box = self._quarantine([file], copy=True)
            rows = (_line_row(line) for line in file.read_bytes().split(b"\n"))
            good = [r for r in rows if r is not None and (upto is None or r["step"] <= upto)]
            write_atomic(file, "".join(json.dumps(r) + "\n" for r in good))
            return str(e).split(". ")[0], len(good), box

    def _restore_last_line_of_finished(self) -> list[str]:
        """A finished run whose metrics stop one line short, that line torn or gone (a copy between
        machines cut short), while its DONE reads and records that last row as `final` (the
        trainer's mark_done): the row is written back, the cut file copied aside first, and the run
        stays finished. Without this, repair moved DONE aside and the run trained again."""
        file, info = self.path / "metrics.jsonl", self.done_info()
        final = (info or {}).get("final") if self.done else None
        if not isinstance(final, dict) or not file.exists() or final.get("step") != self.schedule[-1]:
            return []
        try:
            rows, tail = self._read("metrics.jsonl")
        except CorruptRunError:
            return []
        if [r["step"] for r in rows] != self.schedule[:-1]:
            return []
        box = self._quarantine([file], copy=True)
        raw = file.read_bytes()
        write_atomic(file, raw[: len(raw) - len(tail)].decode() + json.dumps(_plain(final)) + "\n")
        self._last_step = None
        return [
            f"{file} stopped short of the finished run's last step: step {final['step']} restored from "
            f"DONE's record of it (the cut file is kept in {box})"
        ]

    def _cut_torn_tail_of_finished(self) -> list[str]:
        """A finished run whose metrics hold every step, then an incomplete line: only that line is
        wrong, so only it goes (the file copied aside first); the run stays finished. Without this,
        repair moved DONE aside and the whole run trained again from step 0."""
        file = self.path / "metrics.jsonl"
        if not self.done or not file.exists():
            return []
        try:
            rows, tail = self._read("metrics.jsonl")
        except CorruptRunError:
            return []
        if not tail or [r["step"] for r in rows] != self.schedule:
            return []
        box = self._quarantine([file], copy=True)
        raw = file.read_bytes()
        write_atomic(file, raw[: len(raw) - len(tail)].decode())
        return [f"{file} ended in an incomplete line after its last step: cut (the file is kept in {box})"]

    def _rebuild_unreadable_done(self) -> list[str]:
        """DONE that does not read (mark_done writes it in one rename, so a copy between machines cut
        short) over metrics that hold exactly the steps 0..N-1: the run finished and only its summary
        is lost. DONE is rebuilt from config.yaml and the last metrics row, the old file copied aside;
        the commit and device it trained on are lost with it ("not recorded" in plots and reports).
        Without this, repair moved DONE aside and the whole run trained again from step 0."""
        file = self.path / DONE
        if not self.done or self.done_info() is not None:
            return []
        try:
            rows, tail = self._read("metrics.jsonl")
        except CorruptRunError:
            return []
        if tail or [r["step"] for r in rows] != self.schedule:
            return []
        box = self._quarantine([file], copy=True)
        cut = file.read_bytes()
        first = re.match(rb'\{"training_revision": (\d+)', cut)  # DONE's first key
        revision = int(first.group(1)) if first else None
        weights = re.search(rb'"model_fingerprint": "([0-9a-f]+)"', cut)  # its second (before: later)
        self.model_fingerprint = weights.group(1).decode() if weights else None
        rebuilt = {"final": rows[-1], "rebuilt_by_repair": time.strftime("%Y-%m-%d %H:%M:%S")}
        write_atomic(file, json.dumps(self._done_record(rebuilt, revision)))
        return [
            f"{file} did not read and the metrics hold every step: rebuilt from them and config.yaml "
            f"(the commit and device it trained on are not recorded"
            + ("" if first else "; nor is the code's training revision, so the grid trains it again")
            + (
                ""
                if weights
                else "; nor is the model's fingerprint, so it stands on whatever weights its model's "
                "name loads, as a run stored before the record"
            )
            + f"; the old file is kept in {box})"
        ]

    def _drop_uncovered_checkpoint(self, newest: Path, step: int, state: dict) -> list[str]:
        """An older-format checkpoint (no copy of the metrics) whose steps 0..step the metrics no
        longer hold cannot be resumed (`resume` refuses it, naming repair): the steps in the hole are
        lost, so the checkpoint, metrics and samples are moved aside and the run trains again from
        step 0. Without this, repair found nothing wrong and resume kept refusing."""
        if self.done or state.get("metrics") is not None:
            return []
        try:
            steps = [r["step"] for r in self.metrics() if r["step"] <= step]
        except CorruptRunError:
            steps = None
        if steps == self.schedule_to(step):
            return []
        stale = sorted((self.path / CKPT).glob("step_*.pt"))  # an older one left by a crash, too
        box = self._quarantine([*stale, self.path / "metrics.jsonl", self.path / "samples.jsonl"])
        what = "do not parse" if steps is None else f"hold {_steps_text(steps)}"
        return [
            f"the metrics {what}, not steps 0-{step} of checkpoint {newest.name}, which has no copy of "
            f"them (an older format): checkpoint, metrics and samples moved to {box}; the run trains "
            "again from step 0"
        ]

    def _recorded_config(self) -> dict | None:
        """The config this folder was made for, from DONE, the final weights or the checkpoint."""
        info = self.done_info()
        candidates = [info.get("config") if info else None]
        for f in (self.path / FINAL_WEIGHTS, self.checkpoint_file()):
            if f is not None and f.exists():
                try:
                    candidates.append(read_state(f).get("config"))
                except CorruptRunError:
                    pass
        for c in candidates:
            if isinstance(c, dict) and config.dict_hash(c) == self.folder_hash:
                return c
        return None


# --- reading a store -------------------------------------------------------------------------
def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v) if isinstance(v, (list, tuple)) or isinstance(v, dict) else v
    return out


def config_columns(cfg: dict) -> dict:
    """A config (its `to_dict()`, or a config.yaml read back) as the `cfg.<dotted>` columns `load`
    gives each of its rows; `experiments.missing_runs` describes a run not trained yet the same way."""
    return {f"cfg.{k}": v for k, v in _flatten(cfg).items()}


def load(root, finding: str | None = None, *, include_running: bool = True, run_ids=None):
    """One row per (run, step): run_id, finding, done, device and model_fingerprint (DONE's), step,
    the metrics, and cfg.<dotted> columns;
    `run_ids`: only those run folders (a leftover of an older grid, damaged or not, is not read).

    Never changes a file (runs may be training). A torn last line is left out with a warning; a
    finished run whose metrics are not its steps 0..N-1 is warned about and reported `done=False`
    (and left out with include_running=False), so no short run passes as finished."""
    import pandas as pd

    base = Path(root) / "runs"
    folders = sorted(base.glob(f"{finding or '*'}/*/config.yaml"))
    rows = []
    for cfg_file in folders:
        path = cfg_file.parent
        if run_ids is not None and path.name not in run_ids:
            continue
        run = Run(path)
        try:
            cfg, metric_rows = run.saved_config(), run.metrics()
        except CorruptRunError as e:
            if run.done:
                raise
            # An unfinished run is not judged: one damaged line in it blocked every plot of the store
            warnings.warn(f"{path} (unfinished) is left out: {e}", RunStoreWarning, stacklevel=2)
            continue
        problems = run.problems()
        if problems:
            warnings.warn(
                f"{path} is marked finished but {'; '.join(problems)}: reported as unfinished. "
                f"`{repair_command(path)}`",
                RunStoreWarning,
                stacklevel=2,
            )
        elif run.done and (why := run.outdated()):
            problems = [why]
            warnings.warn(
                f"{path} was {why}: reported as unfinished (the grid trains it again)",
                RunStoreWarning,
                stacklevel=2,
            )
        done = run.done and not problems
        if not include_running and not done:
            continue
        flat = config_columns(cfg)
        # where it trained and on which weights (DONE's record; None while running, or stored
        # before the record): 07's seconds and GB compare only runs of one device, a lease may land
        # on an H100 or an H200, and no claim compares runs of two models under one name
        info = (run.done_info() or {}) if run.done else {}
        head = {
            "run_id": path.name,
            "finding": path.parent.name,
            "done": done,
            "device": info.get("device"),
            "runs_per_device": info.get("runs_per_device"),  # the grid's runs training beside it
            "model_fingerprint": info.get("model_fingerprint"),
        }
        for m in metric_rows:
            rows.append({**head, **m, **flat})
    if not rows:
        return pd.DataFrame(
            columns=["run_id", "finding", "done", "device", "runs_per_device", "model_fingerprint", "step"]
        )
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
        rows += [{"run_id": path.name, **s} for s in Run(path).samples()]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run_id", "step", "seed", "thinks"])


def finished_elsewhere(root, finding: str, name: str, *, model: bool = True) -> Path | None:
    """A finished, consistent run folder `name` (the same slug and config hash) under another finding
    of `root`, or None: findings share configs (01, 03 and 04 all train Bandit StarPO-PPO), and
    training one twice cost a quarter of the quick profile's steps. Not one trained by older code or
    (`model`) on other weights than its model's name loads here (`Run.outdated`)."""
    for other in sorted((Path(root) / "runs").glob(f"*/{name}")):
        if other.parent.name == finding or not (other / DONE).exists():
            continue
        try:
            run = Run(other)
            run.check_done()
            if run.outdated(model=model):
                continue  # trained by older code or on other weights: its own finding's grid retrains it
        except (CorruptRunError, OSError, ValueError):
            continue  # its own finding's grid names the problem; this one trains its own copy
        return other
    return None


def stands(path: Path, cfg: Config, *, model: bool = True) -> bool:
    """Whether a grid or the CLI stops at the run folder `path` without training it: its DONE stands
    (or does not read: they stop on it and name the repair), rather than no DONE, or one trained by
    older code or (`model`) on other weights than `cfg.model.name` loads here (`Run.outdated`).
    Reads only, without the lock: what `plan`, the model check and a data-parallel rank other than 0
    (which never opens the run) ask before anything is trained. `model=False`: the stored data
    alone, as `load` judges it (`experiments.missing_runs`)."""
    info = read_done(path)  # read before looking for the file: a writer may be retiring it now
    if info is None:
        return (path / DONE).exists()
    if revisions.since(info.get("training_revision"), cfg):
        return False
    return not (model and other_weights(info, cfg))


def other_weights(record: dict, cfg: Config) -> str | None:
    """Why the run or checkpoint `record` (DONE, or a checkpoint's state) trained on other weights
    than `cfg.model.name` loads here, in a phrase that follows "was": the name is the same, and so is
    the folder's hash, but the file was written over, the wheel or the hub snapshot changed, or a
    relative path was read from another working folder. None where it records no fingerprint (every
    run stored before the record: it stands, rather than the world training again) or the model is
    not on this machine (nothing to compare with: a store read where it was not trained)."""
    then = record.get("model_fingerprint")
    if not isinstance(then, str) or not then:
        return None
    from ragen_lib import models  # torch: only where a fingerprint is recorded

    now = models.fingerprint_here(cfg.model.name)
    if now is None or now == then:
        return None
    return (
        f"trained on other weights under the name {cfg.model.name} ({then[:12]}… then, {now[:12]}… "
        f"now, from {models.weights_of(cfg.model.name)})"
    )


def adopt(src: Path, dest: Path) -> bool:
    """Copy the finished run `src` to `dest` (which must not exist): config, metrics, samples, DONE
    and the final weights (hard-linked where the disk allows), not its lock, checkpoints or
    quarantine; REUSED_FROM names where it trained (`_copy_finished`). Built under <root>/.adopting/
    and renamed into place, so no reader ever sees half a run. False (nothing changed) when `dest`
    appeared meanwhile."""
    tmp = dest.parents[2] / ".adopting" / f"{dest.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _copy_finished(src, tmp, dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if dest.exists():  # another process made it first: its run stands
                return False
            raise
        fsync_dir(dest.parent)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # empty unless another process is adopting now
            tmp.parent.rmdir()


def _copy_finished(src: Path, dest: Path, final: Path) -> None:
    """Copy a finished run's files (not its lock, checkpoints or quarantine) into the folder `dest`,
    the final weights hard-linked where the disk allows, then REUSED_FROM naming the folder the run
    trained in: `src`, or the origin `src` itself names when it is a copy. A copy is never the
    origin of another, so the report and the backlog, which skip copies, count each run once (a
    copy of a copy named the copy: after the original was deleted and copied back, the two named
    each other and neither was counted). A run copied back to `final`, where it trained, names
    nothing: it is the original again."""
    for f in src.iterdir():
        if not f.is_file() or f.name in (LOCK, REUSED_FROM):
            continue
        if f.name == FINAL_WEIGHTS:
            with contextlib.suppress(OSError):
                os.link(f, dest / f.name)
        if not (dest / f.name).exists():
            shutil.copy2(f, dest / f.name)
    # by its place in the store, not this machine's path: a copy is committed with the runs
    origin = f"runs/{src.parent.name}/{src.name}"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        origin = (src / REUSED_FROM).read_text().strip() or origin
    if origin != f"runs/{final.parent.name}/{final.name}":
        (dest / REUSED_FROM).write_text(f"{origin}\n")


def adopt_into(src: Path, run: Run) -> None:
    """`adopt` into a run folder that exists (held locked, retired: `Run.retire`): the files are
    copied aside under <run>/.adopting/, then moved in one by one, DONE last, so a reader sees an
    unfinished run until the copy is whole."""
    run._writer()
    tmp = run.path / ".adopting"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _copy_finished(src, tmp, run.path)
        for f in sorted(tmp.iterdir(), key=lambda f: f.name == DONE):
            os.replace(f, run.path / f.name)
        fsync_dir(run.path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    run._last_step = None


def disk_usage(path) -> int:
    """Bytes of the files under `path` (what a run folder leaves on disk)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
