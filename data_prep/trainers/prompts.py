"""`make data` for a GRPO recipe (`trainer: grpo`): prompt rows checked, measured as TRL tokenizes them, filtered.

GRPO trains on completions the model generates, so nothing here is tokenized for training: TRL 1.16's GRPOTrainer
tokenizes each prompt at generation (`_tokenize_prompts`: the chat template with the generation prompt for a
conversational prompt, the plain tokenizer for text) and hands the raw `prompt` and every other column of the row
to the reward functions. What data_prep adds is what would otherwise fail mid-run or silently cost memory:

- every row is checked: a `prompt` (the recipe's `prompt_field`), non-empty text or a list of role/content
  messages, and every column the recipe's reward functions need (`answer` for the shipped ones); a bad row is
  dropped and counted with its file:line, under the usual bad-row threshold;
- every prompt is counted in tokens exactly as TRL will tokenize it, and a prompt longer than `max_prompt_length`
  (the length `make plan` sizes memory for) is dropped and counted (`long_document_policy: drop`; cutting a
  prompt could cut its question or its needle, so nothing else is offered);
- the kept rows are written with their columns unchanged, in their order, behind the usual manifest, so the
  trainer hands TRL the dataset as the user wrote it.

The report adds what a group costs the training forward: G completions of up to C tokens after a prompt of P
tokens take G x (P + C) tokens each alone, P + G x C with prefix sharing (the prompt once per group).
"""

import itertools

import numpy as np
import pyarrow as pa

from data_prep.errors import PrepError
from data_prep.output.counts import Counts
from data_prep.reading.formats import Columns
from longctx.memory_plan.rollout import group_tokens

FORMAT = "prompts"
ROWS_PER_SHARD = 1000  # kept rows a written shard holds: long prompts are megabytes each
TOKENIZE_BATCH = 64


def prompt_problem(prompt) -> tuple[str, str] | None:
    """(reason, detail) when a value cannot be a GRPO prompt, else None."""
    if isinstance(prompt, str):
        return ("empty", "the prompt is empty") if not prompt.strip() else None
    if isinstance(prompt, list):
        if not prompt:
            return "empty", "the prompt is an empty list of messages"
        for i, m in enumerate(prompt):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                return "malformed", f"message {i} of the prompt is not a {{role, content}} pair of strings: {m!r:.80}"
        return None
    return "malformed", f"the prompt is a {type(prompt).__name__}, not text or a list of messages"


