"""The base of every settings model (scenario, workload, profile, hardware, model): one validation boundary.

pydantic's lax mode would take `true` for an integer, an integer with a thousand digits, or a megabyte of
text for a name; each then fails far from the input, hangs, or silently becomes 1. Here a value is refused
where it is read, naming its field: unknown keys, inf and nan, a bool where a number is meant, an integer
beyond 2**53 and a string longer than MAX_TEXT. Ranges that a field needs (tokens, requests, replicas) are
its own `Field` bounds; the shared ones are below.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from servesim.simulator.errors import is_utf8

MAX_INT = 2**53  # the largest integer a float (and so JSON, pandas, numpy) holds exactly
MAX_TEXT = 4096  # characters in a name, path or model id
MAX_TOKENS = 2**24  # tokens in one prompt, output or context (16.7 M: above every model's context today)
MAX_REQUESTS = 10_000_000  # requests in one run (split a longer one by duration or seed)
MAX_REPLICAS = 1024  # engines in one run (replicas x DP ranks + prefill replicas), each its own scheduler and KV pool
MAX_CLIENTS = 1_000_000  # closed-loop clients
MAX_SEQS = 2**20  # requests in one step (max_num_seqs, batch sizes)
MAX_BLOCK_SIZE = 2**16  # tokens per KV block
MAX_BLOCKS = 2**23  # KV blocks in one run, all pools together (up to some 150 bytes of bookkeeping each)
MAX_GPUS = 4096  # GPUs in one model parallel group
MAX_NESTING = 64  # levels of lists and mappings in one value: deeper is no setting, and a cycle never ends
MAX_GIB = 2.0**20  # GiB of any memory (a PiB)
MAX_SECONDS = 1e9  # simulated seconds (some 30 years)
MAX_RATE = 1e9  # requests per second

Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]  # a wait: past 1e9 s the clock's resolution swallows latencies
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]  # one prompt's, output's or context's length
GiB = Annotated[float, Field(gt=0, le=MAX_GIB)]  # a device's or a pool's memory
MIN_RATE = 1e-6  # requests per second: one in 11 days
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]  # requests per second (one in 11 days at the least)
Speed = Annotated[float, Field(ge=1e-3, le=1e9)]  # GB/s or TFLOP/s: a slower device would stall the clock
Cost = Annotated[float, Field(ge=0, le=1e6)]  # ms, us or ns of one cost-model term: a million is no step time
Efficiency = Annotated[float, Field(ge=1e-3, le=100)]  # of the datasheet's bandwidth or FLOP/s


def _takes(annotation, kind: type) -> bool:
    return annotation is kind or any(_takes(a, kind) for a in get_args(annotation))


def _only_bool(annotation) -> bool:
    """A switch: bool, or bool | None, and nothing else (pydantic's lax mode took "no", "off" and 1 for one)."""
    return annotation is bool or (_takes(annotation, bool) and all(a in (bool, type(None)) for a in get_args(annotation)))


def _literals(annotation) -> set:
    """The values a Literal anywhere in the annotation names (max_model_len's "auto")."""
    if getattr(annotation, "__origin__", None) is Literal:
        return set(get_args(annotation))
    return set().union(*(_literals(a) for a in get_args(annotation))) if get_args(annotation) else set()


def _number_not_text(annotation, value: str) -> bool:
    """Text given for a number (a quoted "64"): pydantic's lax mode took it, so "5" and 5 were two sweep values
    of one run; a field that also takes text, or this word among its literals, takes it."""
    return (_takes(annotation, int) or _takes(annotation, float)) and not _takes(annotation, str) \
        and value not in _literals(annotation)


class _Bad(ValueError):
    def __init__(self, path: list[str], message: str):
        super().__init__(message)
        self.path = path


def _expected(annotation) -> str:
    """What a field takes, in words, for a value of another kind (true given for an int | None)."""
    kinds = [word for kind, word in ((int, "a number"), (float, "a number"), (str, "text"), (dict, "a mapping"),
                                     (list, "a list")) if _takes(annotation, kind)]
    kinds += [repr(v) for v in sorted(_literals(annotation), key=str) if not isinstance(v, bool)]
    kinds = list(dict.fromkeys(kinds + ["null"] * _takes(annotation, type(None)))) or ["a number or text"]
    return ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]


def _item(annotation, i: int):
    """The annotation of a list's or a tuple's i-th item (a curve point's time: float), None where unknown."""
    for a in [annotation, *get_args(annotation)]:  # list[...] | None: the list's
        origin, args = getattr(a, "__origin__", None), get_args(a)
        if origin is list and len(args) == 1:
            return args[0]
        if origin is tuple and args:
            return args[0] if len(args) == 2 and args[1] is Ellipsis else args[i] if i < len(args) else None
    return None


