"""Section `trl`: TRL's GRPOTrainer on the same single-turn workload as our step, on equal terms
(`TRL_TERMS`, checked by `trl_mismatches`: an unequal comparison is refused, never reported)."""

from __future__ import annotations

import statistics
import tempfile
import time

from ragen_lib import models
from ragen_lib.bench.common import Row, sync
from ragen_lib.bench.training import train_config

TRL_HINT = "trl not installed (pip install -e .[bench])"
TRL_SETUPS = {
    "dynamic cache": {},
    "static cache": {"cache_implementation": "static"},
    # TRL builds its GenerationConfig with disable_compile=True; this setup turns compile back on.
    "static cache + compile": {"cache_implementation": "static", "compile": True},
    # transformers' continuous batching (paged attention): TRL's fastest path without vLLM.
    "paged": {"use_transformers_paged": True},
}
"""TRL's generation setups without vLLM; ours is compared with the fastest that runs."""
TRL_TERMS = (
    "Bandit, one turn; stop at EOS only (ours rollout.stop_at_answer=false); GRPO advantages; no KL "
    "and no reference forward (TRL beta=0; ours algo.kl_coef=0, train.log_kl_ref=false); no entropy "
    "bonus; token mean over the batch (TRL loss_type=dapo; ours train.loss_agg=token-mean); one "
    "optimizer step per batch; temperature 1, no top-p/top-k"
)


def measure_trl(name: str, device: str, size: dict) -> list[Row]:
    """Our step against TRL's GRPOTrainer on equal terms (`TRL_TERMS`, checked by `trl_mismatches`):
    per new-token cap, `trl_steps` measured steps after one warm-up step on each side; the median
    s/step and its range, the generated tokens (recorded: the counts differ by sampling, so
    tokens/s is the fair figure) and tokens/s; TRL in each of its setups, ours against its best."""
    try:
        import trl
    except ImportError:
        return [Row("TRL GRPOTrainer step (Bandit)", None, "s", "ours ≥ 3× faster", note=TRL_HINT)]
    rows: list[Row] = []
    for n in size["trl_new_tokens"]:
        shape = f"{size['groups']}×{size['group_size']}, ≤{n} new tokens"
        ours = summarize_steps(our_grpo_steps(name, device, size, n))
        theirs = {}
        for setup in size["trl_setups"]:
            try:
                theirs[setup] = summarize_steps(trl_step_times(name, device, size, n, TRL_SETUPS[setup]))
            except UnequalTerms:
                raise  # our bug, not the host's: an unfair figure is never reported
            except Exception as e:  # noqa: BLE001 (a setup this host cannot run is reported, not fatal)
                rows.append(
                    Row(
                        f"TRL {setup}: s/step, {shape}",
                        None,
                        "s",
                        note=f"failed: {type(e).__name__}: {e}"[:300],
                    )
                )
                continue
            rows.append(
                Row(
                    f"TRL {setup}: s/step, {shape}",
                    theirs[setup]["median_s"],
                    "s",
                    note=_steps_note(theirs[setup]),
                )
            )
        rows.append(Row(f"ours: s/step, {shape}", ours["median_s"], "s", note=_steps_note(ours)))
        if not theirs:
            continue
        best = max(theirs, key=lambda k: theirs[k]["tokens_per_s"])  # token counts differ by sampling
        b = theirs[best]
        note = f"against TRL {best} (trl {trl.__version__}); {TRL_TERMS}"
        rows.append(
            Row(
                f"TRL comparison: our step, {shape}",
                ours["median_s"],
                "s",
                "ours ≥ 3× faster",
                b["median_s"] / ours["median_s"],
                note,
            )
        )
        rows.append(
            Row(
                f"TRL comparison: our tokens/s, {shape}",
                ours["tokens_per_s"],
                "tokens/s",
                "ours ≥ 3× faster",
                ours["tokens_per_s"] / b["tokens_per_s"],
                note,
            )
        )
    return rows


def summarize_steps(steps: list[tuple[float, float]]) -> dict:
    """(seconds, generated tokens) of each measured step → median s/step, its range, the mean
    generated tokens per step and tokens/s (total tokens over total seconds)."""
    if not steps:
        raise ValueError("no measured steps (the warm-up step is not one): raise trl_steps")
    secs = [s for s, _ in steps]
    tokens = sum(t for _, t in steps)
    return {"steps": len(secs), "median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs),
            "tokens_per_step": tokens / len(secs), "tokens_per_s": tokens / sum(secs)}  # fmt: skip


def _steps_note(x: dict) -> str:
    return (
        f"median of {x['steps']} steps after a warm-up one (range {x['min_s']:.3g}–{x['max_s']:.3g} s); "
        f"{x['tokens_per_step']:.0f} generated tokens/step, {x['tokens_per_s']:.0f} tokens/s"
    )


