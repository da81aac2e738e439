"""`servesim vllm serve MODEL [vLLM flags] -- bench serve [vllm bench serve flags]`: a pasted vLLM command line.

The flags are those of the vLLM release named by --vllm-version (data/vllm-VERSION-flags.yaml, dumped from the
parsers that release builds; default 0.33.0, the release whose scheduler servesim reproduces):
a flag vLLM does not have is refused as vLLM refuses it; one servesim models becomes a scenario setting;
every other is recorded and named in one warning, never dropped silently. The client's flags (`vllm bench
serve`) make the workload and say which result files to write (simulator/vllm_results.py). vLLM's argument
rewriting is followed: `--max_num_seqs` is `--max-num-seqs`, `--flag=value` works, a JSON flag also takes dotted
keys (`--speculative-config.method ngram`), and unambiguous prefixes are accepted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import yaml

from servesim.simulator.cli_args import human_readable_int, human_readable_int_or_auto
from servesim.simulator.errors import JSON_ERRORS, ConfigError, is_utf8, json_problem
from servesim.simulator.model_arch import (HF_CONFIG_DEFAULTS, HF_ID_CHANGES, HF_IDS, LENGTH_KEYS, default_model_length,
                                           load_model)
from servesim.workloads.settings import MAX_NESTING

VLLM_VERSIONS = ("0.33.0", "0.19.0")  # flag tables shipped (data/vllm-VERSION-flags.yaml)
VLLM_VERSION = VLLM_VERSIONS[0]  # the default: docs/vllm-v1-scheduler.md's release
VLLM_DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # ModelConfig.model's default in both releases: what `vllm serve` alone serves
# datasets the client can make without a network or a tokenizer: lengths only
OFFLINE_DATASETS = ("random", "prefix_repetition")


@lru_cache(maxsize=None)
def flag_tables(version: str = VLLM_VERSION) -> dict:
    if version not in VLLM_VERSIONS:
        raise ConfigError("--vllm-version", f"servesim reads the flags of vLLM {' and '.join(VLLM_VERSIONS)}, "
                                            f"got {version!r}")
    text = resources.files("servesim.simulator.data").joinpath(f"vllm-{version}-flags.yaml").read_text()
    return yaml.safe_load(text)


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting: one line, named by the command."""

    def error(self, message):
        raise _Refused(message)


def _json_depth(value) -> int:
    """How deeply a JSON value nests (iteratively: the value may be deeper than the stack)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        deepest = max(deepest, d)
        if isinstance(v, (dict, list)) and d <= MAX_NESTING:
            todo += [(child, d + 1) for child in (v.values() if isinstance(v, dict) else v)]
    return deepest


def _json_value(text: str):
    try:
        value = json.loads(text)
    except JSON_ERRORS as exc:  # argparse would name this function ("invalid _json_value value")
        why = f"{exc.msg}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else json_problem(exc)
        raise argparse.ArgumentTypeError(f"not valid JSON ({why}): {text!r:.80}") from None
    if _json_depth(value) > MAX_NESTING:
        raise argparse.ArgumentTypeError(f"JSON nested more than {MAX_NESTING} levels deep: {text!r:.80}")
    return value


def _json_config(text: str):
    """0.33's JSON flag of a config dataclass (-cc, --kv-transfer-config, ...): bare numbers outside strings may
    be human-readable (1k, 80m), as EngineArgs expands them before it parses the JSON."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)  # the even parts lie outside strings
    return _json_value("".join(re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable_int(m.group())), part)
                               if i % 2 == 0 else part for i, part in enumerate(parts)))


# 0.33's JSON flags typed as a config dataclass in EngineArgs (a plain dict's, such as --speculative-config's,
# are read as JSON alone)
CONFIG_JSON_FLAGS = frozenset({
    "compilation_config", "attention_config", "kernel_config", "kv_transfer_config", "kv_events_config",
    "ec_transfer_config", "ec_manager_config", "eplb_config", "fault_tolerance_config", "pooler_config",
    "logging_config", "structured_outputs_config", "aux_output_config", "profiler_config", "watchdog_config",
    "weight_transfer_config", "reasoning_config", "engram_config", "ir_op_priority"})


_TYPES = {"int": int, "float": float, "str": str, "human_int": human_readable_int, "json": _json_value, "list": str,
          "bool": lambda t: {"true": True, "false": False}[t.strip().lower()]}


# kernel backends vLLM reads lower-cased with dashes as underscores, as flags (arg_utils) and as KernelConfig fields
# (its _normalize_* validators): FLASHINFER-CUTLASS is flashinfer_cutlass
NORMALIZED = frozenset({"moe_backend", "linear_backend", "sparse_indexer_topk_backend"})


def _backend_name(text: str) -> str:
    return text.lower().replace("-", "_")


_backend_name.__name__ = "str"  # argparse names the type in its own messages
# int flags whose None (vLLM's optional_type: "None" or "") is a setting of its own, not the default
NONE_MEANS = ("prefix_cache_retention_interval",)  # None keeps every sliding-window block cached; other flags'
# None (serve_optional) is the field's default, as if the flag were left out


def _no_null(read):
    """A JSON flag whose config takes an object only: JSON null is refused, as vLLM's parse_dataclass and its
    pydantic fields refuse it (only the words "None" and "" mean the default, where the field may be None)."""
    def parse(text: str):
        value = read(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"a JSON object is expected, got {text!r}")
        return value

    parse.__name__ = getattr(read, "__name__", "value")
    return parse


def _or_none(read):
    """vLLM's optional_type: "" and "None" are None, anything else read as the flag's type."""
    def parse(text: str):
        return None if text in ("", "None") else read(text)

    parse.__name__ = getattr(read, "__name__", "value")  # argparse names the type in its own messages
    return parse


class _Switch(argparse.Action):
    """A switch as vLLM's parser has it: its own names set true, each `no` form (--no-x; 0.33's --disable-x paired
    with --enable-x) sets false; no value is taken."""

    def __init__(self, option_strings, dest, negatives=(), **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.negatives = set(negatives)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negatives)


def negatives(row: dict) -> list[str]:
    """A switch's forms that set it false."""
    no = row.get("no") or []
    return [no] if isinstance(no, str) else list(no)


@lru_cache(maxsize=None)
def _parser(kind: str, version: str = VLLM_VERSION) -> tuple[_Parser, dict]:
    """The parser of `vllm serve` (kind "serve") or `vllm bench serve` ("bench_serve") of a vLLM release, and each
    flag's row by dest. Every default is left out (argparse.SUPPRESS), so the namespace holds what the command
    line gave."""
    p = _Parser(prog=f"vllm {kind.replace('_', ' ')}", add_help=False, allow_abbrev=True)
    rows = {}
    optional = set(flag_tables(version).get(f"{kind}_optional", ()))
    objects = set(flag_tables(version).get(f"{kind}_json_objects", ()))
    for row in flag_tables(version)[kind]:
        names = [row["flag"], *row.get("aliases", [])]
        dest = row["flag"].lstrip("-").replace("-", "_")
        rows[dest] = row
        if row["type"] == "switch":
            p.add_argument(*names, *negatives(row), dest=dest, action=_Switch, negatives=negatives(row),
                           default=argparse.SUPPRESS)
            continue
        kw = {"dest": dest, "default": argparse.SUPPRESS, "type": human_readable_int_or_auto
              if dest == "max_model_len" else _json_config if version != "0.19.0" and dest in CONFIG_JSON_FLAGS
              else _backend_name if dest in NORMALIZED else _TYPES[row["type"]]}
        if row["flag"] in objects and (dest in CONFIG_JSON_FLAGS or row["flag"] not in optional):
            kw["type"] = _no_null(kw["type"])  # a config dataclass, or a field that is never None
        if row["flag"] in optional:
            kw["type"] = _or_none(kw["type"])
        if row.get("choices"):
            kw["choices"] = row["choices"] + ([None] if row["flag"] in optional else [])
        if row.get("nargs") is not None:
            kw["nargs"] = int(row["nargs"]) if str(row["nargs"]).isdigit() else row["nargs"]
        p.add_argument(*names, **kw)
    if kind == "serve":
        p.add_argument("model_tag", nargs="?", default=argparse.SUPPRESS)
    return p, rows


def _rewrite(argv: list[str], kind: str, version: str) -> list[str]:
    """vLLM's FlexibleArgumentParser rewriting: underscores to dashes in a long flag's name (up to a '.' or
    '='), -O3 (and -O 3) to --optimization-level 3, and every word that starts with '-' and holds a '.' before any
    '=' read as a dotted key, gathered into one JSON value per spelling of the flag, put after the other words:
    any flag's (a string flag then takes the JSON text; round 125), and a negative decimal given as its own word
    too, which fails the line in vLLM."""
    out, nested, i = [], {}, 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            head, dot, rest = name.partition(".")
            tok = head.replace("_", "-") + dot + rest + eq + value
        if tok.startswith("-O") and kind == "serve" and not tok.startswith("--"):
            level = tok[2:].lstrip("=")
            if level:
                out += ["--optimization-level", level]
                i += 1
                continue
            if i + 1 < len(argv) and argv[i + 1] in ("0", "1", "2", "3"):  # -O 3, as vLLM's parser takes it
                out.append("--optimization-level")
                i += 1
                continue
        name, eq, value = tok.partition("=")
        head, dot, key = name.partition(".")
        if dot and head.startswith("-") and not head.startswith("--") and _is_float(name):  # --x -0.5 (round 125)
            before = argv[i - 1] if i else ""
            raise ConfigError(f"vllm {kind.replace('_', ' ')} {before[:60]}".rstrip(),
                              f"{name}: vLLM's parser reads a word that starts with '-' and holds a '.' as a dotted "
                              f"flag ({head} with key {key}), taking the next word as its value, and the line fails; "
                              f"write {before[:60] or 'the flag'}={name}")
        if dot and head.startswith("-"):  # --speculative-config.method ngram
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(f"vllm {kind.replace('_', ' ')}", f"{name} expects a value")
                value, i = argv[i + 1], i + 1
            if key.endswith("+"):  # --x.key+ a,b: a list of the comma-separated words
                key, value = key[:-1], json.dumps(value.split(","))
            field = f"vllm {kind.replace('_', ' ')} {name[:60]}"
            if key.count(".") >= MAX_NESTING:
                raise ConfigError(field, f"a dotted key more than {MAX_NESTING} levels deep")
            try:
                given = json.loads(value)
            except JSON_ERRORS as exc:
                if not isinstance(exc, json.JSONDecodeError):  # nested past the stack, or an integer past 4,300 digits
                    raise ConfigError(field, f"not valid JSON ({json_problem(exc)})") from None
                given = value  # a word, as vLLM takes it; 0.33 reads a human-readable count (1k, 80g) first
                if version != "0.19.0":
                    try:
                        given = human_readable_int(value)
                    except (ValueError, argparse.ArgumentTypeError):
                        pass
            if _json_depth(given) + key.count(".") > MAX_NESTING:
                raise ConfigError(field, f"JSON nested more than {MAX_NESTING} levels deep")
            for k in reversed(key.split(".")):
                given = {k: given}
            _merge_dotted(nested.setdefault(head, {}), given)  # by its spelling: -cc's and --compilation-config's
            # keys are two JSON values, the last replacing the first, as vLLM's parser appends them
            i += 1
            continue
        out.append(tok)
        i += 1
    for flag, value in nested.items():
        out += [flag, json.dumps(value)]
    return out


def _dataset_path_order(bench_argv: list[str]) -> None:
    """0.19's --dataset-name and --dataset-path check the two as each is read (_ValidateDatasetArgs): a path read
    while the name is still 'random' (its default, before a later --dataset-name) fails the line (round 125)."""
    name, path, i = "random", None, 0
    while i < len(bench_argv):
        flag, eq, value = bench_argv[i].partition("=")
        flag = flag.replace("_", "-")
        if flag in ("--dataset-name", "--dataset-path"):
            if not eq and i + 1 < len(bench_argv):
                value, i = bench_argv[i + 1], i + 1
            name, path = (value, path) if flag == "--dataset-name" else (name, value)
            if name == "random" and path is not None:
                raise ConfigError("vllm bench serve --dataset-path", "read while --dataset-name is still 'random' "
                                                                     "(given later, or not at all): vLLM 0.19's "
                                                                     "parser refuses the line; give --dataset-name "
                                                                     "first")
        i += 1


def _merge_dotted(original: dict, update: dict) -> None:
    """A dotted key into what the earlier ones built, as vLLM's parser merges them (recursive_dict_update): dicts
    merged, a list given again appended to, anything else replaced (a key below a number replaces the number)."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge_dotted(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] = original[k] + v
        else:
            original[k] = v


class _Counted(argparse.Namespace):
    """A namespace that counts how often each flag sets its value: a flag given twice sets it twice."""

    def __setattr__(self, dest, value):
        if dest != "counts":
            self.__dict__.setdefault("counts", {})[dest] = self.__dict__.get("counts", {}).get(dest, 0) + 1
        super().__setattr__(dest, value)


def parse(argv: list[str], kind: str, version: str = VLLM_VERSION, line: list[str] | None = None) -> dict:
    """The flags a `vllm serve` / `vllm bench serve` command line gives, by dest, as vLLM's parser reads them; one
    the line (`line`, else argv) gives twice is said, the last standing as in vLLM's parser (r179: unsaid, where
    README says it is; r180: not a --config file's flag the line overrides, as vLLM means it to)."""
    parser, _ = _parser(kind, version)
    try:
        ns = parser.parse_args(_rewrite(argv, kind, version))
    except _Refused as exc:
        message = str(exc)
        if message.startswith("unrecognized arguments"):
            message += f" (not a flag of vLLM {version}'s `{parser.prog}`{_other_release(argv, kind, version)})"
        raise ConfigError(parser.prog, message) from None
    if twice := _given_twice(parser, _rewrite(argv if line is None else line, kind, version)):
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: {parser.prog} {', '.join('--' + d.replace('_', '-') for d in twice)} "
                  f"given twice: the last stands, as vLLM's parser takes it"])
    return {dest: v for dest, v in vars(ns).items() if v is not None or dest in NONE_MEANS}  # None: the default


def _given_twice(parser, argv: list[str]) -> list[str]:
    """The flags (dests) argv sets more than once; a flag that gathers its values (appends, counts) is not. A JSON
    config's dotted keys of one spelling are one value already (_rewrite); two whole values are two."""
    ns = _Counted()
    try:
        parser.parse_args(argv, namespace=ns)
    except _Refused:  # the line alone, without its config file's flags: what it cannot parse, the whole line has
        return []
    gathers = {a.dest for a in parser._actions if isinstance(a, (argparse._AppendAction, argparse._ExtendAction,
                                                                  argparse._CountAction))}
    return [d for d, n in vars(ns).get("counts", {}).items() if n > 1 and d not in gathers]


@dataclass
class BenchOptions:
    """What `vllm bench serve` writes, and how it summarizes (its result file's own settings)."""

    save_result: bool = False
    save_detailed: bool = False
    append_result: bool = False
    result_dir: str | None = None
    result_filename: str | None = None
    label: str | None = None
    metadata: list[str] = field(default_factory=list)
    backend: str = "openai"
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    ramp_up: dict | None = None
    goodput: dict | None = None
    percentile_metrics: list[str] = field(default_factory=lambda: ["ttft", "tpot", "itl"])
    metric_percentiles: list[float] = field(default_factory=lambda: [99.0])
    vllm_version: str = VLLM_VERSION  # the release whose result file is written
    server_metrics: bool = False  # vllm serve --enable-per-request-metrics (0.33): each response's queue time, TTFT
    server_counters: bool = True  # the engine's Prometheus counters (spec_decode_*); --disable-log-stats drops them
    histogram_buckets: dict | None = None  # 0.33's --custom-histogram-buckets: a family's edges replace its defaults
    first_engine: int = 0  # the DP rank of the server's first engine (external or hybrid balancing: its own)
    ready_check: bool = False  # --ready-check-timeout-sec above 0: the client sends its first request as a test


@dataclass
class VllmCommand:
    """A pasted command pair, read: scenario settings, the client's options, and every flag servesim records
    without modelling it."""

    model: str
    settings: dict
    bench: BenchOptions
    not_modelled: dict = field(default_factory=dict)  # "vllm serve --host" -> value
    version: str = VLLM_VERSION
    given: set = field(default_factory=set)  # the serve flags (dests) on the line, not left to their defaults
    served_name: str = ""  # the name the server answers to and labels its metrics with (--served-model-name's first)
    lora_drafts: int | None = None  # --enable-lora beside a speculative config: its k (LoRA is not modelled, but
    # its start-up check needs the resolved budget)
    kv_transfer: dict | None = None  # --kv-transfer-config
    marlin: str | None = None  # -q awq_marlin / gptq_marlin, which a checkpoint of its method takes (CUDA only)

    def _check_test_request(self, resolved) -> None:
        """With --ready-check-timeout-sec the client first sends the dataset's first request and waits for it to
        succeed: a request the server answers 400 (too long for max_model_len) stops the bench before it sends the
        rest ("Initial test run failed"), so it writes no result."""
        from servesim.simulator.engine import max_tokens_sent
        from servesim.simulator.front_end import bad_request

        w = resolved.scenario.workload
        first = next(iter(w.source(resolved.scenario.seed, resolved.max_model_len).initial()), None)
        if first is None or not bad_request(first, resolved.max_model_len,
                                            **max_tokens_sent(w, resolved.scenario.engine)):
            return
        out = first.max_tokens or first.output_tokens
        raise ConfigError("vllm bench serve --ready-check-timeout-sec",
                          f"the client's test request (its first: {first.prompt_tokens:,} prompt + {out:,} output "
                          f"tokens) does not fit max_model_len {resolved.max_model_len:,}: vLLM's server answers it "
                          f"400 and the bench stops (\"Initial test run failed\"), writing no result")

    def _check_pd_connector(self, flag: str, kv=None) -> None:
        """The hand-off servesim simulates is NIXL's pull once the prefill is done (r132): a role pair one line
        cannot serve both instances with is refused as vLLM fails it; another connector's way (Mooncake's proxy
        sends to both instances at once; P2pNccl and ExampleConnector load inside the decode step), a host
        buffer's copies and the connector's own settings are recorded as not modelled. A MultiConnector's
        children each, as vLLM builds each with its own config (r141: they passed unchecked and unsaid)."""
        kv = kv if kv is not None else self.kv_transfer if isinstance(self.kv_transfer, dict) else {}
        connector, role = kv.get("kv_connector"), kv.get("kv_role")
        if connector == "MultiConnector" and not kv.get("kv_connector_module_path"):
            for i, child in enumerate(_children(kv) or []):
                if isinstance(child, dict):
                    self._check_pd_connector(f"{flag}.kv_connector_extra_config.connectors.{i}", child)
        if connector == "MooncakeConnector" and role in ("kv_producer", "kv_consumer"):
            raise ConfigError(f"{flag}.kv_role", f"{role}: this line serves both the prefill and the decode "
                                                 f"instances, and MooncakeConnector fails the other's first request "
                                                 f"(it asserts a decode instance is no producer, a prefill one no "
                                                 f"consumer); give kv_both")
        if connector == "P2pNcclConnector" and role in ("kv_both", "kv_producer"):
            raise ConfigError(f"{flag}.kv_role", f"{role}: a P2pNcclConnector producer (kv_both is one) loads no "
                                                 f"KV, so the decode instances would compute every prompt again; "
                                                 f"give them kv_consumer")
        device = kv.get("kv_buffer_device", "cuda")
        if device not in ("cuda", "cpu"):
            raise ConfigError(f"{flag}.kv_buffer_device", f"{device!r}: vLLM on a CUDA GPU takes cuda or cpu (it "
                                                          f"fails at start)")
        if connector not in ("NixlConnector", "MultiConnector"):
            self.not_modelled[f"{flag}.kv_connector"] = connector  # simulated as NIXL's pull after the prefill
        for key, value in kv.items():
            if key not in PD_KEYS_SIMULATED and not (key == "kv_buffer_device" and value == "cuda") and not (
                    connector == "MultiConnector" and key == "kv_connector_extra_config"):  # its children, read
                self.not_modelled[f"{flag}.{key}"] = value  # a host buffer's copies, a backend, a failure policy

    def check_resolved(self, resolved) -> None:
        """vLLM's start-up checks that need the engine's defaults resolved: LoRA beside any speculative config
        (extract_hidden_states too, which servesim runs as none) needs a budget of max_num_seqs x (k + 1) tokens
        (EngineArgs.create_engine_config). And disaggregation (--set cluster.prefill_replicas) needs the line's
        KV connector to move a prompt's KV between instances: it is what the hand-off simulates."""
        if resolved.scenario.cluster.prefill_replicas:
            flag = _flag("serve", "kv_transfer_config", self.version)
            if not _moves_kv_between_instances(self.kv_transfer):
                given = f"{_connector_name(self.kv_transfer)} moves no prompt's KV between instances" \
                    if self.kv_transfer else "the line has no KV connector"
                example = f"e.g. {pd_kv_config(self.version)}, one line for both instances" \
                    if self.version == "0.19.0" else (  # r178: kv_both, which 0.33 deprecates, was offered
                        f"e.g. {pd_kv_config(self.version, 'decode')}: one line serves both instances here, as "
                        f"0.33's NIXL pull connector reads no role; vLLM asks for kv_producer on prefill instances")
                raise ConfigError("cluster.prefill_replicas", f"prefill/decode disaggregation needs {flag} with a "
                                                              f"connector that moves a prompt's KV from the prefill to "
                                                              f"the decode instance ({example})"
                                                              f": {given}, so vLLM's decode instance would compute "
                                                              f"every prompt again")
            self.not_modelled.pop(flag, None)
            self._check_pd_connector(flag)
        from servesim.simulator.config import marlin_off_cuda

        if off := marlin_off_cuda(self.marlin, resolved.hardware):
            raise ConfigError(_flag("serve", "quantization", self.version), off)
        if self.bench.ready_check:
            self._check_test_request(resolved)
        self._check_prefix_match_unit(resolved)
        k = self.lora_drafts
        if k is not None and resolved.max_num_batched_tokens < resolved.max_num_seqs * (k + 1):
            raise ConfigError("vllm serve --enable-lora", f"beside speculation needs max_num_batched_tokens >= "
                                                          f"max_num_seqs x (k + 1) = {resolved.max_num_seqs * (k + 1):,}"
                                                          f", got {resolved.max_num_batched_tokens:,}: vLLM says "
                                                          f"\"Consider increasing max_num_batched_tokens or decreasing "
                                                          f"num_speculative_tokens\"")

    def _check_prefix_match_unit(self, resolved) -> None:
        """0.33's resolve_kv_cache_block_sizes while blocks are hashed (prefix caching or a KV connector): with one
        KV cache group hits land on the block size, and any other unit is refused; with several (the hybrid
        manager's), each group's block size must be a multiple of it (r130: recorded as not modelled)."""
        flag = "vllm serve --prefix-match-unit"
        unit = self.not_modelled.get(flag)
        e = resolved.scenario.engine
        if not isinstance(unit, int) or not (e.enable_prefix_caching or self.kv_transfer is not None):
            return
        bs, several = e.block_size, bool(resolved.kv_layout.local_groups)
        if not several and unit != bs:
            raise ConfigError(flag, f"{unit}: with a single KV cache group, prefix-cache hits land on the block size "
                                    f"({bs}), and vLLM refuses any other unit (unset it or give {bs})")
        if several and bs % unit:
            raise ConfigError(flag, f"{unit}: the KV cache groups' block size ({bs}) is no multiple of it, so vLLM "
                                    f"refuses it")

    def as_record(self) -> dict:
        return {"vllm_version": self.version, "model": self.model, "settings": self.settings,
                "not_modelled": self.not_modelled}


# vllm serve flag (dest) -> servesim setting
SERVE_SETTINGS = {
    "max_num_seqs": "engine.max_num_seqs", "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "max_model_len": "engine.max_model_len", "gpu_memory_utilization": "engine.gpu_memory_utilization",
    "block_size": "engine.block_size", "enable_prefix_caching": "engine.enable_prefix_caching",
    "enable_chunked_prefill": "engine.enable_chunked_prefill",
    "long_prefill_token_threshold": "engine.long_prefill_token_threshold",
    "tensor_parallel_size": "engine.tensor_parallel_size", "pipeline_parallel_size": "engine.pipeline_parallel_size",
    "data_parallel_size": "engine.data_parallel_size", "enable_expert_parallel": "engine.enable_expert_parallel",
    "kv_cache_dtype": "engine.kv_cache_dtype", "quantization": "engine.quantization",
    "scheduling_policy": "policies.queue", "num_gpu_blocks_override": "engine.num_gpu_blocks_override",
    "kv_cache_memory_bytes": "engine.kv_cache_memory_bytes",
    "async_scheduling": "engine.async_scheduling", "enforce_eager": "engine.enforce_eager",
    "max_cudagraph_capture_size": "engine.max_cudagraph_capture_size",
    "cudagraph_capture_sizes": "engine.cudagraph_capture_sizes",  # read, with -cc's, by _cuda_graphs
    "scheduler_reserve_full_isl": "engine.scheduler_reserve_full_isl",
    "disable_hybrid_kv_cache_manager": "engine.disable_hybrid_kv_cache_manager",
    "prefix_cache_retention_interval": "engine.prefix_cache_retention_interval",  # 0.33's (0.19 has no flag)
    # 0.33's admission valves (vLLM 0.19 has none of these flags)
    "watermark": "engine.watermark", "max_num_queued_reqs": "engine.max_num_queued_reqs",
    "max_num_queued_tokens": "engine.max_num_queued_tokens", "max_num_scheduled_tokens": "engine.max_num_scheduled_tokens",
    "max_num_active_seqs": "engine.max_num_active_seqs",
    "performance_mode": "engine.performance_mode",  # throughput mode doubles the default budgets
    "attention_backend": "engine.attention_backend",  # a CUDA backend servesim checks (others recorded)
}
# the flags of vLLM's data-parallel balancing modes, read as cluster.dp_ranks_reached
LB_FLAGS = ("data_parallel_external_lb", "data_parallel_hybrid_lb", "data_parallel_rank", "data_parallel_size_local",
            "data_parallel_start_rank", "data_parallel_multi_port_external_lb")
# 0.33's shorthands for --speculative-config keys (EngineArgs.create_speculative_config)
SPEC_SHORTHANDS = {"spec_method": "method", "spec_model": "model", "spec_tokens": "num_speculative_tokens"}
# vllm bench serve's backends of a pooling task (benchmarks/lib/endpoint_request_func.py, both releases)
POOLING_BACKENDS = ("openai-embeddings", "openai-embeddings-chat", "openai-embeddings-clip",
                    "openai-embeddings-vlm2vec", "infinity-embeddings", "infinity-embeddings-clip", "vllm-pooling",
                    "vllm-rerank")
