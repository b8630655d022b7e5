"""`python -m preflight ...`: validate or plan a launch (preflight/cli.py), or `probe` (preflight/probe.py)."""

import sys


def main(argv: list[str]) -> int:
    if argv and argv[0] == "probe":
        from preflight.probe import main as probe_main

        return probe_main(argv[1:])
    from preflight.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
