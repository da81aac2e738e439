"""Synthetic workloads: open- or closed-loop arrivals, length distributions, shared
prefixes and per-request classes; and multi-turn chat sessions."""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import replace
from itertools import count
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, model_serializer, model_validator

from servesim.simulator.errors import ConfigError
from servesim.workloads.settings import MAX_CLIENTS, MAX_REQUESTS, MAX_SECONDS, MAX_TOKENS, Settings, Tokens, refuse

from servesim.workloads.arrivals import Arrival
from servesim.workloads.lengths import FloatDist, JointLengths, LengthDist, LogNormal, Uniform
from servesim.workloads.source import ClosedLoopSource, ConcurrencyLimit, RequestSource, SessionSource, StaticSource
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
    balanced: bool = Field(False, description="each prefix taken by exactly num_requests / count requests, in a "
                                              "shuffled order (vllm bench serve's prefix_repetition), rather than "
                                              "drawn request by request")
    shuffle: bool = Field(True, description="with balanced: False sends each prefix's requests together, prefix "
                                            "by prefix (vllm bench serve --disable-shuffle)")

    @model_validator(mode="after")
    def _shuffle_needs_balanced(self):
        if not self.shuffle and not self.balanced:
            refuse("shuffle", "false orders the requests of a balanced deal: give balanced: true")
        return self


