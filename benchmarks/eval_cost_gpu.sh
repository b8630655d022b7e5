#!/usr/bin/env bash
# The retrieval eval's real cost on one GPU, offline: `python -m longctx eval` on llama3.1-8b/sft-32k-1gpu-offload
# (the catalog's one-GPU recipe: its accelerate YAML, its ZeRO-3 + optimizer-offload DeepSpeed JSON, sdpa, bf16)
# with Llama-3.1-8B's architecture from recipes/assets/architectures/ and random weights, so nothing is downloaded. The examples
# are built with the tiny recipe's 512-token tokenizer (the real one is not on disk); ids stay inside the 8B
# vocabulary, and the cost of a forward depends on its length, not on which tokens it holds.
#
#   benchmarks/eval_cost_gpu.sh OUT_DIR [PYTHON]
#
# 1. the recipe's default grid (max_length/8 .. max_length = 4K-32K), passkey + multikey, depths 0/50/100%,
#    2 samples: every example's seconds and peak allocated memory go to OUT_DIR/e32k/results.json, and the
#    `[eval] measured` lines print the median seconds, achieved TFLOP/s per GPU and peak GiB per length;
# 2. with time left (under 200 s used so far), the same recipe with max_length 131072 (the model's native rope
#    range) at 64K and 128K, passkey at depth 50%: how the forward's rate and memory grow where attention dominates.
# Compare the peak with the training step's plan (`make plan RECIPE=llama3.1-8b/sft-32k-1gpu-offload`) and the
# rate with the 35% MFU that `python -m longctx eval RECIPE --dry-run` assumes.
set -uo pipefail
out=${1:?usage: benchmarks/eval_cost_gpu.sh OUT_DIR [PYTHON]}
py=${2:-python3}
cd "$(dirname "$0")/.."
recipe=llama3.1-8b/sft-32k-1gpu-offload
random=(--model_init random --model_name_or_path recipes/assets/tiny-llama
  --model_config_source recipes/assets/architectures/meta-llama/Llama-3.1-8B-Instruct)
start=$SECONDS
"$py" -m longctx validate "$recipe" --this-machine -- "${random[@]}" 2>&1 | tail -4
timeout 330 "$py" -m longctx eval "$recipe" --tasks passkey multikey --depths 0 0.5 1 --samples 2 \
  --out "$out/e32k" -- "${random[@]}" 2>&1 | grep -v "Warning\|warn(" | tail -25
echo "[bench] grid 1 done after $((SECONDS - start)) s"
if ((SECONDS - start < 200)); then
  timeout 200 "$py" -m longctx eval "$recipe" --lengths 65536 131072 --tasks passkey --depths 0.5 --samples 2 \
    --out "$out/e128k" -- "${random[@]}" --max_length 131072 2>&1 | grep -v "Warning\|warn(" | tail -12
  echo "[bench] grid 2 done after $((SECONDS - start)) s"
fi
