"""Synthetic workloads: open- or closed-loop arrivals, length distributions, shared
prefixes and per-request classes; and multi-turn chat sessions."""

from __future__ import annotations

from dataclasses import replace
from itertools import count
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, model_validator

from servesim.simulator.errors import ConfigError
from servesim.workloads.settings import MAX_REQUESTS, MAX_TOKENS, Settings, Tokens, refuse

from servesim.workloads.arrivals import Arrival
from servesim.workloads.lengths import FloatDist, JointLengths, LengthDist, LogNormal, Uniform
from servesim.workloads.source import ClosedLoopSource, RequestSource, SessionSource, StaticSource
from servesim.workloads.spec import RequestSpec

CONTENT_BLOCK = 16  # tokens per prefix id in generated workloads (any size works; the KV manager maps it)


def clipped_warning(cut: int, n: int, max_model_len: int | None) -> tuple[str, ...]:
    """What workload.clip_to_max_model_len did, said: a prompt cut short is another request than the one asked for."""
    return (f"{cut:,} of {n:,} prompts are at max_model_len - 1 = {max_model_len - 1:,} tokens (longer ones are cut "
            f"to it: workload.clip_to_max_model_len)",) if cut else ()


class SLOClass(Settings):
    """A class of requests with latency targets (ms; a request is good if it meets every one given)."""

    weight: float = Field(1.0, gt=0, le=1e6, description="relative share of requests in this class")
    priority: int | None = None
    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2el_ms: PositiveFloat | None = None


class SharedPrefix(Settings):
    """System prompts or few-shot preambles shared by many requests, drawn uniformly from `count`."""

    tokens: Tokens
    count: int = Field(1, ge=1, le=MAX_REQUESTS)


class _Classes(Settings):
    priorities: list[int] | None = Field(default=None, description="drawn uniformly per request (or session)")
    slo_classes: dict[str, SLOClass] | None = None
    clip_to_max_model_len: bool = True

    @model_validator(mode="after")
    def _priorities_used(self):
        if self.priorities and self.slo_classes and all(c.priority is not None for c in self.slo_classes.values()):
            refuse("priorities", "never used: every SLO class sets its own priority (give one or the other, or "
                                 "leave a class's priority out to draw it from these)")
        return self

    def _draw_classes(self, n: int, rng: np.random.Generator) -> tuple[list[int], list[str | None]]:
        """Each request's (priority, class): a class's own priority wins over the drawn one."""
        prios, picked = self._draw(n, rng)
        return [self.slo_classes[c].priority if c is not None and self.slo_classes[c].priority is not None else p
                for c, p in zip(picked, prios)], picked

    def _draw(self, n: int, rng: np.random.Generator) -> tuple[list[int], list[str | None]]:
        """n priorities from `priorities` (0 without) and n classes by weight (None without), independently."""
        prios = [int(p) for p in rng.choice(self.priorities, size=n)] if self.priorities else [0] * n
        if not self.slo_classes:
            return prios, [None] * n
        names = list(self.slo_classes)
        w = np.array([self.slo_classes[c].weight for c in names])
        return prios, [names[i] for i in rng.choice(len(names), size=n, p=w / w.sum())]


