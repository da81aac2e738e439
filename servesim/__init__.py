"""servesim: a discrete-event simulator of LLM inference serving. Its Python API is servesim/api.py.

    import servesim
    run = servesim.simulate("docs/scenarios/essay-batching.yaml", {"engine.max_num_batched_tokens": 512})

The project's folders are this package's parts: servesim.simulator, servesim.policies, servesim.workloads and
servesim.calibration (installed, they lie inside it; pyproject.toml maps them). Run from a source tree that is not
installed (the device session on a lent GPU), they are found beside this folder. The API is imported on first use,
so `python -m servesim.calibration.device_session` needs none of pandas, pyarrow or YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

_HERE = Path(__file__).resolve().parent
if not (_HERE / "simulator").is_dir() and (_HERE.parent / "simulator" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 (a package's own __path__): the source tree's folders

__all__ = ["simulate", "resolve", "sweep", "max_rate", "min_replicas", "recommend", "capacity", "plot", "read_trace",
           "describe_trace", "describe_file", "ConfigError", "RequestSpec", "RequestSource", "RunResult", "Scenario",
           "ResolvedScenario"]

if TYPE_CHECKING:
    from servesim.api import (ConfigError, RequestSource, RequestSpec, ResolvedScenario, RunResult,  # noqa: F401
                              Scenario, capacity, describe_file, describe_trace, max_rate, min_replicas, plot,
                              read_trace, recommend, resolve, simulate, sweep)


def __getattr__(name: str):
    if name in __all__:
        from servesim import api

        return getattr(api, name)
    raise AttributeError(f"module 'servesim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
