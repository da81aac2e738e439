"""A run's columns as an Arrow table, built from numpy buffers.

pyarrow's `pa.array()` imports pandas on its first call (to check whether its input is a pandas
object), and importing pandas takes longer than simulating a small run. Arrays made with
`Array.from_buffers` from numpy's memory do not, and copy nothing for numbers. The table is the
one `pa.array()` would build (tests/test_arrow_columns.py holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

INT32_MAX = 2**31 - 1  # an Arrow list's offsets are int32


def _bounds(lengths: np.ndarray) -> np.ndarray:
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    return bounds


@dataclass(frozen=True)
class IntLists:
    """Lists of integers as Arrow holds them: one flat array, and bounds (row i is values[bounds[i]:bounds[i + 1]])."""

    values: np.ndarray
    bounds: np.ndarray

    @classmethod
    def from_lengths(cls, values: np.ndarray, lengths: np.ndarray) -> "IntLists":
        return cls(values, _bounds(lengths))

    @classmethod
    def from_lists(cls, lists) -> "IntLists":
        from itertools import chain

        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        return cls.from_lengths(np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum())),
                                lengths)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def take(self, rows: np.ndarray) -> "IntLists":
        """These rows, in this order."""
        lengths = np.diff(self.bounds)[rows]
        bounds = _bounds(lengths)
        gather = np.repeat(self.bounds[:-1][rows] - bounds[:-1], lengths) + np.arange(bounds[-1])
        return IntLists(self.values[gather], bounds)

    def slice(self, lo: int, hi: int) -> "IntLists":
        b = self.bounds[lo:hi + 1]
        return IntLists(self.values[b[0]:b[-1]], b - b[0])

    def tolist(self) -> list[list[int]]:
        v, b = self.values.tolist(), self.bounds.tolist()
        return [v[b[i]:b[i + 1]] for i in range(len(b) - 1)]


def _bitmap(valid: np.ndarray):
    """Arrow's validity bitmap (LSB first); None when every value is valid, as pa.array leaves it."""
    import pyarrow as pa

    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def numbers(values: np.ndarray):
    """int64, float64 (NaN is null, as pandas writes it) or bool from a numpy array."""
    import pyarrow as pa

    n = len(values)
    if values.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    if values.dtype.kind == "f":
        values = np.ascontiguousarray(values, dtype=np.float64)
        valid = ~np.isnan(values)
        return pa.Array.from_buffers(pa.float64(), n, [_bitmap(valid), pa.py_buffer(values)], null_count=int(n - valid.sum()))
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)], null_count=0)


def texts(values: list, typed: bool | None = None):
    """large_string, None as null; a column of None only is Arrow's null type (what pa.array infers; `typed`: the
    whole column, of which these are rows, has a text). Built from the few distinct texts (a request's status,
    class, finish reason) by index, gathered with numpy: no bytes object per row, and no pyarrow.compute (whose
    import alone takes longer than a small run)."""
    import pyarrow as pa

    index: dict[str, int] = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in values), dtype=np.int64,
                        count=len(values))
    if not index:
        return pa.nulls(len(values), type=pa.large_string() if typed else None)
    data = [v.encode() for v in index]
    sizes = np.array([len(d) for d in data] + [0], dtype=np.int64)  # the last: a null's (code -1)
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    lengths = sizes[codes]
    offsets = _bounds(lengths)
    gather = np.repeat(starts[codes] - offsets[:-1], lengths) + np.arange(offsets[-1])
    blob = np.frombuffer(b"".join(data), dtype=np.uint8)[gather]
    valid = codes >= 0
    return pa.Array.from_buffers(pa.large_string(), len(codes), [_bitmap(valid), pa.py_buffer(offsets),
                                                                 pa.py_buffer(blob)],
                                 null_count=int(len(codes) - valid.sum()))


def int_lists(lists: IntLists):
    """list<int64> (a request's runs of steps)."""
    import pyarrow as pa

    if lists.bounds[-1] > INT32_MAX:  # beyond int32 offsets: pa.array splits it into chunks
        return pa.chunked_array([pa.array(lists.tolist(), type=pa.list_(pa.int64()))])
    offsets = lists.bounds.astype(np.int32)
    return pa.Array.from_buffers(pa.list_(pa.int64()), len(lists), [None, pa.py_buffer(offsets)], null_count=0,
                                 children=[numbers(lists.values)])


def optional_ints(values: list, typed: bool | None = None):
    """Integers or None (a request's session): int64 with nulls; None only: the null type (`typed`: as texts')."""
    import pyarrow as pa

    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    if not valid.any():
        return pa.nulls(len(values), type=pa.int64() if typed else None)
    ints = np.fromiter((v if v is not None else 0 for v in values), dtype=np.int64, count=len(values))
    return pa.Array.from_buffers(pa.int64(), len(values), [_bitmap(valid), pa.py_buffer(ints)],
                                 null_count=int(len(values) - valid.sum()))


def table(columns: dict, texts_in: tuple = (), typed: dict | None = None):
    """An Arrow table of the columns: numpy arrays as numbers, IntLists as lists, the named lists as text, any
    other list as integers or None. typed: for the lists, whether the whole column has a value (these being some
    of its rows); by default these rows decide."""
    import pyarrow as pa

    typed = typed or {}
    arrays = []
    for name, values in columns.items():
        if name in texts_in:
            arrays.append(texts(values, typed.get(name)))
        elif isinstance(values, IntLists):
            arrays.append(int_lists(values))
        elif isinstance(values, np.ndarray):
            arrays.append(numbers(values))
        else:
            arrays.append(optional_ints(values, typed.get(name)))
    return pa.Table.from_arrays(arrays, names=list(columns))


def _rows(columns: dict, lo: int, hi: int) -> dict:
    return {name: values.slice(lo, min(hi, len(values))) if isinstance(values, IntLists) else values[lo:hi]
            for name, values in columns.items()}


ROW_GROUP = 1 << 17  # rows a parquet row group holds: the writer encodes one at a time


def write_parquet(columns: dict, path: Path, texts_in: tuple = ()) -> None:
    """One row group at a time: only that group's Arrow arrays exist at once (a count kept as int32 is widened to
    the file's int64 a group at a time)."""
    import pyarrow.parquet as pq

    rows = len(next(iter(columns.values()))) if columns else 0
    typed = {name: any(v is not None for v in values) for name, values in columns.items() if isinstance(values, list)}
    first = table(_rows(columns, 0, ROW_GROUP), texts_in, typed)
    with pq.ParquetWriter(path, first.schema) as writer:
        writer.write_table(first)
        del first
        for lo in range(ROW_GROUP, rows, ROW_GROUP):
            writer.write_table(table(_rows(columns, lo, lo + ROW_GROUP), texts_in, typed))
