"""The Python API's arguments checked by kind before a call: a wrong name or type is a ConfigError naming the
argument, as a wrong flag is on the command line, never a TypeError from deep inside (`capacity(5)`,
`read_trace(b"x.csv")`, `sweep(..., out=None)`). numpy numbers are taken as Python's; text is never a number."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np

from servesim.simulator.config import warn_afresh
from servesim.simulator.errors import ConfigError
from servesim.simulator.files import path_problem
from servesim.workloads.settings import MAX_NESTING


def _int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _number(v) -> bool:
    return _int(v) or isinstance(v, (float, np.floating))


KINDS = {  # kind -> (test, what the message says it must be)
    "path": (lambda v: path_problem(v) is None, "a path (str or os.PathLike), not empty, without a NUL byte"),
    "text": (lambda v: isinstance(v, str), "text"),
    "int": (_int, "an integer"),
    "count": (lambda v: _int(v) and v >= 0, "a non-negative integer"),
    "number": (_number, "a number"),
    "length": (lambda v: _int(v) or isinstance(v, str), "a length (an integer, or text as vllm serve reads it: 32k, "
                                                        "auto)"),
    "bool": (lambda v: isinstance(v, (bool, np.bool_)), "true or false"),
    "mapping": (lambda v: isinstance(v, Mapping), "a mapping"),
    "list": (lambda v: isinstance(v, Sequence) and not isinstance(v, (str, bytes)), "a list"),
}


def _plain(v, field: str = "scenario"):
    """numpy scalars as the Python numbers the rest of servesim takes; a complex one is none (r155: its imaginary
    part dropped, numpy's warning leaking)."""
    if isinstance(v, (np.complexfloating, complex)):
        raise ConfigError(field, f"{v!r:.40}: a complex number is not a setting value")
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, str) and type(v) is not str:  # a str subclass (np.str_, a StrEnum) as its text (r158)
        return str.__str__(v)
    if isinstance(v, np.integer):
        return int(v)
    return float(v) if isinstance(v, np.floating) else v


def _within(field: str, key) -> str:
    """The name of a value inside a mapping, for its errors: workload.arrival.rate, not the scenario."""
    return str(key) if field == "scenario" else f"{field}.{key}"


def plain_values(v, field: str = "scenario", depth: int = 0):
    """A setting value as YAML can say it: numpy numbers and arrays, tuples and paths, at any depth, as the Python
    numbers, lists and text they stand for (a list of np.int64 was "not a setting value")."""
    if depth > MAX_NESTING:  # a RecursionError escaped (round 79): a value that contains itself, or nests deeper
        raise ConfigError(".".join(field.split(".")[:2]), f"nests more than {MAX_NESTING} levels deep (or contains "
                                                         f"itself): no setting does")
    if isinstance(v, Mapping):
        bad = next((k for k in v if isinstance(k, (tuple, list, Mapping, np.ndarray))), None)
        if bad is not None:  # r149: a tuple key became a list, then a TypeError (unhashable) as a key
            raise ConfigError(field, f"{bad!r:.60}: a setting's name is text")
        return {plain_values(k, field, depth + 1): plain_values(x, _within(field, k), depth + 1) for k, x in v.items()}
    if isinstance(v, np.ndarray):  # a 0-d array is one number (tolist() gives the scalar)
        return plain_values(v.tolist(), field, depth) if v.ndim == 0 else \
            [plain_values(x, field, depth + 1) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [plain_values(x, field, depth + 1) for x in v]
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return _plain(v, field)


_IN_CALL = [0]  # API calls under way in this thread of control: the outermost says its warnings afresh

# a CLI flag whose API argument is not its name in snake case (r143: --set, --gpu, --zip were named as flags)
FLAG_ARGUMENTS = {"--slo": "slos", "--set": "overrides", "--gpu": "gpus", "--zip": "zipped"}


def _argument(flag: str, parameters) -> str | None:
    """The argument of a call (its `parameters`) that a CLI flag stands for, or None."""
    return next((a for a in (FLAG_ARGUMENTS.get(flag), flag.startswith("--") and flag[2:].replace("-", "_"))
                 if a in parameters), None)


def checked_args(fn=None, /, _as: str | None = None, **kinds: str):
    """fn (exported as `_as`) with its arguments checked: names against its signature, values against `kinds`
    (None passes where the parameter's default is None)."""
    if fn is None:
        return lambda f: checked_args(f, _as, **kinds)
    sig = inspect.signature(fn)
    name = _as or fn.__name__
    unknown = set(kinds) - set(sig.parameters)
    assert not unknown, f"{fn.__name__} has no parameter {unknown}"  # a typo here, not the user's

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise ConfigError(name, str(exc)) from None
        for arg, value in bound.arguments.items():
            kind = kinds.get(arg)
            if kind is None or (value is None and sig.parameters[arg].default is None):
                continue
            test, what = KINDS[kind]
            if isinstance(value, np.ndarray) and value.ndim == 0 and kind != "list":  # np.array(5): one number
                value = value[()]
            if isinstance(value, np.ndarray) and value.ndim == 1 and kind == "list":  # as a grid's values (r158)
                value = plain_values(value, arg)
            if kind == "path" and (problem := path_problem(value)) is not None:  # the CLI's --out checks too
                raise ConfigError(arg, problem)
            if not test(value):
                raise ConfigError(arg, f"must be {what}, got {type(value).__name__} {value!r:.60}")
            bound.arguments[arg] = os.fspath(value) if kind == "path" else _plain(value)
        if not _IN_CALL[0]:  # an API call inside another (recommend's runs) shares the outer call's warnings
            warn_afresh()
        _IN_CALL[0] += 1
        try:
            return fn(*bound.args, **bound.kwargs)
        except OSError as exc:  # a path the file system refuses (a name too long): the call's, in one line (r130)
            if exc.filename is None:
                raise
            raise ConfigError(name, f"{exc.filename}: {exc.strerror or exc}") from None
        except ConfigError as exc:  # a CLI flag named for an argument of this call: name the argument
            arg = _argument(exc.field, sig.parameters)
            if arg is None:
                raise
            # and the flags its message names (r160: sweep's "grid: ... is also given by --set")
            message = re.sub(r"--[a-z][a-z0-9-]*", lambda m: _argument(m[0], sig.parameters) or m[0], exc.message)
            raise type(exc)(arg, message) from None
        finally:
            _IN_CALL[0] -= 1

    call.__name__ = call.__qualname__ = name
    return call
