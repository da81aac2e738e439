"""The one record that crosses from workloads into the simulator."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request as the client sends it.

    output_tokens is how many tokens the model will actually generate (where EOS
    falls); max_tokens is the client's limit, all a scheduler may know in advance.
    An output reaching max_tokens, or the context's last slot, is taken as cut there
    (finish reason "length"), as a recorded row of a capped answer reads; vLLM would
    say "stop" for an EOS falling exactly there, which a row cannot tell apart (r154).

    Prefix identity: prefix_ids[j] names the content of prompt tokens
    [j * prefix_block_tokens, (j + 1) * prefix_block_tokens), the last block possibly
    partial, and, as in Mooncake's hash_ids, everything before it: two requests with
    equal ids up to j share their first j + 1 blocks. The KV manager maps these onto
    its own block size. Empty: nothing is known about the content (no sharing). Ids may run on
    past the prompt over the output (a chat turn's answer, which the next turn resends): then
    the output's blocks can be shared too.
    """

    request_id: int
    arrival_time: float  # seconds from the start of the run
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    priority: int = 0  # lower runs first, as in vLLM
    slo_class: str | None = None
    session_id: int | None = None
    turn: int = 0
    prefix_ids: tuple[int, ...] = ()
    prefix_block_tokens: int = 0

    @property
    def output_limit(self) -> int:
        return self.max_tokens if self.max_tokens is not None else self.output_tokens


def prefix_chain_problem(ids, chains: dict, block_tokens: int = 0) -> str | None:
    """An id names its block and every block before it (as vLLM's block hashes chain on the parent): one seen at
    another place, after another id, or naming blocks of another size in this run's earlier requests would share
    KV computed for other tokens. chains: each id's (place, previous id, block size) so far, filled as requests
    are read."""
    parent = None
    for place, i in enumerate(ids):
        first = chains.setdefault(i, (place, parent, block_tokens))
        if first != (place, parent, block_tokens):
            def said(at, before, size):
                return (f"block {at}{f' of {size} tokens' if size else ''} after "
                        f"{'id ' + str(before) if before is not None else 'none'}")
            return (f"id {i} is {said(place, parent, block_tokens)}, but was given before as {said(*first)}: an id "
                    f"names its block and every block before it")
        parent = i
    return None


def checked_specs(specs, where: str = "requests", chains: dict | None = None,
                  classes: Mapping | None = None) -> list[RequestSpec]:
    """Requests built by hand (the Python API's `requests=`): every field in range, ids unique, as the trace readers
    ensure for a file; else one ConfigError naming the request and field (a nan arrival ran with nan latencies, a
    negative one crashed the clock, a 0-token prompt "finished"). Under a scenario's `classes` (workload.slo_classes)
    each request names one of them, as a trace replayed under them does (one outside them was counted as good)."""
    import math
    from dataclasses import replace

    from servesim.simulator.errors import ConfigError
    from servesim.workloads.settings import MAX_INT, MAX_SECONDS, MAX_TOKENS

    def integer(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) or type(v).__module__ == "numpy" and \
            getattr(v, "dtype", None) is not None and v.dtype.kind in "iu"

    out, seen = [], set()
    chains = {} if chains is None else chains
    for i, s in enumerate(specs):
        at = f"{where}[{i}]"
        if not isinstance(s, RequestSpec):
            raise ConfigError(at, f"must be a RequestSpec, got {type(s).__name__}")

        def bad(name: str, want: str):
            raise ConfigError(f"{at}.{name}", f"must be {want}, got {getattr(s, name)!r:.60}")

        if not integer(s.request_id) or abs(s.request_id) > MAX_INT or int(s.request_id) in seen:
            bad("request_id", "an integer no other request has")
        seen.add(int(s.request_id))
        t = s.arrival_time
        if isinstance(t, numbers.Real) and not isinstance(t, bool):  # numpy's float32 is no float: a number all the same
            t = float(t)
        if isinstance(t, bool) or not isinstance(t, (int, float)) and not integer(t) or \
                not (math.isfinite(t) and 0 <= t <= MAX_SECONDS):
            bad("arrival_time", f"a number of seconds in [0, {MAX_SECONDS:g}]")
        for name in ("prompt_tokens", "output_tokens"):
            if not (integer(getattr(s, name)) and 1 <= getattr(s, name) <= MAX_TOKENS):
                bad(name, f"an integer in [1, {MAX_TOKENS:,}]")
        if s.max_tokens is not None and not (integer(s.max_tokens) and 1 <= s.max_tokens <= MAX_TOKENS):
            bad("max_tokens", f"None or an integer in [1, {MAX_TOKENS:,}]")
        for name, least in (("priority", -MAX_INT), ("turn", 0)):
            if not (integer(getattr(s, name)) and least <= getattr(s, name) <= MAX_INT):
                bad(name, f"an integer in [{least:,}, {MAX_INT:,}]")
        # written to parquet and JSON as exact integers: a session id past 2**53 crashed the write, half done
        if s.session_id is not None and not (integer(s.session_id) and abs(s.session_id) <= MAX_INT):
            bad("session_id", f"None or an integer at most {MAX_INT:,} in size")
        if s.slo_class is not None and not isinstance(s.slo_class, str):
            bad("slo_class", "None or a class name")
        if classes and s.slo_class not in classes:
            bad("slo_class", f"one of the scenario's slo_classes ({', '.join(classes)})")
        ids = s.prefix_ids
        if type(ids).__module__ == "numpy" and getattr(ids, "ndim", None) == 1 and (ids.dtype.kind in "iu" or
                                                                                   not ids.size):
            ids = tuple(ids.tolist())  # a 1-d integer array as the tuple it holds (r160: refused)
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (tuple, list)) or \
                not all(integer(x) and abs(x) <= MAX_INT for x in ids):
            bad("prefix_ids", f"a tuple of integer content ids, each at most {MAX_INT:,} in size")
        if ids and not (integer(s.prefix_block_tokens) and 1 <= s.prefix_block_tokens <= MAX_TOKENS):
            bad("prefix_block_tokens", "the tokens each prefix id names (an integer >= 1)")
        # ids may run on over the output (a chat turn's answer, which the next turn resends: r147, the sessions
        # workload's own source was refused), not past it
        most = -(-(s.prompt_tokens + s.output_tokens) // s.prefix_block_tokens) if ids else 0
        if ids and len(ids) > most:
            bad("prefix_ids", f"at most one id per {s.prefix_block_tokens}-token block of the {s.prompt_tokens} "
                              f"prompt and {s.output_tokens} output tokens ({most})")
        if ids and (problem := prefix_chain_problem(tuple(int(x) for x in ids), chains, int(s.prefix_block_tokens))):
            raise ConfigError(f"{at}.prefix_ids", problem)
        # every number a Python one: a numpy uint8 max_tokens overflowed in the engine's sums (round 125)
        out.append(replace(s, request_id=int(s.request_id), arrival_time=float(t), prompt_tokens=int(s.prompt_tokens),
                           output_tokens=int(s.output_tokens), prefix_ids=tuple(int(x) for x in ids),
                           max_tokens=None if s.max_tokens is None else int(s.max_tokens), priority=int(s.priority),
                           turn=int(s.turn), session_id=None if s.session_id is None else int(s.session_id),
                           prefix_block_tokens=int(s.prefix_block_tokens) if ids else 0))
    if not out:  # as an empty trace file is refused: a run of nothing has no metrics to report
        raise ConfigError(where, "empty: give at least one request")
    return out
