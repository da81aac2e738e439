"""Sweeps: grids, zips and seeds; parallel equals sequential; resumable; failures recorded, not fatal."""

import itertools
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from servesim.simulator import sweep as sw
from servesim.simulator.cli import main
from servesim.simulator.errors import ConfigError

BASE = ["workload.num_requests=60", "profile=teaching", "model=llama-3-8b", "hardware.gpu=generic-80gb"]


def test_expand_grids_zips_and_seeds():
    pts = sw.expand(["a=1,2", "b=x,y,z"], [], seeds=2)
    assert len(pts) == 12 and {"a": 1, "b": "x", "seed": 1} in pts
    z = sw.expand(["a=1,2"], ["c=10,20", "d=0.5,0.7"], seeds=1)
    assert len(z) == 4 and {"a": 2, "c": 20, "d": 0.7, "seed": 0} in z and {"a": 1, "c": 10, "d": 0.7, "seed": 0} not in z
    with pytest.raises(ConfigError, match="same number"):
        sw.expand([], ["c=1,2", "d=1"], 1)
    with pytest.raises(ConfigError, match="key=v1"):
        sw.expand(["nonsense"], [], 1)


def test_parallel_equals_sequential_and_reruns_skip(tmp_path):
    pts = sw.expand(["workload.arrival.rate=4,8", "engine.max_num_seqs=8,32"], [], seeds=2)
    seq = sw.sweep(None, BASE, pts, tmp_path / "seq", jobs=1, progress=False)
    par = sw.sweep(None, BASE, pts, tmp_path / "par", jobs=2, progress=False)
    assert len(seq) == 8 and seq["error"].isna().all()
    pd.testing.assert_frame_equal(seq, par)
    stamp = {p: p.stat().st_mtime_ns for p in (tmp_path / "par" / "runs").glob("*/summary.json")}
    again = sw.sweep(None, BASE, pts, tmp_path / "par", jobs=2, progress=False)
    pd.testing.assert_frame_equal(again, par)
    assert stamp == {p: p.stat().st_mtime_ns for p in (tmp_path / "par" / "runs").glob("*/summary.json")}
    runs = sorted(p for p in (tmp_path / "seq" / "runs").iterdir() if p.is_dir())
    assert {p.stat().st_mode & 0o777 for p in runs} == {(tmp_path / "seq").stat().st_mode & 0o777}  # not mkdtemp's 0700
    # more load, more waiting: the table is what analysis reads
    t = seq.groupby("workload.arrival.rate")["mean_ttft_ms"].mean()
    assert t[8] > t[4]


def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    # 3 GPUs do not split 32 heads: only resolving the point tells, so it is that run's row, not a refusal
    pts = sw.expand(["engine.tensor_parallel_size=1,3"], [], seeds=1)
    t = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    bad = t[t["engine.tensor_parallel_size"] == 3]
    assert len(t) == 2 and "engine.tensor_parallel_size" in bad["error"].iloc[0]
    assert t[t["engine.tensor_parallel_size"] == 1]["error"].isna().all()
    assert list((tmp_path / "runs").glob("*.error.txt"))


def test_a_mistake_every_run_would_make_is_refused_before_any_runs(tmp_path):
    with pytest.raises(ConfigError, match="engine.max_num_seqs"):
        sw.sweep(None, BASE, sw.expand(["engine.max_num_seqs=8,-1"], [], seeds=1), tmp_path, jobs=1, progress=False)
    assert not (tmp_path / "runs").exists()


def test_a_rerun_with_other_settings_simulates_again(tmp_path):
    pts = sw.expand(["workload.arrival.rate=4"], [], seeds=1)
    first = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    same = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    other = sw.sweep(None, BASE + ["engine.max_num_seqs=2"], pts, tmp_path, jobs=1, progress=False)
    assert first["run_id"].tolist() == same["run_id"].tolist() != other["run_id"].tolist()
    assert first["mean_ttft_ms"].tolist() == same["mean_ttft_ms"].tolist() != other["mean_ttft_ms"].tolist()
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_the_table_is_written_after_every_run(tmp_path, monkeypatch):
    sizes = []
    real = sw.write_table

    def spy(rows, out, keys=None, points=None):
        sizes.append(len(rows))
        return real(rows, out, keys, points)

    monkeypatch.setattr(sw, "write_table", spy)
    sw.sweep(None, BASE, sw.expand(["workload.arrival.rate=2,4,6"], [], seeds=1), tmp_path, jobs=1, progress=False)
    assert sizes[:4] == [0, 1, 2, 3]  # at the start, this sweep's runs on disk (none), then after every run


