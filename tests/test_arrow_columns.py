"""A run's files are written from numpy buffers (simulator/arrow_columns.py), not through pa.array, which imports
pandas: the tables must be the ones pa.array builds, and a run that only writes its files must not import pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servesim.simulator import arrow_columns
from servesim.simulator.config import load
from servesim.simulator.engine import simulate

NAN = float("nan")
CASES = {
    "numbers": {"i": np.array([3, -1, 2**40], dtype=np.int64), "f": np.array([0.5, NAN, -2.0]),
                "b": np.array([True, False, True]), "t": ["a", None, "é"], "r": [[1, 2], [], [7, 9, 11, 12]],
                "o": [None, 5, None]},
    "no nulls": {"f": np.array([1.0, 2.0]), "t": ["x", "y"], "r": [[0, 0], [1, 3]], "o": [1, 2]},
    "all null": {"f": np.array([NAN, NAN]), "t": [None, None], "r": [[], []], "o": [None, None]},
    "empty": {"i": np.zeros(0, dtype=np.int64), "f": np.zeros(0), "t": [], "r": [], "o": []},
    "long": {"b": np.arange(1000) % 3 == 0, "f": np.where(np.arange(1000) % 7 == 0, NAN, np.arange(1000) / 3)},
}


def expected(columns: dict) -> pa.Table:
    """What pa.array builds (NaN as null, as pandas writes a frame; the text columns as large_string)."""
    out = {}
    for name, v in columns.items():
        if name == "t":
            out[name] = pa.array(v, type=None if all(x is None for x in v) else pa.large_string())
        elif name == "r":
            out[name] = pa.array(v, type=pa.list_(pa.int64()))
        elif isinstance(v, np.ndarray):
            out[name] = pa.array(v, from_pandas=True)
        else:
            out[name] = pa.array(v, type=None if all(x is None for x in v) else pa.int64())
    return pa.table(out)


@pytest.mark.parametrize("case", list(CASES))
def test_buffers_build_the_table_pa_array_builds(case, tmp_path):
    columns = CASES[case]
    given = {k: arrow_columns.IntLists.from_lists(v) if k == "r" else v for k, v in columns.items()}
    got = arrow_columns.table(given, texts_in=("t",))
    want = expected(columns)
    assert got.schema == want.schema
    assert got.equals(want)
    arrow_columns.write_parquet(given, tmp_path / "t.parquet", texts_in=("t",))
    assert pq.read_table(tmp_path / "t.parquet").equals(want)


def test_int_lists_keep_rows_through_a_reordering():
    lists = [[1, 2], [], [7, 9, 11, 12], [5, 5], []]
    runs = arrow_columns.IntLists.from_lists(lists)
    assert runs.tolist() == lists and len(runs) == 5
    order = np.array([2, 0, 4, 3, 1])
    assert runs.take(order).tolist() == [lists[i] for i in order]
    assert arrow_columns.IntLists.from_lists([]).take(np.zeros(0, dtype=np.int64)).tolist() == []


def test_written_tables_read_back_as_the_runs_frames(tmp_path):
    """Every column, dtype and value of requests.parquet and steps.parquet is the in-memory frame's."""
    r = simulate(load(None, ["workload.num_requests=60", "workload.slo_classes={chat: {ttft_ms: 300}}",
                             "cluster.replicas=2", "cluster.prefill_replicas=1"]))
    r.write(tmp_path)
    for name, frame in (("requests", r.requests), ("steps", r.steps)):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{name}.parquet"), frame)


def test_a_run_that_writes_its_files_does_not_import_pandas(tmp_path):
    """Nor pyarrow.compute (a text column is gathered with numpy): each import takes longer than a small run."""
    code = ("import sys; from servesim.simulator.cli import main; "
            f"rc = main(['run', '--set', 'workload.num_requests=5', '--out', {str(tmp_path)!r}]); "
            "assert rc == 0; assert 'pandas' not in sys.modules, 'pandas was imported'; "
            "assert 'pyarrow.compute' not in sys.modules, 'pyarrow.compute was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(pd.read_parquet(tmp_path / "requests.parquet")) == 5


def test_row_groups_written_one_at_a_time_keep_the_columns_types(tmp_path, monkeypatch):
    """A column that is None in some row groups (a class, a session) keeps its type across them; the file reads back
    as the whole table, whatever the group size."""
    monkeypatch.setattr(arrow_columns, "ROW_GROUP", 2)
    columns = {"i": np.arange(5, dtype=np.int32), "f": np.array([0.5, NAN, 1.0, 2.0, NAN]),
               "t": [None, None, "a", None, "b"], "o": [None, None, 7, None, None],
               "r": [[1, 2], [], [3, 3], [], [4, 9, 11, 12]]}
    given = {k: arrow_columns.IntLists.from_lists(v) if k == "r" else v for k, v in columns.items()}
    arrow_columns.write_parquet(given, tmp_path / "t.parquet", texts_in=("t",))
    assert pq.ParquetFile(tmp_path / "t.parquet").num_row_groups == 3
    want = expected(columns | {"i": columns["i"].astype(np.int64)})
    got = pq.read_table(tmp_path / "t.parquet")
    assert got.schema == want.schema and got.equals(want)
