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


SHAPE_FIELDS = list(BatchShape._fields)  # the columns of a step log, a fit's table and a real run's steps


def decode_shape(num_seqs: int, context_tokens: int) -> BatchShape:
    return BatchShape(num_seqs, 0, 0, num_seqs, context_tokens)


def shape_of(chunks) -> BatchShape:
    """A step's shape from its scheduled chunks, (new tokens, tokens computed before, is a decode): a decode
    reads its context plus the new token's; a prefill chunk attends to what came before and to itself. The
    scheduler fuses this into its own pass (and calibration/vllm_driver.py keeps an import-free copy);
    tests/test_scheduler.py holds all three equal."""
    seqs = prefill = pairs = decodes = ctx = 0
    for n, c, decode in chunks:
        seqs += 1
        if decode:
            decodes += 1
            ctx += c + 1
        else:
            prefill += n
            pairs += n * c + n * (n + 1) // 2
    return BatchShape(seqs, prefill, pairs, decodes, ctx)
