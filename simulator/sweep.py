"""`servesim sweep`: the product of setting grids, run in parallel, one tidy table out.

Each run writes its own outputs under RUNS/<id>/ atomically (a temporary folder renamed
when complete); <id> hashes the run's whole resolved configuration and servesim's code, so a
rerun skips exactly the runs that would come out the same, a crash loses only the run in
flight, and the table is rewritten (atomically) after every run. A failing run is a row with
its error.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import math
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from servesim.simulator.errors import JSON_ERRORS, ConfigError
from servesim.simulator.files import hold_folder, load_yaml, split_values
from servesim.simulator.rederive import at


def _values(spec: str, flag: str) -> tuple[str, list]:
    if "=" not in spec:
        raise ConfigError(flag, f"{spec!r}: use key=v1,v2,...")
    from servesim.simulator.config import SETTING_PATH

    key, raw = spec.split("=", 1)
    if not SETTING_PATH.match(key.strip()):  # checked before the values are split, so named by the flag it was in
        raise ConfigError(flag, f"{spec[:80]!r}: KEY must be a dotted setting name, e.g. engine.max_num_seqs")
    parts = split_values(raw)
    if not any(v.strip() for v in parts):
        raise ConfigError(flag, f"{key}: no values")
    if not all(v.strip() for v in parts):  # 4,,8 or 4, : a value left out by mistake, never dropped unsaid
        raise ConfigError(flag, f"{key}: an empty value in {raw!r} (two commas, or one at an end); quote an empty "
                                f"text as ''")
    values = [load_yaml(v, flag, f"{key.strip()} value {v.strip()!r}") for v in parts]
    return key.strip(), values


MAX_RUNS = 100_000  # points x seeds in one sweep: past this the table, not the simulation, is the mistake


def expand(grids: list[str], zips: list[str], seeds: int, base_seed: int = 0, searched: str | None = None,
           fixed: list[str] = ()) -> list[dict]:
    """Every point: the product of the grids, times the zipped axis, times the seeds. `fixed` are the --set
    settings: one that is also an axis would be silently overridden, so it is refused."""
    axes = [(*_values(g, "--grid"), "--grid") for g in grids] + [(*_values(z, "--zip"), "--zip") for z in zips]
    return grid_points(axes, seeds, base_seed, searched, fixed)


def first_seed(scenario, sets: list[str], base_seed: int | None) -> int:
    """--base-seed, else the seed the scenario (with its --set values) gives. Only the seed is read: the rest may
    be incomplete without the grid (a trace workload whose path is a grid axis)."""
    from servesim.simulator.config import apply_overrides, load_scenario_file, parse_scenario

    if base_seed is not None:
        if any(s.split("=", 1)[0].strip() == "seed" for s in sets):  # one would silently replace the other
            raise ConfigError("--base-seed", "the runs' first seed, given twice: leave out --set seed=... (or "
                                             "--base-seed, and the --set seed is the first)")
        return base_seed
    if isinstance(scenario, dict):
        data = scenario
    else:
        data = load_scenario_file(scenario) if scenario else {}
    if not isinstance(data, dict):  # the points' own check names it
        data = {}
    seeds = [s for s in sets if s.split("=", 1)[0].strip() == "seed"]  # the others are checked with the axes
    data = apply_overrides(data, seeds) if seeds else data  # (a profile.* edit read here named auto, round 89)
    return parse_scenario({"seed": data["seed"]} if "seed" in data else {}).seed


def _ordered(key: str, v):
    """A setting value with every mapping's keys sorted, but an slo_classes mapping's: their order decides each
    request's class (a run), the other mappings' order decides nothing."""
    if isinstance(v, dict):
        keep = key.split(".")[-1] == "slo_classes"
        items = [(k, _ordered(str(k), x)) for k, x in v.items()]
        return {k: x for k, x in (items if keep else sorted(items, key=lambda kv: str(kv[0])))}
    if isinstance(v, (list, tuple)):
        return [_ordered(key, x) for x in v]
    return v


def _canonical(key: str, v) -> str:
    """One text per distinct run of an axis value: 5 and 5.0 alike, mappings as _ordered."""
    return json.dumps(_ordered(key, _same_number(v)), default=str)


def _same_number(v):
    """5 and 5.0 are one setting value (one run): integral floats as ints, inside lists and mappings too."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (list, tuple)):
        return [_same_number(x) for x in v]
    if isinstance(v, dict):
        return {k: _same_number(x) for k, x in v.items()}
    return v


