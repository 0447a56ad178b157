"""train.py end to end on the built-in tiny model (CPU, hermetic): the step of design §4 with 2 teachers + 2 students,
evolution and its lineage in the checkpoint, the frozen base untouched, the baseline and 1T+1S, resume == an
uninterrupted run, a 2-process torchrun on gloo, the loss's sign (a learning test), and every bad input of issue 5.

    python -m pytest tests/test_train.py -v            # -m "not slow" skips the torchrun and vLLM runs

The random tiny model never writes a well-formed answer, so every reward of a step is equal and every advantage 0:
the runs below check that such a step is normal (no update, no crash). The learning test drives the update itself
with rewards that differ, through the same train_member / pg_loss main() uses.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from checkpoint import upgrade_archive
from conftest import ROOT
import population
import ratings
import rollout
import startup
import train
import verify

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def tiny_cfg(tiny, out, **overrides):
    """The smallest config that still runs every part of a step (one proposal per teacher and task type)."""
    return {**train.config, **dict(
        model=tiny, out_dir=str(out), teachers=2, students=2, steps=2, propose_per_task=1, solve_samples=2,
        min_problems=1, references=1, max_new_tokens=12, lora_rank=8, lora_alpha=16, lora_targets="q_proj,v_proj",
        evolve_every=-1, save_every=-1, samples_per_step=2, micro_batch_tokens=4096, engine="hf", seed=7,
        seed_archive="identity"), **overrides}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def spec_keys(teachers, students):
    """The metrics.jsonl keys design §10 requires every step (match keys are checked separately)."""
    keys = {"step", "archive/coverage", "tokens_per_s", *(f"archive/size/{t}" for t in verify.TASKS),
            *(f"complexity/{k}" for k in ("ast_depth", "cyclomatic", "loc", "variables")),
            *(f"{kind}/{role}" for kind in ("response_len", "entropy") for role in ("teacher", "student")),
            *(f"time/{k}" for k in ("generate", "verify", "train", "evolve", "checkpoint"))}
    for m in teachers:
        keys |= {f"teacher/{m}/format_rate", f"teacher/{m}/reward", *(f"teacher/{m}/valid_rate/{t}" for t in verify.TASKS)}
    for m in students:
        keys |= {f"student/{m}/format_rate", f"student/{m}/reward", *(f"student/{m}/solve_rate/{t}" for t in verify.TASKS)}
    for m in dict.fromkeys(teachers + students):
        keys |= {f"rating/{m}/mu", f"rating/{m}/sigma", f"loss/{m}", f"grad_norm/{m}"}
    return keys


def check_metrics(rows, steps, teachers, students):
    assert [r["step"] for r in rows] == list(range(steps))
    for row in rows:
        missing = spec_keys(teachers, students) - set(row)
        assert not missing, f"step {row['step']} lacks {sorted(missing)}"
        matches = [k.split("/")[1:3] for k in row if k.startswith("match/") and k.endswith("/outcome")]
        assert sorted(s for _, s in matches) == sorted(students)  # N_T = N_S: every student plays once
        assert all(f"match/{t}/{s}/solve_rate" in row and row[f"match/{t}/{s}/outcome"] in (-1, 0, 1) for t, s in matches)
        for m in teachers:  # all rewards equal (random model: format errors) -> zero advantages, a no-op update
            if row[f"teacher/{m}/reward"] == -1.0:
                assert row[f"loss/{m}"] == 0.0 and row[f"grad_norm/{m}"] == 0.0


def same(a, b):
    """Deep equality with tensors compared bit for bit."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def checkpoint(folder):
    """Everything a resumed run depends on, read back from a checkpoint folder."""
    with open(os.path.join(folder, "state.json")) as f:
        state = json.load(f)
    adapters = {m["name"]: load_file(os.path.join(folder, "adapters", m["name"], "adapter_model.safetensors"))
                for m in state["members"]}
    optim = {m["name"]: torch.load(os.path.join(folder, "optim", f"{m['name']}.pt"), weights_only=True)
             for m in state["members"]}
    with open(os.path.join(folder, "archive.jsonl")) as f:
        archive = f.read()
    return state, adapters, optim, archive


