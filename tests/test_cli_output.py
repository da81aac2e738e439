"""--json and --quiet on every command: --json is the command's answer as strict JSON alone on stdout, --quiet lets
nothing through but errors, and both keep the command's exit code."""

import json
from pathlib import Path

import pytest

from servesim.simulator.cli import _leaves, build_parser, main

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TABLES, LAYERS = SHARED / "gpu" / "aiconfigurator", SHARED / "gpu" / "layer-profiles"
SMALL = ["--set", "workload.num_requests=20"]
FIXED = ["--set", "workload.prompt_tokens={dist: fixed, value: 512}", "--set",
         "workload.output_tokens={dist: fixed, value: 64}"]

# commands not run here, and why; they print through the same `answer` (simulator/cli_output.py)
NOT_RUN = {
    "calibrate run": "times torch forward passes (the calibration extra)",
    "calibrate check": "re-measures a profile with torch (the calibration extra)",
    "validate replay": "replays steps with torch (the calibration extra)",
    "validate vllm": "runs a CPU build of vLLM (`make vllm-env`)",
    "validate serving": "simulates every public GPU run (minutes; make fidelity-gpu)",
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """What some commands read: a run, a simulated `vllm bench serve` result file and a measurement table."""
    from test_calibration_fit import synthetic

    d = tmp_path_factory.mktemp("made")
    assert main(["run", *SMALL, "--out", str(d / "run"), "--quiet"]) == 0
    assert main(["vllm", "--out", str(d / "vllm"), "--quiet", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--",
                 "bench", "serve", "--num-prompts", "40", "--request-rate", "4", "--save-result",
                 "--save-detailed", "--result-filename", "r.json"]) == 0
    synthetic("cpu").to_csv(d / "steps.csv", index=False)
    return {"run": d / "run", "result": d / "vllm" / "r.json", "steps": d / "steps.csv"}


CASES = {
    "run": lambda m, o: ["run", *SMALL, "--out", o],
    "vllm": lambda m, o: ["vllm", "--out", o, "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--",
                          "bench", "serve", "--num-prompts", "20", "--request-rate", "4", "--save-result"],
    "config": lambda m, o: ["config", "--set", "engine.max_num_seqs=8"],
    "capacity": lambda m, o: ["capacity", "--model", "llama-3-8b"],
    "sweep": lambda m, o: ["sweep", "--grid", "engine.max_num_seqs=4,8", *SMALL, "--jobs", "1", "--out", o],
    "search max-rate": lambda m, o: ["search", "max-rate", *SMALL, "--slo", "ttft_p99_ms=500", "--tolerance", "0.5",
                                     "--high", "40", *FIXED],  # fixed lengths: a queue that settles soon
    "search replicas": lambda m, o: ["search", "replicas", *SMALL, "--slo", "ttft_p99_ms=2000", "--rate", "2"],
    "recommend": lambda m, o: ["recommend", "--rate", "2", "--slo", "ttft_p99_ms=2000", *SMALL, "--tolerance", "0.5",
                               "--out", o],
    "plot": lambda m, o: ["plot", str(m["run"]), "--kind", "timeline", "--out", o],
    "workload describe": lambda m, o: ["workload", "describe", str(m["run"] / "config.yaml")],
    "workload write": lambda m, o: ["workload", "write", *SMALL, "--out", o + ".jsonl"],
    "calibrate fit": lambda m, o: ["calibrate", "fit", str(m["steps"]), "--model", "small-llama", "--dtype", "fp32",
                                   "--out", o + ".yaml"],
    "calibrate compare": lambda m, o: ["calibrate", "compare", "h100-llama-3.1-8b-bf16-tp1",
                                       "h200-llama-3.1-8b-bf16-tp1"],
    "calibrate import": lambda m, o: ["calibrate", "import", "aiconfigurator", "--gpu", "h100-sxm", "--model",
                                      "qwen3-8b", "--data", str(TABLES), "--out", o + ".yaml"],
    "validate layers": lambda m, o: ["validate", "layers", "--data", str(LAYERS), "--tables", str(TABLES), "--out", o],
    "compare": lambda m, o: ["compare", str(m["result"]), "--out", o],
    "bench": lambda m, o: ["bench", "--requests", "50", "--repeats", "1"],
}
NEEDS = {"calibrate import": TABLES, "validate layers": LAYERS}
SLOW = {"validate layers"}  # 15 s


def _name(parser) -> str:
    return parser.prog.removeprefix("servesim").strip()


def test_every_command_takes_json_and_quiet_and_each_is_tried_here():
    leaves = list(_leaves(build_parser()))
    for leaf in leaves:
        assert {"--json", "--quiet"} <= set(leaf._option_string_actions), _name(leaf)
    assert {_name(leaf) for leaf in leaves} == set(CASES) | set(NOT_RUN)


def _with(name: str, argv: list[str], *flags: str) -> list[str]:
    """The command's words, then the flags (vllm takes its own after `serve`)."""
    k = len(name.split())
    return argv[:k] + list(flags) + argv[k:]


@pytest.mark.parametrize("name", CASES)
def test_json_is_the_answer_alone_and_quiet_says_nothing(name, made, tmp_path, capsys):
    if name in NEEDS and not NEEDS[name].is_dir():
        pytest.skip(f"shared data not found at {NEEDS[name]}")
    capsys.readouterr()
    # a slow command is tried once with both: the JSON alone on stdout, and not a word on stderr
    modes = [["--json", "--quiet"]] if name in SLOW else [["--json"], ["--quiet"]]
    codes = []
    for flags in modes:
        codes.append(main(_with(name, CASES[name](made, str(tmp_path / flags[-1][2:])), *flags)))
        out, err = capsys.readouterr()
        assert codes[-1] in (0, 1), err
        if "--json" in flags:
            assert json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) not in (None, {}, [])
        else:
            assert out == ""
        if "--quiet" in flags:
            assert all(line.startswith("servesim: error") for line in err.splitlines()), err
            assert (codes[-1] == 0) == (err == "")  # a failing answer (no rate met the SLOs) still says why
    assert len(set(codes)) == 1