def test_a_sweep_killed_before_its_first_run_leaves_no_other_sweeps_rows(tmp_path, monkeypatch):
    """Round 102: a sweep SIGKILLed before its first run finished left the earlier sweep's rows in sweep.csv under
    the new sweep.yaml; the table is rewritten as the sweep starts, with its own runs already on disk."""
    sw.sweep(None, BASE, sw.expand(["workload.arrival.rate=2,4"], [], seeds=1), tmp_path, jobs=1, progress=False)

    left = []

    def killed(*args, **kw):  # a SIGKILL as the first run starts: the folder as it is then is what is left
        left.append(pd.read_parquet(tmp_path / "sweep.parquet") if (tmp_path / "sweep.parquet").exists() else None)
        raise SystemExit

    monkeypatch.setattr(sw, "_execute", killed)
    with pytest.raises(SystemExit):
        sw.sweep(None, BASE + ["workload.num_requests=30"], sw.expand(["workload.arrival.rate=8,16"], [], seeds=1),
                 tmp_path, jobs=1, progress=False)
    with pytest.raises(SystemExit):  # a rerun of the first sweep finds its two runs on disk
        sw.sweep(None, BASE, sw.expand(["workload.arrival.rate=2,4"], [], seeds=1), tmp_path, jobs=1, progress=False)
    assert len(left[0]) == 0 and list(left[1]["workload.arrival.rate"]) == [2, 4]


def test_interrupt_keeps_finished_runs(tmp_path, monkeypatch):
    pts = sw.expand(["workload.arrival.rate=2,4,6,8"], [], seeds=1)
    real = sw.run_point
    calls = []

    def flaky(*args, **kw):
        if kw.get("cached_only"):  # the stopped sweep's look at what is on disk
            return real(*args, **kw)
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(sw, "run_point", flaky)
    with pytest.raises(KeyboardInterrupt):
        sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    assert len(pd.read_parquet(tmp_path / "sweep.parquet")) == 2
    monkeypatch.setattr(sw, "run_point", real)
    full = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    assert len(full) == 4
    # a rerun stopped early still has every finished run in its table: those it did not get to are on disk
    calls.clear()
    monkeypatch.setattr(sw, "run_point", flaky)
    with pytest.raises(KeyboardInterrupt):
        sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "sweep.parquet"), full)
    # a run folder another sweep (other settings) left is not taken for this one's
    other = ["workload.num_requests=61"] + BASE[1:]
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        sw.sweep(None, other, pts, tmp_path, jobs=1, progress=False)
    assert len(pd.read_parquet(tmp_path / "sweep.parquet")) == 2


def test_round_159_a_rerun_stopped_while_it_looks_on_disk_keeps_the_earlier_table(tmp_path, monkeypatch):
    """r159: a Ctrl-C (or a kill) while a rerun read its runs on disk, before its first table, left none: the
    earlier sweep's whole table was removed first."""
    pts = sw.expand(["workload.arrival.rate=2,4"], [], seeds=1)
    full = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)

    def stopped(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(sw, "_finished_on_disk", stopped)
    with pytest.raises(KeyboardInterrupt):
        sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "sweep.parquet"), full)


def test_a_killed_writers_temporary_folder_is_removed_by_the_next_sweep(tmp_path):
    """A SIGKILL leaves runs/.<id>-<pid>-*; the next sweep removes those whose writer is gone, not a live one's."""
    import os

    runs = tmp_path / "runs"
    (runs / ".0123abcd-999999999-xyz").mkdir(parents=True)  # no such process
    (runs / f".4567cdef-{os.getpid()}-abc").mkdir()  # a live writer (this process)
    sw.sweep(None, BASE, sw.expand(["workload.arrival.rate=2"], [], seeds=1), tmp_path, jobs=1, progress=False)
    left = sorted(p.name for p in runs.iterdir() if p.name.startswith("."))
    assert left == [f".4567cdef-{os.getpid()}-abc"]


