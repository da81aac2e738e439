"""Writes the notebooks from the cell sources below: edit here, run `.venv/bin/python notebooks/make_notebooks.py
[--execute] [NAME.ipynb ...]` (default: every notebook)."""
import sys
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent

EXECUTE = "--execute" in sys.argv  # run each at its stated size and save it with its outputs (figures inline)
ONLY = [a for a in sys.argv[1:] if a.endswith(".ipynb")]  # write only these (default: all)


def nb(cells, path):
    if ONLY and Path(path).name not in ONLY:
        return
    n = nbf.v4.new_notebook()
    n.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    n.cells = [nbf.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbf.v4.new_code_cell(c) for c in cells]
    for i, cell in enumerate(n.cells):  # ids from the position: regenerating changes only what changed
        cell["id"] = f"cell-{i}"
    if EXECUTE:
        import nbclient

        nbclient.NotebookClient(n, timeout=3600, kernel_name="python3",
                                resources={"metadata": {"path": str(HERE)}}).execute()
    nbf.write(n, path)

SETUP = '''import os
from pathlib import Path
import pandas as pd
import matplotlib.pyplot as plt  # Jupyter's inline backend: the figures are in the notebook
import servesim
# the test suite sets SERVESIM_NOTEBOOK_SMALL=1 to run every notebook on small inputs
SMALL = os.environ.get("SERVESIM_NOTEBOOK_SMALL") == "1"
ROOT = Path.cwd() if (Path.cwd() / "pyproject.toml").exists() else Path.cwd().parent
SHARED = ROOT.parent / "shared" / "data"'''

nb([
"md:# Token budget and chunked prefill on the Azure conversation trace\n\nThe background essays' trade-off: a smaller `max_num_batched_tokens` bounds every step, so inter-token latency stays low while long prompts are prefilled, but first tokens wait longer. Replayed on one hour of Azure's production chat trace (2023, CC-BY-4.0; `../shared/data/README.md`), on the default deployment (Llama-3.1-8B, H200, calibrated profile).",
SETUP,
'''trace = SHARED / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
assert trace.is_file(), f"{trace} is needed (../shared/data)"
window = 60 if SMALL else 900      # seconds of the trace
rate_x = 3.0                       # replay at three times the recorded rate: a busy hour
budgets = [512, 2048, 8192]
rows = []
for chunked in (True, False):
    for budget in budgets:
        sets = {"workload": {"type": "trace", "path": str(trace), "duration_s": window, "time_scale": rate_x},
                "engine.max_num_batched_tokens": budget, "engine.enable_chunked_prefill": chunked}
        if not chunked:
            sets["engine.max_model_len"] = 8192   # vLLM needs budget >= max_model_len without chunking
        if not chunked and budget < 8192:
            continue
        s = servesim.simulate(None, sets).summary
        rows.append({"chunked_prefill": chunked, "budget": budget, "requests": s["completed"],
                     "ttft_p50_ms": s["median_ttft_ms"], "ttft_p99_ms": s["p99_ttft_ms"],
                     "itl_p50_ms": s["median_itl_ms"], "itl_p99_ms": s["p99_itl_ms"], "max_itl_ms": s["max_itl_ms"]})
table = pd.DataFrame(rows)
table''',
'''fig, axes = plt.subplots(1, 2, figsize=(11, 4))
on = table[table.chunked_prefill]
axes[0].plot(on.budget, on.ttft_p99_ms, "-o", label="TTFT p99")
axes[0].plot(on.budget, on.ttft_p50_ms, "-o", label="TTFT p50")
axes[1].plot(on.budget, on.itl_p99_ms, "-o", label="ITL p99")
axes[1].plot(on.budget, on.max_itl_ms, "-o", label="ITL max")
for ax in axes:
    ax.set_xscale("log", base=2); ax.set_xlabel("max_num_batched_tokens"); ax.set_ylabel("ms"); ax.legend(); ax.grid(alpha=.3)
axes[0].set_title("first token"); axes[1].set_title("between tokens")
fig.tight_layout()''',
'''# the trade-off the essays describe: a bigger budget, lower TTFT; a smaller one, a bounded stall
small, big = on.iloc[0], on.iloc[-1]
assert small.max_itl_ms <= big.max_itl_ms
print(f"budget {int(small.budget)}: worst gap {small.max_itl_ms:.0f} ms, TTFT p99 {small.ttft_p99_ms:.0f} ms; "
      f"budget {int(big.budget)}: worst gap {big.max_itl_ms:.0f} ms, TTFT p99 {big.ttft_p99_ms:.0f} ms")''',
], str(HERE / "token_budget_azure.ipynb"))

