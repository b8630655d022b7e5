"""One module per `python -m longctx` subcommand: argument parsing and the order of steps; the work itself is in
the tools below (preflight, launch, leak_probe, cpu_rehearsal, evaluation). Nothing below imports this package."""