def our_grpo_config(name: str, device: str, size: dict, n: int, steps: int):
    """Our side of the comparison: StarPO-GRPO on Bandit under `TRL_TERMS`."""
    return train_config(
        name,
        device,
        {**size, "max_new_tokens": n},
        env="bandit",
        steps=steps,
        algo={"name": "starpo-grpo", "kl_coef": 0.0, "entropy_coef": 0.0},
        one_update=True,
        extra={
            "rollout": {"stop_at_answer": False},
            "train": {"log_kl_ref": False, "loss_agg": "token-mean"},
        },
    )


def our_grpo_steps(name: str, device: str, size: dict, n: int) -> list[tuple[float, float]]:
    """(seconds, generated tokens) of each of our steps after the first."""
    from ragen_lib import trainer

    cfg = our_grpo_config(name, device, size, n, size["trl_steps"] + 1)
    out = trainer.train(cfg, run=None, progress=False)[1:]
    return [(m["time/step"], m["throughput/gen_tokens_per_s"] * m["time/rollout"]) for m in out]


def trl_args(size: dict, n: int, setup: dict, output_dir: str, device: str):
    """GRPOConfig for `TRL_TERMS` (TRL's own defaults where they already match)."""
    from trl import GRPOConfig

    P, N = size["groups"], size["group_size"]
    knobs = {k: v for k, v in setup.items() if k != "compile"}
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=P * N,
        num_generations=N,
        max_completion_length=n,
        max_steps=size["trl_steps"] + 1,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="dapo",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        report_to=[],
        save_strategy="no",
        logging_steps=1,  # each step's completions/mean_length
        gradient_checkpointing=False,  # ours does not checkpoint either
        use_cpu=not device.startswith("cuda"),
        bf16=device.startswith("cuda"),
        disable_tqdm=True,
        **knobs,
    )


class UnequalTerms(ValueError):
    """Our config and TRL's differ on a term of `TRL_TERMS` (`trl_mismatches` names which)."""


def trl_mismatches(cfg, args) -> list[str]:
    """Where our config (`our_grpo_config`) and TRL's (`trl_args`) differ on `TRL_TERMS`: each a
    reason the comparison would not be fair. `measure_trl` refuses to report while any remains."""
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    rows = t.groups * t.group_size
    stop = (args.generation_kwargs or {}).get("stop_strings")
    checks = {
        "stop rule (ours stops at </answer> as well as EOS)": r.stop_at_answer or bool(stop),
        "new-token cap": r.max_new_tokens != args.max_completion_length,
        "temperature": r.temperature != args.temperature or args.top_p != 1.0 or args.top_k not in (0, None),
        "rows per step": rows != args.per_device_train_batch_size or t.group_size != args.num_generations,
        "KL term (TRL beta)": bool(a.kl_coef) or args.beta != 0.0,
        "reference forward (ours logs policy/kl_ref)": t.log_kl_ref,
        "entropy bonus (TRL has none)": a.entropy_coef != 0,
        "loss aggregation (token mean over the batch)": t.loss_agg != "token-mean"
        or args.loss_type not in ("dapo", "bnpo"),
        "optimizer steps per batch": t.mini_batch_size < rows
        or t.ppo_epochs != 1
        or args.num_iterations != 1
        or (args.steps_per_generation or 1) != 1
        or args.gradient_accumulation_steps != 1,
        "advantage (group-normalized GRPO)": a.advantage != "grpo"
        or args.scale_rewards not in ("group", True),
        "learning rate": t.actor_lr != args.learning_rate,
    }
    return [k for k, bad in checks.items() if bad]


def trl_step_times(name: str, device: str, size: dict, n: int, setup: dict) -> list[tuple[float, float]]:
    """(seconds, generated tokens) of each GRPOTrainer step after the first (generation in
    transformers, no vLLM), under `setup` (a `TRL_SETUPS` value)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from ragen_lib.config import RolloutConfig
    from ragen_lib.envs import make
    from ragen_lib.rollout import Episode

    model, tok = models.load(name, device=device)
    P, N = size["groups"], size["group_size"]
    prompts = [Episode(make("bandit"), s, RolloutConfig(max_turns=1)).messages for s in range(P)]

    def reward(completions, **_):
        return [float("</answer>" in (c[-1]["content"] if isinstance(c, list) else c)) for c in completions]

    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            sync(device)
            times.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            sync(device)
            times[-1] = time.perf_counter() - times[-1]

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"] * P * N)

    with tempfile.TemporaryDirectory() as tmp:
        args = trl_args(size, n, setup, tmp, device)
        unfair = trl_mismatches(our_grpo_config(name, device, size, n, 2), args)
        if unfair:
            raise UnequalTerms(f"the TRL comparison is not on equal terms: {unfair}")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            processing_class=tok,
            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 64),
            callbacks=[Clock()],
        )
        trainer.remove_callback(PrinterCallback)  # with tqdm off it prints every step's logs
        if setup.get("compile"):
            trainer.generation_config.disable_compile = False
        trainer.train()
    if len(lengths) != len(times):
        raise RuntimeError(f"TRL logged {len(lengths)} completion lengths for {len(times)} steps")
    return list(zip(times, lengths))[1:]
