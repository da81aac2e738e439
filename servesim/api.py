"""servesim's Python API (`import servesim`): what the CLI does, as functions returning plain data and pandas tables.

    import servesim
    run = servesim.simulate("docs/scenarios/essay-batching.yaml", {"engine.max_num_batched_tokens": 512})
    run.summary["p99_ttft_ms"], run.requests, run.steps      # the summary, one row per request, per step
    table = servesim.sweep(None, {"workload.arrival.rate": [2, 4, 8]}, out="results/my-sweep")

A scenario is a YAML path, the mapping such a file holds, a `Scenario`, or None (the built-in default);
overrides are `{"setting.path": value}` (Python values) or the CLI's `["key=value", ...]` (YAML text).
Bad input raises `ConfigError` naming the setting, as the CLI's one-line errors do.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
import pandas as pd
from pydantic import BaseModel

from servesim.api_args import checked_args, plain_values
from servesim.simulator.capacity_plan import plan
from servesim.simulator.cli_args import COUNT, JOBS, POSITIVE, REPLICAS, SEED, TOLERANCE, checked
from servesim.simulator.config import ResolvedScenario, Scenario, load, override
from servesim.simulator.errors import ConfigError
from servesim.simulator.metrics import RunResult
from servesim.simulator.plots import plot_results
from servesim.workloads.source import RequestSource
from servesim.workloads.spec import RequestSpec
from servesim.workloads import traces

from servesim import __all__  # noqa: E402,F401 (the names servesim exports, listed once there)

# the functions servesim exports from elsewhere, their arguments checked as the CLI checks its flags
@functools.wraps(plan)
def _planned(*args, **kwargs):
    """plan, its warnings said as `servesim capacity` says them, each flag named as this call's argument (r159:
    `--block-size 17` where the error for it says block_size)."""
    import inspect
    import re

    p = plan(*args, **kwargs)
    names = inspect.signature(plan).parameters
    p.warnings[:] = [re.sub(r"--([a-z][a-z0-9-]*)", lambda m: m[1].replace("-", "_") if m[1].replace("-", "_") in
                            names else m[0], w) for w in p.warnings]
    p.say()
    return p


capacity = checked_args(_planned, "capacity", model="path", gpu="text", gpu_memory_gib="number",  # plan says the ranges
                        gpu_memory_utilization="number", quantization="text", kv_cache_dtype="text",
                        weights_gib="number", reserved_memory_gib="number", max_num_seqs="number",
                        max_num_batched_tokens="number", tensor_parallel_size="number", block_size="number",
                        disable_hybrid_kv_cache_manager="bool", max_model_len="length", tokens_per_request="number",
                        shared_prefix_tokens="number", private_tokens="number", vllm_version="text",
                        enforce_eager="bool")
plot = checked_args(plot_results, "plot", results="path", kind="text", out="path", x="text", by="text", title="text")
read_trace = checked_args(traces.read_trace, path="path", fmt="text", time_scale="number", start_s="number",
                          duration_s="number", sample="number", limit="int", seed="count", first_id="count",
                          hash_block_tokens="int", use_hash_ids="bool")
describe_file = checked_args(traces.describe_file, path="path", fmt="text")


def _describe_checked(specs, *, block_tokens=None, skipped=0):
    """traces.describe_trace on requests checked as simulate's `requests=` are (a file's are, by its reader): a
    nan arrival or a repeated id is refused by name, not summarised."""
    from servesim.workloads.spec import checked_specs

    return traces.describe_trace(checked_specs(specs, "specs"), block_tokens=block_tokens, skipped=skipped)


_describe_checked.__name__ = _describe_checked.__qualname__ = "describe_trace"
_describe_checked.__doc__ = traces.describe_trace.__doc__
describe_trace = checked_args(_describe_checked, specs="list", block_tokens="int", skipped="count")

ScenarioLike = Union[str, os.PathLike, Mapping, Scenario, None]
Overrides = Union[Mapping[str, Any], Sequence[str], None]


def _settings(overrides: Overrides, scenario: ScenarioLike = None, axes=(), searched: tuple[str, ...] = ()
              ) -> list[str]:
    """Overrides as the CLI's --set texts, with a warning where a whole section drops a key given before it, or
    the scenario's own (a file's or mapping's: a Scenario object holds its defaults too, r158), `axes` as _axes
    gives them."""
    from servesim.simulator.config import dropped_sets, say_once

    sets = _setting_texts(overrides)
    say_once(dropped_sets(sets, None if isinstance(scenario, Scenario) else _source(scenario), axes, searched))
    return sets


def _setting_texts(overrides: Overrides) -> list[str]:
    """Overrides as the CLI's --set texts: a mapping's Python values written so they read back exactly."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        out = []
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise ConfigError("overrides", f"keys are dotted setting names, got {key!r}")
            out.append(override(key, plain_values(value, key)))
        return out
    if not isinstance(overrides, Sequence) or not all(isinstance(x, str) for x in overrides):
        raise ConfigError("overrides", "a list of overrides holds 'key=value' texts; give a mapping for values")
    return list(overrides)


