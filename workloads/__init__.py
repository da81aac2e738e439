"""servesim workloads: what arrives. Every workload type gives a RequestSource."""

from typing import Annotated, Union

from pydantic import Discriminator, Tag

from workloads.trace_workload import TraceWorkload
from workloads.source import RequestSource
from workloads.spec import RequestSpec
from workloads.synthetic import SessionWorkload, SyntheticWorkload


def _kind(v) -> str:
    return v.get("type", "synthetic") if isinstance(v, dict) else getattr(v, "type", "synthetic")


Workload = Annotated[
    Union[Annotated[SyntheticWorkload, Tag("synthetic")], Annotated[SessionWorkload, Tag("sessions")],
          Annotated[TraceWorkload, Tag("trace")]],
    Discriminator(_kind),
]

__all__ = ["RequestSpec", "RequestSource", "SessionWorkload", "SyntheticWorkload", "TraceWorkload", "Workload"]
