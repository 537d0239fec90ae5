"""Command line.

python -m ragen_lib demo [--env sokoban] [--model NAME] ...     play and print one episode group
python -m ragen_lib run CONFIG.yaml [--set algo.name=apo ...]   train one config (resumable)
python -m ragen_lib bench [--device cpu|cuda] [--quick] ...     speed report, outputs/bench/<device>.md
python -m ragen_lib warmup [CONFIG.yaml] [--set train.warmup=expert ...]   format-valid rate before/after
python -m ragen_lib plot OUT_ROOT [--finding adhoc] [--metrics rollout/success ...] [--png FILE]   curves
python -m ragen_lib doctor [--device cpu|cuda] [--out outputs/gpu-check]   machine ready? (make gpu-check)
python -m ragen_lib bundle DEST [--part-mb 50] [--python 3.12 ...]   offline bundle (make offline-bundle)
python -m ragen_lib plan PROFILE [--root DIR] [--finding NAME ...]   runs, steps and disk of a profile
python -m ragen_lib repair RUN_DIR [...]                        make a run consistent (moves, never deletes)
python -m ragen_lib zeroshot [--envs sokoban ...] [--n 64] [--compare]   format-valid rate of first answers

Errors a user can act on (a locked, inconsistent or diverged run, a full disk, a bad config) are
printed as one message saying what to do, with exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
from pathlib import Path

#: The checkout's outputs/: bench and doctor write there wherever they are called from, as `plan`
#: reads the bench there (a bench run from notebooks/ wrote notebooks/outputs/bench, never read).
OUTPUTS = Path(__file__).resolve().parent.parent / "outputs"

SEED_MAX = 2**31 - 1
"""The largest seed (train.seed's bound): numpy's and torch's generators overflowed past it."""


def _demo(args) -> int:
    from ragen_lib import models
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    _check_envs("--env", [args.env])
    cfg = _rollout_config(RolloutConfig, temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    _check_model(args.model)
    model, tokenizer = models.load(args.model)
    batch = collect(
        model, tokenizer, args.env, seeds=[args.seed], group_size=args.samples, cfg=cfg, sample_seed=args.seed
    )
    for b in range(len(batch)):
        print(f"\n##### {args.env}, seed {args.seed}, sample {b}")
        print(batch.transcript(b))
    print(f"\nformat-valid rate {batch.format_valid_rate:.2f}, success {batch.success.float().mean():.2f}")
    return 0


def _run(args) -> int:
    from ragen_lib import models, revisions, runs, trainer, workers
    from ragen_lib.distributed import Ranks, local_device

    cfg = _load_config(args.config, args.set)
    path = runs.run_dir(Path(args.out), args.finding, cfg)
    if not runs.stands(path, cfg):  # before the run folder is made (or an outdated one is retired);
        models.check(cfg.model.name, cfg.model.device)  # a finished run needs no model
    # Data parallel: rank 0 alone opens the run folder and decides whether it trains, and tells the
    # others. Each rank deciding for itself (`runs.stands` against rank 0's `reuse_finished`) could
    # disagree, and the ones that trained then waited two hours for the ones that had left.
    ranks = Ranks(local_device(cfg.model.device or models.default_device()))  # 1 process: no group
    told = []

    def tell(word: str) -> None:
        told.append(word)  # before the broadcast: one that failed is not followed by another
        ranks.broadcast(word)

    try:
        if not ranks.main:
            word = ranks.broadcast(None)
            if word == TRAIN:
                trainer.train(cfg, None, progress=not args.quiet)
            elif word == STOPPED:
                print(f"rank {ranks.rank}: rank 0 stopped before training {path}; its error says why")
            return 0
        with runs.Run(path, cfg) as run:  # the run's lock, held until training ends
            if run.done and workers.reuse_finished(run):  # as a grid does
                tell(REUSED)
                print(f"finished run reused: {path} (a changed config trains as a new run in its own folder)")
                revisions.note_if_unreviewed(1)
                return 0
            step = run.resume()[0]  # checked before the model loads; train() takes the state from the run
            if step is None:
                print(f"starting {path}")
            else:
                revisions.note_if_unreviewed(1)  # it resumes on today's code
                todo = f"steps {step + cfg.train.online_k}-{cfg.train.steps - 1} to train"  # a rollout's k
                print(f"resuming {path} from its checkpoint at step {step}: {todo}")
            tell(TRAIN)
            trainer.train(cfg, run, progress=not args.quiet)
    finally:
        try:
            if ranks.main and not told:  # rank 0 failed before deciding (a locked or broken run)
                tell(STOPPED)  # the others leave rather than wait for it
        finally:
            ranks.close()
    print(f"run finished: {path}")
    return 0


# Rank 0's word to the other ranks of a data-parallel `run` (`_run`).
TRAIN, REUSED, STOPPED = "train", "reused", "stopped"


def _bench(args) -> int:
    import torch

    from ragen_lib import bench

    only = tuple(x.strip() for x in (args.only or "").split(",") if x.strip()) or None
    if args.only is not None and not only:  # `--only ""` (an unset shell variable) is not "all"
        raise ConfigError(f"--only names no section: give one or more of {','.join(bench.SECTIONS)}")
    for name in only or ():  # a typo stops here, before the model loads, not after
        _check_name("--only", name, bench.SECTIONS)
    if args.before is not None and not Path(args.before).is_file():
        raise ConfigError(
            f"--before {args.before}: no such file (an earlier report's .json, e.g. outputs/bench/cpu.json)"
        )
    if args.before is not None:
        try:
            bench.report.read(args.before)
        except ValueError as e:  # torn or foreign: a JSONDecodeError or KeyError traceback in bench.run
            raise ConfigError(
                f"--before {args.before}: not a bench report ({e}); give an earlier bench .json"
            ) from e
    if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {args.device}: torch {torch.__version__} sees no CUDA device here; use --device cpu"
        )
    _check_model(args.model)  # before the report, which a bench of a missing model would overwrite
    out = args.out
    if out is None:
        # A part of the bench (`--only trl`, `--quick`) replaced the committed full report with its
        # few rows, and `plan` lost the train step it reads: a part goes beside the full report.
        part = ["+".join(only)] if only and set(only) != set(bench.SECTIONS) else []
        out = str(Path(OUTPUTS / "bench", "-".join(part + ["quick"] * args.quick)))
    if Path(out).exists() and not Path(out).is_dir():  # before the minutes of measuring, not after
        raise ConfigError(f"--out {out} is a file: name a folder (the report is <out>/<device>.md and .json)")
    try:
        bench.run(args.model, args.device, out, quick=args.quick, only=only, before=args.before)
    except bench.SectionsFailed as e:  # the tracebacks are printed; the report (if any row) holds the rest
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _doctor(args) -> int:
    from ragen_lib import doctor

    _check_model(args.model)  # a misspelt --model: one line now, not a report of failed checks later
    return doctor.run(args.device, args.out, args.model)


def _bundle(args) -> int:
    from ragen_lib import bundle

    try:
        bundle.build(
            args.dest,
            part_mb=args.part_mb,
            pythons=args.python,
            skip=args.skip,
            extras=args.extras,
        )
    except ValueError as e:  # a bad --part-mb or --extras: the message names the fix
        raise ConfigError(str(e)) from None
    return 0


def _warmup(args) -> int:
    """Only the format warm-up of a config: how far it moves the format-valid rate, and in how long."""
    import time

    from ragen_lib import models
    from ragen_lib.warmup import warmup

    cfg = _load_config(args.config, args.set)
    if cfg.train.warmup == "none":
        raise ConfigError(
            "train.warmup is none, so there is no warm-up to run: pass --set train.warmup=format (or "
            "expert; self learns only from the model's own valid answers, which a small model may not give)"
        )
    models.check(cfg.model.name, cfg.model.device)  # a missing file or CUDA: one line, as `run` says it
    t0 = time.perf_counter()
    policy, tok = models.load(cfg.model.name, device=cfg.model.device, dtype=cfg.model.dtype)
    device = str(next(policy.parameters()).device)
    result = warmup(policy, tok, cfg, device, progress=True)
    print(
        json.dumps(
            {
                "env": cfg.env.name,
                "warmup": cfg.train.warmup,
                "steps": cfg.train.warmup_steps,
                **result,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )
    return 0


def _zeroshot(args) -> int:
    """First answers of a model on each env's validation states, one per state: the format-valid
    rate (binomial standard error), success, and how many answers ran into the token cap. With
    --compare, the same states and sampling seed again without the `<think>` prefill."""
    import math
    import time

    from ragen_lib import models, seeds
    from ragen_lib.config import RolloutConfig
    from ragen_lib.envs import env_class
    from ragen_lib.metrics import reasoning_stats
    from ragen_lib.rollout import collect

    _check_envs("--envs", args.envs)
    caps = {e: env_class(e).limits(max_new_tokens=args.max_new_tokens).max_new_tokens for e in args.envs}
    for cap in caps.values():  # each env's token cap against the context, before the model loads
        _rollout_config(RolloutConfig, max_turns=1, temperature=args.temperature, max_new_tokens=cap)
    _check_model(args.model)
    model, tok = models.load(args.model)
    for env in args.envs:
        states = seeds.val_seeds(env, args.n)
        cap = caps[env]
        for prefill in (True, False) if args.compare else (True,):
            cfg = RolloutConfig(
                max_turns=1,
                temperature=args.temperature,
                max_new_tokens=cap,
                enable_think=not args.no_think,
                prefill=prefill,
            )
            t0 = time.perf_counter()
            valid, success, tokens, thinks = [], [], [], []
            for i in range(0, len(states), args.batch):
                b = collect(model, tok, env, states[i : i + args.batch], 1, cfg, sample_seed=args.seed + i)
                valid += [ep[0] for ep in b.turn_format_valid]
                success += b.success.tolist()
                tokens += b.loss_mask.sum(1).int().tolist()  # one turn: the tokens generated
                thinks += [ep[0] for ep in b.reasoning() if ep]  # first turns whose tags matched
            n, p = len(valid), sum(valid) / len(valid)
            row = {
                "env": env,
                "prefill": prefill,
                "n": n,
                "format_valid": round(p, 4),
                "format_valid_se": round(math.sqrt(p * (1 - p) / n), 4),
                "success": round(sum(success) / n, 4),
                "hit_token_cap": sum(t >= cap for t in tokens),
                "mean_tokens": round(sum(tokens) / n, 1),
                # As `reasoning/length` and `reasoning/distinct2`: over the answers whose tags
                # matched (an answer that never closes <think> has no reasoning to measure).
                **{k: round(v, 4) for k, v in reasoning_stats(tok, thinks).items()},
                "max_new_tokens": cap,
                "temperature": args.temperature,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(json.dumps(row), flush=True)
    return 0


def _plot(args) -> int:
    """Curves of every run under OUT_ROOT/runs/<finding>/ (format-valid rate always included), and a
    per-run summary: first and last step, and the mean of the first and last thirds."""
    from ragen_lib import analysis, plots, runs

    if args.png:  # before loading and drawing: matplotlib refuses an unknown suffix only at the end
        from matplotlib.backend_bases import FigureCanvasBase

        kinds = FigureCanvasBase.get_supported_filetypes()
        suffix = Path(args.png).suffix.lstrip(".").lower()
        if suffix and suffix not in kinds:  # none: matplotlib writes a .png
            raise ConfigError(
                f"--png {args.png}: its suffix names the format; use one of .{', .'.join(sorted(kinds))}"
            )
    df = runs.load(args.root, args.finding)
    if df.empty:
        store = Path(args.root) / "runs"
        here = sorted(p.parent.parent.name for p in store.glob("*/*/config.yaml")) if store.is_dir() else []
        hint = (
            f"findings with runs there: {', '.join(dict.fromkeys(here))} (--finding NAME)"
            if here
            else f"{store} holds no run: give the --out folder of `run` (runs live in <out>/runs/<finding>/)"
        )
        raise ConfigError(f"no runs with metrics under {store / args.finding}; {hint}")
    from ragen_lib import metrics

    hue = args.hue
    _check_name("--hue", hue, df.columns)
    for m in args.metrics:  # a metric these runs did not log is drawn empty; a typo is an error
        _check_name("--metrics", m, [*df.columns, *metrics.METRICS])
    df[hue] = df[hue].astype(str)  # categories, not a light-to-dark scale of numbers
    fig = plots.curves(df, args.metrics, hue=hue, title=args.title or f"{args.root}: {args.finding}")
    png = Path(args.png or Path(args.root) / f"{args.finding}.png")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110, bbox_inches="tight")
    for run_id, part in df.groupby("run_id"):
        run = runs.Run(Path(args.root) / "runs" / args.finding / run_id)
        info = run.done_info() or {}
        state = ""  # load reported the run unfinished where part["done"] is false: say why
        if not part["done"].all():
            state = " (unfinished)"
            if run.done:
                why = run.outdated()
                state = f" (not reused: {why})" if why else " (DONE is inconsistent)"
        print(
            f"{run_id}: trained at commit {info.get('commit', 'not recorded')} on "
            f"{info.get('device', 'a device not recorded')}" + state
        )
        if args.hue != "run_id" and args.hue in part:
            run_id = f"{run_id} ({args.hue}={part[args.hue].iloc[0]})"
        for m in plots.with_format_rates(args.metrics, part):
            v = part[["step", m]].dropna() if m in part else None
            if v is None or v.empty:
                continue
            # thirds of the points it logged (validation is every val_every steps), as the late
            # score counts them
            print(
                f"{run_id} {m}: step {int(v.step.iloc[0])} {v[m].iloc[0]:.3f} → step {int(v.step.iloc[-1])} "
                f"{v[m].iloc[-1]:.3f}; mean of first/last third {analysis.early_head(v[m]).mean():.3f} / "
                f"{analysis.late_tail(v[m]).mean():.3f}"
            )
    print(f"figure: {png}")
    return 0


def _report(args) -> int:
    """REPORT.md of a profile (`make report`, the last step of `make replicate-all`)."""
    from ragen_lib import analysis

    try:  # an unknown profile, or one that never ran here: the message says what to do
        print(analysis.report(args.profile))
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    return 0


def _plan(args) -> int:
    """What a profile trains and the disk it needs; refuses (status 3) when the output disk cannot
    hold it. `make replicate-all` runs it first."""
    from ragen_lib import experiments

    try:  # an unknown profile or finding, a grid file's typo: the message says what to fix
        parameters = experiments.notebook_parameters(args.seeds, args.overrides)
        if parameters and len(args.finding) != 1:
            raise ValueError(
                "--seeds and --overrides are one notebook's parameters: give one --finding "
                "(make replicate NB=03 SEEDS=... OVERRIDES=...)"
            )
        if args.results_folder:  # for `make replicate`: where the executed copy goes, checked first
            if parameters:  # a key the grid varies, train.seed, a typo: refused before a kernel starts
                experiments.variants(args.finding[0], args.profile, **parameters)
            print(experiments.results_root(args.profile, parameters))
            return 0
        p = experiments.plan(
            args.profile, root=args.root, names=args.finding or None, device=args.device, **parameters
        )
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    print(experiments.format_plan(p))
    from ragen_lib.files import unwritable

    blocked = unwritable(p["root"])
    if blocked:  # papermill would fail on it later, in a traceback per notebook (--no-check or not)
        raise ConfigError(
            f"the outputs folder {p['root']} cannot be made here: {blocked}. Point "
            f"{'--root' if args.root else 'RAGEN_OUTPUTS'} at a folder this user can write"
        )
    if p["need_bytes"] > p["free_bytes"] and not args.no_check:
        print(
            f"error: the plan needs {p['need_bytes'] / 1e9:.1f} GB on the disk of {p['root']}, which has "
            f"{p['free_bytes'] / 1e9:.1f} GB free. Free space there, point "
            f"{'--root' if args.root else 'RAGEN_OUTPUTS'} at a larger disk"
            + (", or run a smaller profile (PROFILE=smoke)" if args.profile != "smoke" else "")
            + "; --no-check skips this check.",
            file=sys.stderr,
        )
        return 3
    return 0


def _backlog(args) -> int:
    """The runs a profile has left, in training order with their estimates; with --train SECONDS,
    trains those expected to finish within SECONDS (a GPU lease: `ragen_lib.backlog`)."""
    from ragen_lib import backlog

    if args.no_checkpoints and args.train is None:
        raise ConfigError("--no-checkpoints is for --train SECONDS (listing the backlog writes nothing)")
    try:  # an unknown profile, a grid file's typo (raised before any run trains): the fix is named
        if args.train is not None:
            done = backlog.train(
                args.profile, args.train, root=args.root, checkpoints=not args.no_checkpoints
            )
            print(f"[backlog] trained {len(done['trained'])} run(s): {', '.join(done['trained']) or 'none'}")
            if done["failed"]:
                print(f"[backlog] failed (passed over): {', '.join(done['failed'])}")
            if done["beyond"]:
                print(
                    f"[backlog] {len(done['beyond'])} run(s) are estimated longer than the whole "
                    f"{args.train:g} s, so no budget of it starts them (a run cut off is lost with the "
                    f"host): {', '.join(done['beyond'])}. They need a longer budget (a lease whose "
                    "calls run the backlog detached, `setsid`, across calls) or a profile of shorter runs"
                )
        items, studies = backlog.backlog(args.profile, root=args.root)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    print(backlog.format_backlog(items, studies, args.profile))
    return 1 if args.train is not None and done["failed"] else 0


def _repair(args) -> int:
    """Make run folders consistent again; files in the way go to <run>/quarantine/<time>/."""
    from ragen_lib import runs

    try:  # every folder opened (Run checks it is one; nothing locked yet) before any is repaired
        opened = [(path, runs.Run(path)) for path in args.runs]
    except FileNotFoundError as e:
        raise ConfigError(f"{e}: pass <out>/runs/<finding>/<run_id>") from None
    for path, run in opened:
        with run:
            actions = run.repair()
        print(f"{path}: " + ("; ".join(actions) if actions else "nothing to repair"))
        if not actions:
            ckpt = run.checkpoint_file()
            print(
                "  finished"
                if run.done
                else f"  resumes from {ckpt.name}"
                if ckpt
                else "  starts from step 0"
            )
    return 0


def _device(text: str) -> str:
    """An argparse type: cpu, cuda or cuda:N (torch's own error names every device type it knows)."""
    if text in ("cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda or cuda:N")


def _folder_name(text: str) -> str:
    """An argparse type: one folder name (`--finding`), so a run lands under <out>/runs/ and
    `plot` finds it there ("" put it in runs/ itself, "../x" outside the run store)."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", text) and ".." not in text:
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not one folder name (letters, digits, '_', '-', '.'; e.g. adhoc or 01_instability)"
    )


def _at_least(low, high=None):
    """An argparse type: a finite number of low's type, at least `low` and at most `high` where
    given (checked before any model loads)."""
    kind = type(low)

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value >= low:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        if value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text}")
        return value

    return parse


def _rollout_config(cls, **fields):
    """The command's RolloutConfig, its checks (the token cap against the context, say) failing in
    one line before the model loads, not in a traceback after."""
    try:
        return cls(**fields)
    except ValueError as e:
        raise ConfigError(f"{e} (from --temperature / --max-new-tokens)") from None


def _override(text: str) -> str:
    """One --set item. `--set` takes every word after it, so a config given after it lands here:
    argparse would then say only that the config is missing."""
    if "=" not in text:
        where = (
            ": put the config before --set (it takes every word after it)"
            if text.lower().endswith((".yaml", ".yml"))
            else ", e.g. algo.clip_high=0.28"
        )
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE{where}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_lib")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="play one multi-turn episode group with a model and print it")
    demo.add_argument("--env", default="sokoban")
    demo.add_argument("--model", default=None, help="default: RAGEN_MODEL or the embedded SmolLM2")
    demo.add_argument("--seed", type=_at_least(0, SEED_MAX), default=0)
    demo.add_argument("--samples", type=_at_least(1), default=2, help="episodes from the same initial state")
    demo.add_argument("--temperature", type=_at_least(0.0), default=1.0)
    demo.add_argument("--max-new-tokens", type=_at_least(1), default=120)
    run = sub.add_parser("run", help="train one config; a finished run is reused, an unfinished one resumed")
    run.add_argument("config", help="YAML with sections model / env / rollout / algo / train")
    run.add_argument(
        "--set",
        nargs="*",
        type=_override,
        default=[],
        metavar="KEY=VALUE",
        help="dotted overrides, e.g. --set algo.name=apo train.steps=20",
    )
    run.add_argument("--out", default="outputs/cli", help="run store root (default outputs/cli)")
    run.add_argument("--finding", type=_folder_name, default="adhoc", help="sub-folder of <out>/runs/")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    bench = sub.add_parser("bench", help="time load, generation, prefill, a train step and the update")
    bench.add_argument("--model", default=None, help="default: RAGEN_MODEL or the embedded SmolLM2")
    bench.add_argument(
        "--device", type=_device, default=None, help="cpu or cuda (default: cuda when available)"
    )
    bench.add_argument(
        "--out",
        default=None,
        help="writes <out>/<device>.md and .json (default the checkout's outputs/bench; with --only or "
        "--quick outputs/bench/<sections joined by +>[-quick], beside the full report, not over it)",
    )
    bench.add_argument("--quick", action="store_true", help="tiny sizes: checks that every measurement runs")
    bench.add_argument(
        "--only",
        default=None,
        help="comma-separated sections (load,generation,prefill,update,train,work,turns,trl,pool,memory)",
    )
    bench.add_argument(
        "--before", default=None, help="an earlier report's .json: its figures go beside these"
    )
    warm = sub.add_parser(
        "warmup", help="run only a config's format warm-up; print the format-valid rate before and after"
    )
    warm.add_argument("config", nargs="?", default=None, help="YAML config (default: all defaults)")
    warm.add_argument(
        "--set", nargs="*", type=_override, default=[], metavar="KEY=VALUE", help="dotted overrides"
    )
    plot = sub.add_parser("plot", help="curves and a first/last summary of the runs in a run store")
    plot.add_argument("root", help="the --out of `run` (holds runs/<finding>/)")
    plot.add_argument("--finding", type=_folder_name, default="adhoc", help="sub-folder of <root>/runs/")
    plot.add_argument(
        "--metrics", nargs="*", default=["rollout/success", "val/success", "reward/mean", "policy/entropy"]
    )
    plot.add_argument("--png", default=None, help="default: <root>/<finding>.png")
    plot.add_argument("--title", default="")
    plot.add_argument(
        "--hue", default="run_id", help="column that tells runs apart, e.g. cfg.train.warmup_lr"
    )
    doc = sub.add_parser(
        "doctor", help="environment, model, precision, static decoding, 3 steps per algorithm"
    )
    doc.add_argument(
        "--device", type=_device, default=None, help="cpu or cuda (default: cuda when available)"
    )
    doc.add_argument(
        "--out",
        default=str(OUTPUTS / "gpu-check"),
        help="writes <out>/<device>.md and .json (default: the checkout's outputs/gpu-check)",
    )
    doc.add_argument("--model", default=None, help="default: RAGEN_MODEL or the embedded SmolLM2")
    bun = sub.add_parser(
        "bundle", help="wheels + the embedded model in parts + install.sh, for hosts offline"
    )
    bun.add_argument("dest", help="the bundle folder (replaced)")
    bun.add_argument("--part-mb", type=float, default=50.0, help="largest upload group, MiB (default 50)")
    bun.add_argument("--python", nargs="*", default=None, help="target Pythons (default 3.10 3.11 3.12)")
    bun.add_argument("--skip", nargs="*", default=(), help="packages to leave out (the host has them)")
    bun.add_argument(
        "--extras",
        nargs="*",
        default=None,
        help="the project's extras to bundle (default: all three, notebooks test bench; "
        "'notebooks bench' leaves out the test tools)",
    )
    plan = sub.add_parser(
        "plan", help="runs, steps and disk a profile needs; refuses when the disk is too small"
    )
    plan.add_argument("profile", help="smoke | quick | paper")
    plan.add_argument("--root", default=None, help="run store (default: outputs/<profile> or $RAGEN_OUTPUTS)")
    plan.add_argument(
        "--finding",
        action="append",
        default=[],
        help="only this finding, by name or number (01_instability or 01; repeat for more; default: "
        "all); one word per flag, so `plan --finding 01 smoke` keeps smoke as the profile",
    )
    plan.add_argument(
        "--device",
        type=_device,
        default=None,
        help="cuda or cpu: whose measured step time (outputs/bench) the minutes use "
        "(default: cuda, unless the runs' model.device is cpu)",
    )
    plan.add_argument(
        "--no-check", action="store_true", help="print the plan, do not compare with free space"
    )
    plan.add_argument(
        "--seeds", default=None, help="one notebook's seeds, as papermill's -p seeds takes them: '[0, 1, 2]'"
    )
    plan.add_argument(
        "--overrides",
        default=None,
        help="one notebook's dotted overrides, as papermill's -p overrides: '{\"train.actor_lr\": 2e-6}'",
    )
    plan.add_argument(
        "--results-folder",
        action="store_true",
        help="print only the folder the notebook's verdict, figures and executed copy go to "
        "(outputs/<profile>, or its variants/<name> with --seeds or --overrides)",
    )
    blog = sub.add_parser(
        "backlog",
        help="a profile's runs not stored yet, judged studies first, with estimates; --train SECONDS "
        "trains what fits (a GPU lease)",
    )
    blog.add_argument("profile", help="smoke | quick | paper")
    blog.add_argument("--root", default=None, help="run store (default: outputs/<profile> or $RAGEN_OUTPUTS)")
    blog.add_argument(
        "--train",
        type=_at_least(1.0),
        default=None,
        metavar="SECONDS",
        help="train the backlog's runs in order, one at a time, each only where it is expected to "
        "finish within SECONDS of the start (a run the end of a lease cuts off is lost with the host); "
        "where nothing was measured yet, the smallest run first, if SECONDS covers at least a run's setup",
    )
    blog.add_argument(
        "--no-checkpoints",
        action="store_true",
        help="with --train: write no checkpoints (a GPU lease: none comes back from the host, and in "
        "quick each is 3.8 GB of writing that no estimate counts); a crash then restarts a run from step 0",
    )
    rep = sub.add_parser("report", help="outputs/<profile>/REPORT.md from the verdicts and runs there")
    rep.add_argument("profile", help="smoke | quick | paper")
    repair = sub.add_parser(
        "repair", help="make run folders consistent again (moves files aside, never deletes)"
    )
    repair.add_argument("runs", nargs="+", help="run folders (<root>/runs/<finding>/<run>)")
    zs = sub.add_parser("zeroshot", help="format-valid rate of a model's first answers, per env")
    zs.add_argument("--envs", nargs="+", default=["bandit", "sokoban", "frozenlake"])
    zs.add_argument("--model", default=None, help="default: RAGEN_MODEL or the embedded SmolLM2")
    zs.add_argument("--n", type=_at_least(1), default=64, help="validation states, one answer each")
    zs.add_argument("--temperature", type=_at_least(0.0), default=1.0)
    zs.add_argument(
        "--max-new-tokens",
        type=_at_least(1),
        default=None,
        help="default: the env's (RAGEN: 400, Bandit 500)",
    )
    zs.add_argument("--batch", type=_at_least(1), default=64, help="states generated for at once")
    zs.add_argument("--seed", type=_at_least(0, SEED_MAX), default=0, help="sampling seed")
    zs.add_argument("--no-think", action="store_true", help="no-think mode: <answer> only")
    zs.add_argument("--compare", action="store_true", help="also without the prefill, same states and seed")
    args = parser.parse_args(argv)
    commands = {
        "demo": _demo, "run": _run, "bench": _bench, "warmup": _warmup, "plot": _plot, "plan": _plan,
        "backlog": _backlog, "report": _report, "repair": _repair, "doctor": _doctor, "bundle": _bundle,
        "zeroshot": _zeroshot,
    }  # fmt: skip
    try:
        return commands[args.command](args)
    except KeyboardInterrupt:  # Ctrl-C: the person knows why; 70 lines of stack say nothing more
        again = {
            "run": "the same command resumes the run from its last checkpoint",
            "bench": "the report holds the sections measured before it",
            "backlog": "the runs it finished are stored; the one in progress resumes on this host",
        }.get(args.command, "")
        print(f"\ninterrupted{': ' + again if again else ''}", file=sys.stderr)
        return 130
    except _user_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # --out, RAGEN_OUTPUTS or RAGEN_CACHE naming a file where a folder goes, or a folder that
        # cannot be written (no permission, a read-only mount: a store copied from a GPU host and
        # mounted to read): the path is the fix, not the traceback.
        unwritable = (NotADirectoryError, FileExistsError, IsADirectoryError, PermissionError)
        root = _given_root(e, args) if isinstance(e, unwritable) or e.errno == errno.EROFS else None
        if root is None:
            raise  # another error, or not under a folder the user named: a bug's traceback, kept
        hint = "; pass --png PATH where you can write" if root.startswith(("--png", "the run store")) else ""
        print(
            f"error: {e}: {root} must be a folder this user can write (a file is there, no "
            f"permission, or a read-only filesystem){hint}",
            file=sys.stderr,
        )
        return 2


def _given_root(e: OSError, args) -> str | None:
    """Which folder the user gave (--out, `plot`'s run store or --png, RAGEN_OUTPUTS, RAGEN_CACHE)
    the failed path lies in."""
    out, root, png = (getattr(args, k, None) for k in ("out", "root", "png"))
    failed = Path(os.fsdecode(e.filename)).absolute() if e.filename else None
    if png and failed and Path(png).absolute().is_relative_to(failed):  # the file, or a folder above it
        return f"--png {png}'s folder"
    given = [(f"--out {out}", out), (f"the run store {root}", root)]
    given += [(f"{v}={os.environ.get(v)}", os.environ.get(v)) for v in ("RAGEN_OUTPUTS", "RAGEN_CACHE")]
    for name, root in given:
        if root and failed and failed.is_relative_to(Path(root).absolute()):
            return name
    return None


class ConfigError(ValueError):
    """A config that does not load (its message names the file, the key and the fix)."""


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message says what to do: printed alone, without a traceback."""
    from ragen_lib import files, models, rollout, runs, trainer

    return (
        ConfigError,
        rollout.ContextTooSmall,
        models.ModelNotFound,
        runs.RunLockedError,
        runs.CorruptRunError,
        files.DiskFullError,
        trainer.TrainingDiverged,
    )


def _check_name(flag: str, name: str, known) -> None:
    """`name` must be one of `known`; otherwise one line naming the closest and where to look."""
    import difflib

    known = list(dict.fromkeys(str(k) for k in known))  # columns and metric names overlap
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=3)
    names = sorted(known)
    listed = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
    hint = f"did you mean {' or '.join(close)}?" if close else f"choose from: {listed}"
    raise ConfigError(f"{flag}: unknown name {name!r}; {hint}")


def _check_envs(flag: str, names: list[str]) -> None:
    """Unknown env names stop a command before its model loads, in one line with the valid ones."""
    from ragen_lib import config

    for name in names:
        try:
            config.EnvConfig(name=name)
        except ValueError as e:
            raise ConfigError(f"{flag}: {str(e).removeprefix('env.name: ')}") from None


def _check_model(name: str | None) -> None:
    """A --model (or RAGEN_MODEL) that misspells a built-in name or names a missing file stops a
    command in one line, before any model loads or report is written. A hub id passes."""
    from ragen_lib import config, models

    given, name = name is not None, name or models.default_model()
    key = "--model" if given else "model.name"  # RAGEN_MODEL's messages name the variable to fix
    try:
        config.check_model_name(name, key)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    try:
        models.check(name, key=key)
    except models.ModelNotFound as e:
        if not given:
            raise
        raise ConfigError(f"--model: {e}") from None


def _load_config(path, overrides):
    from ragen_lib import config

    try:
        return config.load(path, overrides) if path else config.from_dict({}, overrides)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None


def _one_line_warnings() -> None:
    """The run store's warnings (a PID taken over, a torn line left out, steps redone) are meant for
    the person at the terminal: printed as `warning: ...`, not with a file, a line number and the
    source line of the library's `warnings.warn` call. Other warnings keep Python's format."""
    import warnings

    from ragen_lib.runs import RunStoreWarning

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunStoreWarning):
            try:
                print(f"warning: {message}", file=file or sys.stderr)
            except OSError:  # a closed or broken stderr: a warning must not end the run (as Python's)
                pass
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


if __name__ == "__main__":
    _one_line_warnings()  # here, not in main(): tests call main() under pytest's own warning capture
    sys.exit(main())
