"""One step's generation and grading (design §4.2-§4.5): what the teachers and students write and
what the sandbox says about it. The records a step is made of are made here.

Why a file of its own: train.py is the algorithm (matches, rewards, advantages, the update, the
ratings); these phases only fill records — prompts in, batched generation, parsing, batched
sandbox calls, results out — and a reader follows the algorithm without their plumbing. The
top-up samplers (TOPUPS) are here, beside the solve phase that uses them.

The records that flow through a step, their keys written down where they are made:
  proposal  (propose)  teacher, member (= teacher), role "teacher", task, program (code_f: the
            archive program shown, else None), gen, response, parsed; validate adds valid,
            reason, problem; solve adds attempts; train.assign_rewards adds solve_rate, void, reward
            (and what its teacher reward measures: novelty, probe_gain)
  attempt   (solve)    student, member (= student), role "student", teacher, task, problem,
            proposal (None for a top-up), gen, response, answer; grade adds correct, void;
            train.assign_rewards adds reward
  match     (train.plan_step) teacher, student; train.rate adds solve_rate, outcome
  member    (population.init_population) name, role, id, lora_id, rating (ratings.py's), lineage
`generate(requests, purpose)` and `check(fn, jobs)` are train.main's closures that split the work
over ranks and gather it back; the phases never see a rank.
"""
import hashlib

import archive
import population
import variants
import verify


