"""Speculative decoding (essay 003 and vLLM's accounting): fixed k pays off at low load and costs
throughput under load; adaptive k keeps the gain and drops the cost."""

import numpy as np
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate
from servesim.simulator.errors import ConfigError

BASE = ["profile=roofline", "workload.num_requests=1500",
        "workload.prompt_tokens={dist: lognormal, median: 200, sigma: 0.5, max: 1000}",
        "workload.output_tokens={dist: lognormal, median: 300, sigma: 0.4, max: 1000}",
        "speculative.acceptance_rate=0.6"]


def run(rate, method):
    return simulate(load(None, BASE + [f"workload.arrival.rate={rate}", f"speculative.method={method}"]))


def test_low_load_speculation_cuts_tpot_and_adaptive_matches_fixed():
    none, fixed, adaptive = (run(2, m).summary for m in ("none", "fixed", "adaptive"))
    assert fixed["mean_tpot_ms"] < 0.7 * none["mean_tpot_ms"]
    assert adaptive["mean_tpot_ms"] == pytest.approx(fixed["mean_tpot_ms"], rel=0.02)
    # 0.6 per draft over k = 4: (0.6 + 0.36 + 0.216 + 0.13) / 4 accepted
    assert fixed["spec_decode_acceptance_rate"] == pytest.approx(0.326, abs=0.03)


def test_under_load_fixed_k_loses_throughput_and_adaptive_does_not():
    none, fixed, adaptive = (run(120, m).summary for m in ("none", "fixed", "adaptive"))
    assert fixed["output_throughput"] < 0.9 * none["output_throughput"]  # verification competes with real work
    assert adaptive["output_throughput"] >= none["output_throughput"]
    assert adaptive["output_throughput"] > 1.2 * fixed["output_throughput"]


def test_accounting_is_exact():
    r = run(10, "fixed")
    req, steps = r.requests, r.steps
    assert (req.status == "finished").all()
    # every request still produces exactly its output length; several tokens can come in one step
    outs = simulate(load(None, BASE + ["workload.arrival.rate=10"])).requests.output_tokens
    assert (req.output_tokens.to_numpy() == outs.to_numpy()).all()
    assert steps.spec_accepted.sum() <= steps.spec_drafts.sum()
    assert r.summary == run(10, "fixed").summary  # deterministic for a seed


def test_acceptance_distribution_is_validated():
    with pytest.raises(ConfigError, match="speculative.acceptance_distribution: needs k \\+ 1 = 3 probabilities"):
        load(None, ["speculative={method: fixed, num_speculative_tokens: 2, acceptance_distribution: [0.5, 0.5]}"])
    r = simulate(load(None, BASE + ["workload.arrival.rate=2", "workload.num_requests=200",
                                    "speculative={method: fixed, num_speculative_tokens: 2, "
                                    "acceptance_distribution: [0, 0, 1]}"])).summary
    assert r["spec_decode_acceptance_rate"] == 1.0


def test_fewer_drafts_than_k_take_the_distributions_tail():
    """Of k' < k drafts offered (adaptive k under load, a budget, the context's end), the accepted run is
    min(X, k'): a distribution whose first k' + 1 entries are zero crashed (0 / 0), and renormalising them moved
    the tail's mass onto shorter runs."""
    import numpy as np

    from servesim.simulator.config import SpeculativeSettings
    from servesim.simulator.speculation import acceptance_sampler

    sp = SpeculativeSettings(method="fixed", num_speculative_tokens=4, acceptance_distribution=[0, 0, 0.2, 0.3, 0.5])
    accept = acceptance_sampler(sp, 0)
    assert {accept(1) for _ in range(50)} == {1}  # X >= 2 always: one draft offered, one accepted
    draws = np.array([accept(3) for _ in range(4000)])
    assert set(draws) == {2, 3} and abs((draws == 3).mean() - 0.8) < 0.03  # P(X >= 3) = 0.3 + 0.5
    r = simulate(load(None, BASE + ["workload.arrival.process=burst", "workload.num_requests=100",
                                    "speculative={method: adaptive, acceptance_distribution: [0, 0, 0.2, 0.3, 0.5]}"]))
    assert r.summary["completed"] == 100 and r.summary["spec_decode_acceptance_rate"] > 0.5


