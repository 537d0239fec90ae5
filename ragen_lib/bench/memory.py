"""Section `memory`: the process's peak, and the LM head's peak in one pass against chunks, each in
a fresh process."""

from __future__ import annotations

import resource
import sys
import time

import torch

from ragen_lib import models
from ragen_lib.bench.common import Row, trim_host_memory


def peak_memory(device: str) -> Row:
    if device.startswith("cuda"):
        return Row(
            "peak memory: torch.cuda.max_memory_allocated",
            torch.cuda.max_memory_allocated(device) / 2**30,
            "GB",
        )
    # ru_maxrss is KiB on Linux, bytes on macOS; it is the whole process, Python and tokenizer included.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**30 if sys.platform == "darwin" else 2**20)
    return Row("peak memory: process RSS (ru_maxrss)", rss, "GB")


def measure_head_memory(name: str, device: str, size: dict) -> list[Row]:
    """Peak memory of one `forward_logp` with entropies through the LM head in one pass against
    chunks of `models.HEAD_CHUNK` (the same log-probs): without gradient over `head_positions`
    positions of 32 rows (the old-policy forward), and with gradient, forward and backward, over
    16 such rows (a quick mini-batch's pack; the chunks recomputed in the backward, as on
    `models.HEAD_CHUNK_GRAD_DEVICES`, which this turns on for the device measured). Each in a fresh
    process (`_head_peak`), so none inherits another's peak or cached blocks."""
    import concurrent.futures
    import multiprocessing

    how = "CUDA max_memory_allocated" if device.startswith("cuda") else "peak RSS growth"
    trim_host_memory()  # each child peaks at up to 12 GB (CPU) beside this process's heap
    out = []
    for grad in (False, True):
        got = {}
        for chunk in (models.HEAD_CHUNK, 0):
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
                job = pool.submit(_head_peak, name, device, size["head_positions"], chunk, grad)
                got[chunk] = job.result()
        whole, t_whole, v_whole, positions = got[0]
        chunked, t_chunked, v_chunked, _ = got[models.HEAD_CHUNK]
        diff = float((v_chunked - v_whole).abs().max())
        kind = (
            "forward_logp with entropies, forward and backward"
            if grad
            else "no-grad forward_logp with entropies"
        )
        what = f"head memory: {kind}, {positions} positions"
        compared = "loss and gradient norm" if grad else "log-prob"
        out += [
            Row(f"{what}, head in one pass", whole, "GB", note=f"{how}; {t_whole:.2f} s"),
            Row(
                f"{what}, head in {'checkpointed ' if grad else ''}chunks of {models.HEAD_CHUNK}",
                chunked,
                "GB",
                vs_naive=whole / chunked if chunked > 0 else None,
                note=f"{how}; {t_chunked:.2f} s; {compared} max |Δ| {diff:.1e}",
            ),
        ]
    return out


def _head_peak(name: str, device: str, positions: int, chunk: int, grad: bool):
    """(peak GB above the start, seconds, what to compare, loss positions) of one `forward_logp`
    with entropies over random tokens of 32 rows (16 with `grad`) × positions / 32, HEAD_CHUNK =
    `chunk` (0: one pass). Without `grad` the (K,) log-probs are compared; with it, forward and
    backward, (loss, gradient norm)."""
    model, _ = models.load(name, device=device)
    rows, T = (16 if grad else 32), positions // 32 + 1
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, T), generator=g).to(device)
    attn, mask = torch.ones_like(ids), torch.ones(rows, T, device=device)
    models.HEAD_CHUNK = chunk or rows * T
    models.HEAD_CHUNK_GRAD_DEVICES = (torch.device(device).type,)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with torch.set_grad_enabled(grad):
        logp, ent = models.forward_logp(model, ids, attn, mask, with_entropy=True, causal_only=True)
        if grad:
            loss = -logp.sum() / mask.sum() - 0.001 * ent.sum() / mask.sum()
            loss.backward()
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            value = torch.stack([loss.detach(), norm]).cpu()
        else:
            value = logp[:, 1:].reshape(-1).cpu()
    if cuda:
        torch.cuda.synchronize(device)
        peak = (torch.cuda.max_memory_allocated(device) - base) / 2**30
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 2**20
    return peak, time.perf_counter() - t, value, int(mask[:, 1:].sum())
