"""evaluate.py's rows (issue 24): the paper's aggregate (three code and seven math benchmarks)
picks the best and weakest member, any model folder as the baseline row (--baseline_model), and
`evaluate.py crossplay` end to end on a tiny-warm population (the paper's figure 12)."""
import json
import os
import shutil

import evaluate as E
import train
from conftest import ROOT
from test_evaluate import FIX, _checkpoint, cli


def scores(code, math6, gsm8k):
    row = {name: code for name in E.CODE}
    row.update({name: math6 for name in E.MATH6})
    row["gsm8k"] = gsm8k
    return row


def test_the_paper_aggregate_picks_the_weakest_member():
    # s0 is weaker than s1 on AZR's six math sets, stronger on the paper's seven (GSM8K)
    table = E.summarize({"s0": scores(40.0, 20.0, 90.0), "s1": scores(40.0, 22.0, 60.0),
                         "base": scores(30.0, 10.0, 50.0)}, {"s0": "student", "s1": "student"})
    assert table["weakest member"]["row"] == "s1"
    assert table["best student"]["row"] == "s0"
    s0 = table["best student"]
    assert s0["math_avg7"] == round((6 * 20.0 + 90.0) / 7, 2)
    assert s0["overall"] == round((40.0 + s0["math_avg7"]) / 2, 2)
    # AZR's aggregate stays beside it
    assert s0["overall_azr"] == 30.0
    md = E.markdown(table, list(E.BENCHMARKS), "t")
    assert "overall_azr" in md and "| weakest member | s1 |" in md


def save_model_copy(source, folder, scale):
    """A full fine-tune stand-in: the tiny base with every weight moved by `scale` (0: a copy)."""
    import torch
    import population
    model, tokenizer = population.load_base(source)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    model.save_pretrained(folder)
    shutil.copytree(source, folder, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
    return folder


def test_baseline_model_is_any_local_model_folder(tmp_path):
    import tinyworld
    cache = str(tmp_path / "out" / ".tiny")
    pop = _checkpoint(str(tmp_path / "pop"), ["teacher", "student"], cache, 0.5)
    tiny = tinyworld.model_folder("tiny", cache)
    same = save_model_copy(tiny, str(tmp_path / "same"), 0.0)
    tuned = save_model_copy(tiny, str(tmp_path / "tuned"), 0.05)
    texts = {}
    for name, folder in (("same", same), ("tuned", tuned)):
        r = cli("--ckpt", pop, "--baseline_model", folder, "--benchmarks", "gsm8k", "--data_dir",
                FIX, "--limit", "2", "--engine", "hf", "--math_tokens", "16", "--out",
                str(tmp_path / name), cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        result = json.loads((tmp_path / name / "eval.json").read_text())
        assert result["baseline_model"] == folder
        assert set(result["scores"]) == {"t0", "s0", "base", "baseline"}
        assert list(result["table"])[:2] == ["base", "baseline"]
        assert len(result["items"]["gsm8k"]["baseline"]) == 2
        texts[name] = {}
        for row in ("base", "baseline"):
            texts[name][row] = [s["response"] for s in result["samples"]["gsm8k"][row]]
    # the same weights in a folder of their own answer exactly as the checkpoint's base
    assert texts["same"]["baseline"] == texts["same"]["base"]
    assert texts["tuned"]["baseline"] != texts["tuned"]["base"]
    r = cli("--ckpt", pop, "--baseline_model", same, "--baseline_ckpt", pop, cwd=str(tmp_path))
    assert r.returncode != 0 and "give one" in r.stderr


def test_tiny_warm_run_metrics_report_and_crossplay(warm_dir, tmp_path):
    """A 2T+2S population trained 2 steps on tiny-warm: its metrics and archive carry what the
    figures read, the report draws them, and crossplay has every student and the base attempt
    every teacher's fresh valid problems."""
    cache = os.path.join(ROOT, "out", ".tiny")
    cfg = dict(train.config, model="tiny-warm", model_cache=cache, out_dir=str(tmp_path / "run"),
               teachers=2, students=2, steps=2, propose_per_task=2, solve_samples=2,
               min_problems=1, references=2, max_new_tokens=96, lora_rank=4, lora_alpha=8,
               lora_targets="q_proj,v_proj", lr=3e-3, evolve_every=-1, save_every=-1,
               engine="hf", seed=5)
    train.main(cfg)
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    for row in rows:
        for m in ("t0", "t1", "s0", "s1"):
            assert f"entropy/{m}" in row
        for s in ("s0", "s1"):
            for task in ("code_i", "code_o", "code_f"):
                assert f"student/{s}/matched_solve_rate/{task}" in row
                assert f"student/{s}/topup_solve_rate/{task}" in row
    ckpt = str(tmp_path / "run" / "step_000002")
    made = []
    with open(os.path.join(ckpt, "archive.jsonl")) as f:
        for line in f:
            problem = json.loads(line)["problem"]
            assert 0 <= problem["correct"] <= problem["attempts"]
            # made at the last step: only its teacher's matched student attempted it (top-ups come
            # from older problems), solve_samples times
            if problem["step"] == 1:
                made.append(problem["attempts"])
    assert made and set(made) == {2}
    r = cli("report", str(tmp_path / "run"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    figures = json.loads(r.stdout.strip().splitlines()[-1])["figures"]
    assert "problem_solve_rates.png" in figures and "entropy.png" in figures
    r = cli("crossplay", "--ckpt", ckpt, "--engine", "hf", "--model_cache", cache,
            "--crossplay_problems", "3", "--crossplay_samples", "2", "--out", str(tmp_path / "cp"),
            cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "cp" / "crossplay.json").read_text())
    assert result["teachers"] == ["t0", "t1"] and result["solvers"] == ["s0", "s1", "base"]
    assert result["step"] == 2
    made_any = False
    for t in result["teachers"]:
        made = sum(len(programs) for programs in result["valid_problems"][t].values())
        assert 0 <= made <= 9
        assert result["validity"][t] == made / 9
        made_any = made_any or made > 0
        for row in result["solvers"]:
            # every solver: every valid problem of the teacher, twice
            assert result["attempts"][row][t] == 2 * made
            rate = result["matrix"][row][t]
            assert (rate is None) == (made == 0)
            if rate is not None:
                assert 0.0 <= rate <= 1.0
    # the warm base writes valid problems (teacher validity ~0.8 at step 0)
    assert made_any
    png = (tmp_path / "cp" / "crossplay.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "cp" / "crossplay.md").read_text()
    assert "| s0 |" in md and "| base |" in md
    r = cli("crossplay", "--ckpt", str(tmp_path / "nothing"), cwd=str(tmp_path))
    assert r.returncode != 0 and "not a checkpoint folder" in r.stderr
