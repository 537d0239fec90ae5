"""Files written whole or not at all, and a full disk named as such.

`write_atomic` (small text files) and `save_state` (torch.save) write a temporary file, fsync it,
rename it over the target and fsync the folder: a process killed at any moment leaves the old
file or the new one, never half of either, and at most a `<name>.<pid>.tmp` or `<name>.tmp` beside
it. A write that runs out of space raises `DiskFullError` saying how much was needed and how much
is free. The run store writes every file this way, and so do the reports rewritten while their
job runs (REPORT.md, verdicts, `bench`, `gpu-check`).
"""

from __future__ import annotations

import errno
import math
import os
import shutil
from pathlib import Path


class DiskFullError(OSError):
    """No space left on the disk a file was written to; a run is left resumable."""


def disk_full(e: BaseException | None) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def _free_mb(path: Path) -> float:
    try:
        return shutil.disk_usage(path).free / 1e6
    except OSError:
        return math.nan


def no_space(path: Path, need_bytes: int, what: str = "") -> DiskFullError:
    return DiskFullError(
        errno.ENOSPC,
        f"no space left writing {path} (about {need_bytes / 1e6:.0f} MB needed, "
        f"{_free_mb(path.parent):.0f} MB free on that disk){what}. Free space there, or move the outputs "
        "to a larger disk (RAGEN_OUTPUTS / --out), then rerun: a run resumes from its last checkpoint",
    )


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write a small file whole or not at all: a temporary file, fsynced, then renamed over it. The
    temporary name holds the PID: two processes creating the same run never share one. The store's
    files, and every report rewritten while its job runs (REPORT.md, verdicts, bench, gpu-check): a
    job killed mid-write (a GPU lease's time limit) leaves the previous version, never half a file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    data = text.encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if disk_full(e):
            raise no_space(path, len(data)) from e
        raise
    fsync_dir(path.parent)


class _CountingWriter:
    """The file object torch.save writes to: it records what stopped a write (torch's zip writer
    reports only "enforce fail at inline_container.cc" in its place), so a full disk can be named
    as such and a Ctrl-C mid-checkpoint stays a KeyboardInterrupt."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)  # a buffered file writes everything or raises
        except BaseException as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _tensor_bytes(obj) -> int:
    """Bytes of the tensors in a (nested) state: what a checkpoint of it needs on disk."""
    if hasattr(obj, "untyped_storage"):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return len(obj) if isinstance(obj, str) else 8


def save_state(path: Path, state: dict) -> None:
    """`torch.save` made atomic and durable: a temporary file, fsynced, renamed over `path`. On any
    failure the temporary file is removed and `path` is untouched; a full disk says so."""
    import torch

    tmp = path.with_name(path.name + ".tmp")
    writer = None
    try:
        with open(tmp, "wb") as f:
            writer = _CountingWriter(f)
            torch.save(state, writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        cause = writer.error if writer is not None and writer.error is not None else e
        if disk_full(cause):
            raise no_space(path, _tensor_bytes(state)) from e
        if isinstance(cause, KeyboardInterrupt) and cause is not e:
            # Ctrl-C inside torch.save came out as a RuntimeError: a grid read it as a failed run
            # and trained the next one; the CLI printed a traceback instead of "interrupted"
            raise cause from None
        raise
    fsync_dir(path.parent)


def unwritable(root) -> str | None:
    """Why folder `root` cannot be created or written (None: it can), without creating it."""
    path = Path(root).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        return f"{path} is a file"
    return None if os.access(path, os.W_OK) else f"{path} is not writable by this user"
