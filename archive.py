"""The problem archive (design §4.3, §10): the shared pool of valid problems per task type.

Why a file of its own: train.py runs the step; the archive is the state that outlives a step —
where problems come from at start-up (AZR's seed files), what a problem record holds, how it is
placed in the 4096-cell coverage map, and which problems top up a student's batch.

An archive is a plain dict {task type: [problem, ...]}, oldest first. A problem is the teacher's
proposal completed by the verifier:
    program    the normalised program (entry function renamed to f)
    input      code_i / code_o: the input text          inputs   code_f: 10 input texts
    output     code_i / code_o: the output's repr       outputs  code_f: 10 output reprs
    message    code_f: the teacher's hint to the student
    gold       the canonical encoding(s) grading compares against (verify.py), never shown
    step       the step that made it (-1 for seeds)
    complexity {ast_depth, cyclomatic, loc, variables} (verify.complexity)
    cell       its cell of the coverage map
    history    topup=leeps: recent top-up outcomes, 1 = its attempts' rewards varied (a learning
               signal), 0 = they were all equal
    attempts   student attempts graded on it so far (matched and top-up; record_solves)
    correct    how many of them were right: correct / attempts is its solve rate (figure 8)
"""
import functools
import json

import torch

import verify

# AZR's minimal seed program (docs/azr.md §5.2) and its code_f seed, with 4 inputs of ours (verify
# wants 10)
IDENTITY = "def f(a):\n    return a"
IDENTITY_F = dict(program=IDENTITY, message="Write a function that returns whatever you input",
                  inputs=['"Hello world"', "1", "dict(a=1, b=2)", "(1.1, 1.2, 1.3)",
                          '"[[1, 0, 0], [0, 0, 0], [0, 0, 0]]"', "1001101100010001",
                          "[3, 1, 2]", "'abc'", "{'x': [1, 2]}", "None"])
# the coverage box: each complexity descriptor is divided by its maximum here and clipped to 1
BOX = {"ast_depth": 20, "cyclomatic": 20, "loc": 60, "variables": 30}
# bookkeeping keys of a problem that neither the verifier nor the prompts read
BOOKKEEPING = ("step", "cell", "complexity", "history", "attempts", "correct")