# the URL endings each generation backend's request function checks before it sends (endpoint_request_func.py)
ENDPOINT_ENDINGS = {"vllm": ("completions",), "openai": ("completions",), "openai-chat": ("chat/completions",),
                    "openai-responses": ("responses",)}
# backends whose server applies the model's chat template to each prompt (a message, not raw text)
CHAT_BACKENDS = ("openai-chat", "openai-responses")
# draft methods vLLM names; n-gram and suffix drafts are looked up on the CPU, nearly free beside a model's
FREE_DRAFTS = ("ngram", "suffix", "ngram_gpu")
# SpeculativeConfig's drafters that read the target's hidden states (needs_eagle_block_drop); use_eagle() adds 0.33's
# DFlash and DSpark
EAGLE_TYPE = ("eagle", "eagle3", "mtp")
# methods whose drafter vLLM finds without a `model` (SpeculativeConfig.__post_init__; dspark is 0.33's only)
NO_DRAFT_MODEL = FREE_DRAFTS + ("mtp", "dspark", "extract_hidden_states")

# vllm bench serve flags that only shape the result file (BenchOptions), or that a simulation has no use for
# because the lengths are given (a tokenizer, the output's end-of-sequence)
BENCH_RESULT = ("save_result", "save_detailed", "append_result", "result_dir", "result_filename", "label",
                "metadata", "backend", "tokenizer", "percentile_metrics", "metric_percentiles", "goodput", "model",
                "served_model_name")  # the last: checked against the server's names (a 404 otherwise)
BENCH_WORKLOAD = ("dataset_name", "num_prompts", "request_rate", "burstiness", "max_concurrency", "seed",
                  "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "input_len", "output_len",
                  "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len",
                  "prefix_repetition_prefix_len", "prefix_repetition_suffix_len", "prefix_repetition_num_prefixes",
                  "prefix_repetition_output_len", "ignore_eos", "disable_shuffle")


def _false_entry(key: str, version: str) -> tuple[str | None, str | None]:
    """A config file's `key: false` as vLLM's load_config_file passes it: (the flag it adds, or None where it drops
    the entry; a warning where dropping it leaves on what the user turned off). 0.19 drops every false (the
    flag's default stands); later releases (vLLM PR 51573, in 0.26) add --no-KEY where the parser registers that
    very spelling (so `enable_prefix_caching: false`, underscores, is still dropped)."""
    parser, rows = _parser("serve", version)
    registered = parser._option_string_actions
    if version != "0.19.0" and f"--no-{key}" in registered:
        return f"--no-{key}", None
    flag = "--" + key.replace("_", "-")
    # the flag as argparse finds it: its name, or a prefix of one switch's (r175: `enable-prefix: false` was
    # dropped unsaid, where `true` turns caching on)
    found = {a.dest: name for name, a in registered.items() if name == flag} or \
        {a.dest: name for name, a in registered.items() if name.startswith(flag)}
    row = rows.get(next(iter(found))) if len(found) == 1 else None
    if row is None or row["type"] != "switch" or found[row["flag"].lstrip("-").replace("-", "_")] in negatives(row) \
            or row.get("default") is False:
        return None, None  # not a switch, a negative form, or off by default: dropping it changes nothing
    spelt = next((n for n in negatives(row) if n.startswith("--no-")), None)
    why = (f"vLLM {version} adds --no-KEY only as the flag is spelt ({spelt})" if version != "0.19.0" and spelt
           else f"as vLLM {version} drops a false entry")
    return None, (f"{key}: false is dropped, {why}: {row['flag']}'s default stands"
                  + (f"; give {spelt} on the command line to turn it off" if spelt else ""))


def _without_config(argv: list[str]) -> list[str]:
    """The line less its `--config FILE` (the file's flags are counted apart: the line overrides them)."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    return argv[:i] + argv[i + 2:]


def with_config_file(argv: list[str], version: str = VLLM_VERSION) -> list[str]:
    """`vllm serve MODEL --config FILE ...`: the file's keys as flags, placed as vLLM's FlexibleArgumentParser
    places them (after the model, before the other flags, so the command line wins over the file): true as --key,
    false as _false_entry says, a list as --key v1 v2, a mapping as JSON."""
    from servesim.simulator.files import load_yaml, read_settings_text

    where = "vllm serve --config"
    if glued := next((a for a in argv if a.startswith("--config=")), None):  # (r175: read as not modelled, unsaid)
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: {where}: {glued} is not read: vLLM pulls a config file in only from "
                  f"`--config FILE`, two words (its parser tests `\"--config\" in args`), so it ignores this one's "
                  f"keys, and so does servesim"])
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise ConfigError(where, "given more than once: vLLM takes one config file")
    i = argv.index("--config")
    if i == len(argv) - 1:
        raise ConfigError(where, "expects a file (a YAML of flags)")
    path = argv[i + 1]
    if path.split(".")[-1] not in ("yaml", "yml"):
        raise ConfigError(where, f"{path}: must be a .yaml or .yml file, as vLLM reads it")
    twice: list = []  # vLLM's yaml.safe_load takes a key's last value (r171: refused as a scenario's would be)
    config = load_yaml(read_settings_text(path, where), where, path, as_pyyaml=True, twice=twice)
    if not isinstance(config, dict):
        raise ConfigError(where, f"{path}: must hold flag: value pairs (a mapping), as vLLM reads it")
    spelt: dict = {}  # a flag given as max-num-seqs and max_num_seqs is given twice too: the last wins (r173)
    for key in map(str, config):
        spelt.setdefault(key.replace("_", "-"), []).append(key)
    twice += [keys[-1] for keys in spelt.values() if len(keys) > 1 and keys[-1] not in twice]
    flags: list[str] = []
    said: list[str] = []
    model_first = bool(argv) and not argv[0].startswith("-")  # `vllm serve MODEL --config FILE ...`
    for key, value in config.items():
        if key == "model" and model_first:  # the positional model wins over the file's (ServeSubcommand.cmd)
            continue
        if isinstance(value, bool):
            flag, warning = (f"--{key}", None) if value else _false_entry(str(key), version)
            flags += [flag] if flag else []
            also = [k for k in spelt[str(key).replace("_", "-")] if k != key and config[k] is True]
            if flag is None and also:  # r174: an earlier `enforce-eager: true` stands, not the last false
                if key in twice:
                    twice.remove(key)
                warning = (warning or f"{key}: false is dropped, as vLLM {version} drops it") + \
                    f"; {also[0]}: true is taken"
            said += [f"servesim: warning: {where}: {warning}"] if warning else []
        elif isinstance(value, list):
            flags += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            flags += [f"--{key}", json.dumps(value)]
        else:
            flags += [f"--{key}", str(value)]
    on_line = {a.lstrip("-").split("=", 1)[0].replace("_", "-") for a in argv if a.startswith("--")}
    twice = [k for k in twice if str(k).replace("_", "-") not in on_line]  # the line's value stands (r181: said)
    if twice:
        said.insert(0, f"servesim: warning: {where}: {path} gives {', '.join(dict.fromkeys(map(str, twice)))} twice: "
                       f"the last value is taken, as vLLM takes it (yaml.safe_load, then its parser)")
    if said:
        from servesim.simulator.config import say_once

        say_once(said)
    if not model_first and "--model" not in flags and not any(re.match(r"^--model(=.+|$)", a) for a in argv):
        raise ConfigError(where, "no model: vLLM needs it right after `serve` (or as `model:` in the file)")
    rest = _without_config(argv)
    first = 1 if model_first else 0
    return rest[:first] + flags + rest[first:]


def read(serve_argv: list[str], bench_argv: list[str], version: str = VLLM_VERSION) -> VllmCommand:
    """`vllm serve ...` and `vllm bench serve ...` (without their leading words) -> scenario settings."""
    _check_model_position(serve_argv)
    serve = parse(with_config_file(serve_argv, version), "serve", version, line=_without_config(serve_argv))
    if serve.get("model_tag") and serve.get("model"):
        raise ConfigError("vllm serve --model", f"{serve['model']} beside the positional {serve['model_tag']}: vLLM's "
                                                f"parser moves --model's to the front and refuses the other as an "
                                                f"unrecognized argument")
    _check_bounds(serve, version)
    if serve.get("kv_cache_memory_bytes") == 0:  # vLLM's `if kv_cache_memory_bytes :=`: 0 is not given (round 126)
        del serve["kv_cache_memory_bytes"]
    if serve.get("max_model_len") == 1:  # vLLM starts; servesim's engine holds a prompt and an output token
        raise ConfigError(_flag("serve", "max_model_len", version),
                          "1: vLLM starts, but refuses every request (400: a prompt of a token leaves no room for "
                          "an output token), so every request of the bench fails (its result: completed 0; with "
                          "--ready-check-timeout-sec it stops at its test request): servesim simulates none of it")
    for flag in flag_tables(version).get("serve_json_objects", ()):  # dicts and config dataclasses only
        value = serve.get(flag.lstrip("-").replace("-", "_"))
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"vllm serve {flag}", f"a JSON object is expected (vLLM's config field takes no "
                                                    f"other), got {value!r:.60}")
    _check_json_configs(serve, version)
    _check_kv_configs(serve, version)
    _check_offloading_bytes(serve, version)
    _check_microbatching(serve, version)
    if (why := unstartable({"engine": {"block_size": serve.get("block_size")}})) is not None:
        raise ConfigError("vllm serve --block-size", why)
    not_modelled: dict = {}
    if not (serve.get("model_tag") or serve.get("model")):  # ModelConfig's default: `vllm serve` alone serves it
        try:
            load_model(VLLM_DEFAULT_MODEL)
        except ConfigError as exc:
            raise ConfigError("vllm serve MODEL", f"none given: vLLM serves its default, {exc.message}") from None
        serve["model"] = VLLM_DEFAULT_MODEL
    model_given = serve.get("model_tag") or serve.get("model")
    arch = _checkpoint_arch(model_given)
    if isinstance(serve.get("quantization"), str):  # ModelConfig lower-cases it before it checks it
        serve["quantization"] = serve["quantization"].lower()
    _quantized_activations(serve, arch, version)
    for dest, unmodelled, why in (
            ("dtype", TORCH_DTYPES.get(serve.get("dtype")) == "float32",
             "float32 weights and KV cache (twice a 16-bit model's bytes, no tensor-core kernel timed) are not "
             "simulated: give bfloat16 or float16"),
            ("cpu_offload_gb", (serve.get("cpu_offload_gb") or 0) > 0,
             "--cpu-offload-gb is not modelled: servesim keeps every weight on the GPU (vLLM would move that much "
             "to host memory and read it over the host link each step)")):
        if unmodelled:  # (r171: recorded only, the pool and steps a 16-bit GPU-resident model's, unsaid)
            raise ConfigError(_flag("serve", dest, version), f"{serve[dest]:g}: {why}" if dest == "cpu_offload_gb"
                              else f"{serve[dest]}: {why}")
    marlin = serve.get("quantization") if "marlin" in str(serve.get("quantization")) else None
    if serve.get("quantization") is not None:
        _quantization(serve, model_given, arch, version, not_modelled)
    if version != "0.19.0":
        _float_kv_cache(serve, arch)
    _decode_context_parallel(serve, arch, version)
    reached, first_rank = _parallel_launch(serve, arch, version)
    bench = parse(bench_argv, "bench_serve", version)
    if version == "0.19.0":
        _dataset_path_order(bench_argv)
    model = serve.pop("model_tag", None) or serve.pop("model", None)
    serve.pop("model", None)
    settings: dict = {"model": model}
    rows = _parser("serve", version)[1]
    for dest, key in SERVE_SETTINGS.items():  # a flag left out is vLLM's default, where its parser has one
        default = rows[dest].get("default") if dest in rows else None
        if dest not in serve and default is not None and not (dest == "scheduling_policy" and default == "fcfs") \
                and not (dest == "gpu_memory_utilization" and serve.get("kv_cache_memory_bytes")):  # sizes nothing
            settings[key] = default
    from servesim.simulator.config import ATTENTION_BACKEND_NAMES

    attention = serve.get("attention_config") if isinstance(serve.get("attention_config"), dict) else {}
    if str(attention.get("backend")).upper() in ATTENTION_BACKEND_NAMES:  # the same choice, by --attention-config
        settings["engine.attention_backend"] = str(attention["backend"]).upper()
    for dest, value in serve.items():
        if dest == "attention_backend" and str(value).upper() in ATTENTION_BACKEND_NAMES:
            value = str(value).upper()  # vLLM reads it by the enum's name
        elif dest == "attention_backend":  # auto: vLLM's own choice; else one servesim does not check (ROCm's, CPU's,
            if str(value).lower() != "auto":  # a sparse one)
                not_modelled[_flag("serve", dest, version)] = value
            continue
        if dest in SERVE_SETTINGS:
            if dest == "max_model_len" and value == -1:  # 'auto' or -1: vLLM fits it to the KV pool
                value = "auto"
            if dest == "long_prefill_token_threshold" and version == "0.19.0" and value < 0:
                value = 0  # 0.19's field has no floor, and its scheduler caps only above 0
            settings[SERVE_SETTINGS[dest]] = value
        elif dest not in SPEC_SHORTHANDS and dest not in ("speculative_config", "served_model_name",
                                                          "enable_per_request_metrics", "disable_log_stats",
                                                          "custom_histogram_buckets", *GRAPH_FLAGS):
            not_modelled[_flag("serve", dest, version)] = value
    eplb = serve.get("eplb_config") if isinstance(serve.get("eplb_config"), dict) else {}
    if serve.get("enable_eplb") and eplb.get("num_redundant_experts"):  # their weights; the balancing not modelled
        settings["engine.num_redundant_experts"] = eplb["num_redundant_experts"]
    flag = _flag("serve", "attention_config", version)
    if "engine.attention_backend" in settings and "attention_backend" not in serve and flag in not_modelled:
        rest = {k: v for k, v in attention.items() if k != "backend"}  # its backend is modelled: not recorded
        if rest:
            not_modelled[flag] = rest
        else:
            del not_modelled[flag]
    if serve.get("disable_sliding_window"):
        _without_sliding_window(settings, arch, version, not_modelled)
    if reached is not None:  # the balancing mode's flags say which ranks this server reaches
        if reached < (serve.get("data_parallel_size") or 1):
            settings["cluster.dp_ranks_reached"] = reached
        for dest in LB_FLAGS:
            if dest in serve:  # (0.19 has no multi-port flag)
                not_modelled.pop(_flag("serve", dest, version), None)
    _api_servers(serve, version, not_modelled)
    for dest in ("max_num_partial_prefills", "max_long_partial_prefills"):  # 0.19's _check_feature_supported
        if version == "0.19.0" and serve.get(dest, 1) != 1:
            raise ConfigError(_flag("serve", dest, version), f"{serve[dest]}: vLLM 0.19 does not start with it "
                                                             f"(Concurrent Partial Prefill is not supported, it says)")
    if a2a := serve.get("all2all_backend"):  # the scenario says what it changes (0.33's batched DP MoE's default
        settings["engine.all2all_backend"] = a2a  # budget) and that another backend's kernels are not timed
        not_modelled.pop(_flag("serve", "all2all_backend", version), None)
    settings.update(_cuda_graphs(serve, version, not_modelled, arch))
    if serve.get("all2all_backend") == "moonep":  # a 0.33 backend (0.19's parser has no such choice)
        _moonep(serve, arch, settings)
    speculation, method, spec_config = _speculation(serve, version, not_modelled, arch)
    settings.update(speculation)
    if serve.get("kv_sharing_fast_prefill") and method in (*EAGLE_TYPE, *(("dflash", "dspark") if version != "0.19.0"
                                                                         else ())):  # SpeculativeConfig.use_eagle
        raise ConfigError(_flag("serve", "kv_sharing_fast_prefill", version),
                          f"beside {method}: vLLM refuses it (the drafter needs correct logits for every prompt "
                          f"token, which fast prefill does not give)")
    k = speculation.get("speculative.num_speculative_tokens", 0)
    lookahead = k + 1 if method == "dflash" else k if method in (*EAGLE_TYPE, "draft_model", "dspark") \
        else 0  # VllmConfig.num_lookahead_tokens: the slots a request's drafts hold in a step
    budget = settings.get("engine.max_num_batched_tokens")
    if version != "0.19.0" and lookahead and isinstance(budget, int) and budget <= lookahead:
        raise ConfigError(_flag("serve", "max_num_batched_tokens", version),
                          f"{budget} leaves no slot for a token beside {method}'s {lookahead} lookahead tokens: vLLM "
                          f"{version} refuses it (not enough slots to schedule a token)")
    if lookahead and "speculative.method" in speculation:  # the KV slots each allocation reserves for the drafter
        settings["speculative.lookahead_slots"] = lookahead
    if method in ("dflash", "dspark"):  # their draft pass's query rows: VllmConfig lowers max_num_active_seqs
        settings["speculative.draft_pass_tokens"] = lookahead
    elif method:  # SpeculativeConfig.max_num_new_slots_for_drafting (DFlash's and DSpark's: none)
        slots = (k - 1 if spec_config.get("parallel_drafting") else 0) + (method == "draft_model")
        if slots:
            settings["speculative.drafting_slots_per_seq"] = slots
    _async_scheduling(serve, version, method, spec_config, settings)
    v1 = _v1_model_runner(serve, method, spec_config)  # why 0.33 runs its V1 model runner, or None
    if method and (spec_config.get("parallel_drafting") or method in ("dflash", "dspark")):
        settings["speculative.parallel_drafting"] = True  # one drafter pass proposes every draft (r146)
    if method and version != "0.19.0" and v1:  # its drafter runs every step (can_skip_drafts: the V2 runner's)
        settings["speculative.skips_unused_drafts"] = False
    if method:  # which releases and graph modes round the capture sizes to 1 + k (r134, r135)
        mode = _graph_mode(serve, version, arch)
        rounds = mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY") if version == "0.19.0" else \
            mode in ("FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY") and bool(v1)
        if rounds != (version == "0.19.0"):
            settings["engine.graph_sizes_round_to_drafts"] = rounds
    if version != "0.19.0" and (serve.get("prefill_context_parallel_size") or 1) > 1 and v1:  # VllmConfig's
        # V1-runner checks (round 127)
        raise ConfigError(_flag("serve", "prefill_context_parallel_size", version),
                          f"beside {v1}, which runs the V1 model runner: it does not support prefill context "
                          f"parallel (vLLM refuses the line)")
    _routed_experts(serve, arch, version, method, spec_config)
    _startup_checks(serve, version, spec_config)
    _tokenizer_mode(serve.get("tokenizer_mode"), version, _flag("serve", "tokenizer_mode", version))
    _tokenizer_mode(bench.get("tokenizer_mode"), version, _flag("bench_serve", "tokenizer_mode", version))
    if serve.get("default_mm_loras") and arch is not None and not arch.encoder_params:
        raise ConfigError(_flag("serve", "default_mm_loras", version), f"{model} is no multimodal model: vLLM "
                                                                       f"refuses modality LoRAs for it")
    _refuse_model_overrides(serve.get("hf_overrides"), version)
    _hybrid_manager(serve, version, method, arch, settings)
    if serve.get("skip_tokenizer_init"):  # (r150: the run completed every request)
        raise ConfigError(_flag("serve", "skip_tokenizer_init", version),
                          f"the server then has no tokenizer, and vllm bench serve's "
                          f"{bench.get('dataset_name', 'random')!r} dataset sends text prompts: vLLM {version} answers "
                          f"every request 400 (\"Tokenizer not available when skip_tokenizer_init=True\")")
    generation = serve.get("override_generation_config")
    options, workload = _bench(bench, not_modelled, version, serve.get("max_logprobs", 20),
                               arch.vocab_size if arch else None, generation if isinstance(generation, dict) else {})
    options.server_metrics = bool(serve.get("enable_per_request_metrics"))  # 0.33's flag (0.19 has none)
    options.server_counters = not serve.get("disable_log_stats")  # no stat loggers: /metrics has no vllm: series
    options.histogram_buckets = _histogram_buckets(serve.get("custom_histogram_buckets"), version)
    options.first_engine = first_rank if reached is not None else 0  # the DP rank its engines are labelled from
    ubatches = _microbatches(serve)  # 0.33's micro-batching needs both DBO thresholds at least its count
    threshold, low = min((serve.get("dbo_decode_token_threshold", 32), "decode"),
                         (serve.get("dbo_prefill_token_threshold", 512), "prefill"))
    # vLLM's checks of the serve line before it loads (entrypoints/.../cli_args.py validate_parsed_serve_args)
    for flag, fails, says in (
            ("--enable-per-request-metrics", options.server_metrics and serve.get("disable_log_stats"),
             "requires engine statistics logging; remove --disable-log-stats, as vLLM says"),
            ("--enable-auto-tool-choice", serve.get("enable_auto_tool_choice") and not serve.get("tool_call_parser"),
             "requires --tool-call-parser, as vLLM says"),
            ("--enable-log-outputs", serve.get("enable_log_outputs") and not serve.get("enable_log_requests"),
             "requires --enable-log-requests, as vLLM says"),
            ("--sse-keep-alive-interval", (serve.get("sse_keep_alive_interval") or 0) < 0,
             "must be a non-negative integer (0 disables keep-alive comments), as vLLM says"),
            ("--max-cpu-loras", serve.get("enable_lora") and (serve.get("max_cpu_loras") or 0) > 0
             and serve["max_cpu_loras"] < serve.get("max_loras", 1),
             f"must be >= --max-loras ({serve.get('max_loras', 1)}), as vLLM's LoRAConfig says"),
            (f"--dbo-{low}-token-threshold", version != "0.19.0" and ubatches > 1 and threshold < ubatches,
             f"{threshold} is below the {ubatches} microbatches a batch is split into: vLLM {version}'s "
             f"ParallelConfig refuses it")):
        if fails:
            raise ConfigError(f"vllm serve {flag}", says)
    workload["workload.request_max_tokens"] = True  # vllm bench serve sends each output length as max_tokens
    # which the API server refuses past max_model_len (0.19) or lowers to fit (0.33's get_max_tokens)
    workload["workload.max_tokens_past_context"] = "refuse" if version == "0.19.0" else "lower"
    workload["workload.clip_to_max_model_len"] = False  # and vLLM refuses what does not fit (400), cuts nothing
    extra = bench.get("extra_body") if isinstance(bench.get("extra_body"), dict) else {}
    if extra.get("min_tokens") is not None:  # each request's: SamplingParams refuses one above its max_tokens (400)
        workload["workload.min_tokens"] = int(_lax_number(extra["min_tokens"], True))
    served = serve.get("served_model_name") or [model]
    _refuse_unserved(served, bench, options.model_id, _lora_modules(serve, version, served))
    if bench_argv:  # (a server alone: the user's own client is theirs to point at it)
        _refuse_unreached(serve, bench)
    options.model_id = options.model_id or model  # vLLM's client asks the server for it
    if options.tokenizer_id is None and options.model_id != model and options.model_id in served and \
            not bench.get("skip_tokenizer_init"):  # (r149) a served name is no tokenizer's
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: vllm bench serve --model {options.model_id} without --tokenizer: vLLM's "
                  f"client loads its tokenizer by that served name, which fails unless a local folder has it; give "
                  f"--tokenizer {model} (servesim needs none)"])
    options.tokenizer_id = options.tokenizer_id or options.model_id
    settings.update(workload)
    settings["engine.vllm_defaults"] = version  # the release's own defaults fill what the line leaves out
    drafts = (k or spec_config.get("num_speculative_tokens")) if serve.get("enable_lora") and spec_config else None
    return VllmCommand(model, settings, options, not_modelled, version, set(serve), served[0],
                       drafts if isinstance(drafts, int) else None, effective_kv_config(serve, version), marlin)


# servesim settings the bench command decides -> the flags that decide them
BENCH_SETTINGS = {"workload.num_requests": "--num-prompts", "seed": "--seed", "workload.max_concurrency":
                  "--max-concurrency", "workload.arrival": "--request-rate, --burstiness and --ramp-up-*",
                  "workload.slo_classes": "--goodput",
                  "workload.prompt_tokens": "--random-input-len (--input-len, --prefix-repetition-suffix-len)",
                  "workload.output_tokens": "--random-output-len (--output-len, --prefix-repetition-output-len)",
                  "workload.shared_prefix": "--random-prefix-len (--prefix-repetition-prefix-len)",
                  "workload.min_tokens": "--extra-body's min_tokens",
                  "workload.request_max_tokens": "its max_tokens (each output length)",
                  "workload.max_tokens_past_context": "--vllm-version (0.19 refuses, 0.33 lowers max_tokens)",
                  "workload.clip_to_max_model_len": "vLLM's 400 for a request longer than --max-model-len"}


# what a flag decides even when the line leaves it out (the release's default, or servesim's for vLLM's)
# (the queue policy is left out unless --scheduling-policy is given: sjf, servesim's own, has no vLLM flag value)
FLAG_DECIDED = (*(k for k in SERVE_SETTINGS.values() if k != "policies.queue"), *BENCH_SETTINGS,
                "speculative.method", "speculative.num_speculative_tokens", "engine.usage_context",
                "engine.vllm_defaults")
OPENAI_SERVER = "vllm serve, which runs vLLM's OpenAI server (usage context openai_server, whose default budgets it takes)"


def decided_by(cmd: VllmCommand, key: str) -> str | None:
    """The vLLM flag (or its default) that decides `key` (a setting, or a section holding some) in this
    command; None when no flag does and a --set of it is the user's own."""
    balanced = ("cluster.dp_ranks_reached",) if (cmd.settings.get("engine.data_parallel_size") or 1) > 1 else ()
    for setting in dict.fromkeys((*cmd.settings, *FLAG_DECIDED, *balanced)):
        if not (key == setting or key.startswith(setting + ".") or setting.startswith(key + ".")):
            continue
        if setting == "model":
            return "vllm serve MODEL"
        if setting == "engine.usage_context":
            return OPENAI_SERVER
        if setting == "engine.vllm_defaults":
            return "servesim vllm --vllm-version, the release whose defaults fill what the line leaves out"
        if setting.startswith("speculative."):
            return "vllm serve --speculative-config"
        if setting in BENCH_SETTINGS:
            return f"vllm bench serve {BENCH_SETTINGS[setting]}"
        if setting == "cluster.dp_ranks_reached":  # read from the balancing mode's flags, else every rank
            return ", ".join(_flag("serve", d, cmd.version) for d in LB_FLAGS if d in cmd.given) or \
                f"{_flag('serve', 'data_parallel_size', cmd.version)} under vLLM's internal balancer, which reaches " \
                f"every rank"
        dest = next(d for d, k in SERVE_SETTINGS.items() if k == setting)
        if dest not in _parser("serve", cmd.version)[1]:  # 0.33's valves, which 0.19 has no flag for
            return f"vLLM {cmd.version}, which has no --{dest.replace('_', '-')}: its servers run without it"
        if dest in CC_KEYS and dest not in cmd.given and "compilation_config" in cmd.given:  # -cc gave it
            return f"vllm serve --compilation-config.{dest}"
        if dest == "attention_backend" and dest not in cmd.given and "attention_config" in cmd.given:
            return f"{_flag('serve', 'attention_config', cmd.version)}.backend"
        return _flag("serve", dest, cmd.version) + ("" if dest in cmd.given else ", left at vLLM's default")
    return None


