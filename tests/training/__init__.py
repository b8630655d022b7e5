"""Training features beside SP: ALST memory features, checkpoint and optimizer offload, row balance, host syncs."""