def _check(value: Any, takes_bool: bool, path: list[str], annotation=None) -> None:
    if isinstance(value, (bytes, bytearray)):  # r149: pydantic's lax mode decoded it, where --set refuses it
        raise _Bad(path, f"{bytes(value)!r:.60} is bytes: a setting takes text")
    if isinstance(value, bool):
        if not takes_bool:
            raise _Bad(path, f"{_expected(annotation) if annotation is not None else 'a number or text'} is "
                             f"expected, not {str(value).lower()}")
    elif isinstance(value, int):
        if abs(value) > MAX_INT:
            raise _Bad(path, f"a {len(str(abs(value)))}-digit integer: at most {MAX_INT:,} in size")
    elif isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise _Bad(path, f"{len(value):,} characters: at most {MAX_TEXT:,}")
        if not is_utf8(value):  # r143: a lone surrogate (argv's undecodable bytes) crashed the config's writer
            raise _Bad(path, f"{value!r:.60} is not UTF-8 text")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            inner = _item(annotation, i)
            _check(item, takes_bool if inner is None else _takes(inner, bool), path + [str(i)], inner)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, False, path)
            _check(item, True, path + [str(key)])  # a nested mapping's own model checks its bools


def refuse(key: str, message: str):
    """A model validator's error about one of its keys: first_error names `section.key`, not the section."""
    raise PydanticCustomError("setting_bound", "{message}", {"key": key, "message": message})


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def __setattr__(self, name: str, value) -> None:
        """An edit to a setting that does not exist (scenario.engine.max_num_seq = 5) is a ConfigError naming it."""
        if name not in type(self).model_fields and not name.startswith("_"):
            from servesim.simulator.errors import ConfigError

            raise ConfigError(name, f"unknown setting of {type(self).__name__} (one of "
                                    f"{', '.join(type(self).model_fields)})")
        if isinstance(value, (bytes, bytearray)):  # r149: read as text when the scenario was dumped, unlike --set's
            from servesim.simulator.errors import ConfigError

            raise ConfigError(name, f"{bytes(value)!r:.60} is bytes: a setting takes text")
        super().__setattr__(name, value)

    def model_copy(self, *, update=None, deep: bool = False):
        """A copy, its `update` keys checked as an edit's: pydantic drops a key no setting has, unsaid (r160)."""
        unknown = next((k for k in update or {} if k not in type(self).model_fields), None)
        if unknown is not None:
            from servesim.simulator.errors import ConfigError

            raise ConfigError(str(unknown), f"unknown setting of {type(self).__name__} (one of "
                                            f"{', '.join(type(self).model_fields)})")
        return super().model_copy(update=update, deep=deep)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict):  # (a model instance was checked when it was made)
            for key, value in data.items():
                if not isinstance(key, str):  # a YAML key 1, true or null: no setting is named so
                    raise PydanticCustomError("setting_bound", "{message}", {
                        "key": str(key), "message": f"a setting's name is text; {key!r} is no setting's name"})
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                try:
                    _check(value, field is None or _takes(field.annotation, bool), [str(key)],
                           None if field is None else field.annotation)
                    if field is not None and _only_bool(field.annotation) and not isinstance(value, (bool, type(None))):
                        raise _Bad([str(key)], f"true or false is expected, not {value!r:.40}")  # lax: "no", 1
                    if field is not None and isinstance(value, str) and _number_not_text(field.annotation, value):
                        finite = value.strip().lower().lstrip("+-") in ("inf", "infinity", "nan")
                        raise _Bad([str(key)], f"a {'finite ' if finite else ''}number is expected, not the text "
                                               f"{value!r:.40}")
                except _Bad as exc:  # located at the key (first_error appends ctx["key"] to the location)
                    raise PydanticCustomError("setting_bound", "{message}",
                                              {"key": ".".join(exc.path), "message": str(exc)}) from None
        return data


class ReadsTraceFormat(Settings):
    """A setting reading a file whose `format` it may name: an unknown one is refused where it is given (r143: the
    trace workload's; r147: a lengths file's and an empirical distribution's), not when a run reads the file."""

    @model_validator(mode="after")
    def _known_format(self):
        from servesim.workloads.traces import TRACE_FORMATS

        fmt = getattr(self, "format", None)
        if fmt is not None and fmt not in TRACE_FORMATS:
            refuse("format", f"unknown trace format {fmt!r}; expected one of {', '.join(TRACE_FORMATS)}")
        return self