def as_flag_error(cmd: VllmCommand, sets: list[str], exc: ConfigError) -> ConfigError:
    """A setting's refusal said as the flag that gave it (the user typed --burstiness, not workload.arrival.cv);
    servesim's own name, and the value it was given, stay in the message."""
    given = {s.split("=", 1)[0].strip() for s in sets}
    if any(exc.field == k or exc.field.startswith(k + ".") for k in given):
        return exc  # the user's own --set
    flag = decided_by(cmd, exc.field)
    message = _said_as_flags(cmd, exc.message)
    if message.startswith("Input should be '") and flag and flag.startswith("vllm serve --"):  # a choice vLLM's parser
        message = f"not modelled: servesim's choices are {message[len('Input should be '):]}"  # vLLM may take it
    return exc if flag is None else ConfigError(flag, f"{message} (as servesim's {exc.field})")


def _said_as_flags(cmd: VllmCommand, message: str) -> str:
    """The engine settings a refusal advises changing, said as the release's flags (lower --max-model-len)."""
    def flag(match: re.Match) -> str:
        dest = next((d for d, k in SERVE_SETTINGS.items() if k == match.group(0)), None)
        flags = _parser("serve", cmd.version)[1]
        return flags[dest]["flag"] if dest in flags else match.group(0)
    return re.sub(r"\bengine\.[a-z_]+", flag, message)


def refuse_overrides(cmd: VllmCommand, sets: list[str], gpu_given: bool) -> None:
    """A --set of what the pasted command decides would run one thing and report another (the result file and
    vllm_command.json say the flags): refused, naming the flag to change."""
    for item in sets:
        key = item.split("=", 1)[0].strip()
        if key.startswith(("simulation.warmup", "simulation.cooldown", "simulation.max_sim_time")) or \
                (key == "simulation" and any(w in item for w in ("warmup", "cooldown", "max_sim_time"))):
            # r141: a clock cut sent the file fewer requests than num_prompts, a made-up error for those cut
            raise ConfigError(f"--set {key}", "vLLM's client measures every request it sends, to its answer: a "
                                              "warm-up or cool-down window, or a clock cut, would leave the result "
                                              "file's totals short of its per-request arrays; use servesim run for "
                                              "those")
        on_gpu = gpu_given and (key in ("hardware", "hardware.gpu") or key.startswith("hardware.gpu."))
        flag = "servesim vllm --gpu" if on_gpu else decided_by(cmd, key) or _queue_decided(cmd, key, item)
        if flag == OPENAI_SERVER:
            raise ConfigError(f"--set {key}", f"decided by {flag}; give --max-num-batched-tokens and --max-num-seqs "
                                              f"for other budgets")
        if flag and flag.startswith("vLLM "):
            raise ConfigError(f"--set {key}", f"decided by {flag} (vLLM {VLLM_VERSIONS[0]}'s has the flag: "
                                              f"--vllm-version {VLLM_VERSIONS[0]})")
        if flag:
            raise ConfigError(f"--set {key}", f"the pasted command decides it ({flag}): give the flag, not --set, so the "
                                                 f"result file and vllm_command.json say what ran")


def _queue_decided(cmd: VllmCommand, key: str, item: str) -> str | None:
    """--scheduling-policy (or its default, fcfs) decides the queue, unless the --set asks for servesim's own
    sjf, which vLLM has no value for."""
    from servesim.simulator.files import load_yaml

    if key not in ("policies", "policies.queue") or "=" not in item:
        return None
    try:
        value = load_yaml(item.split("=", 1)[1], "--set", f"--set {key}")
    except ConfigError:
        return None  # the scenario's own parse names it
    queue = value.get("queue") if key == "policies" and isinstance(value, dict) else value if key != "policies" \
        else None
    if queue is None or queue == "sjf":
        return None
    return _flag("serve", "scheduling_policy", cmd.version) + \
        ("" if "scheduling_policy" in cmd.given else ", left at vLLM's default (fcfs)")


def _histogram_buckets(value, version: str) -> dict | None:
    """0.33's --custom-histogram-buckets as ObservabilityConfig takes it (dict[str, list[float]], validated by
    _validate_custom_histogram_buckets): known families, each a non-empty list of finite, positive, strictly
    increasing bounds."""
    from pydantic import TypeAdapter, ValidationError

    from servesim.simulator.vllm_metrics import BUCKET_FAMILIES

    if value is None:
        return None
    flag = _flag("serve", "custom_histogram_buckets", version)
    flags = [(f, b) for f, bounds in value.items() if isinstance(bounds, list) for b in bounds
             if isinstance(b, bool)] if isinstance(value, dict) else []
    if flags:  # _reject_bool_histogram_bounds, before pydantic reads true as 1.0
        raise ConfigError(flag, f"[{flags[0][0]!r}]: bound {flags[0][1]!r} must be a number, not a boolean, as vLLM "
                                f"says")
    try:
        value = TypeAdapter(dict[str, list[float]]).validate_python(value)
    except ValidationError:
        raise ConfigError(flag, f"a JSON object of bucket family -> list of bounds, got {value!r:.60}") from None
    for family, bounds in value.items():
        broken = (f"unknown bucket family {family!r}; known families: {', '.join(sorted(BUCKET_FAMILIES))}"
                  if family not in BUCKET_FAMILIES else f"[{family!r}]: bucket list must not be empty" if not bounds
                  else f"[{family!r}]: bounds must be finite and greater than 0" if not all(
                      math.isfinite(b) and b > 0 for b in bounds)
                  else f"[{family!r}]: bounds {bounds} must be strictly increasing" if any(
                      a >= b for a, b in zip(bounds, bounds[1:])) else None)
        if broken:
            raise ConfigError(flag, f"{broken}, as vLLM says")
    return value


# the tokenizer modes each release's registry loads (vllm/tokenizers/registry.py _VLLM_TOKENIZERS), with `auto`
# (0.19: and `slow`, read as hf) and 0.33's terratorch, which ModelConfig sets for its own models
TOKENIZER_MODES = {"0.19.0": ("auto", "slow", "deepseek_v32", "grok2", "hf", "kimi_audio", "mistral", "qwen_vl"),
                   "0.33.0": ("auto", "terratorch", "alpamayo2_super", "cohere", "deepseek_v32", "deepseek_v4",
                              "deepseek_v41", "hf", "kimi_audio", "kimi_k3", "mistral", "inkling")}


def _tokenizer_mode(value, version: str, field: str) -> None:
    """--tokenizer-mode (serve's and the bench client's): free text to the parser, but loading the tokenizer
    looks it up (No tokenizer registered for tokenizer_mode=...), at the server's start or before the bench sends."""
    modes = TOKENIZER_MODES.get(version, TOKENIZER_MODES["0.33.0"])
    if value is not None and value not in modes:
        raise ConfigError(field, f"{value!r}: vLLM {version} registers no such tokenizer mode (it has "
                                 f"{', '.join(modes)})")


LORA_MODULE_KEYS = {"0.19.0": ("name", "path", "base_model_name")}  # LoRAModulePath's fields
LORA_MODULE_KEYS_033 = ("name", "path", "base_model_name", "is_3d_lora_weight")


def _lora_modules(serve: dict, version: str, served: list[str]) -> list[str]:
    """The adapters `vllm serve --lora-modules` loads at start, by name, read as each release's LoRAParserAction
    reads them (NAME=PATH, 0.19 splitting on every '=', or a JSON object of LoRAModulePath's fields) and checked
    as its API server loads them (LoRA enabled, a name and a path, each name once, 0.33: no served model's name)."""
    field = _flag("serve", "lora_modules", version)
    keys = LORA_MODULE_KEYS.get(version, LORA_MODULE_KEYS_033)
    names = []
    for item in serve.get("lora_modules") or []:
        if item in (None, ""):
            continue
        if "=" in item and "," not in item:
            parts = item.split("=") if version == "0.19.0" else item.split("=", 1)
            if len(parts) != 2:
                raise ConfigError(field, f"{item!r}: vLLM {version} reads NAME=PATH with one '=' (it fails to "
                                         f"parse more)")
            name, path = parts
        else:
            try:
                given = json.loads(item)
            except JSON_ERRORS:
                raise ConfigError(field, f"{item!r}: not NAME=PATH nor valid JSON, as vLLM says") from None
            if not isinstance(given, dict) or not {"name", "path"} <= set(given) or set(given) - set(keys):
                raise ConfigError(field, f"{item!r}: invalid fields: vLLM {version} takes an object of "
                                         f"{', '.join(keys)} (name and path given)")
            name, path = given["name"], given["path"]
        if not name or not path:
            raise ConfigError(field, f"{item!r}: both the adapter's name and its path must be given, as vLLM's "
                                     f"server says when it loads it")
        if name in names:
            raise ConfigError(field, f"{name!r} given twice: vLLM's server refuses to load an adapter again")
        if version != "0.19.0" and name in served:
            raise ConfigError(field, f"{name!r} is a served model's name: vLLM {version}'s server refuses the "
                                     f"adapter (it conflicts with a served base model)")
        names.append(name)
    if names and not serve.get("enable_lora"):
        raise ConfigError(field, "needs --enable-lora: vLLM's server fails to load the adapters at start")
    return names


def _refuse_unserved(served: list[str], bench: dict, model_id: str | None, adapters: list[str]) -> None:
    """The client names a model in each request (its --served-model-name, else its --model; without --model, the
    server's first, and --served-model-name unread); a server that serves another answers every request 404:
    refused rather than simulated as served, as is one of the server's LoRA adapters, which servesim does not
    simulate."""
    if model_id is None:
        return
    flag, sent = (("--served-model-name", bench["served_model_name"]) if bench.get("served_model_name")
                  else ("--model", model_id))
    if sent in adapters:
        raise ConfigError(f"vllm bench serve {flag}", f"{sent!r} is a LoRA adapter of the server (vllm serve "
                                                      f"--lora-modules): servesim simulates the base model only")
    if sent not in served:
        raise ConfigError(f"vllm bench serve {flag}", f"{sent!r} is not a model the server serves "
                                                      f"({', '.join(map(repr, served))}): vLLM would answer every "
                                                      f"request 404")


def _refuse_unreached(serve: dict, bench: dict) -> None:
    """A client that cannot reach the server, or that it refuses, gets no answer: vLLM's client stops at its first
    test request and writes no result (r171: both were simulated as served). Its --port against the server's (both
    8000 by default; a --base-url is the user's to get right), and under the server's --api-key the key its
    Authorization header carries (vllm bench sends OPENAI_API_KEY's, an environment variable servesim refuses
    before the line, or a --header's)."""
    if not bench.get("base_url") and bench.get("port", 8000) != serve.get("port", 8000):
        raise ConfigError("vllm bench serve --port", f"{bench.get('port', 8000)}, where the server listens on "
                                                     f"{serve.get('port', 8000)} (vllm serve --port): vLLM's client "
                                                     f"gets no connection and writes no result")
    keys = serve.get("api_key")  # an empty key is none: vLLM adds no authentication for it (api_server.py)
    keys = [k for k in ([keys] if isinstance(keys, str) else list(keys or [])) if k]
    if keys:  # the client strips a header's key and value (serve.py's `# Headers`)
        sent = [h.split("=", 1)[1].strip() for h in bench.get("header") or [] if h.split("=", 1)[0].strip().lower()
                == "authorization"]
        if not sent or sent[-1] not in [f"Bearer {k}" for k in keys]:
            raise ConfigError("vllm serve --api-key", f"the server answers 401 to a request without its key, and "
                              f"vllm bench serve sends {'another' if sent else 'none'} (give the client --header "
                              f"Authorization='Bearer KEY'): its first test request fails and it writes no result")


def _flag(kind: str, dest: str, version: str) -> str:
    return f"vllm {kind.replace('_', ' ')} {_parser(kind, version)[1][dest]['flag']}"


def _other_release(argv: list[str], kind: str, version: str) -> str:
    """For a flag refused: the other release whose parser takes the whole line, if one does."""
    for other in VLLM_VERSIONS:
        if other != version:
            try:
                _parser(kind, other)[0].parse_args(_rewrite(argv, kind, other))
            except (_Refused, ConfigError):
                continue
            return f"; vLLM {other}'s takes it: --vllm-version {other}"
    return ""


def _v1_model_runner(serve: dict, method: str | None, config: dict) -> str | None:
    """What makes 0.33 run the V1 model runner rather than V2 (VllmConfig._get_v2_model_runner_unsupported_features,
    as far as a line says: VLLM_USE_V2_MODEL_RUNNER is not seen), or None."""
    if method in ("suffix", "custom_class"):
        return f"{method} speculative decoding"
    if config.get("parallel_drafting") and method not in ("dflash", "dspark"):
        return "parallel drafting"
    if method == "draft_model" and config.get("use_heterogeneous_vocab"):
        return "a heterogeneous-vocabulary draft model"
    if _microbatches(serve) > 1:
        return "dual batch overlap"  # a feature only the V1 model runner has
    return None


def _async_scheduling(serve: dict, version: str, method: str | None, config: dict, out: dict) -> None:
    """What vLLM's VllmConfig does with async scheduling beside a draft method its model runner cannot overlap,
    padded drafter batches turned off, or 0.19's Ray executor: left unset it is turned off, asked for it is
    refused (0.19 takes draft_model then). 0.19: every method but EAGLE/MTP and ngram_gpu; 0.33: only on the V1
    model runner (suffix, custom_class, and parallel drafting but DFlash's and DSpark's)."""
    eagle = method in (*EAGLE_TYPE, "extract_hidden_states", "dflash")  # EagleModelTypes
    padded_off = method is not None and bool(config.get("disable_padded_drafter_batch"))
    if version == "0.19.0":  # (turns it off, why, refused when asked for)
        rules = [(method is not None and not eagle and method != "ngram_gpu", f"{method} speculative decoding",
                  method != "draft_model"),
                 (padded_off, "disable_padded_drafter_batch", True),
                 (_ray_executor(serve), "the ray executor", True)]
    else:
        v1_runner = _v1_model_runner(serve, method, config) is not None
        rules = [(v1_runner and method is not None and not eagle and method not in ("ngram_gpu", "draft_model", "dspark"),
                  f"{method} speculative decoding", True),
                 (v1_runner and padded_off, "disable_padded_drafter_batch", True)]
    if serve.get("async_scheduling") is None and any(off for off, _, _ in rules):
        out["engine.async_scheduling"] = False
    for why in (why for off, why, refused in rules if off and refused and serve.get("async_scheduling")):
        raise ConfigError("vllm serve --async-scheduling", f"vLLM {version} does not run async scheduling with "
                                                           f"{why} (it refuses the line)")


def _proposer_path(model) -> bool:
    """vLLM 0.33's _is_custom_proposer_path: a dotted import path (two or more identifiers), not a URL or HF id."""
    parts = str(model).split(".")
    return not str(model).startswith(("http://", "https://", "file://")) and "/" not in str(model) and \
        len(parts) >= 2 and all(part.isidentifier() for part in parts)


# SpeculativeConfig's methods that load no drafter of their own (__post_init__): the rest load one, whose tensor
# parallel size and length it checks
LOADS_NO_DRAFTER = ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states")
SUFFIX_BOUNDS = {"suffix_decoding_max_tree_depth": (1, None), "suffix_decoding_max_cached_requests": (0, None),
                 "suffix_decoding_max_spec_factor": (0, None), "suffix_decoding_min_token_prob": (0, 1)}


# 0.33's drafters that read the target's hidden states (eagle3_utils.requires_aux_hidden_states), and the model
# families servesim knows whose vLLM 0.33 class lacks SupportsEagle3 (mixtral.py, qwen2_moe.py)
AUX_HIDDEN_STATE_METHODS = ("eagle3", "dflash", "dspark", "extract_hidden_states")
NO_EAGLE3_FAMILIES = ("mixtral", "qwen2_moe")
# vLLM 0.19's aux_hidden_states_supported: model types (substrings) whose hidden states EAGLE-3 may read
AUX_HIDDEN_STATE_FAMILIES = ("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe",
                             "nemotron_h", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")


def _check_spec_combinations(config: dict, method: str, field: str) -> None:
    """0.33's SpeculativeConfig refusals of one field beside another (its keys absent in 0.19's)."""
    if config.get("draft_lm_head_quantization") is not None and method not in ("eagle", "eagle3", "mtp"):
        raise ConfigError(f"{field}.draft_lm_head_quantization", f"not supported for method {method!r}, as vLLM says")
    if config.get("use_heterogeneous_vocab") and (method != "draft_model" or
                                                  config.get("draft_sample_method", "greedy") != "greedy"):
        raise ConfigError(f"{field}.use_heterogeneous_vocab", "only with method draft_model and greedy draft "
                                                              "sampling, as vLLM says")
    if config.get("index_share_for_mtp_iteration") is not None and method != "mtp":
        raise ConfigError(f"{field}.index_share_for_mtp_iteration", "only with method mtp, as vLLM says")
    if config.get("use_heterogeneous_vocab") and config.get("use_local_argmax_reduction"):
        raise ConfigError(f"{field}.use_heterogeneous_vocab", "not with use_local_argmax_reduction (its token "
                                                              "intersection needs the full draft logits), as vLLM says")
    if config.get("enable_adaptive_verification") and config.get("use_local_argmax_reduction") and method != "dspark":
        raise ConfigError(f"{field}.enable_adaptive_verification", "not with use_local_argmax_reduction (the draft "
                                                                   "logits it needs are never made), as vLLM says")


# QuantizationMethods per release (model_executor/layers/quantization/__init__.py): what ModelConfig takes as a
# quantization, the drafter's too
QUANTIZATION_METHODS = {
    "0.33.0": ("awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
               "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
               "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8",
               "online", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only",
               "nvfp4_per_token", "mxfp8"),
    "0.19.0": ("awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed",
               "gguf", "gptq_marlin", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "experts_int8",
               "quark", "moe_wna16", "torchao", "inc", "mxfp4", "mxfp8", "petit_nvfp4", "cpu_awq")}
PROPOSER_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "dflash")  # the V1 runner's shared drafter class
DYNAMIC_SD_V1_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")  # 0.33 keeps their schedule
MAX_SPEC_LEN = 128  # the V1 rejection sampler's (v1/sample/rejection_sampler.py), asserted at the first verification


def _check_drafter_runner(config: dict, method: str, k: int, serve: dict, version: str, field: str) -> None:
    """What the model runner's drafter refuses as it loads or first verifies: on the V1 runner (0.19's only; 0.33's
    where _v1_model_runner says) more than 128 drafts, a draft model's TP other than the target's, and unpadded
    drafter batches where drafts need input slots of their own; on 0.33's V2 runner, local argmax reduction beside
    probabilistic draft sampling and extract_hidden_states sampling other than greedily."""
    v1 = version == "0.19.0" or _v1_model_runner(serve, method, config) is not None
    if v1:
        parallel = config.get("parallel_drafting") or method == "dflash"
        hidden = method in EAGLE_TYPE or (method == "dflash" and version == "0.19.0")  # the slot they pass states in
        tp, draft_tp = _lax_int(serve.get("tensor_parallel_size", 1)), config.get("draft_tensor_parallel_size")
        rules = [(k > MAX_SPEC_LEN, "num_speculative_tokens", f"{k} above the V1 rejection sampler's {MAX_SPEC_LEN}: "
                                                              f"vLLM fails its first verification"),
                 (method == "draft_model" and draft_tp is not None and draft_tp != tp, "draft_tensor_parallel_size",
                  f"{draft_tp} beside the target's tensor_parallel_size {tp}: vLLM's draft-model proposer needs "
                  f"them equal"),
                 (method in PROPOSER_METHODS and config.get("disable_padded_drafter_batch") and
                  (k if parallel else 1) - hidden > 0, "disable_padded_drafter_batch",
                  f"{method}{' with parallel drafting' if parallel else ''} drafts only in padded drafter batches, "
                  f"as vLLM says")]
    else:
        sampling = config.get("draft_sample_method", "greedy")
        rules = [(config.get("use_local_argmax_reduction") and sampling == "probabilistic",
                  "use_local_argmax_reduction", "not with draft_sample_method probabilistic, as vLLM's V2 drafter "
                                                "says"),
                 (method == "extract_hidden_states" and sampling != "greedy", "draft_sample_method",
                  f"{sampling!r}: extract_hidden_states samples greedily only, as vLLM's V2 drafter says")]
    for fails, key, why in rules:
        if fails:
            raise ConfigError(f"{field}.{key}", why)


def _dynamic_schedule(schedule, field: str) -> None:
    """0.33's num_speculative_tokens_per_batch_size as its scheduler reads it at start
    (validate_and_normalize_dynamic_sd_schedule): [start, end, k] entries, positive ranges, k >= 0, not overlapping,
    the first from batch size 1."""
    if not isinstance(schedule, list):
        raise ConfigError(field, f"a list of [range_start, range_end, num_speculative_tokens], got {schedule!r:.40}")
    ranges = []
    for entry in schedule:
        try:
            start, end, k = (int(v) for v in entry) if isinstance(entry, (list, tuple)) and len(entry) == 3 else ()
        except (TypeError, ValueError):
            start = None
        if start is None or not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ConfigError(field, f"{entry!r:.40}: each entry is [range_start, range_end, num_speculative_tokens], "
                                     f"as vLLM says")
        if start <= 0 or end <= 0 or start > end or k < 0:
            raise ConfigError(field, f"{entry!r:.40}: ranges from 1 with start <= end and k >= 0, as vLLM says")
        ranges.append((start, end))
    ranges.sort()
    if any(b[0] <= a[1] for a, b in zip(ranges, ranges[1:])):
        raise ConfigError(field, "batch-size ranges must not overlap, as vLLM says")
    if ranges[0][0] != 1:
        raise ConfigError(field, f"the first range starts at {ranges[0][0]}: vLLM needs it to start at 1, so every "
                                 f"batch size has a schedule")


def _check_speculative_values(config: dict, method: str, k: int, serve: dict, arch, version: str, field: str) -> None:
    """What SpeculativeConfig's __post_init__ and _verify_args refuse beyond its fields' types: suffix decoding's
    ranges (_validate_suffix_decoding), a drafter's tensor parallel size other than 1 or the target's
    (_verify_and_get_draft_tp), a max_model_len past the target's (_maybe_override_draft_max_model_len), and 0.33's
    FLy verification rules."""
    if method == "suffix":
        for key, (low, high) in SUFFIX_BOUNDS.items():
            value = config.get(key)
            if isinstance(value, (int, float)) and (value < low or (high is not None and value > high)):
                raise ConfigError(f"{field}.{key}", f"{value} must be " + (f"in [{low}, {high}]" if high is not None
                                                                          else f">= {low}") + ", as vLLM says")
    if method not in LOADS_NO_DRAFTER:
        tp = _lax_int(serve.get("tensor_parallel_size", 1))
        draft_tp = config.get("draft_tensor_parallel_size")
        if draft_tp is not None and draft_tp not in (1, tp):
            raise ConfigError(f"{field}.draft_tensor_parallel_size", f"{draft_tp} cannot be other than 1 or the "
                                                                     f"target's tensor_parallel_size ({tp}), as vLLM "
                                                                     f"says")
        given, target = config.get("max_model_len"), serve.get("max_model_len")
        if not isinstance(target, int) or target < 1:  # not given, or auto (-1): the model's own length
            target = default_model_length(arch, version) if arch is not None else None
        if isinstance(given, int) and target is not None and given > target:
            raise ConfigError(f"{field}.max_model_len", f"{given} cannot be larger than the target's max_model_len "
                                                        f"({target}), as vLLM says")
    family = getattr(arch, "hf_model_type", None)
    if version == "0.19.0" and method in ("eagle3", "extract_hidden_states") and family is not None and \
            not any(name in family for name in AUX_HIDDEN_STATE_FAMILIES):
        raise ConfigError(f"{field}.method", f"{method} reads hidden states vLLM 0.19 takes from "
                                             f"{', '.join(AUX_HIDDEN_STATE_FAMILIES)} models only, not {family}")
    if version == "0.19.0" and method == "mlp_speculator":  # kept in SpeculativeMethod, drafted by nothing
        raise ConfigError(f"{field}.method", "mlp_speculator: vLLM 0.19's V1 model runner has no such drafter "
                                             "(\"Unknown speculative decoding method\") and does not start")
    if version != "0.19.0" and method in AUX_HIDDEN_STATE_METHODS and family in NO_EAGLE3_FAMILIES:
        raise ConfigError(f"{field}.method", f"{method} reads the target's hidden states, and vLLM {version}'s "
                                             f"{family} model has no EAGLE-3 interface (SupportsEagle3): it fails "
                                             f"as it loads")
    _check_spec_combinations(config, method, field)
    _check_drafter_runner(config, method, k, serve, version, field)
    quantization = config.get("quantization")
    if quantization is not None and quantization not in QUANTIZATION_METHODS[version]:
        raise ConfigError(f"{field}.quantization", f"{quantization!r} is not a quantization method of vLLM {version} "
                                                   f"(the drafter's ModelConfig refuses it)")
    if version != "0.19.0" and config.get("num_speculative_tokens_per_batch_size") and \
            (serve.get("data_parallel_size") or 1) == 1 and not (_v1_model_runner(serve, method, config) and method
                                                                 not in DYNAMIC_SD_V1_METHODS):
        _dynamic_schedule(config["num_speculative_tokens_per_batch_size"], f"{field}.num_speculative_tokens_per_batch_size")
    if config.get("rejection_sample_method") == "fly":  # 0.33's lossy verification
        window = config.get("fly_window_size")
        if method == "extract_hidden_states" or k < 2 or (window is not None and window >= k):
            raise ConfigError(f"{field}.rejection_sample_method", "fly needs a drafting method, "
                                                                  "num_speculative_tokens of at least 2 and "
                                                                  "fly_window_size below it, as vLLM says")


