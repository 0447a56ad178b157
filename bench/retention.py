"""Operator retention (issue 14; the paper's figures 6, 16 and 17): does a child made by each
mutation and crossover recover its parent's performance when retrained with the parent's recipe?

    python bench/retention.py                                    # the committed run
    python bench/retention.py --snapshot 3 --retrain 2 --out out/retention_quick --runs out/rq

Two parents train as lone students on fixed pools from the warm tiny base (train.py --teachers 0):
parent A on the code_i and code_o problems of `--pool` programs, parent B on the code_f problems
of `--pool` other programs (the second parent, trained on a different task type, that crossovers
take). At step `--snapshot`, one child per operator: every mutation of A, and every crossover of
(A, B) with A as the fitter parent, through evolve.apply_operator (its fail-safe included, as in
train.py), plus the controls copy_parent (M0, X0) and linear_0_5 (XL). Each child then retrains
for `--retrain` steps from A's checkpoint (train.py --resume A/step_S --init_adapters s0=child):
the same problems and sampling seeds as A's own continuation, a fresh AdamW state (the copy_parent
controls measure what the reset alone costs).

Measured on A's pool, per step: the solve rate at temperature 1 (code_i and code_o attempts
together). The problems of a step are the same for A's continuation and every child, and their
difficulty swings the rate by +-0.08 from step to step, so every measure is PAIRED: d(t) = A's
rate - the child's at step t. Start gap = the mean of d over the first `--window` retraining steps
(S .. S+window-1). Recovered at = the first k such that the mean of d over steps S+k ..
S+k+window-1 is at most `--tolerance`; None if no such window fits in the run. Two references, not
operators, run the same way: R0 = the base model (every lora_B zero: what A's training added is
gone) and RB = parent B's own adapter (what the "other" parent brings to A's problems).
(A first version measured the gap at step S alone and unpaired moving averages with tolerance
0.05: every child but one came out "recovered at 0". These definitions replaced it after that
run; the curves are the same runs.)

Writes OUT/report.md, OUT/results.json, OUT/mutations.png, OUT/crossovers.png; prints one JSON
line. --reuse skips a child whose run already reached the last step (to redo the summary only).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import evolve  # noqa: E402
import tinyworld  # noqa: E402
from learning_check import run  # noqa: E402  (bench/ is on sys.path: the script's folder)

# evolve.py's labels (the repository's one numbering; the paper's figures 16 and 17 use the same
# style, but which of its operators each of ours matches is unknown): controls first
MUTATIONS = [(label, name) for name, label in evolve.MUTATION_LABELS.items()]
CROSSOVERS = [(label, name) for name, label in evolve.CROSSOVER_LABELS.items()]
REFERENCES = [("R0", "base"), ("RB", "parent_b")]


def train_command(args, model, out_dir, steps, pool=None, resume=None, child=None):
    """The parents' recipe; a child resumes parent A's checkpoint with its own adapter."""
    flags = dict(model=model, teachers=0, students=1, out_dir=out_dir, steps=steps,
                 min_problems=args.min_problems, solve_samples=args.solve_samples,
                 max_new_tokens=64, max_prompt_tokens=2048, lora_rank=8, lora_alpha=16,
                 lora_targets="q_proj,k_proj,v_proj,o_proj", lr=args.lr, temperature=1.0,
                 evolve_every=-1, save_every=args.snapshot, engine="hf", samples_per_step=2,
                 seed=args.seed)
    if pool:
        flags["seed_archive"] = pool
    if resume:
        flags.update(resume=resume, init_adapters=f"s0={child}")
    command = [sys.executable, "train.py"]
    for key, value in flags.items():
        command += [f"--{key}", str(value)]
    return command


def finished(out_dir, steps):
    """True when out_dir's run logged its last step (steps - 1)."""
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        lines = f.read().splitlines()
    return bool(lines) and json.loads(lines[-1])["step"] == int(steps) - 1


def solve_curve(metrics_path):
    """{step: solve rate over all of the student's attempts that step} (tasks weighted by their
    attempts: every task type present has min_problems x solve_samples of them)."""
    curve = {}
    with open(metrics_path) as f:
        for line in f:
            row = json.loads(line)
            rates = [row.get(f"student/s0/solve_rate/{t}") for t in ("code_i", "code_o", "code_f")]
            rates = [r for r in rates if r is not None]
            curve[row["step"]] = sum(rates) / len(rates)
    return curve


def moving_average(curve, step, window, first):
    steps = [s for s in range(max(first, step - window + 1), step + 1) if s in curve]
    return sum(curve[s] for s in steps) / len(steps)


def paired_gap(parent, child, first, window):
    """Mean of parent - child over steps first .. first + window - 1 (same problems each step)."""
    steps = range(first, first + window)
    return sum(parent[s] - child[s] for s in steps) / window