class PromptPreparer:
    """Same interface as data_prep.pipeline.Preparer: `run(writer, progress)`, then `counts` and `prompts`."""

    def __init__(self, cfg):
        self.cfg, self.counts = cfg, Counts()
        self.column = Columns.of(cfg.columns).prompt
        self.lengths: list[int] = []
        self.written = 0
        self.conversational = None

    def check(self, loc: str, row: dict) -> bool:
        problem = prompt_problem(row.get(self.column)) if self.column in row else ("malformed", None)
        if problem and problem[1] is None:
            problem = ("malformed", f"no `{self.column}` column (columns: {sorted(row)})")
        missing = [c for c in self.cfg.required_columns if c not in row]
        if not problem and missing:
            names = ", ".join(f"`{c}`" for c in missing)
            problem = ("malformed", f"no {names} column, which the reward functions need")
        kind = isinstance(row.get(self.column), list)
        if not problem and self.conversational is not None and kind != self.conversational:
            problem = ("malformed", "mixes text and conversational prompts (TRL batches one kind)")
        if problem:
            self.counts.drop(problem[0], loc, problem[1])
            return False
        self.conversational = kind
        return True

    def count_tokens(self, tok, prompts: list) -> list[int]:
        """Each prompt's length as TRL 1.16's GRPOTrainer._tokenize_prompts tokenizes it."""
        if self.conversational:
            kwargs = self.cfg.chat_template_kwargs or {}  # as TRL passes the recipe's `chat_template_kwargs`
            ids = tok.apply_chat_template(
                prompts, add_generation_prompt=True, tokenize=True, return_dict=True, **kwargs
            )
            return [len(x) for x in ids["input_ids"]]
        return [len(x) for x in tok(text=prompts)["input_ids"]]

    def read(self, records, tok, writer, progress) -> None:
        """Check and count every row, streaming: kept rows go to the writer a shard at a time."""
        c, cap, batch, kept = self.counts, self.cfg.max_length, [], []
        progress.begin("tokenize")
        for loc, row, problem in itertools.chain(records, [(None, None, None)]):
            if loc is not None:
                c.rows_read += 1
                if problem:
                    c.drop(problem[0], loc, problem[1])
                elif self.check(loc, row):
                    batch.append((loc, row))
            if batch and (loc is None or len(batch) == TOKENIZE_BATCH):
                for (where, good), n in zip(
                    batch, self.count_tokens(tok, [r[self.column] for _, r in batch]), strict=True
                ):
                    c.tokens_in += n
                    if n > cap:
                        c.drop("too_long", where, f"prompt of {n} tokens > max_prompt_length {cap}", n)
                        continue
                    kept.append(good)
                    self.lengths.append(n)
                batch = []
                progress.update(None, None, documents=c.rows_read)
            if kept and (loc is None or len(kept) >= ROWS_PER_SHARD):
                self.write_shard(writer, kept)
                kept = []
        progress.end(None, None, documents=c.rows_read)

    def write_shard(self, writer, rows: list[dict]) -> None:
        """One Arrow shard of kept rows, columns unchanged; read back so every kept row is known to be written."""
        writer.add(pa.Table.from_pylist(rows))
        with pa.OSFile(str(writer.shards[-1]), "rb") as f:
            self.written += pa.ipc.open_stream(f).read_all().num_rows

    def run(self, writer, progress) -> str:
        from data_prep.eval_split import select
        from data_prep.reading.sources import records_of
        from data_prep.tokens.encoding import load_tokenizer

        if self.cfg.policy not in ("drop", "auto"):
            raise PrepError(f"long_document_policy `{self.cfg.policy}` would cut a prompt; GRPO prompts use `drop`")
        tok = load_tokenizer(self.cfg.tokenizer)
        if self.cfg.chat_template:
            with open(self.cfg.chat_template, encoding="utf-8") as f:
                tok.chat_template = f.read()
        records, _ = records_of(self.cfg)
        self.read(select(self.cfg, records, counts=self.counts), tok, writer, progress)
        c = self.counts
        c.documents_in, c.documents_out = c.rows_read, len(self.lengths)
        if not self.lengths:
            reason, n = c.dropped.most_common(1)[0] if c.dropped else ("none", 0)
            example = c.examples.get(reason, ["no rows read"])[0]
            raise PrepError(
                f"no usable prompts in {c.rows_read} rows: {n} dropped as {reason}, e.g. {example}; a row needs a "
                f"`{self.column}` (text or a list of role/content messages) and the reward functions' columns"
            )
        self.finish()
        return FORMAT

    def finish(self) -> None:
        """The counts of the kept prompts, checked against the rows read back from the written files."""
        lengths = np.asarray(self.lengths, np.int64)
        if self.written != len(lengths):
            raise AssertionError(f"wrote {self.written} prompt rows, kept {len(lengths)}")  # a bug here, not the input
        self.counts.add_lengths(lengths)
        self.counts.add_rows(lengths, lengths)  # a prompt row is its tokens, unpadded
        self.prompts = {
            "conversational": bool(self.conversational),
            "prompts_out": len(lengths),
            "prompt_tokens": int(lengths.sum()),
            "prompt_tokens_max": int(lengths.max()),
            "prompt_tokens_mean": round(float(lengths.mean()), 2),
            "max_prompt_length": self.cfg.max_length,
        }


def prompts_summary(prompts: dict, generations: int | None, completion_length: int | None) -> str:
    """The GRPO lines of the printed summary: the prompts kept and, with the recipe's G and C, what a group costs."""
    kind = "conversational" if prompts["conversational"] else "text"
    line = (
        f"[data] prompts: {prompts['prompts_out']} kept ({kind}), {prompts['prompt_tokens_mean']:.0f} tokens on "
        f"average, longest {prompts['prompt_tokens_max']} (max_prompt_length {prompts['max_prompt_length']})"
    )
    if not generations or not completion_length:
        return line
    g = group_tokens(prompts["prompt_tokens"], prompts["prompts_out"], generations, completion_length)
    return (
        f"{line}\n[data] prefix sharing, G={generations} completions of <= {completion_length} tokens: "
        f"{g['tokens_shared']} training-forward tokens an epoch vs {g['tokens_unshared']} with each completion "
        f"alone ({g['saving']:.1%} fewer)"
    )
