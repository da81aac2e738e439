"""A resolved configuration read back (a run's config.yaml, `servesim config`'s output).

`ResolvedScenario.as_dict` writes every value concrete, and lists under `resolved.derived` the
ones servesim derived (the GPU's datasheet, the profile `auto` chose, the budgets, the
CUDA-graph size, the model by name) with a digest of each. Read back, an unedited derived value
returns to what the scenario said, so other `--set` values derive it again.
"""

from __future__ import annotations

import copy
import hashlib
import json


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def at(data: dict, key: str):
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


# what a profile says it describes, apart from its timings: editing only these (a `sed s/h200-sxm/a100-80gb/` over a
# whole config.yaml) retargets the run, it does not make the H200's timings an A100's
PROFILE_IDENTITY = ("name", "device", "gpu", "model", "dtype", "kv_cache_dtype", "tensor_parallel_size",
                    "expert_parallel_size", "moe_routing", "source", "description")


def timings_digest(profile) -> str | None:
    """A digest of a profile's content less its identity fields (None for a profile given by name)."""
    if not isinstance(profile, dict):
        return None
    return digest({k: v for k, v in profile.items() if k not in PROFILE_IDENTITY})


def rederive(data: dict, notes: list[str] | None = None) -> dict:
    """A resolved configuration read back (a run's config.yaml, `servesim config`'s output): every value servesim
    derived and nobody edited since goes back to what the scenario said (unset, auto, the model's name), so it is
    derived again from the settings as they are now. Unchanged settings derive the same values: the run repeats."""
    derived = (data.get("resolved") or {}).get("derived") if isinstance(data.get("resolved"), dict) else None
    if not isinstance(derived, dict):
        return data
    data = copy.deepcopy(data)
    for key, entry in derived.items():
        if not (isinstance(entry, dict) and isinstance(key, str)):
            continue  # not ours
        if digest(at(data, key)) != entry.get("digest"):
            if entry.get("timings") is None or timings_digest(at(data, key)) != entry["timings"]:
                continue  # edited by hand: what the file says stands
            if notes is not None:
                notes.append(f"servesim: warning: {key}: only what it describes (its gpu, model, ...) was edited, "
                             f"not its timings; derived again for the deployment as it is now")
        *parents, last = key.split(".")
        node = data
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            if entry.get("from") is None:
                del node[last]
            else:
                node[last] = entry["from"]
    return data
