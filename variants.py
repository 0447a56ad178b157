"""Related systems as options of the loop (issue 15; README "Variants"): the parts of OpenSIR's,
SOAR's and LEEPS's methods that replace a part of PopuLoRA's, as entries of the swap tables
(train.TEACHER_REWARDS, rollout.TOPUPS): a reward or sampler and the hooks it needs, each
hook(proposals, matches, cfg, tools, state). The defaults never reach this file.

Why a file of its own: train.py is PopuLoRA as the paper describes it; these are alternatives a
researcher switches on, and reads side by side with the part they replace (train.teacher_reward,
archive.pick_recent).
- OpenSIR (`teacher_reward=opensir`): band_difficulty, novelty, opensir_teacher_reward, novelty_of,
  measure_novelty (hook);
- SOAR (`teacher_reward=soar`): soar_teacher_reward, load_probe, probe_pass_rates; hooks check_soar,
  start_soar, probe_before, probe_gains;
- LEEPS (`topup=leeps`): leeps_pick, weighted_sample, record_outcomes; hooks leeps_context,
  leeps_record.
"""
import json
import os
import time

import torch

import archive
import distributed
import logs
import verify


def initial_state():
    """The variants' state of a run (checkpointed: leeps_stats, probe_rates):
    leeps_stats   LEEPS's portfolio counts {"exploit": [non-trivial, groups], "explore": [...]}
    probe         SOAR's probe problems [(task, problem)] (start_soar)
    probe_rates   SOAR: each student's last probe pass rate, keyed by (name, id): a child is
                  measured afresh"""
    return {"leeps_stats": {"exploit": [0, 0], "explore": [0, 0]}, "probe": [], "probe_rates": {}}


# ----------------------------------------------------------------------------- OpenSIR


def band_difficulty(solve_rate, low, high):
    """OpenSIR's calibrated difficulty [ours: a trapezoid]: 1 for a solve rate inside the learnable
    band [low, high], falling linearly to 0 at p = 0 (never solved) and p = 1 (always solved)."""
    if low <= solve_rate <= high:
        return 1.0
    if solve_rate < low:
        return solve_rate / low
    return (1.0 - solve_rate) / (1.0 - high)


def novelty(vector, others, neighbours):
    """OpenSIR's novelty: the mean cosine distance (1 - cos, halved into [0, 1]) from `vector` [H]
    to its `neighbours` nearest rows of `others` [N, H]; 1 when there is nothing to compare with."""
    if len(others) == 0:
        return 1.0
    cosine = torch.nn.functional.cosine_similarity(others, vector[None, :], dim=1)
    nearest = cosine.topk(min(neighbours, len(others))).values
    return float((1 - nearest).mean() / 2)


def opensir_teacher_reward(proposal, cfg):
    """teacher_reward=opensir: invalid -1; a valid problem pays (1 - w) x band_difficulty + w x its
    novelty against the archive (w = opensir_novelty_weight; measure_novelty measured it)."""
    if not proposal["valid"]:
        return -1.0
    weight = cfg["opensir_novelty_weight"]
    band = band_difficulty(proposal["solve_rate"], cfg["opensir_band_low"],
                           cfg["opensir_band_high"])
    return (1 - weight) * band + weight * proposal["novelty"]


def soar_teacher_reward(proposal, cfg):
    """teacher_reward=soar: invalid -1; every valid problem of a teacher shares its matched
    student's change of pass rate on the hard probe set over this step's update (grounded in
    measured progress, not a learnability proxy; probe_gains measured it)."""
    if not proposal["valid"]:
        return -1.0
    return proposal["probe_gain"]


def novelty_of(proposals, problems, embed, neighbours, step):
    """OpenSIR: proposal index -> novelty of each valid proposal's program against the archive
    problems of its task type from before this step."""
    older = {}
    for task, items in problems.items():
        older[task] = embed([q["program"] for q in items if q["step"] < step])
    novel = {}
    for k, p in enumerate(proposals):
        if p["valid"]:
            vector = embed([p["problem"]["program"]])[0]
            novel[k] = novelty(vector, older[p["task"]], neighbours)
    return novel