class _Classes(Settings):
    priorities: list[int] | None = Field(default=None, min_length=1,
                                         description="drawn uniformly per request (or session); leave out for 0")
    slo_classes: dict[str, SLOClass] | None = Field(default=None, min_length=1)
    clip_to_max_model_len: bool = True

    @model_validator(mode="after")
    def _class_names(self):
        """A class name is text a report can print: an empty or unprintable one read as nothing in messages."""
        for name in self.slo_classes or {}:
            if not name.strip() or not name.isprintable() or len(name) > 100:
                refuse("slo_classes", f"a class name must be printable text of 1 to 100 characters, got {name!r:.60}")
        return self
    request_max_tokens: bool = Field(
        False, description="each request without its own max_tokens asks for its output length as max_tokens "
                           "(vllm bench serve does): the API server refuses (400) one whose prompt + max_tokens "
                           "exceeds max_model_len, or lowers its max_tokens to fit (max_tokens_past_context), as it "
                           "checks any max_tokens a request sends")
    max_tokens_past_context: Literal["refuse", "lower"] | None = Field(
        None, description="what the API server does with prompt + max_tokens past max_model_len: vLLM 0.19 "
                          "refuses it (400); 0.33 lowers max_tokens to max_model_len - prompt and refuses only a "
                          "prompt of max_model_len or more, or a max_tokens above max_model_len; None: as "
                          "engine.vllm_defaults' release does")
    min_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="each request asks for at least this many output tokens (vLLM's "
                                               "min_tokens, as --extra-body sends it): the API server refuses (400) "
                                               "one whose max_tokens, as sent or lowered to fit, is below it, as "
                                               "vLLM's SamplingParams does; an output the workload ends sooner "
                                               "runs on to it, as vLLM holds the model's stop back")
    max_concurrency: int | None = Field(
        None, ge=1, le=MAX_CLIENTS, description="requests in flight at most, as `vllm bench serve --max-concurrency`: "
                                                "one due while this many are in flight is sent when one ends")

    def source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
        """The requests this workload sends, through its concurrency limit if it has one."""
        src = self._source(seed, max_model_len)
        return ConcurrencyLimit(src, self.max_concurrency) if self.max_concurrency is not None else src

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

    def shared(self, key: int, tokens: int, unit: int = CONTENT_BLOCK) -> list[int]:
        """Ids of the full blocks (of `unit` tokens) of shared prefix `key` (the same list every time)."""
        if key not in self.prefixes:
            self.prefixes[key] = self.fresh(tokens // unit)
        return self.prefixes[key]


def prefix_unit(tokens: int) -> int:
    """Tokens per content id for a shared prefix of `tokens`: ids end where the prefix ends (1,000 tokens: ids
    of 8), so that whether the token after a cached block is shared is known (vLLM 0.33's lookahead hashes
    ask it); at least 4 tokens an id, past which the prefix's last few tokens are left private."""
    unit = math.gcd(CONTENT_BLOCK, tokens)
    return unit if unit >= 4 else CONTENT_BLOCK


class SyntheticWorkload(_Classes):
    type: Literal["synthetic"] = "synthetic"
    num_requests: int | None = Field(1000, ge=1, le=MAX_REQUESTS, description="1000 unless duration_s is given "
                                                                             "alone")
    duration_s: PositiveFloat | None = Field(default=None, le=MAX_SECONDS, description="stop issuing requests at "
                                                                                     "this time")

    @model_validator(mode="before")
    @classmethod
    def _duration_alone(cls, data):
        """A duration given without a count runs for the duration: the default count cut a 1,000-s run at 1,000
        requests (102 s at 10 req/s) without a word (r137). A burst, a ramp over the requests and a balanced
        shared prefix are counts: they keep the default."""
        if isinstance(data, dict) and data.get("duration_s") is not None and "num_requests" not in data:
            arrival, prefix = data.get("arrival"), data.get("shared_prefix")
            read = lambda x, key: x.get(key) if isinstance(x, dict) else getattr(x, key, None)  # noqa: E731
            if read(arrival, "process") not in ("burst", "closed_loop") and not read(arrival, "fit_span") \
                    and read(arrival, "ramp_up_strategy") is None and not read(prefix, "balanced"):  # r138: a
                # closed loop has no expected count to bound it, fit_span rescales over the requests
                data = {**data, "num_requests": None}
        return data
    arrival: Arrival = Arrival(process="poisson", rate=10.0)
    prompt_tokens: LengthDist = LogNormal(dist="lognormal", median=600, sigma=0.9, max=6000)
    output_tokens: LengthDist = LogNormal(dist="lognormal", median=200, sigma=0.8, max=2000)
    lengths: JointLengths | None = Field(default=None, description="draw (prompt, output) pairs from a file")
    shared_prefix: SharedPrefix | None = None

    @model_serializer(mode="wrap")
    def _without_unread_lengths(self, handler):
        """Written with `lengths`, the separate distributions are left out: read back, they would be given beside
        it, which is refused (r119: a run's config.yaml could not be run again)."""
        out = handler(self)
        if self.lengths is not None and isinstance(out, dict):
            for key in ("prompt_tokens", "output_tokens"):
                out.pop(key, None)
        return out

    @model_validator(mode="after")
    def _limits(self):
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        if self.arrival.process == "burst" and self.num_requests is None:
            raise ValueError("burst arrivals need num_requests")
        if self.arrival.ramp_up_strategy is not None and self.num_requests is None:
            raise ValueError("ramp_up_strategy needs num_requests (the ramp is over the requests)")
        if self.arrival.fit_span and self.num_requests is None:  # r147: spanned whatever a chunk of draws held
            refuse("arrival.fit_span", "needs num_requests (the requests span num_requests / rate)")
        if self.lengths is not None and {"prompt_tokens", "output_tokens"} & self.model_fields_set:
            raise ValueError("give either lengths (joint) or prompt_tokens/output_tokens")
        sp = self.shared_prefix
        if sp is not None and sp.balanced and (not self.arrival.open_loop or self.duration_s is not None
                                               or self.num_requests is None or self.num_requests % sp.count):
            refuse("shared_prefix.balanced", f"deals num_requests out evenly: give num_requests, a multiple of "
                                             f"count ({sp.count}), an open-loop arrival and no duration_s")
        if self.max_concurrency is not None and not self.arrival.open_loop:
            refuse("max_concurrency", "limits an open-loop stream; a closed loop's arrival.concurrency is its limit")
        return self

    def _draws(self, n: int, rng: np.random.Generator) -> tuple:
        """n requests' random columns, in the order they are drawn: prompt and output lengths, which shared prefix
        (None without), priorities and classes. Without num_requests n is what the duration holds at the rate: each
        column then comes from a stream of its own, so the k-th request's draws do not depend on n (r138: the
        lengths changed with the rate)."""
        streams = rng.spawn(4) if self.num_requests is None else [rng] * 4
        if self.num_requests is not None and self.duration_s is not None and self.arrival.open_loop \
                and n < self.num_requests:  # the duration ended the count: every column drawn for the count, then
            # cut, so each request's draws do not depend on how many arrived in time (r155: outputs changed with
            # the rate)
            return tuple(c if c is None else c[:n] for c in self._columns(self.num_requests, *streams))
        return self._columns(n, *streams)

    def _columns(self, n: int, lengths_rng, output_rng, which_rng, class_rng) -> tuple:
        if self.lengths is not None:
            prompts, outputs = self.lengths.draw(n, lengths_rng)
        else:
            prompts, outputs = self.prompt_tokens.draw(n, lengths_rng), self.output_tokens.draw(n, output_rng)
        sp = self.shared_prefix
        if sp is None:
            which = None
        elif sp.balanced:  # n // count requests each, shuffled (n is num_requests, a multiple of count)
            which = np.repeat(np.arange(sp.count), n // sp.count)
            which = which_rng.permutation(which) if sp.shuffle else which
        else:
            which = which_rng.integers(0, sp.count, size=n)
        return (prompts, outputs, which, *self._draw_classes(n, class_rng))

    def _specs(self, n: int, rng: np.random.Generator, max_model_len: int | None, ids: ContentIds):
        prompts, outputs, which, prios, classes = self._draws(n, rng)
        prefix = self.shared_prefix
        unit = prefix_unit(prefix.tokens) if prefix else CONTENT_BLOCK
        for i in range(n):
            p, o = int(prompts[i]), int(outputs[i])
            pids: tuple = ()
            if prefix:
                shared = ids.shared(int(which[i]), prefix.tokens, unit)
                p += prefix.tokens
                pids = tuple(shared) + tuple(ids.fresh(-(-p // unit) - len(shared)))
            if max_model_len and self.clip_to_max_model_len:
                p = min(p, max_model_len - 1)
                pids = pids[: -(-p // unit)]
            yield RequestSpec(i, 0.0, p, max(1, o), priority=prios[i], slo_class=classes[i], prefix_ids=pids,
                              prefix_block_tokens=unit if pids else 0)

    def _source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
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
        times = a.times(self.num_requests, self.duration_s, a.gap_stream(seed, self.num_requests, rng))
        if len(times) > 1 and not (np.diff(times) >= 0).all():  # not in arrival order: made up front and sorted
            specs = [replace(s, arrival_time=float(times[s.request_id]))
                     for s in self._specs(len(times), rng, max_model_len, ids)]
        else:  # in arrival order: each made when the run reaches it
            specs = DrawnSpecs(self, times, rng, max_model_len)
        prompts = (s.prompt_tokens for s in specs) if isinstance(specs, list) else specs.prompts
        cut = sum(p == max_model_len - 1 for p in prompts) if max_model_len and self.clip_to_max_model_len else 0
        return StaticSource(specs, warnings=clipped_warning(cut, len(specs), max_model_len) + self._count_ended(times))

    def _count_ended(self, times: np.ndarray) -> tuple[str, ...]:
        """A count beside a duration bounds the run: said where it ended the arrivals first (r138: `config` writes
        num_requests: 1000, so a duration added to its output ran 102 of its 1,000 s without a word)."""
        n, d = self.num_requests, self.duration_s
        if n is not None and d is not None and len(times) < n and self.arrival.ramp_up_strategy:  # (r151: unsaid)
            return (f"workload.arrival: its {self.arrival.ramp_up_strategy} ramp spans num_requests ({n:,}), and "
                    f"duration_s ({d:g} s) ended it after {len(times):,} of them: the rate never reached "
                    f"ramp_up_end_rps ({self.arrival.ramp_up_end_rps:g})",)
        if n is None or d is None or len(times) < n or self.arrival.process == "burst":
            return ()
        return (f"workload.num_requests: its {n:,} requests were all sent by {times[-1]:,.1f} s, before duration_s "
                f"({d:g} s): the count ends the arrivals (leave num_requests out to run for the duration)",)

    def generate(self, seed: int, max_model_len: int | None = None) -> list[RequestSpec]:
        """The whole open-loop request list (closed-loop workloads have none up front)."""
        return list(self._source(seed, max_model_len).initial())


class DrawnSpecs(Sequence):
    """A synthetic workload's requests, in arrival order, as the columns they were drawn in; each RequestSpec is made
    when asked for. A million specs made up front hold some 220 MB; these columns some 50. The same requests as
    `_specs` makes one after another: the same draws, and each request's content ids where that walk would give them
    (a shared prefix's at its first use, then the request's own), found by a running sum."""

    in_arrival_order = True  # the front end walks it as it is, without sorting (a copy of every request)

    def __init__(self, workload: SyntheticWorkload, times: np.ndarray, rng: np.random.Generator,
                 max_model_len: int | None):
        n = len(times)
        w = workload
        self.times = times
        prompts, outputs, which, self.priorities, self.classes = w._draws(n, rng)
        prefix = w.shared_prefix
        prompts = np.asarray(prompts, dtype=np.int64) + (prefix.tokens if prefix else 0)
        self.outputs = np.maximum(np.asarray(outputs, dtype=np.int64), 1)
        self.clip = bool(max_model_len) and w.clip_to_max_model_len
        self.prompts = np.minimum(prompts, max_model_len - 1) if self.clip else prompts
        self.which = which
        self.unit = prefix_unit(prefix.tokens) if prefix else CONTENT_BLOCK
        if prefix:  # ids used before each request: a shared prefix's full blocks at its first use, then its own
            self.shared_blocks = prefix.tokens // self.unit
            first = np.zeros(n, dtype=bool)
            first[np.unique(which, return_index=True)[1]] = True
            own = -(-prompts // self.unit) - self.shared_blocks
            used = own + first * self.shared_blocks
            self.id_start = np.cumsum(used) - used
            self.own, self.first = own, first
            self.prefix_start = {}  # key -> the first id of its shared blocks
            for i in np.flatnonzero(first):
                self.prefix_start[int(which[i])] = int(self.id_start[i])

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        p = int(self.prompts[i])
        pids: tuple = ()
        if self.which is not None:
            shared = self.shared_blocks
            key = int(self.which[i])
            start = int(self.id_start[i]) + (shared if self.first[i] else 0)
            own = int(self.own[i])
            s0 = self.prefix_start[key]
            pids = tuple(range(s0, s0 + shared)) + tuple(range(start, start + own))
            if self.clip:
                pids = pids[: -(-p // self.unit)]
        return RequestSpec(i, float(self.times[i]), p, int(self.outputs[i]), priority=self.priorities[i],
                           slo_class=self.classes[i], prefix_ids=pids, prefix_block_tokens=self.unit if pids else 0)


class SessionWorkload(_Classes):
    """Multi-turn chat (background essay 000): each turn resends the whole history plus a
    new message; the history grows turn by turn; the next turn comes a think time after
    the previous answer. Sessions start by `arrival`; all may share a system prompt."""

    type: Literal["sessions"]
    # a turn is the history resent: none is cut (r148: `true`, inherited, was printed and read by nothing)
    clip_to_max_model_len: bool = Field(False, description="sessions cut no turn: one past max_model_len is "
                                                           "refused (400) and ends its session")
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
        if self.max_concurrency is not None:
            refuse("max_concurrency", "not modelled for sessions (a turn waits on its think time, not on a slot)")
        return self

    def _source(self, seed: int, max_model_len: int | None = None) -> RequestSource:
        rng = np.random.default_rng(seed)
        ids = ContentIds()
        # r137: vllm_client_draws was read by synthetic workloads only
        starts = self.arrival.times(self.num_sessions, None, self.arrival.gap_stream(seed, self.num_sessions, rng))
        turns = self.turns.draw(self.num_sessions, rng)
        if int(turns.sum()) > MAX_REQUESTS:
            raise ConfigError("workload.turns", f"{int(turns.sum()):,} turns in all: at most {MAX_REQUESTS:,} requests "
                                                "in one run")
        # think times and classes from streams of their own: drawn among the lengths, a think-time edit (r139) or
        # classes added (r155: a single class of weight 1 changed every conversation) redrew the conversations
        think_rng, class_rng = rng.spawn(2)
        prios, classes = self._draw_classes(self.num_sessions, class_rng)
        system = ids.shared(0, self.system_prompt_tokens) if self.system_prompt_tokens else []
        first_turns, follow = [], {}
        rid = count()
        for s in range(self.num_sessions):
            n_turns = int(turns[s])
            msgs = np.concatenate([self.first_message_tokens.draw(1, rng), self.message_tokens.draw(n_turns - 1, rng)])
            outs = self.output_tokens.draw(n_turns, rng)
            if self.min_tokens and not self.request_max_tokens:  # vLLM holds the stop back: the answer the next
                outs = np.maximum(outs, self.min_tokens)  # turn resends is that long (r151: the drawn length was)
            thinks = self.think_time_s.draw(n_turns, think_rng)
            history, full_ids = self.system_prompt_tokens, list(system)  # ids of the history's full blocks
            tail: list[int] = []  # the id of the history's partial last block, which the next turn fills
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
                # next turn (which resends it) shares its blocks. A partial last block's id is kept too: the next
                # turn's block there begins with the same tokens (the answer's last ones), so an engine block
                # ending inside it, or a lookahead at its first token, is shared (no engine block past this
                # turn's tokens was ever full, so nothing longer can match)
                grown = after // CONTENT_BLOCK - len(full_ids)
                if grown:  # the block the last turn ended in is full now: its id, then new ones
                    full_ids += tail + ids.fresh(grown - len(tail))
                    tail = []
                if after % CONTENT_BLOCK and not tail:
                    tail = ids.fresh(1)
                pids = tuple(full_ids) + tuple(tail)
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