def _speculation(serve: dict, version: str, not_modelled: dict, arch=None) -> tuple[dict, str | None, dict]:
    """--speculative-config, and 0.33's --spec-method/--spec-model/--spec-tokens shorthands for its keys: the
    release's methods and keys (a key SpeculativeConfig lacks is refused, as its pydantic class forbids it; one
    servesim does not model is recorded); 0.33's synthetic acceptance (rates per position, or a mean length) is the
    acceptance servesim draws. Returns the settings, the draft method vLLM settles on and the config's keys."""
    config = serve.get("speculative_config")
    shorthands = {key: serve[dest] for dest, key in SPEC_SHORTHANDS.items() if serve.get(dest) is not None}
    if config is None and not shorthands:
        return {}, None, {}
    if config is None:
        config = {}
    field = "vllm serve --speculative-config"
    if not isinstance(config, dict):
        raise ConfigError(field, f"must be a JSON object, got {config!r}")
    for key, value in shorthands.items():  # 0.33 checks the keys as given, before it reads dashes as underscores
        if key in config:
            raise ConfigError(f"vllm serve --{dict(map(reversed, SPEC_SHORTHANDS.items()))[key].replace('_', '-')}",
                              f"and --speculative-config's {key!r} are mutually exclusive, as vLLM says")
    config = {**config, **shorthands}
    if version != "0.19.0":  # 0.33's create_speculative_config takes num-speculative-tokens as num_speculative_tokens
        config = {k.replace("-", "_") if isinstance(k, str) else k: v for k, v in config.items()}
    table = flag_tables(version)["speculative_config"]
    unknown = [key for key in config if key not in table["keys"]]
    if unknown:
        raise ConfigError(f"{field}.{unknown[0]}", f"not a key of vLLM {version}'s SpeculativeConfig (it forbids "
                                                   f"others): {', '.join(table['keys'][:6])}, ...")
    _check_fields(config, table, field, version)  # typed and bounded as SpeculativeConfig's fields
    kinds = flag_tables(version).get("json_configs", {})  # its enum fields, as -cc's and --kernel-config's name them
    moe = (kinds.get("kernel_config", {}).get("types") or {}).get("moe_backend")
    if config.get("moe_backend") is not None and isinstance(moe, list) and config["moe_backend"] not in moe:
        raise ConfigError(f"{field}.moe_backend", f"one of {', '.join(map(str, moe))}, got "
                                                  f"{config['moe_backend']!r:.40}")
    if "attention_backend" in table["keys"]:
        _enum_name(config.get("attention_backend"), (kinds.get("attention_config", {}).get("types") or {})
                   .get("backend") or [], f"{field}.attention_backend", "an attention backend")
    if config.get("tensor_parallel_size") is not None:  # SpeculativeConfig's field, which _verify_args refuses
        raise ConfigError(f"{field}.tensor_parallel_size", "not a valid argument in the speculative_config: pass "
                                                           "draft_tensor_parallel_size instead, as vLLM says")
    # vLLM's SpeculativeConfig.__post_init__: no method, a model "ngram" (or "[ngram]") is n-gram, 0.33's dotted
    # import path (pkg.MyProposer) a custom proposer class, another a draft model
    model = config.get("model")
    method = config.get("method") or (("ngram" if model in ("ngram", "[ngram]") else
                                       "custom_class" if version != "0.19.0" and _proposer_path(model) else
                                       "draft_model") if model else None)
    if method is not None and method not in table["methods"]:
        other = [v for v in VLLM_VERSIONS if v != version and method in flag_tables(v)["speculative_config"]["methods"]]
        raise ConfigError(f"{field}.method", f"{method!r} is not a method of vLLM {version}: "
                                             f"{', '.join(table['methods'])}"
                                             + (f"; vLLM {other[0]}'s takes it: --vllm-version {other[0]}" if other else ""))
    if method is not None and method.endswith("_mtp"):  # vLLM's MTPModelTypes: deprecated names of mtp
        method = "mtp"
    method = _drafter_by_name(method, config.get("model"), version)
    if method == "draft_model" and _draft_family(config.get("model")) in MTP_DRAFT_FAMILIES:
        method = "mtp"  # vLLM reads the drafter's model_type as deepseek_mtp, an MTPModelType: method mtp
    if method == "mtp" and config.get("model") is None and arch is not None and \
            (not arch.is_mla or getattr(arch, "hf_model_type", None) == "deepseek_v2"):
        raise ConfigError(f"{field}.method", f"mtp drafts with the served model's own MTP layers: {arch.name} has "
                                             f"none (of servesim's families only DeepSeek-V3/R1 have them); vLLM "
                                             f"refuses it")
    _ngram_window(config, method, field)
    k = config.get("num_speculative_tokens")
    if k is None and method == "suffix":  # vLLM: the suffix tree's depth is its most drafts
        k = config.get("suffix_decoding_max_tree_depth", 24)
    drafter = _draft_family(config.get("model")) if method == "mtp" else None
    if drafter is not None and drafter not in MTP_DRAFT_FAMILIES:  # its model_type stays, no MTP type: vLLM refuses
        raise ConfigError(f"{field}.model", f"{config['model']} ({drafter}) has no MTP layers: vLLM refuses method "
                                            f"'mtp' with it (unsupported speculative method)")
    if k is not None:  # SpeculativeConfig is a pydantic dataclass, lax: "3" and 3.0 are 3
        k = _lax_int(k)
    if method is None or not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(field, "needs a method (or a draft model) and num_speculative_tokens >= 1, as vLLM does "
                                 "(an MTP drafter without a count fails its start: it compares the missing count "
                                 "before it reads the drafter's n_predict)")
    _check_mtp_layers(config, method, k, arch, field)
    _check_draft_vocab(config, method, arch, field)
    _check_speculative_values(config, method, k, serve, arch, version, field)
    if method == "extract_hidden_states":
        return _extract_hidden_states(config, k, field, not_modelled), method, config
    if config.get("model") is None and method not in NO_DRAFT_MODEL:  # eagle, draft_model, ...: a drafter to load
        raise ConfigError(f"{field}.model", f"method {method!r} needs its draft model: vLLM refuses "
                                            f"num_speculative_tokens without one")
    out = {"speculative.method": "fixed", "speculative.num_speculative_tokens": k}
    if method in EAGLE_TYPE and not config.get("disable_eagle_block_drop") and \
            serve.get("enable_prefix_caching") is not False:  # use_eagle_block_drop, where a prefix can hit
        # 0.33 hashes each block with the token after it (num_hash_lookahead_tokens), which proves the hit's
        # last block, unless told not to or beside a KV connector; else the hit's last block is computed again
        lookahead = version != "0.19.0" and not config.get("disable_lookahead_block_hashes") and \
            effective_kv_config(serve, version) is None  # --kv-offloading-size makes a connector too (r132)
        out["speculative.lookahead_block_hashes" if lookahead else "speculative.eagle_block_drop"] = True
    if method in FREE_DRAFTS:
        out["speculative.draft_cost_ratio"] = 0.0
    if method == "suffix" or method == "ngram" and version == "0.19.0":  # 0..k drafts, as the text matches (0.33's
        out["speculative.drafts_vary"] = True  # n-gram, on its GPU speculator, fills unmatched slots: always k)
    synthetic = _synthetic_acceptance(config, k, field) if version != "0.19.0" else None
    if synthetic is not None:
        out["speculative.acceptance_distribution"] = synthetic
    # a drafter's own weights and KV cache are not modelled (draft_cost_ratio times its steps): its name recorded
    used = {"method", "num_speculative_tokens", "disable_eagle_block_drop", "disable_lookahead_block_hashes",
            "parallel_drafting"} | ({"model"} if method in NO_DRAFT_MODEL else set()) | (
        {"rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length"} if synthetic else set())
    for key, value in config.items():
        if key not in used:
            not_modelled[f"{field}.{key}"] = value
    return out, method, config


def _check_draft_vocab(config: dict, method: str, arch, field: str) -> None:
    """SpeculativeConfig.verify_equal_vocab_size_if_draft_model: a draft model with another vocabulary is refused
    (0.33: unless use_heterogeneous_vocab), where servesim reads the drafter (a built-in's id, a config.json; r177:
    Qwen2.5-7B drafting for Llama-3.1-8B ran)."""
    if method != "draft_model" or arch is None or config.get("use_heterogeneous_vocab") or \
            not isinstance(config.get("model"), str):
        return
    try:
        draft = load_model(config["model"])
    except ConfigError:
        return  # a drafter servesim cannot read: its vocabulary unknown, its name recorded
    if draft.vocab_size != arch.vocab_size:
        raise ConfigError(f"{field}.model", f"{config['model']}'s vocabulary ({draft.vocab_size:,} tokens) is not "
                                            f"{arch.name}'s ({arch.vocab_size:,}): vLLM refuses a draft model with "
                                            f"another vocabulary size")


def _check_mtp_layers(config: dict, method: str, k: int, arch, field: str) -> None:
    """vLLM's MTP drafter reuses the checkpoint's num_nextn_predict_layers (its n_predict): none, and its start
    divides by 0; k past them must be a multiple of them (SpeculativeConfig.__post_init__). r162: both ran."""
    n = getattr(arch, "num_nextn_predict_layers", None) if method == "mtp" and config.get("model") is None else None
    if n == 0:
        raise ConfigError(f"{field}.method", f"mtp drafts with the served model's own MTP layers: {arch.name}'s "
                                             f"num_nextn_predict_layers is 0 (none); vLLM fails at start")
    if n and k > n and k % n:
        raise ConfigError(f"{field}.num_speculative_tokens", f"{k} must be divisible by {arch.name}'s "
                                                             f"num_nextn_predict_layers ({n}) when above it, as vLLM "
                                                             f"says (its MTP layers are reused in turn)")


def _api_servers(serve: dict, version: str, not_modelled: dict) -> None:
    """The API servers the line starts (vLLM's serve CLI: --api-server-count, by default one per local DP rank under
    internal or hybrid balancing, one under external): each balances the DP ranks from its own start, where servesim
    balances as one. One is what servesim simulates; more are said, given or not (r156: the default went unsaid,
    and an explicit 1 was called not modelled)."""
    flag = _flag("serve", "api_server_count", version)
    dp = serve.get("data_parallel_size") or 1
    if serve.get("data_parallel_external_lb") or serve.get("data_parallel_rank") is not None \
            or serve.get("data_parallel_multi_port_external_lb"):
        default = 1
    elif serve.get("data_parallel_hybrid_lb") or serve.get("data_parallel_start_rank") is not None:
        default = serve.get("data_parallel_size_local") or 1
    else:
        default = dp
    count = serve.get("api_server_count")
    servers = count if count is not None else default
    if servers == 1 or dp == 1 and count is None:
        not_modelled.pop(flag, None)
    elif count is None:
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: vLLM starts {servers} API servers for this line ({flag}'s default under "
                  f"{dp} DP ranks), each balancing the ranks from its own first pick; servesim balances them as one "
                  f"(give {flag} 1 for what it simulates)"])


def _without_sliding_window(settings: dict, arch, version: str, not_modelled: dict) -> None:
    """--disable-sliding-window, as ModelConfig applies it: the model's length is capped at its window (a longer
    --max-model-len refused), then every layer attends to the whole context (sliding_window None). A model
    without a window is unchanged."""
    not_modelled.pop(_flag("serve", "disable_sliding_window", version), None)
    if arch is None or not arch.sliding_window:
        return
    window, given = arch.sliding_window, settings.get("engine.max_model_len")
    if window < arch.max_position_embeddings:
        if isinstance(given, int) and given > window:
            raise ConfigError("vllm serve --max-model-len", f"{given} is longer than the {window}-token sliding window "
                                                            f"--disable-sliding-window caps {arch.name}'s length at; "
                                                            f"vLLM refuses it")
        settings["model.max_position_embeddings"] = window
        if (arch.default_max_model_len or 0) >= window:
            settings["model.default_max_model_len"] = None
    settings["model.sliding_window"] = None
    settings["model.num_local_attention_layers"] = None


def _extract_hidden_states(config: dict, k: int, field: str, not_modelled: dict) -> dict:
    """vLLM's extract_hidden_states "drafts" the token it sampled (v1/spec_decode/extract_hidden_states.py): it
    caches hidden states for a KV connector and speeds nothing up, so no speculation is simulated. Its checks are
    vLLM's: one token, the layers to extract named, padded drafter batches kept."""
    if k != 1:
        raise ConfigError(f"{field}.num_speculative_tokens", f"{k}: extract_hidden_states takes 1 (vLLM asserts it)")
    draft = config.get("draft_model_config")
    hf = draft.get("hf_config") if isinstance(draft, dict) else None
    if not (isinstance(hf, dict) and hf.get("eagle_aux_hidden_state_layer_ids")):
        raise ConfigError(f"{field}.draft_model_config", "extract_hidden_states needs hf_config's "
                                                         "eagle_aux_hidden_state_layer_ids (the layers to extract); "
                                                         "vLLM refuses it without")
    if config.get("disable_padded_drafter_batch"):
        raise ConfigError(f"{field}.disable_padded_drafter_batch", "not supported with extract_hidden_states, "
                                                                   "as vLLM says")
    not_modelled[f"{field}.method"] = "extract_hidden_states (it caches hidden states for a KV connector and " \
                                      "drafts nothing: simulated without speculation)"
    return {}


# the serve flags that decide vLLM's CUDA graphs, besides those of SERVE_SETTINGS
GRAPH_FLAGS = ("compilation_config", "optimization_level")
CC_KEYS = ("cudagraph_capture_sizes", "max_cudagraph_capture_size")  # flags -cc may give instead
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")  # CompilationConfig's
LEVEL_CUDAGRAPH_MODE = {"0": "NONE", "1": "PIECEWISE", "2": "FULL_AND_PIECEWISE", "3": "FULL_AND_PIECEWISE"}  # -O's


# the connectors each release registers (KVConnectorFactory); KVTransferConfig's and KVEventsConfig's fields, typed,
# are the flag table's json_configs
KV_CONNECTORS = {
    "0.33.0": {"ExampleConnector", "ExampleHiddenStatesConnector", "LMCacheConnectorV1", "LMCacheMPConnector",
               "NixlConnector", "NixlPullConnector", "NixlPushConnector", "MultiConnector", "HiSparseConnector",
               "MoRIIOConnector", "OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector",
               "MooncakeStoreConnector", "FlexKVConnectorV1", "SimpleCPUOffloadConnector", "HF3FSKVConnector"},
    "0.19.0": {"ExampleConnector", "ExampleHiddenStatesConnector", "P2pNcclConnector", "LMCacheConnectorV1",
               "LMCacheMPConnector", "NixlConnector", "MultiConnector", "MoRIIOConnector", "OffloadingConnector",
               "DecodeBenchConnector", "MooncakeConnector", "FlexKVConnectorV1", "SimpleCPUOffloadConnector"}}
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


# JSON config fields vLLM's classes bound with pydantic Field(gt/ge) (0.19's EPLBConfig bounds fewer), checked
# where a JSON flag gives them; the bool and Literal fields are checked from the flag table's json_configs types
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")  # CompilationMode, 0-3


def _microbatches(serve: dict) -> int:
    """ParallelConfig.num_ubatches: 2 under dual batch overlap, else --ubatch-size; more than 1 is micro-batching
    (use_ubatching)."""
    return 2 if serve.get("enable_dbo") else serve.get("ubatch_size") or 0


def _check_microbatching(serve: dict, version: str) -> None:
    """VllmConfig asserts micro-batching's all2all backend (CUDA): DeepEP's two (0.33 also NIXL EP)."""
    if _microbatches(serve) < 2:
        return
    supported = ("deepep_low_latency", "deepep_high_throughput") + (("nixl_ep",) if version != "0.19.0" else ())
    backend = serve.get("all2all_backend") or "allgather_reducescatter"
    if backend not in supported:
        raise ConfigError(_flag("serve", "enable_dbo" if serve.get("enable_dbo") else "ubatch_size", version),
                          f"micro-batching needs --all2all-backend {' or '.join(supported)} (vLLM asserts it; "
                          f"{backend} is not one)")


def _check_model_position(argv: list[str]) -> None:
    """FlexibleArgumentParser's check (both releases): a line naming --served-model-name must give the model first
    (positionally, by --model, or in a --config file)."""
    given = [a for a in argv if a != "--"]
    if given and given[0].startswith("-") and \
            not any(re.match(r"^--(model|config)(=.+|$)", a) for a in given) and \
            any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in given):
        raise ConfigError("vllm serve --served-model-name", "`model` should be provided as the first positional "
                                                            "argument when using `vllm serve`, as vLLM says")


def _check_bounds(serve: dict, version: str) -> None:
    """The bounds vLLM's config classes put on what the flags set (serve_bounds in the flag table: --node-rank -1,
    --nnodes 0, --stream-interval 0 start no server), checked for every flag given, modelled or not."""
    for dest, bound in flag_tables(version).get("serve_bounds", {}).items():
        value = serve.get(dest)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue  # not given, or a word the flag's own reading names ('auto')
        if broken := _outside(value, bound):
            raise ConfigError(_flag("serve", dest, version), f"must be {broken} (vLLM {version}'s {bound['class']}), "
                                                             f"got {value}")


def _outside(value: float, bound: dict) -> str | None:
    """The pydantic bound (ge/gt/le/lt) `value` breaks, as 'sign limit', else None."""
    import operator

    tests = {"ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="), "lt": (operator.lt, "<")}
    return next((f"{sign} {bound[key]}" for key, (holds, sign) in tests.items()
                 if key in bound and not holds(value, bound[key])), None)