@pytest.fixture(scope="module")
def run4(tiny_dir, tmp_path_factory):
    """2 teachers + 2 students, 4 steps, evolution and a checkpoint every 2: the uninterrupted reference run."""
    out = tmp_path_factory.mktemp("run4")
    result = train.main(tiny_cfg(tiny_dir, out, steps=4, evolve_every=2, save_every=2))
    return out, result


# ----------------------------------------------------------------------------- end to end

def test_end_to_end_population(run4, tiny_dir):
    out, result = run4
    rows = read_jsonl(out / "metrics.jsonl")
    check_metrics(rows, 4, ["t0", "t1"], ["s0", "s1"])
    # evolution at the start of step 2 (0-based), never after the last step (deviation 7): the bottom quarter of
    # each role of 2 = one child per role
    for row in rows:
        children = sorted(k.split("/")[1] for k in row if k.startswith("evolve/") and k.endswith("/operator"))
        assert (len(children) == 2) == (row["step"] == 2) and sorted(c[0] for c in children) in ([], ["s", "t"])
        assert all(row[f"evolve/{c}/parents"] and row[f"evolve/{c}/operator"] for c in children)
    # the checkpoint saved at the end of step 1 holds no child yet: every saved member has trained
    assert all(m["lineage"] == [] for m in checkpoint(out / "step_000002")[0]["members"])
    state = checkpoint(out / "step_000004")[0]
    lineage = [(m["name"], e["step"], e["operator"], e["parent_names"]) for m in state["members"] for e in m["lineage"]]
    logged = [(k.split("/")[1], r["step"], r[k], r[f"evolve/{k.split('/')[1]}/parents"]) for r in rows for k in r
              if k.startswith("evolve/") and k.endswith("/operator")]
    assert sorted(lineage) == sorted(logged) and len(lineage) == 2
    assert len({m["id"] for m in state["members"]}) == 4 and max(m["id"] for m in state["members"]) >= 4  # new ids
    assert (out / "step_000002" / "state.json").exists() and json.load(open(out / "config.json"))["config"]["steps"] == 4
    samples = read_jsonl(out / "samples.jsonl")
    assert {s["step"] for s in samples} == {0, 1, 2, 3} and all("teacher_response" in s for s in samples)
    # the frozen base is bit-identical to a fresh load after 4 steps with updates and evolution
    fresh, _ = population.load_base(tiny_dir)
    trained = {n.replace("base_model.model.", "").replace(".base_layer", ""): p for n, p in
               result["model"].named_parameters() if "lora_" not in n}
    for name, p in fresh.named_parameters():
        assert torch.equal(p, trained[name]), name
    assert not any(p.requires_grad for n, p in result["model"].named_parameters() if "lora_" not in n)


def test_resume_equals_uninterrupted(run4, tiny_dir, tmp_path):
    out4, _ = run4
    cfg = tiny_cfg(tiny_dir, tmp_path, steps=2, evolve_every=2, save_every=2, resume="auto")  # no checkpoint yet: fresh
    train.main(cfg)
    train.main(dict(cfg, steps=4))  # --resume auto picks step_000002
    state_a, adapters_a, optim_a, archive_a = checkpoint(out4 / "step_000004")
    state_b, adapters_b, optim_b, archive_b = checkpoint(tmp_path / "step_000004")
    for name in adapters_a:
        assert adapters_a[name].keys() == adapters_b[name].keys()
        assert all(torch.equal(adapters_a[name][k], adapters_b[name][k]) for k in adapters_a[name]), name
        assert same(optim_a[name], optim_b[name]), name
    assert state_a["members"] == state_b["members"]  # ratings, ids, lineage
    assert state_a["decisions_rng"] == state_b["decisions_rng"] and archive_a == archive_b
    strip = lambda row: {k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}  # noqa: E731
    rows_a, rows_b = read_jsonl(out4 / "metrics.jsonl"), read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows_b] == [0, 1, 2, 3]
    assert [strip(r) for r in rows_a] == [strip(r) for r in rows_b]


