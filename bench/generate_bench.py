"""Generation throughput of a population vs a single member, on the tiny model, for each available engine.

Prints ONE JSON line: <engine>/mixed_tok_s (8 members, one mixed call), <engine>/single_tok_s (the same prompts,
all with one member), <engine>/ratio = mixed / single (issue 4 target for vllm: >= 0.8; the paper's 4T+4S
population runs at 1.31x the single agent's wall-clock thanks to multi-LoRA batching), and
<engine>/rss_mb_1, <engine>/rss_mb_8: resident memory of a process holding the model, the engine and 1 or 8
members after generating. Each (engine, population size) runs in its own subprocess so memory is not shared;
mixed and single calls alternate inside one process and the medians over --repeats are reported.

    python bench/generate_bench.py [--engines hf,vllm] [--prompts 64] [--new_tokens 64] [--repeats 3]
"""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process (docs/vllm.md)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported, else OpenMP fights the engine loop
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import argparse
import json
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ROLES = {1: ["teacher"], 8: ["teacher"] * 4 + ["student"] * 4}  # 4T+4S, the paper's main population


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def worker(args):
    """One (engine, population size): build, generate, time; print a JSON dict."""
    import torch
    import engines
    import population as P
    import tinyworld
    path = tinyworld.model_folder("tiny", args.cache_dir)
    base, tokenizer = P.load_base(path)
    cfg = dict(lora_rank=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, seed=0, max_model_len=1024,
               lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    model, members = P.init_population(base, tokenizer, cfg, ROLES[args.members])
    g = torch.Generator().manual_seed(0)
    for m in members:  # random adapters: zero-init B would let an engine skip work unnoticed
        P.set_adapter(model, m["name"], {k: torch.randn(v.shape, generator=g) * 0.1
                                         for k, v in P.get_adapter(model, m["name"]).items()})
    engine = engines.make_engine(args.worker, path, model, tokenizer, members, cfg)
    rng = random.Random(0)
    texts = ["".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(64, 256))) for _ in range(args.prompts)]
    calls = {"mixed": [(t, members[i % len(members)]["name"]) for i, t in enumerate(texts)],
             "single": [(t, members[0]["name"]) for t in texts]}
    engines.generate(engine, calls["single"][:4], 1.0, 1.0, 8, seed=0)  # warm-up (first-call allocations, adapter loads)
    rates = {k: [] for k in calls}
    for rep in range(args.repeats):
        for kind, requests in calls.items() if args.members > 1 else [("single", calls["single"])]:
            start = time.perf_counter()
            out = engines.generate(engine, requests, 1.0, 1.0, args.new_tokens, seed=rep)
            rates[kind].append(sum(len(o["completion_ids"]) for o in out) / (time.perf_counter() - start))
    result = {"rss_mb": round(rss_mb(), 1)}
    result.update({f"{k}_tok_s": round(statistics.median(v), 1) for k, v in rates.items() if v})
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--cache_dir", default=os.path.join(ROOT, "out", ".tiny"))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: engine of a child process
    parser.add_argument("--members", type=int, default=8, choices=sorted(ROLES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    line = {"model": "tiny", "prompts": args.prompts, "new_tokens": args.new_tokens, "rank": args.rank}
    for engine in args.engines.split(","):
        if engine == "vllm":
            try:
                import vllm  # noqa: F401
            except Exception as e:  # not installed here: report it in the line rather than fail
                line["vllm/skipped"] = repr(e)[:120]
                continue
        for n in (8, 1):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--members", str(n)]
            cmd += [f"--{k}={getattr(args, k)}" for k in ("prompts", "new_tokens", "repeats", "rank", "cache_dir")]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{engine} worker with {n} members failed:\n{run.stderr[-3000:]}")
            result = json.loads(run.stdout.strip().splitlines()[-1])
            line[f"{engine}/rss_mb_{n}"] = result["rss_mb"]
            if n == 8:
                line[f"{engine}/mixed_tok_s"] = result["mixed_tok_s"]
                line[f"{engine}/single_tok_s"] = result["single_tok_s"]
                line[f"{engine}/ratio"] = round(result["mixed_tok_s"] / result["single_tok_s"], 3)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
