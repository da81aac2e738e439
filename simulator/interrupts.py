"""Ctrl-C (SIGINT) and SIGTERM (`kill`, a batch scheduler's stop, `timeout`) end a command alike: what is under way
is cleaned up, its tables written, one line said, exit 130 or 143. Before, SIGTERM killed the process where it
stood, silent, a rerun's results folder half replaced (r154). Blocks that must not be cut hold both signals."""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt is, so every cleanup that handles one handles both."""


SIGNALS = (signal.SIGINT, signal.SIGTERM)


RECEIVED: list = []  # the signals raised so far: a library that turns the exception into its own (pyo3's panic
# while pydantic_core imports the datetime C API, r156) still ends the command as the signal would


def _raise_terminated(signum, frame):
    RECEIVED.append(signum)
    raise Terminated


def as_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt behind an exception: itself, one in its chain, or, for a library's panic raised while a
    SIGTERM was being raised in it, Terminated; None: not an interrupt."""
    seen = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    if type(exc).__name__ == "PanicException" and signal.SIGTERM in RECEIVED:
        return Terminated()
    return None


def raise_on_sigterm() -> None:
    """The servesim process's SIGTERM raises Terminated; one ignored (nohup) or handled by a caller stays so."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)


def default_sigterm() -> None:
    """A worker process ends at SIGTERM at once (its caller ends it so), as before servesim handled it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def held(caught: list):
    """SIGINT and SIGTERM only noted in `caught` while the block runs (raised inside library locks they broke
    them); a signal ignored stays ignored, and only the main thread receives signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s, handler in previous.items():
        if handler != signal.SIG_IGN and (s == signal.SIGINT or handler is _raise_terminated):
            signal.signal(s, lambda signum, _: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.default_int_handler)


def raise_caught(caught: list) -> None:
    """The first signal held, raised as it would have been."""
    if caught:
        raise Terminated if caught[0] == signal.SIGTERM else KeyboardInterrupt