def test_a_run_interrupted_while_writing_leaves_no_temporary_folder(tmp_path, monkeypatch):
    import servesim.simulator.engine as engine

    real = engine.simulate

    def cut(rs):
        result = real(rs)

        def write(folder):
            (folder / "steps.parquet").write_text("half")
            raise KeyboardInterrupt

        result.write = write
        return result

    monkeypatch.setattr(engine, "simulate", cut)
    with pytest.raises(KeyboardInterrupt):
        sw.sweep(None, BASE, sw.expand(["workload.arrival.rate=2"], [], seeds=1), tmp_path, jobs=1, progress=False)
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("sig, code, said", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_ctrl_c_on_a_parallel_sweep_stops_it_and_the_table_holds_every_finished_run(tmp_path, sig, code, said):
    """Ctrl-C as a terminal sends it (to the whole process group) while two workers run: the sweep exits 130 at
    once, no worker goes on to a queued point, nothing half-written is left in runs/, and every run folder on
    disk is a row of the table (runs that finished as the sweep stopped were on disk but not in it). SIGTERM to
    the group (`timeout`, a batch scheduler) the same, exit 143 (r154: the workers died first, an internal
    error; to the command alone it ended silent, mid-write)."""
    import io
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "servesim", "sweep", "--grid",
           "workload.arrival.rate=" + ",".join(str(r) for r in range(2, 14)), "--set", "workload.num_requests=1500",
           "--set", "profile=teaching", "--jobs", "2", "--no-progress", "--out", str(tmp_path)]
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # read whole before parsing: the sweep replaces the file (atomically) after each run, and pyarrow reading
        # the path met a replacement partway once ("Couldn't deserialize thrift"): its footer from one file, its
        # rows from the next
        table_now = lambda: pd.read_parquet(io.BytesIO((tmp_path / "sweep.parquet").read_bytes()))  # noqa: E731
        while not (tmp_path / "sweep.parquet").is_file() or not len(table_now()):
            assert p.poll() is None and time.monotonic() < deadline, "the sweep ended or stalled before a first run"
            time.sleep(0.05)
        os.killpg(p.pid, getattr(signal, sig))
        _, err = p.communicate(timeout=60)  # a sweep that waited for its queued points took far longer
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == code and f"servesim: {said}" in err and "internal error" not in err, err
    time.sleep(1.5)  # a worker left running would write another run folder meanwhile
    on_disk = sorted(x.name for x in (tmp_path / "runs").iterdir())
    table = pd.read_parquet(tmp_path / "sweep.parquet")
    assert on_disk == sorted(table["run_id"]), (on_disk, list(table["run_id"]))
    assert 1 <= len(table) < 12


def test_cli(tmp_path, capsys):
    assert main(["sweep", "--grid", "workload.arrival.rate=3,6", "--out", str(tmp_path), "--jobs", "1",
                 "--no-progress"] + [x for s in BASE for x in ("--set", s)]) == 0
    assert "2 runs (0 failed)" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "sweep.csv")) == 2


def test_ray_executor_matches_the_process_pool(tmp_path):
    pytest.importorskip("ray", reason="ray is an optional extra: pip install -e '.[ray]'")
    pts = sw.expand(["workload.arrival.rate=4,8"], [], seeds=1)
    local = sw.sweep(None, BASE, pts, tmp_path / "p", jobs=2, progress=False)
    ray = sw.sweep(None, BASE, pts, tmp_path / "r", executor="ray", progress=False)
    pd.testing.assert_frame_equal(local, ray)


def test_cli_exit_codes_say_when_runs_failed_or_none_were_asked_for(tmp_path, capsys):
    sets = [x for s in BASE for x in ("--set", s)]
    assert main(["sweep", "--grid", "engine.tensor_parallel_size=1,3", "--out", str(tmp_path / "a"), "--jobs", "1",
                 "--no-progress"] + sets) == 1
    captured = capsys.readouterr()
    assert "2 runs (1 failed)" in captured.out and "servesim: error: 1 of 2 sweep runs failed" in captured.err
    assert main(["sweep", "--grid", "workload.arrival.rate=3", "--seeds", "0", "--out", str(tmp_path / "b"),
                 "--no-progress"] + sets) == 2
    assert "servesim: error: sweep: argument --seeds: must be >= 1, got 0" in capsys.readouterr().err


def test_the_scenario_seed_starts_the_seeds_and_a_rewritten_trace_runs_again(tmp_path, capsys):
    """A sweep's seeds start at the scenario's `seed` (it ran seed 0 beside `seed: 7` or --set seed=7), and a trace
    rewritten under the same name is simulated again, not answered from the old run."""
    import servesim

    sets = ["workload.num_requests=30", "seed=7"]
    assert main(["sweep", "--grid", "engine.max_num_seqs=8", *sum((["--set", s] for s in sets), []),
                 "--out", str(tmp_path / "s"), "--jobs", "1", "--no-progress"]) == 0
    row = pd.read_parquet(tmp_path / "s" / "sweep.parquet").iloc[0]
    single = servesim.simulate(None, {"workload.num_requests": 30, "seed": 7, "engine.max_num_seqs": 8}).summary
    assert row["seed"] == 7 and row["mean_ttft_ms"] == single["mean_ttft_ms"]
    trace = tmp_path / "t.jsonl"
    from servesim.workloads.traces import write_jsonl

    write_jsonl(servesim.resolve(None, {"workload.num_requests": 20}).scenario.workload.source(0).initial(), trace)
    grid = {"engine.max_num_seqs": [8]}
    first = servesim.sweep(None, grid, {"workload": {"type": "trace", "path": str(trace)}}, out=tmp_path / "t")
    write_jsonl(servesim.resolve(None, {"workload.num_requests": 10}).scenario.workload.source(0).initial(), trace)
    again = servesim.sweep(None, grid, {"workload": {"type": "trace", "path": str(trace)}}, out=tmp_path / "t")
    assert (first["completed"].iloc[0], again["completed"].iloc[0]) == (20, 10)
    assert first["run_id"].iloc[0] != again["run_id"].iloc[0]


