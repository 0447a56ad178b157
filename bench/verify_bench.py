"""Sandbox throughput on the 256 AZR seed programs; prints ONE JSON line.

  python bench/verify_bench.py [--repeats 5] [--naive 48]

validations_per_s: verify.validate on all 256 seeds (each validation = two isolated runs in two
separately started interpreters), median over --repeats batches with a warm pool. grades_per_s:
verify.grade of the recorded outputs as code_o answers plus the inputs as code_i answers (one run
each), median; --attempts N grades N copies of every answer in one batch, as training grades a
problem's N attempts together (grading checks each problem against itself once per batch, so the
rate per attempt depends on N). naive_runs_per_s: the same programs run the naive way, a fresh
`python -c` process per run, on the first --naive seeds, measured in the same run. ratio_vs_naive =
validations_per_s / naive_runs_per_s. tally (verify.seed_tally): how each seed's recorded output
is explained (reproduced / AZR truncated it / hash-order dependent, rejected as non-deterministic /
recorded '' / unexplained, which should be 0). cpu_ms_per_validation counts this process, the
zygotes and their children, so idle_estimate_validations_per_s = cores * 1000 / it says what a
machine nobody else uses would do. Falls back to tests/fixtures/verify_problems.jsonl without the
fetched seeds (data/).
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
import sandbox  # noqa: E402
import verify  # noqa: E402



def pool_cpu_s():
    """CPU seconds so far of this process, the zygotes and their reaped children (all work done for
    us)."""
    total, tick = sum(os.times()[:2]), os.sysconf("SC_CLK_TCK")
    for zygote in sandbox.zygotes():
        pids = [zygote["pid"]]
        # without root the zygote proper is the child of the process we started (a PID namespace's
        # init)
        try:
            children = open(f"/proc/{pids[0]}/task/{pids[0]}/children").read()
            pids += [int(p) for p in children.split()]
        except OSError:
            pass
        for pid in pids:
            try:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                total += sum(int(x) for x in fields[11:15]) / tick   # utime stime cutime cstime
            except OSError:
                pass
    return total


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attempts", type=int, default=1, help="attempts per problem when grading")
    parser.add_argument("--naive", type=int, default=48,
                        help="seeds run the naive way (a process per run)")
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "data"),
                        help="AZR's seeds from `python evaluate.py fetch`; without them, the test"
                             " fixture's problems")
    args = parser.parse_args()
    path = os.path.join(args.data_dir, "7b_coder_seed_io.jsonl")
    if not os.path.exists(path):
        path = os.path.join(ROOT, "tests", "fixtures", "verify_problems.jsonl")
    rows = [json.loads(line) for line in open(path)]
    proposals = [{"program": r.get("snippet", r.get("program")), "input": r["input"]} for r in rows]
    # starts the pool (not timed)
    layers = sandbox.layers()

    rates, cpu, results = [], [], None
    for _ in range(args.repeats):
        start, cpu0 = time.perf_counter(), pool_cpu_s()
        results = verify.validate("code_o", proposals)
        rates.append(len(proposals) / (time.perf_counter() - start))
        cpu.append((pool_cpu_s() - cpu0) / len(proposals) * 1e3)
    tally, odd = verify.seed_tally(rows, results)

    ok = [(p, r) for p, r in zip(proposals, results) if r["valid"]]
    problems = [dict(p, output=r["output"], gold=r["gold"]) for p, r in ok]
    attempts = {"code_o": [dict(p, answer=p["output"]) for p in problems] * args.attempts,
                "code_i": [dict(p, answer=p["input"]) for p in problems] * args.attempts}
    grade_rates, correct = [], 0
    for _ in range(args.repeats):
        start, correct = time.perf_counter(), 0
        for task, items in attempts.items():
            correct += sum(g["correct"] for g in verify.grade(task, items))
        grade_rates.append(2 * len(ok) * args.attempts / (time.perf_counter() - start))

    naive = proposals[:args.naive]
    start = time.perf_counter()
    # trusted AZR seed data, hence unsandboxed here
    for p in naive:
        subprocess.run([sys.executable, "-c", f"{p['program']}\nprint(repr(f(\n{p['input']}\n)))"],
                       capture_output=True, timeout=30)
    naive_rate = len(naive) / (time.perf_counter() - start)

    validations = statistics.median(rates)
    cpu_ms = statistics.median(cpu)
    print(json.dumps({
        "validations_per_s": round(validations, 1),
        "grades_per_s": round(statistics.median(grade_rates), 1),
        "naive_runs_per_s": round(naive_rate, 1),
        "ratio_vs_naive": round(validations / naive_rate, 1),
        "cpu_ms_per_validation": round(cpu_ms, 2),
        "idle_estimate_validations_per_s": round(os.cpu_count() * 1e3 / cpu_ms),
        "seeds": len(rows),
        "tally": tally,
        "unexplained": odd[:3],
        "attempts_per_problem": args.attempts,
        "gold_answers_correct": f"{correct}/{2 * len(ok) * args.attempts}",
        "validation_rates": [round(r, 1) for r in rates],
        "workers": len(layers["workers"]),
        "layers": {k: v for k, v in layers.items() if isinstance(v, bool)},
        "loadavg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
