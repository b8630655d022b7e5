"""What to prepare, from command-line flags or from a recipe (whose accelerate YAML gives sp_size).

A `PrepConfig` names the source, tokenizer and layout; its `cache_key` hashes everything that changes the
output (source fingerprint, tokenizer files, lengths, sp, alignment, policy, format, seed), so a rerun is a cache
hit. The training side never recomputes this key (for a Hub dataset it needs the network): it reads the
manifest data_prep writes beside the dataset, indexed by the recipe's data settings alone
(longctx/config/prepared_manifest.py).
"""

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from data_prep.errors import PrepError
from data_prep.packing.layout import Layout
from data_prep.reading.formats import FORMATS
from longctx.config.chat_templates import ChatTemplateError
from longctx.config.prepared_manifest import local_fingerprint, prep_settings, tokenizer_fingerprint

FORMAT_VERSION = 3  # bump when the output of the same inputs changes (2: one BFD over the whole corpus; 3: label-less
# segments dropped)
POLICIES = ("split", "truncate", "drop")


@dataclass(frozen=True)
class PrepConfig:
    tokenizer: str
    max_length: int
    sp_size: int = 1
    inputs: tuple[str, ...] = ()
    hub: str | None = None
    hub_config: str | None = None
    split: str = "train"
    format: str = "auto"  # auto | text | messages | prompt_completion
    policy: str = "auto"  # auto (split for text, drop otherwise) | split | truncate | drop
    mode: str = "packed"  # packed | unpacked
    alignment: int = 1
    pad_multiple: int = 1  # the recipe's pad_to_multiple_of, when it is not max_length
    fixed_length: bool = False
    seed: int = 42
    output_dir: str = "data/prepared"
    shard_tokens: int = 8_000_000  # token slots per written Arrow file; bounds memory, whatever the corpus size
    num_proc: int = 1
    holdout: float = 0.0  # eval documents held out: a fraction (< 1) or a count (data_prep/eval_split.py)
    role: str = "train"  # train | eval: which side of the holdout this config prepares
    chat_template: str | None = None  # a .jinja file replacing the tokenizer's template (`chat_template_path`)
    columns: dict | None = None  # where the data keeps each field (longctx/config/data_keys.py); None: defaults
    max_dropped_fraction: float = 0.05  # above it the run fails naming report.json (not in the cache key)
    objective: str = "sft"  # sft | dpo | grpo: documents, preference pairs, or prompts (data_prep/trainers/prompts.py)
    prefix_sharing: bool = (
        False  # dpo: a pair's prompt once, both answers attending to it (data_prep/trainers/preference.py)
    )
    # grpo, none of them in the cache key: the columns the reward functions need (a row without them is dropped),
    # and the group's size and completion length the report's prefix-sharing line is computed for
    required_columns: tuple[str, ...] = ()
    num_generations: int | None = None
    max_completion_length: int | None = None
    # grpo, in the cache key when set: the template's keyword arguments TRL tokenizes a prompt with (they change its
    # length: Qwen3's `enable_thinking: false` adds an empty think block to the generation prompt)
    chat_template_kwargs: dict | None = None

    @property
    def layout(self) -> Layout:
        return Layout.build(self.max_length, self.sp_size, self.alignment, self.fixed_length, self.pad_multiple)

    def problems(self) -> list[str]:
        out = []
        if not self.inputs and not self.hub:
            out.append("no input: pass --input FILE|DIR|GLOB or --hub NAME (or use --recipe)")
        if self.format not in FORMATS + ("auto",):
            out.append(f"format {self.format!r} is not one of auto, {', '.join(FORMATS)}")
        if self.policy not in POLICIES + ("auto",):
            out.append(f"long-document policy {self.policy!r} is not one of auto, {', '.join(POLICIES)}")
        if self.mode not in ("packed", "unpacked"):
            out.append(f"mode {self.mode!r} is not `packed` or `unpacked`")
        for name in ("max_length", "sp_size", "alignment", "num_proc", "shard_tokens"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.shard_tokens > 2**30:
            out.append(f"shard_tokens {self.shard_tokens} is over 2**30: a shard's rows use int32 offsets")
        if not 0 <= self.max_dropped_fraction <= 1:
            out.append(f"max_dropped_fraction {self.max_dropped_fraction} is not a fraction in [0, 1]")
        from data_prep.eval_split import holdout_problems

        out += holdout_problems(self.holdout, self.role)
        if (
            self.objective == "grpo"
        ):  # prompt rows are written as they are: no row layout (data_prep/trainers/prompts.py)
            return out
        return out or self.layout.problems()

    def resolved_policy(self, fmt: str) -> str:
        """`split` keeps every token of raw text; a cut conversation or prompt is wrong, so others drop."""
        return self.policy if self.policy != "auto" else ("split" if fmt == "text" else "drop")

    def cache_key(self) -> str:
        # paths enter through their fingerprints, so a relative and an absolute spelling share one key
        ignored = ("output_dir", "num_proc", "inputs", "tokenizer", "chat_template", "max_dropped_fraction")
        ignored += ("required_columns", "num_generations", "max_completion_length")
        if not self.chat_template_kwargs:  # the key of every prompt set prepared before they were counted
            ignored += ("chat_template_kwargs",)
        if not self.columns:  # the default columns: the key of every dataset prepared before the mapping keys
            ignored += ("columns",)
        if not self.holdout:  # no eval split: the key of every dataset prepared before the split existed
            ignored += ("holdout", "role")
        if self.objective == "sft":  # likewise the key of every SFT dataset prepared before preference data
            ignored += ("objective", "prefix_sharing")
        keyed = {k: v for k, v in asdict(self).items() if k not in ignored}
        if self.chat_template:  # the template's text decides the masks, wherever the file lies
            keyed["chat_template"] = hashlib.sha256(Path(self.chat_template).read_bytes()).hexdigest()
        keyed.update(source=source_fingerprint(self), tokenizer=tokenizer_fingerprint(self.tokenizer))
        keyed["version"] = FORMAT_VERSION
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()

    def dataset_dir(self, key: str | None = None) -> Path:
        """`<output_dir>/<source name>-<key>`: readable, and distinct for every distinct input."""
        name = Path(self.inputs[0]).name if self.inputs else self.hub
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "data").strip("_.") or "data"
        role = "-eval" if self.role == "eval" else ""
        return Path(self.output_dir) / f"{slug}{role}-{(key or self.cache_key())[:16]}"


