"""The laptop world's held-out benchmark with intervals: greedy pass@1 and, from n samples per problem
at temperature 1, pass@1 and pass@k (unbiased estimator) of the warm base and, with --ckpt, of every
member of a checkpoint; per task type. pass@k - greedy pass@1 is the headroom RL can sharpen.

    python bench/heldout.py                                   # the default warm base, n = 8
    python bench/heldout.py --ckpt out/learning_check/run/step_000200 --samples 16 --k 1,8,16
    python bench/heldout.py --world '{"max_statements": 2}'   # another world's base (built, cached)

Prints ONE JSON line {"model", "heldout", "rows": {row: {"all"|task: {"n", "greedy", "greedy_ci",
"pass@k", "pass@k_ci", ...}}}, "wall_s", "cpu_s"} (rates in %), and with --out writes OUT/heldout.json
and OUT/heldout.md. Intervals (95 %): Wilson for greedy pass@1 (one rate), a normal interval of the
mean over problems for pass@k (each problem's unbiased estimate is one value).
The generation budget is evaluate.py's (256 new tokens) so greedy pass@1 here is evaluate.py
--benchmarks tiny's number for the same base. --world / --model_cfg / --warm_train are JSON
overrides of tinyworld.WORLD / MODEL / TRAIN: the warm base and the held-out set of that world,
both built once and cached under --cache (tinyworld.warm_base, tinyworld.heldout_benchmark).
"""
import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# one thread per process: on a shared CPU two OpenMP threads that wait for each other made a tiny
# train.py step ~30x slower (103 s against 3.3 s at load 12 on 2 cores); set it to 2 on free cores
os.environ.setdefault("OMP_NUM_THREADS", "1")

import tinyworld  # noqa: E402

TASKS = ("code_i", "code_o", "code_f")


def add_world_flags(parser):
    """--world / --model_cfg / --warm_train (JSON overrides of the warm base's settings), --cache."""
    parser.add_argument("--world", default="{}", help="JSON overrides of tinyworld.WORLD")
    parser.add_argument("--model_cfg", default="{}", help="JSON overrides of tinyworld.MODEL")
    parser.add_argument("--warm_train", default="{}", help="JSON overrides of tinyworld.TRAIN")
    parser.add_argument("--cache", default=os.path.join(ROOT, "out", ".tiny"))


def world_of(args):
    """The settings the flags name: (world, model_cfg, train) dicts."""
    world = dict(tinyworld.WORLD, **json.loads(args.world))
    model_cfg = dict(tinyworld.MODEL, **json.loads(args.model_cfg))
    train = dict(tinyworld.TRAIN, **json.loads(args.warm_train))
    return world, model_cfg, train


def world_base(args, log=None):
    """(warm base folder, held-out data folder for evaluate.py --data_dir) of the flags' world, each
    built once and cached under args.cache."""
    world, model_cfg, train = world_of(args)
    if log is None:
        def log(*x):
            print(*x, file=sys.stderr, flush=True)
    folder = tinyworld.warm_base(args.cache, world, model_cfg, train, log)
    data = os.path.dirname(tinyworld.heldout_benchmark(args.cache, world))
    return folder, data


