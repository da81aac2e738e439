"""The run under vLLM's Prometheus names: metrics.prom read by prometheus_client's own parser."""

import numpy as np
import pandas as pd
import pytest

from servesim.simulator.cli import main
from servesim.simulator.vllm_metrics import ITL_BUCKETS, TTFT_BUCKETS, buckets_1_2_5

parser = pytest.importorskip("prometheus_client.parser")


def test_metrics_prom_holds_vllms_families_with_the_runs_numbers(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--quiet", "--prometheus", "--set", "workload.num_requests=80",
                 "--set", "engine.max_model_len=8192", "--set", "cluster.replicas=2"]) == 0
    families = {f.name: f for f in parser.text_string_to_metric_families((out / "metrics.prom").read_text())}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions", "vllm:request_success",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:iteration_tokens_total", "vllm:request_prompt_tokens"):
        assert name in families, name
    req = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")

    def samples(family, suffix, **labels):
        return [s for s in families[family].samples if s.name == family + suffix
                and all(s.labels.get(k) == v for k, v in labels.items())]

    for engine in ("0", "1"):
        mine = req[req.replica == int(engine)]
        buckets = samples("vllm:time_to_first_token_seconds", "_bucket", engine=engine)
        assert [float(s.labels["le"]) for s in buckets] == TTFT_BUCKETS + [float("inf")]
        assert [s.value for s in buckets] == [int((mine.ttft <= e).sum()) for e in TTFT_BUCKETS] + [len(mine)]
        [total] = samples("vllm:time_to_first_token_seconds", "_sum", engine=engine)
        assert total.value == pytest.approx(mine.ttft.sum())
        [gen] = samples("vllm:generation_tokens", "_total", engine=engine)
        assert gen.value == mine.output_tokens.sum()
        [prompt] = samples("vllm:prompt_tokens", "_total", engine=engine)
        assert prompt.value == mine.prompt_tokens.sum()
        [count] = samples("vllm:inter_token_latency_seconds", "_count", engine=engine)
        assert count.value == (mine.output_tokens - 1).sum()  # one gap per token after the first
        edges = [float(s.labels["le"]) for s in samples("vllm:request_prompt_tokens", "_bucket", engine=engine)]
        assert edges[:-1] == [float(b) for b in buckets_1_2_5(8192)] and edges[-2] == 5000.0
        [steps_count] = samples("vllm:iteration_tokens_total", "_count", engine=engine)
        assert steps_count.value == (steps.replica == int(engine)).sum()
    assert [float(s.labels["le"]) for s in samples("vllm:inter_token_latency_seconds", "_bucket", engine="0")][:-1] \
        == ITL_BUCKETS
    # the timeline: vLLM's gauges per step, its counters running up to the totals
    line = pd.read_parquet(out / "prometheus.parquet")
    assert len(line) == len(steps) and set(line.engine) == {0, 1}
    for engine, t in line.groupby("engine"):
        assert (np.diff(t["vllm:generation_tokens_total"]) >= 0).all()
        assert t["vllm:generation_tokens_total"].iloc[-1] == req[req.replica == engine].output_tokens.sum()
    assert line["vllm:num_requests_running"].max() == steps.num_running.max()
