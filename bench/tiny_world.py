"""The laptop-scale comparison (issues 7 and 14): the single-agent baseline and a 4T+4S population,
same steps and same per-adapter batches, both on the warm-started tiny base (tinyworld.py) and its
seed archive, through train.main, over several seeds; every saved checkpoint scored on the held-out
tiny benchmark (evaluate.py --benchmarks tiny: base, baseline, population mean / best teacher / best
student / weakest member); `evaluate.py report` draws each seed's two runs on the same axes; a
claims table judges the paper's four claims at this scale. Prints ONE JSON line:

  {"warm_base", "warm_build_s", "seeds": {seed: {"baseline": {...}, "population": {...},
   "heldout": [{"step", "base", "baseline", "mean", "best_teacher", "best_student", "weakest"}]}},
   "claims": [{"claim", "verdict", "numbers"}]}; per run: "start" (step 0: teacher validity, student
   solve rate, format rates), "end" (mean of the last 3 steps), "solve_rate_std" and
   "solve_rate_autocorr" (std and lag-1 autocorrelation over steps of the mean student solve rate:
   oscillation), "complexity_first/last" (means over the first/last 3 steps), "coverage" (final
   archive coverage), "coverage_curve", "mu" (final rating per member: ratings.band's centre,
   TrueSkill's mu), "wall_s", "s_per_step"

    python bench/tiny_world.py                      # 100 steps x 3 seeds x 2 runs: hours on 2 cores
    python bench/tiny_world.py --steps 4 --seeds 1 --save_every 2   # a quick look
    python bench/tiny_world.py --probe               # step 0 only, population: start-up rates

Writes OUT/report.md (command, commit, claims, held-out table), OUT/results.json, OUT/heldout.png;
runs under OUT/seed_<s>/{baseline,population}/ with their evaluate.py reports.
Settings chosen before any comparison run, not tuned on its outcome: LoRA rank 8 on q/k/v/o at lr
3e-3 (first 1e-3; changed before the comparison ever ran, from other runs: at 1e-3 a student's
gold answers moved 0.03 nats in 40 steps (results/learning_check/diagnosis.md); at 1e-2 a 2T+2S
population collapsed in 10 steps (teacher validity 0.78 -> 0, student entropy 0.6 -> 1.3 nats);
at 3e-3 the same population stayed stable for 40 steps), 4 proposals per teacher and
task type, 4 attempts per problem, evolution every 5 steps, 3 references (the warm start saw 3);
100 steps (issue 14: >= 100), seeds 1337, 1338, 1339, a held-out evaluation every 20 steps.
Claims (the verdict rule, fixed with the settings): a difference counts when its mean over seeds
exceeds twice its standard error over seeds and has the same sign in every seed; "reproduced" if it
is the paper's sign, "not reproduced" if the opposite, else "inconclusive". With one seed every
verdict is "inconclusive".

Measured before this harness (--steps 60, one seed, default warm base, shared 2-core CPU at load
~3; population 9.0 s/step, baseline 2.8 s/step): teacher validity 0.78 -> 0.81 (population) and
0.78 -> 0.75 (baseline), student solve rate ~0.11 in both, complexity flat within noise, archive
coverage 26 vs 17 of 4,096 cells, TrueSkill splits by role only (teachers ~37, students ~13:
students solve < 50% of every teacher's problems, so each match is a teacher win). No arms race
in 60 steps.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# vLLM in-process on CPU (docs/vllm.md)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, os.path.join(ROOT, "bench"))
import heldout  # noqa: E402
import logs  # noqa: E402
import ratings  # noqa: E402
import tinyworld  # noqa: E402
import train  # noqa: E402
import verify  # noqa: E402

AXES = ("ast_depth", "cyclomatic", "loc", "variables")
ROWS = {"base": "base", "baseline": "baseline", "mean": "population mean",
        "best_teacher": "best teacher", "best_student": "best student", "weakest": "weakest member"}


def world_cfg(model, out_dir, **overrides):
    """train.py config for the tiny world (both runs; the population run sets only the roles)."""
    world = dict(
        model=model, seed_archive=os.path.join(model, "seeds.jsonl"), out_dir=out_dir, steps=20,
        propose_per_task=4, solve_samples=4, min_problems=2, references=3, max_new_tokens=192,
        max_prompt_tokens=2048, lora_rank=8, lora_alpha=16,
        lora_targets="q_proj,k_proj,v_proj,o_proj", lr=3e-3, evolve_every=5, save_every=-1,
        engine="hf", samples_per_step=4, seed=1337)
    return {**train.config, **world, **overrides}


def rates(row, members):
    """Mean teacher validity / student solve rate / format rates over a run's members, one step."""
    get = lambda keys: [row[k] for k in keys if row.get(k) is not None]  # noqa: E731
    t = [m for m in members if m[0] in "ta"]
    s = [m for m in members if m[0] in "sa"]
    mean = lambda xs: round(statistics.mean(xs), 4) if xs else None  # noqa: E731
    return {"valid": mean(get([f"teacher/{m}/valid_rate/{k}" for m in t for k in verify.TASKS])),
            "solve": mean(get([f"student/{m}/solve_rate/{k}" for m in s for k in verify.TASKS])),
            "teacher_format": mean(get([f"teacher/{m}/format_rate" for m in t])),
            "student_format": mean(get([f"student/{m}/format_rate" for m in s])),
            **{f"valid/{k}": mean(get([f"teacher/{m}/valid_rate/{k}" for m in t]))
               for k in verify.TASKS},
            **{f"solve/{k}": mean(get([f"student/{m}/solve_rate/{k}" for m in s]))
               for k in verify.TASKS}}


