"""What a user types and reads: the CLI, recipe names and copies, overrides, the docs' commands, shipped configs."""
