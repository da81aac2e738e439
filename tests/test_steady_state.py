"""The summary's steady state: a warm-up and cool-down left out of every request figure; offered vs achieved."""

import numpy as np
import pandas as pd
import pytest

import servesim
from servesim.simulator.cli import main

BASE = {"workload.num_requests": 300, "workload.arrival.rate": 20, "profile": "teaching"}


def test_the_window_leaves_out_the_warm_up_and_cool_down_requests():
    whole = servesim.simulate(None, BASE)
    cut = servesim.simulate(None, BASE | {"simulation.warmup_s": 2.0, "simulation.cooldown_requests": 40})
    req = cut.requests
    pd.testing.assert_frame_equal(req, whole.requests)  # the same run: only the summary measures less
    t = req.sort_values(["arrival_time", "request_id"], kind="stable")
    t = t.iloc[:len(t) - 40]
    t = t[t.arrival_time >= req.arrival_time.min() + 2.0]
    done = t[t.status == "finished"]
    s = cut.summary
    assert s["measured_requests"] == len(t) < len(req) and s["completed"] == len(done)
    assert s["mean_ttft_ms"] == pytest.approx(done.ttft.mean() * 1000)
    assert s["p99_e2el_ms"] == pytest.approx(np.percentile(done.e2el, 99) * 1000)
    assert s["total_output_tokens"] == done.output_tokens.sum()
    assert s["offered_rate"] == pytest.approx((len(t) - 1) / (t.arrival_time.max() - t.arrival_time.min()))
    assert whole.summary["measured_requests"] == 300 and whole.summary["completed"] == 300


def test_offered_and_achieved_rates_say_whether_the_engine_keeps_up():
    light = servesim.simulate(None, BASE | {"workload.arrival.rate": 2, "simulation.warmup_s": 10,
                                            "simulation.cooldown_s": 10}).summary
    assert light["achieved_rate"] == pytest.approx(light["offered_rate"], rel=0.1)
    heavy = servesim.simulate(None, BASE | {"workload.arrival.rate": 400, "simulation.warmup_requests": 50,
                                            "simulation.cooldown_requests": 50}).summary
    assert heavy["achieved_rate"] < 0.5 * heavy["offered_rate"]  # the queue grows: fewer done than came


@pytest.mark.parametrize("flags, field", [
    (["--warmup-requests", "10", "--cooldown-requests", "10"], "simulation.warmup_requests"),
    (["--cooldown-requests", "25"], "simulation.cooldown_requests"),
    (["--warmup-s", "1000"], "simulation.warmup_s"),
    (["--cooldown-s", "1000"], "simulation.cooldown_s"),
])
def test_a_window_that_leaves_nothing_is_one_line_naming_its_setting(tmp_path, capsys, flags, field):
    """--warmup-requests was named simulation.warmup_s, after the whole run: counts are checked before it."""
    assert main(["run", "--out", str(tmp_path / "r"), "--set", "workload.num_requests=20", "--set", "profile=teaching",
                 *flags]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    flag = "--" + field.removeprefix("simulation.").replace("_", "-")  # the flag typed, then its setting
    assert len(err) == 1 and err[0].startswith(f"servesim: error: {flag} ({field}): the warm-up and cool-down (")
    if "requests" in field:  # known before the run: nothing simulated
        assert captured.out == "" and not (tmp_path / "r").exists()
    assert main(["run", "--out", str(tmp_path / "r"), "--set", "workload.num_requests=20", "--set", "profile=teaching",
                 "--set", f"{field}=-1"]) == 2  # given as a setting: named as one
    assert capsys.readouterr().err.startswith(f"servesim: error: {field}: ")