def retention(parent, child, snapshot, retrain, window, tolerance):
    """(start gap, recovered at: retraining steps, or None) of one child against the parent."""
    window = min(window, retrain)
    gap = paired_gap(parent, child, snapshot, window)
    for k in range(retrain - window + 1):
        if paired_gap(parent, child, snapshot + k, window) <= tolerance:
            return gap, k
    return gap, None


def make_children(args, parent_a, parent_b, children_dir):
    """One child per operator, saved as a safetensors file: {label: (path, info)}."""
    fitter, other = load_file(parent_a), load_file(parent_b)
    made = {}
    # the references: the base (A with every lora_B zero: B·A = 0) and parent B's own adapter
    base = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in fitter.items()}
    for (label, name), adapter in zip(REFERENCES, (base, other)):
        path = os.path.join(children_dir, f"{label}_{name}.safetensors")
        save_file({key: value.contiguous() for key, value in adapter.items()}, path)
        info = dict(fallback=False, reason="", delta_norm=evolve.delta_norm(adapter),
                    parent_delta_norms=[evolve.delta_norm(fitter)])
        made[label] = (name, "reference", path, info)
    for kind, table in (("mutation", MUTATIONS), ("crossover", CROSSOVERS)):
        for k, (label, name) in enumerate(table):
            seed = args.seed * 100 + k + (50 if kind == "crossover" else 0)
            generator = torch.Generator().manual_seed(seed)
            parents = [fitter] if kind == "mutation" else [fitter, other]
            child, info = evolve.apply_operator(name, kind, parents, generator)
            path = os.path.join(children_dir, f"{label}_{name}.safetensors")
            save_file({key: value.contiguous() for key, value in child.items()}, path)
            made[label] = (name, kind, path, info)
    return made


