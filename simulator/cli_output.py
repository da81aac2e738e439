"""Where a command's words go, decided once for every command: with --json the command's answer is one JSON
document alone on stdout and its human text goes to stderr; with --quiet nothing but errors gets through. A command
only prints its text and hands its answer to `answer`, so no command can get the discipline wrong on its own."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

ERRORS = ("servesim: error", "servesim: internal error", "servesim: interrupted", "servesim: terminated")
_JSON_TO: list = [None]  # the real stdout while a --json command runs
STDOUT_CLOSED = [False]  # the caller closed stdout (>&-): a --json answer would go nowhere, unsaid


class _ErrorsOnly(io.TextIOBase):
    """A stream passing only the lines that are errors (what --quiet still says); a progress bar's carriage-return
    updates end a line too, so they are dropped as they come rather than piled up."""

    def __init__(self, target):
        self.target, self.line = target, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for piece in text.replace("\r", "\n").splitlines(keepends=True):
            self.line += piece
            if self.line.endswith("\n"):
                self._end_line()
        return len(text)

    def _end_line(self) -> None:
        if self.line.startswith(ERRORS):
            self.target.write(self.line if self.line.endswith("\n") else self.line + "\n")
            self.target.flush()
        self.line = ""

    def flush(self) -> None:
        self.target.flush()

    def close_line(self) -> None:
        if self.line:
            self._end_line()


class GuardedStream:
    """The process's stdout or stderr as servesim writes them (servesim/entry.py). A failing write (a full disk,
    /dev/full) to stderr is dropped: a warning has nowhere else to go, and the command goes on (r154: every command
    then exited 1, bad input too). One to stdout is raised once as an OSError naming stdout, not --out (r154), and
    later writes are dropped, so the interpreter's flush at exit fails no second time. A broken pipe (`| head`) is
    raised as it comes: the command ends as a tool that lost its reader does."""

    def __init__(self, stream, name: str):
        self._stream, self._name, self._failed = stream, name, False

    def _guard(self, call, *args):
        if self._failed:
            return None
        try:
            return call(*args)
        except BrokenPipeError:
            if self._name == "stdout":
                raise
            self._failed = True
        except OSError as exc:
            self._failed = True
            if self._name == "stdout":
                raise OSError(exc.errno, exc.strerror, self._name) from None
        return None

    def write(self, text: str) -> int:
        self._guard(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name):  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def command_output(as_json: bool, quiet: bool):
    """Route a command's stdout and stderr for --json and --quiet while it runs."""
    real_out, real_err = sys.stdout, sys.stderr
    errors_only = _ErrorsOnly(real_err) if quiet else None
    text = errors_only or (real_err if as_json else real_out)
    _JSON_TO[0] = real_out if as_json else None
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(errors_only or real_err):
            yield
    finally:
        _JSON_TO[0] = None
        if errors_only is not None:
            errors_only.close_line()


def answer(payload) -> bool:
    """The command's answer as JSON on stdout when --json asked for it; True then, so the caller prints no text."""
    out = _JSON_TO[0]
    if out is None:
        return False
    out.write(json.dumps(plain(payload), indent=2, allow_nan=False) + "\n")
    out.flush()
    return True


def plain(value):
    """A value as strict JSON has it: tables as records, numpy numbers as numbers, nan and inf as null."""
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):  # each value whole: pandas' to_json rounds to 10 decimals (r130: two swept
        return [plain(row) for row in value.to_dict(orient="records")]  # rates printed alike, 1e-12 as 0)
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
