"""Command line: `python -m ragen_lib demo [--env sokoban] [--model NAME] ...`."""

from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from ragen_lib import models
    from ragen_lib.config import RolloutConfig
    from ragen_lib.rollout import collect

    model, tokenizer = models.load(args.model)
    cfg = RolloutConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    batch = collect(model, tokenizer, args.env, seeds=[args.seed], group_size=args.samples, cfg=cfg,
                    sample_seed=args.seed)
    for b in range(len(batch)):
        print(f"\n##### {args.env}, seed {args.seed}, sample {b}")
        print(batch.transcript(b))
    print(f"\nformat-valid rate {batch.format_valid_rate:.2f}, success {batch.success.float().mean():.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_lib")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="play one multi-turn episode group with a model and print it")
    demo.add_argument("--env", default="sokoban")
    demo.add_argument("--model", default=None, help="default: RAGEN_MODEL or the embedded SmolLM2")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--samples", type=int, default=2, help="episodes from the same initial state")
    demo.add_argument("--temperature", type=float, default=1.0)
    demo.add_argument("--max-new-tokens", type=int, default=120)
    args = parser.parse_args(argv)
    return {"demo": _demo}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
