"""Negative controls: entrypoints that run a recipe with one fix switched off or deliberately broken, so each
parity gate is shown to catch the bug it exists for."""