def test_a_warning_is_said_once_for_the_sweep_not_once_per_worker(tmp_path, capfd):
    """Each worker process printed its own copy of every warning."""
    pts = sw.expand(["workload.arrival.rate=4,8", "engine.max_num_seqs=8,32"], [], seeds=1)
    sw.sweep(None, BASE + ["cluster.router=random"], pts, tmp_path / "s", jobs=2, progress=False)
    err = capfd.readouterr().err
    assert err.count("cluster.router has no effect") == 1, err


@pytest.mark.parametrize("sets, grid, says", [
    (["hardware.gpu=a100"], "engine.max_num_seqs=8,16", "hardware.gpu: unknown GPU 'a100'"),
    (["model=Llama-3.1-8B"], "engine.max_num_seqs=8,16", "model: unknown model 'Llama-3.1-8B'"),
    (["profile=nonexistent"], "engine.max_num_seqs=8,16", "profile: unknown profile 'nonexistent'"),
    ([], "hardware.gpu=h100-sxm,h100", "hardware.gpu: unknown GPU 'h100'"),
])
def test_a_name_that_fails_every_run_is_one_line_before_any(tmp_path, capsys, sets, grid, says):
    """r147: a misspelt GPU, model or profile in a --set failed every run: a table of failed runs and exit 1."""
    argv = ["sweep", "--set", "workload.num_requests=5", *[a for s in sets for a in ("--set", s)], "--grid", grid,
            "--no-progress", "--out", str(tmp_path / "s")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_two_points_resolving_to_one_run_keep_a_row_each(tmp_path, jobs):
    """r147: an axis a point does not read (moe.routing on a dense model) made two points one run, and the later
    point's row replaced the earlier's: 3 rows for 4 points, `balanced` gone for the dense model."""
    pts = sw.expand(["model=tiny-llama,qwen3-30b-a3b", "moe.routing=balanced,power_law_1.2"], [], seeds=1)
    sets = ["workload.num_requests=10", "engine.max_model_len=4096"]
    table = sw.sweep(None, sets, pts, tmp_path, jobs=jobs, progress=False)
    cells = list(zip(table["model"], table["moe.routing"]))
    assert cells == [(m, r) for m in ("tiny-llama", "qwen3-30b-a3b") for r in ("balanced", "power_law_1.2")]
    dense = table[table["model"] == "tiny-llama"]
    assert dense["run_id"].nunique() == 1 and table["run_id"].nunique() == 3
    pd.testing.assert_frame_equal(sw.sweep(None, sets, pts, tmp_path, jobs=jobs, progress=False), table)  # reused


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweep_says_what_each_run_said_at_its_end_also_when_reused(tmp_path, capfd, jobs):
    """r146: a sweep run cut by max_sim_time_s (requests unfinished, never arrived) said nothing, where `servesim run`
    warns; a rerun reusing the run says it again (point.json keeps it)."""
    pts = sw.expand(["engine.max_num_seqs=8,32"], [], seeds=1)
    cut = BASE + [f"simulation.max_sim_time_s={2.5 + jobs / 8}"]  # text no other test's warning has
    first = sw.sweep(None, cut, pts, tmp_path, jobs=jobs, progress=False)
    err = capfd.readouterr().err
    for rid, seqs in zip(first["run_id"], (8, 32)):
        assert f"sweep run {rid} (engine.max_num_seqs={seqs}, seed=0): simulation.max_sim_time_s=" in err, err
    from servesim.simulator import config

    config._WARNED.clear()  # a new process's
    again = sw.sweep(None, cut, pts, tmp_path, jobs=jobs, progress=False)
    pd.testing.assert_frame_equal(again, first)
    assert capfd.readouterr().err.count("ended the run") == 2


@pytest.mark.parametrize("damage", ['{"mean_ttft', "[1, 2]", '{"completed": 3, "mean_ttft_ms": "abc"}',
                                    '{"completed": 5}', "requests.parquet", "steps.parquet=garbage"])
def test_a_damaged_finished_run_is_simulated_again(tmp_path, damage, capfd):
    """Round 24: a cut or edited summary.json in a finished run was an internal error on resume (exit 3), after the
    table had been cut to the runs read before it. Round 102: a summary edited down to {"completed": 5} (a row
    without its metrics) or a run whose requests.parquet is gone was reused."""
    pts = sw.expand(["workload.arrival.rate=4,8"], [], seeds=1)
    first = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    folder = tmp_path / "runs" / first["run_id"][0]
    if damage.endswith(".parquet"):  # round 102: a run without it was reused
        (folder / damage).unlink()
    elif damage.endswith("=garbage"):  # round 104: one that is no parquet was reused
        (folder / damage.split("=")[0]).write_text("garbage")
    else:
        (folder / "summary.json").write_text(damage)
    again = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    pd.testing.assert_frame_equal(again, first)
    assert "is damaged (its summary.json edited or cut short, a file of" in capfd.readouterr().err
    assert (folder / "requests.parquet").is_file()


def test_round_29_axes_zips_and_overlapping_sets():
    """A zipped setting may repeat a value (the combinations differ); slo_classes in another order are another run
    (order decides each request's class); a --set inside a section an axis replaces (or the reverse) was dropped
    unsaid; a backslash-escaped quote split a --grid value."""
    pts = sw.expand([], ["workload.arrival.rate=2,2,4,4", "engine.max_num_batched_tokens=512,2048,512,2048"], 1)
    assert len(pts) == 4
    with pytest.raises(ConfigError, match="combination of the zipped values is listed twice"):
        sw.expand([], ["a=1,1", "b=2,2"], 1)
    two = sw.expand(["workload.slo_classes={a: {ttft_ms: 100}, b: {ttft_ms: 1000}},"
                     "{b: {ttft_ms: 1000}, a: {ttft_ms: 100}}"], [], 1)
    assert len(two) == 2
    for grid, fixed in ((["engine={max_num_seqs: 4},{max_num_seqs: 8}"], ["engine.max_num_batched_tokens=512"]),
                        (["engine.max_num_seqs=4,8"], ["engine={max_num_seqs: 16}"])):
        with pytest.raises(ConfigError, match="overlap"):
            sw.expand(grid, [], 1, fixed=fixed)
    assert [p["name"] for p in sw.expand(['name="x\\"y",z'], [], 1)] == ['x"y', "z"]


def test_a_profile_axis_beside_a_profile_edit_is_named_as_the_overlap(tmp_path, capsys):
    """Round 89: --grid profile=A,B beside --set profile.coefficients.X was refused as 'profile auto is chosen'
    (the seed's reading applied every --set to the scenario first), not as the overlap it is."""
    assert main(["sweep", "--grid", "profile=teaching,roofline", "--set", "profile.coefficients.step_overhead_ms=3",
                 "--set", "workload.num_requests=5", "--out", str(tmp_path / "s")]) == 2
    assert "--grid: profile and --set profile.coefficients.step_overhead_ms overlap" in capsys.readouterr().err
    assert sw.first_seed(None, ["profile.coefficients.step_overhead_ms=3", "seed=7"], None) == 7


def test_round_30_axis_pairs_canonical_values_and_plain_apostrophes():
    """Two axes of which one lies inside the other ran with one dropped and the table crediting it; mappings that
    differ only in key order ran twice after round 29 (only slo_classes' order makes another run); an apostrophe in
    a plain value opened a quote and swallowed the next value; slo_classes cells hid the order that made the run."""
    for grids, zips in ((["workload.arrival.rate=1,2", "workload={num_requests: 10},{num_requests: 20}"], []),
                        (["workload.arrival.rate=1,2"], ["workload.arrival={process: poisson, rate: 3},"
                                                         "{process: poisson, rate: 5}"])):
        with pytest.raises(ConfigError, match="overlap"):
            sw.expand(grids, zips, 1)
    with pytest.raises(ConfigError, match="lists a value twice"):
        sw.expand(["workload.prompt_tokens={dist: fixed, value: 64},{value: 64, dist: fixed}"], [], 1)
    with pytest.raises(ConfigError, match="listed twice"):
        sw.expand([], ["workload.prompt_tokens={dist: fixed, value: 64},{value: 64, dist: fixed}", "a=1,1"], 1)
    assert [p["name"] for p in sw.expand(["name=it's,b"], [], 1)] == ["it's", "b"]
    pts = sw.expand(["workload.slo_classes={a: {ttft_ms: 1}, b: {ttft_ms: 2}},{b: {ttft_ms: 2}, a: {ttft_ms: 1}}"],
                    [], 1)
    cells = [sw.table_cells(p)["workload.slo_classes"] for p in pts]
    assert cells[0] != cells[1] and cells[0].index('"a"') < cells[0].index('"b"')


def test_the_table_holds_any_grid_in_the_grids_order(tmp_path):
    """An axis mixing text and numbers (max_model_len auto or 4096) is written as text: it crashed parquet; an
    integer axis with an unset value stays whole; rows come in the order the values were given (a mapping's JSON
    text sorted {value: 10} before {value: 1})."""
    pts = sw.expand(["engine.max_model_len=4096,auto", "engine.max_num_seqs=null,16",
                     "workload.output_tokens={dist: fixed, value: 1},{dist: fixed, value: 10}"], [], seeds=1)
    table = sw.sweep(None, BASE[1:] + ["workload.num_requests=10"], pts, tmp_path, jobs=1, progress=False)
    read = pd.read_parquet(tmp_path / "sweep.parquet")
    assert table["error"].isna().all() and len(read) == 8
    assert list(read["engine.max_model_len"]) == ["4096"] * 4 + ["auto"] * 4
    assert read["engine.max_num_seqs"].dtype == "Int64"
    rows = [(m, None if pd.isna(n) else int(n), json.loads(o)["value"]) for m, n, o in
            zip(read["engine.max_model_len"], read["engine.max_num_seqs"], read["workload.output_tokens"])]
    assert rows == list(itertools.product(["4096", "auto"], [None, 16], [1, 10]))  # the grid's own order
    assert list(pd.read_csv(tmp_path / "sweep.csv")["engine.max_num_seqs"][:3].fillna(0)) == [0, 0, 16]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a process's children from Linux's /proc")
def test_a_sigkilled_sweeps_workers_end_with_it(tmp_path):
    """kill -9 of the sweep (nothing of it runs) left its two workers simulating, writing run folders, then
    waiting forever on their queue (round 70): they now end within about a second of it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "servesim", "sweep", "--grid", "workload.arrival.rate=5,10,20,40",
           "--set", "workload.num_requests=200000", "--set", "profile=teaching", "--jobs", "2", "--no-progress",
           "--quiet", "--out", str(tmp_path)]
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        return [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]

    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2:
            assert p.poll() is None and time.monotonic() < deadline, "the sweep ended before its workers started"
            workers = children()
            time.sleep(0.1)
        time.sleep(1.0)  # the workers are simulating
        p.kill()
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [w for w in alive if Path(f"/proc/{w}").is_dir() and
                     Path(f"/proc/{w}/stat").read_text().split(") ")[-1][0] != "Z"]
        assert not alive, f"workers {alive} outlived their sweep"
    finally:
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_sweeps_record_holds_every_point_it_ran(tmp_path):
    """r119: sweep.yaml held the --set list and a count of points, not the grid, zipped axes or seeds: the sweep
    could not be repeated from its own record."""
    import yaml

    from servesim.simulator.cli import main

    assert main(["sweep", "--set", "workload.num_requests=5", "--grid", "workload.arrival.rate=5,20",
                 "--zip", "engine.max_num_seqs=4,64", "--zip", "engine.max_num_batched_tokens=2048,4096",
                 "--seeds", "2", "--out", str(tmp_path), "--quiet", "--no-progress"]) == 0
    grid = yaml.safe_load((tmp_path / "sweep.yaml").read_text())["grid"]
    assert len(grid) == 8 and {(p["workload.arrival.rate"], p["engine.max_num_seqs"],
                                p["engine.max_num_batched_tokens"], p["seed"]) for p in grid} == \
        {(r, s, b, seed) for r in (5, 20) for s, b in ((4, 2048), (64, 4096)) for seed in (0, 1)}


def test_a_sweep_whose_runs_complete_nothing_says_so(tmp_path, capsys):
    """r123: every point's requests rejected (prompts over max_model_len) ran as '2 runs (0 failed)' without a word,
    where one such run says its metrics are empty."""
    from servesim.simulator.cli import main

    assert main(["sweep", "--set", "workload.num_requests=5", "--grid", "engine.max_model_len=100,110", "--set",
                 "workload.prompt_tokens={dist: fixed, value: 150}", "--set", "workload.clip_to_max_model_len=false",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    assert "2 of 2 sweep runs completed no request" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["swap", "edit", "link", "empty-requests"])
def test_a_run_folder_whose_files_are_not_what_its_run_wrote_is_simulated_again(tmp_path, damage, capfd):
    """r149: two runs' summaries swapped (or one linked to another's, a number edited, an empty requests table)
    were reused: the rate-4 row showed the rate-8 run's figures, no word."""
    pts = sw.expand(["workload.arrival.rate=4,8"], [], seeds=1)
    first = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    a, b = (tmp_path / "runs" / rid for rid in first["run_id"])
    if damage == "swap":
        x, y = (a / "summary.json").read_bytes(), (b / "summary.json").read_bytes()
        (a / "summary.json").write_bytes(y)
        (b / "summary.json").write_bytes(x)
    elif damage == "edit":
        (a / "summary.json").write_text((a / "summary.json").read_text().replace('"completed": 60', '"completed": 6'))
    elif damage == "link":
        (a / "summary.json").unlink()
        (a / "summary.json").symlink_to(b / "summary.json")
    else:
        pd.read_parquet(a / "requests.parquet").iloc[:0].to_parquet(a / "requests.parquet")
    again = sw.sweep(None, BASE, pts, tmp_path, jobs=1, progress=False)
    pd.testing.assert_frame_equal(again, first)
    assert "is damaged" in capfd.readouterr().err


