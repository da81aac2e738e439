"""The device session (one call on a lent GPU) run end to end on the CPU with the tiny model, and
the pieces it adds: the harness's memory plan and `calibrate compare`."""

import json
import re
import tarfile

import pandas as pd
import pytest

pytest.importorskip("torch", reason="torch is in the `calibrate` extra; `make test` installs it")

from servesim.calibration.compare import compare_profiles  # noqa: E402
from servesim.calibration.device_session import HEADLINE, main  # noqa: E402
from servesim.calibration.grid import make_grid  # noqa: E402
from servesim.calibration.harness import memory_plan, run_calibration  # noqa: E402
from servesim.simulator.cli import main as cli  # noqa: E402
from servesim.simulator.errors import ConfigError  # noqa: E402
from servesim.simulator.model_arch import load_model  # noqa: E402

TINY = ["--device", "cpu", "--model", "tiny-llama", "--dtype", "fp32", "--grid", "quick", "--threads", "1",
        "--scenario", "docs/scenarios/replay-tiny-cpu.yaml", "--set", "workload.num_requests=12"]


def _run(tmp_path, *extra):
    out, work = tmp_path / "out", tmp_path / "work"
    rc = main(["--out", str(out), "--work", str(work), *TINY, *extra])
    return rc, out, json.loads((work / "summary.json").read_text())


def test_session_brings_back_every_stage(tmp_path):
    rc, out, s = _run(tmp_path, "--reference", "teaching")
    assert rc == 0, {k: v.get("error") for k, v in s["stages"].items()}
    assert list(s["stages"]) == ["device", "kernels", "calibrate", "replay", "compare"]
    # the paged kernel ran (Triton's interpreter here) and computed what the gather does; interpreted, it is
    # far slower, so the calibration keeps the gather
    ker = s["stages"]["kernels"]
    assert ker["paged_vs_gather_relative_error"] < 1e-4 and ker["points"] == 4
    assert ker["paged_over_gather_time_median"] > 1 and ker["attention"] == "gather"
    assert s["stages"]["calibrate"]["attention"] == "gather"
    # what the device call brings back: the bundle, the headline files and (from the wrapper) log.txt
    assert sorted(p.name for p in out.iterdir()) == sorted(["session.tar.gz", *HEADLINE.values()])
    assert len(HEADLINE) + 2 <= 8
    with tarfile.open(out / "session.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"session/calibration/measurements.parquet", "session/calibration/run.json",
            "session/replay/replayed-steps.parquet", "session/replay/cdf-2.png", "session/compare.md",
            "session/attention-kernels.csv"} <= names
    rep = s["stages"]["replay"]
    assert len(rep["loads"]) == 3 and rep["skipped_for_time"] == []
    steps = pd.read_parquet(tmp_path / "work" / "replay" / "replayed-steps.parquet")
    assert set(steps["load"]) == set(rep["loads"]) and (steps["duration"] > 0).all()
    # the replayed batches are measurements in their own right: `calibrate fit` takes them as they are
    assert cli(["calibrate", "fit", str(tmp_path / "work" / "replay" / "replayed-steps.parquet"),
                "--model", "tiny-llama", "--dtype", "fp32",
                "--out", str(tmp_path / "refit.yaml")]) == 0
    # the tiny model's harness profile predicts its own replayed steps; the teaching constants do not
    assert rep["harness_profile_on_replayed_steps"]["mape"] < rep["reference_profile_on_replayed_steps"]["mape"]
    device = json.loads((out / "device.json").read_text())
    assert device["hardware"]["kind"] == "cpu" and device["torch"]
    assert "cpu-tiny-llama-fp32-tp1-harness" in (out / "profile.yaml").read_text()
    assert "Replay at rate=" in (out / "summary.md").read_text()


