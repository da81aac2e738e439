"""servesim policies: what to decide. Pure decision objects; they know nothing of SimPy.

Each policy is a small class registered by name, selectable from the scenario YAML.
"""

from servesim.policies.batching import BATCHING_POLICIES, make_batching
from servesim.policies.queues import QUEUE_POLICIES, make_queue_policy

__all__ = ["BATCHING_POLICIES", "QUEUE_POLICIES", "make_batching", "make_queue_policy"]