FAST = ["profile=teaching", "workload.num_requests=20", "workload.prompt_tokens={dist: fixed, value: 64}",
        "workload.output_tokens={dist: fixed, value: 4}"]


def test_round_151_rows_follow_the_zip_and_damaged_names_are_said(tmp_path, capsys):
    """r151: a zip repeating one key's value had its rows sorted by that column ((8,1), (8,3), (4,2) for the points
    (8,1), (4,2), (8,3)); a file at a run's name failed the run (NotADirectoryError), a file at runs/ was "File
    exists", a folder at a table's temporary name failed after the record was written."""
    sets = sum((["--set", s] for s in FAST), [])
    assert main(["sweep", "--quiet", *sets, "--zip", "engine.max_num_seqs=8,4,8", "--zip",
                 "workload.arrival.rate=1,2,3", "--out", str(tmp_path / "z")]) == 0
    t = pd.read_csv(tmp_path / "z" / "sweep.csv")
    assert list(zip(t["engine.max_num_seqs"], t["workload.arrival.rate"])) == [(8, 1), (4, 2), (8, 3)]
    first = t["run_id"][0]
    import shutil

    shutil.rmtree(tmp_path / "z" / "runs" / first)
    (tmp_path / "z" / "runs" / first).write_text("not a run")
    assert main(["sweep", "--quiet", *sets, "--zip", "engine.max_num_seqs=8,4,8", "--zip",
                 "workload.arrival.rate=1,2,3", "--out", str(tmp_path / "z")]) == 0
    assert (tmp_path / "z" / "runs" / first / "summary.json").is_file()
    for name, make in (("runs", lambda p: p.write_text("")), (".sweep.csv.tmp", lambda p: p.mkdir())):
        out = tmp_path / name.strip(".")
        out.mkdir()
        make(out / name)
        capsys.readouterr()
        assert main(["sweep", "--quiet", *sets, "--out", str(out)]) == 2
        assert f"{out / name} is a " in capsys.readouterr().err and not (out / "sweep.yaml").exists()