def _source(scenario: ScenarioLike):
    """What config.load takes: a path, a scenario mapping, or None."""
    if scenario is None or isinstance(scenario, (str, os.PathLike)):
        return None if scenario is None else str(Path(scenario))
    if isinstance(scenario, Scenario):
        return _given(scenario)  # unset stays unset: derived again; load checks every value given
    if isinstance(scenario, Mapping):
        return plain_values(scenario)
    raise ConfigError("scenario", f"a YAML path, a mapping of settings, a Scenario or None; got "
                                  f"{type(scenario).__name__}")


def _section_classes(annotation) -> tuple[type, ...]:
    """The settings classes a field takes (through Optional, Union and Annotated)."""
    import typing

    if isinstance(annotation, type):
        return (annotation,) if issubclass(annotation, BaseModel) else ()
    return tuple(c for arg in typing.get_args(annotation) for c in _section_classes(arg))


def _given(model: BaseModel, where: str = "") -> dict:
    """A settings object's values as given, at construction or by assignment since, however deep: pydantic's
    exclude_unset drops an edit inside a section left at its default (scenario.workload.num_requests = 20 on
    Scenario()), which ran as if never made (round 72)."""
    # a value of the wrong type: load says; numpy's numbers and arrays as the Python ones they stand for, anything
    # else JSON cannot hold as its text, which load refuses naming the setting (an np.int64 edit was a pydantic
    # serialization traceback, round 125)
    gone = next((name for name in type(model).model_fields if name not in model.__dict__), None)
    if gone is not None:  # `del s.seed`: an AttributeError from below (r160)
        raise ConfigError(f"{where}{gone}", "was deleted (del): a settings object holds every setting; assign it "
                                            "again (its default, to leave it as if unset)")
    out = model.model_dump(mode="json", exclude_unset=True, warnings=False, fallback=_json_fallback)
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        kinds = _section_classes(field.annotation)
        if isinstance(value, BaseModel) and kinds and not isinstance(value, kinds):  # (r152: another section's
            raise ConfigError(f"{where}{name}", f"a {type(value).__name__}, where the section takes "  # default ran
                                                f"{' or '.join(k.__name__ for k in kinds)}")  # as this one's)
        if isinstance(value, BaseModel) and (inner := _given(value, f"{where}{name}.")):
            out[name] = (out.get(name) or {}) | inner
        elif name in out:
            out[name] = _as_assigned(value, out[name])
    return out


def _json_fallback(value):
    plain = plain_values(value)
    return plain if plain is not value else str(value)


def _as_assigned(value, dumped):
    """A value as assigned where JSON's dump changed it: NaN and infinity (JSON null: an edit to NaN read as unset,
    and the setting derived again, round 88), True where a number goes (1); load checks them as a --set's."""
    if isinstance(value, bool) or isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_as_assigned(v, d) for v, d in zip(value, dumped)]
    if isinstance(value, Mapping) and isinstance(dumped, dict):
        return {k: _as_assigned(value[k], d) if k in value else d for k, d in dumped.items()}
    return dumped


@checked_args
def resolve(scenario: ScenarioLike = None, overrides: Overrides = None) -> ResolvedScenario:
    """The deployment a scenario describes, every derived value concrete (model, GPU, profile, KV pool, budgets):
    what `servesim config` prints. A trace workload's file is read as `config` reads it: one the run could not
    read is refused here, and what the reading says is said."""
    rs = _resolved(scenario, overrides)
    if rs is not scenario and (check_file := getattr(rs.scenario.workload, "check_file", None)) is not None:
        from servesim.simulator.config import say_once

        # as cmd_config: r160, a missing trace was resolved, and only simulate refused it
        say_once(f"servesim: warning: {w}" for w in check_file(rs.scenario.seed, rs.max_model_len))
    return rs