def test_each_draft_position_is_accepted_as_the_run_of_successes_says():
    """vLLM's per-position acceptance: the draft at position i counts when all i before it were accepted, so with a
    per-token rate a, position i is accepted a^(i+1) of the time."""
    s = run(2, "fixed").summary
    rates = s["spec_decode_per_position_acceptance_rates"]
    assert rates == pytest.approx([0.6 ** (i + 1) for i in range(4)], abs=0.02)
    assert s["spec_decode_acceptance_length"] == pytest.approx(1 + sum(rates))
    assert "spec_decode_num_drafts" not in run(2, "none").summary


def test_a_prompts_last_chunk_verifies_no_drafts():
    """Issue 16: a prompt whose last chunk is one token was scheduled as a decode with k drafts and "accepted"
    them, so its first step gave 4 tokens. vLLM drafts only after a request's token (spec_token_ids come from
    the step before), so that step computes the one token and samples one."""
    r = simulate(load(None, ["workload.num_requests=1", "workload.prompt_tokens={dist: fixed, value: 2049}",
                             "workload.output_tokens={dist: fixed, value: 20}", "engine.max_num_batched_tokens=2048",
                             "speculative={method: fixed, num_speculative_tokens: 3, acceptance_rate: 1.0}"]))
    assert list(r.steps.scheduled_tokens[:3]) == [2048, 1, 4]
    assert list(r.requests.token_runs[0]) == [1, 6]  # 1 token, then 4 a step: 20 in six steps, not five


SMALL_SPEC = ["profile=roofline", "workload.num_requests=200", "workload.arrival.rate=20",
              "workload.prompt_tokens={dist: fixed, value: 300}", "workload.output_tokens={dist: fixed, value: 100}",
              "speculative.method=fixed", "speculative.num_speculative_tokens=4", "speculative.draft_cost_ratio=0"]


def test_round_131_a_decode_proposes_as_many_drafts_as_its_distribution_says():
    """r131 (vLLM): suffix decoding and 0.19's CPU n-gram propose 0..k drafts as the text matches (vLLM schedules
    len(spec_token_ids)); servesim verified k on every decode, so suffix decoding's default line ran 11x slower
    TTFT than no speculation. speculative.proposal_distribution draws each decode's count; a decode with none is
    a plain decode, and no draft is counted for it (as vLLM counts spec_decode_num_drafts)."""
    plain = simulate(load(None, SMALL_SPEC[:5])).summary
    none = simulate(load(None, SMALL_SPEC + ["speculative.proposal_distribution=[1, 0, 0, 0, 0]"])).summary
    assert none["p99_tpot_ms"] == pytest.approx(plain["p99_tpot_ms"]) and none["mean_ttft_ms"] == pytest.approx(
        plain["mean_ttft_ms"])
    assert not none.get("spec_decode_num_drafts")
    half = simulate(load(None, SMALL_SPEC + ["speculative.proposal_distribution=[0.5, 0, 0, 0, 0.5]"]))
    s = half.summary
    assert s["spec_decode_draft_tokens"] == 4 * s["spec_decode_num_drafts"]  # every proposal is k here
    # the decodes' tokens: one per plain decode, one plus the accepted per drafted one (a few at the end cut)
    plain_decodes = int(half.requests.output_tokens.sum()) - len(half.requests) - s["spec_decode_num_drafts"] - \
        s["spec_decode_accepted_tokens"]
    assert 0.45 < s["spec_decode_num_drafts"] / (s["spec_decode_num_drafts"] + plain_decodes) < 0.55


