"""Issue 15's comparison: each related-systems option (README "Variants") as the 4T+4S population's
teacher reward or top-up sampler, against PopuLoRA's own, on the laptop world, over seeds.

    python bench/tiny_world.py --out out/tiny_world                     # the reference runs, first
    python bench/variants_bench.py --reference out/tiny_world --steps 60
    python bench/variants_bench.py --reference out/tiny_world --steps 2 --seeds 1337 --out out/vq

The reference is bench/tiny_world.py's population run of each seed: the same settings
(tiny_world.world_cfg), the same seed, so every difference is the option's. Each option runs
`--steps` steps (the reference ran more; it is read at the same step) with a checkpoint every 20,
two runs at a time. Measured per seed, option minus reference at the last step: held-out greedy
pass@1 (population mean, weakest member; evaluate.py on the last checkpoint), archive coverage,
the change of mean cyclomatic complexity (last 3 steps minus first 3), the students' solve rate
(last 3 steps), the share of zero-variance attempt groups (groups/zero_variance, and
topup/zero_variance for the top-ups alone; means over steps), seconds per step; for soar also the
students' pass rate on the probe set at the end (the base's is 0: the probes are problems it fails)
and the probe's seconds per step. Verdict per number: tiny_world.verdict (a difference counts when
its mean over seeds exceeds twice its standard error and has one sign in every seed).

SOAR's probe set: 30 problems (10 per task type) the warm base fails greedily, from a pool of
programs outside the held-out benchmark and the warm start's corpus (tinyworld.pool_rows with its
own seed), so held-out pass@1 stays untouched by what SOAR optimises.
Writes OUT/report.md and OUT/results.json; prints one JSON line.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import heldout  # noqa: E402
import learning_check  # noqa: E402
import tinyworld  # noqa: E402
import tiny_world  # noqa: E402

VARIANTS = {"opensir": dict(teacher_reward="opensir"),
            "soar": dict(teacher_reward="soar"),
            "leeps": dict(topup="leeps")}
PROBE_SEED = 4000
TASKS = ("code_i", "code_o", "code_f")


def probe_file(args, reference_ckpt, folder):
    """30 problems the warm base fails greedily (evaluate.py's base row), as soar_probe rows."""
    path = os.path.join(folder, "probe.jsonl")
    if os.path.exists(path):
        return path
    # 120 programs outside the held-out set, as benchmark rows (task types in turn)
    world = heldout.world_of(args)[0]
    candidates = learning_check.pool_split(tinyworld.pool_rows(120, world, PROBE_SEED), 120)
    data_dir = os.path.join(folder, "probe_candidates")
    os.makedirs(data_dir, exist_ok=True)
    tinyworld.write_jsonl(os.path.join(data_dir, "tiny.jsonl"), candidates)
    out = os.path.join(folder, "probe_eval")
    command = [sys.executable, "evaluate.py", "--ckpt", reference_ckpt, "--benchmarks", "tiny",
               "--data_dir", data_dir, "--engine", args.engine, "--model_cache", args.cache,
               "--out", out]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    with open(os.path.join(out, "eval.json")) as f:
        base = json.load(f)["items"]["tiny"]["base"]
    probe, per_task = [], dict.fromkeys(TASKS, 0)
    for row, solved in zip(candidates, base):
        if solved or per_task[row["task"]] >= 10:
            continue
        per_task[row["task"]] += 1
        item = {"task": row["task"], "snippet": row["program"]}
        if row["task"] == "code_f":
            item.update(inputs=row["inputs"], message=row["message"])
        else:
            item["input"] = row["input"]
        probe.append(item)
    return tinyworld.write_jsonl(path, probe)


def worker(args):
    """One (variant, seed) population run, in its own process (two run side by side)."""
    model = heldout.world_base(args)[0]
    out = os.path.join(args.out, f"seed_{args.seed}", args.variant)
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        os.remove(os.path.join(out, "metrics.jsonl"))  # a fresh run, not a resume
    options = dict(VARIANTS[args.variant])
    if args.variant == "soar":
        options["soar_probe"] = args.probe
    options.update(json.loads(args.train_overrides))
    cfg = tiny_world.world_cfg(model, out, steps=args.steps, seed=args.seed, save_every=20,
                               teachers=4, students=4, **options)
    tiny_world.run(cfg)


def measures(rows, last):
    """The compared numbers of one run's metrics rows, up to step `last` (inclusive)."""
    rows = [r for r in rows if r["step"] <= last]
    members = sorted({k.split("/")[1] for k in rows[-1] if k.startswith("rating/")})
    cyclomatic = tiny_world.complexity(rows[-3:])["cyclomatic"]
    first = tiny_world.complexity(rows[:3])["cyclomatic"]

    def mean_of(key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.mean(values), 4) if values else None
    solve = [tiny_world.rates(r, members)["solve"] for r in rows[-3:]]
    return {"coverage": rows[-1]["archive/coverage"],
            "cyclomatic_change": None if None in (cyclomatic, first) else cyclomatic - first,
            "solve": statistics.mean([s for s in solve if s is not None]),
            "groups_zero_variance": mean_of("groups/zero_variance"),
            "topup_zero_variance": mean_of("topup/zero_variance"),
            "s_per_step": statistics.median(r["time/step"] for r in rows)}


def read_rows(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def probe_pass_rate(run_dir, step):
    with open(os.path.join(run_dir, f"step_{step:06d}", "state.json")) as f:
        state = json.load(f)
    rates = [rate for _, _, rate in state["probe_rates"]]
    return round(statistics.mean(rates), 4) if rates else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reference", default=os.path.join(ROOT, "out", "tiny_world"))
    parser.add_argument("--variants", default="opensir,soar,leeps")
    parser.add_argument("--seeds", default="1337,1338,1339")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--skip_runs", action="store_true", help="only measure finished runs")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "variants"))
    parser.add_argument("--engine", default="hf", choices=("hf", "vllm"), help="for evaluate.py")
    parser.add_argument("--train_overrides", default="{}",
                        help="JSON of train.py keys over tiny_world.world_cfg's (as the reference's)")
    heldout.add_world_flags(parser)
    # worker mode (one run per process)
    parser.add_argument("--variant", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", default="")
    args = parser.parse_args()
    if args.variant:
        return worker(args)
    start = time.time()
    data_dir = heldout.world_base(args)[1]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    os.makedirs(args.out, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    variants = [v for v in args.variants.split(",") if v.strip()]
    last_ckpt = args.steps - args.steps % 20 if args.steps >= 20 else args.steps
    reference = {s: os.path.join(args.reference, f"seed_{s}") for s in seeds}
    probe = ""
    if "soar" in variants:
        probe = probe_file(args, os.path.join(reference[seeds[0]], "population", "step_000020"),
                           args.out)
    jobs = [(v, s) for v in variants for s in seeds]
    if args.skip_runs:
        jobs = []
    running = []
    while jobs or running:
        while jobs and len(running) < args.parallel:
            variant, seed = jobs.pop(0)
            log = open(os.path.join(args.out, f"{variant}_{seed}.log"), "w")
            command = [sys.executable, os.path.abspath(__file__), "--variant", variant, "--seed",
                       str(seed), "--steps", str(args.steps), "--out", args.out, "--cache",
                       args.cache, "--probe", probe, "--world", args.world, "--model_cfg",
                       args.model_cfg, "--warm_train", args.warm_train, "--train_overrides",
                       args.train_overrides]
            running.append((variant, seed, subprocess.Popen(command, cwd=ROOT, stdout=log,
                                                            stderr=subprocess.STDOUT)))
        time.sleep(5)
        for item in list(running):
            if item[2].poll() is not None:
                if item[2].returncode != 0:
                    raise SystemExit(f"{item[0]} seed {item[1]} failed: see {args.out}")
                running.remove(item)
    ckpt = f"step_{last_ckpt:06d}"
    result = {"command": " ".join(["python", "bench/variants_bench.py"] + sys.argv[1:]),
              "git_commit": commit, "steps": args.steps, "heldout_step": last_ckpt,
              "reference": args.reference, "probe": probe, "seeds": {}, "verdicts": {}}
    for seed in seeds:
        ref_dir = os.path.join(reference[seed], "population")
        base_dir = os.path.join(reference[seed], "baseline")
        ref = measures(read_rows(ref_dir), args.steps - 1)
        ref["heldout"] = tiny_world.heldout_point(
            ref_dir, base_dir, ckpt, os.path.join(args.out, f"seed_{seed}", "heldout_ref"), args,
            data_dir)
        result["seeds"][seed] = {"populora": ref}
        for variant in variants:
            run_dir = os.path.join(args.out, f"seed_{seed}", variant)
            mine = measures(read_rows(run_dir), args.steps - 1)
            heldout_dir = os.path.join(args.out, f"seed_{seed}", f"heldout_{variant}")
            mine["heldout"] = tiny_world.heldout_point(run_dir, base_dir, ckpt, heldout_dir, args,
                                                       data_dir)
            # the same problems, so the option's population mean pairs with PopuLoRA's
            mine["heldout_vs_populora"] = tinyworld.paired_scores(ref["heldout"]["shares"],
                                                                  mine["heldout"]["shares"])
            if variant == "soar":
                mine["probe_pass_rate"] = probe_pass_rate(run_dir, args.steps)
                mine["probe_s_per_step"] = statistics.median(
                    r.get("time/probe", 0.0) for r in read_rows(run_dir))
            result["seeds"][seed][variant] = mine
    keys = [("heldout mean", lambda m: m["heldout"]["mean"], +1),
            ("heldout weakest", lambda m: m["heldout"]["weakest"], +1),
            ("coverage", lambda m: m["coverage"], +1),
            ("cyclomatic change", lambda m: m["cyclomatic_change"], +1),
            ("student solve rate", lambda m: m["solve"], +1),
            ("zero-variance groups", lambda m: m["groups_zero_variance"], -1),
            ("zero-variance top-ups", lambda m: m["topup_zero_variance"], -1),
            ("s per step", lambda m: m["s_per_step"], -1)]
    for variant in variants:
        result["verdicts"][variant] = {}
        for name, get, sign in keys:
            diffs = []
            for seed in seeds:
                a, b = get(result["seeds"][seed][variant]), get(result["seeds"][seed]["populora"])
                diffs.append(None if a is None or b is None else a - b)
            outcome, mean, error = tiny_world.verdict(diffs, sign)
            better = {"reproduced": "better", "not reproduced": "worse"}.get(outcome, outcome)
            result["verdicts"][variant][name] = {
                "verdict": better, "mean_diff": mean, "stderr": error,
                "per_seed": [None if d is None else round(d, 4) for d in diffs]}
    result["wall_s"] = round(time.time() - start, 1)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    write_report(os.path.join(args.out, "report.md"), result, variants, seeds)
    print(json.dumps({"verdicts": result["verdicts"], "wall_s": result["wall_s"]}))


def write_report(path, result, variants, seeds):
    lines = ["# Variants vs PopuLoRA's own reward and sampler (laptop world, 4T+4S)", "",
             f"Command: `{result['command']}`", "", f"Git commit: `{result['git_commit']}`", "",
             f"Reference: `{result['reference']}` (bench/tiny_world.py's population runs, same "
             f"settings and seeds), read at step {result['steps']}; held-out at checkpoint "
             f"{result['heldout_step']}.", "",
             "Option minus PopuLoRA per seed; 'better' / 'worse' = the difference's mean over "
             "seeds exceeds twice its standard error with one sign in every seed (the direction "
             "that counts as better is fixed per row), else 'inconclusive'.", ""]
    for variant in variants:
        lines += [f"## {variant}", "", "| measure | verdict | mean diff (stderr) | per seed |",
                  "|---|---|---|---|"]
        for name, v in result["verdicts"][variant].items():
            lines.append(f"| {name} | {v['verdict']} | {v['mean_diff']} ({v['stderr']}) | "
                         f"{v['per_seed']} |")
        lines.append("")
    lines += ["## Absolute numbers per seed", "",
              "Held-out greedy pass@1 (%) with [95 % interval] (population mean: normal over "
              "problems; weakest member: Wilson); vs PopuLoRA: the option's population mean minus "
              "PopuLoRA's on the same problems, paired, [95 %], normal p.", "",
              "| seed | run | held-out mean | vs PopuLoRA | weakest | coverage | cyclomatic change | "
              "solve | zero-var groups | zero-var top-ups | s/step | probe pass rate |",
              "|---" * 12 + "|"]
    for seed in seeds:
        for run, m in result["seeds"][seed].items():
            def cell(x):
                return "-" if x is None else f"{x:.4g}"

            def held(key):
                low, high = m["heldout"]["ci"][key]
                return f"{m['heldout'][key]:.1f} [{low:.1f}, {high:.1f}]"
            versus = "-"
            if "heldout_vs_populora" in m:
                d = m["heldout_vs_populora"]
                versus = f"{d['diff']:+.1f} [{d['ci'][0]:+.1f}, {d['ci'][1]:+.1f}] p {d['p']:.2g}"
            lines.append(f"| {seed} | {run} | {held('mean')} | {versus} | "
                         f"{held('weakest')} | {cell(m['coverage'])} | "
                         f"{cell(m['cyclomatic_change'])} | {cell(m['solve'])} | "
                         f"{cell(m['groups_zero_variance'])} | {cell(m['topup_zero_variance'])} | "
                         f"{cell(m['s_per_step'])} | {cell(m.get('probe_pass_rate'))} |")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
