"""servesim workloads: what arrives. Every workload type gives a RequestSource."""

from typing import Annotated, Union

from pydantic import Discriminator, Tag

from servesim.workloads.trace_workload import TraceWorkload
from servesim.workloads.source import RequestSource
from servesim.workloads.spec import RequestSpec
from servesim.workloads.synthetic import SessionWorkload, SyntheticWorkload


def _kind(v) -> str:
    return v.get("type", "synthetic") if isinstance(v, dict) else getattr(v, "type", "synthetic")


Workload = Annotated[
    Union[Annotated[SyntheticWorkload, Tag("synthetic")], Annotated[SessionWorkload, Tag("sessions")],
          Annotated[TraceWorkload, Tag("trace")]],
    Discriminator(_kind),
]

__all__ = ["RequestSpec", "RequestSource", "SessionWorkload", "SyntheticWorkload", "TraceWorkload", "Workload"]
