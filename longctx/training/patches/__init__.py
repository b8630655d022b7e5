"""The upstream patch registry: every replacement of upstream code and every trainer method override, with
fingerprints (registry.py), and the checker that recomputes them (check.py)."""
