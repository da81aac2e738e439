"""Every plot kind renders from real sweep / search / run outputs; wrong inputs are named."""

from pathlib import Path

import numpy as np
import pytest

from servesim.simulator.cli import main

SETS = ["workload.num_requests=80", "workload.slo_classes={chat: {ttft_ms: 1000}}"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    args = ["sweep", "docs/scenarios/essay-batching.yaml", "--grid", "workload.arrival.rate=2,6",
            "--grid", "engine.max_num_batched_tokens=256,2048", "--out", str(out), "--jobs", "1", "--no-progress"]
    assert main(args + [x for s in SETS for x in ("--set", s)]) == 0
    return out


@pytest.mark.parametrize("kind", ["latency-vs-rate", "pareto", "goodput"])
def test_sweep_plots(swept, kind, capsys):
    assert main(["plot", str(swept), "--kind", kind, "--by", "engine.max_num_batched_tokens"]) == 0
    for ext in ("png", "svg"):
        assert (swept / f"plot-{kind}.{ext}").stat().st_size > 5000


def test_timeline_and_capacity(swept, tmp_path, capsys):
    run = next((swept / "runs").iterdir())
    assert main(["plot", str(run), "--kind", "timeline"]) == 0
    assert (run / "plot-timeline.png").stat().st_size > 5000
    assert main(["plot", str(run), "--kind", "timeline", "--out", str(tmp_path / "mine.png")]) == 0  # not mine.png.png
    assert (tmp_path / "mine.png").is_file() and (tmp_path / "mine.svg").is_file()
    assert main(["search", "max-rate", "docs/scenarios/essay-batching.yaml", "--slo", "ttft_p99_ms=1000",
                 "--grid", "engine.max_num_seqs=8,16", "--set", "workload.num_requests=80", "--out", str(tmp_path),
                 "--tolerance", "0.5"]) == 0  # a coarse bracket: the plot is under test, not the search
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "engine.max_num_seqs"]) == 0
    assert (tmp_path / "plot-capacity.png").stat().st_size > 5000
    capsys.readouterr()  # a capacity table has no rate column: --by named (it said --x, round 67)
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "workload.arrival.rate"]) == 2
    assert "--by: 'workload.arrival.rate' is not a column" in capsys.readouterr().err


