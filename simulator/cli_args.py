"""Typed command-line numbers: every flag that takes a number says its range, so argparse refuses inf, nan, a
negative count or a fraction outside (0, 1) with one line naming the flag, before any work starts."""

from __future__ import annotations

import argparse
import math
import re

from servesim.workloads.settings import MAX_INT, MAX_REPLICAS



_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z|[+-]?(inf|infinity|nan)\Z", re.IGNORECASE)


def number(kind: type = int, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
           le: float | None = None):
    """An argparse `type=` for a finite int or float in the given range (bounds open with gt/lt, closed with ge/le)."""

    def parse(text: str):
        try:  # ASCII digits only, as --set reads them (r160: int() took Arabic-Indic digits and 1_024)
            if not (_INTEGER if kind is int else _DECIMAL).match(text.strip()):
                raise ValueError(text)
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}")
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        for bound, ok, word in ((gt, lambda b: value > b, ">"), (ge, lambda b: value >= b, ">="),
                                (lt, lambda b: value < b, "<"), (le, lambda b: value <= b, "<=")):
            if bound is not None and not ok(bound):
                raise argparse.ArgumentTypeError(f"must be {word} {_show(bound)}, got {text}")
        if kind is int and abs(value) > MAX_INT:
            raise argparse.ArgumentTypeError(f"must be at most {MAX_INT:,} in size, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


def human_readable_int(text: str) -> int:
    """vLLM's parser of counts (named as vLLM names it, so argparse's refusal reads as vLLM's): 25.6k and 1M are
    decimal (x1000), 1K and 2M binary (x1024, whole numbers only), anything else Python's int()."""
    t = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", t)
    if not m:
        return int(t)
    digits, suffix = m.groups()
    if suffix.islower():
        return int(float(digits) * 1000 ** ("kmgt".index(suffix) + 1))
    if "." in digits:
        raise argparse.ArgumentTypeError(f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean "
                                         f"to use {digits}{suffix.lower()} instead?")
    return int(digits) * 1024 ** ("KMGT".index(suffix) + 1)


def human_readable_int_or_auto(text: str) -> int:
    """--max-model-len's: also -1 or auto, the longest that fits the KV cache (vLLM's auto-fit)."""
    return -1 if text.strip() == "-1" or text.strip().lower() == "auto" else human_readable_int(text)


def checked(name: str, value, parse):
    """A Python API argument through its flag's own parser: the ranges and words of the CLI, as a ConfigError."""
    from servesim.simulator.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(name, f"must be a number, got {value!r}")
    if isinstance(value, int) and abs(value) > 2**63:  # past any bound, and past str()'s 4,300 digits (r161)
        raise ConfigError(name, f"must be at most {2**63:,} in size")
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(name, str(exc)) from None


def _show(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


COUNT = number(int, ge=1)  # a number of things: requests, repeats, replicas, jobs
SEED = number(int, ge=0)
JOBS = number(int, ge=1, le=256)  # worker processes: more than a machine can hold is a typo


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# a timing harness's threads: more than this machine's CPUs crashed OpenMP (99999) or timed oversubscription as
# the device's speed (1,000 on 2 CPUs: 25x slow, r129)
THREADS = number(int, ge=1, le=_cpus())
POSITIVE = number(float, gt=0)
NON_NEGATIVE = number(float, ge=0)
FRACTION = number(float, gt=0, le=1)  # a share such as gpu_memory_utilization
TOLERANCE = number(float, ge=1e-4, lt=1)  # a search's relative bracket width: finer is noise, and unbounded runs
REPLICAS = number(int, ge=1, le=MAX_REPLICAS)
OPEN_FRACTION = number(float, gt=0, lt=1)  # a share that must leave both parts non-empty (a holdout)


def nonempty_path(text: str) -> str:
    """A path flag: an empty one would silently mean the current directory; the API's checks (path_problem: r143,
    argv's undecodable bytes were an internal error once the tables were written)."""
    from servesim.simulator.files import path_problem

    if (problem := path_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


nonempty_path.__name__ = "path"


def nonempty_text(text: str) -> str:
    """A name flag (a model, a GPU): empty is refused, never read as the current folder (r151)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a value or leave the flag out")
    return text


nonempty_text.__name__ = "name"


def plain_name(text: str) -> str:
    """A name that may become a file's (a profile's --name): one plain path component, never a path."""
    from servesim.simulator.files import PLAIN_NAME

    if not PLAIN_NAME.match(text):
        raise argparse.ArgumentTypeError(f"must be a plain name (letters, digits, '_', '.', '+', '-'; at most 128, "
                                         f"not a path), got {text!r:.60}")
    return text


plain_name.__name__ = "name"


def add_executor_arguments(parser) -> None:
    """Where parallel work runs (simulator/parallel.py): the same two flags on every command that fans out."""
    parser.add_argument("--executor", choices=["process", "ray"], default="process",
                        help="worker processes here, or a Ray cluster (pip install -e '.[ray]')")
    parser.add_argument("--ray-address", help="a Ray cluster (default: RAY_ADDRESS, else a local Ray)")
