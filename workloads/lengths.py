"""Token-length distributions, alone or drawn jointly (prompt, output) from a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from servesim.workloads.settings import MAX_TOKENS, ReadsTraceFormat, Seconds, Settings, Tokens


class Fixed(Settings):
    dist: Literal["fixed"]
    value: Tokens

    def draw(self, n, rng):
        return np.full(n, self.value, dtype=np.int64)


class Uniform(Settings):
    dist: Literal["uniform"]
    low: Tokens
    high: Tokens

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self

    def draw(self, n, rng):
        return rng.integers(self.low, self.high + 1, size=n)


class _Clipped(Settings):
    min: Tokens = 1
    max: Tokens | None = None

    @model_validator(mode="after")
    def _order(self):
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def _clip(self, x: np.ndarray) -> np.ndarray:
        """Clipped while still float, so a draw beyond int64 (exp of a large sigma) cannot wrap around."""
        return np.clip(x, self.min, MAX_TOKENS if self.max is None else self.max).astype(np.int64)


class LogNormal(_Clipped):
    """Long-tailed lengths: the median and the sigma of log(length), clipped to [min, max]."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(1.0, ge=0, le=20)

    @model_validator(mode="after")
    def _median_inside(self):
        """A median outside [min, max] is no median of what is drawn (r153: median 5000, max 100 drew 100 for
        every request, unsaid)."""
        if not self.min <= self.median <= (MAX_TOKENS if self.max is None else self.max):
            raise ValueError(f"median ({self.median:g}) lies outside [min, max] ([{self.min}, "
                             f"{'none' if self.max is None else self.max}]): half the draws clip to a bound, "
                             f"and the median drawn is that bound, not this one")
        return self

    def draw(self, n, rng):
        return self._clip(np.rint(self.median * np.exp(self.sigma * rng.standard_normal(n))))


class Zipf(_Clipped):
    """Heavy tail: P(L = min + k) ~ (k + 1)^-a, clipped to max."""

    dist: Literal["zipf"]
    a: float = Field(1.5, gt=1.0)

    def draw(self, n, rng):
        """The law exactly: the mass past max (Hurwitz zeta) at max, the rest numpy's zipf kept below it. numpy's
        own draws leave out values past 2^63, which near a = 1 hold most of the mass (r172: a = 1.001 put 20x the
        law's share at min, and 85% instead of 99% at max)."""
        from scipy.special import zeta

        top = int(MAX_TOKENS if self.max is None else self.max) - int(self.min) + 1  # X in 1..top-1 below max
        if top <= 1:
            return np.full(n, self.min, dtype=np.int64)
        tail = rng.random(n) < float(zeta(self.a, top) / zeta(self.a))  # P(X >= top): max
        out = np.full(n, top, dtype=np.int64)
        need = np.flatnonzero(~tail)
        while need.size:
            x = rng.zipf(self.a, size=need.size)
            ok = x < top
            out[need[ok]] = x[ok]
            need = need[~ok]
        return self._clip(out.astype(np.float64) + (self.min - 1))


class Empirical(ReadsTraceFormat):
    """Resampled from a file's lengths (a length-stats CSV or any trace the readers take)."""

    dist: Literal["empirical"]
    path: str
    column: Literal["prompt", "output"] = "prompt"
    format: str | None = None

    def draw(self, n, rng):
        pairs = load_pairs(self.path, self.format)
        return pairs[rng.integers(0, len(pairs), size=n), 0 if self.column == "prompt" else 1]


LengthDist = Annotated[Union[Fixed, Uniform, LogNormal, Zipf, Empirical], Field(discriminator="dist")]


class JointLengths(ReadsTraceFormat):
    """(prompt, output) pairs resampled together, keeping their correlation."""

    path: str
    format: str | None = None

    def draw(self, n, rng) -> tuple[np.ndarray, np.ndarray]:
        pairs = load_pairs(self.path, self.format)
        idx = rng.integers(0, len(pairs), size=n)
        return pairs[idx, 0], pairs[idx, 1]


_PAIRS: dict = {}


def load_pairs(path: str, fmt: str | None) -> np.ndarray:
    """[prompt, output] rows of a lengths file, read again only when the file changed (r147: a notebook's rewritten
    file was read as its first version for the rest of the process)."""
    from servesim.workloads.traces import read_lengths

    key = (str(Path(path).resolve()), fmt)
    try:
        st = Path(path).stat()
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:  # read_lengths names the path and why
        stamp = None
    cached = _PAIRS.get(key)
    if stamp is None or cached is None or cached[0] != stamp:
        _PAIRS[key] = cached = (stamp, read_lengths(path, fmt) if fmt else read_lengths(path))
    return cached[1]


class FloatDist(Settings):
    """Seconds: fixed `value`, `uniform` [low, high] or `exponential` with `mean`."""

    dist: Literal["fixed", "uniform", "exponential"] = "fixed"
    value: Seconds = 0.0
    low: Seconds = 0.0
    high: Seconds = 0.0
    mean: Seconds = 0.0

    @model_validator(mode="after")
    def _order(self):
        if self.dist == "uniform" and self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        own = {"fixed": {"value"}, "uniform": {"low", "high"}, "exponential": {"mean"}}[self.dist]
        other = sorted(k for k in self.model_fields_set - own - {"dist"} if getattr(self, k))  # r137: {dist:
        # exponential, value: 30} meant 0 s (another kind's 0, as `config` writes every field, is no setting)
        if other:
            raise ValueError(f"{', '.join(other)} is not a setting of the {self.dist} kind (it takes "
                             f"{', '.join(sorted(own))})")
        if self.dist == "exponential" and "mean" not in self.model_fields_set:
            raise ValueError("the exponential kind needs its mean")
        if self.dist == "uniform" and "high" not in self.model_fields_set:  # r138: {dist: uniform} was 0 s
            raise ValueError("the uniform kind needs its high (low is 0 unless given)")
        return self

    def draw(self, n, rng):
        if self.dist == "fixed":
            return np.full(n, self.value)
        if self.dist == "uniform":
            return rng.uniform(self.low, self.high, size=n)
        return rng.exponential(self.mean, size=n) if self.mean > 0 else np.zeros(n)
