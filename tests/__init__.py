"""The test suite (docs/tests.md): one folder per concern."""
