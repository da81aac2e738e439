"""The `servesim` command's entry point: Ctrl-C while servesim's modules load (a few tenths of a second) ends it
as Ctrl-C does later, `servesim: interrupted` and exit 130, not a traceback from an import."""

import sys


def main() -> int:
    try:
        from servesim.simulator.cli import main as cli_main
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130
    return cli_main()
