"""The measurement grid: which batch shapes the harness times and the importer composes.

Four kinds of point, as a chunked-prefill engine produces them:
prefill (B sequences x L new tokens, nothing cached), decode (B sequences, one new
token each, C tokens cached), mixed (one L-token chunk after C cached tokens plus D
decodes at context C), and attention (the paged decode-attention kernel alone).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from servesim.simulator.batch import BatchShape
from servesim.simulator.errors import ConfigError

Kind = Literal["prefill", "decode", "mixed", "attention"]
STEP_KINDS = ("prefill", "decode", "mixed")


@dataclass(frozen=True)
class GridPoint:
    kind: Kind
    batch: int  # prefill: sequences; decode/attention: sequences; mixed: decodes besides the chunk
    tokens: int = 0  # new tokens per prefill sequence, or the mixed chunk's length
    context: int = 0  # tokens already cached per sequence

    @property
    def shape(self) -> BatchShape:
        b, n, c = self.batch, self.tokens, self.context
        if self.kind == "prefill":
            return BatchShape(b, b * n, b * (n * (n + 1) // 2), 0, 0)
        if self.kind in ("decode", "attention"):
            return BatchShape(b, 0, 0, b, b * (c + 1))
        return BatchShape(1 + b, n, n * c + n * (n + 1) // 2, b, b * (c + 1))

    def local_shape(self, local) -> BatchShape:
        """The shape a scheduler reports for this point in a model with local-attention layers: attention
        aggregates averaged over full and local layers (simulator/local_attention.py)."""
        full = self.shape
        b, n, c = self.batch, self.tokens, self.context
        if self.kind == "prefill":
            pairs = b * local.pairs(0, n)
        elif self.kind == "mixed":
            pairs = local.pairs(c, n)
        else:
            pairs = 0
        ctx = b * local.span(c) if full.decode_seqs else 0
        return full._replace(prefill_attention_pairs=local.mix(full.prefill_attention_pairs, pairs),
                             decode_context_tokens=local.mix(full.decode_context_tokens, ctx))

    @property
    def max_kv_tokens(self) -> int:
        """Cache slots the point needs (to size the block pool)."""
        if self.kind == "prefill":
            return self.batch * self.tokens
        if self.kind == "mixed":
            return self.context + self.tokens + self.batch * (self.context + 1)
        return self.batch * (self.context + 1)

    def row(self) -> dict:
        return asdict(self) | self.shape._asdict()


def _grid(prefill_b, prefill_l, max_prefill_tokens, decode_b, decode_c, mixed_l, mixed_d, mixed_c, attn_b, attn_c,
          late_chunks=(), max_decode_kv=None):
    """late_chunks: (chunk, cached) pairs timed alone, the late chunks of a long prompt, whose attention over
    what is cached the other points (contexts of 1,024 at most beside a chunk) leave a fit to extrapolate;
    max_decode_kv: the most KV tokens a decode point reads (a batch of 1,024 fills a GPU at short contexts)."""
    pts = [GridPoint("prefill", b, n) for b in prefill_b for n in prefill_l if b * n <= max_prefill_tokens]
    pts += [GridPoint("decode", b, 0, c) for b in decode_b for c in decode_c if b * c <= (max_decode_kv or b * c)]
    pts += [GridPoint("mixed", d, n, c) for n in mixed_l for d in mixed_d for c in mixed_c]
    pts += [GridPoint("mixed", 0, n, c) for n, c in late_chunks]
    pts += [GridPoint("attention", b, 0, c) for b in attn_b for c in attn_c]
    return pts


GRIDS = {
    # seconds on a laptop CPU with the tiny model: for tests
    "quick": lambda: _grid((1, 2), (16, 64, 128), 256, (1, 4, 16), (32, 128, 512), (32, 128), (4,), (128,),
                           (1, 8), (128, 512)),
    # the small model on a 2-core CPU in under three minutes
    "cpu": lambda: _grid((1, 2, 4), (32, 128, 256, 512, 1024), 2048, (1, 2, 4, 16, 32, 64), (128, 512, 1024, 2048),
                         (64, 256, 512), (4, 16), (512,), (1, 8, 32), (256, 1024, 2048)),
    # a GPU and a real-size model
    # (decodes up to vLLM's default max_num_seqs on H100/H200/B200, 1,024: r143, a fit to 256 ran 12-23% long at
    # 512-1,024 sequences, where the warning did not start until 512)
    "gpu": lambda: _grid((1, 2, 4, 8), (128, 512, 1024, 2048, 4096, 8192), 16384,
                         (1, 8, 32, 64, 128, 256, 512, 1024), (256, 1024, 2048, 4096), (256, 512, 2048), (16, 64),
                         (1024,), (1, 16, 64, 256), (512, 2048, 8192),
                         ((2048, 8192), (8192, 8192), (2048, 32768), (8192, 32768), (8192, 57344)), 1 << 20),
}


def make_grid(name: str, max_model_len: int | None = None) -> list[GridPoint]:
    if name not in GRIDS:
        raise ConfigError("grid", f"unknown grid {name!r}; known: {', '.join(GRIDS)}")
    pts = GRIDS[name]()
    if max_model_len:
        pts = [p for p in pts if p.context + max(p.tokens, 1) < max_model_len]
    if not pts:
        raise ConfigError("grid", f"grid {name!r} has no point that fits max_model_len={max_model_len}")
    return pts
