"""Sections `train`, `work` and `turns`: one `trainer.train` step by phase (and with each of
`ROLLOUT_VARIANTS`), the work of one step counted, and a multi-turn rollout with each episode's KV
cache kept between turns against re-prefilling it. `train_config` is the config every section that
trains builds."""

from __future__ import annotations

import time

import torch

from ragen_lib import attention, models, work
from ragen_lib.bench.common import WORK_SIZE, Row


def train_config(
    name: str,
    device: str,
    size: dict,
    env: str = "sokoban",
    steps: int = 2,
    algo: dict | None = None,
    one_update: bool = False,
    extra: dict | None = None,
):
    """`one_update`: the whole batch in one optimizer step (TRL's default), else the trainer's
    default mini-batch (the paper's 4 optimizer steps per batch of 128). `extra`: more settings by
    section ({"rollout": {...}, "train": {...}})."""
    from ragen_lib import config
    from ragen_lib.config import TrainConfig

    rows = size["groups"] * size["group_size"]
    extra = extra or {}
    return config.from_dict(
        {
            "model": {"name": name, "device": device},
            "env": {"name": env},
            "rollout": {
                "max_new_tokens": size["max_new_tokens"],
                "max_turns": 1 if env == "bandit" else size["max_turns"],
                **extra.get("rollout", {}),
            },
            "algo": {"name": "starpo-ppo", **(algo or {})},
            "train": {
                "steps": steps,
                "groups": size["groups"],
                "group_size": size["group_size"],
                "mini_batch_size": rows if one_update else min(TrainConfig.mini_batch_size, rows),
                "micro_batch_size": size["micro_batch_size"],
                "val_every": 0,
                "samples_every": 0,
                **extra.get("train", {}),
            },
        }
    )


def last_train_step(name: str, device: str, size: dict, env: str = "sokoban", **kw) -> dict:
    """Metrics of the second step: the first pays for kernel selection and allocator growth."""
    from ragen_lib import trainer

    return trainer.train(train_config(name, device, size, env, **kw), run=None, progress=False)[-1]


ROLLOUT_VARIANTS = {
    "turn batching, static cache": {"batching": "turn", "kv_cache": "static"},
    "continuous batching, static cache": {"batching": "continuous", "kv_cache": "static"},
    "continuous batching, static cache, flex attention": {
        "batching": "continuous",
        "kv_cache": "static",
        "decode_attention": "flex",
    },
}
"""The rollout settings the `train` section times beside the default (turn batching, dynamic
cache): which of them becomes the default is for a GPU run of this section to say."""


def measure_train_step(name: str, device: str, size: dict):
    """Yields the default setting's rows, then each of `ROLLOUT_VARIANTS`' as it finishes: at the
    paper's scale on an H200 the four took over 350 s, more than a GPU lease had left, and a
    section is otherwise saved only whole."""
    m = last_train_step(name, device, size)
    shape = (
        f"Sokoban, starpo-ppo, {size['groups']}×{size['group_size']}, ≤{size['max_turns']} turns × "
        f"{size['max_new_tokens']} tokens, {m.get('rollout/turns', float('nan')):.1f} turns done"
    )
    rows = [
        Row(f"train step: {k}", m[k], "s", note=shape)
        for k in ("time/rollout", "time/forward", "time/update")
    ]
    rows.append(Row("train step: time/step", m["time/step"], "s", "≤ 2 s (paper scale, H100)", note=shape))
    rows += [
        Row(f"train step: {k}", m[k], "tokens/s")
        for k in ("throughput/gen_tokens_per_s", "throughput/train_tokens_per_s")
    ]
    yield rows
    # The same step with each other rollout setting; vs naive = the default's time / this one's.
    for label, rollout in ROLLOUT_VARIANTS.items():
        v = last_train_step(name, device, size, extra={"rollout": rollout})
        note = ", ".join(f"rollout.{key}={value}" for key, value in rollout.items()) + f"; {shape}"
        rows = [
            Row(f"train step [{label}]: {k}", v[k], "s", vs_naive=m[k] / v[k], note=note)
            for k in ("time/rollout", "time/step")
        ]
        rows.append(
            Row(
                f"train step [{label}]: throughput/gen_tokens_per_s",
                v["throughput/gen_tokens_per_s"],
                "tokens/s",
                vs_naive=v["throughput/gen_tokens_per_s"] / m["throughput/gen_tokens_per_s"],
                note=note,
            )
        )
        yield rows


