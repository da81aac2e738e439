"""Local attention layers: a sliding window (gpt-oss, Gemma) or fixed chunks (Llama 4).

What a query in such a layer reads, and how much of a request's context the layer no longer needs, in
vLLM's terms (its SlidingWindowManager and ChunkedLocalAttentionManager). Step time sees the layers' mix
through BatchShape's aggregates, averaged over layers: a decode in a model with half its layers on a
128-token window reads (c + min(c, 128)) / 2 tokens a layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalAttention:
    """`local_layers` of `layers` attend within a sliding window of `window` tokens, or within their own
    chunk of `window` tokens when `chunked`; the others attend to the whole context."""

    window: int
    chunked: bool
    local_layers: int
    layers: int

    def span(self, position: int) -> int:
        """Keys a query at 0-based `position` reads in a local layer (itself included)."""
        if self.chunked:
            return position % self.window + 1
        return min(position + 1, self.window)

    def _span_sum(self, upto: int) -> int:
        """Sum of span(p) for p in 0..upto-1."""
        w = self.window
        if self.chunked:
            q, r = divmod(upto, w)
            return q * w * (w + 1) // 2 + r * (r + 1) // 2
        if upto <= w:
            return upto * (upto + 1) // 2
        return w * (w + 1) // 2 + (upto - w) * w

    def pairs(self, computed: int, new: int) -> int:
        """(query, key) pairs of a chunk of `new` tokens after `computed` ones, in one local layer."""
        return self._span_sum(computed + new) - self._span_sum(computed)

    def skipped_tokens(self, computed: int) -> int:
        """Leading tokens a local layer will never read again once `computed` tokens are cached: vLLM frees
        the blocks wholly inside them."""
        if self.chunked:
            return computed // self.window * self.window
        return max(0, computed - self.window + 1)

    def mix(self, full: int, local: int) -> int:
        """A per-layer aggregate averaged over the model's layers."""
        return ((self.layers - self.local_layers) * full + self.local_layers * local) // self.layers


def local_attention(arch) -> LocalAttention | None:
    """The model's local layers, or None when every layer attends to the whole context."""
    if not arch.local_window:
        return None
    return LocalAttention(arch.local_window, arch.attention_chunk_size is not None, arch.num_local_layers,
                          arch.num_hidden_layers)
