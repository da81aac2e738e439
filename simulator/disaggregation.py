"""Prefill/decode disaggregation, servesim's model of vLLM's KV-transfer deployments (`cluster.prefill_replicas`).

A prefill replica runs a request's prompt only (the scheduler's `prefill_only`) and hands it off; its
KV crosses the link (prompt tokens x KV bytes per token / link bandwidth; each prefill replica's link carries one
transfer at a time, in hand-off order, so a slow link bounds the rate its prompts can leave), then the least loaded
decode replica takes it over as a waiting request whose KV is already there. As vLLM's P/D proxy does, the
prefill replica's request is a one-token one whose token the client never sees: the decode replica computes the
prompt's last token again and samples the client's first token and all the rest, so TTFT includes the transfer
and the decode replica's queue. Each replica is its own vLLM instance with its own API server: the queue limits
check an arrival at the prefill replica and a hand-off at the decode replica (a 503 after the prefill, which
fails the request as vLLM's proxy does).

Not modelled: vLLM's NIXL pull allocates the decode replica's blocks before the transfer and frees the prefill
replica's after it; servesim frees the prefill blocks at the hand-off and allocates the decode blocks at
admission, after the transfer.
"""

from __future__ import annotations

from servesim.simulator.front_end import FrontEnd
from servesim.simulator.request import REJECTED, WAITING, Request


class KVHandOff:
    def __init__(self, front_end: FrontEnd, replicas: list, first_decode: int, kv_bytes_per_token: int,
                 link_bytes_per_s: float):
        """replicas[first_decode:] are the decode replicas (the list may still be filling when this is made)."""
        self.front_end, self.replicas, self.first_decode = front_end, replicas, first_decode
        self.kv_bytes_per_token, self.link = kv_bytes_per_token, link_bytes_per_s
        self.link_free: dict[int, float] = {}  # prefill replica -> when its link has sent what it was given

    def __call__(self, req: Request, t: float) -> None:
        """The prompt's KV leaves the prefill replica at t; it arrives at a decode replica after the transfer."""
        req.prefill_replica = req.replica

        def arrive():
            decode = min(self.replicas[self.first_decode:], key=lambda r: (r.unfinished, r.index))
            if why := decode.queue_limit_error():  # its prompt counts here too: this replica has no token of it yet
                req.status, req.reject_reason, req.replica = REJECTED, why, decode.index
                self.front_end.finished(req, at, completed=False)
                return
            req.kv_transferred = True
            req.num_computed_tokens -= 1  # vLLM's decode loads the whole prompt, then computes its last token again
            req.status = WAITING           # to sample the client's first token (_update_waiting_for_remote_kv)
            decode.add_request(req)
        at = max(t, self.link_free.get(req.prefill_replica, 0.0)) + req.num_computed_tokens * self.kv_bytes_per_token / self.link
        self.link_free[req.prefill_replica] = at
        self.front_end.deliver_at(at, arrive)