nb([
"md:# Capacity planning: the calculator and the simulator side by side\n\nHow many requests fit on one GPU? `servesim capacity` does the paging arithmetic; a simulation of a burst shows how many actually run at once, and what latency users then see. Llama-3.1-8B on an H200 at vLLM's default memory settings, with the engine's other limits opened (`max_num_seqs` 4,096, a 65,536-token budget, prefix caching off) so that KV memory alone decides.",
SETUP,
'''rows = []
for tokens in [1000, 2000, 4000, 8000, 12000]:  # the stated size, small inputs too: each burst takes about a second
    # the run's budgets size vLLM's start-up profile, which the pool is left after: the calculator takes them too
    calc = servesim.capacity("llama-3.1-8b", "h200-sxm", tokens_per_request=tokens, max_model_len=131072,
                             max_num_seqs=4096, max_num_batched_tokens=65536).report
    prompt, output = tokens // 2, tokens - tokens // 2
    n = calc.paged_requests + 200
    run = servesim.simulate(None, {"workload.num_requests": n, "workload.arrival": {"process": "burst"},
                                   "workload.prompt_tokens": {"dist": "fixed", "value": prompt},
                                   "workload.output_tokens": {"dist": "fixed", "value": output},
                                   "engine.max_num_seqs": 4096, "engine.max_num_batched_tokens": 65536,
                                   "engine.enable_prefix_caching": False})
    # the moment the first requests complete: every request still running is then at full length
    at_full = run.steps[run.steps.end <= run.requests.finish_time.min()].iloc[-1]
    rows.append({"tokens per request": tokens, "calculator (paged)": calc.paged_requests,
                 "simulated: most running at once": int(run.steps.num_running.max()),
                 "simulated: running at full length": int(at_full.num_running),
                 "KV blocks: pool": calc.usable_blocks, "KV blocks: peak used": int(run.steps.kv_blocks_used.max()),
                 "preemptions": run.summary["num_preemptions"], "TPOT p50 (ms)": run.summary["median_tpot_ms"]})
table = pd.DataFrame(rows)
table''',
'''# vLLM admits on the prompt, so a burst runs more requests at once than fit at full length; as
# outputs grow the pool fills and preemptions bring the running set down. When the first requests
# complete, every one still running is at full length, and exactly the calculator's number fit: the
# simulator's pool is the calculator's, filled to within one request. (Later, preempted requests
# come back beside older ones; requests of mixed ages hold fewer blocks each and more of them run.)
# Both numbers matter when sizing: the preempted ones pay for it in latency.
assert (table["simulated: running at full length"] == table["calculator (paged)"]).all()
per_request = [servesim.capacity("llama-3.1-8b", "h200-sxm", tokens_per_request=t, max_model_len=131072).report
               .blocks_per_request for t in table["tokens per request"]]
assert (table["KV blocks: peak used"] <= table["KV blocks: pool"]).all()
assert (table["KV blocks: pool"] - table["KV blocks: peak used"] < per_request).all()
ax = table.plot(x="tokens per request", y=["calculator (paged)", "simulated: most running at once",
                                           "simulated: running at full length"], marker="o", logy=True)
ax.set_ylabel("concurrent requests"); ax.grid(alpha=.3)''',
], str(HERE / "capacity_planning.ipynb"))

nb([
"md:# Calibration quality: predicted against measured step times\n\nA CPU calibration of the tiny Llama on this machine (the small one in full runs), fitted with the `linear` form, and the held-out error by batch shape.",
SETUP,
'''import tempfile
from servesim.calibration.harness import run_calibration
from servesim.calibration.profile_io import fit_directory
out = Path(tempfile.mkdtemp())
run_calibration("tiny-llama" if SMALL else "small-llama", "cpu", "fp32", out, grid="quick" if SMALL else "cpu", progress=False)
path, fit = fit_directory(out)
pred = fit.predictions.assign(error=lambda d: (d.predicted_ms - d.time_ms) / d.time_ms)
print(f"held-out MAPE {fit.held_out['mape']:.1%}, p90 {fit.held_out['p90_ape']:.1%} over {fit.held_out['points']} points")''',
'''fig, ax = plt.subplots(figsize=(5, 5))
for kind, g in pred.groupby("kind"):
    ax.scatter(g.time_ms, g.predicted_ms, label=kind)
lim = [pred[["time_ms", "predicted_ms"]].min().min(), pred[["time_ms", "predicted_ms"]].max().max()]
ax.plot(lim, lim, color="grey", lw=.8)
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("measured (ms)"); ax.set_ylabel("predicted (ms)"); ax.legend()''',
'''by_shape = pred.groupby(["kind", "split"]).error.agg(["count", lambda e: e.abs().mean()]).rename(columns={"<lambda_0>": "MAPE"})
by_shape''',
], str(HERE / "calibration_quality.ipynb"))

