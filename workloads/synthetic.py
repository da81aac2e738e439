"""Synthetic request streams: an arrival process and two length distributions, one seed."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from workloads.spec import RequestSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fixed(_Strict):
    dist: Literal["fixed"]
    value: PositiveInt


class Uniform(_Strict):
    dist: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self


class LogNormal(_Strict):
    """Long-tailed lengths: median and the sigma of log(length), clipped to [min, max]."""

    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat = 1.0
    min: PositiveInt = 1
    max: PositiveInt | None = None


LengthDist = Annotated[Union[Fixed, Uniform, LogNormal], Field(discriminator="dist")]


class Arrival(_Strict):
    """poisson: exponential gaps at `rate`; constant: evenly spaced; burst: all at t=0."""

    process: Literal["poisson", "constant", "burst"] = "poisson"
    rate: PositiveFloat | None = Field(default=None, description="requests per second")

    @model_validator(mode="after")
    def _rate(self):
        if self.process != "burst" and self.rate is None:
            raise ValueError(f"rate is required for {self.process} arrivals")
        return self


class SyntheticWorkload(_Strict):
    type: Literal["synthetic"] = "synthetic"
    num_requests: PositiveInt = 1000
    arrival: Arrival = Arrival(process="poisson", rate=10.0)
    prompt_tokens: LengthDist = LogNormal(dist="lognormal", median=600, sigma=0.9, max=6000)
    output_tokens: LengthDist = LogNormal(dist="lognormal", median=200, sigma=0.8, max=2000)
    priorities: list[int] | None = Field(default=None, description="drawn uniformly per request")

    def generate(self, seed: int) -> list[RequestSpec]:
        rng = np.random.default_rng(seed)
        n = self.num_requests
        times = _arrival_times(self.arrival, n, rng)
        prompts = _lengths(self.prompt_tokens, n, rng)
        outputs = _lengths(self.output_tokens, n, rng)
        prios = rng.choice(self.priorities, size=n) if self.priorities else np.zeros(n, dtype=int)
        return [
            RequestSpec(i, float(times[i]), int(prompts[i]), int(outputs[i]), priority=int(prios[i]))
            for i in range(n)
        ]


def _arrival_times(a: Arrival, n: int, rng: np.random.Generator) -> np.ndarray:
    if a.process == "burst":
        return np.zeros(n)
    if a.process == "constant":
        return np.arange(n) / a.rate
    gaps = rng.exponential(1.0 / a.rate, size=n)
    gaps[0] = 0.0  # the run starts with the first arrival
    return np.cumsum(gaps)


def _lengths(d, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(d, Fixed):
        return np.full(n, d.value, dtype=np.int64)
    if isinstance(d, Uniform):
        return rng.integers(d.low, d.high + 1, size=n)
    x = np.rint(d.median * np.exp(d.sigma * rng.standard_normal(n))).astype(np.int64)
    return np.clip(x, d.min, d.max if d.max is not None else None)
