"""Faults injected into runs (docs/reliability.md): in process and through real launches."""
