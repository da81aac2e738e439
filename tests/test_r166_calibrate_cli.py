"""r166: calibrate and validate name the flag the user gave, and refuse a flag of another mode, in one line."""

import json

import pytest

from servesim.simulator.cli import main


def error_line(capsys) -> str:
    """The one line a refused command prints (exit 2): more lines, or none, fail here."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def nothing_starts(monkeypatch):
    """r166: an engine or server started is a failure: the refusals come before either."""
    import servesim.calibration.vllm_server as server
    import servesim.calibration.vllm_validate as direct

    def started(*args, **kwargs):
        raise AssertionError("an engine or server was started")

    monkeypatch.setattr(direct, "validate_vllm", started)
    monkeypatch.setattr(server, "validate_vllm_server", started)


@pytest.mark.parametrize("extra, flag", [
    (["--resimulate"], "--resimulate"),  # r166: ran a real engine instead of seconds of simulation
    (["--levels", "LEVELS"], "--levels"),
    (["--engine-profile", "teaching"], "--engine-profile"),
    (["--server", "--levels", "LEVELS", "--loads", "auto"], "--loads"),  # r166: never passed in server mode
])
def test_r166_a_flag_of_the_other_vllm_mode_is_refused_before_anything_starts(tmp_path, capsys, nothing_starts,
                                                                              extra, flag):
    scenario, levels = tmp_path / "sc.yaml", tmp_path / "levels.yaml"
    scenario.write_text("model: llama-3.1-8b\nworkload:\n  num_requests: 20\n")
    levels.write_text("levels:\n  a: [workload.num_requests=4]\nfit_on: a\n")
    argv = ["validate", "vllm", str(scenario), "--out", str(tmp_path / "vv")]
    assert main(argv + [str(levels) if a == "LEVELS" else a for a in extra]) == 2
    line = error_line(capsys)
    assert line.startswith(f"servesim: error: {flag}: ") and "--server" in line
    assert not (tmp_path / "vv").exists()


@pytest.mark.parametrize("command, data, says", [
    ("serving", "file", "is a file, not a folder of runs"),  # r166: "serving: no serving runs at ..."
    ("serving", "missing", "no such folder"),
    ("layers", "empty", "no layers.csv under"),  # r166: "layers: no layers.csv under ..."
    ("layers", "file", "it is a file, not a folder"),
])
def test_r166_validate_names_data_where_it_holds_no_runs(tmp_path, capsys, command, data, says):
    given = {"file": tmp_path / "sc.yaml", "missing": tmp_path / "nope", "empty": tmp_path / "empty"}[data]
    (tmp_path / "sc.yaml").write_text("model: llama-3.1-8b\n")
    (tmp_path / "empty").mkdir()
    assert main(["validate", command, "--data", str(given), "--out", str(tmp_path / "out")]) == 2
    line = error_line(capsys)
    assert line.startswith("servesim: error: --data: ") and says in line


def lifecycle(path, n: int = 60):
    """Lifecycle records of a run that records no GPU or model (as vLLM's request log holds them), varied enough
    for the fit's terms."""
    rows = [{"request_id": f"r{i}", "input_toks": 100 + 50 * (i % 5), "output_toks": 10 + 5 * (i % 4),
             "queued_ts": 0.5 * i, "scheduled_ts": 0.5 * i + 0.001, "first_token_ts": 0.5 * i + 0.05,
             "last_token_ts": 0.5 * i + 0.45} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_r166_fit_says_a_simulation_cannot_be_fitted_from(tmp_path, capsys):
    """fit said compare's advice for a results folder (give it last, after the real runs), which fit cannot follow."""
    sim = tmp_path / "sim"
    assert main(["run", "--set", "workload.num_requests=2", "--out", str(sim), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["calibrate", "fit", "--gpu", "h999", str(sim)]) == 2
    line = error_line(capsys)
    assert line.startswith(f"servesim: error: {sim}: a servesim results folder") and "cannot be fitted from" in line
    assert "give it last" not in line
    real = lifecycle(tmp_path / "requests.jsonl")
    assert main(["calibrate", "fit", str(real), "--held-out", str(sim), "--set", "model=llama-3.1-8b"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"servesim: error: --held-out: {sim}: ") and "cannot be fitted from" in line


@pytest.mark.parametrize("flags, flag, says", [
    (["--gpu", "h999", "--set", "model=llama-3.1-8b"], "--gpu", "unknown GPU 'h999'"),  # r166: "hardware.gpu"
    (["--model", "nosuch", "--set", "hardware.gpu=h100-sxm"], "--model", "unknown model 'nosuch'"),
    (["--tp", "3", "--set", "model=llama-3.1-8b", "--gpu", "h100-sxm"], "--tp", "do not split over 3 GPUs"),
    (["--set", "hardware.gpu=h999", "--set", "model=llama-3.1-8b"], "hardware.gpu", "unknown GPU 'h999'"),
])
def test_r166_a_real_runs_fit_names_the_deployment_flag_given(tmp_path, capsys, flags, flag, says):
    real = lifecycle(tmp_path / "requests.jsonl")
    assert main(["calibrate", "fit", str(real), "--max-evals", "7", "--out", str(tmp_path / "p.yaml")] + flags) == 2
    line = error_line(capsys)
    assert line.startswith(f"servesim: error: {flag}: ") and says in line
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("data, says", [
    ("root", "it holds no GPU's folder of tables"),  # r166: "--out: ... lies inside the kernel tables"
    ("gpu", "a GPU's folder: give the root that holds it"),
    ("missing", "no such folder"),
])
def test_r166_import_says_data_holds_no_tables_before_out_is_checked_against_it(tmp_path, capsys, data, says):
    (tmp_path / "h100_sxm" / "gemm").mkdir(parents=True)
    given = {"root": tmp_path / "h100_sxm" / "gemm", "gpu": tmp_path / "h100_sxm", "missing": tmp_path / "nope"}[data]
    assert main(["calibrate", "import", "aiconfigurator", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--data",
                 str(given), "--out", str(given / "p.yaml")]) == 2
    line = error_line(capsys)
    assert line.startswith(f"servesim: error: --data: no kernel tables under {given}: ") and says in line