def source_fingerprint(cfg: PrepConfig) -> list:
    """Local files: (path, size, mtime_ns) of each; Hub: name/config/split plus the builder's hash when known."""
    if cfg.hub:
        try:
            from datasets import load_dataset_builder

            builder_hash = load_dataset_builder(cfg.hub, cfg.hub_config).hash
        except (OSError, ValueError):  # offline or gated: the name still identifies it
            builder_hash = None
        return [cfg.hub, cfg.hub_config, cfg.split, builder_hash]
    from data_prep.reading.sources import resolve_files

    return local_fingerprint(resolve_files(list(cfg.inputs), cfg.split))


def from_recipe(recipe, args, model, topo, role: str = "train", **overrides) -> PrepConfig:
    """The PrepConfig a parsed recipe asks for (longctx.config.prepared_manifest.prep_settings: sp from its
    accelerate YAML)."""
    grpo = getattr(recipe, "trainer", "sft") == "grpo"
    length_key = "max_prompt_length" if grpo else "max_length"
    if not getattr(args, length_key, None):
        raise PrepError(f"{recipe.config_source}: `{length_key}` must be set to prepare data")
    if grpo:
        overrides = {**grpo_prep_extras(recipe, args), **overrides}
    try:
        settings = prep_settings(recipe, args, model, topo, role)
    except ChatTemplateError as exc:
        raise PrepError(f"{recipe.config_source}: {exc}") from None
    threshold = {"max_dropped_fraction": getattr(recipe, "max_dropped_fraction", 0.05)}
    return PrepConfig(**{**settings, "inputs": tuple(settings["inputs"]), **threshold, **overrides})  # --output wins


def check(cfg: PrepConfig) -> PrepConfig:
    problems = cfg.problems()
    if problems:
        raise PrepError("; ".join(problems))
    return cfg


def grpo_prep_extras(recipe, config) -> dict:
    """A GRPO recipe's PrepConfig fields outside the cache key: its reward functions' columns, G and C."""
    from longctx.config.trainers.reward_functions import required_columns, reward_functions

    functions, problems = reward_functions(config.reward_funcs, recipe.config_source)
    if problems:
        raise PrepError("; ".join(str(p) for p in problems))
    needed = tuple(dict.fromkeys(c for fn in functions for c in required_columns(fn)))
    return {
        "required_columns": needed,
        "num_generations": config.num_generations,
        "max_completion_length": config.max_completion_length,
    }
