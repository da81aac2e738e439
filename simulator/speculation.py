"""Speculative decoding, servesim's addition to the scheduler (vLLM's accounting; essay 003).

A decode verifies k drafts in its pass; the target accepts a run of them and adds one token
of its own, and the rejected drafts' slots are given back. Fixed k pays off at low load and
costs throughput under load; adaptive k speculates only with compute to spare (below the
profile's knee). The drafter's own passes cost a fraction of the target's over the same tokens.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from servesim.simulator.batch import decode_shape
from servesim.simulator.request import Request

SpeculationMethod = Literal["none", "fixed", "adaptive"]  # the scenario's `speculative.method`


class Speculation:
    def __init__(self, k: int, adaptive: bool, knee_tokens: int, accept, draft_cost_ratio: float, step_time,
                 propose=None, skips_unused_drafts: bool = True, parallel_drafting: bool = False):
        """accept(k): how many of k drafts the target accepts; step_time(shape): the target's step;
        propose(k): how many of at most k drafts a decode proposes (None: k, every decode);
        skips_unused_drafts: vLLM 0.33's drafter skips a step where no request samples (0.19's runs);
        parallel_drafting: one drafter pass proposes all k."""
        self.k, self.adaptive, self.knee_tokens, self.propose = k, adaptive, knee_tokens, propose
        self.skips_unused_drafts, self.parallel_drafting = skips_unused_drafts, parallel_drafting
        self.accept, self.draft_cost_ratio, self._step_time = accept, draft_cost_ratio, step_time
        # vLLM's spec-decode counters: drafts proposed, and how often the draft at each position was accepted
        self.num_drafts, self.accepted_per_position = 0, np.zeros(k, dtype=np.int64)

    def drafts(self, num_running: int) -> int:
        """k for this step's decodes."""
        if self.adaptive:  # speculate only with compute to spare: under the knee
            return max(0, min(self.k, self.knee_tokens // max(1, num_running) - 1))
        return self.k

    def verify(self, r: Request, context: int, n: int, out, placeholders: bool = False) -> int:
        """A decode at `context` that verified n - 1 drafts: keeps the accepted ones plus one; returns the
        tokens it adds. placeholders: drafts the scheduler padded in (0.33), which the target never accepts."""
        accepted = 0 if placeholders else self.accept(n - 1)
        self.num_drafts += 1
        self.accepted_per_position[:accepted] += 1  # a run: the draft at position i counts when all before it did
        out.spec_seqs += 1
        out.spec_drafts += n - 1
        out.spec_accepted += accepted
        r.num_computed_tokens = context + 1 + accepted
        kept = min(accepted + 1, r.stop_len - r.num_tokens)
        out.spec_discarded += accepted + 1 - kept  # counted accepted (vLLM's stats), never generated
        return kept

    def draft_time(self, out, target_s: float) -> float:
        """The drafter's passes in a step (vLLM's EAGLE-type and draft-model proposers), each draft_cost_ratio of
        the target's over the same tokens: a first over every token the target scheduled, prefill chunks included
        (the drafter builds its own KV of the prompt), then k - 1 over one token per request, reading the
        decodes' context. 0.33 skips them in a step whose drafts all go unused (no request samples a token);
        0.19 runs them in every step (r131: a prefill-bound run did not pay the drafter's prompt pass)."""
        if not out.spec_k or not self.draft_cost_ratio:
            return 0.0
        if self.skips_unused_drafts and not any(r.num_computed_tokens >= r.num_tokens for r in out.reqs):
            return 0.0
        rest = (out.spec_k - 1) * self._step_time(decode_shape(len(out.reqs), out.shape.decode_context_tokens)) \
            if out.spec_k > 1 and not self.parallel_drafting else 0.0  # (r146: parallel drafting paid k - 1 more)
        return self.draft_cost_ratio * (target_s + rest)


def capped_sampler(distribution, rng):
    """min(X, k) for X drawn over 0..K with the given probabilities, k <= K: a count that would have gone past k
    stops at k (renormalising the first k + 1 entries divided 0 by 0 when they were all zero, and shifted the rest
    of the mass onto smaller counts)."""
    probs = np.asarray(distribution)

    def draw(k: int) -> int:
        p = probs[: k + 1].copy()
        p[k] = probs[k:].sum()
        return int(rng.choice(len(p), p=p / p.sum()))
    return draw


def acceptance_sampler(sp, seed: int):
    """How many of k drafts the target accepts: a run of per-token successes, or a given distribution."""
    rng = np.random.default_rng(seed)
    if sp.acceptance_distribution:
        return capped_sampler(sp.acceptance_distribution, rng)

    def accept(k: int) -> int:
        ok = rng.random(k) < sp.acceptance_rate
        return int(k if ok.all() else ok.argmin())
    return accept


def counters(speculation: Speculation | None) -> dict | None:
    """An engine's spec-decode counters as vLLM's /metrics has them (None: it drafted nothing)."""
    if speculation is None or not speculation.num_drafts:
        return None
    return {"num_drafts": speculation.num_drafts,
            "accepted_per_position": [int(v) for v in speculation.accepted_per_position]}


def make_speculation(sp, seed: int, knee_tokens: int, step_time, skips_unused_drafts: bool = True
                     ) -> Speculation | None:
    """The scenario's `speculative` section as a Speculation, or None when it drafts nothing."""
    k = sp.num_speculative_tokens if sp.method != "none" else 0
    if not k:
        return None
    propose = None if sp.proposal_distribution is None else \
        capped_sampler(sp.proposal_distribution, np.random.default_rng([seed, 1]))  # a stream of its own
    return Speculation(k, sp.method == "adaptive", knee_tokens, acceptance_sampler(sp, seed), sp.draft_cost_ratio,
                       step_time, propose, skips_unused_drafts, sp.parallel_drafting)
