"""What a step leaves behind (design §10): the metrics.jsonl row, samples.jsonl, the console line,
config.json and, if asked for, Weights & Biases.

Why a file of its own: train.py is the algorithm; this turns a finished step's records into
numbers and text, the same way every step, and is what report.py and wandb read.
"""
import json
import os
import subprocess
import time

import archive
import ratings
import verify


def mean(values):
    """The mean of the values that are not None, or None (null in JSON) when there are none. The one
    mean of the project: train.py, evaluate.py and report.py use it."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    return sum(values) / len(values)


def print0(*args):
    """print on rank 0 only (torchrun sets RANK; plain python is rank 0)."""
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args, flush=True)


def teacher_metrics(prefix, proposals):
    """teacher/<prefix>... keys over these proposals. A response the engine could not generate is
    neither a format error nor rewarded (counted in not_generated)."""
    generated = [p for p in proposals if not p["gen"]["error"]]
    solve_rates = [p["solve_rate"] for p in proposals if p["valid"] and p["solve_rate"] is not None]
    row = {
        f"teacher/{prefix}format_rate": mean(p["parsed"] is not None for p in generated),
        f"teacher/{prefix}reward": mean(p["reward"] for p in generated),
        f"teacher/{prefix}not_generated": len(proposals) - len(generated),
        # difficulty = 1 - the matched student's solve rate, over valid problems
        f"teacher/{prefix}difficulty": mean(1 - rate for rate in solve_rates),
    }
    for task in verify.TASKS:
        key = f"teacher/{prefix}valid_rate/{task}"
        row[key] = mean(p["valid"] for p in proposals if p["task"] == task)
    return row


def student_metrics(prefix, attempts):
    """student/<prefix>... keys over these attempts. solve_rate counts every attempt; the matched
    teacher's problems (matched_solve_rate: what the oscillation figures 3 and 11 plot) and the
    archive top-ups (topup_solve_rate) are also logged apart."""
    generated = [a for a in attempts if not a["gen"]["error"]]
    row = {
        f"student/{prefix}format_rate": mean(a["answer"] is not None for a in generated),
        f"student/{prefix}reward": mean(a["reward"] for a in generated),
    }
    for task in verify.TASKS:
        mine = [a for a in attempts if a["task"] == task]
        matched = [a["correct"] for a in mine if a["proposal"] is not None]
        topups = [a["correct"] for a in mine if a["proposal"] is None]
        row[f"student/{prefix}solve_rate/{task}"] = mean(a["correct"] for a in mine)
        row[f"student/{prefix}matched_solve_rate/{task}"] = mean(matched)
        row[f"student/{prefix}topup_solve_rate/{task}"] = mean(topups)
    return row


def logged_rating(row, name):
    """A member's rating as step_metrics logged it ({field: value} of rating/<name>/<field>), for
    ratings.band; {} if the row has none."""
    prefix = f"rating/{name}/"
    return {k[len(prefix):]: v for k, v in row.items() if k.startswith(prefix)}


def step_metrics(step, members, proposals, attempts, matches, problems, stats, children):
    """The metrics.jsonl row of design §10: aggregate and per member; None = nothing this step.
    `problems` is the archive; `children` the evolution records of this step."""
    row = {"step": step}
    # the aggregate over the whole population first, then one block per member
    row.update(teacher_metrics("", proposals))
    row.update(student_metrics("", attempts))
    for m in members:
        name = m["name"]
        if m["role"] in ("teacher", "both"):
            row.update(teacher_metrics(f"{name}/", [p for p in proposals if p["teacher"] == name]))
        if m["role"] in ("student", "both"):
            row.update(student_metrics(f"{name}/", [a for a in attempts if a["student"] == name]))
        for field, value in ratings.flat(m["rating"]).items():
            row[f"rating/{name}/{field}"] = value
        row[f"member/{name}/id"] = m["id"]
        row[f"loss/{name}"] = stats[name]["loss"]
        row[f"grad_norm/{name}"] = stats[name]["grad_norm"]
        # nats per trained token (deviation 5), the member's roles together
        tokens = sum(stats[name]["tokens"].values())
        row[f"entropy/{name}"] = None
        if tokens:
            row[f"entropy/{name}"] = sum(stats[name]["entropy"].values()) / tokens
    for match in matches:
        key = f"match/{match['teacher']}/{match['student']}"
        row[f"{key}/solve_rate"] = match["solve_rate"]
        row[f"{key}/outcome"] = match["outcome"]
    # programs the teachers wrote: a code_f teacher is shown its program and writes only inputs
    written = [p for p in proposals if p["valid"] and p["task"] != "code_f"]
    for k in archive.BOX:
        row[f"complexity/{k}"] = mean(p["problem"]["complexity"][k] for p in written)
    for task in verify.TASKS:
        row[f"archive/size/{task}"] = len(problems[task])
    row["archive/coverage"] = archive.coverage(problems)
    for role, items in (("teacher", proposals), ("student", attempts)):
        row[f"response_len/{role}"] = mean(len(x["gen"]["completion_ids"]) for x in items)
        tokens = sum(s["tokens"][role] for s in stats.values())
        entropy = sum(s["entropy"][role] for s in stats.values())
        row[f"entropy/{role}"] = entropy / tokens if tokens else None
    row.update(zero_variance(attempts))
    for child in children:
        row[f"evolve/{child['name']}/parents"] = child["parent_names"]
        row[f"evolve/{child['name']}/operator"] = child["operator"]
    return row



def step_row(step, members, proposals, attempts, matches, problems, stats, children, times,
             seconds):
    """The whole metrics.jsonl row of a step: step_metrics, the seconds of each phase (`times`) and
    of the step, the rollout-trainer mismatch per member (vLLM engine only; None with hf or
    nothing trained) and the generation throughput."""
    row = step_metrics(step, members, proposals, attempts, matches, problems, stats, children)
    row.update({f"time/{k}": v for k, v in times.items()})
    # problems whose own answer was not graded correct at grading: no reward either way
    row["void_problems"] = sum(bool(p.get("void")) for p in proposals)
    for name, member_stats in stats.items():
        row[f"mismatch/{name}/mean"] = member_stats["mismatch"]["mean"]
        row[f"mismatch/{name}/max"] = member_stats["mismatch"]["max"]
    row["time/step"] = seconds
    generated = sum(len(x["gen"]["completion_ids"]) for x in proposals + attempts)
    row["tokens_per_s"] = generated / max(times["generate"], 1e-9)
    return row


def write_step(paths, wandb_run, row, samples):
    """Rank 0: the step's row to metrics.jsonl (and wandb), its samples to samples.jsonl."""
    write_lines(paths["metrics"], [row])
    write_lines(paths["samples"], samples)
    log_wandb(wandb_run, row, row["step"])

