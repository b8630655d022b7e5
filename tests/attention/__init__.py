"""Attention under packing and SP: document isolation, sinks and windows, shared prefixes, linear attention."""
