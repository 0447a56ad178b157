"""The learning check of issue 14: does the RL update raise held-out pass@1 at all? Students train
on a fixed pool of problems with no teachers (train.py --teachers 0: every step each student is
topped up with `min_problems` problems per task type from the seed archive, which never grows);
evaluate.py then scores the base and every saved checkpoint on the held-out tiny benchmark (greedy
pass@1, 30 problems per task type, no program shared with the pool or the warm start).

    python bench/learning_check.py                          # the committed run (~40 min on 2 cores)
    python bench/learning_check.py --steps 4 --save_every 2 --out out/learning_check_quick

Writes OUT/report.md (the exact command, the git commit, the table), OUT/results.json (every
number), OUT/heldout.png, and prints ONE JSON line. Runs and logs go under out/learning_check/.

Settings: LoRA rank 8 on q/k/v/o, temperature 1, 2 students, 8 problems per task type per step, a
pool of 300 programs (900 problems), seed 1337, as in the first run (results/learning_check/
first_run: lr 1e-3, 8 attempts, 192 new tokens, 40 steps: no rise). The second run's changes came
from the diagnosis of the first (diagnosis.md), fixed before it ran: lr 3e-3 (a 4-program
memorisation run learns at 3e-3 and 1e-2, not at 1e-3), 16 attempts per problem (more positives
per group), 64 new tokens (answers are ~15-20 tokens; a longer one is a format error either way,
and the step is ~3x faster), 200 steps, a checkpoint every 25.
"Rose" means: the students' mean held-out pass@1 at the last checkpoint is above the base's, and
for each student an exact two-sided sign test over the problems that changed between the base
and that student (solved now but not before, or the reverse) gives p < 0.05.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tinyworld  # noqa: E402

TASKS = ("code_i", "code_o", "code_f")


def run(command, log_path):
    """Run a command from the repository root, output into log_path; stop with the log's tail."""
    start = time.time()
    with open(log_path, "w") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(log_path) as log:
            tail = log.read()[-3000:]
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); {log_path}:\n{tail}")
    return time.time() - start


def train_command(args, model, pool_path, out_dir):
    flags = dict(model=model, teachers=0, students=args.students, seed_archive=pool_path,
                 out_dir=out_dir, steps=args.steps, min_problems=args.min_problems,
                 solve_samples=args.solve_samples, max_new_tokens=args.max_new_tokens,
                 max_prompt_tokens=2048,
                 lora_rank=8, lora_alpha=16, lora_targets="q_proj,k_proj,v_proj,o_proj", lr=args.lr,
                 temperature=1.0, evolve_every=-1, save_every=args.save_every, engine=args.engine,
                 samples_per_step=4, seed=args.seed)
    command = [sys.executable, "train.py"]
    for key, value in flags.items():
        command += [f"--{key}", str(value)]
    return command


def eval_command(args, ckpt, out_dir):
    return [sys.executable, "evaluate.py", "--ckpt", ckpt, "--benchmarks", "tiny",
            "--engine", args.engine, "--out", out_dir, "--model_cache", args.cache]


def sign_test(gained, lost):
    """Two-sided exact binomial p-value of `gained` vs `lost` changed items under p = 1/2."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def checkpoint_row(result, students):
    """Held-out numbers of one evaluated checkpoint: per student pass@1 (all, per task type), the
    mean / best / weakest, and each student's changed items against the base with the sign test."""
    scores, items = result["scores"], result["items"]["tiny"]
    row = {"step": result["step"], "students": {}}
    for name in students:
        gained = sum(b == 0 and s == 1 for b, s in zip(items["base"], items[name]))
        lost = sum(b == 1 and s == 0 for b, s in zip(items["base"], items[name]))
        row["students"][name] = {"tiny": scores[name]["tiny"], "gained": gained, "lost": lost,
                                 "p_value": round(sign_test(gained, lost), 4),
                                 **{task: scores[name][f"tiny_{task}"] for task in TASKS}}
    values = [row["students"][name]["tiny"] for name in students]
    row.update(mean=round(sum(values) / len(values), 2), best=max(values), weakest=min(values))
    for task in TASKS:
        values = [row["students"][name][task] for name in students]
        row[f"mean_{task}"] = round(sum(values) / len(values), 2)
    return row


