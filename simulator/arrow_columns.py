"""A run's columns as an Arrow table, built from numpy buffers.

pyarrow's `pa.array()` imports pandas on its first call (to check whether its input is a pandas
object), and importing pandas takes longer than simulating a small run. Arrays made with
`Array.from_buffers` from numpy's memory do not, and copy nothing for numbers. The table is the
one `pa.array()` would build (tests/test_arrow_columns.py holds them equal).
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import numpy as np

INT32_MAX = 2**31 - 1  # an Arrow list's offsets are int32


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


def texts(values: list):
    """large_string, None as null; a column of None only is Arrow's null type (what pa.array infers)."""
    import pyarrow as pa

    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    if not valid.any():
        return pa.nulls(len(values))
    data = [v.encode() if v is not None else b"" for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, data), dtype=np.int64, count=len(data)), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(values),
                                 [_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                 null_count=int(len(values) - valid.sum()))


def int_lists(values: list):
    """list<int64> from lists of ints (a request's runs of steps)."""
    import pyarrow as pa

    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    total = int(lengths.sum())
    if total > INT32_MAX:  # beyond int32 offsets: pa.array splits it into chunks
        return pa.chunked_array([pa.array(values, type=pa.list_(pa.int64()))])
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    child = numbers(np.fromiter(chain.from_iterable(values), dtype=np.int64, count=total))
    return pa.Array.from_buffers(pa.list_(pa.int64()), len(values), [None, pa.py_buffer(offsets)], null_count=0,
                                 children=[child])


def optional_ints(values: list):
    """Integers or None (a request's session): int64 with nulls; None only: the null type."""
    import pyarrow as pa

    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    if not valid.any():
        return pa.nulls(len(values))
    ints = np.fromiter((v if v is not None else 0 for v in values), dtype=np.int64, count=len(values))
    return pa.Array.from_buffers(pa.int64(), len(values), [_bitmap(valid), pa.py_buffer(ints)],
                                 null_count=int(len(values) - valid.sum()))


def table(columns: dict, texts_in: tuple = (), lists_in: tuple = ()):
    """An Arrow table of the columns: numpy arrays as numbers, the named ones as text or lists of ints, any other
    list as integers or None."""
    import pyarrow as pa

    arrays = []
    for name, values in columns.items():
        if name in texts_in:
            arrays.append(texts(values))
        elif name in lists_in:
            arrays.append(int_lists(values))
        elif isinstance(values, np.ndarray):
            arrays.append(numbers(values))
        else:
            arrays.append(optional_ints(values))
    return pa.Table.from_arrays(arrays, names=list(columns))


def write_parquet(columns: dict, path: Path, texts_in: tuple = (), lists_in: tuple = ()) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table(columns, texts_in, lists_in), path)