def work_step(name: str, device: str, size: dict | None = None) -> tuple[dict, dict]:
    """(counters, metrics) of one StarPO-PPO Sokoban step of `size` (default `WORK_SIZE`)."""
    from ragen_lib import trainer

    size = {**WORK_SIZE, **(size or {})}
    cfg = train_config(name, device, size, steps=1)
    with work.counting() as c:
        m = trainer.train(cfg, run=None, progress=False)[-1]
    return c.plain(), m


def work_rows(counters: dict, m: dict, size: dict | None = None) -> list[Row]:
    """The work section's rows: counters first (deterministic), then wall times (not)."""
    size = {**WORK_SIZE, **(size or {})}
    r, f, u = (counters.get(p, {}) for p in ("rollout", "forward", "update"))
    shape = (
        f"Sokoban, starpo-ppo, {size['groups']}×{size['group_size']}, ≤{size['max_turns']} turns × "
        f"{size['max_new_tokens']} tokens, {m.get('rollout/turns', float('nan')):.1f} turns done, 1 step"
    )
    per_call = r.get("decode_steps_per_call", [])
    total = sum(
        x.get(k, 0) for x, k in ((r, "prefill_tokens"), (r, "decode_row_steps"), (f, "tokens"), (u, "tokens"))
    )
    rows = [
        Row(
            "work: decode steps (sum over turns)",
            r.get("decode_steps", 0),
            "steps",
            note=f"per turn {per_call}",
        ),
        Row(
            "work: decode row-steps computed",
            r.get("decode_row_steps", 0),
            "row-steps",
            note=f"{r.get('gen_tokens', 0)} tokens kept; padding "
            f"{work.padding(r, 'decode_row_steps', 'gen_tokens'):.2f}",
        ),
        Row(
            "work: decode attention reads",
            r.get("decode_kv_read", 0),
            "row × columns",
            note=f"{r.get('decode_kv_real', 0)} needed by the tokens kept; padding "
            f"{work.padding(r, 'decode_kv_read', 'decode_kv_real'):.2f}",
        ),
        Row(
            "work: prefill tokens computed",
            r.get("prefill_tokens", 0),
            "tokens",
            note=f"{r.get('prefill_real', 0)} real in {r.get('prefill_calls', 0)} forwards; padding "
            f"{work.padding(r, 'prefill_tokens', 'prefill_real'):.2f}",
        ),
        Row(
            "work: no-grad forward tokens (old, ref, critic)",
            f.get("tokens", 0),
            "tokens",
            note=f"{f.get('real', 0)} real, {f.get('calls', 0)} forwards; padding {work.padding(f):.2f}",
        ),
        Row(
            "work: trained tokens (update fwd+bwd)",
            u.get("tokens", 0),
            "tokens",
            note=f"{u.get('real', 0)} real, {u.get('calls', 0)} forwards; padding {work.padding(u):.2f}",
        ),
        Row(
            "work: all token positions computed",
            total,
            "tokens",
            "≥ 3× lower than before (issue #17)",
            note=shape,
        ),
    ]
    rows += [
        Row(f"work: {k} (wall)", m[k], "s", note=shape)
        for k in ("time/rollout", "time/forward", "time/update", "time/step")
    ]
    return rows


def measure_work(name: str, device: str) -> list[Row]:
    counters, m = work_step(name, device)
    return work_rows(counters, m)