def test_round_131_proposal_distribution_is_validated():
    with pytest.raises(ConfigError, match="speculative.proposal_distribution: needs k \\+ 1 = 5"):
        load(None, SMALL_SPEC + ["speculative.proposal_distribution=[0.5, 0.5]"])


@pytest.mark.parametrize("version, method, varies", [("0.33.0", "suffix", True), ("0.19.0", "suffix", True),
                                                     ("0.19.0", "ngram", True), ("0.33.0", "ngram", False)])
def test_round_131_servesim_vllm_says_a_varying_proposer_is_timed_at_k(version, method, varies, tmp_path, capsys):
    """vLLM's suffix decoding (both releases) and 0.19's CPU n-gram propose as many drafts as the text matches;
    0.33's n-gram, on its GPU speculator, fills the unmatched slots and verifies k. Without the distribution the
    run says that k on every decode is an upper bound on the cost."""
    from servesim.simulator.cli import main

    config = {"suffix": '{"method": "suffix"}',
              "ngram": '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'}[method]
    argv = ["vllm", "--vllm-version", version, "--out", str(tmp_path / "o"), "serve", "meta-llama/Llama-3.1-8B-Instruct",
            "--speculative-config", config, "--", "bench", "serve", "--dataset-name", "random", "--num-prompts", "20",
            "--random-input-len", "100", "--random-output-len", "20"]
    assert main(argv) == 0
    said = "proposes as many drafts as the text matches" in capsys.readouterr().err
    assert said == varies


@pytest.mark.parametrize("release", ["0.33.0", "0.19.0"])
def test_round_131_the_drafter_passes_over_the_prompt_too(release):
    """r131 (vLLM): the drafter's first pass runs over every token the target scheduled, prefill chunks included
    (EAGLE's and the draft model's proposer), then k - 1 passes over one token a request; servesim charged k
    one-sequence decode passes per step whatever the step held, so a prefill-bound TTFT did not grow with the
    drafter's cost. 0.33 skips the drafter in a step whose drafts all go unused (non-final prefill chunks), 0.19
    runs it in every step. One request of 20,000 tokens (three chunks of the 8,192 budget), one output token."""
    def ttft(ratio: float) -> float:
        return simulate(load(None, [f"engine.vllm_defaults={release}", "workload.num_requests=1",
                                    "workload.prompt_tokens={dist: fixed, value: 20000}",
                                    "workload.output_tokens={dist: fixed, value: 1}", "speculative.method=fixed",
                                    f"speculative.draft_cost_ratio={ratio}", "engine.enable_prefix_caching=false",
                                    "engine.max_num_batched_tokens=8192"])).summary["mean_ttft_ms"]

    base, extra = ttft(0.0), ttft(0.5) - ttft(0.0)
    if release == "0.19.0":  # every chunk's pass: half the prompt's time again, and the small passes
        assert 0.5 * base < extra < 0.6 * base, (base, extra)
    else:  # the last chunk's only (3,616 of the 20,000 tokens, the longest context)
        assert 0.1 * base < extra < 0.3 * base, (base, extra)


@pytest.mark.parametrize("scheduled", [1024, None])
def test_0_33_draft_slots_take_the_input_budget_not_the_scheduled_tokens(run, scheduled):
    """vLLM 0.33 keeps two budgets: max_num_scheduled_tokens, which only tokens take, and max_num_batched_tokens,
    which tokens and a draft model's slots take. servesim charged the slots to the smaller one: with 1,024
    scheduled tokens of 8,192 it issued 1,023, 1,022, ... (r133; with 256 decodes of 2 tokens a step's prefill
    room halved). With one budget (None) the slots still come out of it."""
    sets = ["speculative.method=fixed", "speculative.num_speculative_tokens=1", "speculative.drafting_slots_per_seq=1",
            "speculative.acceptance_rate=0.5"]
    engine = {"max_num_batched_tokens": 8192 if scheduled else 1024, "max_model_len": 8192}
    if scheduled:
        engine["max_num_scheduled_tokens"] = scheduled
    r = run([(0.001 * i, 3000, 200) for i in range(40)], sets, **engine)
    steps = r.step_columns
    tokens, seqs = np.asarray(steps["scheduled_tokens"]), np.asarray(steps["num_seqs"])
    if scheduled:
        assert tokens.max() == 1024 and (tokens + seqs).max() <= 8192
        assert (tokens[:40] == 1024).all()  # the prompts' chunks fill the scheduled-token budget
    else:
        assert (tokens + seqs).max() == 1024  # tokens and slots within the one budget, which binds