def test_init_adapters_swaps_a_member_after_resume(run4, tiny_dir, tmp_path):
    """--init_adapters after --resume: the named member takes the file's weights (here another
    member's, from a later checkpoint), the others keep the checkpoint's; lr 0 keeps both visible."""
    out, _ = run4
    donor = out / "step_000004" / "adapters" / "t0"
    cfg = tiny_cfg(tiny_dir, tmp_path, steps=3, evolve_every=-1, save_every=-1, lr=0.0,
                   resume=str(out / "step_000002"), init_adapters=f"s1={donor}")
    train.main(cfg)
    _, resumed, _, _ = checkpoint(out / "step_000002")
    _, later, _, _ = checkpoint(out / "step_000004")
    _, now, optim, _ = checkpoint(tmp_path / "step_000003")
    assert not same(later["t0"], resumed["s1"])  # the swap is visible
    assert same(now["s1"], later["t0"]) and same(now["s0"], resumed["s0"])
    assert optim["s1"]["state"] == {} or all(v["step"] == 1 for v in optim["s1"]["state"].values())
    with pytest.raises(SystemExit, match=r"--init_adapters x9=.*: no member 'x9'"):
        train.main(dict(cfg, init_adapters=f"x9={donor}"))
    with pytest.raises(SystemExit, match=r"--init_adapters s0=.*: no such file"):
        train.main(dict(cfg, init_adapters=f"s0={tmp_path}"))
    with pytest.raises(SystemExit, match=r"expected MEMBER=PATH"):
        train.main(dict(cfg, init_adapters=str(donor)))


def test_baseline_single_agent(tiny_dir, tmp_path):
    result = train.main(tiny_cfg(tiny_dir, tmp_path, baseline=True, teachers=0, students=0))
    assert [(m["name"], m["role"]) for m in result["members"]] == [("a0", "both")]
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    check_metrics(rows, 2, ["a0"], ["a0"])
    for row in rows:  # same per-adapter batch as one teacher + one student; the self-match is logged, not rated
        assert row["match/a0/a0/outcome"] in (-1, 0, 1) and row["rating/a0/mu"] == 25.0
    samples = read_jsonl(tmp_path / "samples.jsonl")
    assert {s["teacher"] for s in samples} <= {"a0", None} and {s["student"] for s in samples} <= {"a0", None}


def test_one_teacher_one_student_with_seed_archive(tiny_dir, tmp_path, capsys):
    """1T+1S on an AZR-format seed file: seeds are re-validated (invalid ones dropped and counted), go into both
    code_i and code_o, and the student's batch is topped up with them, so archive problems get attempted."""
    train.main(tiny_cfg(tiny_dir, tmp_path, teachers=1, students=1, seed_archive=os.path.join(FIXTURES, "train_seeds.jsonl")))
    assert "seed archive: 2/3 code_i/code_o and 1/2 code_f seeds valid; 2 dropped" in capsys.readouterr().out
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    check_metrics(rows, 2, ["t0"], ["s0"])
    archive = [json.loads(line) for line in open(tmp_path / "step_000002" / "archive.jsonl")]
    assert sorted(r["task"] for r in archive) == ["code_f", "code_i", "code_i", "code_o", "code_o"]
    programs = {r["problem"]["program"] for r in archive}
    assert not any("1 / 0" in p for p in programs) and any("math.floor" in p for p in programs)
    outputs = {r["problem"].get("output") for r in archive if r["task"] == "code_o"}
    assert outputs == {"6", "3"}  # the sandbox's outputs, not the file's
    for row in rows:  # min_problems 1, solve_samples 2: every task type got 2 attempts at a seed problem
        assert all(row[f"student/s0/solve_rate/{t}"] is not None for t in verify.TASKS)
        assert row["archive/coverage"] > 0
    topups = [s for s in read_jsonl(tmp_path / "samples.jsonl") if s["teacher"] is None]
    assert topups and all(s["problem"]["program"] in programs for s in topups)


