"""Pre-launch validation of recipes and topologies: catch what would fail before any GPU work."""