def measure_novelty(proposals, matches, cfg, tools, state):
    """OpenSIR's measurement, in the rewards phase: each proposal's "novelty" (novelty_of on rank 0,
    broadcast; 1.0 for an invalid one, whose reward never reads it)."""
    novel = None
    if tools["rank"] == 0:
        novel = novelty_of(proposals, tools["problems"], tools["embed"], cfg["opensir_neighbours"],
                           tools["step"])
    novel = distributed.broadcast_object(novel, 0, tools["world"])
    for k, p in enumerate(proposals):
        p["novelty"] = novel.get(k, 1.0)


# ----------------------------------------------------------------------------- SOAR

def check_soar(cfg):
    """teacher_reward=soar at start-up: separate roles, and a probe file."""
    if cfg["baseline"]:
        raise SystemExit("--teacher_reward soar needs separate teachers and students "
                         "(not --baseline)")
    if not os.path.isfile(cfg["soar_probe"]):
        raise SystemExit(f"--soar_probe {cfg['soar_probe']!r}: not a file (JSON lines of hard "
                         "problems: task + AZR seed fields)")


def start_soar(cfg, tools, state):
    """teacher_reward=soar, once before the model loads: the probe set, validated."""
    state["probe"] = load_probe(cfg["soar_probe"], tools["check"])


def students_of(members):
    return [m for m in members if m["role"] == "student"]


def probe_before(proposals, matches, cfg, tools, state):
    """SOAR's first measurement, in the rewards phase (before any update): the probe pass rate of
    every student not measured since it was made (a new child, or the first step)."""
    students = students_of(tools["members"])
    rates = state["probe_rates"]
    unmeasured = [m["name"] for m in students if (m["name"], m["id"]) not in rates]
    if unmeasured:
        before = probe_pass_rates(unmeasured, state["probe"], tools["generate"], tools["check"])
        for m in students:
            if m["name"] in before:
                rates[(m["name"], m["id"])] = before[m["name"]]


def probe_gains(proposals, matches, cfg, tools, state):
    """SOAR's second measurement, after the students' update (the teachers update after it): every
    student's probe pass rate again; each proposal's "probe_gain" is its teacher's matched
    student's change. Its seconds are logged as time/probe."""
    started = time.time()
    students = students_of(tools["members"])
    rates = state["probe_rates"]
    after = probe_pass_rates([m["name"] for m in students], state["probe"], tools["generate"],
                             tools["check"])
    gains = {}
    for m in students:
        gains[m["name"]] = after[m["name"]] - rates[(m["name"], m["id"])]
        rates[(m["name"], m["id"])] = after[m["name"]]
    tools["times"]["probe"] = time.time() - started
    student_of = {m["teacher"]: m["student"] for m in matches}
    for p in proposals:
        p["probe_gain"] = gains[student_of[p["teacher"]]]


def probe_pass_rates(students, probe, generate, check):
    """SOAR: each student's greedy pass rate on the probe problems [(task, problem)], one batched
    generation and one batched grading for all of them. {student name: rate}"""
    requests = []
    for name in students:
        for task, problem in probe:
            prompt = verify.student_prompt(task, archive.problem_core(problem))
            requests.append((prompt, name))
    outs = generate(requests, "probe", temperature=0.0)
    jobs, owners = [], []
    for k, out in enumerate(outs):
        task, problem = probe[k % len(probe)]
        answer = None if out["error"] else verify.parse_student(task, out["text"])
        if answer is not None:
            jobs.append((task, dict(archive.problem_core(problem), answer=answer)))
            owners.append(k)
    correct = [False] * len(outs)
    for k, result in zip(owners, check(verify.grade, jobs)):
        correct[k] = bool(result["correct"])
    rates = {}
    for n, name in enumerate(students):
        rates[name] = logs.mean(correct[n * len(probe):(n + 1) * len(probe)])
    return rates


def load_probe(path, check):
    """SOAR's probe set: JSON lines {"task", "snippet", "input"} or {"task", "snippet", "inputs",
    "message"}, validated in the sandbox for their golds; invalid rows stop the run."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    jobs = []
    for row in rows:
        item = {"program": row["snippet"]}
        if row["task"] == "code_f":
            item.update(inputs=[str(x) for x in row["inputs"]], message=str(row["message"]))
        else:
            item["input"] = str(row["input"])
        jobs.append((row["task"], item))
    probe = []
    for (task, item), result in zip(jobs, check(verify.validate, jobs)):
        if not result["valid"]:
            raise SystemExit(f"--soar_probe {path}: a {task} problem is not valid "
                             f"({result['reason']})")
        probe.append((task, archive.as_problem(item, result)))
    return probe


# ----------------------------------------------------------------------------- LEEPS

def leeps_context(problems, tools, state):
    """topup=leeps, once per task type and step on rank 0: the archive's embeddings [N, H] (every
    match reads the same ones) and the portfolio counts, leeps_pick's `context`."""
    embeddings = tools["embed"]([p["program"] for p in problems])
    return {"embeddings": embeddings, "stats": state["leeps_stats"]}


