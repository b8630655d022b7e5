"""recipes/grpo.py with fixed completions, for the GRPO parity tests (tests/parity/test_grpo_parity.py).

The trainer's sampling (`generate_shared_prefill`) is replaced by a replay: the k-th copy of a prompt on rank r gets
a completion drawn from a generator seeded by (prompt, r, k), 1 to `MAX_COMPLETION` tokens, some ending in EOS, so
every run and the reference see the same completions whatever the mesh. Each rank writes what it "generated", in
order, to `$GRPO_REPLAY_DUMP/rank{r}.jsonl`; the reference reads those files back. The reward is `token_reward`
below (this module's import path goes in the recipe's `reward_funcs`). Everything else is recipes/grpo.py as
launched by `make grpo`.

`GRPO_CONTROL=generate` keeps the trainer's own sampling and records it (the SP generation test); other values
select a deliberately broken run for the negative controls:
- `shard_log_probs`: each rank keeps its own shard's per-token log-probs only (zeros elsewhere), as a trainer that
  scored the SP shards without gathering them would;
- `cross_attention`: document isolation switched off, so the completions of a row see each other (and the other
  groups' prompts).

Until grpo-edge's prompt loader (`longctx.training.data.prompts`) and reward loader (`longctx.training.rl.rewards`)
are in this branch, minimal stand-ins with their contract's signatures are installed (grpo-interface.md): a JSONL
folder of prompts, `module:function` import paths. With them present, theirs run.
"""

import importlib
import json
import os
import random
import runpy
import sys
import types
import zlib
from pathlib import Path

import torch

MAX_COMPLETION = 12
EOS = 1


def token_reward(prompts, completions, completion_ids, **kwargs):
    """A reward that differs within a group: the share of even token ids in the completion, plus its length / 10."""
    return [sum(t % 2 == 0 for t in ids) / len(ids) + len(ids) / 10 for ids in completion_ids]


def replayed(prompt: list[int], rank: int, k: int, vocab: int) -> list[int]:
    rng = random.Random(zlib.crc32(json.dumps([prompt, rank, k]).encode()))
    tokens = [rng.randrange(3, vocab) for _ in range(rng.randint(1, MAX_COMPLETION))]
    if rng.random() < 0.5:
        tokens[-1] = EOS
    return tokens


def record(prompts, completions) -> None:
    """Append one generation call of this rank to its dump file."""
    rank = int(os.environ.get("RANK", "0"))
    with open(Path(os.environ["GRPO_REPLAY_DUMP"]) / f"rank{rank}.jsonl", "a") as f:
        f.write(json.dumps({"prompts": [list(p) for p in prompts], "completions": completions}) + "\n")


def replay_generation(model, prompts, generation_config, eos_ids, device):
    """The trainer's `generate_shared_prefill`, replaying fixed completions and recording them."""
    rank = int(os.environ.get("RANK", "0"))
    seen: dict[tuple, int] = {}
    out = []
    for prompt in prompts:
        k = seen.get(tuple(prompt), 0)
        seen[tuple(prompt)] = k + 1
        out.append(replayed(list(prompt), rank, k, model.config.vocab_size))
    record(prompts, out)
    return out


def pair(batch: dict):
    return batch["completion_ids"], batch["completion_mask"]


def recording_deals(deal):
    """The trainer's dealing of micro-steps (`deal_groups`), each micro-batch's completion ids recorded to
    `$GRPO_REPLAY_DUMP/deal{r}.jsonl`, one line per generation (the resume test compares them)."""

    def deal_and_record(*args, **kwargs):
        out = deal(*args, **kwargs)
        rank = int(os.environ.get("RANK", "0"))
        lines = [[ids[mask.bool()].tolist() for ids, mask in zip(*pair(b), strict=True)] for b in out]
        with open(Path(os.environ["GRPO_REPLAY_DUMP"]) / f"deal{rank}.jsonl", "a") as f:
            f.write(json.dumps(lines) + "\n")
        return out

    return deal_and_record


def recording(generate):
    """The trainer's own generation, each call recorded (`GRPO_CONTROL=generate`)."""

    def generate_and_record(model, prompts, generation_config, eos_ids, device):
        out = generate(model, prompts, generation_config, eos_ids, device)
        record(prompts, out)
        return out

    return generate_and_record


def stand_in_modules() -> None:
    """grpo-edge's loaders, where this branch does not have them yet (module docstring)."""
    try:
        importlib.import_module("longctx.training.data.prompts")
    except ImportError:
        prompts = types.ModuleType("longctx.training.data.prompts")

        def prompt_datasets(recipe, config, model_args, topo):
            """The folder's train.jsonl; `eval_holdout` N (a count) holds out its last N rows."""
            from datasets import load_dataset

            rows = load_dataset("json", data_files=str(Path(recipe.dataset_name) / "train.jsonl"))["train"]
            held = int(recipe.eval_holdout)
            if not held:
                return rows, None
            return rows.select(range(len(rows) - held)), rows.select(range(len(rows) - held, len(rows)))

        prompts.prompt_datasets = prompt_datasets
        sys.modules[prompts.__name__] = prompts
    try:
        importlib.import_module("longctx.training.rl.rewards")
    except ImportError:
        rewards = types.ModuleType("longctx.training.rl.rewards")

        def load_reward_functions(paths, config_source):
            paths = [paths] if isinstance(paths, str) else paths
            return [getattr(importlib.import_module(p.split(":")[0]), p.split(":")[1]) for p in paths]

        rewards.load_reward_functions = load_reward_functions
        sys.modules[rewards.__name__] = rewards


def shard_only(local, group, divisor):
    """The broken gather: this rank's shard in place, zeros where the other shards' positions are."""
    if group is None:
        return local
    sp, rank = torch.distributed.get_world_size(group), torch.distributed.get_rank(group)
    full = local.new_zeros(sp * local.shape[0])
    return full.index_copy(0, torch.arange(rank * local.shape[0], (rank + 1) * local.shape[0]), local)


def main() -> None:
    stand_in_modules()
    from longctx.training.rl import log_probs, trainer

    control = os.environ.get("GRPO_CONTROL")
    if control == "generate":
        trainer.generate_shared_prefill = recording(trainer.generate_shared_prefill)
    else:
        trainer.generate_shared_prefill = replay_generation
    trainer.deal_groups = recording_deals(trainer.deal_groups)
    if control in ("generate", "", None):
        pass
    elif control == "shard_log_probs":
        log_probs.gather_tokens = shard_only
    elif control == "cross_attention":  # after the entrypoint installs isolation (which switches it on)
        from longctx.training.attention import isolation

        install = isolation.install_document_isolation

        def install_then_switch_off(*args, **kwargs):
            line = install(*args, **kwargs)
            isolation.set_isolation_enabled(False)
            return line

        isolation.install_document_isolation = install_then_switch_off
    else:
        raise SystemExit(f"unknown GRPO_CONTROL {control!r}")
    entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "grpo.py"
    sys.argv = [str(entrypoint), *sys.argv[1:]]
    runpy.run_path(str(entrypoint), run_name="__main__")


if __name__ == "__main__":
    main()
