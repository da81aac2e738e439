"""What a cost model sees of one step: the batch's composition, in aggregates."""

from __future__ import annotations

from typing import NamedTuple


class BatchShape(NamedTuple):
    """Aggregates over the requests scheduled in one step.

    prefill_attention_pairs: sum over prefill chunks of (query token, context token)
    pairs, n*c + n*(n+1)/2 for a chunk of n new tokens after c computed ones.
    decode_context_tokens: sum over decodes of the KV tokens each one reads.
    """

    num_seqs: int
    prefill_tokens: int
    prefill_attention_pairs: int
    decode_seqs: int
    decode_context_tokens: int

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs


def decode_shape(num_seqs: int, context_tokens: int) -> BatchShape:
    return BatchShape(num_seqs, 0, 0, num_seqs, context_tokens)
