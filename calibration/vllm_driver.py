"""Run a servesim workload on a real vLLM engine, in vLLM's own environment.

Started by `servesim validate vllm` with the vLLM venv's python (`make vllm-env`); it
imports only the standard library, vLLM and what vLLM brings (transformers, tokenizers),
never servesim. Requests are sent to an in-process AsyncLLM at their arrival times (open
loop) or by N clients (closed loop) with exact prompt lengths (random token ids) and exact
output lengths (ignore_eos); every streamed chunk is timestamped. A scheduler subclass
logs every engine step with its batch shape, so a profile can be fitted from the engine
itself. Client and engine-core monotonic clocks are comparable on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time

from vllm.v1.core.sched.scheduler import Scheduler

STEP_LOG_ENV = "SERVESIM_STEP_LOG"


def shape_row(chunks) -> dict:
    """simulator/batch.py's shape_of, copied because this file imports no servesim (tests/test_scheduler.py
    holds the two equal): (new tokens, computed before, is a decode) per scheduled request -> the shape."""
    row = dict.fromkeys(("num_seqs", "prefill_tokens", "prefill_attention_pairs", "decode_seqs",
                         "decode_context_tokens"), 0)
    for n, c, decode in chunks:
        row["num_seqs"] += 1
        if decode:
            row["decode_seqs"] += 1
            row["decode_context_tokens"] += c + 1
        else:
            row["prefill_tokens"] += n
            row["prefill_attention_pairs"] += n * c + n * (n + 1) // 2
    return row


class StepLoggingScheduler(Scheduler):
    """vLLM's scheduler, unchanged, writing one line per step: start time and batch shape. With
    SERVESIM_ENGINE_INFO set, it also writes the engine's resolved pool and budgets there once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        info = os.environ.get("SERVESIM_ENGINE_INFO")
        if info:
            with open(info, "w") as f:
                json.dump({"num_gpu_blocks": self.kv_cache_config.num_blocks, "block_size": self.block_size,
                           "max_num_seqs": self.max_num_running_reqs,
                           "max_num_batched_tokens": self.max_num_scheduled_tokens}, f)

    def schedule(self, *args, **kwargs):
        t0 = time.monotonic()
        out = super().schedule(*args, **kwargs)
        if out.total_num_scheduled_tokens:
            chunks = []
            for rid, n in out.num_scheduled_tokens.items():
                r = self.requests[rid]
                c = r.num_computed_tokens - n  # already advanced by the scheduler
                chunks.append((n, c, n == 1 and c == r.num_tokens - 1))
            self._servesim_row = {"t": t0, **shape_row(chunks), "running": len(self.running),
                                  "waiting": len(self.waiting), "preempted": len(out.preempted_req_ids or ())}
        return out

    def update_from_output(self, *args, **kwargs):
        """The step's model run and output processing are done: write its row with the end time."""
        result = super().update_from_output(*args, **kwargs)
        row = getattr(self, "_servesim_row", None)
        if row is not None:
            row["t_end"] = time.monotonic()
            if not hasattr(self, "_servesim_log"):
                self._servesim_log = open(os.environ[STEP_LOG_ENV], "a", buffering=1)
            self._servesim_log.write(json.dumps(row) + "\n")
            self._servesim_row = None
        return result


