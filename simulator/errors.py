"""One error type for bad user input, so the CLI can print one line and exit 2; pydantic's and json's errors in
its terms."""

from __future__ import annotations

import re


class ConfigError(ValueError):
    """Bad input. The message starts with the field it is about: 'engine.block_size: ...'."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(field, message)  # args rebuild it (SimPy re-raises a process's error as type(e)(*e.args))

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class MissingKernelTable(ConfigError):
    """A GPU's kernel tables lack a whole kind of kernel (MLA modules, NCCL collectives): the roofline may stand
    in, said so. A table that exists but lacks the shape asked for is a plain ConfigError: refused."""


class TableGap(ConfigError):
    """The kernel tables hold no timing for a setting the user chose (a TP size's all-reduce): refused, naming the
    setting, with profile=roofline offered in its place."""


# discriminated-union tags pydantic puts in an error's location; the user never wrote them
_UNION_TAGS = {"synthetic", "sessions", "trace", "fixed", "uniform", "lognormal", "zipf", "empirical"}


_USER_KEYED = {"slo_classes"}  # mappings whose keys the user names: a key spelt as a tag is theirs (r175)
_TYPE_TAG = re.compile(r"^(str|int|float|bool|none|dict\[.*\]|list\[.*\]|tuple\[.*\]|literal\[.*\]|constrained-.*|function-.*)$")  # union members


_NO_SPACE = " (YAML reads key:value without a space after the colon as one key: write key: value)"


def first_error(exc, section: str = "") -> tuple[str, str]:
    """pydantic's first error as (dotted field, short message); `section` is where the validated mapping sits
    (an error about the mapping as a whole is then that section's)."""
    errors = exc.errors()
    # a key:value written without its space reads as one key: that is the mistake, not what it left missing
    err = next((e for e in errors if e["type"] == "extra_forbidden" and ":" in str(e["loc"][-1])
                and e.get("input") is None), errors[0])
    loc = [section] if section else []
    # an unknown key is the user's, whatever its name (r174: `trace: x` in a trace workload was "workload: ...")
    key = tuple(err["loc"][-1:]) if err["type"] == "extra_forbidden" else ()
    where = tuple(err["loc"])[:len(err["loc"]) - len(key)]

    def tag(i: int) -> bool:  # a part pydantic put in the location, not a key the user named
        p = where[i]
        return isinstance(p, str) and bool(p in _UNION_TAGS or _TYPE_TAG.match(p)) and not (
            i and where[i - 1] in _USER_KEYED)

    loc += [str(p) for i, p in enumerate(where) if str(p) and not tag(i)]
    loc += [str(p) for p in key]
    if err["type"] == "setting_bound":  # raised for the whole mapping, about one key of it
        loc.append(err["ctx"]["key"])
        return ".".join(loc), err["ctx"]["message"]
    field = ".".join(loc)
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        # a kind's fields differ: said where the key is the kind's own (not an SLO class's inside a workload kind)
        kinds = [where[-1]] if where and where[-1] in _UNION_TAGS and tag(len(where) - 1) else []
        msg = f"unknown setting of the {kinds[-1]} kind" if kinds else "unknown setting"
        if ":" in str(err["loc"][-1]) and err.get("input") is None:  # {max_num_seqs:4}: one key, no value
            msg += _NO_SPACE
    elif err["type"] == "union_tag_not_found":  # a mapping without its kind: a section set replaces the default
        tag = err["ctx"]["discriminator"].strip("'")
        glued = [k for k in err.get("input") or {} if isinstance(k, str) and k.startswith(f"{tag}:")]
        msg = (f"{glued[0]!r} is read as one key{_NO_SPACE}" if glued else
               f"give its {tag} too: a setting of this section replaces the default one, so name the kind with "
               f"the fields, e.g. {field or 'it'}={{{tag}: ..., ...}}")
    elif err["type"] == "union_tag_invalid":
        msg = f"unknown kind {err['ctx']['tag']!r} (expected {err['ctx']['expected_tags']})"
    elif "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], (dict, list)):
        msg = f"{msg} (got {err['input']!r})"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return field, msg


# json.loads fails with JSONDecodeError (a ValueError), with ValueError for an integer of 4,300+ digits, and with
# RecursionError for nesting past the stack: every reader of a user's JSON catches all three, through these
JSON_ERRORS = (ValueError, RecursionError)


def unique_keys(pairs: list[tuple]) -> dict:
    """json.loads' object_pairs_hook for a user's records: a key given twice is refused (Python's json keeps the
    last silently; our YAML refuses it too)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice in one object")
        out[key] = value
    return out


def json_problem(exc: BaseException) -> str:
    """One line on why a user's JSON could not be read."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


def is_utf8(text: str) -> bool:
    """Whether text can be written as UTF-8: argv's undecodable bytes and lone surrogates cannot (r143, r146:
    internal errors once a config, table or result file recorded them)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A message as one line of plain text: a control character it quotes (an escape sequence or a line break in a
    file name) is shown as its escape, never sent to the terminal to act or to split the line."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)