def zero_variance(attempts):
    """Share of attempt groups (one problem's attempts by one student) whose rewards were all equal:
    no learning signal (TRR++ normalises within (member, role, task) groups, so such a group only
    moves the others' baseline). Over all groups, and over top-up groups alone (what topup=leeps
    chooses)."""
    groups = {}
    for a in attempts:
        if a["reward"] is not None:
            key = (id(a["problem"]), a["student"])
            groups.setdefault(key, {"topup": a["proposal"] is None, "rewards": set()})
            groups[key]["rewards"].add(a["reward"])
    every = [len(g["rewards"]) == 1 for g in groups.values()]
    topups = [len(g["rewards"]) == 1 for g in groups.values() if g["topup"]]
    return {"groups/zero_variance": mean(every), "topup/zero_variance": mean(topups)}


def sample_record(step, proposal, attempt):
    """One samples.jsonl line: a whole problem and one answer to it (either side may be None)."""
    source = proposal or attempt
    problem = source["problem"]
    return {
        "step": step,
        "teacher": proposal and proposal["teacher"],
        "task": source["task"],
        "valid": proposal and proposal["valid"],
        "teacher_response": proposal and proposal["response"],
        "reason": proposal and proposal["reason"],
        "problem": problem and archive.problem_core(problem),
        "student": attempt and attempt["student"],
        "student_response": attempt and attempt["response"],
        "answer": attempt and attempt["answer"],
        "correct": attempt and attempt["correct"],
    }


def step_samples(step, proposals, attempts, count):
    """A few whole problems with one answer each, valid ones first, plus one top-up problem (so a
    step without valid proposals still shows student answers): RL bugs show in the text."""
    records = []
    for p in sorted(proposals, key=lambda p: not p["valid"])[:count]:
        first_attempt = p["attempts"][0] if p["attempts"] else None
        records.append(sample_record(step, p, first_attempt))
    topups = [a for a in attempts if a["proposal"] is None]
    for a in topups[:min(count, 1)]:
        records.append(sample_record(step, None, a))
    return records


def write_lines(path, rows):
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def start_logs(cfg, paths, start, world, resume):
    """Rank 0: drop the metrics/samples lines after the checkpoint a resumed run continues from,
    save the resolved config and the git commit, open wandb if asked for (lazy import). Returns the
    wandb run or None."""
    for path in paths.values():
        kept = []
        if os.path.exists(path):
            for line in open(path):
                if line.endswith("\n") and json.loads(line)["step"] < start:
                    kept.append(line)
        with open(path + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(path + ".tmp", path)
    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here)
    saved = {"config": cfg, "world": world, "resumed_from": resume,
             "git_commit": commit.stdout.strip()}
    with open(os.path.join(cfg["out_dir"], "config.json"), "w") as f:
        json.dump(saved, f, indent=1)
    if not cfg["wandb_project"]:
        return None
    import wandb
    return wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run"] or None, config=cfg,
                      dir=cfg["out_dir"], resume="allow")


def log_wandb(run, row, step):
    """The metrics row's numbers to wandb (lists such as evolve parents stay in metrics.jsonl)."""
    if run is not None:
        run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)


def step_line(step, steps, row, started, first_step):
    """The per-step console line: fixed fields, then an ETA from this process's mean step time."""
    fields = [f"step {step + 1}/{steps}"]
    for key in ("teacher/reward", "student/reward", "archive/coverage", "time/step"):
        if row.get(key) is not None:
            fields.append(f"{key} {row[key]:.4g}")
    done = step + 1 - first_step
    left = int((time.time() - started) / done * (steps - step - 1))
    fields.append(f"eta {left // 3600}h{left % 3600 // 60:02d}m")
    return " | ".join(fields)
