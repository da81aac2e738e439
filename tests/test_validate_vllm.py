"""The vLLM comparison's own arithmetic, without an engine: client metrics and the step log."""

import json

import numpy as np
import pytest

from servesim.calibration.real_runs import read_run
from servesim.calibration.vllm_validate import client_metrics
from servesim.simulator.cli import main


def test_client_metrics_follow_vllm_bench_definitions():
    reqs = [
        {"request_id": 0, "arrival_time": 0.0, "prompt_tokens": 10, "output_tokens": 3,
         "chunks": [[0.1, 1], [0.2, 1], [0.4, 1]]},
        {"request_id": 1, "arrival_time": 1.0, "prompt_tokens": 10, "output_tokens": 1, "chunks": [[1.5, 1]]},
    ]
    s, arrays = client_metrics(reqs)
    assert s["mean_ttft_ms"] == pytest.approx((100 + 500) / 2)
    assert s["mean_tpot_ms"] == pytest.approx(150)  # (0.4 - 0.1) / (3 - 1); one-token answers have none
    assert sorted(arrays.itls.round(6)) == [0.1, 0.2]
    assert s["mean_e2el_ms"] == pytest.approx((400 + 500) / 2)
    assert s["request_throughput"] == pytest.approx(2 / 1.5)


def test_engine_step_times_include_the_host_overhead(tmp_path):
    log = tmp_path / "steps.jsonl"
    rows = []
    t = 10.0
    for i in range(6):  # busy: the next step starts 1 ms after this one ends
        rows.append({"t": t, "t_end": t + 0.008, "num_seqs": 2, "prefill_tokens": 0, "prefill_attention_pairs": 0,
                     "decode_seqs": 2, "decode_context_tokens": 100, "running": 2, "waiting": 0})
        t += 0.009
    rows[-1]["t_end"] = rows[-1]["t"] + 0.008  # the last one is followed by idle time
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    steps = read_run(log).steps  # the driver's log is one of the step-log forms
    assert np.allclose(steps["time_ms"], 9.0)  # 8 ms of step + 1 ms between steps, idle or not


def test_missing_engine_is_a_one_line_error(tmp_path, capsys):
    rc = main(["validate", "vllm", "docs/scenarios/vllm-small-cpu.yaml", "--vllm-python",
               str(tmp_path / "no-python"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "make vllm-env" in err


def test_the_engine_grid_asks_vllm_for_each_kind_of_batch():
    from servesim.calibration.vllm_harness import DECODE_TOKENS, grid_levels

    levels = dict(grid_levels("cpu", 2048))
    prefill = levels["prefill 4x256"]
    assert len(prefill) == 4 and {(s.arrival_time, s.prompt_tokens, s.output_tokens) for s in prefill} == {(0.0, 256, 2)}
    decode = levels["decode 32x256"]
    assert len(decode) == 32 and decode[0].output_tokens == DECODE_TOKENS
    mixed = levels["mixed 16x512+256"]
    assert [s.prompt_tokens for s in mixed].count(512) == 16 and mixed[-1].prompt_tokens == 256
    assert mixed[-1].arrival_time > 0  # the chunk joins decodes already running
    # a point the engine's max_model_len cannot hold is left out, not sent to fail
    assert "prefill 1x2048" not in dict(grid_levels("cpu", 1024))


def test_the_vllm_engine_harness_without_vllm_is_a_one_line_error(tmp_path, capsys):
    rc = main(["calibrate", "run", "--engine", "vllm", "--model", "tiny-llama", "--vllm-python",
               str(tmp_path / "no-python"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "make vllm-env" in err


def test_resimulate_reads_the_saved_measurements_without_vllms_python(tmp_path, capsys):
    """r129: docs/fidelity.md's --resimulate (the saved measurements simulated again, no server) refused to start
    without the engine's venv (`make vllm-env`), as it checked vLLM's Python and built the served model first."""
    import shutil
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    saved = root / "results" / "fidelity" / "vllm-server-small-llama-cpu"
    out = tmp_path / "saved"
    shutil.copytree(saved, out)
    assert main(["validate", "vllm", str(root / "docs" / "scenarios" / "vllm-small-cpu.yaml"), "--server", "--levels",
                 str(root / "docs" / "scenarios" / "vllm-server-levels.yaml"), "--repeats", "3", "--engine-profile",
                 str(out / "engine-harness" / "profile.yaml"), "--out", str(out), "--resimulate", "--vllm-python",
                 str(tmp_path / "no-python")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "table.csv"), pd.read_csv(saved / "table.csv"))


def test_round_135_resimulate_refuses_damaged_or_other_measurements_and_keeps_them(tmp_path, capsys):
    """A damaged engine-info.json was an internal error; other levels than those measured rewrote the measured
    trace-N.jsonl (the file `vllm bench serve` replayed) before the run was refused."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    saved = root / "results" / "fidelity" / "vllm-server-small-llama-cpu"
    levels = root / "docs" / "scenarios" / "vllm-server-levels.yaml"
    line = ["validate", "vllm", str(root / "docs" / "scenarios" / "vllm-small-cpu.yaml"), "--server", "--repeats", "3",
            "--resimulate"]
    damaged = tmp_path / "damaged"
    shutil.copytree(saved, damaged)
    for text, says in (("{not json", "not readable as JSON"), ('{"block_size": 16}', "num_gpu_blocks: must be")):
        (damaged / "engine-info.json").write_text(text)
        assert main(line + ["--levels", str(levels), "--out", str(damaged)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"servesim: error: {damaged / 'engine-info.json'}: {says}") and err.count("\n") == 1
    other = tmp_path / "other"
    shutil.copytree(saved, other)
    (tmp_path / "levels.yaml").write_text(levels.read_text().replace("num_requests=60", "num_requests=59", 1))
    before = {p.name: p.read_bytes() for p in other.glob("trace-*.jsonl")}
    assert main(line + ["--levels", str(tmp_path / "levels.yaml"), "--out", str(other)]) == 2
    assert "requests are not those measured in" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in other.glob("trace-*.jsonl")} == before