def cpu_seconds():
    """CPU seconds used so far by this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load(folder, ckpt):
    """An hf engine over the base in `folder`: the checkpoint's members (none without ckpt) plus a
    zero-initialised slot, exactly the base. -> (engine, {row: slot})."""
    import engines
    import population
    base, tokenizer = population.load_base(folder)
    run = dict(lora_rank=8, lora_alpha=16, lora_dropout=0.0, lora_targets="q_proj", seed=0,
               rating="trueskill")
    roles = []
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
        run, roles = state["config"], [m["role"] for m in state["members"]]
    model, members = population.init_population(base, tokenizer, run, roles + ["both"])
    if ckpt:
        population.load_checkpoint(ckpt, model, members[:-1], {})
    engine = engines.make_engine("hf", folder, model, tokenizer, members,
                                 dict(max_model_len=4096, hf_batch_size=64))
    rows = {m["name"]: m["name"] for m in members[:-1]}
    rows["base"] = members[-1]["name"]
    return engine, rows


def verdicts(engine, slot, items, samples, temperature, max_new_tokens, seed):
    """0/1 per (problem, sample): list of `samples` lists, each over items in order."""
    import engines
    import evaluate
    prompts = [evaluate.make_prompt("tiny", it, {}) for it in items]
    requests = [(prompt, slot) for _ in range(samples) for prompt in prompts]
    outs = engines.generate(engine, requests, temperature, 1.0, max_new_tokens, seed)
    answers = []
    for n, out in enumerate(outs):
        answers.append((n % len(items), evaluate.extract_tiny(items[n % len(items)]["task"],
                                                              out["text"])))
    graded = [int(v["correct"]) for v in evaluate.score_tiny(items, answers)]
    return [graded[j * len(items):(j + 1) * len(items)] for j in range(samples)]


def summarize(items, greedy, sampled, ks):
    """Per task type and overall: greedy pass@1 with its Wilson interval, pass@k from the samples
    with a normal interval over problems; rates in %."""
    out = {}
    for part in ("all",) + TASKS:
        index = [i for i, it in enumerate(items) if part == "all" or it["task"] == part]
        solved = sum(greedy[i] for i in index)
        low, high = tinyworld.wilson(solved, len(index))
        cell = {"n": len(index), "greedy": round(100 * solved / len(index), 2),
                "greedy_ci": [round(100 * low, 2), round(100 * high, 2)]}
        for k in ks:
            per_problem = []
            for i in index:
                correct = sum(s[i] for s in sampled)
                per_problem.append(tinyworld.pass_at_k(len(sampled), correct, k))
            mean, low, high = tinyworld.mean_interval(per_problem)
            cell[f"pass@{k}"] = round(100 * mean, 2)
            cell[f"pass@{k}_ci"] = [round(100 * low, 2), round(100 * high, 2)]
        out[part] = cell
    return out


def markdown(result, ks):
    lines = [f"# Held-out pass@k: {result['model']}", "",
             f"{result['n']} problems (tinyworld.HELDOUT), {result['samples']} samples per problem "
             f"at temperature {result['temperature']}, {result['max_new_tokens']} new tokens. "
             "Greedy pass@1 with its Wilson 95 % interval; pass@k unbiased from the samples, with "
             "a normal 95 % interval over problems. Rates in %.", "",
             "| row | part | greedy pass@1 | " + " | ".join(f"pass@{k}" for k in ks) + " |",
             "|---" * (3 + len(ks)) + "|"]
    for row, parts in result["rows"].items():
        for part, cell in parts.items():
            cells = [f"{cell['greedy']:.1f} [{cell['greedy_ci'][0]:.1f}, {cell['greedy_ci'][1]:.1f}]"]
            for k in ks:
                low, high = cell[f"pass@{k}_ci"]
                cells.append(f"{cell[f'pass@{k}']:.1f} [{low:.1f}, {high:.1f}]")
            lines.append(f"| {row} | {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--ckpt", default="", help="a checkpoint whose members are scored too")
    parser.add_argument("--samples", type=int, default=8, help="samples per problem (n)")
    parser.add_argument("--k", default="1,8", help="comma-separated k of pass@k, each <= n")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max_new_tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--out", default="", help="folder for heldout.json / heldout.md")
    add_world_flags(parser)
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    if max(ks) > args.samples:
        raise SystemExit(f"--k {args.k}: pass@k needs k <= --samples ({args.samples})")
    start, cpu = time.time(), cpu_seconds()
    import evaluate
    folder, data = world_base(args)
    if args.ckpt:
        with open(os.path.join(args.ckpt, "state.json")) as f:
            folder = json.load(f)["config"]["model"]
    items = evaluate.load_benchmark("tiny", data)
    engine, rows = load(folder, args.ckpt)
    result = {"model": folder, "ckpt": args.ckpt, "heldout": data, "n": len(items),
              "samples": args.samples, "temperature": args.temperature,
              "max_new_tokens": args.max_new_tokens, "rows": {}, "items": {}}
    for row, slot in rows.items():
        print(f"{row}: greedy, then {args.samples} samples per problem", file=sys.stderr,
              flush=True)
        greedy = verdicts(engine, slot, items, 1, 0.0, args.max_new_tokens, args.seed)[0]
        sampled = verdicts(engine, slot, items, args.samples, args.temperature,
                           args.max_new_tokens, args.seed)
        result["rows"][row] = summarize(items, greedy, sampled, ks)
        # per problem: greedy verdict and correct samples (paired comparisons later)
        result["items"][row] = {"greedy": greedy, "correct": [sum(s[i] for s in sampled)
                                                              for i in range(len(items))]}
    result["ids"] = [it["id"] for it in items]
    result["wall_s"] = round(time.time() - start, 1)
    result["cpu_s"] = round(cpu_seconds() - cpu, 1)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "heldout.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, "heldout.md"), "w") as f:
            f.write(markdown(result, ks))
    summary = {key: value for key, value in result.items() if key not in ("items", "ids")}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