def test_unpack_puts_what_came_back_into_the_repository(tmp_path):
    from servesim.calibration.device_session import unpack
    from servesim.simulator.cost_model import load_profile

    rc, out, _ = _run(tmp_path, "--attention", "gather", "--reference", "teaching", "--set", "workload.num_requests=4",
                      "--loads", "0.5")
    assert rc == 0
    (tmp_path / "profiles").mkdir()
    dest, prof = unpack(out / "session.tar.gz", tmp_path / "results", tmp_path / "profiles")
    assert dest == tmp_path / "results" / "device-cpu-tiny-llama-fp32-tp1-harness"
    assert (dest / "replay" / "table.csv").is_file() and (dest / "summary.md").is_file()
    p = load_profile(str(prof))
    assert p.name == "cpu-tiny-llama-fp32-tp1-harness" and p.attention == "gather"
    assert (prof.parent / p.measurements).is_file()
    assert main(["--unpack", str(tmp_path / "nothing.tar.gz")]) == 2


def test_a_failed_stage_is_reported_and_the_rest_still_comes_back(tmp_path):
    # roofline is not a linear profile: the comparison fails, the calibration and replay are kept
    rc, out, s = _run(tmp_path, "--attention", "gather", "--reference", "roofline", "--set", "workload.num_requests=4", "--loads", "0.5")
    assert rc == 1
    assert s["stages"]["calibrate"]["ok"] and s["stages"]["replay"]["ok"]
    assert not s["stages"]["compare"]["ok"] and "compare takes linear profiles" in s["stages"]["compare"]["error"]
    assert "compare** (0 s): FAILED" in (out / "summary.md").read_text() and (out / "profile.yaml").is_file()


def test_no_replay_level_starts_after_the_budget(tmp_path):
    rc, out, s = _run(tmp_path, "--attention", "gather", "--reference", "teaching", "--budget-s", "0", "--level-reserve-s", "0")
    assert rc == 1 and s["stages"]["calibrate"]["ok"]
    assert "deadline passed before the first load level" in s["stages"]["replay"]["error"]


def test_memory_plan_skips_points_over_the_kv_budget(tmp_path):
    arch = load_model("tiny-llama")
    pts = make_grid("quick")
    kept, skipped, budget = memory_plan(arch, "cpu", "fp32", pts)
    assert (kept, skipped) == (pts, []) and budget > 0  # the CPU's budget: the memory it has available
    kept, skipped, _ = memory_plan(arch, "cpu", "fp32", pts, max_kv_gib=0.005)
    assert skipped and kept and len(kept) + len(skipped) == len(pts)
    assert max(p.max_kv_tokens for p in kept) < min(p.max_kv_tokens for p in skipped)
    out = run_calibration("tiny-llama", "cpu", "fp32", tmp_path / "cal", grid="quick", repeats=1, warmup=0,
                          threads=1, progress=False, max_kv_gib=0.005)
    meta = json.loads((out / "run.json").read_text())
    assert meta["points"] == len(kept) and len(meta["skipped_points"]) == len(skipped)
    assert len(pd.read_parquet(out / "measurements.parquet")) == len(kept)
    with pytest.raises(ConfigError, match="max_kv_gib"):
        memory_plan(arch, "cpu", "fp32", pts, max_kv_gib=-1)


def test_weights_that_do_not_fit_the_memory_are_refused_up_front(monkeypatch):
    """An 8B model in fp32 (32 GB) on a machine with 4 GiB free: one line, not an OOM kill."""
    import servesim.calibration.harness as harness

    monkeypatch.setattr(harness, "free_memory", lambda torch, device: (4 * 2**30, 2**30))
    with pytest.raises(ConfigError, match=r"--model: .*29\.9 GiB of fp32 weights do not fit the 4\.0 GiB free on cpu"):
        memory_plan(load_model("llama-3.1-8b"), "cpu", "fp32", make_grid("quick"))


def test_compare_names_each_component():
    t = compare_profiles("h200-llama-3.1-8b-bf16-tp1", "h100-llama-3.1-8b-bf16-tp1")
    row = t.set_index("what")["a_over_b"]
    # decode attention streams the KV cache: H200 / H100 follows their HBM bandwidth, 3.35 / 4.8 TB/s = 0.70
    assert 0.6 < row["decode attention per KV token read, at 100k KV tokens a step (ms)"] < 0.8
    assert {"per-step overhead (ms)", "linear layers: GEMM time per token above the knee (ms)",
            "prefill attention per (query, key) pair (ms)"} <= set(row.index)
    same = compare_profiles("h200-llama-3.1-8b-bf16-tp1", "h200-llama-3.1-8b-bf16-tp1")
    assert (same["a_over_b"].dropna() == 1.0).all() and same["a_over_b"].notna().sum() >= 10