def derive_seed(*parts):
    """A 31-bit seed from (seed, step, rank, purpose): reproducible after a resume, no state."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little") >> 1


def run_verify(fn, jobs, timeout):
    """[(task, item)] -> verify.validate / verify.grade results in order; one batched sandbox call
    per task type."""
    results = [None] * len(jobs)
    for task in verify.TASKS:
        index = [i for i, (t, _) in enumerate(jobs) if t == task]
        if not index:
            continue
        for i, result in zip(index, fn(task, [jobs[i][1] for i in index], timeout=timeout)):
            results[i] = result
    return results


def propose(slots, shown, problems, tokenizer, cfg, generate):
    """Every teacher x task type x propose_per_task in ONE batched generation (design §4.2)."""
    programs = problems["code_i"] + problems["code_o"]
    proposals, requests = [], []
    for (teacher, task), picks in zip(slots, shown):
        program, references = None, []
        if task == "code_f":
            program = archive.problem_core(programs[picks[0]])["program"]
        else:
            references = [archive.problem_core(problems[task][i]) for i in picks]
        prompt = verify.teacher_prompt(task, references, program)
        while references and len(population.text_ids(tokenizer, [prompt])[0]) > \
                cfg["max_prompt_tokens"]:
            # deviation 4: fewer references rather than a truncated prompt
            references.pop()
            prompt = verify.teacher_prompt(task, references, program)
        proposals.append(dict(teacher=teacher, member=teacher, role="teacher", task=task,
                              program=program, gen=None, response=None, parsed=None, attempts=[]))
        requests.append((prompt, teacher))
    for p, out in zip(proposals, generate(requests, "propose")):
        p["gen"], p["response"] = out, out["text"]
        if not out["error"]:
            p["parsed"] = verify.parse_teacher(p["task"], out["text"])
    return proposals


def validate(proposals, step, check):
    """Every parsed proposal in the sandbox, batched (design §4.3). A valid one becomes a problem."""
    jobs = []
    for p in proposals:
        if p["parsed"] is None:
            continue
        item = p["parsed"]
        if p["program"]:
            # code_f: the teacher wrote inputs and a message for the program it was shown
            item = dict(item, program=p["program"])
        jobs.append((p["task"], item))
    results = iter(check(verify.validate, jobs))
    for p in proposals:
        result = {"valid": False, "reason": "format error"}
        if p["parsed"] is not None:
            result = next(results)
        if p["gen"]["error"]:
            result = {"valid": False, "reason": "not generated: " + p["gen"]["error"]}
        p["valid"], p["reason"], p["problem"] = result["valid"], result["reason"], None
        if result["valid"]:
            p["problem"] = dict(archive.as_problem(p["parsed"], result), step=step)
    archive.describe([p["problem"] for p in proposals if p["valid"]])


def archive_valid(problems, proposals, cfg):
    """The valid proposals' problems join the archive (archive_cap per task type, oldest
    evicted)."""
    for task in verify.TASKS:
        made = [p["problem"] for p in proposals if p["valid"] and p["task"] == task]
        archive.add_problems(problems, task, made, cfg["archive_cap"])


# Which archive problems top a student's batch up (cfg["topup"]). pick(problems of one task type,
# step, need, rng, context) -> indices; optional: prepare(problems of one task type, tools, state)
# -> context, once per task type and step; record(attempts, cfg, state) after the rewards.
TOPUPS = {
    # AZR's mix: the newest first, then uniform
    "recent": dict(pick=archive.pick_recent),
    # LEEPS: explore/exploit portfolios over past outcomes (README "Variants")
    "leeps": dict(pick=variants.leeps_pick, prepare=variants.leeps_context,
                  record=variants.leeps_record),
}


def pick_topups(matches, proposals, problems, cfg, rng, tools, state):
    """Rank 0: for each match and task type, archive problems that top the student's batch up to
    min_problems when its teacher made fewer valid ones (design §4.4), by the sampler of TOPUPS
    (AZR's recent-first mix by default). {(match index, task): [index]}"""
    sampler = TOPUPS[cfg["topup"]]
    # what the sampler needs of each task type's archive, once (every match reads the same)
    context = dict.fromkeys(verify.TASKS)
    if "prepare" in sampler:
        for task in verify.TASKS:
            context[task] = sampler["prepare"](problems[task], tools, state)
    topups = {}
    for i, match in enumerate(matches):
        for task in verify.TASKS:
            made = [p for p in proposals if p["valid"] and p["teacher"] == match["teacher"]
                    and p["task"] == task]
            need = cfg["min_problems"] - len(made)
            topups[(i, task)] = sampler["pick"](problems[task], tools["step"], need, rng,
                                                context[task])
    return topups


def solve(matches, proposals, topups, problems, cfg, generate):
    """Each match's student attempts each valid problem of its teacher, and its top-ups,
    solve_samples times, in ONE batched generation (design §4.4)."""
    attempts = []
    for i, match in enumerate(matches):
        for task in verify.TASKS:
            work = []
            for p in proposals:
                if p["valid"] and p["teacher"] == match["teacher"] and p["task"] == task:
                    work.append((p["problem"], p))
            for j in topups[(i, task)]:
                work.append((problems[task][j], None))
            for problem, proposal in work:
                for _ in range(cfg["solve_samples"]):
                    attempts.append(dict(student=match["student"], member=match["student"],
                                         role="student", teacher=match["teacher"], task=task,
                                         problem=problem, proposal=proposal, gen=None,
                                         response=None, answer=None))
    requests = []
    for a in attempts:
        prompt = verify.student_prompt(a["task"], archive.problem_core(a["problem"]))
        requests.append((prompt, a["student"]))
    for a, out in zip(attempts, generate(requests, "solve")):
        a["gen"], a["response"] = out, out["text"]
        if not out["error"]:
            a["answer"] = verify.parse_student(a["task"], out["text"])
        if a["proposal"] is not None:
            a["proposal"]["attempts"].append(a)
    return attempts


def grade(attempts, check):
    """Every well-formed attempt in the sandbox, batched (design §4.5)."""
    jobs = []
    for a in attempts:
        if a["answer"] is not None:
            jobs.append((a["task"], dict(archive.problem_core(a["problem"]), answer=a["answer"])))
    results = iter(check(verify.grade, jobs))
    for a in attempts:
        a["correct"], a["void"] = False, False
        if a["answer"] is not None:
            result = next(results)
            # void: the problem's own answer was not graded correct in this batch, or a code_i
            # answer the sandbox cannot decide (verify.grade)
            a["correct"], a["void"] = bool(result["correct"]), bool(result.get("void"))