def _lax_int(value):
    """An integer as vLLM's pydantic config classes take one (lax: "3", 3.0), else the value as it was."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(int).validate_python(value)
    except ValidationError:
        return value


def _check_json_configs(serve: dict, version: str) -> None:
    """-cc, --attention-config, --kernel-config and --eplb-config as vLLM's config classes take them (TypeAdapter
    over a @config class): their own fields only (vllm-VERSION-flags.yaml json_configs, -cc's pass_config too),
    typed and bounded as the classes' annotations and Fields say (an attention backend by AttentionBackendEnum's
    names, the compilation mode by CompilationMode's), 0.19's EPLB logging interval and 0.33's rule that async
    rebalancing cannot use the torch_nccl or pynccl communicator, and --attention-backend beside
    --attention-config's backend refused, as vLLM refuses them."""
    tables = flag_tables(version).get("json_configs", {})
    for dest, spec in tables.items():
        config = serve.get(dest)
        if not isinstance(config, dict):  # absent (any other value is refused before: serve_json_objects)
            continue
        flag = _flag("serve", dest, version)
        _check_fields(config, spec, flag, version)
        for key, inner in (spec.get("nested") or {}).items():
            if config.get(key) is not None:
                if not isinstance(config[key], dict):
                    raise ConfigError(f"{flag}.{key}", f"a JSON object of {inner['class']}'s fields, got "
                                                       f"{config[key]!r:.40}")
                _check_fields(config[key], inner, f"{flag}.{key}", version)
        mode = config.get("mode")
        if dest == "compilation_config" and mode is not None:  # CompilationMode by name or number (0-3)
            if (mode.upper() not in COMPILATION_MODES) if isinstance(mode, str) else \
                    not (isinstance(_lax_int(mode), int) and 0 <= _lax_int(mode) < len(COMPILATION_MODES)):
                raise ConfigError(f"{flag}.mode", f"one of {', '.join(COMPILATION_MODES)} (or 0-3), got {mode!r:.40}")
    if isinstance(serve.get("compilation_config"), dict):
        _compilation_checks(serve["compilation_config"], _flag("serve", "compilation_config", version), version)
    group, in_group = serve.get("offload_group_size", 0), serve.get("offload_num_in_group", 1)
    if serve.get("offload_backend") == "prefetch" or group > 0:  # OffloadConfig.validate_offload_config
        for fails, dest, why in ((in_group > group, "offload_num_in_group", f"{in_group} must be <= "
                                                                           f"--offload-group-size ({group})"),
                                 (serve.get("offload_prefetch_step", 1) < 1, "offload_prefetch_step",
                                  "must be >= 1 when prefetch offloading is on")):
            if fails:
                raise ConfigError(_flag("serve", dest, version), f"{why}, as vLLM says")
    eplb = serve.get("eplb_config")
    if version == "0.19.0" and isinstance(eplb, dict) and eplb.get("log_balancedness") and \
            eplb.get("log_balancedness_interval", 1) <= 0:  # 0.19's __post_init__ (0.33: a Field bound)
        raise ConfigError(f"{_flag('serve', 'eplb_config', version)}.log_balancedness_interval",
                          "must be greater than 0, as vLLM says")
    if version != "0.19.0" and isinstance(eplb, dict) and _lax_bool(eplb.get("use_async", True)) and \
            eplb.get("communicator") in ("torch_nccl", "pynccl"):
        raise ConfigError(f"{_flag('serve', 'eplb_config', version)}.communicator",
                          f"{eplb['communicator']} is incompatible with async EPLB (use_async, on by default): use "
                          f"torch_gloo or nixl, as vLLM says")
    backend = serve.get("attention_backend")
    if backend is not None:
        attention = serve.get("attention_config")
        if isinstance(attention, dict) and attention.get("backend") is not None:
            raise ConfigError(_flag("serve", "attention_backend", version), "and --attention-config's backend are "
                                                                            "mutually exclusive, as vLLM says")
        names = tables.get("attention_config", {}).get("types", {}).get("backend")
        if names and str(backend).upper() not in {str(n).upper() for n in names}:
            raise ConfigError(_flag("serve", "attention_backend", version),
                              f"{backend!r:.40} is not an attention backend of vLLM {version}: "
                              f"{', '.join(str(n) for n in names[:8])}, ...")


def _compilation_checks(cc: dict, flag: str, version: str) -> None:
    """CompilationConfig.__post_init__'s checks beyond its fields' types: custom_ops' syntax (0.33: one base mode,
    no op both enabled and disabled), a backend vLLM's own compile cannot split, 0.33's positive decoder replay
    sizes; and compile_sizes' only text, 'cudagraph_capture_sizes' (asserted as the sizes are computed)."""
    ops = cc.get("custom_ops") if isinstance(cc.get("custom_ops"), list) else []
    shortest = 1 if version == "0.19.0" else 2  # 0.19 takes a bare '+' (and fails on an empty name)
    bad = next((op for op in ops if op not in ("all", "none") and (len(str(op)) < shortest or str(op)[0] not in "+-")),
               None)
    on, off = {str(op)[1:] for op in ops if str(op).startswith("+")}, {str(op)[1:] for op in ops if str(op).startswith("-")}
    mode = str(cc.get("mode", "")).upper()
    sizes = cc.get("decoder_replay_cudagraph_capture_sizes")
    rules = [(bad is not None, "custom_ops", f"invalid syntax {bad!r}: 'all', 'none', '+op' or '-op'"),
             (version != "0.19.0" and sum(op in ("all", "none") for op in ops) > 1, "custom_ops",
              "only one base mode, 'all' or 'none'"),
             (version != "0.19.0" and bool(on & off), "custom_ops",
              f"cannot both enable and disable {', '.join(sorted(on & off))}"),
             (mode in ("3", "VLLM_COMPILE") and cc.get("backend", "") not in ("", "eager", "inductor"), "backend",
              f"{cc.get('backend')!r}: vLLM's piecewise compile takes '', eager or inductor"),
             (version != "0.19.0" and isinstance(sizes, list) and any(isinstance(n, (int, float)) and n <= 0
                                                                       for n in sizes),
              "decoder_replay_cudagraph_capture_sizes", "must all be positive"),
             (any(isinstance(x, str) and x != "cudagraph_capture_sizes" for x in cc.get("compile_sizes") or []),
              "compile_sizes", "a text entry can only be 'cudagraph_capture_sizes'")]
    for fails, key, why in rules:
        if fails:
            raise ConfigError(f"{flag}.{key}", f"{why}, as vLLM says")


def _lax_bool(value) -> bool | None:
    """A bool as pydantic's lax mode reads it ("false", 0, "off" are false), as vLLM's config and request classes
    read one; None where it refuses it."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        return None


def _check_fields(config: dict, spec: dict, flag: str, version: str) -> None:
    """One config object's keys against its class's fields; each value typed as pydantic's lax mode reads its
    annotation (kept as read: "3" is 3), a Literal's values or an attention backend's name, and within the
    class's Field bounds."""
    from pydantic import ValidationError

    unknown = [str(k) for k in config if k not in spec["keys"]]
    if unknown:
        raise ConfigError(f"{flag}.{unknown[0]}", f"not a field of vLLM {version}'s {spec['class']} (it forbids others): "
                                                  f"{', '.join(spec['keys'][:6])}, ...")
    for key, kind in (spec.get("types") or {}).items():
        if key not in config:
            continue
        value = config[key]
        if key in NORMALIZED and isinstance(value, str):  # KernelConfig's _normalize_* validators, before the check
            config[key] = value = _backend_name(value)
        if isinstance(kind, str):  # a builtin-only annotation
            try:
                config[key] = value = _annotation(kind).validate_python(value)
            except ValidationError:
                raise ConfigError(f"{flag}.{key}", f"{kind}, as vLLM's {spec['class']} types it, got "
                                                   f"{value!r:.40}") from None
        elif isinstance(kind, dict):  # backend_per_kind: KVCacheSpecKind values -> attention backends
            backends = [n for n in spec["types"].get("backend") or [] if str(n).lower() != "auto"]  # a member only
            if not isinstance(value, dict):
                raise ConfigError(f"{flag}.{key}", f"a JSON object of KV cache kinds and backends, got {value!r:.40}")
            for group, backend in value.items():
                if group not in kind["kinds"]:
                    raise ConfigError(f"{flag}.{key}", f"unknown KV cache group kind {group!r:.40}: "
                                                       f"{', '.join(kind['kinds'])}, as vLLM says")
                _enum_name(backend, backends, f"{flag}.{key}", "an attention backend")
        elif spec["class"] == "AttentionConfig" and key in ("backend", "mla_prefill_backend"):  # the enum's member by
            # value.upper() ('auto' a backend's)
            _enum_name(value, kind, f"{flag}.{key}", "an attention backend" if key == "backend" else
                       "an MLA prefill backend")
        elif value not in kind:
            raise ConfigError(f"{flag}.{key}", f"one of {', '.join(str(v) for v in kind if v is not None)}, "
                                               f"got {value!r:.40}")
        bound = (spec.get("bounds") or {}).get(key)
        if bound and isinstance(value, (int, float)) and (broken := _outside(value, bound)):
            raise ConfigError(f"{flag}.{key}", f"must be {broken} (vLLM {version}'s {spec['class']}), got {value}")


def _enum_name(value, names: list, field: str, what: str) -> None:
    """vLLM's Enum[value.upper()] over a string (None: the default), as its validators read a backend."""
    if value is not None and str(value).upper() not in {str(n).upper() for n in names}:
        raise ConfigError(field, f"{value!r:.40} is not {what}: {', '.join(str(n) for n in names[:8])}, ...")


@lru_cache(maxsize=None)
def _annotation(text: str):
    """A TypeAdapter for an annotation of builtins (`list[int | str] | None`), as written in vLLM's source."""
    from typing import Any, Literal  # noqa: F401  (names an annotation may use)

    from pydantic import TypeAdapter

    return TypeAdapter(eval(text, {"__builtins__": {}}, {"int": int, "float": float, "str": str, "bool": bool,
                                                         "list": list, "dict": dict, "set": set, "tuple": tuple,
                                                         "Any": Any, "Literal": Literal, "None": None}))


# config.json keys servesim reads the model's shape, length or format from: an --hf-overrides of one would run a model
# other than the one simulated
MODEL_KEYS = frozenset().union(*HF_CONFIG_DEFAULTS.values(), LENGTH_KEYS, (
    "rope_scaling", "rope_parameters", "original_max_position_embeddings", "torch_dtype", "dtype",
    "quantization_config", "layer_types", "use_sliding_window", "max_window_layers", "mlp_only_layers",
    "decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step", "no_rope_layers", "model_type",
    "architectures", "tie_word_embeddings", "num_nextn_predict_layers"))


def _refuse_model_overrides(overrides, version: str) -> None:
    """--hf-overrides changes the config.json vLLM builds the model from; servesim reads its model elsewhere (a
    built-in, or the config.json itself), so a key it reads is refused rather than simulated unchanged (a longer
    --max-model-len was refused as past the model's own, a shorter model ran long). Other keys are recorded."""
    def keys(value):
        return [k for k, v in value.items() for k in ([k] + (keys(v) if isinstance(v, dict) else []))] \
            if isinstance(value, dict) else []

    touched = [k for k in keys(overrides) if k in MODEL_KEYS]
    if touched:
        raise ConfigError(_flag("serve", "hf_overrides", version),
                          f"{touched[0]} changes the model servesim reads (not simulated): give a model folder whose "
                          f"config.json holds it (vllm serve PATH)")


def _check_offloading_bytes(serve: dict, version: str) -> None:
    """The native OffloadingConnector's CPU spec (its default) needs a CPU size: --kv-offloading-size 0, or the
    connector given without kv_connector_extra_config's cpu_bytes_to_use, fails at start-up ("cpu_bytes_to_use
    must be specified"; round 126)."""
    made = effective_kv_config(serve, version)
    if not isinstance(made, dict) or made.get("kv_connector") != "OffloadingConnector" or \
            made.get("kv_connector_module_path") and version != "0.19.0":  # 0.33: a class of one's own, first
        return
    extra = made.get("kv_connector_extra_config")
    extra = extra if isinstance(extra, dict) else {}
    if extra.get("spec_name", "CPUOffloadingSpec") != "CPUOffloadingSpec":
        return
    size = serve.get("kv_offloading_size")
    if size is not None and not size:
        raise ConfigError(_flag("serve", "kv_offloading_size", version), "0: vLLM's CPU offloading then has no "
                                                                        "bytes to use and fails at start-up; leave "
                                                                        "the flag out to offload nothing")
    if size is None and not extra.get("cpu_bytes_to_use"):
        raise ConfigError(_flag("serve", "kv_transfer_config", version),
                          "OffloadingConnector without kv_connector_extra_config's cpu_bytes_to_use: vLLM's CPU "
                          "offloading fails at start-up (\"cpu_bytes_to_use must be specified\"); give it, or "
                          "--kv-offloading-size")


def _check_kv_configs(serve: dict, version: str) -> None:
    """--kv-transfer-config as vLLM takes it (its fields and types, and --kv-events-config's, are checked with the
    other config classes': _check_json_configs): a role beside a connector and one of KVRole's, a connector the
    release registers (or one loaded from kv_connector_module_path), and in 0.33 a connector named where the
    hybrid manager is left to it (supports_hma_config looks it up); a MultiConnector's children each so (vLLM makes
    each a config of its own). A class of one's own is read as each release's factory reads it: 0.19 takes a
    registered name first (its module path then unused: dropped here), 0.33 the module path first."""
    config = serve.get("kv_transfer_config")
    if not isinstance(config, dict):
        return
    flag = _flag("serve", "kv_transfer_config", version)
    if config.get("kv_connector") is None and version != "0.19.0" and \
            serve.get("disable_hybrid_kv_cache_manager") is None:
        raise ConfigError(f"{flag}.kv_connector", "not set: vLLM 0.33 refuses a KV transfer config without one")
    _check_connector(config, flag, version)
    runs = effective_kv_config(serve, version)
    if version != "0.19.0" and serve.get("enable_sleep_mode") and not _follows_sleep_mode(runs):
        raise ConfigError(_flag("serve", "enable_sleep_mode", version),
                          f"beside {_connector_name(runs)}: vLLM {version} refuses it (\"does not support sleep "
                          f"mode\")")


def _extra(config: dict) -> dict:
    """A connector config's kv_connector_extra_config (an object, or none)."""
    extra = config.get("kv_connector_extra_config")
    return extra if isinstance(extra, dict) else {}


def _children(config: dict) -> list | None:
    """A MultiConnector's children as its config lists them; None where it lists none (vLLM asserts a list)."""
    children = _extra(config).get("connectors")
    return children if isinstance(children, list) else None


def _check_connector(config: dict, field: str, version: str) -> None:
    connector, role, path = config.get("kv_connector"), config.get("kv_role"), config.get("kv_connector_module_path")
    if role is not None and role not in KV_ROLES:
        raise ConfigError(f"{field}.kv_role", f"{role!r}: vLLM takes {', '.join(KV_ROLES)}")
    if connector is not None and role is None:
        raise ConfigError(f"{field}.kv_role", f"needed beside kv_connector {connector!r}: vLLM refuses it unset")
    if path == "" and version != "0.19.0":
        raise ConfigError(f"{field}.kv_connector_module_path", f"empty: vLLM {version} refuses it")
    if path is not None and version == "0.19.0" and connector in KV_CONNECTORS[version]:
        del config["kv_connector_module_path"]  # 0.19's factory finds the name registered and never reads it
        path = None
    if connector is not None and not path and connector not in KV_CONNECTORS[version]:
        raise ConfigError(f"{field}.kv_connector", f"{connector!r}: vLLM {version} registers no such connector "
                                                   f"(give kv_connector_module_path for one of your own)")
    if connector == "MultiConnector" and not path:
        children = _children(config)
        if children is None:
            raise ConfigError(f"{field}.kv_connector_extra_config.connectors", "a list of connectors' configs is "
                                                                               "needed: vLLM's MultiConnector asserts it")
        for k, child in enumerate(children):
            where = f"{field}.kv_connector_extra_config.connectors[{k}]"
            if not isinstance(child, dict):
                raise ConfigError(where, f"{child!r:.40}: a connector's config (an object), as vLLM makes one of it")
            if child.get("kv_connector") is None:
                raise ConfigError(f"{where}.kv_connector", "not set: vLLM makes no connector of it")
            if "engine_id" in child:  # KVTransferConfig(**child, engine_id=...): the keyword given twice
                raise ConfigError(f"{where}.engine_id", "vLLM's MultiConnector gives a child the engine's own and "
                                                        "fails on one given here")
            _check_fields(child, flag_tables(version)["json_configs"]["kv_transfer_config"], where, version)
            _check_connector(child, where, version)


def _follows_sleep_mode(connector) -> bool:
    """0.33's supports_sleep_mode: NIXL's pull connector on its UCX backend (the default), Mooncake's over RDMA (its
    default; its environment variables are not seen), every child of a MultiConnector; not NIXL's push connector,
    Mooncake's store or MoRIIO. A class of one's own is taken at its word."""
    if not isinstance(connector, dict) or connector.get("kv_connector_module_path"):
        return True
    name, extra = connector.get("kv_connector"), _extra(connector)
    if name == "MultiConnector":  # only with children, every one following it
        children = _children(connector) or []
        return bool(children) and all(_follows_sleep_mode(c) for c in children)
    if name in ("NixlConnector", "NixlPullConnector"):
        return extra.get("backends", ["UCX"]) == ["UCX"]
    if name == "MooncakeConnector":
        return extra.get("mooncake_protocol", "rdma") == "rdma"
    return name not in ("NixlPushConnector", "MooncakeStoreConnector", "MoRIIOConnector")


def _hybrid_manager(serve: dict, version: str, method: str | None, arch, out: dict) -> None:
    """What turns vLLM's hybrid KV cache manager off where the line leaves it unset (VllmConfig): chunked local
    attention beside an EAGLE-type drafter (use_eagle), in 0.19 KV events or a KV connector, in 0.33 a KV
    connector without HMA support. Enabled by the line beside any of these, vLLM refuses to start: VllmConfig for
    the first two, KVConnectorFactory.create_connector for a connector without HMA support (any model)."""
    from servesim.simulator.local_attention import local_attention

    local = local_attention(arch) if arch is not None else None
    eagle = method in EAGLE_TYPE + (("dflash", "dspark") if version != "0.19.0" else ())  # use_eagle()
    offloading = _offloading_connector(serve, version, local is not None and local.chunked)
    connector = offloading or serve.get("kv_transfer_config")
    hma = _supports_hma(connector, version) if connector is not None else True
    refusing = [why for off, why in ((local is not None and local.chunked and eagle,
                                      f"chunked local attention beside {method} drafts"),
                                     (version == "0.19.0" and serve.get("kv_events_config") is not None,
                                      "--kv-events-config"),
                                     (hma is False, f"{'--kv-offloading-size' if offloading else '--kv-transfer-config'}"
                                                    f"'s {_connector_name(connector)}, which does not support it "
                                                    f"(SupportsHMA)")) if off]
    given = serve.get("disable_hybrid_kv_cache_manager")
    if given is False and refusing:
        raise ConfigError(_flag("serve", "disable_hybrid_kv_cache_manager", version),
                          f"the hybrid KV cache manager enabled, with {refusing[0]}: vLLM {version} refuses it")
    if given is None and local is not None and (refusing or connector is not None and (version == "0.19.0" or not hma)):
        out["engine.disable_hybrid_kv_cache_manager"] = True  # (a model without local layers has no manager to turn off)


def effective_kv_config(serve: dict, version: str = VLLM_VERSION) -> dict | None:
    """The KV connector the engine runs: --kv-offloading-size's (VllmConfig._post_init_kv_transfer_config: the
    native backend's OffloadingConnector, LMCache's own, role kv_both) replaces --kv-transfer-config's, in both
    releases; else the line's."""
    given = serve.get("kv_transfer_config")
    if serve.get("kv_offloading_size") is None:
        return given
    lmcache = serve.get("kv_offloading_backend") == "lmcache"
    return {**(given if isinstance(given, dict) else {}), "kv_role": "kv_both",
            "kv_connector": ("LMCacheConnectorV1" if version == "0.19.0" else "LMCacheMPConnector") if lmcache
            else "OffloadingConnector"}


def _offloading_connector(serve: dict, version: str, chunked: bool) -> dict | None:
    """--kv-offloading-size's connector where it decides the hybrid manager: 0.33 makes it before it decides the
    manager, so the manager follows it; 0.19 after, so with the manager left on (no connector given, no KV events
    or chunked local attention to turn it off) its connector, without HMA support, refuses to start."""
    if serve.get("kv_offloading_size") is None:
        return None
    made = effective_kv_config(serve, version)
    if version != "0.19.0":
        return made
    if serve.get("disable_hybrid_kv_cache_manager") is not True and serve.get("kv_transfer_config") is None and \
            serve.get("kv_events_config") is None and not chunked:
        raise ConfigError(_flag("serve", "kv_offloading_size", version),
                          f"vLLM {version} makes its {made['kv_connector']} after it has left the hybrid KV cache "
                          f"manager on, and that connector refuses to start beside it (\"does not support HMA\"): "
                          f"give --disable-hybrid-kv-cache-manager")
    return None


# the KV connectors that subclass SupportsHMA (kv_connector/v1), by release; the others turn the hybrid manager
# off where the line leaves it unset, and refuse to start beside it enabled
HMA_CONNECTORS = {
    "0.33.0": frozenset({"NixlConnector", "NixlPullConnector", "NixlPushConnector", "MooncakeConnector",
                         "MooncakeStoreConnector", "MoRIIOConnector", "OffloadingConnector", "SimpleCPUOffloadConnector",
                         "HiSparseConnector", "DecodeBenchConnector", "ExampleHiddenStatesConnector"}),
    "0.19.0": frozenset({"NixlConnector", "SimpleCPUOffloadConnector"})}


# --kv-transfer-config keys the P/D hand-off simulates, or that change nothing it times (addresses, ids)
PD_KEYS_SIMULATED = frozenset({"kv_connector", "kv_role", "engine_id", "kv_ip", "kv_port", "kv_rank",
                               "kv_parallel_size", "kv_connector_module_path"})


# connectors that keep KV on one instance (CPU offloading, a benchmark's dummy KV, a drafter's hidden states): no
# prefill instance hands a decode instance its prompt through them
LOCAL_CONNECTORS = frozenset({"OffloadingConnector", "SimpleCPUOffloadConnector", "DecodeBenchConnector",
                              "ExampleHiddenStatesConnector"})


def _moves_kv_between_instances(connector) -> bool:
    """A connector a P/D pair can hand a prompt's KV over: any but the local ones (a MultiConnector with one such
    child; a class of one's own is taken at its word)."""
    if not isinstance(connector, dict) or connector.get("kv_connector") is None:
        return False
    if connector.get("kv_connector") == "MultiConnector" and not connector.get("kv_connector_module_path"):
        return any(_moves_kv_between_instances(c) for c in _children(connector) or [])
    return connector.get("kv_connector_module_path") is not None or connector["kv_connector"] not in LOCAL_CONNECTORS


def pd_kv_config(version: str, role: str | None = None) -> str:
    """The --kv-transfer-config of a P/D instance (NIXL): 0.33 deprecates kv_both for NixlConnector and asks for
    kv_producer on prefill instances and kv_consumer on decode ones (nixl/connector.py); 0.19 takes kv_both."""
    kv_role = "kv_both" if version == "0.19.0" else {"prefill": "kv_producer", "decode": "kv_consumer"}.get(
        role, "kv_producer or kv_consumer")
    return f"--kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"{kv_role}\"}}'"


def _connector_name(connector) -> str:
    if isinstance(connector, dict) and connector.get("kv_connector_module_path"):
        return f"{connector.get('kv_connector')} from {connector['kv_connector_module_path']}"
    return str(connector.get("kv_connector") if isinstance(connector, dict) else connector)


def _supports_hma(connector, version: str) -> bool | None:
    """KVConnectorFactory.supports_hma_config: in 0.33 a MultiConnector only where it lists children and every one
    does (0.19's MultiConnector never does). None: a class from kv_connector_module_path, which servesim cannot see
    (vLLM 0.33 leaves the manager on only where it subclasses SupportsHMA; servesim turns it off unless the line
    enables it)."""
    if not isinstance(connector, dict):
        return False
    if connector.get("kv_connector_module_path"):
        return None
    if connector.get("kv_connector") != "MultiConnector" or version == "0.19.0":
        return connector.get("kv_connector") in HMA_CONNECTORS[version]
    children = _children(connector)
    if not children:
        return False
    kinds = [_supports_hma(c, version) for c in children]
    return False if False in kinds else None if None in kinds else True


# draft checkpoints whose model_type vLLM rewrites to deepseek_mtp (SpeculativeConfig.hf_config_override)
MTP_DRAFT_FAMILIES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")


def _draft_family(model) -> str | None:
    """A draft checkpoint's model_type where servesim can read it (a built-in's HF id, a config.json), else None."""
    if not isinstance(model, str):
        return None
    try:
        return load_model(model).hf_model_type
    except ConfigError:
        return None


def _drafter_by_name(method: str | None, model, version: str) -> str | None:
    """A drafter vLLM loads is told by its name when the method does not say it (SpeculativeConfig.__post_init__):
    EAGLE- and EAGLE3 checkpoints (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B), and 0.33's DFlash and DSpark ones."""
    if method in (None, "ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states", "eagle", "eagle3",
                  "dflash", "dspark") or not isinstance(model, str):
        return method
    name = model.lower()
    for part, named in (("eagle-", "eagle"), ("eagle3", "eagle3"), *((("dflash", "dflash"), ("dspark", "dspark"))
                                                                     if version != "0.19.0" else ())):
        if part in name:
            return named
    return method


def _cuda_graphs(serve: dict, version: str, not_modelled: dict, arch=None) -> dict:
    """vLLM's CUDA graphs however the line gives them: -O0 (no cudagraph_mode given) and cudagraph_mode NONE
    capture none, as --enforce-eager; the capture sizes and the largest graph are the flags' or -cc's (the
    resolved scenario takes those within the budget, as vLLM does, and refuses a largest size unlike them). A flag
    and its -cc key together are refused as vLLM refuses them; -cc's other keys are recorded."""
    cc = dict(serve.get("compilation_config") or {})  # an object: serve_json_objects refused any other
    out: dict = {}
    level = serve.get("optimization_level")
    if level is not None and str(level) not in ("0", "1", "2", "3"):
        raise ConfigError(_flag("serve", "optimization_level", version),
                          f"one of 0, 1, 2, 3 (vLLM's OptimizationLevel), got {level!r}")
    for key in CC_KEYS:
        if serve.get(key) is not None and cc.get(key) is not None:
            raise ConfigError(_flag("serve", key, version), f"and --compilation-config's {key} are mutually "
                                                            f"exclusive, as vLLM says")
    sizes = serve.get("cudagraph_capture_sizes") or cc.pop("cudagraph_capture_sizes", None)
    field = "vllm serve --cudagraph-capture-sizes" if serve.get("cudagraph_capture_sizes") else \
        "vllm serve --compilation-config.cudagraph_capture_sizes"
    if sizes is not None:  # the flag's words (text) or -cc's JSON list
        whole = [int(v) for v in sizes if isinstance(v, str) and v.strip().isdigit()
                 or isinstance(v, int) and not isinstance(v, bool)] if isinstance(sizes, list) else []
        if not whole or len(whole) != len(sizes) or min(whole) < 1:
            raise ConfigError(field, f"integers >= 1 (the batch sizes to capture), at least one; got {sizes!r}")
        sizes = whole
    largest = serve.get("max_cudagraph_capture_size") if serve.get("max_cudagraph_capture_size") is not None \
        else cc.pop("max_cudagraph_capture_size", None)
    if largest is not None and (not isinstance(largest, int) or isinstance(largest, bool) or largest < 1):
        raise ConfigError("vllm serve --compilation-config.max_cudagraph_capture_size",
                          f"an integer >= 1, got {largest!r}")
    if sizes:
        out["engine.cudagraph_capture_sizes"] = sizes
    if largest is not None:
        out["engine.max_cudagraph_capture_size"] = largest
    mode = cc.pop("cudagraph_mode", None)
    resolved = _graph_mode(serve, version, arch)
    if resolved == "NONE":
        out["engine.enforce_eager"] = True  # no graph captured: every step's launches are eager
    elif resolved in ("FULL_DECODE_ONLY", "PIECEWISE"):  # mixed batches eager, or attention outside the graphs:
        # timed as full graphs
        given = ("vllm serve --compilation-config.cudagraph_mode", mode) if mode is not None else \
            ("vllm serve --compilation-config.mode", cc["mode"]) if "mode" in cc else \
            (_flag("serve", "optimization_level", version), level) if level is not None else (None, None)
        if given[0] is not None:  # else the default, piecewise for chunked local attention: the run says so
            not_modelled[given[0]] = given[1]
    for key, value in cc.items():
        not_modelled[f"vllm serve --compilation-config.{key}"] = value
    return out


def _graph_mode(serve: dict, version: str, arch=None) -> str:
    """The cudagraph_mode the line leaves vLLM with: -cc's, else -O's (-O2 by default); piecewise graphs need
    vLLM's compile, without which 0.33 keeps the full ones (without_piecewise) and 0.19 captures none; stock
    torch.compile (mode 1) runs without graphs; under vLLM's compile set_splitting_ops_for_v1 drops piecewise graphs
    an empty splitting_ops leaves nothing to split, and every graph beside DeepEP's high-throughput kernels over DP
    ranks of a MoE model. --enforce-eager (timed as engine.enforce_eager) is not read here."""
    cc = serve.get("compilation_config") or {}
    mode, level = cc.get("cudagraph_mode"), serve.get("optimization_level")
    if mode is not None and (not isinstance(mode, str) or mode.upper() not in CUDAGRAPH_MODES):
        raise ConfigError("vllm serve --compilation-config.cudagraph_mode", f"one of {', '.join(CUDAGRAPH_MODES)}, "
                                                                            f"got {mode!r}")
    level_text = str(level if level is not None else 2)  # vLLM's default -O2
    resolved = mode.upper() if mode is not None else LEVEL_CUDAGRAPH_MODE[level_text]
    compile_mode = str(cc["mode"]).upper() if "mode" in cc else None
    if compile_mode in ("1", "STOCK_TORCH_COMPILE"):  # the model runner compiles and wraps no graph
        return "NONE"
    compiled = compile_mode in ("3", "VLLM_COMPILE") if compile_mode is not None else level_text != "0"
    if not compiled and resolved in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        resolved = "FULL_DECODE_ONLY" if resolved == "FULL_AND_PIECEWISE" and version != "0.19.0" else "NONE"
    fused = isinstance(cc.get("pass_config"), dict) and cc["pass_config"].get("fuse_attn_quant")
    if compiled and not fused and cc.get("splitting_ops") == [] and resolved in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        resolved = "NONE" if resolved == "PIECEWISE" else "FULL"
    moe_dp = (serve.get("data_parallel_size") or 1) > 1 and (arch is None or bool(arch.num_experts))
    if compiled and serve.get("all2all_backend") == "deepep_high_throughput" and moe_dp:
        resolved = "NONE"
    if arch is not None and arch.attention_chunk_size and resolved != "NONE":  # r136: chunked local attention
        # captures no full graph (its backend's support is NEVER): a full mixed mode does not start, a full
        # decode mode falls to piecewise graphs under vLLM's compile, else to none (resolve_cudagraph_mode_and_sizes)
        if resolved == "FULL":
            raise ConfigError("vllm serve --compilation-config.cudagraph_mode",
                              f"FULL: {arch.name}'s chunked local attention captures no full CUDA graph; vLLM does "
                              f"not start (try PIECEWISE)")
        if resolved in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
            resolved = "PIECEWISE" if compiled and cc.get("splitting_ops") != [] else "NONE"
    return resolved


def _ngram_window(config: dict, method: str | None, field: str) -> None:
    """For an n-gram method the window's prompt_lookup_min at most its max (one given is the other's default), as
    vLLM checks them (their type and Field(ge=1) are checked with the other fields')."""
    low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
    if method in ("ngram", "ngram_gpu") and low is not None and high is not None and low > high:
        raise ConfigError(f"{field}.prompt_lookup_min", f"{low} must be <= prompt_lookup_max {high}, as vLLM says")


def _synthetic_acceptance(config: dict, k: int, field: str) -> list[float] | None:
    """0.33's synthetic rejection sampling as the distribution of the accepted run's length (0..k): its rates are
    the chance that the first i + 1 drafts are all accepted, so a run of exactly j has rate[j - 1] - rate[j]; a
    mean length L is vLLM's least-variance schedule (L - 1 drafts: whole ones at 1, the fraction next)."""
    rates, length = config.get("synthetic_acceptance_rates"), config.get("synthetic_acceptance_length")
    if config.get("rejection_sample_method") != "synthetic":
        if rates is not None or length is not None:
            raise ConfigError(field, "synthetic_acceptance_rates/_length are only valid with "
                                     "rejection_sample_method 'synthetic', as vLLM says")
        return None
    if (rates is None) == (length is None):
        raise ConfigError(field, "rejection_sample_method 'synthetic' needs exactly one of "
                                 "synthetic_acceptance_rates and synthetic_acceptance_length, as vLLM says")
    if rates is not None:
        if not isinstance(rates, list) or len(rates) != k or not all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1 for r in rates):
            raise ConfigError(f"{field}.synthetic_acceptance_rates", f"must be {k} numbers in [0, 1] (one per "
                                                                     f"draft position), got {rates!r}")
        if any(b > a for a, b in zip(rates, rates[1:])):
            raise ConfigError(f"{field}.synthetic_acceptance_rates", f"must be non-increasing, got {rates!r}")
    else:
        if not isinstance(length, (int, float)) or isinstance(length, bool) or not 1 <= length <= k + 1:
            raise ConfigError(f"{field}.synthetic_acceptance_length", f"must be in [1, {k + 1}], got {length!r}")
        drafts = float(length) - 1
        whole = int(drafts)
        rates = ([1.0] * whole + [drafts - whole] + [0.0] * k)[:k]
    edges = [1.0, *map(float, rates), 0.0]
    return [max(a - b, 0.0) for a, b in zip(edges, edges[1:])]


