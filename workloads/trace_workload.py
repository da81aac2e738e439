"""Trace replay as a scenario workload: a file the trace readers take, with replay options."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from servesim.simulator.errors import ConfigError
from servesim.workloads.settings import ReadsTraceFormat
from servesim.workloads.source import RequestSource, StaticSource
from servesim.workloads.synthetic import _Classes, clipped_warning


class TraceWorkload(_Classes, ReadsTraceFormat):
    type: Literal["trace"]
    path: str = Field(min_length=1)
    format: str | None = Field(default=None, description="inferred from the file when not given")
    time_scale: PositiveFloat = Field(1.0, description="multiplies the recorded rate: 2 replays twice as fast "
                                                       "(every gap halved)")
    hash_block_tokens: PositiveInt | None = Field(
        None, description="tokens per hash_ids block (Mooncake 512, vLLM timed traces their chunk size, 16 by "
                          "default); None: the size every row's id count fits, the format's own tried first")
    use_hash_ids: bool = Field(True, description="false: ignore hash_ids (no prefix sharing)")
    start_s: NonNegativeFloat = 0.0
    duration_s: PositiveFloat | None = None
    sample: float | None = Field(default=None, gt=0, le=1)
    limit: PositiveInt | None = None
    clip_to_max_model_len: bool = False  # a trace is replayed as recorded; over-long prompts are rejected

    def check_file(self, seed: int = 0, max_model_len: int | None = None) -> tuple[str, ...]:
        """The file read with the replay's options, as `run` reads it (what `config` checks without replaying it:
        r151, a window no row reaches, a sample keeping none, a format the file is not, were printed as fine); what
        the reading says."""
        return tuple(self._source(seed, max_model_len).warnings)

    def _source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
        from dataclasses import replace

        from servesim.workloads.traces import read_trace_with_info

        try:
            specs, info = read_trace_with_info(self.path, self.format, time_scale=self.time_scale, start_s=self.start_s,
                               duration_s=self.duration_s, sample=self.sample, limit=self.limit, seed=seed,
                               hash_block_tokens=self.hash_block_tokens, use_hash_ids=self.use_hash_ids)
        except ConfigError as exc:  # a replay option's error is this workload's setting
            if exc.field in type(self).model_fields:
                raise ConfigError(f"workload.{exc.field}", exc.message) from None
            raise
        # rows the reader skipped (failed requests) said wherever the trace is read: run, config, write (r159)
        said = ("note", "unordered", "skipped_rows", "unread")
        warnings = self._inert_options(info) + tuple(info[k] for k in said if k in info)
        if self.priorities or self.slo_classes:
            specs, warnings = self._with_classes(specs, info["recorded_priority"], seed, warnings)
        if not self.slo_classes and (recorded := sorted({s.slo_class for s in specs if s.slo_class is not None})):
            warnings += (f"{self.path} records SLO class(es) {', '.join(recorded)}, but workload.slo_classes gives "
                        f"them no targets: goodput is not computed",)
        if self.clip_to_max_model_len and max_model_len:
            most = max_model_len - 1
            warnings += clipped_warning(sum(s.prompt_tokens >= most for s in specs), len(specs), max_model_len)
            specs = [s if s.prompt_tokens <= most else replace(  # the ids of the blocks cut off go with them
                s, prompt_tokens=most, prefix_ids=s.prefix_ids[: -(-most // s.prefix_block_tokens)]
                if s.prefix_block_tokens else s.prefix_ids) for s in specs]
        if self.max_concurrency is not None and self.max_concurrency >= len(specs):  # (r152: said for synthetic only)
            warnings += (f"workload.max_concurrency has no effect: at or above the {len(specs):,} requests "
                         f"replayed: no request waits for another",)
        source = StaticSource(specs, f"{len(specs):,} requests replayed from {self.path}", warnings)
        source.skipped = info["skipped"]  # what describe of a scenario counts, as describe of the file does
        return source

    def _inert_options(self, info) -> tuple[str, ...]:
        """The content-id options said to do nothing when the file names no prompt blocks (only Mooncake's and
        vLLM's timed traces carry hash_ids; a servesim file's prefix_ids carry their own block size)."""
        from servesim.workloads.traces import HASH_ID_FORMATS

        out = []
        if self.hash_block_tokens is not None and not self.use_hash_ids:
            out.append(f"workload.hash_block_tokens has no effect: workload.use_hash_ids is false (the hash_ids "
                       f"are dropped)")
        elif self.hash_block_tokens is not None and not (info["format"] in HASH_ID_FORMATS and info["content_ids"]):
            out.append(f"workload.hash_block_tokens has no effect: {self.path} ({info['format']}) has no hash_ids")
        if not self.use_hash_ids and not info["content_ids"]:
            out.append(f"workload.use_hash_ids: false has no effect: {self.path} ({info['format']}) names no "
                       f"prompt blocks, so no prefix is shared anyway")
        return tuple(out)

    def _with_classes(self, specs: list, recorded_priority: list[bool], seed: int, warnings: tuple) -> tuple:
        """Draw classes and priorities for the rows, except what a row records (a written workload replays
        with its own): a recorded SLO class is kept, and so is a recorded priority, unless the row's class
        sets one (a class's priority wins). Says which drawing settings that leaves unused."""
        from dataclasses import replace

        recorded = {s.slo_class for s in specs if s.slo_class is not None}
        if recorded and self.slo_classes and (unknown := sorted(recorded - set(self.slo_classes))):
            raise ConfigError("workload.slo_classes", f"{self.path} records class(es) {', '.join(unknown)} that have "
                                                      f"no targets here")
        drawn_prios, drawn_classes = self._draw(len(specs), np.random.default_rng(seed))  # merged below, per row
        classes = self.slo_classes or {}
        out, drew_class, drew_priority = [], False, False
        for s, own_priority, p, c in zip(specs, recorded_priority, drawn_prios, drawn_classes):
            cls = s.slo_class
            if cls is None:
                cls, drew_class = c, drew_class or c is not None
            set_by_class = classes[cls].priority if cls in classes else None
            if set_by_class is not None:
                priority = set_by_class
            elif own_priority:
                priority = s.priority
            else:
                priority, drew_priority = p, True
            out.append(replace(s, priority=priority, slo_class=cls))
        unused = [] if drew_class else [f"workload.slo_classes.{c}.weight" for c, v in classes.items() if v.weight != 1.0]
        unused += [] if drew_priority or not self.priorities else ["workload.priorities"]
        return out, warnings + tuple(f"{u} has no effect: every row of {self.path} records its SLO class or its "
                                     f"priority, so none is drawn" for u in unused)
