"""`python -m longctx SUBCOMMAND RECIPE [tool flags] [-- recipe overrides]`: the one command line of the repository.

    python -m longctx sft llama8b-256k -- --max_steps 20      preflight, data, then the launch (make sft)
    python -m longctx dpo tiny-dpo-2k                          the same for a preference recipe (make dpo)
    python -m longctx grpo tiny-grpo                           the same for an online RL recipe (make grpo)
    python -m longctx data tiny-2k --force                     tokenize, pack and pad the recipe's data (make data)
    python -m longctx validate llama8b-256k --num-gpus 8       every problem of a launch, before any GPU work
    python -m longctx plan llama8b-256k --gpu-memory-gb 80     the mesh, tokens per rank and memory per rank
    python -m longctx probe tiny-2k --sp 2                     prove packed documents stay isolated
    python -m longctx rehearse llama8b-256k                    the recipe in miniature on CPU, end to end
    python -m longctx eval tiny-2k --checkpoint DIR            long-context retrieval eval on the recipe's mesh
    python -m longctx export outputs/tiny-llama/sft-2k-cpu-sp2
                                                               a trained run as a plain Hugging Face folder
    python -m longctx ls                                       every recipe: model, length, mesh, GPUs, memory
    python -m longctx cp tiny-2k ../team-repo                  a recipe and the files it needs, into a repository

One convention for every subcommand: the recipe comes first (a short name from recipes/README.md, a name
under recipes/ or a path; `--config FILE`, as TRL's CLI spells it, is the same), then the subcommand's own
flags (`python -m longctx SUBCOMMAND --help`), then `--` and recipe overrides (`--key value`, any key of the
recipe). Each `make` target is this command (`make plan RECIPE=.. FLAGS=.. ARGS=..` runs
`python -m longctx plan RECIPE FLAGS -- ARGS`). It works from any folder: a recipe's paths are relative to the
repository that holds it (longctx/commands/workdir.py).

A `--hub_token` among the overrides moves into the environment (HF_TOKEN) before any tool sees them, so no
tool can print it or write it into a results file or a derived recipe (longctx/training/credentials.py).
"""

import difflib
import importlib
import os
import sys

# subcommand -> (module whose main(argv) runs it, what it does)
SUBCOMMANDS = {
    "sft": ("longctx.commands.sft", "preflight, the recipe's data, then its accelerate launch"),
    "dpo": ("longctx.commands.dpo", "the same for a preference (`trainer: dpo`) recipe: DPO, IPO, SimPO under SP"),
    "grpo": ("longctx.commands.grpo", "the same for an online RL (`trainer: grpo`) recipe: GRPO under SP"),
    "data": ("longctx.commands.data", "tokenize, pack and pad the recipe's dataset, or your files (--input)"),
    "validate": ("longctx.commands.validate", "preflight: every problem of a launch, before any GPU work"),
    "plan": ("longctx.commands.validate", "the mesh, tokens per rank and the memory plan per rank"),
    "probe": ("longctx.commands.probe", "prove packed documents stay isolated (exit 1 on a leak)"),
    "rehearse": ("longctx.commands.rehearse", "the recipe in miniature on CPU, end to end (no GPU)"),
    "eval": ("longctx.commands.eval", "preflight, then the long-context retrieval eval on the recipe's mesh"),
    "fetch": (
        "longctx.commands.fetch",
        "download the recipe's model, tokenizer and dataset for an offline node",
    ),
    "export": ("longctx.commands.export", "a trained run as a plain Hugging Face folder (LoRA merged on request)"),
    "ls": ("longctx.commands.ls", "every recipe: model, length, mesh, GPUs, memory plan, measured status"),
    "cp": ("longctx.commands.cp", "copy a recipe and the files it needs into another repository"),
}
# the subcommands that run a recipe: from the recipe's repository, wherever they are typed
RUN_FROM_RECIPE_ROOT = ("sft", "grpo", "data", "validate", "plan", "probe", "rehearse", "eval", "fetch")


def console() -> int:
    """The installed `longctx` command (pyproject's [project.scripts]: `.venv/bin/longctx` after `make install`)."""
    return main(sys.argv[1:])


def config_as_recipe(own: list[str]) -> list[str]:
    """`--config FILE` (TRL's CLI, `trl sft --config recipe.yaml`) anywhere among a subcommand's flags: the recipe,
    moved to the front where every subcommand reads it."""
    for i, word in enumerate(own):
        if word == "--config" and i + 1 < len(own):
            return [own[i + 1], *own[:i], *own[i + 2 :]]
        if word.startswith("--config="):
            return [word.split("=", 1)[1], *own[:i], *own[i + 1 :]]
    return own


def usage() -> str:
    rows = "\n".join(f"  {name:<9} {what}" for name, (_, what) in SUBCOMMANDS.items())
    return f"usage: python -m longctx SUBCOMMAND RECIPE [flags] [-- recipe overrides]\n\n{rows}\n\n{__doc__}"


def resolve(recipe: str) -> str | None:
    """The recipe as every tool reads it (a short name becomes the full name), or None after printing why not."""
    from longctx.config.families.registry import short_names
    from longctx.config.paths import resolve_recipe, unknown_recipe_message

    if not resolve_recipe(recipe).is_file():
        print(f"error: {unknown_recipe_message(recipe)}", file=sys.stderr)
        return None
    return short_names().get(recipe, recipe)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub not in SUBCOMMANDS:
        close = difflib.get_close_matches(sub, SUBCOMMANDS, n=1)
        hint = f"did you mean {close[0]}?" if close else f"use one of: {', '.join(SUBCOMMANDS)}"
        print(f"error: no subcommand {sub!r}; {hint}", file=sys.stderr)
        return 2
    from longctx.config.keys import split_argv
    from longctx.training.credentials import hub_token_to_env

    own, overrides = split_argv(rest)
    own = config_as_recipe(own)
    if own and not own[0].startswith("-") and sub in (*RUN_FROM_RECIPE_ROOT, "cp"):
        recipe = resolve(own[0])
        if recipe is None:
            return 2
        if sub in RUN_FROM_RECIPE_ROOT:
            from longctx.commands.workdir import enter_recipe_root

            recipe, own, overrides = enter_recipe_root(recipe, own, overrides)
        own = [recipe, *own[1:]]
    tool_argv = [*own, "--", *hub_token_to_env(overrides, os.environ)]
    tool = importlib.import_module(SUBCOMMANDS[sub][0])
    try:
        return tool.main(["plan", *tool_argv] if sub == "plan" else tool_argv)
    except KeyboardInterrupt:  # Ctrl-C before a launch (preflight, data): a line, not a traceback
        print(f"\n[{sub}] interrupted (Ctrl-C) before any training started; nothing was trained", file=sys.stderr)
        return 130
