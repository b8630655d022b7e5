"""The ALST memory features as recipe switches: TiledMLP and activation-checkpoint offload."""