def test_round_135_a_draft_model_beside_whole_prompts_fits_every_prompt_vllm_takes():
    """0.33 defaults the budget to max_model_len with chunked prefill off; its draft model's slot leaves
    max_model_len - 1, which holds every prompt vLLM accepts (at most max_model_len - 1 tokens): the line was
    refused as 'would never start a prompt longer than that'."""
    sets = ["speculative.method=fixed", "speculative.drafting_slots_per_seq=1", "engine.enable_chunked_prefill=false",
            "engine.max_model_len=4096", "engine.max_num_batched_tokens=4096", "profile=roofline"]
    r = simulate(load(None, sets + ["workload.num_requests=3", "workload.prompt_tokens={dist: fixed, value: 4095}",
                                    "workload.output_tokens={dist: fixed, value: 1}"]))
    assert r.summary["completed"] == 3
    with pytest.raises(ConfigError, match="leave 4094 of the 4096-token budget"):
        load(None, [s.replace("per_seq=1", "per_seq=2") for s in sets])  # two slots: a 4,095-token prompt waits


def test_round_141_a_recompute_chunk_one_short_leaves_a_plain_token_without_drafts(tmp_path):
    """r141: a preempted request's recompute chunk that ended one token short was followed by a decode with k
    drafts; vLLM drops the drafts proposed after a partial chunk, so that last token is a plain one-token step."""
    import json

    import pandas as pd

    from servesim.simulator.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"request_id": i, "arrival_time": 0, "prompt_tokens": 100,
                                         "output_tokens": 150}) + "\n" for i in range(2)))
    sets = ["workload.type=trace", f"workload.path={trace}", "engine.vllm_defaults=0.19.0",
            "engine.enable_prefix_caching=false", "engine.num_gpu_blocks_override=21", "speculative.method=fixed",
            "speculative.num_speculative_tokens=3", "engine.long_prefill_token_threshold=156"]
    assert main(["run", "--quiet", "--out", str(tmp_path / "o"), *[x for s in sets for x in ("--set", s)]]) == 0
    steps = pd.read_parquet(tmp_path / "o" / "steps.parquet")
    recompute = steps.index[(steps.prefill_tokens == 156) & (steps.num_running == 1)]
    assert len(recompute) == 1, steps  # the one recompute that the threshold cuts one token short
    after = steps.loc[recompute[0] + 1]
    assert after.scheduled_tokens == 1 and after.spec_drafts == 0, after


def test_round_141_0_19_reserves_lookahead_slots_for_a_pulled_request_at_admission(monkeypatch):
    """vLLM 0.19 reserves num_lookahead_tokens at admission where the request has tokens computed: a decode
    replica's pulled prompt (scheduler.py's P/D edge case); servesim gave none to any 0.19 admission."""
    from servesim.simulator import kv_cache
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.request import PULLED

    seen = []
    for cls in {c for c in vars(kv_cache).values() if isinstance(c, type) and hasattr(c, "allocate_slots")}:
        def wrap(self, r, n, *a, _orig=cls.allocate_slots, **kw):
            if r.remote_kv == PULLED and "num_lookahead_tokens" in kw:  # its admission, not its pull's start
                seen.append(kw["num_lookahead_tokens"])
            return _orig(self, r, n, *a, **kw)
        monkeypatch.setattr(cls, "allocate_slots", wrap)
    simulate(load(None, ["engine.vllm_defaults=0.19.0", "cluster.prefill_replicas=1", "speculative.method=fixed",
                         "speculative.lookahead_slots=3", "workload.num_requests=10"]))
    assert seen == [3] * 10