def _bench(bench: dict, not_modelled: dict, version: str, max_logprobs: int = 20,
           vocab: int | None = None, server_defaults: dict | None = None) -> tuple[BenchOptions, dict]:
    """max_logprobs: the server's --max-logprobs (ModelConfig's default 20); vocab: the model's vocabulary, which
    -1 means there; server_defaults: the sampling defaults the server gives a request that sends none."""
    o = BenchOptions(vllm_version=version)
    o.ready_check = (bench.get("ready_check_timeout_sec") or 0) > 0  # a test request first: see check_resolved
    for dest in BENCH_RESULT:
        if dest not in bench:
            continue
        v = bench[dest]
        if dest == "percentile_metrics":
            if v:  # vLLM: `args.percentile_metrics or` its default
                o.percentile_metrics = _metric_names(v, version)
        elif dest == "metric_percentiles":
            o.metric_percentiles = _percentiles(v)
        elif dest == "goodput":
            o.goodput = _goodput(v)
        elif dest == "model":
            o.model_id = v
        elif dest == "tokenizer":
            o.tokenizer_id = v
        elif dest == "metadata":
            bad = [m for m in v if "=" not in m]
            if bad:
                raise ConfigError("vllm bench serve --metadata", f"KEY=VALUE items, as vLLM takes them, got {bad[0]!r}")
            o.metadata = v
        else:
            setattr(o, dest, v)
    o.save_result = o.save_result or o.append_result  # vLLM saves with either
    unread = [dest for dest in ("save_detailed", "result_filename", "result_dir", "label") if bench.get(dest)]
    if unread and not o.save_result and not bench.get("plot_timeline"):  # (r149) vLLM writes no file to shape
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: vllm bench serve --{d.replace('_', '-')} has no effect: without --save-result "
                  f"or --append-result vLLM's client writes no result file" for d in unread])
    if o.backend in POOLING_BACKENDS:  # vLLM then measures a pooling task (no tokens generated, other metrics)
        choices = _parser("bench_serve", version)[1].get("backend", {}).get("choices") or ENDPOINT_ENDINGS
        served = ", ".join(b for b in ENDPOINT_ENDINGS if b in choices)  # the release's (r149: 0.19 lists no responses)
        raise ConfigError("vllm bench serve --backend", f"{o.backend!r} benchmarks a pooling model (embeddings, "
                                                        f"rerank), which servesim does not simulate: it serves text "
                                                        f"generation (backends {served})")
    _client_checks(bench)
    _sampling_checks(bench, version, o.backend, max_logprobs, vocab, server_defaults)
    extra = bench.get("extra_body") if isinstance(bench.get("extra_body"), dict) else {}
    if (server_defaults or {}).get("max_new_tokens") is not None:  # the server's cap on every answer (r150)
        not_modelled["vllm serve --override-generation-config.max_new_tokens"] = \
            f"{server_defaults['max_new_tokens']!r}: the server caps every answer at it; servesim keeps the " \
            f"dataset's lengths"
    for key in OUTPUT_KEYS:  # said apart: what the client measures is other outputs than the dataset's
        if key in extra:
            not_modelled[f"vllm bench serve --extra-body.{key}"] = f"{extra[key]!r}: it changes the outputs vLLM " \
                                                                  f"generates; servesim keeps the dataset's lengths"
    if "stream_interval" in extra:  # 0.33 streams each request's tokens in groups of it: other ITLs measured
        not_modelled["vllm bench serve --extra-body.stream_interval"] = \
            f"{extra['stream_interval']!r}: " + ("vLLM 0.19's server has no such request field (ignored)"
                                                 if version == "0.19.0" else "the server streams the request's "
                                                 "tokens in groups of it (the ITLs the client measures); servesim "
                                                 "streams each token")
    if o.backend == "openai-audio":
        raise ConfigError("vllm bench serve --backend", "'openai-audio' benchmarks speech transcription (audio "
                                                        "prompts), which servesim does not simulate")
    if o.backend in CHAT_BACKENDS:  # the server wraps each prompt in the model's chat template
        not_modelled[_flag("bench_serve", "backend", version)] = \
            f"{o.backend} (the chat template's tokens the server adds around each prompt are not simulated; " \
            f"vLLM's input_lens count them, as the server's usage reports them)"
    endpoint = bench.get("endpoint", "/v1/completions")
    if o.backend in ENDPOINT_ENDINGS and not endpoint.endswith(ENDPOINT_ENDINGS[o.backend]):
        ending = ENDPOINT_ENDINGS[o.backend][0]
        raise ConfigError("vllm bench serve --endpoint", f"{endpoint!r}: --backend {o.backend}'s client refuses "
                                                         f"every request to a URL not ending in {ending!r}, so vLLM "
                                                         f"writes no result; give --endpoint /v1/{ending}")
    if o.backend not in CHAT_BACKENDS and endpoint.endswith("chat/completions"):  # passes the check above (round 125)
        raise ConfigError("vllm bench serve --endpoint", f"{endpoint!r}: --backend {o.backend} sends a completions "
                                                         f"body (a prompt, no messages), which the chat route answers "
                                                         f"400 for every request; give --backend openai-chat")
    name = bench.get("dataset_name", "random")
    if name == "timed_trace":  # 0.33's: lengths, times and hash ids from a JSONL file, which servesim reads
        raise ConfigError("vllm bench serve --dataset-name", "'timed_trace' is not replayed through `servesim "
                                                             "vllm`; replay its file with `servesim run --set "
                                                             "'workload={type: trace, path: FILE, format: "
                                                             "vllm_timed_trace}'`")
    if name == "burstgpt":  # lengths from the CSV, but its prompts are text the server tokenizes again
        raise ConfigError("vllm bench serve --dataset-name", "'burstgpt' sends each prompt as the decoded text of "
                                                             "token ids (i + j) % vocab, which the server encodes "
                                                             "again to a length only the model's tokenizer knows "
                                                             "(vLLM's input_lens say the CSV's); servesim has no "
                                                             "tokenizer. `servesim run --set 'workload={type: trace, "
                                                             "path: FILE, format: burstgpt}'` replays the CSV's own "
                                                             "lengths at its own times (not vLLM's sample of its "
                                                             "GPT-4 rows)")
    if name not in OFFLINE_DATASETS:
        raise ConfigError("vllm bench serve --dataset-name", f"{name!r} needs its prompts' text and a tokenizer; "
                                                             f"servesim simulates {', '.join(OFFLINE_DATASETS)} "
                                                             f"(or replay a trace with `servesim run`)")
    if bench.get("skip_tokenizer_init"):  # the client then has no tokenizer, which these datasets make prompts with
        raise ConfigError(_flag("bench_serve", "skip_tokenizer_init", version),
                          f"vLLM's client then has no tokenizer, and its {name!r} dataset needs one to make its "
                          f"prompts: it fails before sending a request")
    if name == "random" and (bench.get("random_batch_size") or 1) > 1:  # generation backends only reach here
        raise ConfigError("vllm bench serve --random-batch-size", f"{bench['random_batch_size']}: the random dataset "
                                                                  f"then folds that many prompts into one request "
                                                                  f"with no output length, which a generation "
                                                                  f"server answers 400 (max_tokens 0); it is for "
                                                                  f"embedding backends")
    if bench.get("dataset_path") is not None and (name == "random" or version != "0.19.0"):  # vLLM's check
        raise ConfigError("vllm bench serve --dataset-path", f"vLLM cannot use the {name!r} dataset with a path: "
                                                             f"its requests are made up, not read from a file")
    o.num_prompts = bench.get("num_prompts", 1000)
    if o.num_prompts < 1:
        raise ConfigError("vllm bench serve --num-prompts", f"must be >= 1, got {o.num_prompts}")
    o.request_rate = bench.get("request_rate", math.inf)
    o.burstiness = bench.get("burstiness", 1.0)
    o.max_concurrency = bench.get("max_concurrency")
    seed = bench.get("seed", 0)
    if not 0 <= seed < 2**32:  # vLLM's client seeds numpy with it, which takes 32 bits
        raise ConfigError("vllm bench serve --seed", f"must be from 0 to 2**32 - 1 (vLLM's client gives it to "
                                                     f"np.random.seed), got {seed}")
    w: dict = {"workload.num_requests": o.num_prompts, "seed": seed}
    limit = o.max_concurrency
    if limit is not None and limit <= 0 and not (limit == 0 and version == "0.19.0"):
        raise ConfigError("vllm bench serve --max-concurrency",
                          f"must be > 0, as vLLM {version} requires, got {limit}" if version != "0.19.0" else
                          f"must be 0 (no limit) or more: vLLM 0.19's client makes a semaphore of it, which refuses "
                          f"{limit}")
    if limit:  # 0.19 takes 0 as no limit (its semaphore only when the value is truthy), and writes it so
        w["workload.max_concurrency"] = limit
    w["workload.arrival"] = _arrival(bench, o)
    w.update(_lengths(bench, name, version))
    if name == "prefix_repetition":  # vLLM makes num_prompts // num_prefixes requests of each prefix, no more
        k = bench.get("prefix_repetition_num_prefixes", 10)
        if o.num_prompts < k:
            raise ConfigError("vllm bench serve --num-prompts", f"{o.num_prompts} is below "
                                                                f"--prefix-repetition-num-prefixes ({k}): vLLM's "
                                                                f"prefix_repetition dataset refuses it")
        w["workload.num_requests"] = k * (o.num_prompts // k)
        if not bench.get("ignore_eos"):  # vLLM's client sets ignore_eos itself for the random datasets only
            from servesim.simulator.config import say_once

            say_once(["servesim: warning: prefix_repetition without --ignore-eos: vLLM's model may stop a response "
                      "at its end-of-sequence token before --prefix-repetition-output-len; servesim generates every "
                      "token of it (give --ignore-eos for runs the two measure alike)"])
    if o.goodput:
        w["workload.slo_classes"] = {"goodput": o.goodput}
    for dest, v in bench.items():
        unused = dest in ("ramp_up_start_rps", "ramp_up_end_rps") and "ramp_up_strategy" not in bench  # vLLM's too
        if unused or (dest not in BENCH_RESULT and dest not in BENCH_WORKLOAD):
            not_modelled[_flag("bench_serve", dest, version)] = v
    _say_unreported(o)
    return o, w


def _say_unreported(o) -> None:
    """--percentile-metrics naming the client's queue, which vLLM 0.33 reports only with --max-concurrency (and
    the queue-inclusive latency at a finite rate): left out silently by vLLM, said here (r156)."""
    from servesim.simulator.config import say_once

    missing = [m for m, reported in (("client_queue_time", o.max_concurrency is not None),
                                     ("e2el_including_client_queue",
                                      o.max_concurrency is not None and o.request_rate < math.inf))
               if m in o.percentile_metrics and not reported]
    if missing:
        say_once([f"servesim: warning: vllm bench serve --percentile-metrics {','.join(missing)}: vLLM reports "
                  f"{'it' if len(missing) == 1 else 'them'} only with --max-concurrency"
                  f"{' and a finite --request-rate' if 'e2el_including_client_queue' in missing else ''}, so the "
                  f"result leaves {'it' if len(missing) == 1 else 'them'} out, as vLLM's does"])


# SamplingParams._verify_args (sampling_params.py) on what the client sends: a value outside is a 400 to every
# request: every request fails, or with --ready-check-timeout-sec the bench stops at its test request.
# key -> (an integer field (the protocol's int; else float), the bound said, the check: value, 0.33's rules)
SAMPLING_LIMITS = {
    "presence_penalty": (False, "in [-2, 2]", lambda v, new: -2.0 <= v <= 2.0),
    "frequency_penalty": (False, "in [-2, 2]", lambda v, new: -2.0 <= v <= 2.0),
    "repetition_penalty": (False, "above 0", lambda v, new: not v <= 0.0 and (math.isfinite(v) or not new)),
    "temperature": (False, "in [0, 2]", lambda v, new: math.isfinite(v) and 0.0 <= v <= 2.0 if new else not v < 0.0),
    "top_p": (False, "in (0, 1]", lambda v, new: 0.0 < v <= 1.0),
    "top_k": (True, "-1 (off) or above 0", lambda v, new: not v < -1),
    "min_p": (False, "in [0, 1]", lambda v, new: 0.0 <= v <= 1.0),
}
# what only --extra-body sends (the client's own flags set these apart)
EXTRA_BODY_LIMITS = {
    "max_tokens": (True, "from 1", lambda v, new: v >= 1),
    "min_tokens": (True, "from 0", lambda v, new: v >= 0),
    "n": (True, "from 1", lambda v, new: v >= 1),
}


def _lax_number(value, integer: bool):
    """A JSON value as the server's request class reads it (pydantic, lax): a bool, a number or numeric text; an
    integer field takes no fraction. None where it takes none of these."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    if integer:
        return int(value) if isinstance(value, (bool, int)) or math.isfinite(value) and value == int(value) else None
    return float(value)


OUTPUT_KEYS = ("max_tokens", "ignore_eos", "stop", "max_completion_tokens")  # min_tokens: workload.min_tokens
SAMPLING_EPS = 1e-5  # sampling_params._SAMPLING_EPS: a temperature below it is greedy
MAX_N_SEQUENCES = 16384  # envs.VLLM_MAX_N_SEQUENCES' default
COMPLETIONS_BACKENDS = ("openai", "vllm")  # whose request function sends the client's --logprobs
def _sampling_checks(bench: dict, version: str, backend: str | None = None, max_logprobs: int = 20,
                     vocab: int | None = None, server_defaults: dict | None = None) -> None:
    """The sampling flags, or --extra-body's keys of the same names (which win, as vLLM's client merges them), as
    the server reads and checks them (its request class, then SamplingParams): each value outside is a 400 to every
    request (refused here: a run of failures only). 0.19 bounds temperature below only. A key the client does not
    send takes the server's default, --override-generation-config's (the completions client always sends
    repetition_penalty 1.0)."""
    extra = bench.get("extra_body") if isinstance(bench.get("extra_body"), dict) else {}
    sent = ("repetition_penalty",) if (backend or "openai") in COMPLETIONS_BACKENDS else ()
    defaults = {k: v for k, v in (server_defaults or {}).items() if k in SAMPLING_LIMITS and k not in sent}

    def refuse(key: str, given, why: str):
        field = f"vllm bench serve --extra-body.{key}" if key in extra else _flag("bench_serve", key, version) \
            if bench.get(key) is not None else f"vllm serve --override-generation-config.{key}"
        stops = (bench.get("ready_check_timeout_sec") or 0) > 0  # the test request is sent only then
        raise ConfigError(field, f"{given!r}: vLLM {version}'s server {why} and answers every request 400, so "
                                 + ("the bench stops at its test request (\"Initial test run failed\")" if stops else
                                    "every request of the bench fails (its result: completed 0)")
                                 + ": servesim simulates none of it")

    echo = _lax_bool(extra.get("echo")) is True
    values = {}
    for key, (integer, bound, ok) in {**SAMPLING_LIMITS, **EXTRA_BODY_LIMITS}.items():
        given = extra.get(key, bench.get(key, defaults.get(key)))
        if given is None:
            continue
        value = values[key] = _lax_number(given, integer)
        bound = "from 0" if key == "temperature" and version == "0.19.0" else bound
        if value is None or not ok(value, version != "0.19.0") and not (key == "max_tokens" and value == 0 and echo):
            kind = ("an integer " if integer else "a number ") if value is None else ""
            refuse(key, given, f"takes {key} {kind}{bound}")  # (max_tokens 0 with echo: the prompt alone, echoed)
    if values.get("min_tokens") is not None and values.get("max_tokens") is not None and \
            values["min_tokens"] > values["max_tokens"]:
        refuse("min_tokens", extra["min_tokens"], f"takes no min_tokens above max_tokens {values['max_tokens']}")
    if version != "0.19.0" and extra.get("stream_interval") is not None:  # 0.33's request field (0.19 has none)
        interval = _lax_number(extra["stream_interval"], True)
        if interval is None or interval < 1:
            refuse("stream_interval", extra["stream_interval"], "takes stream_interval an integer from 1")
    n = values.get("n") or 1
    if n > MAX_N_SEQUENCES:
        refuse("n", extra["n"], f"takes n up to VLLM_MAX_N_SEQUENCES ({MAX_N_SEQUENCES:,})")
    if n > 1 and values.get("temperature") is not None and values["temperature"] < SAMPLING_EPS:
        refuse("n", extra["n"], "takes n 1 only with greedy sampling (temperature 0)")
    cap = vocab if max_logprobs == -1 else max_logprobs  # -1 (either): the vocabulary's size
    for key, given, sent in (("top_logprobs", extra.get("top_logprobs"), backend == "openai-chat"),  # the chat's
                             ("logprobs", extra.get("logprobs", bench.get("logprobs")),
                              (backend or "openai") in COMPLETIONS_BACKENDS)):  # the completions request's count
        if given is None or not sent:
            continue
        value = _lax_number(given, True) if not isinstance(given, str) else None  # text: refused before
        if value is None or value < -1:
            refuse(key, given, f"takes {key} an integer, -1 or from 0")
        if key == "top_logprobs" and value and _lax_bool(extra.get("logprobs")) is not True:
            refuse(key, given, "takes top_logprobs only beside logprobs true")
        want = vocab if value == -1 else value
        if want and cap is not None and want > cap:
            refuse(key, given, f"takes {key} up to its --max-logprobs ({cap:,})")
    for key, why in (("stream", "streams only (the client asks for stream options)"),
                     ("prompt_logprobs", "gives no prompt_logprobs but 0 to a streamed request"),
                     ("stop", "takes stop as text or a list of texts"), ("seed", "takes seed an integer"),
                     ("ignore_eos", "takes ignore_eos true or false"),
                     ("response_format", "needs a json_schema beside response_format json_schema")):
        given = extra.get(key)
        if given is None:
            continue
        if key == "stream" and _lax_bool(given) is not True or key == "prompt_logprobs" and (
                isinstance(given, str) or not isinstance(given, (int, float)) or given != 0) or \
                key == "stop" and not (isinstance(given, str) or isinstance(given, list) and
                                       all(isinstance(x, str) for x in given)) or \
                key == "seed" and _lax_number(given, True) is None or key == "ignore_eos" and _lax_bool(given) is None \
                or key == "response_format" and isinstance(given, dict) and given.get("type") == "json_schema" and \
                given.get("json_schema") is None:
            refuse(key, given, why)


def _client_checks(bench: dict) -> None:
    """What vllm bench serve's main refuses before it sends a request (benchmarks/serve.py), and LoRA adapters,
    which servesim does not serve (a server without them answers each request 404)."""
    field = "vllm bench serve "
    if bench.get("self_timed") is not None and bench.get("dataset_name") != "timed_trace":
        raise ConfigError(field + "--self-timed", "only with --dataset-name timed_trace, as vLLM says")
    extra = bench.get("extra_body")
    if extra and not isinstance(extra, dict):  # `extra_body or {}` merged into each request's parameters (**)
        raise ConfigError(field + "--extra-body", f"a JSON object, got {extra!r:.40}: vLLM's client fails on any "
                                                  f"other before it sends a request")
    if any("=" not in h for h in bench.get("header") or []):
        raise ConfigError(field + "--header", "KEY=VALUE items, as vLLM takes them (it refuses the run otherwise)")
    if bench.get("plot_timeline") and isinstance(bench.get("timeline_itl_thresholds"), str):  # 0.33's LOW,HIGH
        try:
            ok = len([float(t) for t in str(bench["timeline_itl_thresholds"]).split(",")]) == 2
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(field + "--timeline-itl-thresholds", f"two numbers, LOW,HIGH, as vLLM takes them, got "
                                                                   f"{bench['timeline_itl_thresholds']!r}")
    if bench.get("lora_modules"):
        raise ConfigError(field + "--lora-modules", "each request would name a LoRA adapter: servesim simulates the "
                                                    "base model only")


def _arrival(bench: dict, o: BenchOptions) -> dict:
    rate, b = o.request_rate, o.burstiness
    if math.isnan(rate) or rate <= 0:
        raise ConfigError("vllm bench serve --request-rate", f"must be > 0, got {rate}")
    if not b > 0:  # vLLM's client asserts it before it sends anything
        raise ConfigError("vllm bench serve --burstiness", f"must be > 0, as vLLM asserts, got {b}")
    strategy = bench.get("ramp_up_strategy")
    if b < 1e-12 and (strategy is not None or not math.isinf(rate)):  # gaps drawn, gamma of shape b: cv 1/sqrt(b)
        raise ConfigError("vllm bench serve --burstiness", f"{b}: below 1e-12 servesim does not draw (numpy's "
                                                           f"gamma draws at that shape are all but all 0: every "
                                                           f"request at once, as --request-rate inf sends them), "
                                                           f"though vLLM takes any burstiness above 0")
    if strategy is not None:
        start, end = bench.get("ramp_up_start_rps"), bench.get("ramp_up_end_rps")
        if start is None or end is None:
            raise ConfigError("vllm bench serve --ramp-up-strategy", "needs --ramp-up-start-rps and "
                                                                     "--ramp-up-end-rps, as vLLM does")
        if rate != math.inf:  # vLLM's check: a rate other than its default inf
            raise ConfigError("vllm bench serve --request-rate", "not with --ramp-up-strategy: the ramp sets the "
                                                                 "rate (vLLM refuses a finite one)")
        if start < 0 or end < 0 or start > end:
            raise ConfigError("vllm bench serve --ramp-up-start-rps", f"must be >= 0 and at most --ramp-up-end-rps "
                                                                      f"({end}), as vLLM requires, got {start}")
        if start == 0:  # vLLM refuses it for an exponential ramp, and its client asserts a positive first rate
            raise ConfigError("vllm bench serve --ramp-up-start-rps", "must be above 0: vLLM refuses 0 for an "
                                                                      "exponential ramp, and a linear one fails on "
                                                                      "its first request (rate 0)")
        o.ramp_up = {"ramp_up_strategy": strategy, "ramp_up_start_rps": start, "ramp_up_end_rps": end}
        gaps = _gaps(b)  # a ramp's gaps at each request's rate: gamma of shape b, or (inf) exactly 1 / rate, as vLLM
        return gaps | o.ramp_up | {"vllm_client_draws": gaps["process"] != "constant"}  # (r172: drawn at cv 0.001)
    if math.isinf(rate):
        if b != 1.0:  # vLLM's client reads it for finite rates only (r146: said nothing)
            from servesim.simulator.config import say_once

            say_once([f"servesim: warning: vllm bench serve --burstiness {b:g} has no effect: --request-rate is inf "
                      f"(every request sent at once), as in vLLM's client"])
        return {"process": "burst"}  # vLLM sends every request at once (behind --max-concurrency, if given)
    # constant gaps too: the first sent after one; the gaps vLLM's client draws for the seed (constant ones draw
    # nothing: r148, said to have no effect)
    gaps = _gaps(b)
    return gaps | {"rate": rate, "fit_span": True, "vllm_client_draws": gaps["process"] != "constant"}


def _gaps(b: float) -> dict:
    """vLLM's gaps for a burstiness b: gamma of shape b (exponential at 1); past a gap variation of 0.001 (b above
    10^6, and inf, which vLLM makes constant) they are constant."""
    cv = 1 / math.sqrt(b)
    if cv < 1e-3:
        return {"process": "constant"}
    return {"process": "poisson"} if b == 1 else {"process": "gamma", "cv": cv}


def _uniform(length: int, ratio: float, least: int, shift: int = 0) -> dict:
    """vLLM's random lengths: integers drawn uniformly from [floor(L (1 - r)), ceil(L (1 + r))], plus `shift`."""
    low, high = (max(least, shift + math.floor(length * (1 - ratio))),
                 max(least, shift + math.ceil(length * (1 + ratio))))
    return {"dist": "fixed", "value": low} if low == high else {"dist": "uniform", "low": low, "high": high}


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


UNREADABLE = object()  # a --random-range-ratio text that is neither a number nor JSON