def test_round_154_a_run_that_succeeds_removes_its_earlier_failure_and_the_record_names_the_scenario_whole(
        tmp_path, monkeypatch):
    """r154: a run that failed once (a full disk) and then succeeded kept its empty error file beside it; and
    sweep.yaml recorded a relative scenario path as given, which names another file from another folder."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {num_requests: 30}\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    args = ["sweep", "s.yaml", "--grid", "engine.max_num_seqs=4,8", "--out", str(out), "--jobs", "1",
            "--no-progress", "--quiet"]
    assert main(args) == 0
    rid = pd.read_csv(out / "sweep.csv")["run_id"][0]
    (out / "runs" / f"{rid}.error.txt").write_text("")
    shutil.rmtree(out / "runs" / rid)
    assert main(args) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(pd.read_csv(out / "sweep.csv")["run_id"])
    assert yaml.safe_load((out / "sweep.yaml").read_text())["scenario"] == str(scenario)


def test_round_159_a_point_that_could_not_be_resolved_then_ran_leaves_no_error_file(tmp_path):
    """r159: a point failing as it was read (a damaged trace) keys its error file by what was asked; once it ran,
    that file stayed beside its run."""
    bad = tmp_path / "t.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n")
    args = ["sweep", "--set", "profile=teaching", "--set", f"workload={{type: trace, path: {bad}}}", "--grid",
            "engine.max_num_seqs=4,8", "--out", str(tmp_path / "o"), "--jobs", "1", "--no-progress", "--quiet"]
    assert main(args) == 1 and len(list((tmp_path / "o" / "runs").glob("*.error.txt"))) == 2
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,30,4\n")
    assert main(args) == 0
    assert sorted(p.name for p in (tmp_path / "o" / "runs").iterdir()) == \
        sorted(pd.read_csv(tmp_path / "o" / "sweep.csv")["run_id"])


def test_round_157_a_whole_float_for_an_integer_setting_is_tabled_as_the_int_that_ran(tmp_path):
    """r157: --grid engine.max_num_seqs=1e1,20 ran 10 sequences but wrote 10.0 in sweep.csv; a float setting's
    values stay floats."""
    assert main(["sweep", "--set", "workload.num_requests=4", "--set", "profile=teaching", "--grid",
                 "engine.max_num_seqs=1e1,20", "--grid", "workload.arrival.rate=2,3.5", "--out", str(tmp_path / "s"),
                 "--no-progress", "--quiet"]) == 0
    table = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert table["engine.max_num_seqs"].tolist() == [10, 10, 20, 20] and table["engine.max_num_seqs"].dtype == int
    assert table["workload.arrival.rate"].tolist() == [2.0, 3.5, 2.0, 3.5]


def test_round_159_counts_stay_whole_beside_a_failed_run(tmp_path):
    """r159: a failed run's empty cells made every count a float in sweep.csv and --json (completed 10.0 where the
    run's summary.json says 10)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n")
    good = tmp_path / "good.csv"
    good.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,30,4\n")
    assert main(["sweep", "--set", "workload.num_requests=10", "--set", "profile=teaching", "--zip",
                 "workload.arrival.rate=2,4", "--zip", f"workload.lengths={{path: {bad}}},{{path: {good}}}",
                 "--out", str(tmp_path / "s"), "--no-progress", "--quiet"]) == 1
    table = pd.read_parquet(tmp_path / "s" / "sweep.parquet")
    assert str(table["completed"].dtype) == "Int64" and table["completed"].tolist()[1] == 10
    assert ",10,0," in (tmp_path / "s" / "sweep.csv").read_text()


