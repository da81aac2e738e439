"""Arrival processes: when requests (or sessions) start.

Open-loop processes give times up front; `closed_loop` has none: its clients send the
next request when the previous one finishes (how `vllm bench serve --max-concurrency`
and most published GPU benchmarks measure), so the engine asks the source then.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from servesim.simulator.errors import ConfigError
from servesim.workloads.settings import MAX_CLIENTS, MAX_RATE, MAX_REQUESTS, MAX_SECONDS, MIN_RATE, Rate, Settings


# a curve point's time or rate: a number, not text ('5') nor a bool, which the lax mode inside a list took (r138)
_Number = Annotated[float, Field(ge=0, strict=True)]


def _within(times: np.ndarray, duration_s: float | None) -> np.ndarray:
    """The arrivals before duration_s; none is refused by its name (r138: later under the warm-up's, and written as
    an empty trace; r174: a ramp's too)."""
    if duration_s is None:
        return times
    times = times[times < duration_s]
    if not len(times):
        raise ConfigError("workload.duration_s", f"no request arrives within {duration_s:g} s at this arrival; "
                                                 f"run longer")
    return times


class Arrival(Settings):
    """poisson: exponential gaps at `rate`. gamma: gaps with coefficient of variation `cv`
    (1 is Poisson, above 1 bursty). constant: evenly spaced. burst: all at t=0. onoff:
    Poisson at `rate` for `on_s`, silence for `off_s`, repeated. curve: a time-varying
    rate, piecewise linear through `points` [[t_s, rate], ...] (a ramp, or a daily curve
    repeated every `period_s`). closed_loop: `concurrency` clients, each sending its next
    request `think_time_s` after its previous one finished; `ramp_up_s` starts the clients evenly over a window
    instead of all at t = 0 (fixed-length closed loops otherwise stay in lockstep).
    `ramp_up_strategy` (poisson, gamma and constant, as `vllm bench serve --ramp-up-strategy`): request i's gap is
    drawn at rate start + (end - start) p (linear) or start (end / start)^p (exponential), p = i / (N - 1)."""


    process: Literal["poisson", "gamma", "constant", "burst", "onoff", "curve", "closed_loop"] = "poisson"
    rate: Rate | None = Field(default=None, description="requests per second")
    cv: float = Field(1.0, ge=1e-3, le=1e6, description="gamma: coefficient of variation of the gaps (vllm bench "
                                                          "serve's --burstiness b is cv 1/sqrt(b): b down to 1e-12)")
    on_s: float | None = Field(None, ge=1e-6, le=MAX_SECONDS)
    off_s: float | None = Field(None, ge=0, le=MAX_SECONDS)
    points: list[tuple[_Number, _Number]] | None = None
    period_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    concurrency: int | None = Field(None, ge=1, le=MAX_CLIENTS)
    think_time_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    ramp_up_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="closed_loop: clients start evenly over this "
                                                                     "many seconds")
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(None, ge=0, le=MAX_RATE)
    ramp_up_end_rps: Rate | None = None
    fit_span: bool = Field(False, description="poisson/gamma/constant over num_requests: as vllm bench serve sends them, "
                                              "the first after a gap of its own and the times scaled so the last "
                                              "is sent at num_requests / rate exactly")
    vllm_client_draws: bool = Field(False, description="poisson/gamma gaps drawn as vllm bench serve's client draws "
                                                       "them for its --seed: numpy's legacy generator seeded with "
                                                       "the seed, one gamma draw per request (exponential ones too); "
                                                       "without fit_span the first is sent at 0, its times less the "
                                                       "client's first gap")

    @model_validator(mode="after")
    def _needs(self):
        need = {"poisson": ["rate"], "gamma": ["rate"], "constant": ["rate"], "onoff": ["rate", "on_s", "off_s"],
                "curve": ["points"], "closed_loop": ["concurrency"], "burst": []}[self.process]
        for f in need:
            if f == "rate" and self.ramp_up_strategy is not None:
                continue  # the ramp sets the rate
            if getattr(self, f) is None:
                raise ValueError(f"{f} is required for {self.process} arrivals")
        if self.ramp_up_s and self.process != "closed_loop":
            raise ValueError("ramp_up_s applies to closed_loop arrivals (open loops ramp with ramp_up_strategy)")
        if self.ramp_up_strategy is not None:
            if self.process not in ("poisson", "gamma", "constant"):
                raise ValueError("ramp_up_strategy applies to poisson, gamma and constant arrivals")
            if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
                raise ValueError("ramp_up_strategy needs ramp_up_start_rps and ramp_up_end_rps")
            if not self.ramp_up_start_rps:  # the first request's rate is the start's (r151: a linear ramp from 0
                # was refused as "requests would never arrive", naming no field)
                raise ValueError("a ramp needs ramp_up_start_rps > 0: its first request arrives at that rate (vLLM "
                                 "refuses 0 for an exponential ramp, and a linear one fails on its first request)")
            if self.ramp_up_start_rps > self.ramp_up_end_rps:  # (r173: a ramp down ran; vllm bench refuses it)
                raise ValueError(f"ramp_up_start_rps ({self.ramp_up_start_rps:g}) above ramp_up_end_rps "
                                 f"({self.ramp_up_end_rps:g}): a ramp goes up, as vllm bench serve's (it refuses "
                                 f"this); a falling rate is a curve's (process: curve, points)")
        elif self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None:
            raise ValueError("ramp_up_start_rps and ramp_up_end_rps need ramp_up_strategy")
        if self.fit_span and (self.process not in ("poisson", "gamma", "constant") or self.ramp_up_strategy is not None):
            raise ValueError("fit_span applies to poisson, gamma and constant arrivals without a ramp")
        if self.vllm_client_draws and self.process not in ("poisson", "gamma", "constant"):
            raise ValueError("vllm_client_draws applies to poisson, gamma and constant arrivals")
        if self.process == "curve":
            ts = [t for t, _ in self.points]
            if len(ts) < 2 or any(b <= a for a, b in zip(ts, ts[1:])):
                raise ValueError("points need at least two [t_s, rate] pairs with increasing t_s")
            if not any(r > 0 for _, r in self.points):
                raise ValueError("points must have some positive rate")
            # a rate of 1e-320 underflowed the curve's integral to 0: numpy's warnings, then "never arrive" (r159)
            if odd := next(((t, r) for t, r in self.points if r and not MIN_RATE <= r <= MAX_RATE), None):
                raise ValueError(f"points: the rate {odd[1]!r} at {odd[0]:g} s is neither 0 nor in [{MIN_RATE:g}, "
                                 f"{MAX_RATE:g}] requests per second")
            if ts[-1] > MAX_SECONDS:  # (1.7e308 s overflowed numpy's sums)
                raise ValueError(f"points: a time of {ts[-1]:g} s is past the {MAX_SECONDS:g} s servesim simulates")
            if self.period_s is not None and self.period_s < ts[-1]:
                raise ValueError("period_s must cover the last point")
        return self

    @property
    def open_loop(self) -> bool:
        return self.process != "closed_loop"

    def client_generator(self, seed: int) -> np.random.RandomState | None:
        """vLLM's client's own stream for its gaps (np.random.seed(seed)), apart from the dataset's lengths, so one
        seed sends the same requests at every rate, as vLLM's does (round 125); None: servesim's, the lengths'."""
        return np.random.RandomState(seed) if self.vllm_client_draws else None

    def gap_stream(self, seed: int, count: int | None, rng: np.random.Generator):
        """The stream an open loop's gaps are drawn from: vLLM's client's own (vllm_client_draws); a stream of
        their own where a duration, not a count, ends the arrivals (r138); else the lengths' stream, before them
        (so a gamma of cv other than 1, a constant or a burst, drawing otherwise than Poisson's, draws other lengths:
        the docs' real measurements of bursty levels were made with those requests)."""
        client = self.client_generator(seed)
        if client is not None:
            return client
        return np.random.default_rng([seed, 1]) if count is None else rng

    def times(self, n: int | None, duration_s: float | None, rng: np.random.Generator) -> np.ndarray:
        """Arrival times of at most n requests within [0, duration_s), the first at 0 (after a gap of its own with
        a ramp or fit_span, as vLLM's client sends it)."""
        if n is None and duration_s is None:
            raise ValueError("give num_requests or duration_s")
        if self.ramp_up_strategy is not None:
            if n is None:
                raise ValueError("ramp_up_strategy needs num_requests (the ramp is over the requests)")
            return self._finite(_within(np.cumsum(self._ramp_gaps(n, rng)), duration_s))
        chunks, clock, count = [], 0.0, 0
        while True:
            k = n - count if n is not None else 4096
            if self.process == "constant":  # k / rate, not a sum of k gaps: rounding put the rD-th request at
                # 9.99999999999998 s, inside a duration of 10 s (r155: 101 requests at 10 req/s)
                base = (count + np.arange(k) + (1 if self.fit_span else 0)) / self.rate
            else:
                base = clock + np.cumsum(self._gaps(k, rng, first=not chunks and not self.fit_span))
            clock = float(base[-1])
            t = self._wall_clock(base)
            chunks.append(t)
            count += k
            if count > MAX_REQUESTS:  # a duration (not a count) bounds the run: refuse what cannot be held
                raise ConfigError("workload.duration_s", f"more than {MAX_REQUESTS:,} arrivals within "
                                                         f"{duration_s:g} s at this rate; shorten the run")
            if (n is not None and count >= n) or self.process == "burst" \
                    or (duration_s is not None and t[-1] >= duration_s):
                break
        times = np.concatenate(chunks)
        times = times[:n] if n is not None else times
        if self.fit_span and times[-1] > 0:  # vLLM's client: a first delay too, and the last sent at n / rate
            times = times * (len(times) / self.rate / times[-1])
        # after fit_span's scaling (r147: scaled after the cut, some came after it)
        return self._finite(_within(times, duration_s))

    def _finite(self, times: np.ndarray) -> np.ndarray:
        """Arrivals a rate falling to zero (or next to it) would push past any finite time, or past what can be
        simulated: refused by name."""
        if not np.isfinite(times).all():
            lost = int((~np.isfinite(times)).sum())
            hint = "give higher rates, or a longer period_s" if self.period_s else \
                "give a positive rate, or period_s for a curve"
            raise ConfigError("workload.arrival", f"{lost:,} of {len(times):,} requests would never arrive: the rate "
                                                  f"falls to (next to) zero; {hint}")
        late = int((times > MAX_SECONDS).sum())
        if late:  # as for a trace: a run past this is a mistake in the settings, not a workload
            raise ConfigError("workload.arrival", f"{late:,} of {len(times):,} requests would arrive after "
                                                  f"{MAX_SECONDS:g} s (at most {MAX_SECONDS:g} s can be simulated)")
        return times

    def _gaps(self, k: int, rng: np.random.Generator, first: bool) -> np.ndarray:
        p = self.process
        if p == "burst":
            gaps = np.zeros(k)
        elif p == "constant":
            gaps = np.full(k, 1.0 / self.rate)
        elif p == "gamma" or p == "poisson" and self.vllm_client_draws:  # vLLM's client: gamma of shape 1 too
            shape = 1.0 / self.cv**2 if p == "gamma" else 1.0
            gaps = rng.gamma(shape, 1.0 / (self.rate * shape), size=k)
        elif p == "curve":  # a unit-rate clock, warped to the curve
            gaps = rng.exponential(1.0, size=k)
        else:  # poisson; onoff: Poisson in on-time
            gaps = rng.exponential(1.0 / self.rate, size=k)
        if first and p != "curve":
            gaps[0] = 0.0  # the run starts with the first arrival (a curve's is drawn: its rate may start at 0)
        return gaps

    def _ramp_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """vLLM bench's ramp: each request's gap drawn at its own rate (start to end over the requests)."""
        p = np.arange(n) / max(n - 1, 1)
        lo, hi = self.ramp_up_start_rps, self.ramp_up_end_rps
        rates = lo + (hi - lo) * p if self.ramp_up_strategy == "linear" else lo * (hi / lo) ** p
        shape = 1.0 / self.cv**2 if self.process == "gamma" else 1.0
        gaps = np.full(n, np.inf)
        ok = rates > 0  # vLLM waits forever at rate 0 (its client asserts a positive rate)
        if self.process == "constant":  # vLLM's burstiness inf: 1 / rate, nothing drawn
            gaps[ok] = 1.0 / rates[ok]
            return gaps
        gaps[ok] = rng.gamma(shape, 1.0, size=int(ok.sum())) / (rates[ok] * shape)
        return gaps  # the first too: vLLM's client waits a gap at the start rate before its first request

    def _wall_clock(self, t: np.ndarray) -> np.ndarray:
        if self.process == "onoff":
            return np.floor(t / self.on_s) * (self.on_s + self.off_s) + np.mod(t, self.on_s)
        if self.process == "curve":
            return self._warp(t)
        return t

    def _warp(self, s: np.ndarray) -> np.ndarray:
        """Time change: the expected count to time t is the integral of the rate; invert it. Times past any finite
        one (a curve of next to no requests) come out inf, without numpy's warnings: _finite refuses them by name."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return self._warped(s)

    def _warped(self, s: np.ndarray) -> np.ndarray:
        pts = np.array(self.points, dtype=float)
        period = self.period_s
        end = period or pts[-1, 0]  # the curve's own points on the grid: its integral is exact (r137: a spike
        grid = np.union1d(np.linspace(0.0, end, 20_001), pts[(pts[:, 0] >= 0) & (pts[:, 0] <= end), 0])  # between
        # grid points, 4 s apart on a day, vanished)
        rate = np.interp(grid, pts[:, 0], pts[:, 1])  # flat beyond the last point
        cum = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
        total = cum[-1]
        if not total > 0:  # points too close together to hold a request (0 and 1e-320 s): no numpy warning (r159)
            raise ConfigError("workload.arrival.points", f"the curve's rates add up to {total:g} requests over its "
                                                         f"{end:g} s: it sends nothing")
        if period is None:  # beyond the last point the last rate holds
            last = pts[-1, 1]
            inside = s <= total
            out = np.empty_like(s)
            out[inside] = np.interp(s[inside], cum, grid)
            out[~inside] = grid[-1] + (s[~inside] - total) / last if last > 0 else np.inf
            return out
        cycles = np.floor(s / total)
        out = cycles * period + np.interp(s - cycles * total, cum, grid)
        return np.where(np.isfinite(cycles), out, np.inf)  # (inf * period - ...: nan)
