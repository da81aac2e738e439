"""The one record that crosses from workloads into the simulator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request as the client sends it.

    output_tokens is how many tokens the model will actually generate (where EOS
    falls); max_tokens is the client's limit, all a scheduler may know in advance.
    """

    request_id: int
    arrival_time: float  # seconds from the start of the run
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    priority: int = 0  # lower runs first, as in vLLM

    @property
    def output_limit(self) -> int:
        return self.max_tokens if self.max_tokens is not None else self.output_tokens
