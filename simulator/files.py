"""Reading a user's settings file (scenario, profile, model): checked before it is parsed, so a directory, a
device, a huge file or bytes that are not UTF-8 get one line naming the field, never a traceback or a hang."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml

from simulator.errors import ConfigError

MAX_SETTINGS_BYTES = 16 << 20  # a scenario, profile or config.json is kilobytes; 16 MiB is not a settings file


def read_settings_text(path: str | Path, field: str, limit: int = MAX_SETTINGS_BYTES) -> str:
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        raise ConfigError(field, f"file not found: {path}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(field, f"{path} is not a regular file")
    if st.st_size > limit:
        raise ConfigError(field, f"{path} is {st.st_size:,} bytes, more than a settings file can be ({limit:,})")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {exc.strerror or exc}") from None


def load_yaml(text: str, field: str, where: str):
    """yaml.safe_load with its failures as one line (nesting deep enough to exhaust the stack included)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(field, f"{where} is not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise ConfigError(field, f"{where} nests too deeply to be a settings file") from None