def grid_points(axes_given: list[tuple[str, list, str]], seeds: int, base_seed: int = 0, searched: str | None = None,
                fixed: list[str] = ()) -> list[dict]:
    """expand's points from axes already read: (setting, values, "--grid" or "--zip"), as the Python API gives."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError("--seeds", f"must be an integer >= 1, got {seeds!r}")
    from servesim.workloads.settings import MAX_INT

    if base_seed + seeds - 1 > MAX_INT:  # the first seed may be fine and a later one not: say which flags make it
        raise ConfigError("--seeds", f"the runs' seeds, {base_seed:,} (--base-seed or the scenario's) to "
                                     f"{base_seed + seeds - 1:,}, go past the largest seed, {MAX_INT:,}")
    fixed_keys = {f.split("=", 1)[0].strip() for f in fixed}
    seen: set = set()
    inside = lambda a, b: a.startswith(b + ".") or b.startswith(a + ".")  # noqa: E731 - a section and a key in it
    for key, values, flag in axes_given:
        for other in fixed_keys:  # the later one would drop or override the other unsaid
            if inside(key, other):
                raise ConfigError(flag, f"{key} and --set {other} overlap (one is inside the other): the axis would "
                                        f"replace or override it; give it inside the axis's values")
        for other, _, other_flag in axes_given:
            if inside(key, other):
                raise ConfigError(flag, f"{key} and the {other_flag} axis {other} overlap (one is inside the other): "
                                        f"one would replace or override the other; make them one axis")
        if key == "seed" and searched is None:  # a search has no --seeds: there a seed axis is one search each
            raise ConfigError(flag, "seed is set by --seeds and --base-seed (default: the scenario's seed), not as "
                                    "an axis")
        if searched is not None and (key == searched or searched.startswith(key + ".") and any(
                at(v, searched[len(key) + 1:]) is not None for v in values)):  # (r151: inside an axis's mapping)
            raise ConfigError(flag, f"{searched} is the setting the search varies; it cannot also be an axis")
        if key in fixed_keys:
            raise ConfigError(flag, f"{key} is also given by --set, which would be overridden: give it once")
        if key in seen:
            raise ConfigError(flag, f"{key} is given as two axes")
        if not values:
            raise ConfigError(flag, f"{key}: no values")
        if flag == "--grid" and len({_canonical(key, v) for v in values}) < len(values):
            raise ConfigError(flag, f"{key} lists a value twice (the runs would repeat)")
        seen.add(key)
    gridded = [(k, vs) for k, vs, flag in axes_given if flag == "--grid"]
    zipped = [(k, vs) for k, vs, flag in axes_given if flag == "--zip"]
    axes = [[{k: v} for v in vs] for k, vs in gridded]
    if zipped:
        lengths = {len(vs) for _, vs in zipped}
        if len(lengths) != 1:
            raise ConfigError("--zip", "zipped settings need the same number of values")
        combos = [tuple(_canonical(k, v) for (k, _), v in zip(zipped, combo)) for combo in zip(*[vs for _, vs in zipped])]
        if len(set(combos)) < len(combos):  # a value may repeat in one zipped setting, not a whole combination
            raise ConfigError("--zip", "a combination of the zipped values is listed twice (the runs would repeat)")
        axes.append([dict(zip([k for k, _ in zipped], combo)) for combo in zip(*[vs for _, vs in zipped])])
    total = math.prod(len(a) for a in axes) * seeds
    if total > MAX_RUNS:
        raise ConfigError("--seeds" if seeds > 1 else "--grid", f"{total:,} runs: a sweep holds at most {MAX_RUNS:,}; "
                                                                f"give fewer values or seeds")
    points = []
    for combo in itertools.product(*axes) if axes else [()]:
        merged = {k: v for d in combo for k, v in d.items()}
        for s in range(seeds):
            points.append(merged if "seed" in merged else merged | {"seed": base_seed + s})  # a search's seed axis
    return points


@functools.cache
def code_version() -> str:
    """servesim's version and a digest of the code and data a run's outputs depend on, so a rerun after an
    upgrade or an edit simulates again instead of reusing outputs another servesim wrote."""
    from importlib import import_module
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha1()
    for package in ("servesim.simulator", "servesim.policies", "servesim.workloads"):
        root = Path(import_module(package).__file__).parent
        for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml", ".json") and p.is_file()):
            digest.update(f.relative_to(root.parent).as_posix().encode() + b"\0" + f.read_bytes())
    try:
        release = version("servesim")
    except PackageNotFoundError:
        release = "unreleased"
    return f"{release}+{digest.hexdigest()[:12]}"


def _read_files(config: dict) -> dict:
    """The files a configuration's workload reads by path (a trace, a lengths file, an empirical distribution's),
    each as its size and modification time: a file rewritten under the same name is another input."""
    from servesim.simulator.config import workload_paths

    out = {}
    for path in sorted(set(workload_paths(config.get("workload")))):
        try:
            st = Path(path).stat()
            out[path] = [st.st_size, st.st_mtime_ns]
        except OSError:
            out[path] = None
    return out


def run_id(config: dict) -> str:
    """A run's folder: a hash of everything that decides its outputs (the whole resolved configuration, seed
    included, the files it reads, and the code), so changed settings, a rewritten trace or a changed servesim never
    reuse an old run's outputs."""
    key = json.dumps({"config": config, "files": _read_files(config), "servesim": code_version()},
                     default=str)  # in the config's own order: the order of slo_classes decides each request's class
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def _flat(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}