def _ratio_value(value):
    """--random-range-ratio as vLLM 0.33's _parse_range_ratio reads its text: a number, else JSON (UNREADABLE
    where neither); 0.19's float flag gives a number already."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return json.loads(value)
    except JSON_ERRORS:
        return UNREADABLE


def _range_ratios(value, version: str = VLLM_VERSION) -> tuple[float, float]:
    """--random-range-ratio: a number (0.19's float; 0.33 takes its text too), or 0.33's JSON (an object with the
    input's and the output's ratio apart), each ratio read by Python's float() as vLLM reads it ("0.3" and false
    are ratios too) and held to [0, 1)."""
    given = value
    value = _ratio_value(value)
    pair = (value.get("input"), value.get("output")) if isinstance(value, dict) else (value, value)
    try:
        ratios = [float(r) if isinstance(r, (int, float, str)) else math.nan for r in pair]
    except ValueError:
        ratios = [math.nan]
    if not all(0 <= r < 1 for r in ratios):
        form = "" if version == "0.19.0" else ', or {"input": r, "output": r}'  # 0.19's flag is a float
        raise ConfigError("vllm bench serve --random-range-ratio", f"a ratio in [0, 1){form}, got {given!r:.80}")
    return ratios[0], ratios[-1]


RANDOM_LENGTHS = ("input_len", "random_input_len", "random_output_len", "random_prefix_len")  # the random dataset's
PREFIX_REPETITION_LENGTHS = ("prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
                             "prefix_repetition_num_prefixes", "prefix_repetition_output_len")


def _lengths(bench: dict, name: str, version: str) -> dict:
    # the random dataset's lengths: any integer, as vLLM takes them (an input below 0 is 0, an output at least 1, a
    # prefix below 0 takes its tokens off every prompt); prefix_repetition's held to what it can send. Each dataset
    # reads only its own flags (and --output-len): another dataset's are not checked, as vLLM leaves them (round 125)
    if name == "prefix_repetition":
        for dest, least in (("output_len", 1), ("prefix_repetition_prefix_len", 0),
                            ("prefix_repetition_suffix_len", 0), ("prefix_repetition_num_prefixes", 1),
                            ("prefix_repetition_output_len", 1)):
            if dest in bench and bench[dest] < least:
                raise ConfigError(_flag("bench_serve", dest, version), f"must be >= {least}, got {bench[dest]}")
        if version != "0.19.0" and "random_range_ratio" in bench:  # 0.33 reads the ratio for every dataset
            given = bench["random_range_ratio"]
            if _ratio_value(given) is UNREADABLE:
                raise ConfigError("vllm bench serve --random-range-ratio", f"{given!r:.80}: vLLM 0.33 reads it (a "
                                                                           f"number, or JSON) for every dataset and "
                                                                           f"stops before its first request")
    other = RANDOM_LENGTHS if name == "prefix_repetition" else PREFIX_REPETITION_LENGTHS
    if ignored := [_flag("bench_serve", d, version) for d in other if d in bench]:  # (r156: --input-len 2000 with
        from servesim.simulator.config import say_once  # prefix_repetition sent its 256-token default, unsaid)

        say_once([f"servesim: warning: {', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with "
                  f"--dataset-name {name}: vLLM's client reads {'it' if len(ignored) == 1 else 'them'} for the "
                  f"{'random' if name == 'prefix_repetition' else 'prefix_repetition'} dataset only"])
    if name == "random":
        in_ratio, out_ratio = _range_ratios(bench.get("random_range_ratio", 0.0), version)
        inp = max(0, bench.get("input_len", bench.get("random_input_len", 1024)))
        out = bench.get("output_len", bench.get("random_output_len", 128))
        prefix = bench.get("random_prefix_len", 0)
        if prefix + math.floor(inp * (1 - in_ratio)) < 1:  # vLLM's check: a prompt could be empty
            dest = "input_len" if "input_len" in bench else "random_input_len"
            raise ConfigError(_flag("bench_serve", dest, version),
                              f"too small: {inp} at range ratio {in_ratio} can draw an empty prompt (vLLM refuses "
                              f"it); raise it or --random-prefix-len, or lower the ratio")
        # vLLM asks for prefix + input tokens: a negative prefix shortens every prompt by it (none shared)
        lengths = {"workload.prompt_tokens": _uniform(inp, in_ratio, 1, min(prefix, 0)),
                   "workload.output_tokens": _uniform(out, out_ratio, 1)}
        if prefix > 0 and inp == 0:  # the prompt is the prefix alone: its last token computed, as vLLM must (r128)
            prefix, lengths["workload.prompt_tokens"] = prefix - 1, {"dist": "fixed", "value": 1}
    else:  # prefix_repetition: num_prefixes shared prefixes, each request one of them and its own suffix
        prefix = bench.get("prefix_repetition_prefix_len", 256)
        suffix = bench.get("prefix_repetition_suffix_len", 256)
        out = bench.get("output_len", bench.get("prefix_repetition_output_len", 128))
        if prefix + suffix < 1:
            raise ConfigError(_flag("bench_serve", "prefix_repetition_suffix_len", version),
                              "0 beside a prefix of 0: every prompt would be empty")
        if not suffix:  # the prompt is the prefix alone: its last token computed, as vLLM must compute one
            prefix, suffix = prefix - 1, 1
        lengths = {"workload.prompt_tokens": {"dist": "fixed", "value": suffix},
                   "workload.output_tokens": {"dist": "fixed", "value": out}}
        if prefix:
            lengths["workload.shared_prefix"] = {"tokens": prefix, "balanced": True,
                                                 "count": bench.get("prefix_repetition_num_prefixes", 10),
                                                 "shuffle": not bench.get("disable_shuffle")}
        return lengths
    if prefix > 0:
        lengths["workload.shared_prefix"] = {"tokens": prefix, "count": 1}
    return lengths


# the metrics --percentile-metrics may name, in the order vLLM reports them; 0.33 adds the client's queue (the wait
# for a --max-concurrency slot) and the end-to-end latency counting it
METRICS = {"0.19.0": ("ttft", "tpot", "itl", "e2el"),
           "0.33.0": ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")}


def _metric_names(text: str, version: str) -> list[str]:
    """vLLM splits on commas alone and reports the names that match exactly; a name matching none (a typo, or a
    space after a comma, which vLLM keeps and so drops the metric) is refused rather than left out unsaid."""
    names = text.split(",")
    bad = [m for m in names if m not in METRICS[version]]
    if bad:
        spaced = next((m for m in bad if m.strip() in METRICS[version]), None)
        raise ConfigError("vllm bench serve --percentile-metrics",
                          f"{spaced!r} matches no metric: vLLM splits on commas alone and would leave "
                          f"{spaced.strip()} out; write {','.join(m.strip() for m in names)}" if spaced else
                          f"a comma-separated subset of {','.join(METRICS[version])}, got {text!r}")
    return names


def _percentiles(text: str) -> list[float]:
    try:
        ps = [float(p) for p in text.split(",")]
    except ValueError:
        raise ConfigError("vllm bench serve --metric-percentiles", f"comma-separated numbers, got {text!r}") from None
    if not ps or not all(0 <= p <= 100 for p in ps):
        raise ConfigError("vllm bench serve --metric-percentiles", f"percentiles in [0, 100], got {text!r}")
    return ps


UNREACHED_MS = 1e13  # a latency target beyond any simulated time (at most 1e9 s): every request meets it


def _goodput(items: list[str]) -> dict:
    return goodput_targets(items, "vllm bench serve --goodput")


def goodput_targets(items: list[str], field: str, unique: bool = False) -> dict:
    """`--goodput ttft:500 tpot:50`: milliseconds per metric; a request is good if it meets every one. vLLM's
    client keeps a metric's last target; servesim's own commands (`unique`) refuse one given twice, as --slo."""
    slo = {}
    for item in items:
        key, sep, value = item.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = None
        if not sep or key not in ("ttft", "tpot", "e2el") or not (ms is not None and ms >= 0):  # inf is vLLM's too
            nan = " (vLLM's client takes nan, a target no request meets: a goodput of 0)" \
                if ms is not None and math.isnan(ms) and sep else ""
            raise ConfigError(field, f"KEY:MILLISECONDS with KEY one of ttft, tpot, e2el and a value >= 0, got "
                                     f"{item!r}{nan}")
        if unique and f"{key}_ms" in slo:
            raise ConfigError(field, f"{key} is given twice ({item!r}): give each metric's target once")
        if unique and not 0 < ms < math.inf:  # servesim's own commands: a target met by none or by all says nothing
            raise ConfigError(field, f"{item!r}: the target must be a positive, finite number of ms, as --slo's "
                                     f"({'an infinite one constrains nothing' if ms else '0 ms is met by no request'})")
        # vLLM's value <= SLO: 0 admits only an exact 0; an infinite target every request meets, as one past any
        # time a run can reach (1e9 s)
        slo[f"{key}_ms"] = 1e-9 if ms == 0 else min(ms, UNREACHED_MS)
    return slo


_ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=")  # NAME=VALUE, as a shell takes it before a command (an env variable's)


def _refuse_environment(words: list[str]) -> None:
    """The words of a command up to its model: an environment assignment or `env` among them is refused with why
    (r162, r163: `X=1 vllm serve`, `env X=1 vllm serve`, `vllm X=1 serve`, `serve X=1 M` were read otherwise)."""
    for word in words:
        if _ENV_WORD.match(word) or word == "env":
            raise ConfigError("vllm", f"{word!r:.60}: environment variables are not read (servesim models vLLM's "
                                      f"flags only; one that changes a kernel or a path is not simulated): give "
                                      f"`serve MODEL [flags]` alone")


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """`serve MODEL flags [-- [vllm] bench serve flags]` -> (serve flags with the model, bench flags)."""
    words = list(argv)
    _refuse_environment(words[:next((i for i, w in enumerate(words) if w == "serve"), len(words)) + 2])
    if words[:1] in (["python"], ["python3"]) and "vllm.entrypoints.openai.api_server" in words[1:3]:
        raise ConfigError("vllm", "the api_server module's form is not read: write it as `serve MODEL [flags]`, its "
                                  "--model as serve's MODEL and the other flags as they are")
    if words[:2] == ["vllm", "serve"]:
        words = words[1:]
    if not words or words[0] != "serve":
        raise ConfigError("vllm", "expects `serve MODEL [vLLM flags] [-- bench serve [flags]]`, as "
                                  "`vllm serve ...` and `vllm bench serve ...` are written")
    words = words[1:]
    for i, word in enumerate(words):  # argv's undecodable bytes: written into names and files (r146: internal errors)
        if not is_utf8(word):
            flag = word.split("=", 1)[0] if word.startswith("-") else \
                words[i - 1] if i and words[i - 1].startswith("-") else "vllm"
            raise ConfigError(flag, f"{word!r:.60} is not UTF-8 text")
    if "--" not in words:
        return words, []
    cut = words.index("--")
    serve, bench = words[:cut], words[cut + 1:]
    _refuse_environment(bench[:next((i for i, w in enumerate(bench) if w == "serve"), len(bench))])
    for lead in (["vllm", "bench", "serve"], ["bench", "serve"]):
        if bench[:len(lead)] == lead:
            return serve, bench[len(lead):]
    raise ConfigError("vllm", "after `--` comes the client: `bench serve [vllm bench serve flags]`")


KERNEL_BLOCK = 16  # vLLM's CUDA attention backends (FlashAttention, Triton, FlashInfer) take multiples of this
PREQUANTIZED = ("awq", "awq_marlin", "gptq", "gptq_marlin", "modelopt_fp4", "marlin", "auto_awq", "auto_gptq",
                "modelopt")  # read from the checkpoint, not made


# 0.33's online quantization shorthands vLLM makes W8A8 fp8 of a 16-bit checkpoint (layers/quantization/__init__.py);
# their scales' granularity is not modelled (timed as per-tensor fp8)
ONLINE_FP8 = ("fp8_per_tensor", "fp8_per_block", "fp8_per_channel")


def _checkpoint_arch(model):
    """The served model's architecture, for the checks vLLM makes against it; None where it cannot be read (the
    run's own resolution then says why)."""
    try:
        return load_model(model) if isinstance(model, str) else None
    except ConfigError:
        return None


TORCH_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
                "float32": "float32"}  # ModelConfig's --dtype names


def _model_dtype(serve: dict, arch) -> str | None:
    """ModelConfig.dtype's name: --dtype's, or under `auto` an unquantized checkpoint's (a quantized one's
    activations are its config's torch_dtype, which servesim does not keep: None, not judged)."""
    from servesim.simulator.config import checkpoint_quantization

    given = serve.get("dtype") or "auto"
    if given != "auto":
        return TORCH_DTYPES.get(given)
    return None if arch is None or checkpoint_quantization(arch) else {"fp16": "float16", "bf16": "bfloat16"}.get(
        arch.dtype)


def _float_kv_cache(serve: dict, arch) -> None:
    """0.33's VllmConfig._reject_mismatched_float_kv_cache: a 16-bit --kv-cache-dtype is the model's own dtype or
    `auto`."""
    cache, model = serve.get("kv_cache_dtype"), _model_dtype(serve, arch)
    if cache in ("float16", "bfloat16") and model is not None and model != cache:
        allowed = f"auto or {model}" if model in ("float16", "bfloat16") else "auto"
        given = serve.get("dtype") or "auto"
        raise ConfigError("vllm serve --kv-cache-dtype", f"{cache} beside the model's dtype {model}"
                                                         f"{' (--dtype ' + given + ')' if given != 'auto' else ''}: "
                                                         f"vLLM 0.33 refuses it; give {allowed}")


# the activation dtypes each quantization method's kernels take (its QuantizationConfig.get_supported_act_dtypes,
# the same in both releases but for 0.19's own AWQ and GPTQ kernels); 0.19 runs an AWQ or GPTQ checkpoint with its
# Marlin kernels unless -q names the plain method
ACT_DTYPES = {"fp8": ("bfloat16", "float16"), "modelopt": ("bfloat16", "float16"),
              "modelopt_fp4": ("bfloat16", "float16"), "mxfp4": ("bfloat16",), "awq": ("float16", "bfloat16"),
              "gptq": ("float16", "bfloat16"), "awq_marlin": ("float16", "bfloat16"),
              "gptq_marlin": ("float16", "bfloat16")}
ACT_DTYPES_019 = {"awq": ("float16",), "gptq": ("float16",)}


def _quantized_activations(serve: dict, arch, version: str) -> None:
    """--dtype beside a quantization method whose kernels do not take it (VllmConfig._get_quantization_config:
    float32 for every method servesim times, float16 for MXFP4, 0.19's AWQ and GPTQ bfloat16). Judged where --dtype
    is given: `auto` takes a quantized checkpoint's torch_dtype, which servesim does not keep."""
    given = serve.get("dtype") or "auto"
    q = serve.get("quantization")
    method = "fp8" if q in ONLINE_FP8 else q
    if method is None and arch is not None and arch.quant_method:
        method = {"awq": "awq_marlin", "gptq": "gptq_marlin"}.get(arch.quant_method, arch.quant_method) \
            if version == "0.19.0" else arch.quant_method
    takes = (ACT_DTYPES_019 if version == "0.19.0" else {}).get(method) or ACT_DTYPES.get(method)
    if given != "auto" and takes and TORCH_DTYPES.get(given) not in takes:
        raise ConfigError("vllm serve --dtype", f"{given} beside {method} quantization: vLLM {version} refuses it "
                                                f"(its kernels take {' or '.join(takes)} activations)")


def _moonep(serve: dict, arch, settings: dict) -> None:
    """0.33's --all2all-backend moonep (VllmConfig.__post_init__): unquantized bf16 models only, no EPLB, linear
    expert placement; where it moves tokens between ranks (use_all2all) its dispatch is eager-only, so vLLM
    captures no CUDA graph."""
    from servesim.simulator.config import checkpoint_quantization

    field = "vllm serve --all2all-backend"
    quantized = serve.get("quantization") or (arch is not None and checkpoint_quantization(arch))
    for fails, says in ((quantized, f"quantized models ({quantized})"),
                        (_model_dtype(serve, arch) not in (None, "bfloat16"), f"dtype {_model_dtype(serve, arch)}"),
                        (serve.get("enable_eplb"), "--enable-eplb"),
                        (serve.get("expert_placement_strategy", "linear") != "linear",
                         f"--expert-placement-strategy {serve.get('expert_placement_strategy')}")):
        if fails:
            raise ConfigError(field, f"moonep beside {says}: vLLM 0.33 refuses it (MoonEP serves unquantized "
                                     f"bf16 models, without EPLB, experts placed linearly)")
    if (serve.get("data_parallel_size") or 1) > 1 or serve.get("enable_expert_parallel") and \
            (serve.get("prefill_context_parallel_size") or 1) > 1:
        settings["engine.enforce_eager"] = True  # MoonEP's dispatch is eager-only: vLLM sets cudagraph_mode NONE


def _quantization(serve: dict, model, arch, version: str, not_modelled: dict) -> None:
    """-q against the checkpoint, as vLLM checks them: a method naming the checkpoint's own format (fp8 on an fp8
    checkpoint, awq on a 4-bit AWQ one, mxfp4 on gpt-oss) is that checkpoint; a pre-quantized method (AWQ, GPTQ,
    ModelOpt FP4) needs a checkpoint quantized so (vLLM finds no config file for it in a 16-bit one); any other,
    0.33's online fp8 shorthands too, beside a quantized checkpoint is refused (its config names another method).
    serve's quantization is left as servesim's engine.quantization reads it."""
    from servesim.simulator.config import checkpoint_quantization, checkpoint_takes

    field, given = "vllm serve --quantization", serve["quantization"]
    online = given in ONLINE_FP8 and version != "0.19.0"
    q = "fp8" if online else given
    own = arch and checkpoint_quantization(arch)
    if own:
        if checkpoint_takes(arch, given, version):  # the checkpoint's own method: nothing more to quantize
            serve.pop("quantization")
            return
        raise ConfigError(field, f"{model}'s checkpoint is quantized to {own}"
                                 + (f" ({arch.quant_method})" if arch.quant_method not in (None, own) else "")
                                 + f": vLLM refuses --quantization {given}, which its config does not name (leave "
                                   f"-q out)")
    if arch is not None and (note := checkpoint_note({"engine": {"quantization": q}})) is not None:
        raise ConfigError(field, f"{model} is a {arch.dtype} checkpoint; {note} (the what-if: servesim run --set "
                                 f"engine.quantization=...)")
    if online:
        serve["quantization"] = "fp8"
        if given != "fp8_per_tensor":
            not_modelled[f"{field} {given}"] = "timed as per-tensor fp8"


def quantization_refusal(model: str, arch, quantization: str) -> str | None:
    """Why vLLM would not start `model` with this --quantization (a record of a run that could not have been)."""
    try:
        _quantization({"quantization": quantization}, model, arch, VLLM_VERSION, {})
    except ConfigError as exc:
        return exc.message
    return None