def test_compare_cli(tmp_path, capsys):
    assert cli(["calibrate", "compare", "teaching", "h200-llama-3.1-8b-bf16-tp1", "--out", str(tmp_path / "c.csv")]) == 0
    assert "| per-step overhead (ms) | 18 |" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "c.csv")) > 10
    assert cli(["calibrate", "compare", "roofline", "teaching"]) == 2
    assert "compare takes linear profiles" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../victim", "/tmp/abs", "a/b", "", None, 5, "x" * 200])
def test_unpack_refuses_a_bundle_whose_profile_name_is_a_path(tmp_path, name):
    """A crafted bundle must not reach outside results/: the profile name becomes a folder and a file name."""
    import io
    import tarfile

    import yaml

    from servesim.calibration.device_session import unpack

    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    bundle = tmp_path / "session.tar.gz"
    text = yaml.safe_dump({"name": name}).encode()
    with tarfile.open(bundle, "w:gz") as tar:
        info = tarfile.TarInfo("session/calibration/profile.yaml")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    (tmp_path / "results" / "fidelity").mkdir(parents=True)
    (tmp_path / "profiles").mkdir()
    with pytest.raises(ConfigError, match="bundle: profile name"):
        unpack(bundle, tmp_path / "results" / "fidelity", tmp_path / "profiles")
    assert (victim / "keep").is_dir() and not any((tmp_path / "profiles").iterdir())


def _bundle(path, name: str, extra: dict[str, bytes] | None = None):
    """A crafted session bundle: a profile of this name, and other members (name -> bytes)."""
    import io
    import tarfile

    import yaml

    text = yaml.safe_dump({"name": name, "cost_model": "linear"}).encode()
    with tarfile.open(path, "w:gz") as tar:
        for member, data in {"session/calibration/profile.yaml": text, **(extra or {})}.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("where", ["results", "profiles"])
def test_unpack_into_a_file_is_one_line_and_changes_nothing(tmp_path, capsys, monkeypatch, where):
    """r150: a file where results/fidelity goes was a traceback (NotADirectoryError); a file as the profiles folder
    was refused only after the session had replaced the earlier one."""
    from servesim.calibration import device_session

    bundle = _bundle(tmp_path / "b.tar.gz", "mine-llama-3.1-8b-bf16-tp1")
    (tmp_path / "results").mkdir()
    (tmp_path / "profiles").mkdir()
    (tmp_path / where / "x").write_text("a file")
    roots = {"results": tmp_path / "results", "profiles": tmp_path / "profiles"} | {where: tmp_path / where / "x"}
    with pytest.raises(ConfigError, match=f"^{where}: .*/x is not a folder"):
        device_session.unpack(bundle, roots["results"], roots["profiles"])
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name != "b.tar.gz") == ["profiles", "results", "x"]
    monkeypatch.chdir(tmp_path)  # the command's default results/fidelity, here a file
    (tmp_path / "results" / "fidelity").write_text("a file")
    assert main(["--unpack", str(bundle)]) == 2
    assert "results/fidelity is not a folder" in capsys.readouterr().err