# ----------------------------------------------------------------------------- the algorithm

@pytest.mark.parametrize("valid, rate, expected", [
    (False, None, -1.0),    # invalid or badly formatted
    (True, 0.25, 0.75),     # 1 - p inside (0, 1)
    (True, 1.0, 0.0),       # always solved: too easy
    (True, 0.0, -0.3),      # never solved: teacher_reward_unsolved (here -0.3)
])
def test_teacher_reward(valid, rate, expected):
    proposal = {"valid": valid, "solve_rate": rate}
    assert train.teacher_reward(proposal, dict(train.config, teacher_reward_unsolved=-0.3)) == \
        pytest.approx(expected)


def test_a_void_problem_decides_no_match():
    """A problem the student has a void attempt of (verify.grade: a code_i answer the sandbox
    cannot decide) counts in no match of that student's: a teacher that voided its students' right
    answers would win on the wrong ones left; and a pair whose every problem is void is not rated
    (a teacher with no valid problem loses, which a student's void answer would otherwise buy)."""
    cfg = dict(train.config, baseline=False)
    members = [{"name": "t0", "rating": ratings.new(cfg["rating"])},
               {"name": "s0", "rating": ratings.new(cfg["rating"])}]
    right, wrong = {}, {}

    def attempt(problem, correct, void=False):
        return {"proposal": problem, "teacher": "t0", "student": "s0", "correct": correct,
                "void": void}
    # the teacher voided the right answer of its second problem: only the first decides
    attempts = [attempt(right, True), attempt(wrong, False), attempt(wrong, False, True)]
    [played] = train.rate([{"teacher": "t0", "student": "s0"}], attempts, members, cfg)
    assert played["solve_rate"] == 1.0 and played["outcome"] == 1, played
    before = [dict(m["rating"]) for m in members]
    assert train.rate([{"teacher": "t0", "student": "s0"}], attempts[1:], members, cfg) == []
    assert [m["rating"] for m in members] == before
    # another student's void attempt of a problem changes no match of this student's (red team
    # round 18, A03: a long literal voided a problem out of every pair's match)
    other = dict(attempt(wrong, False, True), student="s1")
    [played] = train.rate([{"teacher": "t0", "student": "s0"}], [attempts[0], attempts[1], other],
                          members, cfg)
    assert played["solve_rate"] == 0.5, played


def test_student_reward():
    assert train.student_reward(True, True) == 1.0
    assert train.student_reward(False, True) == -0.5
    assert train.student_reward(False, False) == -1.0


def test_trr_advantages_per_group():
    rewards = [1.0, -0.5, -1.0, 1.0, -1.0, -1.0, 0.3]
    groups = [("s", "code_i")] * 3 + [("s", "code_o")] + [("t", "code_i")] * 2 + [("t", "code_f")]
    a = train.trr_advantages(rewards, groups)
    r = torch.tensor(rewards[:3], dtype=torch.float64)
    assert a[:3] == pytest.approx(((r - r.mean()) / (r.std() + 1e-6)).tolist())
    assert a[3:] == [0.0, 0.0, 0.0, 0.0]  # a group of one, and a group with equal rewards: no signal
    assert sum(a[:3]) == pytest.approx(0.0, abs=1e-9) and a[0] > 0 > a[2]


def test_pg_loss_accumulates_micro_batches():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    full = train.pg_loss(logp, mask, adv, 3)
    assert full.item() == pytest.approx(-(2 * -3.0 + -1 * -0.5) / 3)
    parts = train.pg_loss(logp[:1], mask[:1], adv[:1], 3) + train.pg_loss(logp[1:], mask[1:], adv[1:], 3)
    assert parts.item() == pytest.approx(full.item())
    full.backward()  # d loss / d log pi = -A / total tokens: a positive advantage pushes its tokens up
    assert logp.grad[0, 0].item() == pytest.approx(-2 / 3) and logp.grad[1, 0].item() == pytest.approx(1 / 3)


