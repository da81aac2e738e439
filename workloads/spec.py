"""The one record that crosses from workloads into the simulator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request as the client sends it.

    output_tokens is how many tokens the model will actually generate (where EOS
    falls); max_tokens is the client's limit, all a scheduler may know in advance.

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