def test_pareto_needs_no_load_axis_and_colours_names_or_numbers(tmp_path, capsys):
    """A sweep of settings only (no arrival-rate column), coloured by a policy name, by a number,
    or not at all: every one renders without a warning."""
    import warnings

    out = tmp_path / "s"
    assert main(["sweep", "--grid", "policies.queue=fcfs,sjf", "--grid", "engine.max_num_seqs=8,16",
                 "--set", "workload.num_requests=30", "--set", "profile=teaching", "--out", str(out),
                 "--jobs", "1", "--no-progress"]) == 0
    for by in ([], ["--by", "policies.queue"], ["--by", "engine.max_num_seqs"]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert main(["plot", str(out), "--kind", "pareto"] + by) == 0
        assert (out / "plot-pareto.png").stat().st_size > 5000
    # a few numbers (token budgets, sequence caps) are categories, each named in the legend
    assert "max_num_seqs = 8" in (out / "plot-pareto.svg").read_text()


def test_pareto_colours_many_numbers_on_a_scale(tmp_path, capsys):
    out = tmp_path / "s"
    seqs = ",".join(str(n) for n in range(4, 16))  # more values than legend entries can name
    assert main(["sweep", "--grid", f"engine.max_num_seqs={seqs}", "--set", "workload.num_requests=20",
                 "--set", "profile=teaching", "--out", str(out), "--jobs", "1", "--no-progress"]) == 0
    assert main(["plot", str(out), "--kind", "pareto", "--by", "engine.max_num_seqs"]) == 0
    svg = (out / "plot-pareto.svg").read_text()
    assert "max_num_seqs = 8" not in svg and "max_num_seqs" in svg  # the colour bar's label, no legend entries


def test_plot_errors(swept, tmp_path, capsys):
    assert main(["plot", str(tmp_path), "--kind", "pareto"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["plot", str(swept), "--kind", "latency-vs-rate", "--by", "no.such.column"]) == 2
    assert "no.such.column" in capsys.readouterr().err
    assert main(["plot", str(swept), "--kind", "goodput", "--by", "workload.arrival.rate"]) == 2  # the x axis too
    assert "--by: 'workload.arrival.rate' is the --x axis already" in capsys.readouterr().err


@pytest.mark.parametrize("out", [".", "folder/", "folder", "a.v2"])
def test_plot_out_is_a_folder_or_a_name_with_dots(tmp_path, monkeypatch, out):
    """--out . or an existing folder puts the plot inside it; a dot in a file name is kept."""
    from servesim.simulator.cli import main

    run = tmp_path / "run"
    assert main(["run", "--set", "workload.num_requests=20", "--set", "profile=teaching", "--out", str(run),
                 "--quiet"]) == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    assert main(["plot", str(run), "--kind", "timeline", "--out", out]) == 0
    expect = tmp_path / "plot-timeline.png" if out == "." else \
        tmp_path / "folder" / "plot-timeline.png" if out.startswith("folder") else tmp_path / "a.v2.png"
    assert expect.is_file()


def test_timeline_draws_one_line_per_replica(tmp_path, monkeypatch, capsys):
    """Replicas' steps interleave in time: each gets its own line (a single one zig-zagged between them)."""
    import pandas as pd

    from servesim.simulator import plots

    run = tmp_path / "run"
    assert main(["run", "--set", "workload.num_requests=60", "--set", "workload.arrival.rate=30",
                 "--set", "cluster.replicas=3", "--out", str(run), "--quiet"]) == 0
    steps = pd.read_parquet(run / "steps.parquet")
    drawn = []
    monkeypatch.setattr(plots, "_figure", lambda path, fig: drawn.append(fig) or [])
    plots.timeline(steps, tmp_path / "t")
    (requests, kv, _), = [f.axes for f in drawn]
    assert len(requests.lines) == 6 and len(kv.lines) == 3
    for k, r in enumerate(range(3)):
        line = requests.lines[2 * k + 1]
        assert line.get_label() == f"running (replica {r})"
        ran = line.get_ydata()  # each step's count, and 0 where the replica sat idle
        assert ran[ran > 0].tolist() == [n for n in steps.loc[steps["replica"] == r, "num_running"] if n > 0]
    drawn.clear()
    plots.timeline(steps[steps["replica"] == 0], tmp_path / "one")
    assert [x.get_label() for x in drawn[0].axes[0].lines] == ["waiting", "running"]


def _damaged(swept, tmp_path, name, **columns):
    import shutil

    import pandas as pd

    copy = tmp_path / "damaged"
    shutil.copytree(swept, copy, dirs_exist_ok=True)
    path = copy / name
    t = pd.read_parquet(path) if name.endswith(".parquet") else pd.read_csv(path)
    for col, value in columns.items():
        t[col] = value if not callable(value) else value(t)
    t.to_parquet(path) if name.endswith(".parquet") else t.to_csv(path, index=False)
    return copy


@pytest.mark.parametrize("kind, column, value, needle", [
    ("latency-vs-rate", "p99_ttft_ms", "x", "column p99_ttft_ms must hold numbers"),  # was KeyError, exit 3
    ("latency-vs-rate", "p99_tpot_ms", lambda t: [[1]] * len(t), "column p99_tpot_ms must hold numbers"),
    ("pareto", "p99_tpot_ms", lambda t: [[1]] * len(t), "column p99_tpot_ms must hold numbers"),
    ("latency-vs-rate", "p99_ttft_ms", -1.0, "column p99_ttft_ms must be finite, non-negative and at most 1e+15, got -1.0"),
    ("goodput", "workload.arrival.rate", float("inf"), "column workload.arrival.rate must be finite"),
])
def test_a_damaged_sweep_table_is_one_line(swept, tmp_path, capsys, kind, column, value, needle):
    copy = _damaged(swept, tmp_path, "sweep.parquet", **{column: value})
    assert main(["plot", str(copy), "--kind", kind, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_damaged_capacity_table_or_timeline_is_one_line(swept, tmp_path, capsys):
    (tmp_path / "c").mkdir()
    for text, needle in (("max_rate,fails_at\nnan,inf\n-5,3\n", "max_rate must be finite, non-negative and at most 1e+15, got -5.0"),
                         ("max_rate,fails_at\nabc,def\n", "column max_rate must hold numbers")):
        (tmp_path / "c" / "max_rate.csv").write_text(text)
        assert main(["plot", str(tmp_path / "c"), "--kind", "capacity"]) == 2  # crashed in matplotlib, exit 3
        assert needle in capsys.readouterr().err
    run = next((swept / "runs").iterdir())
    copy = _damaged(run, tmp_path, "steps.parquet", kv_usage="x")  # drawn as a row of "x" tick labels, exit 0
    assert main(["plot", str(copy), "--kind", "timeline", "--out", str(tmp_path / "t")]) == 2
    assert "column kv_usage must hold numbers" in capsys.readouterr().err


def test_averaging_over_another_swept_setting_is_said_and_svgs_repeat(swept, tmp_path, capsys):
    """Without --by, each rate's point averaged the 256- and 2048-token budgets: a TTFT neither deployment has."""
    assert main(["plot", str(swept), "--kind", "latency-vs-rate", "--out", str(tmp_path / "a")]) == 0
    assert ("the table also varies engine.max_num_batched_tokens: each point averages over it (split the lines "
            "with --by engine.max_num_batched_tokens)") in capsys.readouterr().err
    assert main(["plot", str(swept), "--kind", "latency-vs-rate", "--out", str(tmp_path / "b"),
                 "--by", "engine.max_num_batched_tokens"]) == 0
    assert "averages" not in capsys.readouterr().err
    assert main(["plot", str(swept), "--kind", "latency-vs-rate", "--out", str(tmp_path / "c"),
                 "--by", "engine.max_num_batched_tokens"]) == 0
    for ext in ("png", "svg"):  # the SVG carried a date and random clip-path ids
        assert (tmp_path / f"b.{ext}").read_bytes() == (tmp_path / f"c.{ext}").read_bytes()


def test_an_out_no_file_system_takes_is_one_line(tmp_path, capsys):
    assert main(["run", "--set", "workload.num_requests=3", "--out", str(tmp_path / ("a" * 300))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # refused as the flag is read (r143: every CLI path flag takes the API's path checks)
    assert len(err) == 1 and err[0].startswith("servesim: error: run: argument --out: ") and \
        "a name past the file system's 255 bytes" in err[0]


def test_the_averaging_warning_follows_what_varies_at_one_load(tmp_path, capsys):
    """A zipped budget moves with the rate (nothing averaged: the warning was false); a swept profile, a top-level
    setting, was averaged without one."""
    base = ["--set", "workload.num_requests=10", "--no-progress", "--jobs", "1"]
    assert main(["sweep", "--zip", "workload.arrival.rate=2,4", "--zip", "engine.max_num_batched_tokens=512,2048",
                 "--seeds", "2", "--out", str(tmp_path / "z")] + base) == 0
    assert main(["sweep", "--grid", "workload.arrival.rate=2,4", "--grid", "profile=teaching,roofline",
                 "--out", str(tmp_path / "p")] + base) == 0
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "z"), "--kind", "latency-vs-rate"]) == 0
    assert "averages" not in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "p"), "--kind", "latency-vs-rate"]) == 0
    assert "the table also varies profile: each point averages over it" in capsys.readouterr().err