def read_seed_files(paths):
    """AZR's seed JSONL files (comma-separated paths) -> (pairs, induction): code_i/code_o seeds
    {program, input} and code_f seeds {program, inputs, message}. A broken line stops the run naming
    its file and number."""
    pairs, induction = [], []
    for path in [p.strip() for p in paths.split(",") if p.strip()]:
        number = 0
        try:
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    row = json.loads(line)
                    # AZR's snippets already hold their imports
                    program = row.get("snippet") or row["program"]
                    if "inputs" in row:
                        inputs = [str(x) for x in row["inputs"]]
                        message = str(row["message"])
                        induction.append(dict(program=program, inputs=inputs, message=message))
                    else:
                        pairs.append(dict(program=program, input=str(row["input"])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise SystemExit(f"--seed_archive {path!r}: {e!r} at line {number}; expected JSON "
                             "lines with snippet + input, or snippet + inputs + message (AZR's "
                             "seed format)")
    return pairs, induction


def seed_archive(seed_files, check, need_programs=True):
    """The start-up archive: AZR's identity program, or the seed files' problems, re-validated in
    the sandbox (check: [(task, item)] -> verify.validate results); invalid ones are dropped and
    counted. A code_i/code_o seed goes into both archives. need_programs=False (students only, no
    teacher builds on the seeds) accepts an archive of code_f problems alone. Returns (archive, one
    line saying what was kept)."""
    pairs, induction = [dict(program=IDENTITY, input='"Hello world"')], [dict(IDENTITY_F)]
    if seed_files:
        pairs, induction = read_seed_files(seed_files)
    jobs = [("code_o", p) for p in pairs] + [("code_f", p) for p in induction]
    archive = {task: [] for task in verify.TASKS}
    for (task, seed), result in zip(jobs, check(jobs)):
        if not result["valid"]:
            continue
        for target in (("code_i", "code_o") if task == "code_o" else ("code_f",)):
            archive[target].append(dict(as_problem(seed, result), step=-1))
    # the cap applies from the first step on
    seeds = []
    for problems in archive.values():
        for p in problems:
            seeds.append(p)
    describe(seeds)
    kept = len(archive["code_o"]) + len(archive["code_f"])
    line = (f"seed archive: {len(archive['code_o'])}/{len(pairs)} code_i/code_o and "
            f"{len(archive['code_f'])}/{len(induction)} code_f seeds valid; "
            f"{len(jobs) - kept} dropped")
    if need_programs and not archive["code_o"]:
        raise SystemExit("no valid code_i/code_o seed program: teachers would have nothing to "
                         "build on")
    return archive, line


def as_problem(proposal, result):
    """A proposal completed by verify.validate's result: its normalised program, its output(s)
    (repr strings, for the prompts) and the gold encoding(s) grading compares against (every result
    key but the verdict)."""
    verdict = ("valid", "reason")
    return dict(proposal, **{k: v for k, v in result.items() if k not in verdict})


def problem_core(problem):
    """What the verifier and the prompts read of a problem (no bookkeeping keys)."""
    return {k: v for k, v in problem.items() if k not in BOOKKEEPING}


def add_problems(archive, task, problems, cap):
    """Append to the task's archive; past `cap`, the oldest are evicted (design §4.3 [ours])."""
    archive[task] += problems
    del archive[task][:max(0, len(archive[task]) - cap)]


def pick_recent(problems, step, need, rng, context=None):
    """Indices of `need` top-up problems, like AZR's `max_new` mix: those added at the previous step
    first (the seeds count as that at step 0), then uniform draws over everything older than this
    step. (`context`: what a sampler of train.TOPUPS may prepare per step; this one needs none.)"""
    older = [i for i, p in enumerate(problems) if p["step"] < step]
    if not older:
        return []
    recent = [i for i in older if problems[i]["step"] >= step - 1]
    picks = rng.sample(recent, max(0, min(need, len(recent))))
    for _ in range(need - len(picks)):
        picks.append(rng.choice(older))
    return picks


@functools.lru_cache(maxsize=1)
def cvt_centroids(cells=4096, iterations=5):
    """The fixed 4096-cell CVT of the unit box over the 4 complexity descriptors (design §10):
    Lloyd's k-means over uniform samples with a fixed seed, once per process (seconds,
    deterministic)."""
    samples = torch.rand(cells * 4, len(BOX), generator=torch.Generator().manual_seed(0))
    centroids = samples[:cells].clone()
    for _ in range(iterations):
        per_chunk = [torch.cdist(chunk, centroids).argmin(1) for chunk in samples.split(4096)]
        nearest = torch.cat(per_chunk)
        counts = torch.bincount(nearest, minlength=cells)[:, None]
        sums = torch.zeros_like(centroids).index_add_(0, nearest, samples)
        centroids = torch.where(counts > 0, sums / counts.clamp(min=1), centroids)
    return centroids


def describe(problems):
    """Store in each new problem its complexity descriptors, its coverage cell and its solve
    statistics (none yet)."""
    for p in problems:
        p["complexity"] = verify.complexity(p["program"])
        point = torch.tensor([[min(p["complexity"][k] / top, 1.0) for k, top in BOX.items()]])
        p["cell"] = int(torch.cdist(point, cvt_centroids()).argmin())
        p.setdefault("attempts", 0)
        p.setdefault("correct", 0)


def record_solves(attempts):
    """Every graded attempt counts on its problem (an archive record: matched problems joined the
    archive at validation, top-ups come from it). One the engine could not generate is not
    graded. A problem of an archive saved before these counts starts from 0."""
    for a in attempts:
        if a["gen"]["error"]:
            continue
        problem = a["problem"]
        problem["attempts"] = problem.get("attempts", 0) + 1
        problem["correct"] = problem.get("correct", 0) + int(a["correct"])


def coverage(archive):
    """Share of the coverage map's cells that hold at least one archive problem."""
    cells = set()
    for problems in archive.values():
        for p in problems:
            cells.add(p["cell"])
    return len(cells) / len(cvt_centroids())