def _resolved(scenario: ScenarioLike | ResolvedScenario, overrides: Overrides) -> ResolvedScenario:
    """resolve without reading a trace's file (simulate reads it to run it)."""
    if isinstance(scenario, ResolvedScenario):
        if overrides:
            raise ConfigError("overrides", "a ResolvedScenario is final; override its .scenario instead")
        if scenario.edited():
            raise ConfigError("scenario", "a ResolvedScenario whose .scenario or .profile was edited after it was "
                                          "resolved (its derived values are the old ones): pass the edited .scenario "
                                          "itself, resolved again with every value checked (a profile as its "
                                          "'profile' setting)")
        return scenario
    return load(_source(scenario), _settings(overrides, scenario))





@checked_args
def simulate(scenario: ScenarioLike | ResolvedScenario = None, overrides: Overrides = None, *,
             requests: Sequence[RequestSpec] | RequestSource | None = None) -> RunResult:
    """One run, as `servesim run`: `.summary` (vLLM's benchmark names), `.requests` and `.steps` (pandas), `.itls`;
    `.write(folder)` saves what the CLI saves. `requests` replaces the scenario's workload."""
    from servesim.simulator.config import say_once
    from servesim.simulator.engine import simulate as run
    from servesim.workloads.spec import checked_specs

    from servesim.workloads.source import CheckedSource, StaticSource

    rs = _resolved(scenario, overrides)
    classes = getattr(rs.scenario.workload, "slo_classes", None)  # as a trace replayed under them: each request has one
    if type(requests) is StaticSource:  # its requests, checked, as a list: written beside a result to repeat it
        requests = requests.initial()
    if isinstance(requests, RequestSource):
        requests = CheckedSource(requests, classes)  # checked as they come
        if requests.planned() is None and rs.scenario.simulation.max_sim_time_s is None:  # (r149: a cell hung)
            say_once([f"servesim: warning: {requests.kind}.planned() is None (open-ended): the run goes on while it "
                      f"sends follow-ups; give simulation.max_sim_time_s to end it"])
    elif requests is not None:
        if isinstance(requests, (str, bytes, Mapping)) or not isinstance(requests, Sequence):
            raise ConfigError("requests", f"a list of RequestSpec (or a RequestSource), got {type(requests).__name__}")
        requests = checked_specs(requests, classes=classes)
    if requests is not None:  # the scenario's workload is replaced: what it makes, given here, is read by nothing
        from servesim.simulator.inert_settings import WORKLOAD_READ_WITH_REQUESTS

        keys = _own_workload(scenario) + [t.split("=", 1)[0].strip() for t in _setting_texts(overrides)]
        moved = [k for k in keys if (k == "workload" or k.startswith("workload.")) and
                 not k.startswith(WORKLOAD_READ_WITH_REQUESTS)]  # (max_concurrency was dropped unsaid: round 89)
        say_once([f"servesim: warning: {k} has no effect: requests= replaces the scenario's workload" for k in moved])
    result = run(rs, requests)
    named = sorted({r.slo_class for r in requests if r.slo_class is not None}) \
        if isinstance(requests, list) and not classes else []
    if named:  # as a replayed trace's classes without targets are said (a source's come as it runs: unsaid)
        result.warnings.insert(0, f"requests= name SLO class(es) {', '.join(named)}, but workload.slo_classes gives "
                                  f"them no targets: goodput is not computed")
    say_once([f"servesim: warning: {w}" for w in result.warnings])  # as `servesim run` says them (.warnings too)
    return result


def _own_workload(scenario: ScenarioLike | ResolvedScenario) -> list[str]:
    """The workload settings a Scenario object or a scenario mapping gives (an object's: those not at Scenario()'s
    defaults), each as workload.<field>: what requests= replaces (r160: its max_concurrency was dropped unsaid)."""
    if isinstance(scenario, ResolvedScenario):  # (r161: a resolved one, or a YAML path, was not read)
        scenario = scenario.scenario
    if isinstance(scenario, (str, os.PathLike)):
        from servesim.simulator.config import load_scenario_file

        scenario = load_scenario_file(scenario)
    if isinstance(scenario, Scenario):
        given, default = _given(scenario).get("workload"), _given(Scenario()).get("workload") or {}
    elif isinstance(scenario, Mapping):
        given, default = plain_values(scenario).get("workload"), {}
    else:
        return []
    if not isinstance(given, Mapping):
        return [] if given is None else ["workload"]
    return _differing(given, default, "workload")