def training_curve(metrics_path, students):
    """Per step: the students' mean training solve rate per task type (pool, temperature 1)."""
    curve = []
    with open(metrics_path) as f:
        for line in f:
            row = json.loads(line)
            point = {"step": row["step"]}
            for task in TASKS:
                rates = [row.get(f"student/{n}/solve_rate/{task}") for n in students]
                rates = [r for r in rates if r is not None]
                point[task] = round(sum(rates) / len(rates), 4) if rates else None
            grads = [row.get(f"grad_norm/{n}") for n in students]
            point["grad_norm"] = round(sum(g for g in grads if g is not None) / len(students), 4)
            curve.append(point)
    return curve


def git_state():
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.split("\n")
    return commit, sorted(line[3:] for line in dirty if line.strip())


def plot(path, base, rows, curve):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [0] + [r["step"] for r in rows]
    left.plot(steps, [base["tiny"]] + [r["mean"] for r in rows], "o-", label="students, mean")
    left.fill_between(steps, [base["tiny"]] + [r["weakest"] for r in rows],
                      [base["tiny"]] + [r["best"] for r in rows], alpha=0.2, label="weakest..best")
    left.axhline(base["tiny"], color="gray", linestyle="--", label="base")
    left.set(xlabel="step", ylabel="held-out pass@1 (%)", title="held-out tiny benchmark (greedy)")
    left.legend()
    for task in TASKS:
        right.plot([p["step"] for p in curve], [p[task] for p in curve], label=task)
    right.set(xlabel="step", ylabel="solve rate", title="training pool (temperature 1)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(path, result):
    base, rows, last = result["base"], result["checkpoints"], result["checkpoints"][-1]
    commit = f"Git commit: `{result['git_commit']}`"
    if result["git_dirty"]:
        commit += f" (uncommitted changes in: {', '.join(result['git_dirty'])})"
    lines = ["# Learning check: students on a fixed pool, held-out tiny benchmark", "",
             f"Command: `{result['command']}`", "", commit, "",
             f"Training command: `{' '.join(result['train_command'][1:])}`", "",
             f"Verdict: **{result['verdict']}**", "",
             "Held-out greedy pass@1 (%), 90 problems (30 per task type); gained / lost = problems "
             "a student solves that the base does not / the reverse; p: exact two-sided sign test.",
             "", "| step | row | all | code_i | code_o | code_f | gained | lost | p |",
             "|---" * 9 + "|",
             f"| 0 | base | {base['tiny']:.1f} | " + " | ".join(f"{base[t]:.1f}" for t in TASKS)
             + " | | | |"]
    for row in rows:
        for name, s in row["students"].items():
            lines.append(f"| {row['step']} | {name} | {s['tiny']:.1f} | "
                         + " | ".join(f"{s[t]:.1f}" for t in TASKS)
                         + f" | {s['gained']} | {s['lost']} | {s['p_value']:.3g} |")
        lines.append(f"| {row['step']} | mean | {row['mean']:.1f} | "
                     + " | ".join(f"{row['mean_' + t]:.1f}" for t in TASKS) + " | | | |")
    lines += ["", "The same on 90 problems of the training pool (greedy; the students trained on "
              "them at temperature 1):", "", "| step | base | mean | best | weakest |", "|---" * 5 + "|"]
    for row in result["pool_checkpoints"]:
        lines.append(f"| {row['step']} | {result['pool_base']['tiny']:.1f} | {row['mean']:.1f} | "
                     f"{row['best']:.1f} | {row['weakest']:.1f} |")
    lines += ["", "Training solve rate on the pool (students' mean, temperature 1), every 5 steps:",
              "",
              "| step | code_i | code_o | code_f | grad norm |", "|---|---|---|---|---|"]
    for point in result["training_curve"][::5] + result["training_curve"][-1:]:
        cells = " | ".join("-" if point[t] is None else f"{point[t]:.3f}" for t in TASKS)
        lines.append(f"| {point['step']} | {cells} | {point['grad_norm']:.3g} |")
    lines += ["", f"Last checkpoint (step {last['step']}): mean {last['mean']:.1f} vs base "
              f"{base['tiny']:.1f}; wall {result['wall_s']:.0f} s "
              f"(train {result['train_s']:.0f} s).",
              "", "![held-out pass@1 and training solve rate](heldout.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def pool_split(pool, count):
    """The first `count` pool programs as a benchmark file's rows (tinyworld.problem_rows' format,
    task types in turn): greedy pass@1 on problems the students trained on."""
    programs = []
    # pool_rows writes each program twice: {"snippet", "input"}, {"snippet", "inputs", "message"}
    for pair, induction in zip(pool[0:2 * count:2], pool[1:2 * count:2]):
        programs.append(dict(program=pair["snippet"], input=pair["input"],
                             inputs=induction["inputs"], message=induction["message"]))
    return tinyworld.problem_rows(programs, "pool")


def evaluate_split(args, train_dir, split, data_dir, students):
    """evaluate.py --benchmarks tiny on every checkpoint: the held-out file (data_dir "") or the
    pool split -> (base scores, one checkpoint_row per checkpoint)."""
    checkpoints = sorted(n for n in os.listdir(train_dir) if n.startswith("step_"))
    rows, base = [], None
    for name in checkpoints:
        out_dir = os.path.join(args.runs, f"eval_{split}", name)
        print(f"evaluating {name} on the {split} split", file=sys.stderr, flush=True)
        command = eval_command(args, os.path.join(train_dir, name), out_dir)
        if data_dir:
            command += ["--data_dir", data_dir]
        run(command, os.path.join(args.runs, f"eval_{split}_{name}.log"))
        with open(os.path.join(out_dir, "eval.json")) as f:
            result = json.load(f)
        scores = result["scores"]["base"]
        mine = {"tiny": scores["tiny"], **{task: scores[f"tiny_{task}"] for task in TASKS}}
        # greedy, the same zero-B slot: every evaluation must give the base the same score
        if base is not None and mine != base:
            raise SystemExit(f"the base scored {mine} at {name} but {base} before: not greedy?")
        base = mine
        rows.append(checkpoint_row(result, students))
    return base, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save_every", type=int, default=25)
    parser.add_argument("--students", type=int, default=2)
    parser.add_argument("--min_problems", type=int, default=8, help="problems per task type, step")
    parser.add_argument("--solve_samples", type=int, default=16, help="attempts per problem")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--pool", type=int, default=300, help="programs in the training pool")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--engine", default="hf", choices=("hf", "vllm"))
    parser.add_argument("--skip_train", action="store_true", help="evaluate the existing run again")
    parser.add_argument("--cache", default=os.path.join(ROOT, "out", ".tiny"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "out", "learning_check"))
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "learning_check"))
    args = parser.parse_args()
    start = time.time()
    os.makedirs(args.runs, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    model = tinyworld.warm_base(args.cache, log=lambda *x: print(*x, file=sys.stderr))
    pool = tinyworld.pool_rows(args.pool)
    pool_path = tinyworld.write_jsonl(os.path.join(args.runs, "pool.jsonl"), pool)
    split_dir = os.path.join(args.runs, "pool_split")
    os.makedirs(split_dir, exist_ok=True)
    tinyworld.write_jsonl(os.path.join(split_dir, "tiny.jsonl"), pool_split(pool, 90))
    train_dir = os.path.join(args.runs, "run")
    command = train_command(args, model, pool_path, train_dir)
    train_s = 0.0
    if not args.skip_train:
        if os.path.exists(os.path.join(train_dir, "metrics.jsonl")):
            os.remove(os.path.join(train_dir, "metrics.jsonl"))  # a fresh run, not a resume
        print(f"training: {' '.join(command)}", file=sys.stderr, flush=True)
        train_s = run(command, os.path.join(args.runs, "train.log"))
    students = [f"s{i}" for i in range(args.students)]
    base, rows = evaluate_split(args, train_dir, "heldout", "", students)
    pool_base, pool_rows = evaluate_split(args, train_dir, "pool", split_dir, students)
    last = rows[-1]
    significant = True
    for s in last["students"].values():
        significant = significant and s["p_value"] < 0.05 and s["gained"] > s["lost"]
    if last["mean"] > base["tiny"] and significant:
        verdict = "rose"
    elif last["mean"] > base["tiny"]:
        verdict = "higher, but not significant for every student"
    else:
        verdict = "did not rise"
    commit, dirty = git_state()
    result = {"command": " ".join(["python", "bench/learning_check.py"] + sys.argv[1:]),
              "git_commit": commit, "git_dirty": dirty, "train_command": command,
              "settings": vars(args), "base": base, "checkpoints": rows, "verdict": verdict,
              "pool_base": pool_base, "pool_checkpoints": pool_rows,
              "training_curve": training_curve(os.path.join(train_dir, "metrics.jsonl"), students),
              "train_s": round(train_s, 1), "wall_s": round(time.time() - start, 1)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(os.path.join(args.out, "heldout.png"), base, rows, result["training_curve"])
    report(os.path.join(args.out, "report.md"), result)
    print(json.dumps({"base": base, "last": last, "pool_base": pool_base, "pool_last": pool_rows[-1],
                      "verdict": verdict, "wall_s": result["wall_s"]}))


if __name__ == "__main__":
    main()