def test_learning_raises_the_rewarded_answer(tiny_dir):
    """A reward favouring one fixed answer makes it more likely within a few steps (catches a sign flip)."""
    base, tokenizer = population.load_base(tiny_dir)
    cfg = dict(train.config, lora_rank=8, lora_alpha=16, lora_targets="q_proj,v_proj", seed=0, lr=3e-2, micro_batch_tokens=256)
    model, _ = population.init_population(base, tokenizer, cfg, ["student"])
    optimizer = torch.optim.AdamW(population.trainable_params(model, "s0"), lr=cfg["lr"])
    prompt = tokenizer("User: what is 6 * 7?\nAssistant: <think>", add_special_tokens=False)["input_ids"]
    answers = {text: tokenizer(text, add_special_tokens=False)["input_ids"] for text in (" 42", " 41", " 7*6")}
    rewards = {" 42": 1.0, " 41": -0.5, " 7*6": -1.0}

    def logp(text):
        with torch.no_grad():
            lp, mask, _ = population.token_logprobs(model, "s0", [prompt], [answers[text]])
        return (lp * mask).sum().item()

    before = {text: logp(text) for text in answers}
    for _ in range(4):
        sequences = [dict(prompt_ids=prompt, completion_ids=answers[t], reward=rewards[t], role="student",
                          task="code_o") for t in answers for _ in range(2)]
        stats = train.train_member(model, "s0", optimizer, sequences, cfg)
        assert stats["grad_norm"] > 0 and stats["loss"] != 0
    after = {text: logp(text) for text in answers}
    assert after[" 42"] > before[" 42"] + 1.0, (before, after)
    assert after[" 7*6"] < before[" 7*6"]


# ----------------------------------------------------------------------------- command line and bad input