def _differing(given: Mapping, default: Mapping, where: str) -> list[str]:
    """The dotted keys of `given` whose values are not `default`'s, as deep as both are mappings."""
    return [k for key, v in given.items() if key not in default or default[key] != v
            for k in (_differing(v, default[key], f"{where}.{key}") if isinstance(v, Mapping) and
                      isinstance(default.get(key), Mapping) else [f"{where}.{key}"])]


def _axes(grid: Mapping[str, Sequence] | None, zipped: Mapping[str, Sequence] | None) -> list[tuple[str, list, str]]:
    axes = []
    for flag, given in (("--grid", grid), ("--zip", zipped)):
        for key, values in (given or {}).items():
            if not isinstance(key, str):  # a setting's dotted path
                raise ConfigError("grid" if flag == "--grid" else "zipped",
                                  f"an axis is named by a setting's dotted path (text), got {key!r}")
            key = key.strip()  # as the CLI's --grid reads " key =": the table's column (r146: a spaced one)
            if isinstance(values, (np.ndarray, pd.Series, pd.Index)):  # a notebook's column (r171: a Series refused)
                values = values.tolist()
            if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
                raise ConfigError(key, f"the values of an axis are a list, got {type(values).__name__}")
            axes.append((key, plain_values(list(values), key), flag))
    return axes


@checked_args(grid="mapping", out="path", zipped="mapping", seeds="int", base_seed="int", jobs="int", progress="bool")
def sweep(scenario: ScenarioLike, grid: Mapping[str, Sequence] | None = None, overrides: Overrides = None, *,
          out: str | os.PathLike, zipped: Mapping[str, Sequence] | None = None, seeds: int = 1,
          base_seed: int | None = None,
          jobs: int = 1, progress: bool = False) -> pd.DataFrame:
    """`servesim sweep`: every point of the grid (times the zipped axis, times the seeds), one row each with the
    point's settings, its summary and `error` (None when it ran). Seeds start at base_seed, else the scenario's
    `seed`. Runs are kept in `out/runs/` and reused when the same configuration runs again."""
    from servesim.simulator.sweep import first_seed, grid_points, table_warnings
    from servesim.simulator.sweep import sweep as run

    source, axes = _source(scenario), _axes(grid, zipped)
    sets = _settings(overrides, scenario, axes)
    base = first_seed(source, sets, None if base_seed is None else checked("base_seed", base_seed, SEED))
    points = grid_points(axes, checked("seeds", seeds, COUNT), base, fixed=sets)
    table = run(source, sets, points, out, checked("jobs", jobs, JOBS), progress=progress)
    from servesim.simulator.config import say_once

    say_once(table_warnings(table, out))  # as the CLI says them (r146: runs of nothing, failed runs, unsaid)
    return table


@checked_args(slos="mapping", low="number", high="number", tolerance="number", max_runs="int")
def max_rate(scenario: ScenarioLike, slos: Mapping[str, float], overrides: Overrides = None, *, low: float = 0.05,
             high: float | None = None, tolerance: float = 0.05, max_runs: int = 30) -> dict:
    """`servesim search max-rate`: the highest arrival rate meeting every SLO ({"ttft_p99_ms": 500, ...})."""
    from servesim.simulator.search import max_rate as search

    return _said(search(_source(scenario), _settings(overrides, scenario, searched=("workload.arrival.rate",)),
                        _slos(slos), checked("low", low, POSITIVE),
                        None if high is None else checked("high", high, POSITIVE),
                        checked("tolerance", tolerance, TOLERANCE), checked("max_runs", max_runs, COUNT)), "max_rate")


def _said(result: dict, answer: str) -> dict:
    """A search's answer, with the warning `servesim search` gives one it could not confirm (r160: unsaid)."""
    from servesim.simulator.config import say_once
    from servesim.simulator.search import unconfirmed

    say_once(unconfirmed(answer, [result["reason"]] if result.get(answer) is not None and result.get("reason") else [],
                         1))
    if result.get(answer) is None and result.get("reason"):  # as the CLI's error says it (r161: unsaid)
        say_once([f"servesim: warning: no {answer.replace('_', ' ')} found: {result['reason']}"])
    return result


