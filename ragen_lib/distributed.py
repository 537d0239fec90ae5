"""Data parallel: one process per device under `accelerate launch --multi_gpu` or `torchrun`.

Every rank holds the whole model and plays a contiguous share of the step's groups. `Ranks` is
this process's place in the run; with one process every method is the identity (or the
single-process function), so `trainer.train` has one code path. `Shard` is this rank's part of
the batch the filter kept, and the batch-wide statistics over all ranks' parts.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ragen_lib import algorithms as A


class Ranks:
    """The launcher sets WORLD_SIZE / RANK / LOCAL_RANK and the rendezvous address; we open the
    torch.distributed group ourselves (gloo on CPU, nccl on GPU), because accelerate's state opens
    none for CPU processes."""

    def __init__(self, device: str):
        self.world = world_size()
        # One process is rank 0 whatever a stray RANK says (a scheduler's, an old shell's): as rank
        # 1 of 1 it would wait for a word from no one and train nothing
        self.rank = int(os.environ.get("RANK", "0")) if self.world > 1 else 0
        self.main = self.rank == 0
        self.device = device
        self._opened = self.world > 1 and not dist.is_initialized()
        if self.world > 1 and device.startswith("cuda"):
            # also where the group is open already: NCCL's object collectives use the current device
            torch.cuda.set_device(device)
        if self._opened:
            # Rank 0 validates alone while the others wait in a broadcast (`trainer._validation`):
            # the paper's 256 states on each of 4 envs can outlast NCCL's 10-minute default watchdog
            dist.init_process_group(
                "nccl" if device.startswith("cuda") else "gloo", timeout=datetime.timedelta(hours=2)
            )

    def shard(self, xs: list) -> list:
        """This rank's contiguous slice of `xs` (len(xs) divisible by world: checked by `Config`)."""
        n = len(xs) // self.world
        return xs[self.rank * n : (self.rank + 1) * n]

    def keep(self, kept: torch.Tensor, n_local: int) -> Shard:
        """This rank's part of a kept batch. `kept`: (B_all,) ascending global episode indices that
        the filter kept (global index = rank · n_local + local index); `n_local`: the episodes this
        rank played."""
        first = n_local * self.rank  # this rank's first global episode
        mine = (kept >= first) & (kept < first + n_local)
        return Shard(self, rows=kept[mine] - first, lo=int((kept < first).sum()), total=len(kept))

    def cat(self, x):
        """Every rank's `x` (a tensor, a list, or a dict of them) concatenated in rank order."""
        if self.world == 1:
            return x
        parts = [None] * self.world
        dist.all_gather_object(parts, x)
        return _concat(parts)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return x
        y = x.detach().to(self.device, torch.float64)
        dist.all_reduce(y)
        return y.to(x.device, x.dtype)

    def masked_mean(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A.masked_mean over the whole batch of all ranks."""
        if self.world == 1:
            return A.masked_mean(x, mask)
        total = self.sum(torch.stack([(x * mask).sum(), mask.sum()]))
        return total[0] / total[1].clamp(min=1)

    def masked_whiten(self, x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """A.masked_whiten with the mean and population variance of the whole batch of all ranks."""
        if self.world == 1:
            return A.masked_whiten(x, mask, eps=eps)
        mean = self.masked_mean(x, mask)
        return (x - mean) * torch.rsqrt(self.masked_mean((x - mean) ** 2, mask) + eps)

    def sum_grads(self, module: nn.Module) -> None:
        """Sum each gradient over ranks. Every rank divides its loss by the token count of the
        GLOBAL mini-batch, so the sum is exactly the single-process token-mean gradient (DDP's
        mean over ranks would be right only if every rank held the same number of tokens)."""
        if self.world == 1:
            return
        for p in module.parameters():
            if p.requires_grad:
                if p.grad is None:  # this rank had no rows in the mini-batch
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (a picklable object)."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def copy_weights(self, *modules) -> None:
        """Every rank takes rank 0's weights (they already agree; this makes sure)."""
        for m in modules if self.world > 1 else ():
            for t in m.state_dict().values():
                dist.broadcast(t, src=0)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self._opened:
            dist.destroy_process_group()


@dataclass
class Shard:
    """This rank's rows of the kept batch: they are the global kept rows lo … lo + len(rows) − 1.

    Also the batch-wide statistics an advantage estimator needs (`whiten`, `zscore`, `std`): over
    all ranks' kept rows, returned for this rank's rows.
    """

    ranks: Ranks
    rows: torch.Tensor  # (B,) indices into this rank's rollout batch
    lo: int  # global kept index of rows[0]
    total: int  # B_all: kept rows over all ranks

    def __len__(self) -> int:
        return len(self.rows)

    def local(self, kept_rows: torch.Tensor) -> torch.Tensor:
        """The rows of a global mini-batch (kept indices 0 … total − 1) that this rank holds, as
        indices into this rank's kept batch."""
        return kept_rows[(kept_rows >= self.lo) & (kept_rows < self.lo + len(self))] - self.lo

    def cat(self, x):
        return self.ranks.cat(x)

    def whiten(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.ranks.masked_whiten(x, mask)

    def zscore(self, x: torch.Tensor) -> torch.Tensor:
        """(B,) → (B,): z-scored over every rank's kept rows."""
        return A.zscore(self.ranks.cat(x))[self.lo : self.lo + len(self)]

    def std(self, x: torch.Tensor) -> torch.Tensor:
        """Population std over every rank's kept rows (0-d)."""
        return self.ranks.cat(x).std(unbiased=False)


def world_size() -> int:
    """Processes in this run (1 unless launched by accelerate / torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_device(device: str) -> str:
    """One GPU per process under a multi-process launch."""
    if device.startswith("cuda") and world_size() > 1:
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _concat(parts: list):
    if isinstance(parts[0], dict):
        return {k: _concat([p[k] for p in parts]) for k in parts[0]}
    return torch.cat(parts) if torch.is_tensor(parts[0]) else [y for part in parts for y in part]
