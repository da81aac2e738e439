"""servesim simulator: how time passes (SimPy loop, replicas, KV blocks, cost, metrics)."""

from servesim.simulator.errors import ConfigError

__all__ = ["ConfigError"]
