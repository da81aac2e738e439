"""servesim workloads: what arrives (a stream of RequestSpec)."""

from workloads.spec import RequestSpec

__all__ = ["RequestSpec"]