def run(cfg):
    """train.main with its log lines on stderr; returns (metrics rows, wall seconds)."""
    start = time.time()
    with contextlib.redirect_stdout(sys.stderr):
        train.main(cfg)
    with open(os.path.join(cfg["out_dir"], "metrics.jsonl")) as f:
        return [json.loads(line) for line in f], time.time() - start


def autocorrelation(values):
    """Lag-1 autocorrelation of a series (None when it has fewer than 3 points or no variance)."""
    values = [v for v in values if v is not None]
    if len(values) < 3:
        return None
    mu = statistics.mean(values)
    denominator = sum((v - mu) ** 2 for v in values)
    if denominator == 0:
        return None
    return round(sum((a - mu) * (b - mu) for a, b in zip(values, values[1:])) / denominator, 4)


def complexity(rows):
    """Mean of each complexity axis over the given steps (steps without a valid proposal skip)."""
    out = {}
    for axis in AXES:
        values = [r[f"complexity/{axis}"] for r in rows if r[f"complexity/{axis}"] is not None]
        out[axis] = round(statistics.mean(values), 3) if values else None
    return out


def outcome_shares(rows):
    """Shares of rated matches (match/<t>/<s>/outcome: -1 teacher wins, 0 draw, 1 student wins)
    over the given steps: {"matches", "teacher", "draw", "student"}."""
    outcomes = [v for r in rows for k, v in r.items()
                if k.startswith("match/") and k.endswith("/outcome") and v is not None]
    count = len(outcomes)
    if not count:
        return {"matches": 0, "teacher": None, "draw": None, "student": None}
    return {"matches": count, "teacher": round(outcomes.count(-1) / count, 4),
            "draw": round(outcomes.count(0) / count, 4),
            "student": round(outcomes.count(1) / count, 4)}