@functools.cache
def summary_columns() -> tuple[str, ...]:
    """The metrics a run's summary holds (a one-request teaching run's): a sweep none of whose runs finished
    still has their columns, empty (r166: a notebook's `table["completed"]` was a KeyError)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    return tuple(_flat(simulate(load(None, ["profile=teaching", "workload.num_requests=1"])).summary))


WARNINGS = "_warnings"  # a worker's row: the warnings its run said, popped by the parent
POINT = "_point"  # a row's point (its _point_key), popped by the parent: two points may share one run (r147)


def run_point(scenario: str | None, sets: list[str], point: dict, runs_dir: str, collect: bool = False,
              cached_only: bool = False) -> dict | None:
    """One run (in a worker process): reuse its finished outputs, else simulate and write them atomically. With
    `collect`, the warnings it says come back in the row (WARNINGS) for the parent to say once. With
    `cached_only`, the row of a run already on disk, or None: what an interrupted sweep checks for the runs it
    stopped, one of which may have finished as it was stopped."""
    if collect:
        from servesim.simulator.config import collected_warnings

        with collected_warnings() as said:
            row = run_point(scenario, sets, point, runs_dir, cached_only=cached_only)
        return row if row is None else row | {WARNINGS: said}
    row = _run_or_reuse(scenario, sets, point, runs_dir, cached_only)
    return row if row is None else row | {POINT: _point_key(point)}


def _run_or_reuse(scenario: str | None, sets: list[str], point: dict, runs_dir: str, cached_only: bool) -> dict | None:
    from servesim.simulator.config import load
    from servesim.simulator.engine import NOTHING_COMPLETED, simulate

    overrides = sets + _overrides(point)
    asked = run_id({"scenario": scenario, "set": overrides})
    try:
        rs = load(scenario, overrides)
    except Exception as exc:  # the point cannot be resolved: keyed by what was asked instead
        return None if cached_only else _failed(asked, point, runs_dir, exc)
    rid = run_id(rs.as_dict())
    final = Path(runs_dir) / rid
    row = {"run_id": rid} | table_cells(point)
    if (final / "summary.json").is_file():
        whole = all((final / name).is_file() for name in RUN_FILES) and _readable_tables(final)  # none gone or cut
        cached = _cached_summary(final / "summary.json") if whole and _same_run(final, rs.as_dict()) else None
        if cached is not None:
            _say_run_warnings(rid, point, _point_record(final).get("warnings"))  # as the run said them first
            if not cached_only:
                _clear_failures(runs_dir, rid, asked)
            return row | _flat(cached) | {"error": None}
        if cached_only:
            return None
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: {final} is damaged (its summary.json edited or cut short, a file of "
                  f"{', '.join(RUN_FILES)} gone or unreadable, or another run written over it): that run is "
                  f"simulated again"])
    if cached_only:
        return None
    tmp = None
    try:
        result = simulate(rs)
        # the writer's pid in the name: a sweep that stops its workers removes what they left half-written
        tmp = Path(tempfile.mkdtemp(prefix=f".{rid}-{os.getpid()}-", dir=runs_dir))
        tmp.chmod(0o777 & ~_UMASK)  # mkdtemp's 0700 would make the finished run unlike every other folder written
        result.write(tmp)
        said = [w for w in result.warnings if not w.startswith(NOTHING_COMPLETED)]  # said by table_warnings
        (tmp / "point.json").write_text(json.dumps(point | {"servesim": code_version(), "warnings": said,
                                                            "files": _digests(tmp)}, indent=1, default=str) + "\n")
        if _own(final).is_dir():
            shutil.rmtree(final)
        elif final.exists():  # a file at a run's name (r151: rmtree's NotADirectoryError failed the run)
            final.unlink()
        try:
            os.replace(tmp, final)
        except OSError:  # another worker's point resolving to the same run wrote it meanwhile: the same outputs
            if not (final / "summary.json").is_file():
                raise
            shutil.rmtree(tmp)
        tmp = None
        _clear_failures(runs_dir, rid, asked)
        _say_run_warnings(rid, point, said)
        return row | _flat(result.summary) | {"error": None}
    except Exception as exc:  # recorded, and the sweep goes on: by what was asked, which a fixed input does not
        return _failed(asked, point, runs_dir, exc)  # rename (r159: a rewritten trace's run is another run)
    finally:  # an interrupt (Ctrl-C) or a failure half-way through writing: no temporary folder left behind
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


_RECORD_KEYS = ("servesim", "warnings", "files")  # what point.json holds beside the point


def _digests(folder: Path) -> dict:
    """Each run file's sha256 as written: a file edited, swapped with another run's or linked to one since is
    another run's (r149: a swapped summary.json was read into the table as this point's)."""
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in RUN_FILES}


def _point_record(folder: Path) -> dict:
    """A run folder's point.json ({} when unreadable): its point, the servesim that ran it and what the run said."""
    try:
        record = json.loads((folder / "point.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, *JSON_ERRORS):
        return {}
    return record if isinstance(record, dict) else {}


def _say_run_warnings(rid: str, point: dict, said) -> None:
    """What a sweep run said once it ended (a cut, prompts clipped to max_model_len, the cost model's extrapolation),
    named by its point, as `servesim run` says them (r146: a sweep said none)."""
    from servesim.simulator.config import say_once

    where = ", ".join(f"{k}={v}" for k, v in table_cells(point).items()) or "the scenario"
    say_once([f"servesim: warning: sweep run {rid} ({where}): {w}" for w in said or () if isinstance(w, str)])


_TEXT_FIELDS = {"cost_model_source"}  # a summary's scalar values are numbers (or null) but these
# what every run's summary.json holds, and the files beside it: a folder short of one is no finished run
SUMMARY_KEYS = ("duration", "completed", "failed", "request_throughput", "output_throughput", "mean_ttft_ms",
                "p99_ttft_ms", "mean_e2el_ms", "p99_e2el_ms", "num_steps")
RUN_FILES = ("summary.json", "requests.parquet", "steps.parquet", "config.yaml")


def table_warnings(table, out, failed_said: bool = False) -> list[str]:
    """What a sweep's table says beside its rows, as `run` says of one run: runs that measured nothing, and runs
    that failed unless the caller says them itself (the CLI, with exit 1; r146: the API said neither)."""
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    ran = table[table["error"].isna()] if "error" in table else table
    empty = int((ran["completed"] == 0).sum()) if "completed" in ran else 0
    said = [f"servesim: warning: {empty} of {len(table)} sweep runs completed no request (every request rejected "
            f"or unfinished: columns failed, unfinished): their latencies are empty"] if empty else []
    failures = [f"servesim: warning: {failed} of {len(table)} sweep runs failed (column `error` of "
                f"{out}/sweep.csv)"] if failed and not failed_said else []
    return said + _copies_over_seeds(ran, Path(out)) + failures


def _copies_over_seeds(ran, out: Path) -> list[str]:
    """Seeds of one point whose runs measured the same to the last bit, their whole summaries (r171: the table's
    columns alone called classes drawn otherwise copies): nothing the scenario runs draws from the seed (a trace
    replays its rows; r170: --seeds 2 of the Azure replay averaged two copies, a spread of 0)."""
    if "seed" not in ran or ran["seed"].nunique() < 2 or "run_id" not in ran:
        return []
    lead = list(ran.columns[1:list(ran.columns).index("seed")])  # the axes: between run_id and seed
    measured = [c for c in ran.columns if c not in ("run_id", "seed", "error", *lead)]
    groups = [g for _, g in (ran.groupby([ran[c].astype(str) for c in lead], sort=False) if lead else [(0, ran)])
              if g["seed"].nunique() > 1]

    def summary(run_id) -> str | None:
        try:
            return (out / "runs" / str(run_id) / "summary.json").read_text(encoding="utf-8")
        except OSError:  # not on disk (moved, or an API table): not claimed
            return None

    same = [g for g in groups if len(g[measured].astype(str).drop_duplicates()) == 1 and
            len({summary(r) for r in g["run_id"]} - {None}) == 1 and summary(g["run_id"].iloc[0]) is not None]
    if not same:
        return []
    where = "every point" if len(same) == len(groups) else f"{len(same)} of {len(groups)} points"
    return [f"servesim: warning: at {where}, the runs of seeds {', '.join(map(str, sorted(same[0]['seed'])))} "
            f"measured the same to the last bit: nothing this scenario runs is drawn from the seed (a trace replays "
            f"its rows; what is drawn: synthetic lengths and arrivals, classes and priorities a trace does not "
            f"record), so --seeds gives copies, not samples, and their spread is 0"]


def _same_run(folder: Path, config: dict) -> bool:
    """Whether the folder holds this point's run: a sweep's own (point.json) of this configuration (r146: a run
    written there by hand was read into the table as the point's)."""
    from servesim.simulator.files import load_yaml

    try:
        return (folder / "point.json").is_file() and \
            load_yaml((folder / "config.yaml").read_text(encoding="utf-8"), "config", str(folder)) == \
            json.loads(json.dumps(config, default=str)) and _point_record(folder).get("files") == _digests(folder)
    except Exception:  # unreadable or not YAML: not this run
        return False


def _readable_tables(folder: Path) -> bool:
    """A run's parquet files are parquet (their footer reads): one overwritten or cut short is a damaged run."""
    import pyarrow.parquet as pq

    try:
        for name in RUN_FILES:
            if name.endswith(".parquet"):
                pq.read_metadata(folder / name)
    except Exception:  # pyarrow's errors for a file that is no parquet (ArrowInvalid, OSError) differ by cause
        return False
    return True


def _cached_summary(path: Path) -> dict | None:
    """A finished run's summary.json as written, or None if it is not (edited, cut short, not a summary): a
    damaged run is simulated again rather than read into the table."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, *JSON_ERRORS):
        return None
    if not isinstance(data, dict) or not all(k in data for k in SUMMARY_KEYS):
        return None
    for k, v in _flat(data).items():
        text = k in _TEXT_FIELDS
        if not (v is None or (isinstance(v, str) if text else isinstance(v, (int, float)) and not isinstance(v, bool)
                                                               and abs(v) <= 2**53)):  # (r149: a table's column
            return None  # of true, or past int64, was an internal error, the table gone)
    return data


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _clear_failures(runs_dir: str, rid: str, asked: str) -> None:
    """A point that ran: its earlier failure's error file, by its run's id (r154: left beside it) or, where it
    could not be resolved then, by what was asked (r159)."""
    for name in {rid, asked}:
        _own(Path(runs_dir) / f"{name}.error.txt").unlink(missing_ok=True)


def _failed(rid: str, point: dict, runs_dir: str, exc: Exception) -> dict:
    message = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    path = _own(Path(runs_dir) / f"{rid}.error.txt")
    path.write_text(message + "\n" + traceback.format_exc())
    return {"run_id": rid} | table_cells(point) | {"error": message}


def _own(path: Path) -> Path:
    """A name only the sweep writes (a temporary table, a run's folder or error file): a link found there (symbolic,
    or a hard link's name) is removed and replaced, never written through."""
    from servesim.simulator.files import linked

    if linked(path):
        path.unlink()
    return path


def table_cells(point: dict) -> dict:
    """A point as table cells: a mapping or list value (a length distribution) as its JSON text."""
    return {k: json.dumps(_ordered(k, v)) if isinstance(v, (dict, list)) else v for k, v in point.items()}


TABLE_FILES = ("sweep.yaml", "sweep.parquet", "sweep.csv")  # what a sweep writes beside runs/


def check_points(scenario: str | None, sets: list[str], points: list[dict]) -> list[str]:
    """Every point must parse (known settings, valid values) before any run starts: a mistake that would fail
    every run is one line and exit 2, not a table of failed runs. What only resolving can tell (does it fit
    the GPU?) is left to each run, which records it. Returns the files the points read; a point's whole float
    for an integer setting becomes the int its run takes (r157: engine.max_num_seqs=1e1 was 10.0 in sweep.csv)."""
    from servesim.simulator.config import check_names, input_files, load_scenario

    inputs, named = set(), set()
    for point in points:
        sc = load_scenario(scenario, sets + _overrides(point))
        point.update(as_taken(sc, point))
        names = json.dumps([sc.model, sc.hardware.model_dump(mode="json"), sc.profile], default=str, sort_keys=True)
        if names not in named:  # a misspelt GPU, model or profile fails every run of it (r147: exit 1, a table)
            check_names(sc)
            named.add(names)
        inputs.update(input_files(sc, scenario if isinstance(scenario, (str, Path)) else None))
    return sorted(inputs)


def as_taken(sc, point: dict) -> dict:
    """The point's whole floats (1e1) whose setting the scenario holds as an integer, as that integer."""
    from servesim.simulator.config import next_key, typed_section

    out = {}
    for key, value in point.items():
        if isinstance(value, float) and value.is_integer():
            node, parts, i = sc, key.split("."), 0
            while i < len(parts):
                j = next_key(node, parts, i)  # an SLO class named v1.chat is one key (r170)
                part = ".".join(parts[i:j])
                node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
                if i == 0 and part in ("model", "profile") and isinstance(node, dict):  # read when resolved: typed
                    node = typed_section(part, node)  # as then (r158: a model's 2.0 layers tabled as 2.0)
                i = j
            if isinstance(node, int) and not isinstance(node, bool) and node == value:
                out[key] = node
    return out


def _overrides(point: dict) -> list[str]:
    from servesim.simulator.config import override

    return [override(k, v) for k, v in point.items()]


def write_table(rows: list[dict], out: Path, keys: list[str] | None = None,
                points: list[dict] | None = None) -> pd.DataFrame:
    """The sweep's table, rows in the grid's order (the order the values were given, whatever finished first),
    written whole (parquet and CSV) after every run."""
    table = counts_kept(rows, keys or ())  # the axes typed by their points below
    if len(table):
        order = [k for k in (keys or []) if k in table]
        if order and points:
            place = _point_order(table, order, points)
        else:
            place = list(table.sort_values(order or ["run_id"], kind="stable").index)
        # built again from the rows in that order: its columns (a key some runs' summaries lack, such as goodput's)
        # in the grid's order too, not in the order the runs finished or were found on disk (r167)
        table = counts_kept([rows[i] for i in place], keys or ())
        if points:
            table = _one_type_per_column(table, order, points)
        # one schema whichever runs finished and whichever came first (r168: a failed first point put `error`
        # 4th, where it is last): the point's cells, the summary's metrics in a run's order (every one, empty
        # where no run finished: r166), the metrics only some runs have (goodput's) by name, then `error`
        lead = [c for c in table if c in ("run_id", "seed") or c in (keys or ())]
        canon = summary_columns()
        rest = sorted(c for c in table if c not in lead and c not in canon and c != "error")
        table = table.reindex(columns=lead + list(canon) + rest + (["error"] if "error" in table else []))
    for name, writer in (("sweep.parquet", table.to_parquet), ("sweep.csv", table.to_csv)):
        tmp = _own(out / f".{name}.tmp")
        writer(tmp, index=False)
        os.replace(tmp, out / name)
    return table


def _point_order(table: pd.DataFrame, keys: list[str], points: list[dict]) -> list[int]:
    """The rows in the order the grid gave their points (not the values' text: {value: 10} would sort before
    {value: 1}; "auto" beside 4096 would not sort at all; r151: a zip repeating one key's value had its rows
    sorted by that column's first places, (8,1), (8,3), (4,2) for the points (8,1), (4,2), (8,3))."""
    place: dict = {}
    for i, point in enumerate(points):
        cells = table_cells(point)
        place.setdefault(tuple(_hashable(cells.get(k)) for k in keys), i)
    rows = [place.get(tuple(_hashable(v) for v in row), len(points))
            for row in table[keys].astype(object).itertuples(index=False)]
    return sorted(range(len(table)), key=lambda r: rows[r])


def _hashable(value):
    """A cell as a dictionary key: a missing one (None, NaN) as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else (type(value) is str,
                                                                                                  value)


def counts_kept(rows: list[dict], skip=()) -> pd.DataFrame:
    """Rows as a table whose columns of whole numbers stay whole beside an empty cell (a failed run's): pandas makes
    them floats (r159: `completed` 10.0 in sweep.csv, 10 in the run's summary.json). `skip`: columns left as read."""
    table = pd.DataFrame(rows)
    for column in (c for c in table.columns if c not in skip):
        given = [r.get(column) for r in rows]
        held = [v for v in given if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if held and len(held) < len(given) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                   for v in held):
            table[column] = pd.array([None if v is None or isinstance(v, float) else int(v) for v in given],
                                     dtype="Int64")
    return table


def _one_type_per_column(table: pd.DataFrame, keys: list[str], points: list[dict]) -> pd.DataFrame:
    """An axis column parquet can hold, typed by the values the grid gave: whole numbers stay whole beside an
    unset (null) value, and a column mixing text and numbers (engine.max_model_len=auto,4096) is written as text."""
    for k in keys:
        given = [table_cells(p).get(k) for p in points]
        kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else float if isinstance(v, float)
                 else str for v in given if _hashable(v) is not None}
        if kinds == {int} and table[k].isna().any():
            table[k] = pd.array([None if _hashable(v) is None else int(v) for v in table[k]], dtype="Int64")
        elif len(kinds) > 1 and not kinds <= {int, float}:
            table[k] = [None if _hashable(v) is None else str(v) for v in table[k]]
    return table


def sweep(scenario: str | None, sets: list[str], points: list[dict], out: str | Path, jobs: int = 1,
          executor: str = "process", ray_address: str | None = None, progress: bool = True,
          out_field: str = "out") -> pd.DataFrame:
    from servesim.simulator.config import say_once

    inputs = check_points(scenario, sets, points)
    from servesim.simulator.files import refuse_folder_holding_inputs, refuse_folder_over_inputs, refuse_writing_over

    refuse_folder_over_inputs(out, TABLE_FILES + ("runs",), out_field, inputs)  # the CLI's --out, the API's out
    for name in TABLE_FILES:  # the tables are written here first, then moved (a link there is replaced, not used)
        refuse_writing_over(Path(out) / f".{name}.tmp", out_field, inputs)
    refuse_folder_holding_inputs(Path(out) / "runs", out_field, inputs)  # a run's folder is replaced when rerun
    from servesim.simulator.parallel import check_executor

    check_executor(executor, ray_address)  # before anything is written: a refused flag leaves an earlier table
    out = Path(out)
    runs = out / "runs"
    for name, what in ((runs, "its runs folder"), *((out / f".{t}.tmp", f"its {t} before it is moved into place")
                                                     for t in TABLE_FILES)):
        if name.is_dir() != (name == runs) and name.exists() and not name.is_symlink():  # (r151: "File exists",
            raise ConfigError(out_field, f"{name} is a {'file' if name == runs else 'folder'}, where the sweep "
                                         f"writes {what}: remove it")  # or a table half-written first)
    runs.mkdir(parents=True, exist_ok=True)
    hold_folder(out, out_field)  # one command writes a results folder at a time
    _remove_orphans(runs)
    keys = list(dict.fromkeys(k for p in points for k in p))
    # this sweep's runs on disk, from a rerun: found before the earlier table goes (r159: a Ctrl-C or a kill in
    # this scan, seconds over many runs, left no table at all where a whole one had stood)
    rows: list[dict] = _finished_on_disk(scenario, sets, points, str(runs), set())
    for row in rows:
        row.pop(WARNINGS, None)
    # each point's row (r147: two points resolving to one run, an inert axis, shared a row: one point was lost)
    done = {row.pop(POINT): i for i, row in enumerate(rows)}
    with _interrupt_deferred():  # the earlier table and record, then this sweep's, never one beside the other's
        for name in TABLE_FILES:  # even after a SIGKILL between them: no table is left, not the earlier one
            (out / name).unlink(missing_ok=True)
        _write_record(out, scenario, sets, points)
        table = write_table(rows, out, keys, points)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(points), desc="sweep", unit="run")

    def record(row: dict) -> None:
        nonlocal table
        with _interrupt_deferred():  # a Ctrl-C here waits until the row is in the table, written whole
            say_once(row.pop(WARNINGS, ()))  # each worker's warnings, said once for the sweep
            point = row.pop(POINT)
            if point in done:  # a run already on disk, now reused: its row as this sweep read it
                rows[done[point]] = row
            else:
                done[point] = len(rows)
                rows.append(row)
            table = write_table(rows, out, keys, points)  # after every run, atomically: even a SIGKILL leaves what finished
            if bar:
                bar.update(1)

    try:
        _execute(scenario, sets, points, str(runs), jobs, executor, ray_address, record)
    finally:  # Ctrl-C or a crash: the table still holds every finished run
        with _interrupt_deferred():
            if bar:
                bar.close()
            if len(rows) < len(points):  # stopped: runs of this sweep on disk that it did not get to (a rerun's)
                for row in _finished_on_disk(scenario, sets, points, str(runs), set(done)):
                    row.pop(WARNINGS, None)
                    done[row.pop(POINT)] = len(rows)
                    rows.append(row)
            if len(table) != len(rows):  # some added since
                table = write_table(rows, out, keys, points)
            _record_slos(out, scenario, sets, points, table)
    return table


def judged_slos(results: Path, table) -> dict | None:
    """The SLO classes the sweep's runs were judged by (workload.slo_classes of their config.yaml), when the first
    and last runs agree; None when there are none or they differ (a swept SLO). Without runs/, what sweep.yaml
    recorded of them."""
    from servesim.simulator.files import load_yaml

    if "run_id" not in table or not len(table):
        return None
    swept = [c for c in table.columns if c in ("workload", "workload.slo_classes") or
             str(c).startswith("workload.slo_classes.")]
    if any(table[c].astype(str).nunique() > 1 for c in swept):  # an axis of them: runs judged by several (r153: the
        return None  # first and last agreed, and a middle point's other target was drawn as theirs)
    if not (results / "runs").is_dir():
        try:
            recorded = load_yaml((results / "sweep.yaml").read_text(), "results", str(results / "sweep.yaml"))
        except (OSError, ConfigError):
            return None
        slos = recorded.get("slo_classes") if isinstance(recorded, dict) else None
        return _drawable(slos, results / "sweep.yaml")
    found = []
    for rid in (table["run_id"].iloc[0], table["run_id"].iloc[-1]):
        path = results / "runs" / str(rid) / "config.yaml"
        try:
            config = load_yaml(path.read_text(), "results", str(path))
        except (OSError, ConfigError):
            return None
        found.append(((config or {}).get("workload") or {}).get("slo_classes") if isinstance(config, dict) else None)
    return _drawable(found[0], results / "runs" / str(table["run_id"].iloc[0]) / "config.yaml") \
        if found[0] and found[0] == found[1] else None


def _drawable(slos, where: Path) -> dict | None:
    """SLO classes a plot draws lines at: a mapping of classes, each target a positive number (r149: a class of 5,
    or a target of text, was an internal error; -5 was drawn)."""
    if slos is None:
        return None
    if not isinstance(slos, dict) or not all(isinstance(c, dict) for c in slos.values()):
        raise ConfigError("results", f"{where}: workload.slo_classes must map each class to its targets")
    for name, cls in slos.items():
        for key in ("ttft_ms", "tpot_ms", "e2el_ms"):
            v = cls.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1e15):
                raise ConfigError("results", f"{where}: workload.slo_classes.{name}.{key} must be a positive number "
                                             f"of ms, got {v!r:.40}")
    return slos


def _record_slos(out: Path, scenario, sets, points, table) -> None:
    """sweep.yaml keeps the SLO classes the runs were judged by, so the plots state them without runs/ (which is
    not committed beside an example's table)."""
    slos = judged_slos(out, table) if table is not None else None
    if slos:
        _write_record(out, scenario, sets, points, slos)


def _write_record(out: Path, scenario, sets, points, slos: dict | None = None) -> None:
    """sweep.yaml: what the sweep ran (the scenario, its --set and each point's settings: the grid, zipped axes and
    seeds as they combined), and once its runs are judged, the SLO classes they were judged by."""
    from servesim.simulator.files import add_written

    if isinstance(scenario, (str, os.PathLike)) and not Path(scenario).is_absolute():  # as config.yaml names it,
        scenario = str(Path(scenario).absolute())  # so a rerun elsewhere finds the same file (r154)
    (out / "sweep.yaml").write_text(yaml.safe_dump({"scenario": scenario, "set": sets, "points": len(points),
                                                    "grid": [dict(p) for p in points]}
                                                   | ({"slo_classes": slos} if slos else {}), sort_keys=False))
    add_written(out, ["sweep.yaml", "sweep.parquet", "sweep.csv"])  # the table is written after every run


def _point_key(point: dict) -> str:
    return json.dumps(json.loads(json.dumps(point, default=str)), sort_keys=True)


def _finished_on_disk(scenario, sets, points, runs: str, recorded: set) -> list[dict]:
    """Rows for this sweep's points whose runs are on disk but were not recorded (a stopped rerun cancelled
    them, or one finished as the sweep stopped): found by the point each run folder names (point.json), then
    checked to be the run the point resolves to now. Only such folders cost a lookup. recorded: the points
    (_point_key) the table holds already."""
    named = set()
    for folder in Path(runs).iterdir():
        if folder.name.startswith(".") or not (folder / "point.json").is_file():
            continue
        point = _point_record(folder)
        if point:
            named.add(_point_key({k: v for k, v in point.items() if k not in _RECORD_KEYS}))
    rows = []
    for p in points:
        if _point_key(p) in named and _point_key(p) not in recorded:
            row = run_point(scenario, sets, p, runs, cached_only=True)
            if row is not None:
                recorded.add(_point_key(p))
                rows.append(row)
    return rows


def _remove_orphans(runs: Path) -> None:
    """Temporary run folders (.<id>-<pid>-*) whose writer is gone (a SIGKILL): nothing will finish them."""
    for folder in runs.glob(".*-*-*"):
        pid = folder.name.split("-")[1] if folder.name.count("-") >= 2 else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _execute(scenario, sets, points, runs, jobs, executor, ray_address, record) -> None:
    """Every point run (simulator/parallel.py), each row handed to `record` as it finishes; a worker ended mid-run
    leaves a temporary run folder (.<id>-<pid>-*), removed."""
    from servesim.simulator.parallel import run_tasks

    def leftovers(pid: int) -> None:
        for left in Path(runs).glob(f".*-{pid}-*"):
            shutil.rmtree(left, ignore_errors=True)

    run_tasks(functools.partial(run_point, scenario, sets, runs_dir=runs, collect=True), points, record, jobs,
              executor, ray_address, serial=functools.partial(run_point, scenario, sets, runs_dir=runs),
              leftovers=leftovers)


_DEFERRING = []  # the Ctrl-Cs held by an _interrupt_deferred block under way (nested blocks share the outer's)


@contextlib.contextmanager
def _interrupt_deferred():
    """Ctrl-C or SIGTERM during the block is held until it ends (then raised): bookkeeping is never left half-done.
    Only the main thread receives signals; elsewhere (and inside an outer block) this does nothing."""
    from servesim.simulator.interrupts import held, raise_caught

    if _DEFERRING:
        yield
        return
    caught: list = []
    _DEFERRING.append(caught)
    try:
        with held(caught):
            yield
    finally:
        _DEFERRING.pop()
    raise_caught(caught)