def test_round_145_a_verifying_decode_reads_its_context_once_not_as_prefill_pairs():
    """A decode verifying k drafts runs 1 + k tokens through the linear layers, and its attention is one pass over
    its KV context, as a decode's; it was also counted as prefill (query, key) pairs, which a linear profile prices
    at the prefill kernel's compute rate: 0.5-2.1 ms more on H100 steps of 64-256 such decodes (4-7%)."""
    import servesim

    r = servesim.simulate(None, {"workload.num_requests": 4, "workload.arrival.rate": 1000,
                                 "speculative.method": "fixed", "speculative.num_speculative_tokens": 4,
                                 "speculative.acceptance_rate": 0.5,
                                 "workload.prompt_tokens": {"dist": "fixed", "value": 100},
                                 "workload.output_tokens": {"dist": "fixed", "value": 50}})
    verify = r.steps[(r.steps["spec_drafts"] > 0) & (r.steps["prefill_tokens"] == 5 * r.steps["num_seqs"])]
    assert len(verify) > 5
    assert (verify["prefill_attention_pairs"] == 0).all() and (verify["decode_context_tokens"] > 0).all()


def test_round_146_parallel_drafting_is_one_drafter_pass_and_the_v1_runner_never_skips_it():
    """vLLM's parallel drafting (P-EAGLE, PARD, DFlash, DSpark) proposes all k drafts in one drafter pass
    (llm_base_proposer.py: `if self.num_speculative_tokens == 1 or self.parallel_drafting`), which servesim charged
    k - 1 more (TPOT 6.49 ms where one pass gives about 5.7); 0.33 skips the drafter in a step where no request
    samples only on its V2 model runner (can_skip_drafts), where servesim skipped it on the V1 runner too."""
    from types import SimpleNamespace as N

    from servesim.simulator.config import load
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.speculation import Speculation

    def spec(**kw):
        return Speculation(4, False, 100, lambda n: 0, 0.5, lambda shape: 1.0, **kw)

    decoding = N(spec_k=4, reqs=[N(num_computed_tokens=10, num_tokens=10)], shape=N(decode_context_tokens=10))
    chunk = N(spec_k=4, reqs=[N(num_computed_tokens=10, num_tokens=4000)], shape=N(decode_context_tokens=0))
    assert spec().draft_time(decoding, 2.0) == pytest.approx(0.5 * (2.0 + 3 * 1.0))  # a pass, then k - 1
    assert spec(parallel_drafting=True).draft_time(decoding, 2.0) == pytest.approx(0.5 * 2.0)  # one pass
    assert spec().draft_time(chunk, 2.0) == 0.0  # the V2 runner: no request samples, no drafter
    assert spec(skips_unused_drafts=False).draft_time(chunk, 2.0) == pytest.approx(0.5 * (2.0 + 3 * 1.0))
    line = ["vllm", "--config", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config",
            '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4, '
            '"parallel_drafting": true}']
    from servesim.simulator.vllm_command import read, split_command

    cmd = read(*split_command(line[2:]), "0.33.0")
    assert (cmd.settings["speculative.parallel_drafting"], cmd.settings["speculative.skips_unused_drafts"]) == \
        (True, False)
    with pytest.raises(ConfigError, match="^speculative.skips_unused_drafts: true: vLLM 0.19 runs the drafter"):
        load(None, ["speculative.method=fixed", "speculative.skips_unused_drafts=true", "engine.vllm_defaults=0.19.0"])