def summary(rows, wall):
    members = sorted({k.split("/")[1] for k in rows[-1] if k.startswith("rating/")})
    solve = [rates(r, members)["solve"] for r in rows]
    end = [rates(r, members) for r in rows[-3:]]
    end_mean = {}
    for key in end[0]:
        values = [e[key] for e in end if e[key] is not None]
        end_mean[key] = round(statistics.mean(values), 4) if values else None
    return {"steps": len(rows), "start": rates(rows[0], members), "end": end_mean,
            "solve_rate_by_step": solve,
            "solve_rate_std": round(statistics.pstdev([x for x in solve if x is not None]), 4),
            "solve_rate_autocorr": autocorrelation(solve),
            "complexity_first": complexity(rows[:3]), "complexity_last": complexity(rows[-3:]),
            "coverage": rows[-1]["archive/coverage"],
            "coverage_curve": [r["archive/coverage"] for r in rows],
            "archive": {t: rows[-1][f"archive/size/{t}"] for t in verify.TASKS},
            "mu": {m: round(ratings.band(logs.logged_rating(rows[-1], m))[0], 2) for m in members},
            "outcomes": outcome_shares(rows), "outcomes_last_fifth": outcome_shares(
                rows[len(rows) - max(1, len(rows) // 5):]),
            "wall_s": round(wall, 1),
            "s_per_step": round(statistics.median(r["time/step"] for r in rows), 2)}


def evaluate_heldout(population_dir, baseline_dir, out_dir, args, data_dir):
    """evaluate.py --benchmarks tiny at every checkpoint step both runs saved -> [{"step", ...}]."""
    steps = sorted(set(n for n in os.listdir(population_dir) if n.startswith("step_"))
                   & set(n for n in os.listdir(baseline_dir) if n.startswith("step_")))
    return [heldout_point(population_dir, baseline_dir, name, out_dir, args, data_dir)
            for name in steps]


def heldout_point(population_dir, baseline_dir, name, out_dir, args, data_dir):
    """evaluate.py --benchmarks tiny (data_dir/tiny.jsonl) on checkpoint `name` (step_NNNNNN) of
    both runs -> {"step", one pass@1 per ROWS key (None for a row the table lacks), "ci": {key:
    95 % interval}, "vs_baseline": {key: paired difference to the baseline}, "shares": per problem
    the share of members that solve it}. Intervals: Wilson
    for one member's rate, a normal interval over problems for the population mean (per problem,
    the share of members that solve it); differences: tinyworld.paired (exact sign test) for one
    member, tinyworld.paired_scores for the mean."""
    target = os.path.join(out_dir, name)
    command = [sys.executable, "evaluate.py", "--ckpt", os.path.join(population_dir, name),
               "--baseline_ckpt", os.path.join(baseline_dir, name), "--benchmarks", "tiny",
               "--engine", args.engine, "--model_cache", args.cache, "--out", target,
               "--data_dir", data_dir]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    with open(os.path.join(target, "eval.json")) as f:
        result = json.load(f)
    table, items = result["table"], result["items"]["tiny"]
    members = [m for m in result["roles"] if m in items]
    # per problem: the share of the population's members that solve it
    shares = [sum(items[m][i] for m in members) / len(members) for i in range(len(items["base"]))]
    point = {"step": int(name.split("_")[1]), "ci": {}, "vs_baseline": {},
             "shares": [round(x, 4) for x in shares]}
    for key, label in ROWS.items():
        point[key] = table[label]["tiny"] if label in table else None
        if point[key] is None:
            continue
        if key == "mean":
            _, low, high = tinyworld.mean_interval(shares)
            point["ci"][key] = [round(100 * low, 2), round(100 * high, 2)]
            point["vs_baseline"][key] = tinyworld.paired_scores(items["baseline"], shares)
            continue
        scores = items[table[label]["row"]]
        low, high = tinyworld.wilson(sum(scores), len(scores))
        point["ci"][key] = [round(100 * low, 2), round(100 * high, 2)]
        if key != "baseline":
            point["vs_baseline"][key] = tinyworld.paired(items["baseline"], scores)
    return point


def verdict(differences, paper_sign):
    """The claims rule (docstring): differences over seeds -> (verdict, mean, standard error)."""
    values = [d for d in differences if d is not None]
    if not values:
        return "inconclusive", None, None
    mean = statistics.mean(values)
    if len(values) < 2:
        return "inconclusive", round(mean, 4), None
    error = statistics.stdev(values) / math.sqrt(len(values))
    same_sign = all(v > 0 for v in values) or all(v < 0 for v in values)
    if not same_sign or abs(mean) <= 2 * error:
        return "inconclusive", round(mean, 4), round(error, 4)
    if (mean > 0) == (paper_sign > 0):
        return "reproduced", round(mean, 4), round(error, 4)
    return "not reproduced", round(mean, 4), round(error, 4)


def claims(seeds):
    """One line per claim of the paper, from per-seed differences (population minus baseline, or
    the population's own change over training)."""
    def diff(get):
        out = []
        for s in seeds.values():
            out.append(get(s))
        return out

    def final(s, key):
        return s["heldout"][-1][key] if s["heldout"] else None

    def minus(a, b):
        if a is None or b is None:
            return None
        return a - b

    def cyclomatic_change(r):
        return minus(r["complexity_last"]["cyclomatic"], r["complexity_first"]["cyclomatic"])

    def coverage_late_growth(r):
        # coverage gained over the second half of training: does it keep expanding?
        curve = r["coverage_curve"]
        return curve[-1] - curve[len(curve) // 2]

    table = [
        ("1a. held-out pass@1: population mean > baseline", +1,
         diff(lambda s: minus(final(s, "mean"), final(s, "baseline")))),
        ("1b. held-out pass@1: weakest member > baseline", +1,
         diff(lambda s: minus(final(s, "weakest"), final(s, "baseline")))),
        ("1c. training reward: population students < baseline", -1,
         diff(lambda s: minus(s["population"]["end"]["solve"], s["baseline"]["end"]["solve"]))),
        ("2. complexity (cyclomatic) grows more in the population than in the baseline", +1,
         diff(lambda s: minus(cyclomatic_change(s["population"]),
                              cyclomatic_change(s["baseline"])))),
        ("3. student solve rate oscillates more in the population (std over steps)", +1,
         diff(lambda s: s["population"]["solve_rate_std"] - s["baseline"]["solve_rate_std"])),
        ("4. archive coverage keeps expanding (population, second half of training)", +1,
         diff(lambda s: coverage_late_growth(s["population"]))),
    ]
    out = []
    for claim, sign, values in table:
        result, mean, error = verdict(values, sign)
        out.append({"claim": claim, "verdict": result, "mean": mean, "stderr": error,
                    "per_seed": [None if v is None else round(v, 4) for v in values]})
    return out


def plot_heldout(path, seeds):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, style in (("baseline", "--"), ("mean", "-"), ("weakest", ":")):
        steps = sorted({p["step"] for s in seeds.values() for p in s["heldout"]})
        means, errors = [], []
        for step in steps:
            values = [p[key] for s in seeds.values() for p in s["heldout"]
                      if p["step"] == step and p[key] is not None]
            means.append(statistics.mean(values) if values else float("nan"))
            errors.append(statistics.pstdev(values) if len(values) > 1 else 0.0)
        ax.errorbar(steps, means, yerr=errors, linestyle=style, marker="o", capsize=3, label=key)
    ax.set(xlabel="step", ylabel="held-out pass@1 (%)",
           title="tiny benchmark, mean +- std over seeds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(path, result):
    lines = ["# Tiny world: baseline vs 4T+4S over seeds", "",
             f"Command: `{result['command']}`", "",
             f"Git commit: `{result['git_commit']}`", "", "## The paper's claims at this scale", "",
             "| claim | verdict | mean over seeds (stderr) | per seed |", "|---|---|---|---|"]
    for c in result["claims"]:
        numbers = f"{c['mean']} ({c['stderr']})"
        lines.append(f"| {c['claim']} | {c['verdict']} | {numbers} | {c['per_seed']} |")
    lines += ["", "## Held-out pass@1 (%)", "",
              f"Greedy, {result['heldout']}/tiny.jsonl; [95 % interval]: Wilson for one member, "
              "a normal interval over problems for the population mean (per problem, the share "
              "of its 8 members that solve it).", "",
              "| seed | step | " + " | ".join(ROWS) + " |", "|---" * (len(ROWS) + 2) + "|"]
    for seed, s in result["seeds"].items():
        for p in s["heldout"]:
            cells = []
            for k in ROWS:
                if p[k] is None:
                    cells.append("-")
                else:
                    low, high = p["ci"][k]
                    cells.append(f"{p[k]:.1f} [{low:.1f}, {high:.1f}]")
            lines.append(f"| {seed} | {p['step']} | {' | '.join(cells)} |")
    lines += ["", "Against the baseline at the last checkpoint (points, paired on the same "
              "problems, [95 %], p: exact sign test for one member, normal for the mean):", "",
              "| seed | " + " | ".join(k for k in ROWS if k not in ("base", "baseline")) + " |",
              "|---" * (len(ROWS) - 1) + "|"]
    for seed, s in result["seeds"].items():
        last = s["heldout"][-1]["vs_baseline"]
        cells = []
        for k in ROWS:
            if k in ("base", "baseline"):
                continue
            d = last.get(k)
            if d is None:
                cells.append("-")
            else:
                cells.append(f"{d['diff']:+.1f} [{d['ci'][0]:+.1f}, {d['ci'][1]:+.1f}] "
                             f"p {d['p']:.2g}")
        lines.append(f"| {seed} | {' | '.join(cells)} |")
    lines += ["", "## TrueSkill matches: who wins", "",
              "Shares of rated matches (teacher wins / draw / student wins) in the population "
              f"run, draw margin {result.get('draw_margin')}: all steps, and the last fifth.", "",
              "| seed | matches | teacher | draw | student | last fifth: teacher | draw | student |",
              "|---" * 8 + "|"]
    for seed, s in result["seeds"].items():
        a, b = s["population"]["outcomes"], s["population"]["outcomes_last_fifth"]
        lines.append(f"| {seed} | {a['matches']} | {a['teacher']} | {a['draw']} | "
                     f"{a['student']} | {b['teacher']} | {b['draw']} | {b['student']} |")
    lines += ["", "![held-out pass@1](heldout.png)", "",
              "Dynamics per seed: `seed_<s>/population/report/report.md` (the baseline dashed).",
              ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", default="1337,1338,1339", help="comma-separated training seeds")
    parser.add_argument("--save_every", type=int, default=20, help="steps between held-out evals")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "tiny_world"))
    parser.add_argument("--cache", default=os.path.join(ROOT, "out", ".tiny"))
    parser.add_argument("--engine", default="hf", choices=("hf", "vllm"))
    parser.add_argument("--probe", action="store_true", help="step 0 of the population only")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling (design §4: 1.0)")
    parser.add_argument("--train_overrides", default="{}",
                        help="JSON of train.py keys over world_cfg's, e.g. '{\"draw_margin\": 0.2}'")
    heldout.add_world_flags(parser)
    args = parser.parse_args()
    start = time.time()
    with contextlib.redirect_stdout(sys.stderr):
        model, data_dir = heldout.world_base(args)
    overrides = json.loads(args.train_overrides)
    result = {"warm_base": model, "heldout": data_dir, "train_overrides": overrides,
              "warm_build_s": round(time.time() - start, 1), "seeds": {}}
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.probe:
        out = os.path.join(args.out, "population_probe")
        if os.path.exists(os.path.join(out, "metrics.jsonl")):
            os.remove(os.path.join(out, "metrics.jsonl"))  # a fresh run, not a resume
        cfg = world_cfg(model, out, steps=1, engine=args.engine, temperature=args.temperature,
                        teachers=4, students=4, seed=seeds[0], **overrides)
        rows, wall = run(cfg)
        result["population"] = summary(rows, wall)
        print(json.dumps(result))
        return
    for seed in seeds:
        folder = os.path.join(args.out, f"seed_{seed}")
        per_seed = {}
        runs = (("population", dict(teachers=4, students=4)), ("baseline", dict(baseline=True)))
        for name, roles in runs:
            out = os.path.join(folder, name)
            if os.path.exists(os.path.join(out, "metrics.jsonl")):
                os.remove(os.path.join(out, "metrics.jsonl"))  # a fresh run, not a resume
            cfg = world_cfg(model, out, steps=args.steps, engine=args.engine, seed=seed,
                            temperature=args.temperature, save_every=args.save_every,
                            **roles, **overrides)
            rows, wall = run(cfg)
            per_seed[name] = summary(rows, wall)
        per_seed["heldout"] = evaluate_heldout(os.path.join(folder, "population"),
                                               os.path.join(folder, "baseline"),
                                               os.path.join(folder, "heldout"), args, data_dir)
        command = [sys.executable, os.path.join(ROOT, "evaluate.py"), "report",
                   os.path.join(folder, "population"), os.path.join(folder, "baseline")]
        report = subprocess.run(command, capture_output=True, text=True)
        tail = (report.stdout + report.stderr)[-400:]
        per_seed["report"] = {"rc": report.returncode, "tail": tail}
        result["seeds"][seed] = per_seed
    result["claims"] = claims(result["seeds"])
    result["draw_margin"] = world_cfg(model, "", **overrides)["draw_margin"]
    result["command"] = " ".join(["python", "bench/tiny_world.py"] + sys.argv[1:])
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result["git_commit"] = commit.stdout.strip()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot_heldout(os.path.join(args.out, "heldout.png"), result["seeds"])
    write_report(os.path.join(args.out, "report.md"), result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
