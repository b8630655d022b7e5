"""`python -m longctx export RUN [--out DIR] [--merge-lora] [--push-to-hub ORG/NAME]`: a run as a plain model folder.

RUN is a run's output_dir (its latest complete checkpoint) or one checkpoint-N folder: ZeRO-3 partitions, or the
universal checkpoint when it was converted. The folder written loads with `AutoModelForCausalLM.from_pretrained`
(a LoRA run: with `--merge-lora`, else it is PEFT's adapter; its base is rebuilt from `--recipe RECIPE` and the
run's overrides after `--`, or loaded from the adapter's base model). `--push-to-hub` uploads it with the token of
HF_TOKEN (or `-- --hub_token X`, moved there first), which is never printed. The work is longctx/export/.
"""

import argparse
import os
import sys
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m longctx export",
        description=__doc__.split("\n\n")[1],
        epilog="example:\n  python -m longctx export outputs/tiny-llama/sft-2k-cpu-sp2 --out outputs/tiny-exported",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a run's output_dir, or one of its checkpoint-N folders")
    p.add_argument("--out", help="where the folder goes (default: RUN/export, or RUN/export-merged)")
    p.add_argument("--merge-lora", action="store_true", help="fold a LoRA adapter into its base: a plain model")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="weights' dtype (auto: the run's config)")  # fmt: skip
    p.add_argument("--recipe", help="a LoRA run's recipe (overrides after `--`): rebuilds its base as the run did")
    p.add_argument("--push-to-hub", metavar="ORG/NAME", help="then upload the folder to this Hub repository")
    p.add_argument("--private", action="store_true", help="create the Hub repository private")
    return p


def main(argv: list[str]) -> int:
    from longctx.config.keys import split_argv
    from longctx.export.build import export, recipe_base_builder, summary
    from longctx.export.weights import ExportError

    own, overrides = split_argv(argv)
    args = make_parser().parse_args(own)
    if overrides and not args.recipe:
        print(f"error: recipe overrides ({overrides[0]} ...) go with --recipe RECIPE", file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.run, "export-merged" if args.merge_lora else "export")
    try:
        base = recipe_base_builder(args.recipe, overrides) if args.recipe else None
        result = export(args.run, Path(out), args.merge_lora, args.dtype, base)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary(result)), flush=True)
    if args.push_to_hub:
        from longctx.export.hub import push

        try:
            print(f"[export] pushed to {push(out, args.push_to_hub, args.private)}")
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0
