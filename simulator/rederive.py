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


def file_digest(name: str) -> str | None:
    """A digest of the file `name` names (a model's config.json, a profile YAML; a model folder's config.json, an
    HF id's in the local cache: r153, a rerun read whatever they said then), None when it names no file."""
    from pathlib import Path

    try:
        path = Path(name)
        if path.is_dir():
            path = path / "config.json"
        elif not path.exists():
            from servesim.simulator.model_arch import _HF_ID, HF_IDS, _cached_config

            cached = _cached_config(name) if name not in HF_IDS and _HF_ID.match(name) else None
            if cached is None:
                return None
            path = Path(cached)
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None
    except (OSError, ValueError):
        return None


def at(data: dict, key: str):
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


# what a profile says it describes, apart from its timings: editing only these (a `sed s/h200-sxm/a100-80gb/` over a
# whole config.yaml) retargets the run, it does not make the H200's timings an A100's
PROFILE_IDENTITY = ("name", "device", "gpu", "model", "dtype", "kv_cache_dtype", "tensor_parallel_size",
                    "expert_parallel_size", "moe_routing", "source", "description")


MODEL_IDENTITY = ("name",)  # an architecture's name alone, edited, names another model


def digest_less(value, identity: tuple[str, ...]) -> str | None:
    """A digest of a mapping less its identity fields (None for a value given by name): equal when only what it
    describes was edited."""
    if not isinstance(value, dict):
        return None
    return digest({k: v for k, v in value.items() if k not in identity})


def rederive(data: dict, notes: list[str] | None = None, given: list[str] = ()) -> dict:
    """A resolved configuration read back (a run's config.yaml, `servesim config`'s output): every value servesim
    derived and nobody edited since goes back to what the scenario said (unset, auto, the model's name), so it is
    derived again from the settings as they are now. Unchanged settings derive the same values: the run repeats.
    `given`: the keys --set gave (applied to `data` already, as edits to the file): each stands as given, even
    where it equals the value derived."""
    derived = (data.get("resolved") or {}).get("derived") if isinstance(data.get("resolved"), dict) else None
    if not isinstance(derived, dict):
        return data
    data = copy.deepcopy(data)
    for key, entry in derived.items():
        if not (isinstance(entry, dict) and isinstance(key, str)):
            continue  # not ours
        if any(key == g or key.startswith(g + ".") for g in given):
            continue  # --set gave it, or a section holding it
        value, retarget = at(data, key), None
        if entry.get("file") is not None and digest(value) == entry.get("digest") and \
                file_digest(str(entry.get("from"))) != entry["file"]:
            if notes is not None:  # the file changed, or is not found from here: what this run read is written here
                notes.append(f"servesim: warning: {key}: {entry.get('from')} is not the file this run read (changed, "
                             f"or not found from here); the {key} written in this file is used")
            continue
        if digest(value) != entry.get("digest"):
            if entry.get("timings") is not None and digest_less(value, PROFILE_IDENTITY) == entry["timings"]:
                note = "only what it describes (its gpu, model, ...) was edited, not its timings; derived again " \
                       "for the deployment as it is now"
            elif entry.get("shape") is not None and digest_less(value, MODEL_IDENTITY) == entry["shape"] and \
                    isinstance(value.get("name"), str):
                retarget = value["name"]  # the user named another model: read its architecture
                note = f"only its name was edited: {retarget}'s own architecture is read"
            else:
                continue  # edited by hand: what the file says stands
            if notes is not None:
                notes.append(f"servesim: warning: {key}: {note}")
        *parents, last = key.split(".")
        node = data
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            if retarget is not None:
                node[last] = retarget
            elif entry.get("from") is None:
                del node[last]
            else:
                node[last] = entry["from"]
    return data
