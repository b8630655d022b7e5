"""What the repository reads from a model's own config.json, offline: where the file is (config_json.py), its
per-layer shapes (Gemma 4), its linear-attention layers (Gated DeltaNet) and its expert sizes (MoE)."""
