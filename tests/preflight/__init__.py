"""Preflight: broken launches refused before any process, the toolchain checks, the dress rehearsal."""