def measure_turns(name: str, device: str, quick: bool = False) -> list[Row]:
    """The work step's rollout (Sokoban, `WORK_SIZE`) played three times in this process, same
    seeds: re-prefilling the whole conversation every turn (`rollout.keep_kv=false`, the naive
    column), prefilling only the env's reply (`keep_kv`), and with continuous batching of episodes
    (`rollout.batching=continuous`). Counters are deterministic; the same tokens must come out of
    the first two (the note says whether they did); continuous batching draws other samples from
    the same distribution, so its rows give the tokens generated beside the steps. Then both
    batchings with static decode steps (`rollout.kv_cache=static`: CUDA graphs on a GPU)."""
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    size = {**WORK_SIZE, **({"max_new_tokens": 12} if quick else {})}
    model, tok = models.load(name, device=device)
    got = {}
    for keep, batching in ((False, "turn"), (True, "turn"), (True, "continuous")):
        turns = {"max_new_tokens": size["max_new_tokens"], "max_turns": size["max_turns"]}
        cfg = RolloutConfig(**turns, keep_kv=keep, batching=batching)
        t0 = time.perf_counter()
        with work.counting() as c:
            batch = collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        got[keep, batching] = (c.plain()["rollout"], time.perf_counter() - t0, batch.input_ids)
    (fresh, t_fresh, ids_fresh), (kept, t_kept, ids_kept) = got[False, "turn"], got[True, "turn"]
    cont, t_cont, _ = got[True, "continuous"]
    # Static decode steps (CUDA graphs on a GPU), both batchings, and continuous with FlexAttention
    # (rollout.decode_attention=flex: each row's own blocks), each timed after one untimed rollout
    # of the same shapes that allocates, compiles and captures.
    t_static, static = {}, {}
    for batching, kernel in (("turn", "sdpa"), ("continuous", "sdpa"), ("continuous", "flex")):
        cfg = RolloutConfig(**turns, batching=batching, kv_cache="static", decode_attention=kernel)
        # The untimed rollout captures, and is the one counted (counting reads masks: host syncs).
        with work.counting() as c:
            collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        key = batching if kernel == "sdpa" else kernel
        static[key] = c.plain()["rollout"]
        t0 = time.perf_counter()
        collect(model, tok, "sokoban", [11, 12], size["group_size"], cfg, sample_seed=7)
        t_static[key] = time.perf_counter() - t0
    same = "same tokens" if torch.equal(ids_fresh, ids_kept) else "DIFFERENT tokens (float rounding)"

    failed = attention.flex_failed()
    flex_failed = f"FlexAttention FAILED here ({failed}): SDPA ran; " if failed else ""

    def reads(r: dict) -> float:  # attention reads per column the kept tokens needed
        return r["decode_kv_read"] / max(r["decode_kv_real"], 1)

    shape = (
        f"Sokoban, 2×{size['group_size']}, ≤{size['max_turns']} turns × {size['max_new_tokens']} tokens; "
        f"{same}"
    )
    return [
        Row(
            "turns: prefill tokens, kept KV vs re-prefill",
            kept["prefill_tokens"],
            "tokens",
            vs_naive=fresh["prefill_tokens"] / max(kept["prefill_tokens"], 1),
            note=f"re-prefill {fresh['prefill_tokens']}; {shape}",
        ),
        Row(
            "turns: rollout wall, kept KV vs re-prefill",
            t_kept,
            "s",
            vs_naive=t_fresh / t_kept if t_kept else None,
            note=f"re-prefill {t_fresh:.1f} s; {shape}",
        ),
        Row(
            "turns: decode row-steps, continuous vs turn batching",
            cont["decode_row_steps"],
            "row-steps",
            vs_naive=kept["decode_row_steps"] / max(cont["decode_row_steps"], 1),
            note=(
                f"turn batching {kept['decode_row_steps']} row-steps in {kept['decode_steps']} steps and "
                f"{kept['prefill_calls']} prefills for {kept['gen_tokens']} tokens; continuous "
                f"{cont['decode_steps']} steps and {cont['prefill_calls']} prefills for "
                f"{cont['gen_tokens']} tokens (other samples, same distribution); {shape}"
            ),
        ),
        Row(
            "turns: decode attention reads per column needed, continuous vs turn batching",
            reads(cont),
            "×",
            vs_naive=reads(kept) / reads(cont),
            note=(
                f"row × cache columns read over `work.kv_needed`: turn batching {reads(kept):.2f}, "
                f"continuous {reads(cont):.2f}; static decode steps: turn {reads(static['turn']):.2f}, "
                f"continuous {reads(static['continuous']):.2f}; {shape}"
            ),
        ),
        Row(
            "turns: rollout wall, continuous vs turn batching",
            t_cont,
            "s",
            vs_naive=t_kept / t_cont if t_cont else None,
            note=f"turn batching (kept KV) {t_kept:.1f} s; {shape}",
        ),
        Row(
            "turns: rollout wall, continuous vs turn batching, static decode steps",
            t_static["continuous"],
            "s",
            vs_naive=t_static["turn"] / t_static["continuous"] if t_static["continuous"] else None,
            note=(
                f"turn batching {t_static['turn']:.1f} s; rollout.kv_cache=static (on a GPU a CUDA "
                f"graph per shape of decode step and, continuous, of admission), each after an "
                f"untimed rollout that captures; {shape}"
            ),
        ),
        Row(
            "turns: rollout wall, continuous static steps, flex vs sdpa decode attention",
            t_static["flex"],
            "s",
            vs_naive=t_static["continuous"] / t_static["flex"] if t_static["flex"] else None,
            note=(
                f"rollout.decode_attention=sdpa {t_static['continuous']:.1f} s; attention reads per column "
                f"needed {reads(static['continuous']):.2f} (sdpa) against {reads(static['flex']):.2f} "
                f"(flex, blocks of {attention.FLEX_BLOCK}); {flex_failed}same seeds, each after an "
                f"untimed rollout that compiles and captures; {shape}"
            ),
        ),
    ]