def plot(path, title, labels, parent, children, results, snapshot, retrain, base):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 4
    rows = (len(labels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), sharey=True, squeeze=False)
    steps = sorted(s for s in parent if s < snapshot + retrain)
    for ax, label in zip(axes.flat, labels):
        ax.plot(steps, [parent[s] for s in steps], color="gray", label="parent A")
        ref = sorted(base)
        ax.plot(ref, [base[s] for s in ref], color="tab:blue", linestyle=":", linewidth=1,
                label="base (R0)")
        mine = sorted(children[label])
        ax.plot(mine, [children[label][s] for s in mine], color="tab:red", label="child")
        ax.axvline(snapshot, color="black", linestyle=":", linewidth=1)
        r = results[label]
        recovered = "never" if r["recovered_at"] is None else r["recovered_at"]
        ax.set_title(f"{label} {r['operator']}: gap {r['start_gap']:+.2f}, back at {recovered}",
                     fontsize=9)
    for ax in axes.flat[len(labels):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("solve rate (pool A)")
    for ax in axes[-1]:
        ax.set_xlabel("global step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(path, result):
    lines = ["# Operator retention: children retrained with their parent's recipe", "",
             f"Command: `{result['command']}`", "", f"Git commit: `{result['git_commit']}`", "",
             f"Parent A command: `{' '.join(result['parent_a_command'][1:])}`", "",
             f"Settings: snapshot at step {result['snapshot']}, {result['retrain']} retraining "
             f"steps, paired windows of {result['window']} steps, tolerance "
             f"{result['tolerance']} (solve rate; the definitions are in bench/retention.py's "
             f"docstring). Parent A's solve rate over the {result['window']} steps before the "
             f"snapshot: {result['parent_at_snapshot']:.3f} (step 0: "
             f"{result['parent_at_start']:.3f}).", "",
             "| label | operator | kind | fail-safe | start gap | recovered at (steps) | "
             "child, last 5 steps | parent, last 5 steps |", "|---" * 8 + "|"]
    for label, r in result["children"].items():
        recovered = "not within the run" if r["recovered_at"] is None else str(r["recovered_at"])
        fallback = "fell back to a copy" if r["fallback"] else ""
        lines.append(f"| {label} | {r['operator']} | {r['kind']} | {fallback} | "
                     f"{r['start_gap']:+.3f} | {recovered} | {r['child_last']:.3f} | "
                     f"{r['parent_last']:.3f} |")
    lines += ["", f"Wall time {result['wall_s']:.0f} s.", "", "![mutations](mutations.png)", "",
              "![crossovers](crossovers.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--snapshot", type=int, default=30, help="the parents' training steps")
    parser.add_argument("--retrain", type=int, default=20, help="each child's retraining steps")
    parser.add_argument("--pool", type=int, default=12, help="programs in each parent's pool")
    parser.add_argument("--min_problems", type=int, default=8, help="problems per task type, step")
    parser.add_argument("--solve_samples", type=int, default=16, help="attempts per problem")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--reuse", action="store_true", help="keep finished child runs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache", default=os.path.join(ROOT, "out", ".tiny"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "out", "retention"))
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "retention"))
    args = parser.parse_args()
    start = time.time()
    # the commit that runs, read before the (long) runs
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    for folder in (args.runs, args.out, os.path.join(args.runs, "children")):
        os.makedirs(folder, exist_ok=True)
    model = tinyworld.warm_base(args.cache, log=lambda *x: print(*x, file=sys.stderr))
    rows = tinyworld.pool_rows(2 * args.pool)
    # A: the first programs' code_i/code_o rows; B: the other programs' code_f rows
    pool_a = [r for r in rows[:2 * args.pool] if "input" in r]
    pool_b = [r for r in rows[2 * args.pool:] if "inputs" in r]
    paths = {}
    for name, pool in (("a", pool_a), ("b", pool_b)):
        paths[name] = tinyworld.write_jsonl(os.path.join(args.runs, f"pool_{name}.jsonl"), pool)
    end = args.snapshot + args.retrain
    parent_dir = {name: os.path.join(args.runs, f"parent_{name}") for name in ("a", "b")}
    command_a = train_command(args, model, parent_dir["a"], end, pool=paths["a"])
    command_b = train_command(args, model, parent_dir["b"], args.snapshot, pool=paths["b"])
    for name, command in (("a", command_a), ("b", command_b)):
        if args.reuse and finished(parent_dir[name], command[command.index("--steps") + 1]):
            continue
        print(f"parent {name}: {' '.join(command)}", file=sys.stderr, flush=True)
        run(command, os.path.join(args.runs, f"parent_{name}.log"))
    snap = f"step_{args.snapshot:06d}"
    adapter = {name: os.path.join(parent_dir[name], snap, "adapters", "s0",
                                  "adapter_model.safetensors") for name in ("a", "b")}
    made = make_children(args, adapter["a"], adapter["b"], os.path.join(args.runs, "children"))
    parent = solve_curve(os.path.join(parent_dir["a"], "metrics.jsonl"))
    curves, results = {}, {}
    for label, (name, kind, path, info) in made.items():
        out_dir = os.path.join(args.runs, f"child_{label}_{name}")
        command = train_command(args, model, out_dir, end,
                                resume=os.path.join(parent_dir["a"], snap), child=path)
        if not (args.reuse and finished(out_dir, end)):
            if os.path.exists(os.path.join(out_dir, "metrics.jsonl")):
                os.remove(os.path.join(out_dir, "metrics.jsonl"))  # a fresh run, not an append
            print(f"child {label} {name}", file=sys.stderr, flush=True)
            run(command, os.path.join(args.runs, f"child_{label}.log"))
        curves[label] = solve_curve(os.path.join(out_dir, "metrics.jsonl"))
        gap, recovered = retention(parent, curves[label], args.snapshot, args.retrain,
                                   args.window, args.tolerance)
        last = range(end - min(5, args.retrain), end)
        results[label] = dict(
            operator=name, kind=kind, fallback=info["fallback"], reason=info["reason"],
            delta_norm=info["delta_norm"], parent_delta_norms=info["parent_delta_norms"],
            start_gap=round(gap, 4), recovered_at=recovered,
            child_last=round(sum(curves[label][s] for s in last) / len(last), 4),
            parent_last=round(sum(parent[s] for s in last) / len(last), 4),
            curve={s: round(v, 4) for s, v in sorted(curves[label].items())})
    result = dict(command=" ".join(["python", "bench/retention.py"] + sys.argv[1:]),
                  git_commit=commit, parent_a_command=command_a, parent_b_command=command_b,
                  snapshot=args.snapshot, retrain=args.retrain, window=args.window,
                  tolerance=args.tolerance, parent_at_start=parent[0],
                  parent_at_snapshot=moving_average(parent, args.snapshot - 1, args.window, 0),
                  references={label: results[label]["curve"] for label, _ in REFERENCES},
                  parent_curve={s: round(v, 4) for s, v in sorted(parent.items())},
                  children=results, wall_s=round(time.time() - start, 1))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    for kind, table, title in (("mutations", MUTATIONS, "mutations (parent A)"),
                               ("crossovers", CROSSOVERS, "crossovers (A fitter, B other)")):
        plot(os.path.join(args.out, f"{kind}.png"), title, [label for label, _ in table], parent,
             curves, results, args.snapshot, args.retrain, curves["R0"])
    report(os.path.join(args.out, "report.md"), result)
    summary = {label: [r["start_gap"], r["recovered_at"]] for label, r in results.items()}
    print(json.dumps({"parent_at_snapshot": round(result["parent_at_snapshot"], 4),
                      "gap_and_recovery": summary, "wall_s": result["wall_s"]}))


if __name__ == "__main__":
    main()