def test_round_166_a_sweep_none_of_whose_runs_finished_still_has_the_metrics_columns(tmp_path):
    """r166: every run failing left the table without its summary columns (README: "every summary metric"), so a
    notebook's table["completed"] was a bare KeyError, where one run finishing gives them all."""
    import servesim

    failed = servesim.sweep(None, {"engine.num_gpu_blocks_override": [3, 4]}, {"workload.num_requests": 20},
                            out=tmp_path / "failed")
    one = servesim.sweep(None, {"engine.num_gpu_blocks_override": [3, 400]}, {"workload.num_requests": 20},
                         out=tmp_path / "one")
    assert list(failed.columns) == list(one.columns) and failed.columns[-1] == "error"
    assert failed[["completed", "p99_ttft_ms"]].isna().all().all() and failed["error"].notna().all()
    assert list(pd.read_csv(tmp_path / "failed" / "sweep.csv").columns) == list(one.columns)


def test_round_167_the_tables_columns_follow_the_grid_not_the_runs_found_first(tmp_path):
    """r167: columns only some runs' summaries hold (goodput's, with SLO classes) took the place of the first run
    to finish or be found on disk: a rerun into a folder holding the gold point alone wrote another header."""
    gold = "{gold: {weight: 1, ttft_ms: 200}}"
    assert main(["sweep", "--quiet", "--no-progress", "--set", "workload.num_requests=20", "--grid",
                 f"workload.slo_classes=null,{gold}", "--out", str(tmp_path / "s")]) == 0
    table = pd.read_parquet(tmp_path / "s" / "sweep.parquet")
    rows = [{k: v for k, v in row.items() if not (isinstance(v, float) and v != v)}  # a summary key it lacks
            for row in table.to_dict("records")]
    points = [{"workload.slo_classes": None}, {"workload.slo_classes": {"gold": {"weight": 1, "ttft_ms": 200}}}]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    written = [sw.write_table(order, tmp_path / name, ["workload.slo_classes"], points)
               for order, name in ((rows, "a"), (rows[::-1], "b"))]  # finished (or found) in either order
    assert list(written[0].columns) == list(written[1].columns)
    assert (tmp_path / "a" / "sweep.csv").read_bytes() == (tmp_path / "b" / "sweep.csv").read_bytes()