def leeps_pick(problems, step, need, rng, context, neighbours=4):
    """LEEPS-style top-up selection (topup=leeps; our reconstruction for code tasks in a
    population): indices of `need` problems older than this step, drawn from two portfolios so that
    few picked groups come back with identical rewards (no learning signal):
    - exploit: problems whose recent top-ups gave rewards that varied; weight = that share;
    - explore: the others; a problem never topped up is weighted by its representation-space
      neighbours' share (the `neighbours` nearest problems with a history, cosine over `embeddings`
      [len(problems), H]; 0.5 with none), one whose history is all-trivial by a small floor.
    The budget splits by each portfolio's recent non-trivial ratio (`stats` {"exploit":
    [non-trivial, groups], "explore": [...]}, Laplace-smoothed). `context` = leeps_context's
    {"embeddings", "stats"}. Deterministic given rng."""
    embeddings, stats = context["embeddings"], context["stats"]
    older = [i for i, p in enumerate(problems) if p["step"] < step]
    if not older or need <= 0:
        return []
    exploit, explore = [], []
    for i in older:
        if any(problems[i].get("history", [])):
            exploit.append(i)
        else:
            explore.append(i)
    seen = [i for i in older if problems[i].get("history")]
    weights = {}
    for i in exploit:
        history = problems[i]["history"]
        weights[i] = max(sum(history) / len(history), 0.05)
    for i in explore:
        if problems[i].get("history"):
            weights[i] = 0.05
        elif seen:
            others = embeddings[seen]
            cosine = torch.nn.functional.cosine_similarity(others, embeddings[i][None, :], dim=1)
            nearest = cosine.topk(min(neighbours, len(seen))).indices.tolist()
            shares = [sum(problems[seen[k]]["history"]) / len(problems[seen[k]]["history"])
                      for k in nearest]
            weights[i] = max(sum(shares) / len(shares), 0.05)
        else:
            weights[i] = 0.5
    rate = {}
    for portfolio in ("exploit", "explore"):
        hits, groups = stats[portfolio]
        rate[portfolio] = (hits + 1) / (groups + 2)
    from_exploit = round(need * rate["exploit"] / (rate["exploit"] + rate["explore"]))
    from_exploit = min(from_exploit, len(exploit))
    picks = weighted_sample(exploit, weights, from_exploit, rng)
    picks += weighted_sample(explore, weights, min(need - len(picks), len(explore)), rng)
    rest = [i for i in exploit if i not in picks]
    picks += weighted_sample(rest, weights, min(need - len(picks), len(rest)), rng)
    # fewer problems than the need: repeats, as pick_recent does
    while len(picks) < need:
        picks.append(rng.choice(older))
    return picks


def weighted_sample(items, weights, count, rng):
    """`count` distinct items drawn with probability proportional to weights[item]."""
    pool, picks = list(items), []
    for _ in range(count):
        k = rng.choices(range(len(pool)), [weights[i] for i in pool])[0]
        picks.append(pool.pop(k))
    return picks


def record_outcomes(attempts, keep, stats):
    """After rewards: each top-up group (one problem's attempts by one student) adds 1 to its
    problem's history if its rewards varied, else 0 (the last `keep` are kept), and counts toward
    the portfolio (exploit if the problem had a non-trivial outcome before) in `stats`."""
    groups = {}
    for a in attempts:
        if a["proposal"] is None and a["reward"] is not None:
            groups.setdefault((id(a["problem"]), a["student"]), []).append(a)
    for group in groups.values():
        problem = group[0]["problem"]
        history = problem.get("history", [])
        portfolio = "exploit" if any(history) else "explore"
        varied = int(len({a["reward"] for a in group}) > 1)
        stats[portfolio][0] += varied
        stats[portfolio][1] += 1
        problem["history"] = (history + [varied])[-keep:]


def leeps_record(attempts, cfg, state):
    """topup=leeps, after the rewards: record_outcomes into the run's portfolio counts."""
    record_outcomes(attempts, cfg["leeps_history"], state["leeps_stats"])