def _parallel_launch(serve: dict, arch, version: str) -> tuple[int | None, int]:
    """The data-parallel launch modes and expert load balancing as vLLM's serve CLI, EngineArgs.create_engine_config
    and ParallelConfig check them, in their order. Returns the DP ranks this line's API server balances over under
    hybrid or external balancing (cluster.dp_ranks_reached), None under the internal balancer: an external balancer's
    rank (or 0.33's multi-port supervisor's first port) reaches its own, hybrid balancing this node's
    --data-parallel-size-local (one as large as -dp is internal again, one of 1 external); and the DP rank of the
    first of them, which vLLM labels its engines from."""
    def refuse(dest: str, why: str):
        raise ConfigError(_flag("serve", dest, version), f"{why}: vLLM {version} refuses it")

    old = version == "0.19.0"
    dp, rank, local = serve.get("data_parallel_size") or 1, serve.get("data_parallel_rank"), \
        serve.get("data_parallel_size_local")
    tp, pp, pcp_given = (serve.get(f"{k}_parallel_size") or 1 for k in ("tensor", "pipeline", "prefill_context"))
    pcp = pcp_given if not old else 1  # 0.19's launch and EPLB checks count no prefill-context ranks
    start, multi = serve.get("data_parallel_start_rank"), bool(serve.get("data_parallel_multi_port_external_lb"))
    count = serve.get("api_server_count")
    if serve.get("headless") or (isinstance(count, int) and count < 1):  # vLLM runs headless below 1
        raise ConfigError(_flag("serve", "headless" if serve.get("headless") else "api_server_count", version),
                          "starts no API server, so no request reaches this line (servesim simulates the one that "
                          "serves: leave it out)")
    if serve.get("grpc"):  # serve_grpc instead of the HTTP server: vllm bench serve's backends are all HTTP
        raise ConfigError(_flag("serve", "grpc", version), "serves gRPC instead of the HTTP OpenAI server, which no "
                                                           "vllm bench serve backend reaches (leave it out)")
    # the serve CLI's one balancing mode: external (or a rank), hybrid (or a start rank), 0.33's multi-port
    external = bool(serve.get("data_parallel_external_lb")) or rank is not None
    said_hybrid = bool(serve.get("data_parallel_hybrid_lb")) or (start is not None and not multi)
    if external + said_hybrid + multi > 1:
        modes = [f for f, on in (("data_parallel_multi_port_external_lb", multi), ("data_parallel_hybrid_lb" if
                 serve.get("data_parallel_hybrid_lb") or start is None else "data_parallel_start_rank", said_hybrid),
                 ("data_parallel_rank" if rank is not None else "data_parallel_external_lb", external)) if on]
        refuse(modes[0], f"beside {_flag('serve', modes[1], version)} (one data-parallel balancing mode only)")
    if multi:  # dp_supervisor's check: one API server per local rank, each an external rank on its own port
        for dest, why in (("uds", "Unix socket"), ("grpc", "gRPC")):
            if serve.get(dest):
                refuse(dest, f"with --data-parallel-multi-port-external-lb (it serves no {why})")
        if bool(serve.get("ssl_keyfile")) != bool(serve.get("ssl_certfile")):
            refuse("ssl_keyfile" if serve.get("ssl_keyfile") else "ssl_certfile", "without its pair (--ssl-keyfile "
                                                                                    "and --ssl-certfile go together)")
        if (serve.get("node_rank") or 0) < 0:
            refuse("node_rank", f"{serve['node_rank']} (a node's index is 0 or more)")
        if serve.get("api_server_count") not in (None, 1):
            refuse("api_server_count", f"{serve['api_server_count']} with --data-parallel-multi-port-external-lb "
                                       f"(it needs 1)")
        if dp < 2:
            refuse("data_parallel_multi_port_external_lb", f"at --data-parallel-size {dp} (it needs 2 or more)")
        if local is None or local < 2 or local > dp or dp % local:
            refuse("data_parallel_size_local", f"{'left out' if local is None else local} with "
                                               f"--data-parallel-multi-port-external-lb (it needs 2 or more ranks on "
                                               f"this node, dividing --data-parallel-size {dp})")
        rank = start if start is not None else (serve.get("node_rank") or 0) * local
        if rank + local > dp:
            refuse("data_parallel_start_rank" if start is not None else "node_rank",
                   f"{rank}: the supervised ranks {rank}..{rank + local - 1} run past --data-parallel-size {dp}")
        port, sup = serve.get("port", 8000), serve.get("data_parallel_supervisor_port", 9256)
        if port <= sup <= port + local - 1:
            refuse("data_parallel_supervisor_port", f"{sup} inside the child ranks' ports {port}..{port + local - 1}")
        external, local = True, None  # the client's --port is the first child's: one external rank
    if local is not None and local > dp:
        refuse("data_parallel_size_local", f"{local} above --data-parallel-size {dp}")
    if local is not None and local < 0:
        refuse("data_parallel_size_local", f"{local} ranks on this node")
    replaced = old and (serve.get("nnodes") or 1) > 1 and dp > 1 and serve.get("data_parallel_external_lb")
    for dest in ("data_parallel_start_rank",) if replaced else ("data_parallel_rank", "data_parallel_start_rank"):
        r = serve.get(dest)  # ParallelConfig's rank (0.19 replaces an external rank by the node's under --nnodes)
        if r is not None and (r < 0 and not old or dp > 1 and not 0 <= r < dp):
            refuse(dest, f"{r} outside the ranks 0..{dp - 1} of --data-parallel-size {dp}")
    nnodes, node, inferred, node_first = serve.get("nnodes") or 1, serve.get("node_rank") or 0, "", 0
    if serve.get("data_parallel_backend") not in (None, "mp", "ray"):  # ParallelConfig's Literal (round 127)
        refuse("data_parallel_backend", f"{serve['data_parallel_backend']!r} (vLLM takes mp or ray)")
    if nnodes > 1 and serve.get("distributed_executor_backend") not in (None, "mp", "uni", "external_launcher"):
        refuse("distributed_executor_backend", f"{serve['distributed_executor_backend']} with --nnodes {nnodes} "
                                               f"(several nodes need mp, uni or external_launcher)")
    if nnodes > 1 and node and dp == 1 and not serve.get("headless"):  # a follower node's engine asserts
        refuse("node_rank", f"{node} of a multi-node model without --headless: that node's engine is a follower, "
                            f"which vLLM does not serve from (run it --headless)")
    if nnodes > 1:  # a node's ranks follow from its index (the external rank, else this node's local size)
        if (serve.get("data_parallel_backend") or "mp") != "mp":
            refuse("data_parallel_backend", f"{serve['data_parallel_backend']} with --nnodes {nnodes} (several "
                                            f"nodes need the mp backend)")
        within = tp * pp * pcp
        if dp * within % nnodes:
            refuse("nnodes", f"{nnodes} does not divide the {dp * within} GPUs of the deployment")
        if not 0 <= node < nnodes:
            refuse("node_rank", f"{node} outside the nodes 0..{nnodes - 1}")
        node_first = node * (dp * within // nnodes) // within  # the DP rank this node's GPUs begin at
        if dp > 1 and serve.get("data_parallel_external_lb"):
            if rank is None and nnodes % dp and not old:
                refuse("data_parallel_external_lb", f"with --nnodes {nnodes} not a multiple of -dp {dp} and no "
                                                    f"--data-parallel-rank (the node cannot name its rank)")
            rank = node_first if rank is None or old else rank  # 0.19 replaces a given rank with the node's
        elif local is None and not multi:
            local = max(dp * within // nnodes // within, 1)
            inferred = f" (the ranks on one of {nnodes} nodes)"
    first_rank = (start or 0) if multi else rank or 0  # the first rank reached (hybrid balancing: set below)
    if external:
        if rank is None:
            refuse("data_parallel_external_lb", "without --data-parallel-rank (an external balancer's rank)")
        if local not in (1, None):
            refuse("data_parallel_size_local", f"{local}{inferred} beside an external balancer's rank (1 or left "
                                               f"out)")
    said_external = external  # before hybrid balancing of one local rank switches to it (fault tolerance's check)
    if external and dp > 1 and arch is not None and not arch.is_moe and not old:
        refuse("data_parallel_rank" if rank is not None and not multi else
               "data_parallel_multi_port_external_lb" if multi else "data_parallel_external_lb",
               f"with {arch.name}, a dense model (external data parallel mode is for MoE models; launch "
               f"independent instances)")
    if serve.get("data_parallel_hybrid_lb") and not external and local is None:
        refuse("data_parallel_hybrid_lb", "without --data-parallel-size-local (the ranks on this node)")
    eplb = serve.get("eplb_config")
    redundant = eplb.get("num_redundant_experts", 0) if isinstance(eplb, dict) else 0
    if serve.get("enable_eplb"):
        if not serve.get("enable_expert_parallel"):
            refuse("enable_eplb", "without --enable-expert-parallel")
        if tp * dp * pcp <= 1:
            refuse("enable_eplb", ("without tensor, prefill-context " if not old else "without tensor ") +
                   "or data parallelism (pipeline stages do not spread experts)")
        ep = tp * dp * pcp_given  # FusedMoE's EP group
        if arch is not None and arch.num_experts and (arch.num_experts + redundant) % ep:  # FusedMoE, at start-up
            raise ConfigError(_flag("serve", "eplb_config" if redundant else "enable_eplb", version),
                              f"{arch.num_experts} experts + {redundant} redundant do not divide over the {ep} EP "
                              f"ranks (vLLM's EPLB spreads them evenly, and does not start)")
    elif redundant:
        refuse("eplb_config", f"num_redundant_experts {redundant} without --enable-eplb")
    hybrid = False
    if not external and local is not None:  # create_engine_config: hybrid said or inferred from a start rank
        hybrid = bool(serve.get("data_parallel_hybrid_lb")) or (start is not None if not old else bool(start))
        if hybrid and local == 0:
            raise ConfigError(_flag("serve", "data_parallel_size_local", version),
                              "0 under hybrid balancing: this node's API server balances over its own ranks, and has "
                              "none (servesim simulates the server that serves: give it its ranks)")
        first = (start if start is not None else node_first) if not old else (start or node_first)
        first_rank = first
        if first + local > dp:  # its engines would have no place in the DP group: vLLM cannot start them
            raise ConfigError(_flag("serve", "data_parallel_start_rank" if start is not None else "node_rank",
                                    version), f"{first}: this node's ranks {first}..{first + local - 1} run past "
                                              f"--data-parallel-size {dp} (vLLM cannot start them)")
        external, hybrid = hybrid and local == 1, hybrid and 1 < local < dp  # local 1: external; -dp: internal
        if not (external or hybrid) and first != 0:  # the internal balancer's API server runs with rank 0
            refuse("data_parallel_start_rank" if start is not None else "node_rank",
                   f"{start if start is not None else node}: under the internal balancer only the node of rank 0 "
                   f"serves (the others run --headless)")
    if serve.get("enable_elastic_ep"):  # ParallelConfig
        if not serve.get("enable_eplb"):
            refuse("enable_elastic_ep", "without --enable-eplb")
        if pp > 1:
            refuse("enable_elastic_ep", "with pipeline parallelism")
        if hybrid or external and old:
            refuse("enable_elastic_ep", f"with {'hybrid' if hybrid else 'external'} balancing (it coordinates scaling "
                                        f"from one API server)")
        if (most := serve.get("elastic_ep_max_dp_size")) is not None and most < dp:
            refuse("elastic_ep_max_dp_size", f"{most} below --data-parallel-size {dp}")
    if serve.get("enable_fault_tolerance"):  # 0.33: one API server over external balancing
        if not said_external:
            refuse("enable_fault_tolerance", "without external balancing (--data-parallel-external-lb or "
                                             "--data-parallel-rank)")
        if (serve.get("api_server_count") or 1) > 1:
            refuse("enable_fault_tolerance", f"with --api-server-count {serve['api_server_count']} (it needs one)")
    if external and dp <= 1:  # ParallelConfig: an external balancer needs ranks to balance
        refuse("data_parallel_rank" if rank is not None else "data_parallel_external_lb" if
               serve.get("data_parallel_external_lb") else "data_parallel_hybrid_lb" if
               serve.get("data_parallel_hybrid_lb") else "data_parallel_start_rank",
               f"at --data-parallel-size {dp} (external balancing needs data parallelism)")
    return (1 if external else local if hybrid else None), first_rank


def _decode_context_parallel(serve: dict, arch, version: str) -> None:
    """vLLM's check of -dcp on a GQA model (latent attention has none): TP above the KV heads, dcp at most TP over
    them, and dividing the query heads per KV head (config/model.py); what passes is recorded, not modelled."""
    dcp, tp = serve.get("decode_context_parallel_size", 1), serve.get("tensor_parallel_size") or 1
    pcp = serve.get("prefill_context_parallel_size") or 1 if version != "0.19.0" else 1
    if dcp < 1:  # 0.33's Field(ge=1); 0.19 divides by it
        raise ConfigError(_flag("serve", "decode_context_parallel_size", version), f"{dcp}: vLLM {version} refuses it")
    if pcp == 1 and tp % dcp or pcp > 1 and dcp not in (1, pcp, tp * pcp):  # ParallelConfig, any attention
        raise ConfigError(_flag("serve", "decode_context_parallel_size", version),
                          (f"{dcp} must divide --tensor-parallel-size ({tp})" if pcp == 1 else
                           f"{dcp} must be 1, -pcp ({pcp}) or TP x PCP ({tp * pcp})") + f": vLLM {version} refuses it")
    _nixl_context_parallel(serve, dcp, tp, pcp, arch, version)
    if dcp <= 1 or arch is None or arch.is_mla:
        return
    kv, per_kv = arch.num_key_value_heads, arch.num_attention_heads // arch.num_key_value_heads
    why = (f"needs --tensor-parallel-size ({tp}) above the model's {kv} KV heads" if tp <= kv else
           f"is at most --tensor-parallel-size // KV heads = {tp // kv}" if dcp > tp // kv else
           f"must divide the {per_kv} query heads per KV head" if per_kv % dcp else None)
    if why:
        raise ConfigError(_flag("serve", "decode_context_parallel_size", version), f"{dcp} {why} (vLLM refuses it "
                                                                                  f"on a GQA model)")


NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", "NixlPushConnector")  # 0.33: NixlConnector is the pull one


def _connectors(config) -> list[dict]:
    """A KV transfer config and, for a MultiConnector, each child's (each made a config of its own by vLLM)."""
    if not isinstance(config, dict):
        return []
    children = _children(config) if config.get("kv_connector") == "MultiConnector" else None
    return [config, *(c for c in children if isinstance(c, dict))] if children is not None else [config]


def _nixl_context_parallel(serve: dict, dcp: int, tp: int, pcp: int, arch, version: str) -> None:
    """0.33's NIXL beside context parallelism. VllmConfig asserts, for a config naming NixlConnector (or a child so
    named; before --kv-offloading-size replaces it), a side wholly replicated or wholly DCP-sharded, MLA only. Each
    NIXL connector the engine makes (pull or push) takes PCP on a producer only, without bidirectional transfer,
    and PCP with DCP on TP 1 with DCP spanning PCP (nixl/connector.py). 0.19 checks none of these."""
    if version == "0.19.0":
        return
    flag = _flag("serve", "decode_context_parallel_size", version)
    if any(c.get("kv_connector") == "NixlConnector" for c in _connectors(serve.get("kv_transfer_config"))):
        if dcp not in (1, max(tp, pcp)):
            raise ConfigError(flag, f"{dcp} beside NixlConnector must be 1 or the NIXL transfer parallel size, "
                                    f"max(TP, PCP) = {max(tp, pcp)}: vLLM {version} refuses it")
        if dcp > 1 and arch is not None and not arch.is_mla:
            raise ConfigError(flag, f"{dcp} beside NixlConnector: vLLM {version} runs P/D with DCP on MLA models "
                                    f"only")
    for c in _connectors(effective_kv_config(serve)):
        name = c.get("kv_connector")
        if name not in NIXL_CONNECTORS or c.get("kv_connector_module_path") or pcp == 1:
            continue
        extra = _extra(c)
        pcp_flag = _flag("serve", "prefill_context_parallel_size", version)
        if c.get("kv_role") in ("kv_consumer", "kv_both"):
            raise ConfigError(pcp_flag, f"{pcp} beside {name}'s {c.get('kv_role')}: vLLM {version}'s NIXL connector "
                                        f"takes PCP on a kv_producer only")
        if extra.get("bidirectional_kv_xfer"):
            raise ConfigError(pcp_flag, f"{pcp} beside {name} with bidirectional_kv_xfer: vLLM {version}'s NIXL "
                                        f"producers with PCP do not transfer both ways")
        if dcp > 1 and (tp != 1 or dcp != pcp):
            raise ConfigError(flag, f"{dcp} with -pcp {pcp} beside {name}: vLLM {version} needs TP 1 and DCP "
                                    f"equal to PCP")


def _routed_experts(serve: dict, arch, version: str, method: str | None, spec: dict) -> None:
    """0.33's --enable-return-routed-experts, or --aux-output-config's (VllmConfig._verify_aux_output_compatibility):
    Model Runner V2 (as far as the line decides it), MoE models only, prefix caching on, no adaptive verification,
    no pipeline or context parallelism, no P/D connector (whose auxiliary output it cannot carry); 0.19 checks
    none."""
    aux = serve.get("aux_output_config") if isinstance(serve.get("aux_output_config"), dict) else {}
    if version == "0.19.0" or not (serve.get("enable_return_routed_experts") or aux.get("enable_return_routed_experts")):
        return
    flag = _flag("serve", "enable_return_routed_experts", version) if serve.get("enable_return_routed_experts") else \
        f"{_flag('serve', 'aux_output_config', version)}.enable_return_routed_experts"
    pd = [c["kv_connector"] for c in _connectors(effective_kv_config(serve, version)) if c.get("kv_connector") in
          (*NIXL_CONNECTORS, "MoRIIOConnector", "MooncakeConnector")]
    v1 = _v1_model_runner(serve, method, spec)
    why = (f"{v1}, which runs the V1 model runner (it needs V2)" if v1 else
           "the model is not a mixture of experts" if arch is not None and not arch.num_experts else
           "adaptive speculative verification" if spec.get("enable_adaptive_verification") else
           "prefix caching is off" if serve.get("enable_prefix_caching") is False else
           "pipeline parallelism" if (serve.get("pipeline_parallel_size") or 1) > 1 else
           "context parallelism" if (serve.get("decode_context_parallel_size") or 1) > 1 or
           (serve.get("prefill_context_parallel_size") or 1) > 1 else
           f"{pd[0]}, whose P/D transfer carries no routed experts" if pd else None)
    if why:
        raise ConfigError(flag, f"with {why}: vLLM {version} refuses it")


NUMACTL_CPUSET = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")  # ParallelConfig's numactl CPU list syntax
MEGA_MOE_BACKENDS = ("deep_gemm_mega_moe", "flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm",
                     "aiter_mega_moe")  # 0.33's MoE megakernels, which take no LoRA (LoRAConfig.verify_with_kernel_config)


def _ascending(cpuset: str) -> bool:
    return all(int(a) <= int(b) for a, b in (p.split("-", 1) for p in cpuset.split(",") if "-" in p))


def _world_size(serve: dict) -> int:
    """GPUs across the DP ranks (ParallelConfig.world_size_across_dp)."""
    return (serve.get("tensor_parallel_size") or 1) * (serve.get("pipeline_parallel_size") or 1) * (
        serve.get("data_parallel_size") or 1)


def _ray_executor(serve: dict) -> bool:
    """Ray workers: asked for, or the executor ParallelConfig fills in for a Ray DP backend on several GPUs."""
    executor = serve.get("distributed_executor_backend")
    return executor == "ray" or executor is None and _world_size(serve) > 1 and \
        serve.get("data_parallel_backend") == "ray"


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # 0.33's ReasoningEffort


def _effort_map(value) -> bool:
    """0.33's validate_reasoning_effort_map: an object of known efforts to text."""
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values()) and \
        set(value) <= set(REASONING_EFFORTS)


# the parsers each release registers (reasoning/__init__.py, tool_parsers/__init__.py _..._TO_REGISTER); a plugin
# (--reasoning-parser-plugin, --tool-parser-plugin) may register others
REASONING_PARSERS = {
    "0.33.0": ("deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "poolside_v1", "cohere_command3",
               "cohere_command4", "ernie45", "gemma4", "glm45", "glm47", "ling3", "openai_gptoss", "granite",
               "granite_thinking_parser", "hf", "beam", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "kimi_k2", "kimi_k3",
               "k2_horizon", "mimo", "minicpmv", "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral",
               "nemotron_v3", "olmo3", "plamo3", "muse", "muse_glimmer", "musespark1x", "qwen3", "seed_oss", "step3",
               "step3p5", "step5", "inkling"),
    "0.19.0": ("deepseek_r1", "deepseek_v3", "ernie45", "gemma4", "glm45", "openai_gptoss", "granite", "holo2",
               "hunyuan_a13b", "kimi_k2", "minimax_m2", "minimax_m2_append_think", "mistral", "nemotron_v3", "olmo3",
               "qwen3", "seed_oss", "step3", "step3p5")}
TOOL_PARSERS = {
    "0.33.0": ("dots", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "deepseek_v41", "cohere_command3",
               "cohere_command4", "ernie45", "glm45", "glm47", "ling3", "granite-20b-fc", "granite", "granite4",
               "hermes", "hf", "beam", "poolside_v1", "hunyuan_a13b", "hy_v3", "hy_v4", "internlm", "jamba", "lfm2",
               "kimi_k2", "kimi_k3", "k2_horizon", "llama3_json", "llama4_json", "llama4_pythonic", "longcat", "mimo",
               "minimax_m2", "minimax_m3", "minicpm5", "mistral", "olmo3", "plamo3", "muse", "muse_glimmer",
               "musespark1x", "openai", "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml",
               "seed_oss", "step3", "step3p5", "step5", "inkling", "xlam", "gigachat3", "functiongemma", "gemma4",
               "apertus"),
    "0.19.0": ("deepseek_v3", "deepseek_v31", "deepseek_v32", "ernie45", "glm45", "glm47", "granite-20b-fc", "granite",
               "granite4", "hermes", "hunyuan_a13b", "internlm", "jamba", "kimi_k2", "llama3_json", "llama4_json",
               "llama4_pythonic", "longcat", "minimax_m2", "minimax", "mistral", "olmo3", "openai", "phi4_mini_json",
               "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "step3p5", "xlam", "gigachat3",
               "functiongemma", "gemma4")}


def _startup_checks(serve: dict, version: str, spec: dict | None = None) -> None:
    """Config validators vLLM runs at start-up on flags servesim otherwise records: a structured-outputs option its
    backend lacks, detailed traces without an OTLP endpoint, a hidden-metrics version that is no version, nsight
    without Ray workers, 0.33's NUMA options without --numa-bind (or a CPU list numactl cannot read), 0.33's LoRA on
    a MoE megakernel, the whole GPU asked of the memory check (free memory after the CUDA context is less), a
    seed numpy cannot take, 0.33's batch-sharded sampling where it has nothing to shard
    (_validate_batch_sharded_sampling) and its adaptive verification without full CUDA graphs, beside LoRA or PP
    (_validate_adaptive_verification)."""
    from packaging.version import InvalidVersion, Version

    so = serve.get("structured_outputs_config") if isinstance(serve.get("structured_outputs_config"), dict) else {}
    backend = so.get("backend", "auto")
    hidden = serve.get("show_hidden_metrics_for_version")
    try:
        bad_version = hidden is not None and not Version(str(hidden))
    except InvalidVersion:
        bad_version = True
    executor = serve.get("distributed_executor_backend")
    kernel = serve.get("kernel_config") if isinstance(serve.get("kernel_config"), dict) else {}
    moe_backend = kernel.get("moe_backend", serve.get("moe_backend"))
    nodes = serve.get("numa_bind_nodes")
    cpus = serve.get("numa_bind_cpus")
    tp, sharded = serve.get("tensor_parallel_size") or 1, version != "0.19.0" and serve.get("enable_batch_sharded_sampling")
    adaptive = version != "0.19.0" and (spec or {}).get("enable_adaptive_verification")
    rules = [
        (so.get("disable_any_whitespace") and backend not in ("xgrammar", "guidance"),
         "structured_outputs_config.disable_any_whitespace", f"needs the xgrammar or guidance backend, not {backend}"),
        (so.get("disable_additional_properties") and backend != "guidance",
         "structured_outputs_config.disable_additional_properties", f"needs the guidance backend, not {backend}"),
        (serve.get("collect_detailed_traces") and not serve.get("otlp_traces_endpoint"), "collect_detailed_traces",
         "needs --otlp-traces-endpoint"),
        (bad_version, "show_hidden_metrics_for_version", f"{hidden!r} is not a version"),
        (serve.get("ray_workers_use_nsight") and not _ray_executor(serve) and (executor is not None or
                                                                              _world_size(serve) == 1),
         "ray_workers_use_nsight", "needs Ray workers (--distributed-executor-backend ray)"),  # (an unseen Ray
        # placement group may give them: not refused where the executor is left to vLLM on several GPUs)
        (version != "0.19.0" and nodes is not None and not all(isinstance(_lax_number(n, True), int) and
                                                               _lax_number(n, True) >= 0 for n in nodes),
         "numa_bind_nodes", "takes NUMA node numbers from 0"),
        (version != "0.19.0" and not serve.get("numa_bind") and (serve.get("numa_bind_nodes") is not None or cpus),
         "numa_bind_nodes" if serve.get("numa_bind_nodes") is not None else "numa_bind_cpus", "needs --numa-bind"),
        (version != "0.19.0" and bool(cpus) and not all(NUMACTL_CPUSET.fullmatch(str(c)) and _ascending(str(c))
                                                          for c in cpus),
         "numa_bind_cpus", "takes numactl CPU lists of ascending ranges ('0-3' or '0,2,4-7')"),
        (version != "0.19.0" and serve.get("enable_lora") and moe_backend in MEGA_MOE_BACKENDS,
         "enable_lora", f"beside the MoE backend {moe_backend} (a MoE megakernel, without LoRA)"),
        (serve.get("gpu_memory_utilization") == 1, "gpu_memory_utilization",
         "1.0 asks for the whole GPU, more than is free once the CUDA context is made"),
        (isinstance(serve.get("seed"), int) and not 0 <= serve["seed"] < 2**32, "seed",
         f"{serve.get('seed')} is not from 0 to 2**32 - 1, which the workers give np.random.seed"),
        (version != "0.19.0" and serve.get("grpc_port") is not None, "grpc_port",
         "needs the Rust frontend (VLLM_USE_RUST_FRONTEND=1, which servesim does not see; vLLM's default is off)"),
        (isinstance(serve.get("port"), int) and not 0 <= serve["port"] <= 65535, "port",
         f"{serve.get('port')} is no TCP port (0 to 65535): the server's socket cannot bind it"),
        (version != "0.19.0" and serve.get("reasoning_effort_map") is not None and not _effort_map(
            serve["reasoning_effort_map"]), "reasoning_effort_map",
         f"a JSON object of {', '.join(REASONING_EFFORTS)} to text, got {serve.get('reasoning_effort_map')!r:.60}"),
        (serve.get("reasoning_parser") and not serve.get("reasoning_parser_plugin") and
         serve["reasoning_parser"] not in REASONING_PARSERS.get(version, ()), "reasoning_parser",
         f"{serve.get('reasoning_parser')!r} is not a reasoning parser vLLM {version} registers"),
        (serve.get("enable_auto_tool_choice") and serve.get("tool_call_parser") and not serve.get("tool_parser_plugin")
         and serve["tool_call_parser"] not in TOOL_PARSERS.get(version, ()), "tool_call_parser",
         f"{serve.get('tool_call_parser')!r} is not a tool call parser vLLM {version} registers"),
        *[(sharded and fails, "enable_batch_sharded_sampling", why) for fails, why in (
            (tp <= 1, "with tensor parallel size 1 there is nothing to shard"),
            (tp > 1 and (serve.get("max_num_seqs") or tp) < tp, f"--max-num-seqs below the tensor parallel size {tp}"),
            (serve.get("max_logprobs", 20) < 0, "--max-logprobs -1 allows vocabulary-size logprobs"),
            (serve.get("return_sampling_mask"), "--return-sampling-mask: its gather drops sampling masks"))],
        *[(adaptive and fails, "speculative_config.enable_adaptive_verification", why) for fails, why in (
            (serve.get("enable_lora"), "not with LoRA (--enable-lora)"),
            (serve.get("enforce_eager") or _graph_mode(serve, version) in ("NONE", "PIECEWISE"),
             "needs full CUDA graphs (cudagraph_mode FULL, FULL_DECODE_ONLY or FULL_AND_PIECEWISE)"),
            ((serve.get("pipeline_parallel_size") or 1) > 1, "not with pipeline parallelism"))],
    ]
    for broken, dest, why in rules:
        if broken:
            head, _, key = dest.partition(".")
            raise ConfigError(_flag("serve", head, version) + (f".{key}" if key else ""),
                              f"{why}: vLLM {version} refuses to start")


def unstartable(settings: dict) -> str | None:
    """Why vLLM on a CUDA GPU would not start these settings (servesim simulates them as a what-if)."""
    block = (settings.get("engine") or {}).get("block_size")
    if isinstance(block, int) and block % KERNEL_BLOCK:
        return (f"block_size {block}: vLLM's CUDA attention backends (FlashAttention, Triton, FlashInfer) take a "
                f"multiple of {KERNEL_BLOCK}, so vLLM would not start")
    return None


def checkpoint_note(settings: dict) -> str | None:
    """A weight format vLLM reads from a checkpoint made so: the model's id must name that checkpoint."""
    quantization = (settings.get("engine") or {}).get("quantization")
    if quantization in PREQUANTIZED:
        return (f"--quantization {quantization} reads weights quantized so: give the id of a checkpoint quantized "
                f"with {quantization} (vLLM does not quantize a 16-bit one to it, and would not start)")
    return None


def _without_a_flag(settings: dict) -> list[str]:
    """Engine and policy settings moved from their defaults that no `vllm serve` flag says (servesim's own
    policies, its memory reserve, V0's swapping): the line deploys vLLM without them, so each is said."""
    from servesim.simulator.config import EngineSettings, PolicySettings

    said = set(SERVE_SETTINGS.values()) | {"engine.vllm_defaults", "engine.all2all_backend",
                                           "engine.num_redundant_experts"}  # the line's words
    notes = []
    for section, cls in (("engine", EngineSettings), ("policies", PolicySettings)):
        given = settings.get(section) or {}
        for name, default in cls().model_dump(mode="json").items():
            value = given.get(name, default)
            if f"{section}.{name}" in said or value == default:
                continue
            if isinstance(value, dict):  # policies.admission: the keys moved
                value = "{" + ", ".join(f"{k}: {v}" for k, v in value.items() if v != default.get(k)) + "}"
            why = NO_FLAG.get(f"{section}.{name}", f"vLLM runs with {default}" if default is not None else
                              "vLLM runs with its own")
            notes.append(f"{section}.{name}={value} has no vllm serve flag: {why}")
    return notes


def _slides_a_window(settings: dict) -> bool:
    """The resolved model slides a window (a chunk is no window): its window retention is simulated."""
    m = settings.get("model")
    return isinstance(m, dict) and bool(m.get("sliding_window")) and not m.get("attention_chunk_size")


def _keeps_every_window_block(settings: dict) -> bool:
    """A 0.19 scenario of a window-sliding model: 0.19 has no retention interval, it keeps every window block."""
    return _slides_a_window(settings) and (settings.get("engine") or {}).get("vllm_defaults") == "0.19.0"


def _reads_window_retention(settings: dict) -> bool:
    return _slides_a_window(settings) and not _keeps_every_window_block(settings)


def _as_simulated(key: str, value, settings: dict):
    """A setting's value as the scenario's release simulates it: a 0.19 scenario keeps every window block (None),
    whatever its retention field says, so a 0.33 line says None."""
    if key == "engine.prefix_cache_retention_interval" and _keeps_every_window_block(settings):
        return None
    return value


# a setting an older release has no flag for: what that release does (the value that needs no note), why, and
# whether the scenario reads it
ABSENT_MEANS = {"engine.prefix_cache_retention_interval": (None, "it keeps every sliding-window block cached",
                                                           _reads_window_retention)}


# why a servesim setting has no vllm serve flag, where "vLLM runs with its default" does not say it
NO_FLAG = {"engine.reserved_memory_gib": "it stands for the memory vLLM profiles at start, which the real server "
                                         "measures (its KV pool may differ)",
           "engine.usage_context": "vllm serve is vLLM's OpenAI server (openai_server's default budgets)",
           "engine.swap_space": "vLLM V1 does not swap KV blocks to the host",
           "policies.preemption_mode": "vLLM V1 preempts by recompute",
           "policies.preemption_victim": "vLLM preempts the last admitted (fcfs) or the lowest priority (priority)",
           "policies.admission": "servesim's admission beyond vLLM's; vLLM admits on the prompt's blocks"}


def _edited_fields(arch, name: str, engine: dict | None = None) -> dict:
    """The fields a scenario's model (as resolved) sets apart from the built-in it is named for: an edited
    architecture (--set model.FIELD=...) that the built-in's checkpoint id would not deploy. {} for none, or a model
    that is not a built-in. Those the engine's own flags give (--quantization, --kv-cache-dtype), which resolving
    writes into the model, are the line's, not the checkpoint's (r152: a note sent the user to find one)."""
    from servesim.simulator.model_arch import builtin_model_names, load_model

    if not isinstance(arch, dict) or name not in builtin_model_names():
        return {}
    engine = engine or {}
    flagged = {"dtype", "kv_cache_dtype", "expert_dtype"} if engine.get("quantization") else set()
    flagged |= {"kv_cache_dtype"} if engine.get("kv_cache_dtype", "auto") != "auto" else set()
    base = load_model(name).model_dump(mode="json")
    return {k: v for k, v in arch.items() if k in base and k not in flagged | {"name"} and v != base[k]}


def serve_command(settings: dict, version: str | None = None) -> tuple[str, list[str]]:
    """A resolved scenario (as_dict) as the `vllm serve` line that deploys it, and notes on what the line cannot
    say (the GPU, servesim's own policies). version: the release to speak; None: the scenario's (vllm_defaults)."""
    import shlex

    from servesim.simulator.config import EngineSettings

    engine_defaults = EngineSettings().model_dump(mode="json")
    simulated = (settings.get("engine") or {}).get("vllm_defaults") or VLLM_VERSION  # the release it ran as
    version = version or simulated

    model = settings["model"]["name"] if isinstance(settings.get("model"), dict) else settings.get("model")
    hf = {v: k for k, v in reversed(list(HF_IDS.items())) if k not in HF_ID_CHANGES}  # a built-in's own HF id
    words = ["vllm", "serve", hf.get(model, str(model))]
    notes = [f"the GPU is not a vLLM flag: run it on {settings['hardware']['gpu']}"]
    if version != simulated:
        notes.append(f"the scenario ran as vLLM {simulated} (engine.vllm_defaults: its defaults, budgets and "
                     f"scheduler); vLLM {version} fills what this line leaves out with its own")
    if model not in hf and "/" not in str(model):
        notes.append(f"{model} is servesim's name, not an HF id: give vLLM the model's HF id or its path")
    elif (edited := _edited_fields(settings.get("model"), model, settings.get("engine") or {})) and (variant := next(
            (i for i, changes in HF_ID_CHANGES.items() if HF_IDS.get(i) == model and changes == edited), None)):
        words[2] = variant  # a checkpoint servesim reads as its built-in with these fields (262,144 positions)
    elif edited:
        notes.append(f"the scenario edits {model} ({', '.join(f'{k} {v}' for k, v in edited.items())}): "
                     f"{words[2]} is the unedited checkpoint; give vLLM the id or path of one with these fields")
    rows = _parser("serve", version)[1]
    derived = ((settings.get("resolved") or {}).get("derived") or {})
    for dest, key in SERVE_SETTINGS.items():
        section, name = key.split(".")
        value = _as_simulated(key, (settings.get(section) or {}).get(name), settings)
        if key == "engine.async_scheduling" and key in derived:  # left to vLLM, which turns it off where it must
            continue
        if key == "engine.max_cudagraph_capture_size" and key in derived and version == simulated:  # derived as vLLM
            continue  # derives it; given, 0.33 would drop the graph of max_num_seqs' own size it adds when unset
        row = rows.get(dest)
        if value is None and dest in NONE_MEANS and row is not None:
            words += [row["flag"], "None"]
            continue
        if row is None:  # a setting this release has no flag for
            if key in ABSENT_MEANS:  # what the release does without it, where that is not servesim's default
                absent, why, read = ABSENT_MEANS[key]
                if value != absent and read(settings):
                    notes.append(f"{key}={value} has no flag in vLLM {version}: {why}")
            elif section == "engine" and value != engine_defaults.get(name):  # a limit of 0 too: it refuses all
                notes.append(f"{key}={value} has no flag in vLLM {version}")
            continue
        if value is None or value == row.get("default"):
            continue
        if row.get("choices") and value not in row["choices"]:
            notes.append(f"{key}={value} is servesim's own (vLLM's {row['flag']} takes {', '.join(row['choices'])})")
            continue
        if row["type"] == "switch":
            words.append(row["flag"] if value else negatives(row)[0]) if value or negatives(row) else None
            continue
        words += [row["flag"], *map(str, value if isinstance(value, list) else [value])]  # a list: nargs +
    if (settings.get("engine") or {}).get("all2all_backend") and "all2all_backend" in rows:  # as given
        words += ["--all2all-backend", settings["engine"]["all2all_backend"]]
    if redundant := (settings.get("engine") or {}).get("num_redundant_experts"):  # EPLB's copies, as read back
        words += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": redundant})]
    notes += [n for n in (unstartable(settings), checkpoint_note(settings)) if n] + _without_a_flag(settings)
    engine = settings.get("engine") or {}
    threshold, length = engine.get("long_prefill_token_threshold"), engine.get("max_model_len")
    if version != "0.19.0" and isinstance(threshold, int) and isinstance(length, int) and threshold > length:
        notes.append(f"vLLM {version} refuses --long-prefill-token-threshold {threshold} above --max-model-len "
                     f"{length} (0.19 takes it): lower it")
    cluster = settings.get("cluster") or {}
    dp, reached = engine.get("data_parallel_size") or 1, cluster.get("dp_ranks_reached")
    if reached is not None and reached < dp:  # hybrid balancing (of one rank: vLLM switches to external)
        words += ["--data-parallel-size-local", str(reached), "--data-parallel-hybrid-lb"]
        notes.append(f"this line serves {reached} of the {dp} DP ranks, the ones its API server reaches: start the "
                     f"others on their nodes with --data-parallel-start-rank (vLLM's hybrid balancing)")
    replicas, prefill = cluster.get("replicas", 1), cluster.get("prefill_replicas", 0)
    if prefill:  # vLLM's disaggregated serving: instances of each role joined by a KV connector, behind a proxy
        roles = f"each with {pd_kv_config(version)}" if version == "0.19.0" else \
            f"the prefill ones with {pd_kv_config(version, 'prefill')}, the decode ones with " \
            f"{pd_kv_config(version, 'decode')}"
        notes.append(f"prefill/decode disaggregation: run {prefill} prefill and {replicas} decode instance(s) of "
                     f"this line, {roles}, behind a proxy that sends each request to a prefill then a decode instance"
                     f"; servesim's KV link of {cluster.get('kv_link_gbps')} GB/s between them is the network's, which "
                     f"no flag sets")
    elif replicas > 1:
        notes.append(f"{replicas} instances of this line behind a load balancer (servesim's router: "
                     f"{cluster.get('router', 'round_robin')}): vLLM's line is one instance")
    sp = settings.get("speculative") or {}
    if sp.get("method", "none") != "none":
        notes.append(f"speculative decoding ({sp['method']}, {sp['num_speculative_tokens']} tokens): give vLLM "
                     f"--speculative-config with your draft method")
    return " ".join(shlex.quote(w) for w in words), notes