def make_model(arch: dict, out: str) -> None:
    """A random-weight Llama with a local word-level tokenizer: serves with no hub access."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[arch.get("dtype", "fp32")]
    cfg = LlamaConfig(vocab_size=arch["vocab_size"], hidden_size=arch["hidden_size"],
                      intermediate_size=arch["intermediate_size"], num_hidden_layers=arch["num_hidden_layers"],
                      num_attention_heads=arch["num_attention_heads"],
                      num_key_value_heads=arch["num_key_value_heads"], head_dim=arch["head_dim"],
                      max_position_embeddings=arch["max_position_embeddings"], torch_dtype=dtype,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(out)
    vocab = {f"t{i}": i for i in range(arch["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2").save_pretrained(out)


async def _one(engine, spec: dict, start: float, tag: str, vocab: int, rng: random.Random) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    ids = [rng.randrange(3, vocab) for _ in range(spec["prompt_tokens"])]
    params = SamplingParams(max_tokens=spec["output_tokens"], min_tokens=spec["output_tokens"], ignore_eos=True,
                            temperature=0.0, output_kind=RequestOutputKind.DELTA)
    sent = time.monotonic()
    chunks = []
    async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params, f"{tag}-{spec['request_id']}"):
        chunks.append([time.monotonic() - start, len(out.outputs[0].token_ids)])
    return {"request_id": spec["request_id"], "arrival_time": sent - start, "prompt_tokens": spec["prompt_tokens"],
            "output_tokens": sum(n for _, n in chunks), "chunks": chunks}


async def run_once(engine, specs: list[dict], tag: str, vocab: int, concurrency: int | None, seed: int) -> dict:
    rng = random.Random(seed)
    start = time.monotonic()
    if concurrency:  # closed loop: each client sends its next request when its previous one finished
        queue = list(specs)
        results: list[dict] = []

        async def client():
            while queue:
                results.append(await _one(engine, queue.pop(0), start, tag, vocab, rng))

        await asyncio.gather(*(client() for _ in range(concurrency)))
    else:
        async def at(spec):
            await asyncio.sleep(max(0.0, start + spec["arrival_time"] - time.monotonic()))
            return await _one(engine, spec, start, tag, vocab, rng)

        results = list(await asyncio.gather(*(at(s) for s in specs)))
    return {"start": start, "end": time.monotonic(), "requests": sorted(results, key=lambda r: r["request_id"])}


async def main_async(a) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    plan = json.loads(open(a.plan).read())  # [{"name", "workload" (servesim JSONL), "concurrency"}]
    args = AsyncEngineArgs(model=a.model_dir, dtype=a.dtype, max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                           max_num_batched_tokens=a.max_num_batched_tokens, block_size=a.block_size,
                           enable_chunked_prefill=a.enable_chunked_prefill,
                           enable_prefix_caching=a.enable_prefix_caching,
                           scheduler_cls=f"{__name__ if __name__ != '__main__' else 'vllm_driver'}.StepLoggingScheduler",
                           disable_log_stats=True, seed=a.seed)
    t0 = time.monotonic()
    engine = AsyncLLM.from_engine_args(args)
    startup = time.monotonic() - t0
    vocab = engine.vllm_config.model_config.get_vocab_size()
    import vllm

    result = {"vllm_version": vllm.__version__, "startup_s": startup, "num_gpu_blocks": engine.vllm_config.cache_config.num_gpu_blocks,
              "block_size": engine.vllm_config.cache_config.block_size,
              "max_num_seqs": engine.vllm_config.scheduler_config.max_num_seqs,
              "max_num_batched_tokens": engine.vllm_config.scheduler_config.max_num_batched_tokens,
              "async_scheduling": bool(engine.vllm_config.scheduler_config.async_scheduling),
              "warmup": []}
    levels = [(lv, [json.loads(line) for line in open(lv["workload"]) if line.strip()]) for lv in plan]
    for i in range(a.warmup):  # the first requests after start are slow
        result["warmup"].append(await run_once(engine, levels[0][1][: a.warmup_requests], f"w{i}", vocab, None, i))
    result["levels"] = []
    for j, (lv, specs) in enumerate(levels):
        runs = [await run_once(engine, specs, f"l{j}r{i}", vocab, lv.get("concurrency"), 100 + i)
                for i in range(a.repeats)]
        result["levels"].append({"name": lv["name"], "concurrency": lv.get("concurrency"), "runs": runs})
    engine.shutdown()
    with open(a.out, "w") as f:
        json.dump(result, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--make-model", help="architecture JSON: build the model into --model-dir and exit")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--plan", help='JSON list of load levels: [{"name", "workload": servesim JSONL, "concurrency"}]')
    p.add_argument("--out")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=128)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--enable-chunked-prefill", type=lambda s: s.lower() == "true", default=True)
    p.add_argument("--enable-prefix-caching", type=lambda s: s.lower() == "true", default=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--warmup-requests", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.make_model:
        make_model(json.loads(open(a.make_model).read()), a.model_dir)
        return
    asyncio.run(main_async(a))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