def test_a_capacity_plot_averages_rows_sharing_a_bar_and_says_so(tmp_path, capsys):
    """Round 45: --by a column whose values repeat (a seed axis beside it) drew overlapping bars labelled by row
    number: the bar for 8 read 3.80 where its height was 4.6."""
    import pandas as pd

    pd.DataFrame({"engine.max_num_seqs": [8, 64, 8, 64], "seed": [1, 1, 2, 2],
                  "max_rate": [4.6, 73.6, 3.8, 20.0]}).to_csv(tmp_path / "max_rate.csv", index=False)
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "engine.max_num_seqs"]) == 0
    err = capsys.readouterr().err
    assert "several rows share each engine.max_num_seqs value (the table also varies seed)" in err


def test_a_sweep_refused_for_its_executor_leaves_its_table(tmp_path, capsys):
    """Round 45: `--executor ray` without Ray was refused after the sweep had emptied its earlier table."""
    from importlib.util import find_spec

    if find_spec("ray") is not None:
        pytest.skip("ray is installed here: the refusal is for a machine without it")
    out = tmp_path / "s"
    argv = ["sweep", "--set", "workload.num_requests=3", "--grid", "workload.arrival.rate=5", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    table = (out / "sweep.csv").read_bytes()
    assert main(argv + ["--executor", "ray"]) == 2
    assert "ray is not installed" in capsys.readouterr().err and (out / "sweep.csv").read_bytes() == table
    import servesim

    with pytest.raises(servesim.ConfigError, match="grid: an axis is named by a setting's dotted path"):
        servesim.sweep(None, {1: [2]}, {"workload.num_requests": 5}, out=tmp_path / "api")


def test_a_replicas_search_is_named_when_a_capacity_plot_is_asked_of_it(tmp_path, capsys):
    """Round 45: plot --kind capacity on a `search replicas` folder said 'give a sweep (or search) output directory'."""
    (tmp_path / "replicas.csv").write_text("replicas,fails_with\n2,1\n")
    assert main(["plot", str(tmp_path), "--kind", "capacity"]) == 2
    assert "holds a `search replicas` table (replicas.csv)" in capsys.readouterr().err


def test_runs_with_an_unset_by_value_are_drawn_and_named(tmp_path, capsys):
    """A grid value `null` (unlimited) is a group of its own in every plot, named in the legend: it was dropped
    without a word by the line plots and left transparent by pareto's colour scale."""
    out = tmp_path / "s"
    assert main(["sweep", "--grid", "workload.arrival.rate=5,20", "--grid", "engine.max_num_queued_reqs=null,3",
                 "--set", "workload.num_requests=30", "--set", "profile=teaching",
                 "--set", "workload.slo_classes={chat: {ttft_ms: 1000}}", "--out", str(out),
                 "--jobs", "1", "--no-progress"]) == 0
    for kind in ("latency-vs-rate", "goodput", "pareto"):
        assert main(["plot", str(out), "--kind", kind, "--by", "engine.max_num_queued_reqs"]) == 0
        svg = (out / f"plot-{kind}.svg").read_text()
        assert "engine.max_num_queued_reqs = null" in svg, kind  # matplotlib keeps each text as a comment
        assert "engine.max_num_queued_reqs = 3" in svg or kind == "pareto", kind


def test_capacity_names_an_unset_value_and_refuses_its_own_measure(tmp_path, capsys):
    out = tmp_path / "se"
    assert main(["search", "max-rate", "--slo", "ttft_p99_ms=500", "--grid", "engine.max_num_seqs=null,8",
                 "--set", "workload.num_requests=40", "--set", "profile=teaching", "--out", str(out),
                 "--tolerance", "0.5"]) == 0
    assert main(["plot", str(out), "--kind", "capacity", "--by", "engine.max_num_seqs", "--title", "MY TITLE"]) == 0
    svg = (out / "plot-capacity.svg").read_text()
    assert "<!-- null -->" in svg and "MY TITLE" in svg  # the unset value's tick
    capsys.readouterr()
    assert main(["plot", str(out), "--kind", "capacity", "--by", "max_rate"]) == 2
    assert "--by: 'max_rate' is what the plot measures" in capsys.readouterr().err


def test_a_load_axis_with_unset_values_is_refused_not_thinned(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", "--grid", "workload.arrival.rate=5,20", "--grid", "engine.max_num_seqs=null,64",
                 "--set", "workload.num_requests=20", "--set", "profile=teaching", "--out", str(out),
                 "--jobs", "1", "--no-progress"]) == 0
    assert main(["plot", str(out), "--kind", "latency-vs-rate", "--x", "engine.max_num_seqs",
                 "--by", "workload.arrival.rate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--x: 2 run(s) have no engine.max_num_seqs (null)" in err[0], err


def test_latency_and_goodput_plots_state_the_slos_they_were_judged_by(swept, capsys):
    for kind in ("latency-vs-rate", "goodput"):
        assert main(["plot", str(swept), "--kind", kind, "--by", "engine.max_num_batched_tokens"]) == 0
        svg = (swept / f"plot-{kind}.svg").read_text()
        assert "SLOs chat: TTFT &lt;= 1000 ms" in svg, kind
    assert "SLO chat" in (swept / "plot-latency-vs-rate.svg").read_text()  # the target line, in the legend


def test_a_sweep_without_its_runs_folder_still_states_its_slos(swept, tmp_path, capsys):
    """Round 90: the committed example sweep ships without runs/ (regenerated, not committed); replotting it
    dropped the SLOs from the goodput and latency plots, silently. sweep.yaml records them now."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(swept, copy, ignore=shutil.ignore_patterns("runs"))
    for kind in ("latency-vs-rate", "goodput"):
        assert main(["plot", str(copy), "--kind", kind, "--by", "engine.max_num_batched_tokens"]) == 0
        assert "SLOs chat: TTFT &lt;= 1000 ms" in (copy / f"plot-{kind}.svg").read_text(), kind
    (copy / "sweep.yaml").write_text("points: 1\n")  # an older sweep's: the goodput plot says what it cannot state
    capsys.readouterr()
    assert main(["plot", str(copy), "--kind", "goodput", "--by", "engine.max_num_batched_tokens"]) == 0
    assert "cannot state the SLOs its goodput was judged by" in capsys.readouterr().err


def test_drawing_from_a_notebook_leaves_its_backend_alone(swept, tmp_path, monkeypatch):
    """servesim.plot (and recommend's plot) switched a notebook's inline backend to Agg: its own figures after
    that were never shown. Where pyplot is imported already, the session's backend stays."""
    import matplotlib
    import matplotlib.pyplot as plt

    import servesim

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # a stand-in for Jupyter's inline backend: not Agg
    try:
        servesim.plot(str(swept), "pareto", out=str(tmp_path / "p"))
        assert matplotlib.get_backend() == "svg" and (tmp_path / "p.png").stat().st_size > 5000
    finally:
        plt.switch_backend(before)


@pytest.mark.parametrize("open_ended", ["held_up_to", "reason"])
def test_a_capacity_never_bounded_is_drawn_as_at_least_not_zero(open_ended, tmp_path):
    """Round 60: a search whose SLOs held at every rate (no max_rate, held up to 2.7e7 req/s) was drawn as a bar of
    0.00, which says the opposite; a point where nothing met them is "none meets". A table written before
    held_up_to was a column says it in the reason."""
    import pandas as pd

    held = "no failing rate found: the SLOs held up to 2.68435e+07 req/s, the 30-run limit stopped the doubling"
    table = pd.DataFrame({"engine.max_num_seqs": [1, 16, 256], "max_rate": [30.8, None, None],
                          "reason": [None, "the SLOs fail already at 0.05 req/s", held],
                          "held_up_to": [None, None, 2.68435456e7]})
    table.drop(columns=["held_up_to" if open_ended == "reason" else "reason"]).to_csv(tmp_path / "max_rate.csv",
                                                                                       index=False)
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "engine.max_num_seqs"]) == 0
    svg = (tmp_path / "plot-capacity.svg").read_text()  # each text drawn is named in a comment
    assert "<!-- &gt;= 2.68e+07 -->" in svg and "<!-- 30.80 -->" in svg and "<!-- none meets -->" in svg
    assert "<!-- 0.00 -->" not in svg


@pytest.mark.parametrize("text, says", [
    ("engine.max_num_seqs,max_rate,held_up_to\n1,3.0,\n2,,inf\n", "column held_up_to must be finite, non-negative and at most"),
    ("engine.max_num_seqs,max_rate,held_up_to\n1,3.0,\n2,,-5\n", "column held_up_to must be finite, non-negative and at most"),
    ("engine.max_num_seqs,max_rate\n1,3.0,9\n2,4.0\n", "Length of header or names does not match"),
])
def test_round_61_a_capacity_table_with_bad_bounds_or_long_rows_is_one_line(text, says, tmp_path, capsys):
    """An infinite held_up_to crashed matplotlib (exit 3), a negative one drew below the axis; a row longer than the
    header shifted every column (its first taken as the index) and drew the wrong bars."""
    (tmp_path / "max_rate.csv").write_text(text)
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "engine.max_num_seqs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_round_61_rows_ending_in_a_comma_are_read_as_written(tmp_path):
    """A CSV whose rows end in a comma: pandas took the first column for the index and shifted the rest."""
    from servesim.simulator.files import read_table

    (tmp_path / "max_rate.csv").write_text("engine.max_num_seqs,max_rate\n1,3.0,\n2,4.0,\n")
    table = read_table(tmp_path / "max_rate.csv", "results")
    assert table["engine.max_num_seqs"].tolist() == [1, 2] and table["max_rate"].tolist() == [3.0, 4.0]


def test_a_sweep_where_no_request_finished_says_so(tmp_path, capsys):
    """Every request rejected: the sweep wrote its latency columns untyped (all null) and plot blamed the file's
    column type (round 79); now it says nothing was measured."""
    out = tmp_path / "s"
    assert main(["sweep", "--grid", "workload.arrival.rate=1,2", "--set", "workload.num_requests=3", "--set",
                 "engine.max_model_len=100", "--set", "workload.prompt_tokens={dist: fixed, value: 500}", "--set",
                 "workload.clip_to_max_model_len=false", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    for kind in ("latency-vs-rate", "pareto"):
        assert main(["plot", "--kind", kind, str(out), "--out", str(tmp_path / kind)]) == 2
        err = capsys.readouterr().err
        assert err.count("servesim: error:") == 1 and "(no request finished in any): nothing to plot" in err


def test_the_timeline_draws_an_idle_engine_as_running_none():
    """Round 89: the line joined step to step, so an engine busy 9% of a 53 s run drew 'running 1' throughout."""
    import pandas as pd

    from servesim.simulator.plots import _held

    steps = pd.DataFrame({"start": [0.0, 0.5, 5.0], "end": [0.5, 2.0, 6.0], "num_running": [3, 2, 1],
                          "kv_usage": [0.1, 0.2, 0.3]})
    t, running = _held(steps, "num_running", idle=0)
    assert t.tolist() == [0.0, 0.5, 2.0, 5.0, 6.0] and running.tolist() == [3, 2, 0, 1, 0]  # back to back: no gap
    assert _held(steps, "kv_usage")[1].tolist() == [0.1, 0.2, 0.3]  # the KV held stays held


def test_a_capacity_the_search_called_not_stable_is_drawn_apart(monkeypatch):
    """Round 89: an answer that moved as the run doubled (stable False) was drawn exactly like a stable one."""
    import pandas as pd

    from servesim.simulator import plots

    drawn = []
    monkeypatch.setattr(plots, "_figure", lambda path, fig: drawn.append(fig) or [])
    table = pd.DataFrame({"engine.max_num_batched_tokens": [512, 2048], "max_rate": [5.25, 7.21],
                          "held_up_to": [None, None], "stable": [False, True]})
    plots.capacity(table, "x", "engine.max_num_batched_tokens")
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.texts] == ["~5.25\n(not stable)", "7.21"]
    assert [b.get_hatch() for b in ax.patches] == ["..", None]


def test_a_log_axis_under_a_decade_labels_every_minor_tick():
    """Round 93: TPOT lines at 6-7 ms sat between unlabelled ticks (the only label, 10)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from servesim.simulator.plots import _minor_label

    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.set_ylim(5.5, 12)
    assert [_minor_label(ax, v, 0) for v in (6, 7, 9)] == ["6", "7", "9"]
    ax.set_ylim(5.25, 5.345)  # round 94: linear minor ticks 0.02 apart were all "5"
    assert [_minor_label(ax, v, 0) for v in (5.26, 5.28, 5.3)] == ["5.26", "5.28", "5.30"]
    ax.set_ylim(1, 1000)  # over decades: the 2s and 5s only
    assert [_minor_label(ax, v, 0) for v in (20, 30, 50, 70)] == ["20", "", "50", ""]
    plt.close(fig)


def test_a_narrow_load_range_keeps_its_rate_labels_apart(monkeypatch, tmp_path):
    """Round 98: rates 1, 1.001 and 1.002 drew nine ticks whose labels ran into one string (1.000001.00025...)."""
    import pandas as pd

    from servesim.simulator import plots

    figs = []
    monkeypatch.setattr(plots, "_figure", lambda path, fig: figs.append(fig) or [])
    table = pd.DataFrame({"workload.arrival.rate": [1.0, 1.001, 1.002], "median_ttft_ms": [20.0, 21.0, 22.0],
                          "p99_ttft_ms": [50.0, 51.0, 52.0], "median_tpot_ms": [5.3, 5.31, 5.32],
                          "p99_tpot_ms": [5.5, 5.51, 5.52]})
    plots.latency_vs_rate(table, tmp_path / "p", by=None)
    fig = figs[0]
    fig.canvas.draw()
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        shown = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert 2 <= len(shown) <= 7
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_one_token_outputs_plot_no_tpot_and_say_why(tmp_path, capsys):
    """Round 102: a sweep of one-token outputs has no TPOT; latency-vs-rate drew an empty TPOT panel over a load
    axis of -0.04..0.04, and pareto said "no request finished in any" though every one had."""
    import matplotlib.pyplot as plt

    from servesim.simulator import plots

    out = tmp_path / "sw"
    assert main(["sweep", "--set", "workload.num_requests=20", "--set", "workload.output_tokens={dist: fixed, value: 1}",
                 "--grid", "workload.arrival.rate=4,8", "--out", str(out), "--quiet"]) == 0
    drawn = []
    real = plots._figure
    plots._figure = lambda path, fig: (drawn.append([a.get_title() for a in fig.axes]), real(path, fig))[1]
    try:
        assert main(["plot", str(out), "--kind", "latency-vs-rate"]) == 0
    finally:
        plots._figure = real
    assert drawn == [["Time to first token"]]
    capsys.readouterr()
    assert main(["plot", str(out), "--kind", "pareto"]) == 2
    err = capsys.readouterr().err
    assert "no run measured p99_tpot_ms (TPOT needs outputs of more than one token)" in err
    plt.close("all")


def test_a_capacity_bar_that_never_ran_says_so(tmp_path):
    """Round 102: a grid point search could not run (TP 3 over 32 heads: runs 0, "not searched") was marked "none
    meets", as a deployment measured to miss the SLOs at every rate."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from servesim.simulator import plots

    table = pd.DataFrame({"engine.tensor_parallel_size": [1, 2, 3], "max_rate": [37.1, None, None],
                          "runs": [36, 12, 0], "reason": ["", "no rate met", "not searched: ..."]})
    texts = []
    real = plots._figure
    plots._figure = lambda path, fig: (texts.extend(t.get_text() for t in fig.axes[0].texts), real(path, fig))[1]
    try:
        plots.capacity(table, tmp_path / "c.png", by="engine.tensor_parallel_size")
    finally:
        plots._figure = real
    assert texts == ["37.10", "none meets", "cannot run\n(not searched)"]
    plt.close("all")


def test_a_capacity_plot_where_no_configuration_met_the_slos_is_drawn(tmp_path, capsys):
    """Round 104: a search where every configuration missed the SLOs was refused as "no request finished in any";
    each is a bar of 0 marked none meets."""
    import pandas as pd

    pd.DataFrame({"engine.max_num_seqs": [8, 16], "max_rate": [None, None], "runs": [9, 9],
                  "reason": ["no rate met the SLOs"] * 2}).to_csv(tmp_path / "max_rate.csv", index=False)
    assert main(["plot", str(tmp_path), "--kind", "capacity", "--by", "engine.max_num_seqs"]) == 0
    assert (tmp_path / "plot-capacity.png").is_file()


def test_the_goodput_plots_offered_load_is_the_requests_the_runs_offered(tmp_path):
    """r115: a session workload's rate counts sessions; the offered-load line was y = x in requests/s, so goodput at
    about all of what was offered read as 29% of it. It is the runs' own offered_rate now."""
    import pandas as pd

    from servesim.simulator.plots import _plt, goodput_vs_rate

    table = pd.DataFrame({"workload.arrival.rate": [1.0, 4.0], "offered_rate": [0.3, 1.15],
                          "request_goodput": [0.3, 1.1], "request_throughput": [0.3, 1.14]})
    plt = _plt()
    seen = {}
    real_close = plt.close

    def keep(fig=None):
        if fig is not None and hasattr(fig, "axes"):
            line = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("offered load")][0]
            seen["y"], seen["x"] = list(line.get_ydata()), list(line.get_xdata())
            seen["label"] = fig.axes[0].get_xlabel()
        real_close(fig)
    plt.close = keep
    try:
        goodput_vs_rate(table, tmp_path / "g")
    finally:
        plt.close = real_close
    assert seen["y"] == [0.3, 1.15] and seen["x"] == [1.0, 4.0] and "sessions/s" in seen["label"]


def test_a_capacity_plot_of_a_search_without_a_grid_names_its_bar_and_starts_at_zero(tmp_path, monkeypatch):
    """r116: a search without --grid drew one bar labelled `null` under an x axis named max_rate (its first
    column), on a rate axis from -0.04 to 0.04 where no rate met the SLOs."""
    import pandas as pd

    from servesim.simulator import plots

    drawn = []
    monkeypatch.setattr(plots, "_figure", lambda stem, fig: drawn.append(fig) or [])
    pd.DataFrame({"max_rate": [None], "fails_at": [None], "runs": [1],
                  "reason": ["the SLOs fail already at 0.05 req/s"]}).to_csv(tmp_path / "max_rate.csv", index=False)
    assert main(["plot", str(tmp_path), "--kind", "capacity"]) == 0
    ax = drawn[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["scenario"] and ax.get_xlabel() == "configuration"
    assert ax.get_ylim()[0] == 0


@pytest.mark.parametrize("kind, column, value, says", [
    ("pareto", "p99_tpot_ms", 1e308, "column p99_tpot_ms must be finite, non-negative and at most 1e+15, got 1e+308"),
    ("timeline", "start", float("nan"), "column start has no value in row 1: every step has one"),
    ("timeline", "start", 1e308, "column start must be finite, non-negative and at most 1e+15"),
])
def test_a_table_of_numbers_past_any_run_is_refused(swept, tmp_path, kind, column, value, says, capsys):
    """r123: 1e308 in a sweep's p99 TPOT or a run's step starts was an internal error in matplotlib's tick
    locator; NaN step starts drew an empty timeline."""
    import shutil

    import pandas as pd

    src = swept if kind != "timeline" else next((swept / "runs").iterdir())
    shutil.copytree(src, tmp_path / "c", ignore=shutil.ignore_patterns("runs"))
    name = "steps.parquet" if kind == "timeline" else "sweep.parquet"
    table = pd.read_parquet(tmp_path / "c" / name)
    table[column] = value
    table.to_parquet(tmp_path / "c" / name)
    assert main(["plot", str(tmp_path / "c"), "--kind", kind, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("servesim: error:") == 1 and says in err, err


def test_recommend_labels_name_the_other_axes_its_candidates_differ_in(tmp_path, monkeypatch):
    """r128: two candidates of one GPU (speculation on and off) were labelled `#1 h200-sxm x1` and `#2 h200-sxm x1`."""
    import matplotlib.axes
    import matplotlib.figure
    import pandas as pd

    from servesim.simulator.plots import recommendation

    said = []
    real = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate", lambda ax, text, *a, **k: said.append(text) or
                        real(ax, text, *a, **k))
    row = {"status": "meets", "gpu": "h200-sxm", "gpus": 1, "usd_per_million_output_tokens": 3.5,
           "p99_ttft_ms": 30.0, "p99_tpot_ms": 5.0, "hardware.gpu": "h200-sxm", "policies.queue": "fcfs"}
    table = pd.DataFrame([row | {"rank": 1, "speculative.method": "fixed"},
                          row | {"rank": 2, "speculative.method": "none"}])
    recommendation(table, tmp_path / "p", {}, "5 req/s")
    assert said[:2] == ["#1 h200-sxm x1\nmethod=fixed", "#2 h200-sxm x1\nmethod=none"]  # the queue is the same
    # r150: the title counted the priced candidates alone, the unpriced left out unsaid
    titles = []
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle", lambda fig, text, *a, **k: titles.append(text))
    recommendation(pd.concat([table, pd.DataFrame([row | {"rank": 3, "usd_per_million_output_tokens": None}])]),
                   tmp_path / "p2", {}, "5 req/s")
    assert titles == ["Deployments carrying 5 req/s within the SLOs (2 candidates; 1 more not drawn: no price)"]


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.update(slos={"p99_ttft_ms": None}), "slos must be an object of SLO targets, each a positive number"),
    (lambda d: d.update(slos={"p99_ttft_ms": "fast"}), "slos must be an object of SLO targets"),
    (lambda d: d.update(slos=[1, 2]), "slos must be an object of SLO targets"),
    (lambda d: [r.update(p99_ttft_ms=None, p99_tpot_ms=None) for r in d["rows"]],
     "no candidate meeting the SLOs has a price and a p99 TTFT or TPOT"),
    # r157: contradictory rows were drawn silently
    (lambda d: d["rows"][1].update(rank=1), "the rows' ranks are not 1, 2, ... in order"),
    (lambda d: d["rows"][2].update(p99_ttft_ms=5000.0), "row 3 meets the SLOs with p99_ttft_ms 5000 past its target"),
    (lambda d: d["rows"][0].update(usd_per_million_output_tokens=1e6), "row 2 is cheaper than a candidate ranked"),
    (lambda d: d["rows"][0].update(status="unmet"), "row 2 meets the SLOs below one that does not"),
    (lambda d: d["rows"][1].update({k: d["rows"][0][k] for k in d["rows"][0] if "." in k}),
     "row 2 repeats an earlier row's settings"),
])
def test_a_damaged_recommend_json_is_one_line(edit, says, tmp_path, capsys):
    """r129: null or text SLO targets, or rows with no figure left to draw, were internal errors (exit 3)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "results" / "recommend-example" / "recommend.json")
                      .read_text())
    edit(data)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "recommend.json").write_text(json.dumps(data))
    assert main(["plot", str(tmp_path / "r"), "--kind", "recommend", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_title_or_folder_with_dollar_signs_is_drawn_as_given(tmp_path, monkeypatch):
    """r130: matplotlib read a `$...$` pair as math: `$\\x$` in a --title or in the folder a default title names was
    an internal error, and `$3 vs $4` lost its spaces."""
    import matplotlib.axes

    said = []
    real = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda ax, text, *a, **k: said.append(text) or
                        real(ax, text, *a, **k))
    run = tmp_path / "run$\\q$"
    assert main(["run", "--set", "workload.num_requests=5", "--out", str(run), "--quiet"]) == 0
    assert main(["plot", str(run), "--kind", "timeline", "--out", str(tmp_path / "t")]) == 0
    assert main(["plot", str(run), "--kind", "timeline", "--out", str(tmp_path / "u"), "--title", "H100 at $3 vs $4"]) == 0
    assert said[-1].startswith(r"H100 at \$3 vs \$4") and "\\$\\q\\$" in said[0]


def test_a_title_the_font_or_xml_cannot_hold_is_drawn_and_said(swept, tmp_path, capfd):
    """r149: glyphs the font lacks leaked matplotlib's UserWarnings (with source lines); a control character made
    the SVG malformed XML."""
    import xml.etree.ElementTree as ET

    from servesim.simulator import config

    config._WARNED.clear()
    assert main(["plot", str(swept), "--kind", "pareto", "--title", "吞吐 a\x01b", "--out", str(tmp_path / "p")]) == 0
    err = capfd.readouterr().err
    assert "UserWarning" not in err and "servesim: warning: the plot's font lacks 2 character(s)" in err, err
    ET.parse(tmp_path / "p.svg")  # well-formed


@pytest.mark.parametrize("damage, needle", [
    ({"end": lambda t: -t["end"]}, "column end must be finite, non-negative"),
    ({"end": lambda t: t["start"] * 0.5}, "has an end before its start"),
    ({"start": lambda t: t["start"][::-1].to_numpy(), "end": lambda t: t["end"][::-1].to_numpy()},
     "a start before its replica's step before it"),
    ({"kv_usage": lambda t: t["kv_usage"] * 1000 + 2}, "has a kv_usage above 1"),
])
def test_round_149_a_timeline_of_steps_no_run_writes_is_one_line(swept, tmp_path, capsys, damage, needle):
    """r149: a timeline never read `end`: without it a KeyError, negative or unsorted a scribble; usage past 1
    clipped."""
    run = next((swept / "runs").iterdir())
    copy = _damaged(run, tmp_path, "steps.parquet", **damage)
    assert main(["plot", str(copy), "--kind", "timeline", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_round_149_damaged_slo_classes_offered_rates_and_recommend_rows_are_one_line(swept, tmp_path, capsys):
    """r149: a text SLO target, a class of 5, an offered rate of text, a recommend row without its rank or with a
    text TP were internal errors; -5 ms was drawn."""
    import json
    import shutil

    import yaml

    for cls, needle in (({"a": {"ttft_ms": "abc"}}, "workload.slo_classes.a.ttft_ms must be a positive number"),
                        ({"a": 5}, "workload.slo_classes must map each class"),
                        ({"a": {"ttft_ms": -5}}, "workload.slo_classes.a.ttft_ms must be a positive number")):
        copy = tmp_path / "s"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(swept, copy)
        for config in copy.glob("runs/*/config.yaml"):
            data = yaml.safe_load(config.read_text())
            data["workload"]["slo_classes"] = cls
            config.write_text(yaml.safe_dump(data))
        assert main(["plot", str(copy), "--kind", "latency-vs-rate", "--out", str(tmp_path / "p")]) == 2
        assert needle in capsys.readouterr().err
    copy = _damaged(swept, tmp_path, "sweep.parquet", offered_rate="x")
    assert main(["plot", str(copy), "--kind", "goodput", "--out", str(tmp_path / "g")]) == 2
    assert "column offered_rate must hold numbers" in capsys.readouterr().err
    example = Path(__file__).resolve().parents[1] / "results" / "recommend-example" / "recommend.json"
    for edit, needle in ((lambda r: r.pop("rank"), "every row needs its rank"),
                         (lambda r: r.update({"engine.tensor_parallel_size": "4"}),
                          "column engine.tensor_parallel_size must hold numbers")):
        data = json.loads(example.read_text())
        for row in data["rows"]:
            edit(row)
        (tmp_path / "recommend.json").write_text(json.dumps(data))
        assert main(["plot", str(tmp_path / "recommend.json"), "--kind", "recommend", "--out",
                     str(tmp_path / "r")]) == 2
        assert needle in capsys.readouterr().err


def test_round_151_every_group_drawn_apart_and_run_ids_read_as_text(tmp_path):
    """r151: past 100 `--by` values the plot dropped the rest (ten colours zipped x 10), every tenth alike; a
    sweep.csv's run id 244292e93348 was read as the number 2.4e98, its run's SLOs "not recorded"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from servesim.simulator.files import read_table
    from servesim.simulator.plots import _colored_groups

    table = pd.DataFrame({"engine.max_num_seqs": range(1, 106), "x": 1.0})
    drawn = _colored_groups(plt, table, "engine.max_num_seqs")
    assert len(drawn) == 105 and len({tuple(c) for _, c in drawn}) == 105
    (tmp_path / "sweep.csv").write_text("run_id,seed\n244292e93348,0\n4483204419e1,0\n")
    assert read_table(tmp_path / "sweep.csv", "results")["run_id"].tolist() == ["244292e93348", "4483204419e1"]