@checked_args(slos="mapping", rate="number", gpus="list", tp="list", disagg="list", grid="mapping", prices="path",
              out="path", tolerance="number", jobs="int", top="int", progress="bool")
def recommend(scenario: ScenarioLike, slos: Mapping[str, float], overrides: Overrides = None, *,
              rate: float | None = None, gpus: Sequence[str] | None = None, tp: Sequence[int] | None = None,
              disagg: Sequence[str] | None = None, grid: Mapping[str, Sequence] | None = None,
              prices: str | os.PathLike | None = None,
              out: str | os.PathLike = "results/recommend", tolerance: float = 0.1, jobs: int = 1, top: int = 3,
              progress: bool = False) -> pd.DataFrame:
    """`servesim recommend`: the deployments of the space (gpus x tp x disagg "P:D" units x grid) ranked by $ per
    million output tokens
    among those carrying `rate` req/s (default: the scenario's; a trace: its own traffic) within the SLOs. The
    table's `attrs["report"]` holds recommend.json's content (prices, vLLM commands)."""
    from servesim.simulator.recommend import DISAGG, SET_BY_THE_SEARCH, axes_from, run

    axes = {k: v for k, v, _ in _axes(grid, None)}
    for key, given, arg in [(k, v, "grid") for k, v in axes.items()] + [("hardware.gpu", gpus, "gpus"),
                                                                        ("engine.tensor_parallel_size", tp, "tp")]:
        if given is not None and not len(given):  # as the CLI's and sweep's (r143: a KeyError after no runs)
            raise ConfigError(arg, f"{key}: no values")
    if disagg is not None:  # read as the CLI's --disagg reads them
        odd = next((d for d in disagg if not isinstance(d, str) or "," in d), None)
        if odd is not None:  # (r158: a (1, 1) was split at its comma into a garbled unit)
            raise ConfigError("disagg", f"each unit is text, prefill:decode replicas ('1:2') or 'none'; got {odd!r:.40}")
        axes = axes_from({DISAGG: ",".join(map(str, disagg))}, []) | axes
    for key, given in (("hardware.gpu", gpus), ("engine.tensor_parallel_size", tp)):
        if given is not None:
            if key in axes:
                raise ConfigError("grid", f"{key}: given twice ({'gpus' if key == 'hardware.gpu' else 'tp'} too)")
            axes = {key: plain_values(list(given), key)} | axes
    table, report, _ = run(_source(scenario), _settings(overrides, scenario, [(k, v, "grid") for k, v in axes.items()],
                                                        SET_BY_THE_SEARCH), axes, _slos(slos),
                           None if rate is None else checked("rate", rate, POSITIVE), out, prices,
                           checked("tolerance", tolerance, TOLERANCE), checked("jobs", jobs, JOBS),
                           checked("top", top, COUNT), progress)
    table.attrs["report"] = report
    if "status" in table and not (table["status"] == "meets").any():  # the CLI's error, exit 1 (r160: unsaid)
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: no candidate carries {report['load']} within the SLOs (column `reason` of "
                  f"{out}/recommend.csv)"])
    return table


@checked_args(slos="mapping", rate="number", most="int")
def min_replicas(scenario: ScenarioLike, slos: Mapping[str, float], overrides: Overrides = None, *,
                 rate: float | None = None, most: int = 256) -> dict:
    """`servesim search replicas`: the fewest replicas meeting every SLO at the scenario's (or this) rate."""
    from servesim.simulator.search import min_replicas as search

    return _said(search(_source(scenario), _settings(overrides, scenario, searched=("cluster.replicas",)), _slos(slos),
                        None if rate is None else checked("rate", rate, POSITIVE), checked("most", most, REPLICAS)),
                 "replicas")


def _slos(slos: Mapping[str, float]) -> dict[str, float]:
    """{"ttft_p99_ms": 500} as the CLI's --slo ttft_p99_ms=500 reads it."""
    from servesim.simulator.search import parse_slos

    if not isinstance(slos, Mapping):
        raise ConfigError("slos", f"a mapping such as {{'ttft_p99_ms': 500}}, got {type(slos).__name__}")
    return parse_slos([f"{k}={v!r}" for k, v in plain_values(slos, "slos").items()])