def test_cli_types_bools_and_errors(capsys):
    cfg = train.parse_args(["--teachers", "2", "--lr=0.5", "--baseline", "--model", "tiny", "--resume=auto",
                            "--evolve_every", "-1"])
    assert (cfg["teachers"], cfg["lr"], cfg["baseline"], cfg["model"], cfg["resume"], cfg["evolve_every"]) == \
        (2, 0.5, True, "tiny", "auto", -1)
    assert train.parse_args(["--baseline=False", "--lr", "1"])["baseline"] is False
    assert isinstance(train.parse_args(["--lr", "1"])["lr"], float)
    for argv, message in ((["--nope", "1"], "unrecognized arguments: --nope"),
                          (["--teach", "2"], "unrecognized arguments: --teach"),  # no abbreviations
                          (["--steps", "2.5"], "invalid int value: '2.5'"),
                          (["--baseline=maybe"], "expected true or false")):
        with pytest.raises(SystemExit) as e:
            train.parse_args(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err


def bad_seed_file(tmp_path):
    path = tmp_path / "seeds.jsonl"
    good = open(os.path.join(FIXTURES, "train_seeds.jsonl")).read().splitlines()
    path.write_text("\n".join(good[:2] + ['{"snippet": "def f(a):\\n    return a", "input": '] + good[2:]) + "\n")
    return {"seed_archive": str(path)}


@pytest.mark.parametrize("make, message", [
    (lambda tmp: {"teachers": -1}, r"--teachers -1: must be >= 0"),
    (lambda tmp: {"students": 0}, r"--students 0: must be >= 1"),
    (lambda tmp: {"micro_batch_tokens": 0}, r"--micro_batch_tokens 0: must be >= 1"),
    (lambda tmp: {"engine": "fast"}, r"--engine 'fast': expected one of"),
    (lambda tmp: {"mutations": "gauss_rel,no_such_op"}, r"--mutations 'gauss_rel,no_such_op': expected names of"),
    (lambda tmp: {"evolve_hp": '{"gauss_rel": {"sgima": 1}}'}, r"--evolve_hp .*: gauss_rel: unknown hyperparameter"),
    (lambda tmp: {"model": str(tmp / "no" / "such" / "model")}, r"--model '.*no/such/model': cannot load it"),
    (bad_seed_file, r"--seed_archive '.*seeds.jsonl': .* at line 3; expected JSON lines"),
    (lambda tmp: {"seed_archive": str(tmp / "missing.jsonl")}, r"--seed_archive '.*missing.jsonl': FileNotFoundError"),
    (lambda tmp: {"out_dir": str(tmp / "a_file" / "out")}, r"--out_dir '.*a_file/out' is not writable"),
    (lambda tmp: {"resume": str(tmp)}, r"--resume '.*': not a readable checkpoint folder"),
], ids=["teachers0", "students0", "micro_batch0", "engine", "operator", "evolve_hp", "model_path", "seed_line", "seed_file",
        "out_dir", "resume_not_checkpoint"])
def test_bad_input_stops_at_start_up(tiny_dir, tmp_path, make, message):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(SystemExit, match=message):
        train.main(tiny_cfg(tiny_dir, tmp_path / "out", **make(tmp_path)))
    assert not any(n.startswith("step_") for n in os.listdir(tmp_path / "out")) if (tmp_path / "out").exists() else True


# ----------------------------------------------------------------------------- the swap points

@pytest.mark.parametrize("key", sorted(train.SWAPS))
def test_a_swap_name_with_no_entry_stops_at_start_up(tiny_dir, tmp_path, key):
    """Every swap point's config key is checked against the table the step dispatches through: a
    name with no entry stops the run before anything loads, listing the names there are."""
    names = list(train.SWAPS[key])
    with pytest.raises(SystemExit, match=re.escape(f"--{key} 'no_such': expected one of {names}")):
        train.main(tiny_cfg(tiny_dir, tmp_path, **{key: "no_such"}))
    assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_swap_tables_hold_only_hooks_the_step_calls():
    """A misspelt hook name would be silently skipped by the step: every entry's keys are known ones,
    the required one present, and each value callable; the config's comment names the table."""
    hooks = {"teacher_reward": ({"reward"}, {"check", "start", "measure", "after_students"}),
             "topup": ({"pick"}, {"prepare", "record"})}
    for key, (required, optional) in hooks.items():
        for name, entry in train.SWAPS[key].items():
            assert required <= set(entry) <= required | optional, (key, name, set(entry))
            assert all(callable(f) for f in entry.values())
    for key in ("advantage", "match_rule"):
        assert all(callable(f) for f in train.SWAPS[key].values())
    helps = startup.config_help(train.__file__)
    for key, table in train.SWAPS.items():
        where = {"": train, "rollout.": rollout, "ratings.": ratings}
        names = [prefix + n for prefix, module in where.items() for n, v in vars(module).items()
                 if v is table and n.isupper()]
        listed = all(name in helps[key] for name in table)
        assert listed or any(name in helps[key] for name in names), (key, names, helps[key])


@pytest.mark.parametrize("overrides, message", [
    ({"teachers": 1, "students": 2}, r"the checkpoint has roles .* \(a population of 4\), this run has .* \(a population of 3\)"),
    ({"baseline": True}, r"this run has \['both'\] \(a population of 1\)"),
    ({"model": "tiny"}, r"the checkpoint has model '.*' \(a population of 4\), this run has 'tiny'"),
    ({"lora_rank": 4}, r"the checkpoint has lora_rank 8 .* this run has 4"),
])
def test_resume_from_another_population_or_model_stops(run4, tiny_dir, overrides, message):
    out, _ = run4
    cfg = tiny_cfg(tiny_dir, out, steps=6, evolve_every=2, save_every=2, resume=str(out / "step_000004"))
    with pytest.raises(SystemExit, match=message):
        train.main(dict(cfg, **overrides))


def test_resume_refuses_another_rating_system_before_the_model_loads(run4, tiny_dir, tmp_path, monkeypatch):
    """A checkpoint's ratings are its rating system's own values: resuming them under another system
    stops at start-up, naming both, before the (slow) model loads; a checkpoint from before --rating
    existed is TrueSkill's."""
    out, _ = run4
    shutil.copytree(out / "step_000004", tmp_path / "step_000004")
    state_path = tmp_path / "step_000004" / "state.json"
    state = json.loads(state_path.read_text())
    assert state["config"]["rating"] == "trueskill"
    assert all(m["rating"]["system"] == "trueskill" for m in state["members"])
    state["config"]["rating"] = "glicko"
    state_path.write_text(json.dumps(state))

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the checkpoint's rating system was checked")
    monkeypatch.setattr(population, "load_base", no_model)
    cfg = tiny_cfg(tiny_dir, tmp_path, steps=6, resume=str(tmp_path / "step_000004"))
    message = "the checkpoint's ratings are 'glicko' ratings, this run has --rating 'trueskill'"
    with pytest.raises(SystemExit, match=re.escape(message)):
        train.main(cfg)
    del state["config"]["rating"]
    state_path.write_text(json.dumps(state))
    with pytest.raises(AssertionError, match="the model loaded"):
        train.main(cfg)


# ----------------------------------------------------------------------------- distributed and vLLM

@pytest.mark.slow
def test_torchrun_two_ranks_hold_identical_adapters(tiny_dir, tmp_path):
    """2 processes on gloo. Their metrics cannot equal a 1-process run's: sampling depends on how the requests are
    split over ranks (each rank samples its share with a seed derived from (seed, step, rank), and both engines
    draw a batch's tokens from one stream), so different texts come back and everything downstream differs. The
    invariant that does hold (design §9) is checked instead: after every update and every evolution, every rank holds
    bit-identical adapters (tests/test_gpu_path.py checks the update itself on fixed sequences)."""
    cfg = tiny_cfg(tiny_dir, tmp_path, steps=2, evolve_every=1, save_every=2)
    argv = [f"--{k}={v}" for k, v in cfg.items() if v is not None]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           os.path.join(FIXTURES, "train_ddp_probe.py"), *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"adapter_hashes_rank{r}.json")) for r in (0, 1)]
    # step 0's update, step 1's evolution (at the start of the step), step 1's update
    assert [r["version"] for r in ranks[0]] == [1, 2, 3]
    assert ranks[0] == ranks[1]
    assert ranks[0][0]["hashes"] != ranks[0][-1]["hashes"]  # evolution changed adapters, and they still agree
    check_metrics(read_jsonl(tmp_path / "metrics.jsonl"), 2, ["t0", "t1"], ["s0", "s1"])
    state = checkpoint(tmp_path / "step_000002")[0]
    assert [m["name"] for m in state["members"]] == ["t0", "t1", "s0", "s1"]


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_engine_end_to_end(tiny_dir, tmp_path):
    from conftest import require_vllm
    require_vllm()
    result = train.main(tiny_cfg(tiny_dir, tmp_path, teachers=1, students=1, steps=2, evolve_every=1, engine="vllm"))
    check_metrics(read_jsonl(tmp_path / "metrics.jsonl"), 2, ["t0"], ["s0"])
    assert [m["role"] for m in result["members"]] == ["teacher", "student"]
    assert (tmp_path / "step_000002" / "adapters" / "t0" / "adapter_model.safetensors").exists()


def test_old_archive_without_golds_is_upgraded_on_resume():
    """A checkpoint from before problems carried gold encodings: resume validates them again; each gets
    the gold a fresh validation gives, and one no longer valid is dropped (not graded against nothing)."""
    import archive

    def check(jobs):
        return rollout.run_verify(verify.validate, jobs, 5.0)
    problems, _ = archive.seed_archive(os.path.join(FIXTURES, "train_seeds.jsonl"), check)
    old = {task: [{k: v for k, v in p.items() if k != "gold"} for p in items] for task, items in problems.items()}
    old["code_o"].append(dict(old["code_o"][0], output="'not what it returns'"))
    upgraded = upgrade_archive(old, dict(train.config))
    assert upgraded == problems
    assert upgrade_archive(problems, dict(train.config)) == problems