def test_round_168_a_failed_first_point_leaves_the_columns_as_they_are(tmp_path):
    """r168: a grid whose first point failed put `error` 4th, every metric after it; its reverse put it last."""
    tables = []
    for grid in ("engine.tensor_parallel_size=3,1", "engine.tensor_parallel_size=1,3"):
        assert main(["sweep", "--quiet", "--no-progress", "--set", "workload.num_requests=20", "--grid", grid,
                     "--out", str(tmp_path / grid[-3:].replace(",", ""))]) == 1
        tables.append(pd.read_csv(tmp_path / grid[-3:].replace(",", "") / "sweep.csv"))
    assert list(tables[0].columns) == list(tables[1].columns) and tables[0].columns[-1] == "error"


def test_round_170_seeds_that_draw_nothing_are_said_to_give_copies(tmp_path, capsys):
    """r170: --seeds 2 of a trace replay ran two identical copies per point, averaged with a spread of 0, unsaid."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 200 * i, "input_length": 50 + i, "output_length": 8}) + "\n"
                             for i in range(12)))
    argv = ["sweep", "--grid", "engine.max_num_seqs=2,8", "--seeds", "2", "--no-progress"]
    assert main([*argv, "--set", f"workload={{type: trace, path: {trace}}}", "--out", str(tmp_path / "t")]) == 0
    assert "at every point, the runs of seeds 0, 1 measured the same to the last bit" in capsys.readouterr().err
    assert main([*argv, "--set", "workload.num_requests=12", "--out", str(tmp_path / "s")]) == 0  # drawn: unsaid
    assert "measured the same" not in capsys.readouterr().err
    # r171: a trace's classes drawn from the seed, whose goodput happened to agree, were called copies
    classes = "slo_classes: {a: {weight: 1, ttft_ms: 100000}, b: {weight: 1, ttft_ms: 100000}}"
    assert main([*argv, "--set", f"workload={{type: trace, path: {trace}, {classes}}}",
                 "--out", str(tmp_path / "c")]) == 0
    assert "measured the same" not in capsys.readouterr().err
