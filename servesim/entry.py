"""The `servesim` command's entry point: Ctrl-C while servesim's modules load (a few tenths of a second) ends it
as Ctrl-C does later, `servesim: interrupted` and exit 130, not a traceback from an import. A standard stream the
caller closed (`2>&-`) is opened on the null device first, so no file the command writes takes its number and
gets what libraries write there (r154: a closed stderr crashed every run); SIGTERM ends a command as Ctrl-C
does (simulator/interrupts.py)."""

import os
import sys


def _reopen_closed_streams() -> None:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # closed: the lowest free number, so the null device takes it
            os.open(os.devnull, os.O_RDWR)


def main() -> int:
    _reopen_closed_streams()
    # the command draws to files only (matplotlib's Agg, chosen where it draws): a backend the environment names is
    # never used, and one matplotlib does not know failed its import (r154: every plot an internal error)
    os.environ.pop("MPLBACKEND", None)
    closed = sys.stdout is None  # closed when the interpreter started: None, which print() takes as stdout
    sys.stdout = sys.stdout or open(os.devnull, "w")
    sys.stderr = sys.stderr or open(os.devnull, "w")
    try:
        from servesim.simulator.cli import main as cli_main
        from servesim.simulator.cli_output import STDOUT_CLOSED, GuardedStream
        from servesim.simulator.interrupts import raise_on_sigterm

        # after the modules load: raised inside pydantic_core's import, SIGTERM became a Rust panic with its own
        # message (r156); before, it ends the process as it always did, nothing written yet
        raise_on_sigterm()

        sys.stdout, sys.stderr = GuardedStream(sys.stdout, "stdout"), GuardedStream(sys.stderr, "stderr")
        STDOUT_CLOSED[0] = closed
    except BaseException as exc:  # a signal while modules load, or a library's panic it caused
        from servesim.simulator.interrupts import as_interrupt

        signal = as_interrupt(exc)
        if signal is None:
            raise
        print(f"servesim: {'terminated' if type(signal).__name__ == 'Terminated' else 'interrupted'}",
              file=sys.stderr)
        return 143 if type(signal).__name__ == "Terminated" else 130
    return cli_main()
