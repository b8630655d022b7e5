"""The in-training retrieval slice (RetrievalCallback.measure) on the mesh it is launched on, for a saved model.

    accelerate launch --config_file X tests/helpers/workers/retrieval_slice.py \
        CHECKPOINT OUT_JSON N --config RECIPE ...

The model is prepared as the trainer prepares it (DeepSpeed ZeRO-3 with the recipe's config, Ulysses attention
kept on in eval); the slice keeps its first N examples, so a test can give it a count the mesh's dp does not
divide. Rank 0 writes the logged metrics to OUT_JSON.
"""

import json
import sys
from types import SimpleNamespace

from longctx.config.recipe import parse_recipe
from longctx.evaluation.worker import load_model, prepare_for_mesh
from longctx.training.retrieval.callback import RetrievalCallback
from longctx.training.shutdown import exit_cleanly

LENGTH = 256


def main(checkpoint: str, out: str, count: int, recipe_argv: list[str]) -> None:
    recipe, sft, model_args = parse_recipe(recipe_argv)
    model, tok = load_model(recipe, sft, model_args, checkpoint)
    model, acc = prepare_for_mesh(model, recipe, sft)
    trainer = SimpleNamespace(accelerator=acc, model_wrapped=model)
    slice_ = RetrievalCallback(trainer, tok, every=1, samples=1, length=LENGTH)
    slice_.examples = slice_.examples[:count]
    metrics = slice_.measure()
    if acc.is_main_process:
        with open(out, "w") as f:
            json.dump({"metrics": metrics, "examples": len(slice_.examples), "world": acc.num_processes}, f)
    exit_cleanly(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
