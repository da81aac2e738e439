import os

# Triton kernels (calibration/paged_attention.py) run under Triton's CPU interpreter in the tests: read when a
# kernel is defined, so set before anything imports one. TRITON_INTERPRET=0 tests them on a GPU instead.
os.environ.setdefault("TRITON_INTERPRET", "1")
# profiles composed on the fly (`profile: auto`) are cached here, not in the user's ~/.cache
os.environ.setdefault("SERVESIM_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), f"servesim-test-cache-{os.getpid()}"))

import pytest

from servesim.simulator.config import load, parse_scenario, resolve
from servesim.simulator.engine import simulate
from servesim.workloads.spec import RequestSpec


def teaching(overrides: list[str] | None = None, **engine):
    """A resolved scenario on the essay's teaching cost model, with engine settings."""
    sets = ["profile=teaching", "hardware.gpu=generic-80gb", "model=llama-3-8b"] + [f"engine.{k}={v}" for k, v in engine.items()]
    return load(None, sets + (overrides or []))


def specs(rows):
    """(arrival, prompt, output[, priority]) tuples -> RequestSpecs."""
    return [RequestSpec(i, float(r[0]), int(r[1]), int(r[2]), priority=int(r[3]) if len(r) > 3 else 0)
            for i, r in enumerate(rows)]


@pytest.fixture
def run():
    def _run(rows, overrides=None, **engine):
        return simulate(teaching(overrides, **engine), specs(rows))
    return _run


@pytest.fixture(autouse=True)
def _warnings_said_afresh():
    """A warning is printed once a process (simulator/config.py); each test sees its own."""
    import servesim.simulator.config

    servesim.simulator.config._WARNED.clear()
    yield