class ContentIds:
    """Block-level content ids: equal id = equal tokens and equal prefix (Mooncake's hash_ids)."""

    def __init__(self):
        self._ids = count()
        self.prefixes: dict[int, list[int]] = {}

    def fresh(self, blocks: int) -> list[int]:
        return [next(self._ids) for _ in range(blocks)]

    def skip(self, blocks: int) -> None:
        """Use up ids without holding them (turns that are never sent keep later ids where they were)."""
        self._ids = count(next(self._ids) + blocks)

    def shared(self, key: int, tokens: int) -> list[int]:
        """Ids of the full blocks of shared prefix `key` (the same list every time)."""
        if key not in self.prefixes:
            self.prefixes[key] = self.fresh(tokens // CONTENT_BLOCK)
        return self.prefixes[key]


class SyntheticWorkload(_Classes):
    type: Literal["synthetic"] = "synthetic"
    num_requests: int | None = Field(1000, ge=1, le=MAX_REQUESTS)
    duration_s: PositiveFloat | None = Field(default=None, description="stop issuing requests at this time")
    arrival: Arrival = Arrival(process="poisson", rate=10.0)
    prompt_tokens: LengthDist = LogNormal(dist="lognormal", median=600, sigma=0.9, max=6000)
    output_tokens: LengthDist = LogNormal(dist="lognormal", median=200, sigma=0.8, max=2000)
    lengths: JointLengths | None = Field(default=None, description="draw (prompt, output) pairs from a file")
    shared_prefix: SharedPrefix | None = None

    @model_validator(mode="after")
    def _limits(self):
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        if self.arrival.process == "burst" and self.num_requests is None:
            raise ValueError("burst arrivals need num_requests")
        if self.arrival.ramp_up_strategy is not None and self.num_requests is None:
            raise ValueError("ramp_up_strategy needs num_requests (the ramp is over the requests)")
        if self.lengths is not None and {"prompt_tokens", "output_tokens"} & self.model_fields_set:
            raise ValueError("give either lengths (joint) or prompt_tokens/output_tokens")
        return self

    def _specs(self, n: int, rng: np.random.Generator, max_model_len: int | None, ids: ContentIds):
        if self.lengths is not None:
            prompts, outputs = self.lengths.draw(n, rng)
        else:
            prompts, outputs = self.prompt_tokens.draw(n, rng), self.output_tokens.draw(n, rng)
        prefix = self.shared_prefix
        which = rng.integers(0, prefix.count, size=n) if prefix else None
        prios, classes = self._draw_classes(n, rng)
        for i in range(n):
            p, o = int(prompts[i]), int(outputs[i])
            pids: tuple = ()
            if prefix:
                shared = ids.shared(int(which[i]), prefix.tokens)
                p += prefix.tokens
                pids = tuple(shared) + tuple(ids.fresh(-(-p // CONTENT_BLOCK) - len(shared)))
            if max_model_len and self.clip_to_max_model_len:
                p = min(p, max_model_len - 1)
                pids = pids[: -(-p // CONTENT_BLOCK)]
            yield RequestSpec(i, 0.0, p, max(1, o), priority=prios[i], slo_class=classes[i], prefix_ids=pids,
                              prefix_block_tokens=CONTENT_BLOCK if pids else 0)

    def source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
        rng = np.random.default_rng(seed)
        ids = ContentIds()
        a = self.arrival
        if not a.open_loop:
            think = FloatDist(dist="fixed", value=a.think_time_s)
            think_rng = np.random.default_rng(seed + 1)

            def templates():
                while True:
                    yield from self._specs(1024, rng, max_model_len, ids)

            return ClosedLoopSource(a.concurrency, lambda: float(think.draw(1, think_rng)[0]), templates(),
                                    self.num_requests, self.duration_s, a.ramp_up_s)
        times = a.times(self.num_requests, self.duration_s, rng)
        specs = [replace(s, arrival_time=float(times[s.request_id]))
                 for s in self._specs(len(times), rng, max_model_len, ids)]
        cut = sum(s.prompt_tokens == max_model_len - 1 for s in specs) if max_model_len and self.clip_to_max_model_len \
            else 0
        return StaticSource(specs, warnings=clipped_warning(cut, len(specs), max_model_len))

    def generate(self, seed: int, max_model_len: int | None = None) -> list[RequestSpec]:
        """The whole open-loop request list (closed-loop workloads have none up front)."""
        return self.source(seed, max_model_len).initial()


class SessionWorkload(_Classes):
    """Multi-turn chat (background essay 000): each turn resends the whole history plus a
    new message; the history grows turn by turn; the next turn comes a think time after
    the previous answer. Sessions start by `arrival`; all may share a system prompt."""

    type: Literal["sessions"]
    num_sessions: int = Field(100, ge=1, le=MAX_REQUESTS)
    arrival: Arrival = Arrival(process="poisson", rate=1.0)
    turns: LengthDist = Uniform(dist="uniform", low=1, high=8)
    system_prompt_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    first_message_tokens: LengthDist = LogNormal(dist="lognormal", median=200, sigma=0.8, max=4000)
    message_tokens: LengthDist = LogNormal(dist="lognormal", median=60, sigma=0.8, max=2000)
    output_tokens: LengthDist = LogNormal(dist="lognormal", median=250, sigma=0.6, max=2000)
    think_time_s: FloatDist = FloatDist(dist="exponential", mean=20.0)

    @model_validator(mode="after")
    def _open(self):
        if not self.arrival.open_loop:
            raise ValueError("sessions start open-loop; their turns are already closed-loop")
        return self

    def source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
        rng = np.random.default_rng(seed)
        ids = ContentIds()
        starts = self.arrival.times(self.num_sessions, None, rng)
        turns = self.turns.draw(self.num_sessions, rng)
        if int(turns.sum()) > MAX_REQUESTS:
            raise ConfigError("workload.turns", f"{int(turns.sum()):,} turns in all: at most {MAX_REQUESTS:,} requests "
                                                "in one run")
        prios, classes = self._draw_classes(self.num_sessions, rng)
        system = ids.shared(0, self.system_prompt_tokens) if self.system_prompt_tokens else []
        first_turns, follow = [], {}
        rid = count()
        for s in range(self.num_sessions):
            n_turns = int(turns[s])
            msgs = np.concatenate([self.first_message_tokens.draw(1, rng), self.message_tokens.draw(n_turns - 1, rng)])
            outs = self.output_tokens.draw(n_turns, rng)
            thinks = self.think_time_s.draw(n_turns, rng)
            history, full_ids = self.system_prompt_tokens, list(system)  # ids of the history's full blocks
            prev, unsent = None, False
            for k in range(n_turns):
                prompt = history + int(msgs[k])
                after = prompt + int(outs[k])  # the history the next turn resends
                if unsent:  # never built (its history would grow without bound); its ids are used up all the same
                    next(rid)
                    ids.skip(after // CONTENT_BLOCK - len(full_ids) + (1 if after % CONTENT_BLOCK else 0))
                    full_ids = range(after // CONTENT_BLOCK)  # only its length counts from here on
                    history = after
                    continue
                # full blocks keep their ids forever; the ids run on over this turn's answer, so the
                # next turn (which resends it) shares its blocks; a partial last block gets a new id
                full_ids += ids.fresh(after // CONTENT_BLOCK - len(full_ids))
                pids = tuple(full_ids) + (tuple(ids.fresh(1)) if after % CONTENT_BLOCK else ())
                spec = RequestSpec(next(rid), float(starts[s]) if k == 0 else 0.0, prompt, int(outs[k]),
                                   priority=prios[s], slo_class=classes[s], session_id=s, turn=k,
                                   prefix_ids=pids, prefix_block_tokens=CONTENT_BLOCK)
                if k == 0:
                    first_turns.append(spec)
                else:
                    follow[prev.request_id] = (spec, float(thinks[k - 1]))
                prev = spec
                history = after
                # a prompt the engine refuses as too long ends its session: the later turns are never sent
                unsent = bool(max_model_len) and prompt >= max_model_len
        total = int(turns.sum())
        return SessionSource(first_turns, follow, f"{self.num_sessions:,} chat sessions, {total:,} turns",
                             turns.tolist())