def test_round_153_a_swept_slo_is_not_stated_as_every_runs(tmp_path):
    """r153: SLO classes zipped 50, 5000, 50 ms: the first and last runs agreed, so the plot stated 50 ms for all."""
    import pandas as pd

    from servesim.simulator.cli import main
    from servesim.simulator.sweep import judged_slos

    assert main(["sweep", "--quiet", "--zip", "workload.slo_classes={a: {ttft_ms: 50}},{a: {ttft_ms: 5000}},"
                 "{a: {ttft_ms: 50}}", "--zip", "workload.arrival.rate=2,4,8", "--set", "workload.num_requests=20",
                 "--set", "profile=teaching", "--out", str(tmp_path)]) == 0
    assert judged_slos(tmp_path, pd.read_parquet(tmp_path / "sweep.parquet")) is None


def test_round_157_goodput_against_offered_rate_and_measured_axes(tmp_path, capsys):
    """r157: `plot --kind goodput --x offered_rate` was an internal error (the offered line grouped offered_rate by
    itself); an --x or --by that the plot measures (p99_ttft_ms, request_goodput) drew a figure against itself;
    `workload write --out w.jsonl.gz` wrote plain JSON lines into a .gz."""
    sweep = tmp_path / "sw"
    assert main(["sweep", "--grid", "workload.arrival.rate=2,5", "--set", "workload.num_requests=30", "--set",
                 "workload.slo_classes={gold: {weight: 1, ttft_ms: 500, tpot_ms: 50}}", "--set", "profile=teaching",
                 "--jobs", "1", "--no-progress", "--quiet", "--out", str(sweep)]) == 0
    assert main(["plot", str(sweep), "--kind", "goodput", "--x", "offered_rate", "--out", str(tmp_path / "g")]) == 0
    assert (tmp_path / "g.png").is_file()
    capsys.readouterr()
    for args, says in ((["--kind", "latency-vs-rate", "--x", "p99_ttft_ms"], "--x: 'p99_ttft_ms' is what the plot"),
                       (["--kind", "goodput", "--by", "request_goodput"], "--by: 'request_goodput' is what the plot"),
                       # r158: any other column a run measured, not only those the plot draws
                       (["--kind", "latency-vs-rate", "--x", "mean_e2el_ms"], "--x: 'mean_e2el_ms' is what a run"),
                       (["--kind", "pareto", "--by", "completed"], "--by: 'completed' is what a run measured"),
                       (["--kind", "goodput", "--by", "run_id"], "--by: 'run_id' is what a run measured")):
        assert main(["plot", str(sweep), *args, "--out", str(tmp_path / "x")]) == 2
        assert says in capsys.readouterr().err
    assert main(["workload", "write", "--set", "workload.num_requests=3", "--out", str(tmp_path / "w.jsonl.gz")]) == 2
    assert "give a name ending in .jsonl or .json" in capsys.readouterr().err


