"""workload.max_concurrency: `vllm bench serve --max-concurrency` on an open-loop stream."""

import numpy as np
import pytest

import servesim
from servesim.simulator.cli import main

BASE = {"workload.num_requests": 200, "workload.prompt_tokens": {"dist": "fixed", "value": 300},
        "workload.output_tokens": {"dist": "fixed", "value": 100}, "profile": "teaching"}


def _most_in_flight(requests) -> int:
    ends = sorted([(t, 1) for t in requests.arrival_time] + [(t, -1) for t in requests.finish_time])
    return int(np.max(np.cumsum([d for _, d in ends])))  # an end at an instant counts before a start there


def test_a_burst_behind_a_limit_is_a_closed_loop():
    """All due at once, at most N in flight: exactly N clients without think time (vLLM's `--request-rate inf
    --max-concurrency N`)."""
    gated = servesim.simulate(None, BASE | {"workload.arrival": {"process": "burst"}, "workload.max_concurrency": 8})
    loop = servesim.simulate(None, BASE | {"workload.arrival": {"process": "closed_loop", "concurrency": 8}})
    for key in ("completed", "duration", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_e2el_ms"):
        assert gated.summary[key] == loop.summary[key], key
    assert _most_in_flight(gated.requests) == 8


@pytest.mark.parametrize("limit", [1, 3, 16])
def test_requests_wait_for_a_slot_and_are_never_sent_early(limit):
    opened = BASE | {"workload.arrival": {"process": "poisson", "rate": 40}}
    free = servesim.simulate(None, opened).requests.set_index("request_id")
    gated = servesim.simulate(None, opened | {"workload.max_concurrency": limit}).requests.set_index("request_id")
    assert len(gated) == len(free) and (gated.status == "finished").all()
    assert (gated.arrival_time >= free.arrival_time).all()  # sent when due, or later when a slot frees
    assert (gated.arrival_time > free.arrival_time).any()  # 40 req/s is beyond what the limit lets through
    assert _most_in_flight(gated.reset_index()) == limit


def test_the_limit_is_refused_where_it_means_nothing(capsys):
    for sets in (["workload.arrival={process: closed_loop, concurrency: 4}", "workload.max_concurrency=2"],
                 ["workload={type: sessions, num_sessions: 5, max_concurrency: 2}"],
                 ["workload.max_concurrency=0"]):
        assert main(["config"] + [x for s in sets for x in ("--set", s)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "max_concurrency" in err[0] and err[0].startswith("servesim: error:"), err


def test_a_request_sent_as_another_ends_is_scheduled_as_its_replay_is():
    """r119: a request released by max_concurrency at the instant another finished waited one step, where the
    same request replayed at that time (a trace, requests=, a vLLM result file) joined the step starting then: a
    run compared with its own result file was 3.7% off on mean TTFT. Both now join the step."""
    import servesim
    from servesim.workloads.spec import RequestSpec

    sets = {"workload.num_requests": 30, "workload.arrival.rate": 40,
            "workload.prompt_tokens": {"dist": "fixed", "value": 2000},
            "workload.output_tokens": {"dist": "fixed", "value": 64}}
    limited = servesim.simulate(None, sets | {"workload.max_concurrency": 4}).requests
    replay = servesim.simulate(None, sets, requests=[
        RequestSpec(int(r.request_id), float(r.arrival_time), int(r.prompt_tokens), int(r.output_tokens))
        for r in limited.itertuples()]).requests
    assert (limited["first_scheduled_time"].to_numpy() == replay["first_scheduled_time"].to_numpy()).all()
    assert (limited["finish_time"].to_numpy() == replay["finish_time"].to_numpy()).all()