def test_human_text_goes_to_stderr_with_json(capsys):
    """A --json reader parses stdout; the notes and warnings a person reads are still there, on stderr."""
    assert main(["config", "--vllm", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["command"].startswith("vllm serve ") and "servesim: note:" in err


def test_quiet_keeps_errors_and_drops_progress():
    import io

    from servesim.simulator.cli_output import _ErrorsOnly

    sink = io.StringIO()
    stream = _ErrorsOnly(sink)
    stream.write("  3%|#  | 1/30\r  7%|## | 2/30\rservesim: warning: ignored\nservesim: error: kept")
    stream.close_line()
    assert sink.getvalue() == "servesim: error: kept\n"


def test_a_tables_json_keeps_every_digit(tmp_path, capsys):
    """r130: pandas' to_json rounds to 10 decimals: two swept rates printed alike (1.2346e-06), a duration lost
    its last digits, and 1.234e-12 printed as 0."""
    import pandas as pd

    from servesim.simulator.cli_output import plain

    assert plain(pd.DataFrame({"a": [1.234e-12, 21.17414940439379, float("nan")], "b": ["x", None, pd.NA]})) == [
        {"a": 1.234e-12, "b": "x"}, {"a": 21.17414940439379, "b": None}, {"a": None, "b": None}]
    assert main(["sweep", "--set", "workload.num_requests=2", "--grid",
                 "workload.arrival.rate=0.000001234567,0.0000012345678", "--out", str(tmp_path / "s"), "--json",
                 "--no-progress"]) == 0
    rows = json.loads(capsys.readouterr().out)
    table = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert [r["workload.arrival.rate"] for r in rows] == table["workload.arrival.rate"].tolist()
    assert [r["duration"] for r in rows] == table["duration"].tolist()