@pytest.mark.parametrize("rows, says", [
    ("8,5.0,5.5,10,\n16,7.0,6.0,10,\n", "row 2 has its max_rate at or above its fails_at"),
    ("8,5.0,5.5,10,\n8,7.0,8.0,10,\n", "row 2 repeats an earlier row's settings"),
])
def test_round_157_contradictory_table_rows_are_refused(rows, says, swept, tmp_path, capsys):
    """r157: a damaged search table (an answer above the rate it failed at, a point twice) or sweep table (a run
    twice, averaged into its point) was drawn silently."""
    import pandas as pd

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "max_rate.csv").write_text("engine.max_num_seqs,max_rate,fails_at,runs,reason\n" + rows)
    assert main(["plot", str(tmp_path / "c"), "--kind", "capacity", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    table = pd.read_parquet(swept / "sweep.parquet")
    (tmp_path / "s").mkdir()
    pd.concat([table, table.iloc[[0]].assign(p99_ttft_ms=1.0)]).to_parquet(tmp_path / "s" / "sweep.parquet")
    assert main(["plot", str(tmp_path / "s"), "--kind", "latency-vs-rate", "--out", str(tmp_path / "q")]) == 2
    assert f"row {len(table) + 1} repeats an earlier row's settings" in capsys.readouterr().err


def test_round_159_failed_runs_left_out_of_a_plot_are_said(tmp_path, capsys):
    """r159: a sweep's failed runs were dropped from its plots unsaid (a point averaged over its other seeds)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n")
    good = tmp_path / "good.csv"
    good.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,30,4\n")
    main(["sweep", "--set", "workload.num_requests=10", "--set", "profile=teaching", "--zip",
          "workload.arrival.rate=2,4,6", "--zip", f"workload.lengths={{path: {bad}}},{{path: {good}}},{{path: {good}}}",
          "--out", str(tmp_path / "s"), "--no-progress", "--quiet"])
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "s"), "--kind", "latency-vs-rate"]) == 0
    assert "1 failed run(s) of" in capsys.readouterr().err


def test_round_171_the_latency_plot_draws_the_measured_requests():
    """r171: under a warm-up, latency.png drew all 60 requests (TTFT p50 44.0 ms) where the summary and the plot's
    own title counted the 30 measured (34.8 ms)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.plots import latency_values

    r = simulate(load(None, ["workload.num_requests=60", "workload.arrival.rate=20", "simulation.warmup_requests=30"]))
    ttft, itl = latency_values(r)
    s = r.summary
    assert len(ttft) == s["completed"] == 30
    assert np.percentile(ttft, 50) == pytest.approx(s["median_ttft_ms"], rel=1e-12)
    assert np.percentile(ttft, 99) == pytest.approx(s["p99_ttft_ms"], rel=1e-12)
    assert np.percentile(itl, 99) == pytest.approx(s["p99_itl_ms"], rel=1e-12)
