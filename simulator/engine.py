"""The serving loop: arrivals feed replicas; each replica runs vLLM-style steps in SimPy.

One SimPy process per replica: schedule a batch, ask the executor how long it takes,
wait that long, apply the result. Never one event per token: a step is O(batch), and
a run of uninterrupted decode steps is advanced at once (see Scheduler.decode_run_limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies import make_batching, make_queue_policy
from simulator.batch import decode_shape
from simulator.clock import SimClock
from simulator.config import ResolvedScenario
from simulator.executor import ModelledExecutor
from simulator.kv_cache import KVBlockManager
from simulator.metrics import RunResult, StepLog
from simulator.request import REJECTED, Request
from simulator.scheduler import Scheduler, SchedulerSettings
from workloads.spec import RequestSpec


class ArrivalSource:
    """Delivers requests at their arrival times and knows when the next one comes."""

    def __init__(self, env: SimClock, specs: list[RequestSpec], max_model_len: int, deliver):
        self.env = env
        self.specs = sorted(specs, key=lambda s: (s.arrival_time, s.request_id))
        self.max_model_len = max_model_len
        self.deliver = deliver
        self.next_time = self.specs[0].arrival_time if self.specs else math.inf
        self.requests: list[Request] = []

    def run(self):
        specs = self.specs
        for i, spec in enumerate(specs):
            yield self.env.at(spec.arrival_time, urgent=True)
            self.next_time = specs[i + 1].arrival_time if i + 1 < len(specs) else math.inf
            req = Request(spec, self.max_model_len)
            self.requests.append(req)
            if spec.prompt_tokens >= self.max_model_len:  # vLLM answers 400: no room for one output token
                req.status = REJECTED
                req.reject_reason = "prompt_too_long"
                continue
            self.deliver(req)


class Replica:
    def __init__(self, env: SimClock, index: int, rs: ResolvedScenario, arrivals: ArrivalSource,
                 executor=None):
        e, p = rs.scenario.engine, rs.scenario.policies
        self.env = env
        self.index = index
        self.kv = KVBlockManager(rs.num_gpu_blocks, e.block_size, rs.max_model_len, e.watermark)
        settings = SchedulerSettings(
            max_num_batched_tokens=rs.max_num_batched_tokens, max_num_seqs=rs.max_num_seqs,
            max_model_len=rs.max_model_len, enable_chunked_prefill=e.enable_chunked_prefill,
            long_prefill_token_threshold=e.long_prefill_token_threshold,
            scheduler_reserve_full_isl=e.scheduler_reserve_full_isl)
        batching = make_batching(p.batching, p.static_batch_size or rs.max_num_seqs)
        self.scheduler = Scheduler(settings, self.kv, make_queue_policy(p.queue), batching)
        self.executor = executor or ModelledExecutor(rs.cost_model)
        self.decode_runs = rs.scenario.simulation.decode_runs and getattr(self.executor, "pure", False)
        self.arrivals = arrivals
        self.log = StepLog()
        self._idle = None

    def add_request(self, req: Request) -> None:
        req.replica = self.index
        self.scheduler.add_request(req)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def run(self):
        env, sched, kv, log = self.env, self.scheduler, self.kv, self.log
        run_batch = self.executor.run
        step = 0
        while True:
            if not sched.has_work():
                self._idle = env.event()
                yield self._idle
                self._idle = None
                continue
            now = env.now
            k = sched.decode_run_limit() if self.decode_runs else 0
            if k:
                batch = len(sched.running)
                ctx = sched.decode_context_tokens()
                waiting = len(sched.waiting)
                next_arrival = self.arrivals.next_time
                ends, t = [], now
                for j in range(k):
                    if j and t >= next_arrival:
                        break  # step-by-step would see the arrival at this step
                    t = t + run_batch(decode_shape(batch, ctx + batch * j))
                    ends.append(t)
                yield env.at(t)
                used_after, _ = sched.apply_decode_run(len(ends), step, t)
                log.add_decode_run(now, ends, batch, waiting, used_after)
                step += len(ends)
            else:
                out = sched.schedule(now)
                if not out.reqs:
                    raise RuntimeError(f"replica {self.index}: nothing schedulable with {len(sched.waiting)} waiting")
                t = now + run_batch(out.shape, out)
                used = kv.num_used_blocks
                yield env.at(t)
                sched.update_from_output(out, step, t)
                log.add_step(now, t, out.shape, out.num_running, out.num_waiting, used, len(out.preempted))
                step += 1


@dataclass
class Simulation:
    env: SimClock
    replicas: list[Replica]
    arrivals: ArrivalSource


def build(rs: ResolvedScenario, specs: list[RequestSpec] | None = None) -> Simulation:
    if specs is None:
        specs = rs.scenario.workload.generate(rs.scenario.seed)
    env = SimClock()
    replicas: list[Replica] = []
    arrivals = ArrivalSource(env, specs, rs.max_model_len, lambda req: replicas[0].add_request(req))
    replicas.append(Replica(env, 0, rs, arrivals))
    env.process(arrivals.run())
    for r in replicas:
        env.process(r.run())
    return Simulation(env, replicas, arrivals)


def simulate(rs: ResolvedScenario, specs: list[RequestSpec] | None = None) -> RunResult:
    """Run a scenario to the end (or simulation.max_sim_time_s) and collect its metrics."""
    sim = build(rs, specs)
    until = rs.scenario.simulation.max_sim_time_s
    sim.env.run(until=until)
    return RunResult.collect(rs, sim.arrivals.requests, [r.log for r in sim.replicas],
                             [r.kv.num_usable_blocks for r in sim.replicas], sim.env.now)
