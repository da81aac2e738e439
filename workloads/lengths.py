"""Token-length distributions, alone or drawn jointly (prompt, output) from a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf or nan is never a setting


class Fixed(_Strict):
    dist: Literal["fixed"]
    value: PositiveInt

    def draw(self, n, rng):
        return np.full(n, self.value, dtype=np.int64)


class Uniform(_Strict):
    dist: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self

    def draw(self, n, rng):
        return rng.integers(self.low, self.high + 1, size=n)


class LogNormal(_Strict):
    """Long-tailed lengths: the median and the sigma of log(length), clipped to [min, max]."""

    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat = 1.0
    min: PositiveInt = 1
    max: PositiveInt | None = None

    def draw(self, n, rng):
        x = np.rint(self.median * np.exp(self.sigma * rng.standard_normal(n))).astype(np.int64)
        return np.clip(x, self.min, self.max)


class Zipf(_Strict):
    """Heavy tail: P(L = min + k) ~ (k + 1)^-a, clipped to max."""

    dist: Literal["zipf"]
    a: float = Field(1.5, gt=1.0)
    min: PositiveInt = 1
    max: PositiveInt | None = None

    def draw(self, n, rng):
        x = rng.zipf(self.a, size=n).astype(np.int64) + self.min - 1
        return np.clip(x, self.min, self.max)


class Empirical(_Strict):
    """Resampled from a file's lengths (a length-stats CSV or any trace the readers take)."""

    dist: Literal["empirical"]
    path: str
    column: Literal["prompt", "output"] = "prompt"
    format: str | None = None

    def draw(self, n, rng):
        pairs = load_pairs(self.path, self.format)
        return pairs[rng.integers(0, len(pairs), size=n), 0 if self.column == "prompt" else 1]


LengthDist = Annotated[Union[Fixed, Uniform, LogNormal, Zipf, Empirical], Field(discriminator="dist")]


class JointLengths(_Strict):
    """(prompt, output) pairs resampled together, keeping their correlation."""

    path: str
    format: str | None = None

    def draw(self, n, rng) -> tuple[np.ndarray, np.ndarray]:
        pairs = load_pairs(self.path, self.format)
        idx = rng.integers(0, len(pairs), size=n)
        return pairs[idx, 0], pairs[idx, 1]


_PAIRS: dict = {}


def load_pairs(path: str, fmt: str | None) -> np.ndarray:
    """[prompt, output] rows of a lengths file, read once per run."""
    from workloads.traces import read_lengths

    key = (str(Path(path).resolve()), fmt)
    if key not in _PAIRS:
        _PAIRS[key] = read_lengths(path, fmt) if fmt else read_lengths(path)
    return _PAIRS[key]


class FloatDist(_Strict):
    """Seconds: fixed `value`, `uniform` [low, high] or `exponential` with `mean`."""

    dist: Literal["fixed", "uniform", "exponential"] = "fixed"
    value: NonNegativeFloat = 0.0
    low: NonNegativeFloat = 0.0
    high: NonNegativeFloat = 0.0
    mean: NonNegativeFloat = 0.0

    def draw(self, n, rng):
        if self.dist == "fixed":
            return np.full(n, self.value)
        if self.dist == "uniform":
            return rng.uniform(self.low, max(self.low, self.high), size=n)
        return rng.exponential(self.mean, size=n) if self.mean > 0 else np.zeros(n)