@pytest.mark.parametrize("release, padded", [("0.33.0", True), ("0.19.0", False)])
def test_round_154_0_33_pads_an_admission_with_one_token_left_to_k_placeholder_drafts(release, padded):
    """vLLM 0.33 pads a waiting request with one token left (a full prefix hit beside a running decode, a P/D
    decode replica's pulled request) to 1 + k with placeholder drafts, none accepted, keeping the step's uniform
    decode shape; 0.19 schedules the one token. servesim scheduled it plain under both (r154)."""
    import servesim

    base = {"profile": "teaching", "model": "tiny-llama", "engine.vllm_defaults": release,
            "engine.async_scheduling": False, "speculative.method": "fixed", "speculative.num_speculative_tokens": 2,
            "speculative.acceptance_distribution": [0, 1, 0], "speculative.lookahead_slots": 2}
    ids = (1, 2, 3)
    hit = servesim.simulate(None, base, requests=[
        servesim.RequestSpec(0, 0.0, 33, 20, prefix_ids=ids, prefix_block_tokens=16),
        servesim.RequestSpec(1, 0.1, 33, 3, prefix_ids=ids, prefix_block_tokens=16)])
    joined = hit.steps.num_running.diff().eq(1).idxmax()  # request 1's admission: 32 of its 33 tokens cached
    assert hit.requests.cached_tokens.tolist() == [0, 32]
    assert hit.steps.scheduled_tokens[joined] == 3 + (3 if padded else 1)
    assert hit.steps.spec_accepted[joined] == 1  # request 0's one accepted draft; the placeholders none
    assert hit.requests.output_tokens.tolist() == [20, 3]
    pd_run = servesim.simulate(None, {**base, "cluster.prefill_replicas": 1, "cluster.replicas": 1,
                                         "engine.num_gpu_blocks_override": 300},
                               requests=[servesim.RequestSpec(0, 0.0, 40, 4), servesim.RequestSpec(1, 0.03, 40, 3)])
    decode = pd_run.steps[pd_run.steps.replica == 1]
    assert decode.scheduled_tokens.iloc[0] == (3 if padded else 1)  # the first pulled request, alone
    # a budget too small for 1 + k: 0.33 leaves it waiting rather than schedule it unpadded
    tight = servesim.simulate(None, {**base, "engine.max_num_batched_tokens": 4, "engine.max_model_len": 64,
                                     "engine.enable_chunked_prefill": True}, requests=[
        servesim.RequestSpec(0, 0.0, 33, 20, prefix_ids=ids, prefix_block_tokens=16),
        servesim.RequestSpec(1, 0.2, 33, 3, prefix_ids=ids, prefix_block_tokens=16)])  # after 0's prompt
    assert tight.steps.scheduled_tokens.max() <= 4 and tight.requests.cached_tokens.tolist() == [0, 32]
    both = tight.steps.num_running.eq(2)
    assert (tight.requests.first_token_time[1] > tight.requests.finish_time[0]) == padded, tight.steps
    assert both.any() != padded


def test_round_156_a_budget_with_no_room_for_a_padded_admission_is_refused():
    """r156: under 0.33 a budget below 1 + k left a padded admission (a full prefix hit, a pulled prompt) waiting
    for good: the run stopped, an internal error ("nothing schedulable"). Refused in one line; 0.19 pads nothing."""
    sets = ["speculative.method=fixed", "speculative.num_speculative_tokens=4", "engine.max_num_batched_tokens=4",
            "engine.enable_chunked_prefill=true", "engine.max_model_len=2048", "profile=roofline"]
    with pytest.raises(ConfigError, match="below 1 \\+ num_speculative_tokens \\(5\\)") as e:
        load(None, sets)
    assert e.value.field == "engine.max_num_batched_tokens"
    load(None, sets[:2] + ["engine.max_num_batched_tokens=5"] + sets[3:])
