"""The serving loop: arrivals feed replicas; each replica runs vLLM-style steps in SimPy.

One SimPy process per replica: schedule a batch, ask the executor how long it takes,
wait that long, apply the result. Never one event per token: a step is O(batch), and
a run of uninterrupted decode steps is advanced at once (simulator/decode_runs.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from servesim.policies import make_batching, make_queue_policy
from servesim.policies.routing import Deployment, VllmDataParallel, make_router
from servesim.simulator.admission import AdmissionRules, predicted_queue_wait
from servesim.simulator.batch import BatchShape, decode_shape
from servesim.simulator.clock import SimClock
from servesim.simulator.config import ResolvedScenario, say_once
from servesim.simulator.decode_runs import apply_decode_run, decode_run_limit
from servesim.simulator.disaggregation import KVHandOff
from servesim.simulator.errors import ConfigError
from servesim.simulator.executor import ModelledExecutor, StepTimer
from servesim.simulator.front_end import FrontEnd, Route
from servesim.simulator.hybrid_kv import make_kv_manager
from servesim.simulator.lockstep import LockstepGroup
from servesim.simulator.metrics import RunResult
from servesim.simulator.records import StepLog
from servesim.simulator.preemption import Preemption
from servesim.simulator.request import Request
from servesim.simulator.scheduler import Scheduler
from servesim.simulator.speculation import counters, make_speculation
from servesim.workloads.source import RequestSource, SessionSource, StaticSource
from servesim.workloads.spec import RequestSpec


ARRIVAL_TIE_S = 1e-9  # an arrival this close after a step's end is the finish that sent it: float rounding apart


class Replica:
    """One engine (a vLLM EngineCore): its scheduler, KV pool and step timer, stepping in one SimPy process."""

    def _stalled(self) -> Exception:
        """Nothing can be scheduled though requests wait. A prompt larger than the whole pool is the settings'
        (vLLM 0.19 starts with a num_gpu_blocks_override below one max-length request, as it checks the memory it
        profiled, then waits on that request for ever); anything else is a bug (a decode replica's pulled prompts,
        which hold their blocks, are admitted before its queue's head, as vLLM admits them: r132)."""
        kv, waiting = self.kv, [*self.scheduler.waiting, *self.scheduler.loaded]
        longest = max((r.num_tokens for r in waiting), default=0)  # a preempted one's output is prefilled again
        if kv.blocks_to_admit(longest) > kv.num_usable_blocks:  # local-attention groups' blocks counted too
            whole = " (vLLM 0.19 admits a prompt only where each local-attention group holds it whole, as the full " \
                    "group does: its issue 39734, which 0.33 fixed)" if getattr(kv, "admission_cap", True) is False else ""
            return ConfigError(self._pool_field,
                               f"a request of {longest:,} tokens (its prompt, and its output when preempted) needs "
                               f"{kv.blocks_to_admit(longest):,} blocks, more than the KV pool's "
                               f"{kv.num_usable_blocks:,} usable blocks of {kv.block_size}{whole}: vLLM would wait on "
                               f"it for ever; give more blocks or lower max_model_len")
        sched = self.scheduler
        head = sched.waiting.peek() if len(sched.waiting) else None
        if head is not None and sched.loaded and not sched.running and len(sched.holding) == len(sched.loaded) \
                and not sched.next_is_loaded() and kv.blocks_to_admit(head.num_tokens) > kv.num_free_blocks:
            # r139: 0.19 under priority takes a loaded request only where it ranks first; a preempted head ranks
            # first and waits for blocks that the loaded requests behind it hold: vLLM's scheduler breaks there too
            held = sum(len(r.blocks) for r in sched.holding.values())
            return ConfigError(self._pool_field,
                               f"replica {self.index} waits for ever: its queue's head (request {head.request_id}, "
                               f"{head.num_tokens:,} tokens) needs {kv.blocks_to_admit(head.num_tokens):,} blocks, "
                               f"{kv.num_free_blocks:,} are free, {len(sched.holding):,} request(s) whose pulled KV "
                               f"ranks behind it hold {held:,}, and nothing runs to free any (vLLM 0.19's scheduler "
                               f"stops at such a head too, under priority); give more blocks")
        return RuntimeError(f"replica {self.index}: nothing schedulable with {len(waiting)} waiting")

    def __init__(self, env: SimClock, index: int, rs: ResolvedScenario, front_end: FrontEnd,
                 executor=None, prefill_only: bool = False, hand_off=None, lockstep: LockstepGroup | None = None):
        e, p, sp = rs.scenario.engine, rs.scenario.policies, rs.scenario.speculative
        # what sized the pool against the longest request, for the one line a request too large for it gets (0.19
        # fits max_model_len against the blocks with the null one, which no request can hold)
        self._pool_field = "engine.num_gpu_blocks_override" if e.num_gpu_blocks_override else "engine.max_model_len"
        self.env = env
        self.index = index
        layout = rs.kv_layout
        self.kv = make_kv_manager(layout, e.enable_prefix_caching, rs.in_flight_tokens, rs.num_gpu_blocks,
                                  e.block_size, rs.max_model_len, e.watermark)
        if e.enable_prefix_caching:
            self.kv.empty_first = not e.is_0_19  # 0.19's BlockPool appends every freed block to the queue's tail
        if e.enable_prefix_caching and sp.method != "none":
            self.kv.drop_last_hit, self.kv.hash_lookahead = sp.eagle_block_drop, sp.lookahead_block_hashes
        if layout.local_groups:
            self.kv.admission_cap = not e.is_0_19  # 0.19 admits a prompt only where every group holds it whole
            self.kv.frees_processed = not e.is_0_19 and rs.async_scheduling  # 0.19 frees on the tokens scheduled
        if e.enable_prefix_caching and layout.local_groups:  # 0.33's sparse window cache; 0.19 keeps every block
            self.kv.window_retention = None if e.is_0_19 else e.prefix_cache_retention_interval
            self.kv.eagle_margin = not e.is_0_19
        settings = replace(rs.scheduler, prefill_only=prefill_only)
        batching = make_batching(p.batching, p.static_batch_size or rs.max_num_seqs)
        # swap: one KV block over the host link; recompute: the marginal cost of prefilling the tokens again
        block_bytes = layout.page_bytes_per_token * e.block_size
        self.block_transfer_s = block_bytes / (rs.hardware.host_link_gbps * 1e9)
        cost = rs.cost_model.step_time
        base = cost(BatchShape(1, 1, 1, 0, 0))
        recompute = lambda t: cost(BatchShape(1, t, t * (t + 1) // 2, 0, 0)) - base if t else 0.0  # noqa: E731
        swap_blocks = int(e.swap_space * 2**30 // block_bytes)
        if p.preemption_mode != "recompute" and swap_blocks == 0:
            say_once([f"servesim: warning: engine.swap_space={e.swap_space:g} GiB holds no KV block ({block_bytes:,} "
                      f"bytes each): policies.preemption_mode={p.preemption_mode} recomputes every victim"])
        preemption = Preemption(p.preemption_mode, swap_blocks,
                                swap_cost=lambda blocks: blocks * self.block_transfer_s, recompute_cost=recompute)
        admission = AdmissionRules(p.admission.reserve, p.admission.reserve_quantile, p.admission.long_prompt_tokens,
                                   p.admission.max_long_prefills, rs.max_model_len, prefill_only)
        self.speculation = make_speculation(sp, rs.scenario.seed + 1009 * (index + 1),
                                            rs.cost_model.knee_tokens() or rs.max_num_batched_tokens, cost,
                                            skips_unused_drafts=not rs.scenario.engine.is_0_19
                                            if sp.skips_unused_drafts is None else sp.skips_unused_drafts)
        self.hand_off = hand_off
        self.scheduler = Scheduler(settings, self.kv, make_queue_policy(p.queue, p.preemption_victim), batching,
                                   preemption, admission, self.speculation)
        self.max_num_queued_reqs, self.max_num_queued_tokens = e.max_num_queued_reqs, e.max_num_queued_tokens
        self.deployment = [self]  # the engines behind this one's API server (its DP ranks): the queue limits count them all
        budget = rs.max_num_batched_tokens
        self.prefill_tokens_per_s = budget / cost(BatchShape(1, budget, budget * (budget + 1) // 2, 0, 0))
        self._step_time = cost
        self.ttft_slo_s = None  # SLO-based shedding: class -> TTFT target (s)
        if p.admission.shed_on_ttft_slo:
            classes = getattr(rs.scenario.workload, "slo_classes", None) or {}
            self.ttft_slo_s = {c: v.ttft_ms / 1000 for c, v in classes.items() if v.ttft_ms}
            fallback = p.admission.shed_ttft_ms
            self.ttft_slo_default = fallback / 1000 if fallback else None
        self.timer = StepTimer(executor or ModelledExecutor(rs.cost_model), self.block_transfer_s, self.speculation)
        self.decode_runs = (rs.scenario.simulation.decode_runs and self.timer.pure
                            and rs.scheduler.local_attention is None)  # local layers read (and hold) a moving window
        cut = rs.scenario.simulation.max_sim_time_s
        self.cut = float("inf") if cut is None else cut  # a step ending at or after it never completes
        self.front_end = front_end
        self.log = StepLog()
        self._idle = None
        # async scheduling plans each step as the one before it starts: the last step's start and end
        self.async_scheduling, self._last_step = rs.async_scheduling, (math.inf, math.inf)
        self.lockstep = lockstep
        if lockstep is not None:
            self.decode_runs = False  # every step waits for the other ranks
        if rs.scenario.simulation.decode_runs and self.timer.pure:
            self.scheduler.use_decode_cohort()  # steady decoders advanced implicitly (decode_cohort.py)

    def queue_full(self) -> bool:
        """max_num_queued_reqs: one more unfinished request would exceed it. vLLM's API server counts the requests
        of every DP rank it routes to (config/scheduler.py: "across all DP ranks")."""
        return self.max_num_queued_reqs is not None and \
            sum(r.unfinished for r in self.deployment) + 1 > self.max_num_queued_reqs

    def queue_limit_error(self) -> str | None:
        """vLLM's check_admission (AsyncLLM): an HTTP 503 at arrival, before the scheduler sees it."""
        if self.queue_full():
            return "queue_full"
        if self.max_num_queued_tokens is not None and \
                sum(r.scheduler.queued_prompt_tokens for r in self.deployment) >= self.max_num_queued_tokens:
            return "queued_tokens_full"
        return None

    def shedding_error(self, req: Request) -> str | None:
        """servesim's load shedding (essay 003), at the engine a request was routed to."""
        if self.ttft_slo_s is not None:  # essay 003: refuse work that cannot start within its SLO
            slo = self.ttft_slo_s.get(req.spec.slo_class, self.ttft_slo_default)
            if slo is not None and self._predicted_first_token_wait(req) > slo:
                return "predicted_ttft_over_slo"
        return None

    def _predicted_first_token_wait(self, req: Request) -> float:
        """Its queue here and, on a prefill replica, the queue of the decode replica the proxy would send it to and
        the KV pull, which TTFT includes (r128: judged on the prefill queue alone, 180 of 196 admitted missed it).
        The decode side computes no prompt (its last token again): only its admission rate counts there."""
        wait = predicted_queue_wait(self.scheduler, req, self.prefill_tokens_per_s, self.env.now)
        if self.hand_off is not None:  # and the pull of its KV over this replica's link, which TTFT includes too
            decode = self.hand_off.next_decode()
            wait += predicted_queue_wait(decode.scheduler, req, math.inf, self.env.now, False) + \
                self.hand_off.predicted_transfer(req, self.index, decode, self.env.now)
        return wait

    # -- what routers see ----------------------------------------------------
    @property
    def unfinished(self) -> int:
        sched = self.scheduler
        return len(sched.running) + len(sched.waiting) + sched.pulling

    @property
    def waiting(self) -> int:
        return len(self.scheduler.waiting) + self.scheduler.pulling

    @property
    def kv_usage(self) -> float:
        return self.kv.usage()

    def cached_prefix_tokens(self, req: Request) -> int:
        return self.kv.lookup(req)[1]

    def predicted_queue_wait(self, req: Request) -> float:
        return predicted_queue_wait(self.scheduler, req, self.prefill_tokens_per_s, self.env.now)

    def predicted_tpot(self) -> float:
        """One decode step with one more sequence in the batch."""
        sched = self.scheduler
        return self._step_time(decode_shape(len(sched.running) + 1, sched.decode_context_tokens() + 1))

    def add_request(self, req: Request) -> None:
        req.replica = self.index
        self.scheduler.add_request(req, self.env.now)
        self._wake()

    def kv_pulled(self, req: Request) -> None:
        """Disaggregation: a request's KV has arrived from its prefill replica."""
        self.scheduler.pulled(req, self.env.now)
        self._wake()

    def _wake(self) -> None:
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _sleep(self):
        """Idle until an arrival or a pulled KV wakes it."""
        self._idle = self.env.event()
        yield self._idle
        self._idle = None

    def _decode_run(self, now: float) -> tuple[list[float], int, int]:
        """The ends of the decode steps to advance at once from `now` (none: take a plain step), the batch and
        its decode context. A run stops before the step an arrival falls in: the router reads this replica's
        blocks and context then, as that step left them, and a run applies its steps only at its end."""
        k = decode_run_limit(self.scheduler)
        if not k:
            return [], 0, 0
        sched, timer = self.scheduler, self.timer
        batch, ctx, next_arrival = len(sched.running), sched.decode_context_tokens(), self.front_end.next_time
        ends, t = [], now
        for j in range(k):
            end = t + timer.decode_step(decode_shape(batch, ctx + batch * j))
            if end > next_arrival or (j and end >= self.cut):
                break  # an arrival inside it; or it, and with it the run, would outlast the cut
            t = end
            ends.append(t)
        return ends, batch, ctx

    def _schedule(self, now: float):
        """The scheduler's step at `now`. Under async scheduling vLLM planned it as the step before started,
        so what reached the queue since waits one step more (r141: admitted a step early, some 20% of TTFT at
        light load); where that leaves nothing to run, nothing was planned behind that step and they join now
        (vLLM runs one step for requests that finished in it first: its hold, not modelled)."""
        sched = self.scheduler
        start, end = self._last_step
        sched.admit_before = start if self.async_scheduling and now - end <= ARRIVAL_TIE_S else math.inf  # back to back
        out = sched.schedule(now)
        if not out.reqs and not out.implicit and not out.preempted and sched.admit_before < math.inf:
            sched.admit_before = math.inf
            out = sched.schedule(now)
        return out

    def run(self):
        env, sched, kv, log = self.env, self.scheduler, self.kv, self.log
        timer = self.timer
        step = 0
        while True:
            if not sched.has_work():
                yield from self._sleep()
                continue
            if self.lockstep is not None and self.lockstep.busy():  # the other ranks are mid-step: join the next
                yield self.lockstep.ended
                continue
            now = env.now
            ends, batch, ctx = self._decode_run(now) if self.decode_runs else ([], 0, 0)
            if ends:
                waiting, t = len(sched.waiting), ends[-1]
                yield env.at(t)
                used_after, finished = apply_decode_run(sched, len(ends), step, t)
                log.add_decode_run(now, ends, batch, waiting, used_after, ctx)
                self._last_step = (ends[-2] if len(ends) > 1 else now, t)
                if finished:
                    log.left(len(sched.running), kv.num_used_blocks)
                step += len(ends)
                for r in finished:
                    self.front_end.finished(r, t)
            else:
                out = self._schedule(now)
                if not out.reqs and not out.implicit:
                    if sched.pulling and not out.preempted:  # what it admitted waits for its KV: so does it
                        yield from self._sleep()
                        continue
                    if not out.preempted:
                        raise self._stalled()
                    # a step that only preempted (0.19: a request that was its own victim): no model run, only
                    # the copy of a swapped-out victim over the host link
                    t = now + out.swapped_blocks * timer.block_transfer_s
                else:
                    t = timer.end(now, out)
                used = kv.num_used_blocks
                if self.lockstep is None:
                    yield env.at(t)
                else:
                    t = yield from self.lockstep.step(t)
                self._last_step = (now, t)
                finished = sched.update_from_output(out, step, t)
                log.add_step(now, t, out.shape, out.num_running, out.num_waiting, used, len(out.preempted),
                             out.swapped_blocks, out.spec_drafts, out.spec_accepted, out.spec_discarded)
                if finished or out.handed_off:
                    log.left(len(sched.running), kv.num_used_blocks)
                step += 1
                for r in out.handed_off:
                    self.hand_off(r, t)
                for r in finished:
                    self.front_end.finished(r, t)
            if finished and (due := self.front_end.next_time) <= env.now + ARRIVAL_TIE_S:  # a follow-up sent as a
                # request ended arrives now: it joins the next step, as a request due now does (r119: it waited one);
                # one a replayed file times a few ulps later, rebased from its clock, too (r149: compare of a
                # --max-concurrency run, TTFT +38%)
                yield env.at(max(env.now, due))


@dataclass
class Simulation:
    env: SimClock
    replicas: list[Replica]
    front_end: FrontEnd


def max_tokens_sent(workload, engine) -> dict:
    """How the API server checks the max_tokens a request sends: refuse or lower one past max_model_len
    (workload.max_tokens_past_context, else as engine.vllm_defaults' release does); whether a request without its
    own sends its output length (workload.request_max_tokens); the min_tokens each asks for (workload.min_tokens)."""
    return {"past_context": getattr(workload, "max_tokens_past_context", None) or
            ("refuse" if engine.is_0_19 else "lower"),
            "sends_output_len": bool(getattr(workload, "request_max_tokens", False)),
            "min_tokens": getattr(workload, "min_tokens", None)}


def _oracle_note(scenario, front_replicas: int) -> Callable[[RequestSpec], None] | None:
    """SJF, an output reservation and the predicted-completion router read a request's max_tokens in advance;
    one that sends none gives them its true output length, which no real scheduler knows: said (at the first
    such request) rather than left for the result to pass as a policy's (r128: reserve=max_tokens, 0 preemptions)."""
    p, w = scenario.policies, scenario.workload
    if getattr(w, "request_max_tokens", False):  # every request sends its output length, as vllm bench serve's
        return None
    readers = [name for name, reads in (
        ("policies.queue=sjf", p.queue == "sjf"),
        (f"policies.admission.reserve={p.admission.reserve}" + (" (until its class has finished requests)"
                                                                 if p.admission.reserve == "quantile" else ""),
         p.admission.reserve != "prompt"),
        ("cluster.router=predicted_completion", scenario.cluster.router == "predicted_completion"
         and front_replicas > 1)) if reads]
    if not readers:
        return None
    how = "workload.request_max_tokens sends each output length, as vllm bench serve does" + \
        (", or a trace row's max_tokens" if w.type == "trace" else "")

    def note(spec: RequestSpec) -> None:
        say_once([f"servesim: warning: {' and '.join(readers)} read{'s' if len(readers) == 1 else ''} a request's "
                  f"max_tokens in advance, and request {spec.request_id} sends none: its true output length is read "
                  f"instead, which no real scheduler knows (an oracle; {how})"])
    return note


def build(rs: ResolvedScenario, specs: list[RequestSpec] | RequestSource | None = None,
          executor=None, keep_requests: bool = False, release_source: bool | None = None) -> Simulation:
    """specs: the scenario's workload when None; else a list of requests or any RequestSource.
    executor: how long a batch takes; the scenario's cost model when None. keep_requests: keep every Request
    object (`front_end.requests`) to inspect, rather than only their rows. release_source: the source may let go of
    its requests once the run has them (default: only a source made here, from the scenario or a list)."""
    if release_source is None:
        release_source = not isinstance(specs, RequestSource)
    if specs is None:
        source = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    elif isinstance(specs, RequestSource):
        source = specs
    else:
        source = StaticSource(list(specs))
    env = SimClock()
    replicas: list[Replica] = []
    c = rs.scenario.cluster
    dp = rs.scenario.engine.data_parallel_size
    engines = c.replicas * dp  # each DP rank is an engine of its own
    front = c.prefill_replicas or engines  # the replicas new requests are routed to
    route = _router(c, dp, front, rs.scenario.seed, rs.scenario.engine.is_0_19, replicas)
    front_end = FrontEnd(env, source, rs.max_model_len, Route(lambda req: replicas[route.deployment(req)],
                                                              lambda req, first: replicas[route.rank(req, first.index)]),
                         keep_requests, release_source, **max_tokens_sent(rs.scenario.workload, rs.scenario.engine),
                         without_max_tokens=_oracle_note(rs.scenario, front))
    if executor is not None and (engines > 1 or c.prefill_replicas):
        raise ConfigError("cluster.replicas", "a measured replay runs one replica")
    if c.prefill_replicas:
        hand_off = KVHandOff(front_end, replicas, front, rs.arch.kv_bytes_per_token_per_gpu(
            rs.scenario.engine.tensor_parallel_size), c.kv_link_gbps * 1e9, rs.kv_layout, c.decode_router == "round_robin")
        replicas.extend(Replica(env, i, rs, front_end, prefill_only=True, hand_off=hand_off) for i in range(front))
        replicas.extend(Replica(env, front + i, rs, front_end) for i in range(c.replicas))
        for r in replicas[front:]:
            r.scheduler.pull = hand_off.pull
    else:
        groups = [LockstepGroup(env) for _ in range(c.replicas)] if dp > 1 and rs.scenario.engine.enable_expert_parallel \
            else None  # expert parallelism couples a deployment's DP ranks
        replicas.extend(Replica(env, i, rs, front_end, executor, lockstep=groups[i // dp] if groups else None)
                        for i in range(engines))
        for r in replicas:
            r.deployment = replicas[r.index // dp * dp:(r.index // dp + 1) * dp]
    if c.prefill_replicas or (len(replicas) > 1 and not isinstance(source, StaticSource)):
        # one replica's finish can then send work to another in the middle of its decode run, which a
        # run planned earlier cannot see: simulate step by step
        for r in replicas:
            r.decode_runs = False
    env.process(front_end.run())
    for r in replicas:
        env.process(r.run())
    return Simulation(env, replicas, front_end)


def _router(c, dp: int, front: int, seed: int, vllm_0_19: bool, replicas: list) -> Route:
    """Which engine a new request goes to, in two stages: cluster.router over the replicas (deployments) -- in front
    of vLLM, it routes every request -- to the deployment's first engine; then, within a deployment of DP ranks,
    vLLM's own balancer (vllm_dp) over the ranks its API server reaches (cluster.dp_ranks_reached), which only the
    requests its API server admits reach (r165: a 400 or 503 moved the balancer's rotation on). `replicas` fills
    later."""
    router = make_router(c.router, front if c.prefill_replicas or dp == 1 else c.replicas, seed, vllm_0_19)
    if c.prefill_replicas or dp == 1:
        return Route(lambda req: router.choose(req, replicas[:front]), lambda req, first: first)
    reached = c.dp_ranks_reached or dp  # the ranks the API server balances over (hybrid/external balancing: fewer)
    balancers = [VllmDataParallel(reached, seed, vllm_0_19) for _ in range(c.replicas)]
    deployments: list[Deployment] = []

    def deployment(req: Request) -> int:
        if not deployments:
            deployments.extend(Deployment(replicas[d * dp:d * dp + reached]) for d in range(c.replicas))
        return (router.choose(req, deployments) if c.replicas > 1 else 0) * dp

    def rank(req: Request, first: int) -> int:
        return first + balancers[first // dp].choose(req, deployments[first // dp].ranks)
    return Route(deployment, rank)


def run_to_end(sim: Simulation, rs: ResolvedScenario) -> None:
    """The event loop, to the last event or simulation.max_sim_time_s."""
    sim.env.run(until=rs.scenario.simulation.max_sim_time_s)
    if rs.scenario.simulation.max_sim_time_s is None:  # no event left, yet a replica has requests: it stalled
        for r in sim.replicas:  # (r139: a decode replica slept on pulled KV for ever, its requests "unfinished")
            if r.scheduler.has_work():
                raise r._stalled()
    for r in sim.replicas:
        r.scheduler.settle()  # the requests' counters as step by step leaves them


def collect(sim: Simulation, rs: ResolvedScenario) -> RunResult:
    """A finished simulation's records as tables and the run summary."""
    source = sim.front_end.source
    result = RunResult.collect(rs, sim.front_end.log, [r.log for r in sim.replicas],
                               [r.kv.num_usable_blocks for r in sim.replicas], sim.env.now,
                               [counters(r.speculation) for r in sim.replicas],
                               source.held_back() if isinstance(source, SessionSource) else None,
                               sim.front_end.arrivals_left())
    # a cut (simulation.max_sim_time_s) stopped the clock with requests in flight or still to arrive
    result.cut = result.in_flight() > 0 or sim.front_end.arrivals_left()
    return result


def simulate(rs: ResolvedScenario, specs: list[RequestSpec] | RequestSource | None = None,
             executor=None, release_source: bool | None = None) -> RunResult:
    """Run a scenario to the end (or simulation.max_sim_time_s) and collect its metrics. release_source: as build's
    (the CLI's run gives its own source, which it reads only for counts afterwards)."""
    given = list(specs) if isinstance(specs, (list, tuple)) else \
        list(specs.initial()) if isinstance(specs, StaticSource) and not release_source else None
    sim = build(rs, specs, executor, release_source=release_source)
    run_to_end(sim, rs)
    result = collect(sim, rs)
    result.given_requests = given
    if isinstance(specs, RequestSource) and given is None and not release_source:
        result.unrepeatable = specs.kind  # its requests are made as the run goes: no file holds them
    result.warnings = run_warnings(rs, sim.front_end.source, result) + _swap_space_warning(rs, sim, result.summary)
    return result


def _swap_space_warning(rs: ResolvedScenario, sim, s: dict) -> list[str]:
    """A swap space that held no victim ran as recompute (r170: 5 blocks under victims of 19 or more, unsaid where
    0 blocks are said before the run)."""
    no_room = [b for r in sim.replicas for b in r.scheduler.preemption.no_room]
    if not no_room or s.get("num_swaps") or not sim.replicas[0].scheduler.preemption.swap_space_blocks:
        return []  # (no block at all: said before the run)
    e = rs.scenario.engine
    return [f"engine.swap_space={e.swap_space:g} GiB ({sim.replicas[0].scheduler.preemption.swap_space_blocks:,} "
            f"blocks) held none of the {len(no_room):,} victims policies.preemption_mode="
            f"{rs.scenario.policies.preemption_mode} would swap (the smallest held {min(no_room):,} blocks): every "
            f"one recomputed, as under recompute"]


NOTHING_COMPLETED = "no request completed"  # a sweep says these runs in one line of its own (sweep.table_warnings)


def run_warnings(rs: ResolvedScenario, source: RequestSource, result: RunResult) -> list[str]:
    """What a run says once it ends (`servesim run` and the API alike): its workload's own words (prompts cut to
    max_model_len, session turns never sent), the cost model's extrapolation, and what the clock's cut left out."""
    s = result.summary
    said = [*getattr(source, "warnings", ()), *s.get("cost_model_warnings", [])]
    if not s.get("completed", 0):
        said.append(f"{NOTHING_COMPLETED} ({s.get('failed', 0):,} rejected, {s.get('unfinished', 0):,} "
                    f"unfinished): the metrics below are empty")
    # what the cut left out, when the clock reached it; not what the source chose not to send (said by it)
    unsent = (source.planned() or 0) - result.num_requests - source.held_back()
    running, measured = result.in_flight(), s.get("unfinished", 0)
    if result.cut and (unsent > 0 or running):
        # r147: the measured window's count beside the whole run's never-arrived read as the whole run's
        counted = "counted as `unfinished`" if running == measured else \
            f"{measured:,} of them in the measured window, counted as `unfinished`"
        said.append(f"simulation.max_sim_time_s={rs.scenario.simulation.max_sim_time_s:g} ended the run: "
                    f"{running:,} request(s) unfinished ({counted}, in no latency)"
                    + (f", {unsent:,} never arrived (in no metric)" if unsent > 0 else ""))
    elif unsent > 0:  # no cut: the source sent fewer than it planned and said none held back (r158: unsaid)
        said.append(f"the request source ({source.kind}) planned {source.planned():,} requests and sent "
                    f"{result.num_requests:,}, holding back {source.held_back():,}: {unsent:,} never arrived, in no "
                    f"metric (its planned() or held_back() is not what it sends)")
    early = _turns_before_answers(result.request_columns, getattr(rs.scenario.workload, "max_concurrency", None))
    return said + early + _priorities_unread(rs, result.request_columns["priority"]) + \
        _affinity_on_few(rs, result.request_columns)


def _affinity_on_few(rs: ResolvedScenario, cols: dict) -> list[str]:
    """prefix_affinity reads load only to break ties: a prefix every request shares (a system prompt), cached on
    one replica, takes them all there (r179: 3 of 4 replicas idle, unsaid)."""
    import numpy as np

    c, dp = rs.scenario.cluster, rs.scenario.engine.data_parallel_size
    front = c.prefill_replicas or c.replicas  # what the router picks among: instances (or prefill replicas)
    if c.router != "prefix_affinity" or front < 2 or not rs.scenario.engine.enable_prefix_caching:
        return []  # (caching off: it routes as least_outstanding, said before the run)
    from servesim.simulator.request import REJECTED

    routed = np.asarray(cols["prefill_replica"] if c.prefill_replicas else cols["replica"])
    served = np.fromiter((s != REJECTED for s in cols["status"]), dtype=bool, count=len(routed))
    routed = routed[served & (routed >= 0)] // (1 if c.prefill_replicas else dp)  # (r180: refusals counted)
    taken = np.bincount(routed, minlength=front)
    idle = np.flatnonzero(taken == 0)
    if not len(idle) or len(routed) < 2 * front:
        return []
    return [f"cluster.router=prefix_affinity sent all {len(routed):,} requests it routed to {front - len(idle)} of "
            f"the {front} replicas ({'replica' if len(idle) == 1 else 'replicas'} "
            f"{', '.join(map(str, idle[:8].tolist()))}{', ...' if len(idle) > 8 else ''} took none): a prefix cached "
            f"on one (a shared system prompt) outranks load, which it reads only to break ties"]


def _priorities_unread(rs: ResolvedScenario, priorities) -> list[str]:
    """A priority queue or victim over requests of one priority orders them by arrival alone (r174: "priority vs
    fcfs" ran two identical runs, unsaid; the reverse, priorities nothing reads, is said before the run)."""
    p = rs.scenario.policies
    readers = ([f"policies.queue={p.queue}"] if p.queue == "priority" else []) + \
        (["policies.preemption_victim=lowest_priority"] if p.preemption_victim == "lowest_priority" else [])
    levels = {0 if v is None else v for v in priorities}
    if not readers or len(levels) != 1:
        return []
    so = "the queue orders them by arrival alone, as fcfs does" if p.queue == "priority" else \
        "each victim is the latest arrival running"
    return [f"{' and '.join(readers)}: every request has priority {levels.pop()} (give workload.priorities, "
            f"slo_classes' priority or a trace's priority column), so {so}"]


def _turns_before_answers(cols: dict, cap: int | None = None) -> list[str]:
    """A trace's session turns replayed at their recorded times, before the answer their prompt holds exists here
    (r174: turns 1 and 2 finished 3 s before turn 0, unsaid), or after a turn the server refused, whose answer never
    exists (r179: unsaid); a synthetic session's never are (it sends each turn once the last is answered, and ends
    at a refusal)."""
    from servesim.simulator.request import REJECTED

    turns: dict = {}
    for i, session in enumerate(cols["session_id"]):
        if session is not None:
            turns.setdefault(session, []).append((int(cols["turn"][i]), i))
    at, done, early, later, first = cols["arrival_time"], cols["finish_time"], 0, 0, None
    orphans, orphan = 0, None
    for session, rows in turns.items():
        rows.sort()
        for (previous, before), (turn, i) in zip(rows, rows[1:]):
            later += turn > previous  # (unnumbered rows, all turn 0, are no conversation's)
            if turn > previous and at[i] < done[before]:  # (NaN, never answered: not counted)
                early += 1
                first = first or (session, turn, at[i], done[before])
            elif turn > previous and cols["status"][before] == REJECTED:
                orphans += 1
                orphan = orphan or (session, turn)
    said = [f"{orphans:,} of {later:,} later session turns followed a turn the server refused (session "
            f"{orphan[0]}'s turn {orphan[1]}): a trace replays every row, where the conversation would have ended "
            f"(a sessions workload ends it)"] if orphans else []
    if not early:
        return said
    session, turn, a, d = first
    return said + [
        f"{early:,} of {later:,} later session turns arrived before the turn "
        f"before them was answered (session {session}'s turn {turn} at {a:g} s, the answer before it at {d:g} s): "
        f"a trace replays its recorded times, so each was sent before the answer its prompt holds existed here "
        f"(the recorded server answered sooner, or the times are not a conversation's"
        + (f"; or workload.max_concurrency={cap} held the earlier turn back" if cap else "") + ")"]  # (r176)