nb([
"md:# Sizing a deployment: the cheapest one that meets the SLOs\n\nThe platform team's question, for the Azure conversation trace (2023, CC-BY-4.0; `../shared/data/README.md`) replayed at its recorded rate: which GPU, how many, which tensor parallelism, for a dense model (Llama-3.1-70B) and a MoE one (Qwen3-30B-A3B), with p99 TTFT under 1 s and p99 TPOT under 50 ms? `servesim.recommend` (as `servesim recommend`) prunes what cannot hold the weights, searches each candidate's capacity with the full simulation, sizes the fleet, checks it at the trace's load and prices it with dated list prices (`simulator/data/gpu-prices.yaml`). Each row says which cost model it rests on and that model's own measured error.",
SETUP,
'''import tempfile
trace = SHARED / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
assert trace.is_file(), f"{trace} is needed (../shared/data)"
rows = 100 if SMALL else 1000            # the trace's first rows: its recorded arrivals and lengths
slos = {"ttft_p99_ms": 1000, "tpot_p99_ms": 50}
space = {"llama-3.1-70b": [2] if SMALL else [2, 4, 8], "qwen3-30b-a3b": [1] if SMALL else [1, 2, 4]}
gpus = ["h100-sxm", "b200-sxm"] if SMALL else ["h100-sxm", "h200-sxm", "b200-sxm"]
tables, commands = [], {}
for model, tp in space.items():
    t = servesim.recommend(None, slos, {"model": model, "engine.max_model_len": 8192,
                                        "workload": {"type": "trace", "path": str(trace), "limit": rows}},
                           gpus=gpus, tp=tp, out=Path(tempfile.mkdtemp()), jobs=2)
    commands[model] = t.attrs["report"]["commands"]
    tables.append(t.assign(model=model))
table = pd.concat(tables, ignore_index=True)
cols = ["model", "rank", "status", "gpu", "engine.tensor_parallel_size", "gpus", "replicas",
        "usd_per_million_output_tokens", "usd_per_hour", "rps_per_gpu", "p99_ttft_ms", "p99_tpot_ms", "headroom",
        "meets_at_band_edge", "cost_model_trust"]
table[cols]''',
'''fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
for ax, (model, t) in zip(axes, table[table.status == "meets"].groupby("model", sort=False)):
    ax.scatter(t.usd_per_million_output_tokens, t.p99_ttft_ms)
    for _, r in t.iterrows():
        ax.annotate(f"{r.gpu} x{r.gpus:g}", (r.usd_per_million_output_tokens, r.p99_ttft_ms), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.axhline(slos["ttft_p99_ms"], color="tab:red", ls=":", label="TTFT SLO")
    ax.set_title(model); ax.set_xlabel("$ per million output tokens"); ax.set_ylabel("p99 TTFT (ms)")
    ax.grid(alpha=.3); ax.legend()''',
'''# the cheapest per model, and the vLLM line that deploys it (servesim recommend's commands.txt)
for model, t in table.groupby("model", sort=False):
    best = t[t.status == "meets"].iloc[0]
    print(f"{model}: {best.replicas:g} x {best.gpu} TP{best['engine.tensor_parallel_size']:g} = {best.gpus:g} GPUs, "
          f"${best.usd_per_million_output_tokens:.2f} per million output tokens, p99 TTFT {best.p99_ttft_ms:.0f} ms, "
          f"on {best.cost_model_trust}; SLOs held at that band's edge: {best.meets_at_band_edge}")
    print("  " + commands[model][0]["command"])
table[table.status == "pruned"][["model", "gpu", "engine.tensor_parallel_size", "reason"]]''',
"md:How to read it: cost is the fleet's GPUs times the list price per GPU-hour, over the output tokens the trace asks for per hour; a cheap row with little headroom is the one to load-test first. Every row says what its latencies rest on and how far that kind of cost model has been from real vLLM servers (kernel tables: simulated TPOT p99 9-29% shorter and TTFT p99 22-42% shorter than on three public GPU runs, docs/fidelity.md); `meets_at_band_edge` says whether the SLOs would still hold if the server were as much slower as the worst of them. A cheapest row that fails there is the one to size up or measure before buying. The pruned rows say why they were never simulated (weights that do not fit, a pool that cannot hold one request, heads that do not split).",
], str(HERE / "sizing_a_deployment.ipynb"))
