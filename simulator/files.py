"""Reading a user's settings file (scenario, profile, model): checked before it is parsed, so a directory, a
device, a huge file or bytes that are not UTF-8 get one line naming the field, never a traceback or a hang."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import warnings
from pathlib import Path

import yaml

from servesim.simulator.errors import ConfigError, is_utf8

MAX_SETTINGS_BYTES = 16 << 20  # a scenario, profile or config.json is kilobytes; 16 MiB is not a settings file
MAX_YAML_NODES = 1_000_000  # values after aliases are expanded ("billion laughs" expands 9 lines to 10**9)


def shared_data(*parts: str) -> Path | None:
    """../shared/data/<parts> beside the project or the working directory (where the project's data lives), or
    None."""
    here = Path(__file__).resolve().parent.parent
    for base in (here, working_folder()):
        p = base.parent.joinpath("shared", "data", *parts) if base is not None else None
        if p is not None and p.exists():
            return p
    return None


def working_folder() -> Path | None:
    """The current directory, or None where it was removed under the process (r154: every command failed,
    blaming --out, though every path given was absolute)."""
    try:
        return Path.cwd()
    except OSError:
        return None


def where_looked(path: str | Path) -> str:
    """For a missing file: where a relative path was looked for. A scenario's paths, like the command
    line's, resolve against the current directory, not the scenario file's folder."""
    if os.path.islink(path):  # the name is there, as a link to nothing or in a loop (r155: "not found")
        try:
            os.stat(path)
        except OSError as exc:
            import errno

            return " (a symbolic link in a loop)" if exc.errno == errno.ELOOP else \
                f" (a symbolic link to {os.readlink(path)}, which does not exist)"
    if Path(path).is_absolute():
        return ""
    here = working_folder()
    return f" (relative to the current directory, {here})" if here is not None else \
        " (relative to the current directory, which no longer exists)"


def read_settings_text(path: str | Path, field: str, limit: int = MAX_SETTINGS_BYTES) -> str:
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(field, f"file not found: {path}{where_looked(path)}") from None
    except OSError as exc:  # a link loop, a name too long, a folder that cannot be searched (r150: "not found")
        raise ConfigError(field, f"cannot read {path}: {exc.strerror or exc}") from None
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


def _expanded_size(node, sizes: dict, twice: list | None = None) -> int:
    """Values in `node` once every alias is expanded, each shared node counted once per use; a key given twice in
    one mapping refused, or (twice: a list) collected, as PyYAML's safe_load takes the last."""
    key = id(node)
    if key in sizes:
        if sizes[key] is None:
            raise yaml.YAMLError("an alias refers to the node that holds it")
        return sizes[key]
    sizes[key] = None
    if isinstance(node, yaml.MappingNode):
        keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
        if len(set(keys)) < len(keys):  # safe_load keeps the last silently; a setting given twice is a mistake
            dup = next(k for k in keys if keys.count(k) > 1)
            if twice is None:
                raise Refused(f"key {dup!r} is given twice in one mapping (line {node.start_mark.line + 1})")
            twice.append(dup)
        n = 1 + sum(_expanded_size(k, sizes, twice) + _expanded_size(v, sizes, twice) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(v, sizes, twice) for v in node.value)
    else:
        n = 1
    sizes[key] = n
    return n


class Refused(yaml.YAMLError):
    """YAML that parses but that no setting may hold (a key given twice, an explicit tag, an integer Python
    cannot read): refused wherever a setting is read, --set included (not taken as text)."""


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:str"}


def _no_explicit_tags(loader, node, seen: set) -> None:
    """A settings file says values as YAML reads them: an explicit tag (!!str 20, !!bool no, !!binary ...) would
    pass a value the plain rules refuse (20 as text, `no` as false)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        implicit = loader.resolve(yaml.ScalarNode, node.value, (node.style is None, node.style is not None))
        ok = node.tag == implicit
    else:
        ok = node.tag in _PLAIN_TAGS
    if not ok:
        raise Refused(f"the explicit tag {node.tag.replace('tag:yaml.org,2002:', '!!')} at line "
                      f"{node.start_mark.line + 1} is not taken: write the value plainly")
    for child in (node.value if isinstance(node, yaml.SequenceNode) else
                  [x for pair in node.value for x in pair] if isinstance(node, yaml.MappingNode) else ()):
        _no_explicit_tags(loader, child, seen)


class TooLarge(ValueError):
    """YAML whose aliases expand past MAX_YAML_NODES values."""


class _Loader(yaml.SafeLoader):
    """PyYAML's YAML 1.1, but numbers and booleans as YAML 1.2 (and Python, and the API) read them: 6e1 and 1.0e3
    are numbers (1.1 wants a dot and a signed exponent), 0777 is 777 (not octal 511: octal is 0o777), 1:00 is
    text (not 60), and only true and false are booleans (yes, no, on and off are text)."""

    def flatten_mapping(self, node):
        """Merge keys as YAML defines them: a key of the mapping itself wins over a merged one, and of the
        mappings in `<<: [a, b]` the earlier wins (PyYAML kept both pairs, the later winning: r169)."""
        own = sum(key.tag != "tag:yaml.org,2002:merge" for key, _ in node.value)
        super().flatten_mapping(node)
        merged, seen = [], set()
        for key, value in node.value[:len(node.value) - own]:  # the merged pairs, in the list's order
            if (key.tag, key.value) not in seen:
                seen.add((key.tag, key.value))
                merged.append((key, value))
        node.value[:len(node.value) - own] = merged


class _Dumper(yaml.SafeDumper):
    """Writes what _Loader reads back as the same value: a string such as '6e1' or '0777' is quoted."""


_INT, _FLOAT, _BOOL = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")  # YAML 1.2: yes, no, on, off are text
# underscores as Python reads them: one between two digits (1_000; r169: 6_4_ and 1__0 were read as 64 and 10)
_DIGITS = r"[0-9](?:_?[0-9])*"
_INT_RE = re.compile(rf"^(?:[-+]?{_DIGITS}|0o(?:_?[0-7])+|0x(?:_?[0-9a-fA-F])+)$")
_FLOAT_RE = re.compile(rf"^(?:[-+]?(?:\.{_DIGITS}|{_DIGITS}(?:\.(?:{_DIGITS})?)?)(?:[eE][-+]?{_DIGITS})?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


def _int(loader, node) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    base = 8 if digits.startswith("0o") else 16 if digits.startswith("0x") else 10
    return sign * int(digits[2:] if base != 10 else digits, base)


def _readable(construct):
    """An int constructor whose ValueError (past Python's 4,300 digits; PyYAML's 0x_) is one YAML error."""
    def read(loader, node):
        try:
            return construct(loader, node)
        except ValueError:
            text = str(node.value)
            raise Refused(f"{text[:20] + '...' if len(text) > 20 else text!r} (line {node.start_mark.line + 1}) is "
                          f"no integer Python reads" + (f": {len(text):,} digits" if len(text) > 20 else "")) from None
    return read


for _kind in (_Loader, _Dumper):
    _kind.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _BOOL)]
                                     for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    _kind.add_implicit_resolver(_BOOL, _BOOL_RE, list("tTfF"))
    _kind.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))  # before floats: 5 is an int
    _kind.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))
_Loader.add_constructor(_INT, _readable(_int))


def dump_yaml(data, flow: bool = False) -> str:
    """YAML text that safe_load_bounded reads back as exactly `data`, in its own key order (flow: one line)."""
    if flow:
        return yaml.dump(data, Dumper=_Dumper, default_flow_style=True, width=float("inf"), sort_keys=False)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


class _SafeLoader(yaml.SafeLoader):
    """PyYAML's own YAML 1.1 (yes is true, 0777 is octal 511): for a file another program reads with
    yaml.safe_load (vLLM's --config), read here as it reads it."""


_SafeLoader.add_constructor(_INT, _readable(yaml.SafeLoader.construct_yaml_int))


def safe_load_bounded(text: str, as_pyyaml: bool = False, twice: list | None = None):
    """yaml.safe_load, but aliases that expand beyond MAX_YAML_NODES values are refused before anything is built.
    Numbers and booleans as _Loader reads them, or (as_pyyaml) as PyYAML's yaml.safe_load does, explicit tags
    included. Raises yaml.YAMLError, RecursionError (nesting past the stack) or TooLarge."""
    loader = (_SafeLoader if as_pyyaml else _Loader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if (n := _expanded_size(node, {}, twice)) > MAX_YAML_NODES:
            raise TooLarge(f"expands to {n:,} values through its aliases, more than a setting can hold "
                           f"({MAX_YAML_NODES:,})")
        if not as_pyyaml:
            _no_explicit_tags(loader, node, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(text: str, field: str, where: str, as_pyyaml: bool = False, twice: list | None = None):
    """safe_load_bounded with its failures as one line naming the field and the place."""
    try:
        return safe_load_bounded(text, as_pyyaml, twice)
    except TooLarge as exc:
        raise ConfigError(field, f"{where} {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line: a reader error has two
        raise ConfigError(field, f"{where} is not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise ConfigError(field, f"{where} nests too deeply to be a settings file") from None


def split_values(raw: str) -> list[str]:
    """'a,{x: 1, y: 2},[3, 4]' -> ['a', '{x: 1, y: 2}', '[3, 4]']: commas inside brackets or quotes do not split."""
    parts, depth, quote, cur, escaped, last = [], 0, None, [], False, ""
    for ch in raw:
        if quote:  # YAML: a backslash escapes the next character inside double quotes only
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "'\"" and (last in ("", ",", "[", "{", ":") or (ch == "'" and cur and cur[-1] == "'")):
            quote = ch  # a quote opens only a scalar (it's is plain text), or goes on after '' (YAML's escaped ')
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur, last = [], ""
            continue
        cur.append(ch)
        if not ch.isspace():
            last = ch
    parts.append("".join(cur))
    return parts


def repeated_columns(path: str | Path) -> list[str]:
    """A CSV header's names given more than once: pandas would rename the copies (x.1) and read the first."""
    import csv
    from collections import Counter

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return []  # the reader that follows says what is wrong with the file
    return [name for name, n in Counter(c.strip() for c in header).items() if n > 1 and name]


def read_table(path: str | Path, field: str, columns: list[str] | tuple[str, ...] = ()):
    """A parquet (by suffix) or CSV table a user points at: a damaged, empty or foreign file, or one without
    the columns it needs, is one line naming the field and the file."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"{path} is not a file")
    try:
        with warnings.catch_warnings():  # a row longer than the header: its extra fields would be dropped
            warnings.simplefilter("error", pd.errors.ParserWarning)
            # index_col=False: a first column is never taken as the index (a row ending in a comma shifted them all)
            # a run's id is text: 244292e93348 read as a number was 2.4e98 (r151: its run folder not found)
            table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, index_col=False,
                                                                                         dtype={"run_id": str})
    except Exception as exc:  # pyarrow and pandas raise many kinds for a damaged file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(field, f"cannot read {path} as a {'parquet' if path.suffix == '.parquet' else 'CSV'} "
                                 f"table: {first}") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ConfigError(field, f"{path} has no column {', '.join(map(repr, missing))}")
    twice = repeated_columns(path) if path.suffix != ".parquet" else []
    if twice:
        raise ConfigError(field, f"{path} names column {', '.join(map(repr, twice))} twice: which one is meant?")
    return table


PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")  # a name that is one plain path component


def file_part(name: str) -> str:
    """A free-text name (a model's, a profile's) as part of one file name: a `/` or `..` in it would put the file
    elsewhere (a hostile model.name wrote outside the profile cache: round 80)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("._")[:80] or "unnamed"


def refuse_folder_name(path, field: str) -> None:
    """A file's name that ends with a slash names a folder (`--out new/`): refused, not written as a file `new`."""
    if isinstance(path, str) and path.endswith(("/", os.sep)):
        raise ConfigError(field, f"{path} names a folder (it ends with '/'): give a file name")


def refuse_below_a_file(path: Path, field: str, message: str) -> None:
    """The nearest existing folder above `path` must be one: a file there (`s.yaml/out`) leaves nowhere to write.
    `message` names it as `{parent}`."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(field, message.format(parent=parent))
            return


# endings that name a file's format: a file of another format under one of them misleads whoever reads it
FORMAT_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".arrow", ".feather", ".xlsx",
                   ".pkl", ".pickle", ".gz", ".bz2", ".xz", ".zst", ".zip")  # compressed: servesim writes plain text


def named_for(path: str | Path, field: str, written: str, suffixes: tuple[str, ...], only: bool = True) -> None:
    """A file to write is named for what it holds: with `only`, its name ends in one of `suffixes` (a profile is
    read back by that ending); else a name ending in another format's (a .parquet holding JSON lines) is refused."""
    suffix = Path(path).suffix
    if only and suffix not in suffixes or not only and suffix.lower() in set(FORMAT_SUFFIXES) - set(suffixes):
        # `only`: as its reader matches it (.YAML is no profile's name); else in any case (x.PARQUET, x.JSONL)
        raise ConfigError(field, f"{path}: {written}: give a name ending in {' or '.join(suffixes)}")


def profile_file(path: str | Path, field: str) -> None:
    """A profile to write ends in .yaml or .yml, the only name a profile is read back by."""
    named_for(path, field, "a profile is written as YAML (servesim reads a profile file by its ending)",
              (".yaml", ".yml"))


RUN_MANIFEST = ".servesim-files"  # the files the last run in a folder wrote: only those are an earlier run's


def written_before(folder: Path) -> set[str]:
    """The files the last run written to `folder` wrote (its manifest): an earlier run's files a new run does not
    write again are removed, and only those; a file of the same name the user put there is left alone."""
    try:
        return set((Path(folder) / RUN_MANIFEST).read_text(encoding="utf-8").split())
    except (OSError, UnicodeDecodeError):
        return set()


def record_written(folder: Path, names) -> None:
    (Path(folder) / RUN_MANIFEST).write_text("".join(f"{name}\n" for name in sorted(set(names))), encoding="utf-8")


_HELD: list = []  # while a command of the CLI runs: {real path: descriptor} of the results folders it writes


@contextlib.contextmanager
def folders_held():
    """The scope of one CLI command: the results folders it starts writing (hold_folder) are held to its end."""
    _HELD.append({})
    try:
        yield
    finally:
        for fd in _HELD.pop().values():
            os.close(fd)


def hold_folder(folder, field: str = "--out") -> None:
    """A results folder the command under way writes into is held (an advisory lock on the folder) until it ends:
    another command writing into it meanwhile is refused, not let replace the tables of the first (r154: two
    sweeps into one folder both exited 0, one table left). Outside the CLI (the API), and where the folder cannot
    be opened (the writer says why), nothing is held."""
    if not _HELD:
        return
    try:
        import fcntl

        Path(folder).mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(folder)
        if any(key in held for held in _HELD):
            return
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    except (ImportError, OSError):
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(field, f"{folder}: another servesim command is writing into it; wait for it to end or "
                                 f"write elsewhere") from None
    _HELD[-1][key] = fd


def write_together(folder: Path, writers: dict, remove=()) -> None:
    """A run's files, each written to a hidden name beside its own, then all renamed at once, the earlier run's
    files named in `remove` removed with them (Ctrl-C and SIGTERM held meanwhile): a write that fails or is cut
    leaves the earlier run's files whole, never a new summary beside an earlier run's tables (r154: a full disk or
    Ctrl-C mid-write did, and plots drew the earlier run's steps), nor its plot beside this run's (r155)."""
    from servesim.simulator.interrupts import held, raise_caught

    staged = []
    try:
        for name, write in writers.items():
            tmp = Path(folder) / f".{name}.servesim-tmp"
            staged.append(tmp)
            tmp.unlink(missing_ok=True)  # a killed writer's leftover, or a link there: never written through
            write(tmp)
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    caught: list = []
    with held(caught):
        for name in remove:
            (Path(folder) / name).unlink(missing_ok=True)
        for name, tmp in zip(writers, staged):
            os.replace(tmp, Path(folder) / name)
    raise_caught(caught)


def present(path: Path) -> bool:
    """Something is at the name, even a link to nothing."""
    return path.exists() or path.is_symlink()


def removed_note(folder: Path, stale: list[str]) -> str:
    return f"servesim: note: removed {', '.join(stale)}: an earlier run's in {folder}, which this run did not write"


def add_written(folder: Path, names) -> None:
    """Files a command wrote added to its folder's manifest (a run's, a sweep's, search's, recommend's or
    compare's tables), so no one-file writer (a workload, a profile, a plot) replaces them."""
    record_written(folder, written_before(folder) | set(names))


def clear_earlier(folder: Path, names, owned) -> None:
    """Before a command rerun into its folder writes its first file: the earlier run's files it lists, of `names`
    or that `owned(name)` calls its own, are removed (Ctrl-C and SIGTERM held meanwhile), so a rerun cut half-way
    leaves some of its own files, never an earlier run's beside them (r155: a new table.csv beside the earlier
    summary.json and plots)."""
    from servesim.simulator.interrupts import held, raise_caught

    folder, names = Path(folder), set(names)
    before = written_before(folder)
    gone = {n for n in before if (n in names or owned(n)) and (folder / n).is_file()}
    caught: list = []
    with held(caught):
        for name in gone:
            (folder / name).unlink()
        if gone:
            record_written(folder, before - gone)
    raise_caught(caught)


def replace_written(folder: Path, names, owned) -> list[str]:
    """A command rerun into its folder: the files its earlier run listed and `owned(name)` calls its own (its plots,
    one per run or candidate) that this run did not write are removed, as `run` removes its own; then the manifest
    lists what it wrote. A stale plot beside a new table read as this run's (round 127). Returns those removed."""
    folder, names = Path(folder), set(names)
    before = written_before(folder)
    stale = sorted(n for n in before - names if owned(n) and ((folder / n).is_file() or (folder / n).is_symlink()))
    for name in stale:
        (folder / name).unlink()
    record_written(folder, (before - set(stale)) | names)
    return stale


def plot_file(name: str) -> bool:
    """The figures compare and validate serving draw, one set per run."""
    return name.endswith((".png", ".svg")) and name.startswith(("cdf-", "timeline-"))


def refuse_run_file(path: Path, field: str) -> None:
    """A file another command writes (a workload, a profile, a plot): not one a run's manifest lists, nor the
    manifest, which a later run into that folder reads to know the earlier run's files."""
    if path.name == RUN_MANIFEST or path.name in written_before(path.parent):
        raise ConfigError(field, f"{path} is a file of the servesim run in {path.parent} ({RUN_MANIFEST} lists "
                                 f"{'the others' if path.name == RUN_MANIFEST else 'it'}): give a name of its own")


def output_file(path: str | Path, field: str, inputs=(), profile: bool = False) -> Path:
    """A file to write: its folder is made if missing; a folder, or a parent that is a file, is refused by name,
    and so is one of the command's `inputs` (a file, or a file already inside an input folder): written over,
    the input would be gone."""
    refuse_folder_name(path, field)
    path = Path(path)
    refuse_link(path, field)
    if path.is_dir():
        raise ConfigError(field, f"{path} is a directory: give a file name")
    refuse_run_file(path, field)
    refuse_writing_over(path, field, inputs, profile)
    refuse_below_a_file(path, field, f"{{parent}} is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def package_folders() -> list[Path]:
    """servesim's own folders: its code and the built-in profiles, models and GPUs every run reads."""
    from importlib.util import find_spec

    folders = []
    for name in ("servesim", "servesim.simulator", "servesim.workloads", "servesim.policies", "servesim.calibration"):
        spec = find_spec(name)  # the folder of its __init__ (a source tree's `servesim` also searches the tree's root)
        if spec is not None and spec.origin:
            folders.append(Path(spec.origin).resolve().parent)
    return folders


def refuse_package_files(path: str | Path, field: str, profile: bool = False) -> None:
    """Nothing is written among servesim's own files (a table over a built-in profile, a run's config.yaml among
    them, read back as one), except a profile (and its fit's tables beside it) into calibration/profiles/ by a
    command that makes profiles (`profile`: calibrate import and fit, how the built-in ones are made)."""
    target = Path(path).resolve()
    for folder in package_folders():
        if target == folder or target.is_relative_to(folder):
            if profile and folder.name == "calibration" and target.parent == folder / "profiles":
                _refuse_replacing_a_written_profile(target, path, field)
                return
            raise ConfigError(field, f"{path} lies among servesim's own files ({folder}: its code, built-in "
                                     f"profiles, models and GPUs): write elsewhere")


MADE_PROFILE_SOURCES = ("aiconfigurator-core", "servesim calibrate", "fitted")  # what commands write


def _refuse_replacing_a_written_profile(target: Path, path, field: str) -> None:
    """A built-in profile that a command made (its `source` says which) may be made again; one written by hand (the
    teaching constants, the roofline) may not be replaced."""
    if not target.is_file():
        return
    try:
        source = load_yaml(target.read_text(encoding="utf-8"), field, str(target)).get("source")
    except (OSError, UnicodeDecodeError, ConfigError, AttributeError):
        source = None
    if not (isinstance(source, str) and source.startswith(MADE_PROFILE_SOURCES)):
        raise ConfigError(field, f"{path} is a built-in profile written by hand (source: {source!r}), not made by a "
                                 f"command: write elsewhere")


def refuse_writing_over(path: str | Path, field: str, inputs, profile: bool = False) -> None:
    """`path` names one of `inputs` (str or Path; names that are no file pass), or an existing file inside an input
    folder (a real run's records), or lies among servesim's own files (`profile`: as refuse_package_files): refused
    before any work. Nor one that is no regular file (r149: a FIFO there blocked the writer for ever)."""
    if Path(path).exists() and not Path(path).is_file() and not Path(path).is_dir():
        raise ConfigError(field, f"{path} is not a regular file (a FIFO, a device or a socket): servesim writes "
                                 f"files only")
    refuse_package_files(path, field, profile)
    target = Path(path).resolve()
    for given in inputs:
        if not given:
            continue
        src = Path(given).resolve()
        if target == src or (src.is_dir() and target.exists() and target.is_relative_to(src)) or \
                _same_file(target, src):  # a hard link is another name of the same file
            raise ConfigError(field, f"{path} would write over the input {given}: write elsewhere")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.is_file() and b.is_file() and os.path.samefile(a, b)
    except OSError:
        return False


OUTPUT_SUFFIXES = (".json", ".jsonl", ".csv", ".txt", ".png", ".svg", ".parquet", ".yaml", ".prom")


def linked(path: str | Path) -> bool:
    """A symbolic link, or a file with another name (a hard link): writing at this name would change what the other
    name holds."""
    path = Path(path)
    try:
        return path.is_symlink() or (path.is_file() and path.stat().st_nlink > 1)
    except OSError:
        return False


def refuse_link(path: str | Path, field: str) -> None:
    """servesim writes its own files, never through a link: a symbolic link sitting at a name a command writes would
    send the write to its target, and a hard link would change the file's other name (a kernel table, a real run's
    records, a scenario), outside the results or over what a command reads."""
    path = Path(path)
    if path.is_symlink():
        raise ConfigError(field, f"{path} is a symbolic link (to {os.readlink(path)}): servesim writes its own files, "
                                 f"never through a link; remove it or write elsewhere")
    if linked(path):
        raise ConfigError(field, f"{path} is a hard link (the file has {path.stat().st_nlink} names): servesim writes "
                                 f"its own files, never through a link; remove it or write elsewhere")


def refuse_folder_over_inputs(out: str | Path, names, field: str, inputs) -> None:
    """An output folder whose files (`names`) would replace one of `inputs`: a scenario called config.yaml in the
    run's --out, a sweep.yaml in the sweep's, a simulation folder given as compare's input and its --out; or that
    holds a link at one of those names; or that cannot be a folder (a file, or below one): all before any work."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(field, f"{out} is a file, not a results folder")
    refuse_below_a_file(out, field, f"{out} lies below {{parent}}, which is a file, not a folder")
    refuse_other_results(out, names, field)
    for name in names:
        refuse_link(Path(out) / name, field)
        refuse_writing_over(Path(out) / name, field, inputs)
        if Path(name).suffix and (Path(out) / name).is_dir():  # a file's name (runs/ is a folder's): found only
            # when written, after the run (round 83)
            raise ConfigError(field, f"{Path(out) / name} is a folder, where the results' {name} goes")


# a results folder's own table, by the command that writes it (compare's and validate's command.txt before the
# summary.json they write too: r167, a run replaced compare's summary, and a sweep called the folder a run's)
RESULTS_OF = {"command.txt": "a comparison's or validation's", "summary.json": "a run's", "sweep.csv": "a sweep's",
              "max_rate.csv": "a search max-rate's", "replicas.csv": "a search replicas'",  # (r169: one kind)
              "recommend.json": "recommend's"}


COMPARISON = RESULTS_OF["command.txt"]  # the kind compare, validate and calibrate's folders are


def refuse_other_results(out: Path, names, field: str, kind: str | None = None) -> None:
    """A command writing its results (`names`, or of `kind`) into a folder holding another command's, or into a
    sweep's runs/: their files would mix, and a plot of the folder draw one as the other (r166: a run's files beside
    sweep.csv, `plot --kind timeline` drawing them; r168: compare's over a run's, locking the run out of its own)."""
    mine = {kind} if kind else {RESULTS_OF[n] for n in names if n in RESULTS_OF}
    out = Path(out).resolve()  # (r168: runs/x/.. and a link to runs/ passed as other names)
    if not mine or not out.is_dir():
        return
    for marker, whose in RESULTS_OF.items():
        if (out / marker).is_file():
            if whose in mine:  # its own kind (a rerun): the first marker found says whose folder it is
                break
            raise ConfigError(field, f"{out} holds {whose} results ({marker}): this command's would mix with them; "
                                     f"give a folder of its own")
    if out.name == "runs" and (out.parent / "sweep.yaml").is_file():
        raise ConfigError(field, f"{out} is the runs folder of the sweep in {out.parent}: give a folder of its own")


def refuse_sweep_point(out: str | Path, field: str) -> None:
    """A command's run written into a sweep's runs/<id> (its point.json there): the sweep's table would disagree
    with it (r175: a run replaced a point's files, its sweep.csv row left saying otherwise). The sweep's own
    rewrite of a point is not refused."""
    out = Path(out).resolve()
    if out.parent.name == "runs" and (out.parent.parent / "sweep.yaml").is_file() and (out / "point.json").is_file():
        raise ConfigError(field, f"{out} is a run of the sweep in {out.parent.parent} (its point.json): its table "
                                 f"would disagree with it; give a folder of its own")


def refuse_folder_holding_inputs(out: str | Path, field: str, inputs) -> None:
    """A results folder that is or holds one of `inputs`: the command's files (tables, summaries, plots, logs)
    would land among what it reads, and one could replace it. (A folder of its own inside an input folder, such as
    a real run's, is fine: nothing there is replaced.) Nor among servesim's own files."""
    refuse_package_files(out, field)
    target = Path(out).resolve()
    for given in inputs:
        if given and Path(given).resolve().is_relative_to(target):
            how = "is" if Path(given).resolve() == target else "holds"
            raise ConfigError(field, f"{out} {how} the input {given}: write the results elsewhere")


def appended_results(text: str) -> int:
    """How many JSON objects, one a line, the text holds where it holds more than one (else 0): a `vllm bench
    serve --append-result` file, which adds each run's result as a line."""
    import json

    from servesim.simulator.errors import JSON_ERRORS

    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return 0
    try:
        return len(lines) if all(isinstance(json.loads(line), dict) for line in lines) else 0
    except (*JSON_ERRORS,):
        return 0


def path_problem(value) -> str | None:
    """Why a value cannot name a path to write (the API's as the CLI's --out): not text, empty (the current
    folder, unsaid), or holding a NUL byte (r130: the API wrote into the working folder, or raised ValueError)."""
    import os

    if not isinstance(value, (str, os.PathLike)):
        return f"must be a path (str or os.PathLike), got {type(value).__name__}"
    text = os.fspath(value)
    if not isinstance(text, str):
        return f"must be a path as text, got {type(text).__name__}"
    if not text.strip():
        return "must be a path, got an empty string"
    if "\x00" in text:
        return f"{text!r:.80}: a path holds no NUL byte"
    if not is_utf8(text):  # r143: the tables that record it could not be written, after the runs
        return f"{text!r:.80}: a path that is not UTF-8 text (servesim records its outputs' paths as UTF-8)"
    long = next((part for part in text.split(os.sep) if len(part.encode("utf-8", "surrogateescape")) > 255), None)
    if long is not None:
        return f"{long[:40]}...: a name past the file system's 255 bytes"
    if len(text.encode("utf-8", "surrogateescape")) >= 4096:  # PATH_MAX (r155: the API's write raised OSError)
        return f"{text[:40]}...: a path of {len(text.encode('utf-8', 'surrogateescape')):,} bytes, past the 4,096 " \
               f"a path may have"
    try:  # r154: a loop of links was an internal error (pathlib's RuntimeError), a link to nothing refused late
        os.stat(text)
    except OSError as exc:
        import errno

        if exc.errno == errno.ELOOP:
            return f"{text}: too many levels of symbolic links (a loop)"
        if os.path.islink(text):
            return f"{text} is a symbolic link to {os.readlink(text)}, which does not exist"
    return None
