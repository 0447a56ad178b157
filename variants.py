"""Related systems as options of the loop (issue 15; README "Variants"): the parts of OpenSIR's,
SOAR's and LEEPS's methods that replace a part of PopuLoRA's, as small functions train.py calls when
the config asks for them. The defaults never reach this file.

Why a file of its own: train.py is PopuLoRA as the paper describes it; these are alternatives a
researcher switches on, and reads side by side with the part they replace (train.teacher_reward,
archive.pick_recent).
- OpenSIR (`teacher_reward=opensir`): band_difficulty, novelty, opensir_teacher_reward, novelty_of;
- SOAR (`teacher_reward=soar`): soar_teacher_reward, load_probe, probe_pass_rates;
- LEEPS (`topup=leeps`): leeps_pick, weighted_sample, record_outcomes.
"""
import json

import torch

import archive
import logs
import verify


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


def opensir_teacher_reward(valid, solve_rate, novel, cfg):
    """teacher_reward=opensir: invalid -1; a valid problem pays (1 - w) x band_difficulty + w x its
    novelty against the archive (w = opensir_novelty_weight)."""
    if not valid:
        return -1.0
    weight = cfg["opensir_novelty_weight"]
    band = band_difficulty(solve_rate, cfg["opensir_band_low"], cfg["opensir_band_high"])
    return (1 - weight) * band + weight * novel


def soar_teacher_reward(valid, improvement):
    """teacher_reward=soar: invalid -1; every valid problem of a teacher shares its matched
    student's change of pass rate on the hard probe set over this step's update (grounded in
    measured progress, not a learnability proxy)."""
    if not valid:
        return -1.0
    return improvement


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


def leeps_pick(problems, step, need, rng, embeddings, stats, neighbours=4):
    """LEEPS-style top-up selection (topup=leeps; our reconstruction for code tasks in a
    population): indices of `need` problems older than this step, drawn from two portfolios so that
    few picked groups come back with identical rewards (no learning signal):
    - exploit: problems whose recent top-ups gave rewards that varied; weight = that share;
    - explore: the others; a problem never topped up is weighted by its representation-space
      neighbours' share (the `neighbours` nearest problems with a history, cosine over `embeddings`
      [len(problems), H]; 0.5 with none), one whose history is all-trivial by a small floor.
    The budget splits by each portfolio's recent non-trivial ratio (`stats` {"exploit":
    [non-trivial, groups], "explore": [...]}, Laplace-smoothed). Deterministic given rng."""
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
