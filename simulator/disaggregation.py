"""Prefill/decode disaggregation, servesim's model of vLLM's KV-transfer deployments (`cluster.prefill_replicas`).

A prefill replica runs a request's prompt only (the scheduler's `prefill_only`) and hands it off. As vLLM's P/D
proxy does, its request there is a one-token one whose token the client never sees: the proxy sends the request
on at once to a decode replica, in turn as vLLM's proxies pick them (`cluster.decode_router`; or the least
loaded). That one, as vLLM's connector (NIXL) does at admission, looks the
prompt up in its own prefix cache, takes blocks for the whole prompt and holds them while the rest of the
prompt's KV is pulled over the prefill replica's link (tokens x KV bytes per token / link bandwidth; each prefill
replica's link carries one pull at a time, in the order they start, so a slow link bounds the rate its prompts
can leave); then it computes the prompt's last token again and samples the client's first token and the rest.
So TTFT includes the decode replica's queue and the transfer. Each replica is its own vLLM instance with its own
API server: the queue limits check an arrival at the prefill replica and a hand-off at the decode replica (a 503
after the prefill, which fails the request as vLLM's proxy does).

Not modelled: the prefill replica frees its blocks at the hand-off (vLLM's holds them until the decode replica
has read them), and the decode side's link is not contended.
"""

from __future__ import annotations

from servesim.simulator.front_end import FrontEnd
from servesim.simulator.hybrid_kv import KVLayout
from servesim.simulator.request import PULL, REJECTED, WAITING, Request


class KVHandOff:
    def __init__(self, front_end: FrontEnd, replicas: list, first_decode: int, kv_bytes_per_token: int,
                 link_bytes_per_s: float, layout: KVLayout | None = None, in_turn: bool = True):
        """replicas[first_decode:] are the decode replicas (the list may still be filling when this is made);
        layout: the KV cache groups, whose local layers (the hybrid manager's) hold only their window's blocks;
        in_turn: the decode replicas take hand-offs in turn (vLLM's proxies), else the least loaded."""
        self.front_end, self.replicas, self.first_decode = front_end, replicas, first_decode
        self.in_turn, self.turn = in_turn, 0
        self.kv_bytes_per_token, self.link = kv_bytes_per_token, link_bytes_per_s
        self.local = layout.local if layout is not None and layout.local_groups else None
        self.layer_bytes_per_token = layout.layer_bytes_per_token if layout is not None else 0
        self.link_free: dict[int, float] = {}  # prefill replica -> when its link has sent what it was given

    def __call__(self, req: Request, t: float) -> None:
        """The prompt is computed on a prefill replica at t: the proxy sends the request to a decode replica."""
        req.prefill_replica = req.replica

        def arrive():
            decode = self.next_decode()
            self.turn += 1
            if why := decode.queue_limit_error():  # its prompt counts here too: this replica has no token of it yet
                req.status, req.reject_reason, req.replica = REJECTED, why, decode.index
                self.front_end.finished(req, t, completed=False)
                return
            req.remote_kv, req.num_computed_tokens, req.status = PULL, 0, WAITING
            req.engine_arrival = t  # the decode instance's own request, stamped as it arrives (r140)
            req.reserved_blocks = 0  # sized again by the decode replica's rules as its pull starts (r150)
            decode.add_request(req)
        self.front_end.deliver_at(t, arrive)

    def next_decode(self):
        """The decode replica the proxy sends the next computed prompt to: the next in turn, or the least loaded."""
        decodes = self.replicas[self.first_decode:]
        if self.in_turn:
            return decodes[self.turn % len(decodes)]
        return min(decodes, key=lambda r: (r.unfinished, r.index))

    def transfer_bytes(self, req: Request, tokens: int) -> int:
        """The KV of req's last `tokens` prompt tokens that crosses the link (a local layer's only within its window:
        the hybrid manager holds no more)."""
        if self.local is None:
            return tokens * self.kv_bytes_per_token
        local = self.local
        # the window (or chunk) of the last token's recompute, which the decode replica holds and reads (r153: at a
        # chunk's edge, the skip at num_tokens sent none of the chunk it recomputes in)
        kept = min(tokens, req.num_tokens - local.skipped_tokens(req.num_tokens - 1))
        return self.layer_bytes_per_token * ((local.layers - local.local_layers) * tokens + local.local_layers * kept)

    def predicted_transfer(self, req: Request, prefill_replica: int, decode, now: float) -> float:
        """Seconds from now until req's KV would have crossed: what the link still carries, then its own prompt
        less what the decode replica's prefix cache holds (r163: shedding judged TTFT without it, and admitted
        requests missed a 2 s target by 60x over a 0.5 GB/s link)."""
        tokens = max(req.num_tokens - decode.cached_prefix_tokens(req), 1)
        return max(self.link_free.get(prefill_replica, 0.0) - now, 0.0) + self.transfer_bytes(req, tokens) / self.link

    def pull(self, req: Request, tokens: int, now: float) -> None:
        """A decode replica holds blocks for req's prompt from `now`: the KV of its last `tokens` crosses the link."""
        size = self.transfer_bytes(req, tokens)
        at = max(now, self.link_free.get(req.prefill_replica, 0.0)) + size / self.link
        self.link_free[req.prefill_replica] = at
        self.front_end.deliver_at(at, lambda: self.replicas[req.replica].kv_pulled(req))