def test_unpack_never_replaces_a_shipped_profile_nor_writes_through_a_link(tmp_path):
    """Round 42: a bundle named `teaching` replaced the shipped profile, and a link planted at the profile's name sent
    it outside the repository; a member below a file was a traceback after the earlier unpacking had been wiped."""
    from servesim.calibration.device_session import unpack

    results, profiles = tmp_path / "results", tmp_path / "profiles"
    results.mkdir()
    profiles.mkdir()
    (profiles / "teaching.yaml").write_text("name: teaching\ncost_model: linear\n")
    with pytest.raises(ConfigError, match="bundle: profile name 'teaching' is a built-in profile's"):
        unpack(_bundle(tmp_path / "b1.tar.gz", "teaching"), results, profiles)
    assert (profiles / "teaching.yaml").read_text() == "name: teaching\ncost_model: linear\n"
    (profiles / "planted.yaml").symlink_to(tmp_path / "victim.txt")
    with pytest.raises(ConfigError, match="planted.yaml is a link"):
        unpack(_bundle(tmp_path / "b2.tar.gz", "planted"), results, profiles)
    assert not (tmp_path / "victim.txt").exists()
    # a session's own profile is replaced by a later unpacking of it; a bad member leaves the earlier one whole
    dest, prof = unpack(_bundle(tmp_path / "b3.tar.gz", "mine", {"session/summary.md": b"first"}), results, profiles)
    assert (dest / "summary.md").read_text() == "first" and "measurements: ../results/device-mine" in prof.read_text()
    dest, prof = unpack(_bundle(tmp_path / "b4.tar.gz", "mine", {"session/summary.md": b"second"}), results, profiles)
    assert (dest / "summary.md").read_text() == "second"
    for extra, why in (({"session/summary.md/x": b"x"}, "cannot unpack member"),
                       ({"session/../../evil": b"x"}, "refused member")):
        with pytest.raises(ConfigError, match=why):
            unpack(_bundle(tmp_path / "b5.tar.gz", "mine", {"session/summary.md": b"third", **extra}), results, profiles)
        assert (dest / "summary.md").read_text() == "second" and sorted(p.name for p in results.iterdir()) == ["device-mine"]
    assert not (tmp_path / "evil").exists()


def test_only_a_profile_a_command_made_is_made_again_and_nothing_else_lands_in_the_package(tmp_path, monkeypatch):
    """Round 43: `calibrate import --out calibration/profiles/teaching.yaml` replaced the essay's hand-written
    constants with an H200 profile; --unpack run from inside the package unpacked an untrusted bundle there."""
    import servesim.simulator.files as files
    from servesim.calibration.device_session import unpack

    package = tmp_path / "pkg" / "calibration"
    (package / "profiles").mkdir(parents=True)
    (package / "profiles" / "teaching.yaml").write_text("# by hand\nname: teaching\nsource: background essay 002\n")
    (package / "profiles" / "made.yaml").write_text("name: made\nsource: aiconfigurator-core 0.12.0 kernel tables\n")
    monkeypatch.setattr(files, "package_folders", lambda: [package.resolve()])
    with pytest.raises(ConfigError, match="teaching.yaml is a built-in profile written by hand"):
        files.output_file(package / "profiles" / "teaching.yaml", "--out", profile=True)
    for name in ("made.yaml", "new.yaml"):  # made by a command: made again; a new one: written
        files.output_file(package / "profiles" / name, "--out", profile=True)
    with pytest.raises(ConfigError, match="lies among servesim's own files"):
        files.output_file(package / "profiles" / "table.csv", "--out")
    with pytest.raises(ConfigError, match="bundle: .* lies among servesim's own files"):
        unpack(_bundle(tmp_path / "b.tar.gz", "mine"), package / "results" / "fidelity", tmp_path / "profiles")
    assert not (package / "results").exists()


@pytest.mark.parametrize("profile, says", [
    (b"name: nonutf\n\xff\xfe: 1\n", "profile.yaml is not UTF-8"),
    (b"name: bad\ncost_model: linear\ncoefficients: {step_overhead_ms: .nan}\n", "its profile is not one servesim runs"),
    (b"name: nomodel\n", "its profile is not one servesim runs"),
])
def test_unpack_refuses_a_profile_servesim_would_not_run(tmp_path, profile, says):
    """r123: a bundle's profile that is not UTF-8 (read with its bytes replaced) or that no run would take was
    planted among the built-ins, and then `auto` selection refused deployments that had nothing to do with it."""
    from servesim.calibration.device_session import unpack

    import io

    bundle = tmp_path / "b.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        info = tarfile.TarInfo("session/calibration/profile.yaml")
        info.size = len(profile)
        tar.addfile(info, io.BytesIO(profile))
    (tmp_path / "results").mkdir()
    (tmp_path / "profiles").mkdir()
    with pytest.raises(ConfigError, match=re.escape(says)):
        unpack(bundle, tmp_path / "results", tmp_path / "profiles")
    assert not any((tmp_path / "profiles").iterdir()) and not any((tmp_path / "results").iterdir())
