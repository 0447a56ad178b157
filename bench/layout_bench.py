"""Step time of a 4T+4S (--teachers/--students) run on the warm-started tiny base, 1 rank vs 2 ranks (torchrun, gloo), for one or more
copies of the code side by side: e.g. this tree against a checkout of the old layout (member i trained by rank
i % world, weights broadcast after every update, optimizer states gathered at every checkpoint). Runs alternate
between the copies, so machine load hits both alike. Prints ONE JSON line:

  {"<label>/<ranks>": {"s_per_step": median, "train_s": median of time/train, "checkpoint_s": ...}, ...,
   "ratio/<label>": 2-rank step time / 1-rank step time, "load": 1-minute load average at the end}

    python bench/layout_bench.py                                  # this tree only
    git worktree add /tmp/old 38c0fcc && python bench/layout_bench.py --roots .,/tmp/old --labels new,old

Each run: --steps steps (the first is not counted), 2 proposals per teacher and task type, 2 attempts each, a
checkpoint every step, threads split so that 1 and 2 ranks use the same cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(root, ranks, steps, cache, cores, teachers, students):
    out = tempfile.mkdtemp(prefix="layout-bench-")
    flags = dict(model="tiny-warm", model_cache=cache, teachers=teachers, students=students, steps=steps,
                 propose_per_task=2,
                 solve_samples=2, max_new_tokens=96, engine="hf", save_every=1, evolve_every=-1, out_dir=out)
    argv = [f"--{k}={v}" for k, v in flags.items()]
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, cores // ranks)))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
               os.path.join(root, "train.py"), *argv]
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{root} with {ranks} rank(s) failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f][1:]  # the first step pays one-off costs
    return {"s_per_step": statistics.median(r["time/step"] for r in rows),
            "train_s": statistics.median(r["time/train"] for r in rows),
            "checkpoint_s": statistics.median(r["time/checkpoint"] for r in rows)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roots", default=ROOT, help="comma-separated code folders")
    parser.add_argument("--labels", default="", help="comma-separated names for them (default: the folders)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--model_cache", default=os.path.join(ROOT, "out", ".tiny"))
    parser.add_argument("--teachers", type=int, default=4)
    parser.add_argument("--students", type=int, default=4)
    args = parser.parse_args()
    roots = [os.path.abspath(r) for r in args.roots.split(",")]
    labels = args.labels.split(",") if args.labels else roots
    results = {}
    for ranks in (1, 2):
        for label, root in zip(labels, roots):
            print(f"{label}: {ranks} rank(s)...", file=sys.stderr, flush=True)
            results[f"{label}/{ranks}"] = one_run(root, ranks, args.steps, os.path.abspath(args.model_cache),
                                                  args.cores, args.teachers, args.students)
    for label in labels:
        results[f"ratio/{label}"] = round(results[f"{label}/2"]["s_per_step"] / results[f"{label}/1"]["s_per_step"],
                                          3)
    results["load"] = os.getloadavg()[0]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
