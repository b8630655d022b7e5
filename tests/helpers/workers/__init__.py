"""Programs run once per rank or as a child process (`python -m tests.helpers.workers.NAME`, a launched script):
each does one distributed or DeepSpeed thing and writes what it saw for its test to read."""
