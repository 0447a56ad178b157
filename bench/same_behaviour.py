"""No behaviour change, proved (issue 25): the same seeded tiny runs on a reference checkout and on
this one give the same metrics.jsonl rows (wall-clock fields aside), the same samples.jsonl, and
bit-identical adapter and optimizer files in every checkpoint. Prints ONE JSON line:

  {"ref", "here", "runs": {name: {"metrics_rows", "metrics_same", "samples_same",
   "checkpoint_files", "files_same", "different": [...]}}, "update": {"same", "sha256"}, "same"}

    git worktree add /tmp/orig 4d178be && mkdir /tmp/orig/out && ln -s $PWD/out/.tiny /tmp/orig/out/
    python bench/same_behaviour.py --ref /tmp/orig            # ~15 minutes on 2 shared cores

The runs: PopuLoRA itself (matching, rewards, ratings, two evolution events, checkpoints), OpenSIR's
teacher reward with LEEPS's top-ups, and SOAR's teacher reward with its probe set. On the random
tiny model every response is a format error, so every reward of a step is equal and no run updates
an adapter (evolution alone changes them); the "update" check therefore also runs
train.train_member on one member with rewards that differ, in both checkouts, and compares the
adapter it leaves (sha256). The reference's runs are reused once finished (--fresh runs them
again); this checkout's always run.
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join("tests", "fixtures", "probe.jsonl")

# the smallest config that still runs every part of a step (tests/test_train.py's tiny_cfg)
COMMON = ["--model", "tiny", "--steps", "6", "--teachers", "2", "--students", "2",
          "--evolve_every", "3", "--save_every", "3", "--keep_checkpoints", "0",
          "--seed_archive", "identity", "--propose_per_task", "1", "--solve_samples", "2",
          "--min_problems", "2", "--references", "1", "--max_new_tokens", "12",
          "--lora_rank", "8", "--lora_alpha", "16", "--lora_targets", "q_proj,v_proj",
          "--samples_per_step", "2", "--micro_batch_tokens", "4096", "--engine", "hf",
          "--seed", "7"]
RUNS = {
    "populora": [],
    "opensir_leeps": ["--teacher_reward", "opensir", "--topup", "leeps"],
    "soar": ["--teacher_reward", "soar", "--soar_probe", PROBE],
}
# wall-clock fields of a metrics row: they differ between any two runs
CLOCK = ("time/", "tokens_per_s")

# One AdamW step of one member on rewards that differ: the update path the tiny runs never reach.
UPDATE = """
import hashlib, sys, torch
import population, train
base, tokenizer = population.load_base(sys.argv[1])
cfg = dict(train.config, lora_rank=8, lora_alpha=16, lora_targets="q_proj,v_proj", seed=0, lr=3e-2,
           micro_batch_tokens=256)
model, _ = population.init_population(base, tokenizer, cfg, ["student"])
optimizer = torch.optim.AdamW(population.trainable_params(model, "s0"), lr=cfg["lr"])
text = "User: what is 6 * 7?\\nAssistant: <think>"
prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
rewards = {" 42": 1.0, " 41": -0.5, " 7*6": -1.0}
for _ in range(3):
    sequences = []
    for text, reward in rewards.items():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        sequences.append(dict(prompt_ids=prompt, completion_ids=ids, reward=reward, role="student",
                              task="code_o"))
    train.train_member(model, "s0", optimizer, sequences, cfg)
digest = hashlib.sha256()
for key, value in sorted(population.get_adapter(model, "s0").items()):
    digest.update(key.encode())
    digest.update(value.contiguous().numpy().tobytes())
print(digest.hexdigest())
"""


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def without_clock(row):
    return {k: v for k, v in row.items() if not k.startswith(CLOCK)}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def checkpoint_files(out):
    """{relative path: sha256} of every adapter and optimizer file of every checkpoint."""
    files = {}
    for pattern in ("step_*/adapters/*/adapter_model.safetensors", "step_*/optim/*.pt"):
        for path in sorted(glob.glob(os.path.join(out, pattern))):
            files[os.path.relpath(path, out)] = sha256(path)
    return files


def run(tree, out, flags, model_cache, reuse):
    """train.py of checkout `tree` with `flags` into `out` (kept when finished and `reuse`)."""
    metrics = os.path.join(out, "metrics.jsonl")
    if reuse and os.path.exists(metrics) and len(read_jsonl(metrics)) == 6:
        return
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "train.py", *COMMON, *flags, "--out_dir", out,
               "--model_cache", model_cache]
    with open(out + ".log", "w") as log:
        subprocess.run(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT, check=True)


def compare(a, b):
    rows_a = read_jsonl(os.path.join(a, "metrics.jsonl"))
    rows_b = read_jsonl(os.path.join(b, "metrics.jsonl"))
    files_a, files_b = checkpoint_files(a), checkpoint_files(b)
    different = []
    for k, (x, y) in enumerate(zip(rows_a, rows_b)):
        x, y = without_clock(x), without_clock(y)
        for key in sorted(set(x) | set(y)):
            if x.get(key, "absent") != y.get(key, "absent"):
                different.append(f"metrics row {k} {key}: {x.get(key, 'absent')!r} != "
                                 f"{y.get(key, 'absent')!r}")
    for path in sorted(set(files_a) | set(files_b)):
        if files_a.get(path) != files_b.get(path):
            different.append(f"{path} differs")
    samples_same = (read_jsonl(os.path.join(a, "samples.jsonl"))
                    == read_jsonl(os.path.join(b, "samples.jsonl")))
    metrics_same = (len(rows_a) == len(rows_b)
                    and [without_clock(r) for r in rows_a] == [without_clock(r) for r in rows_b])
    return {"metrics_rows": len(rows_a), "metrics_same": metrics_same,
            "samples_same": samples_same, "checkpoint_files": len(files_a),
            "files_same": files_a == files_b, "different": different[:10]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the reference checkout (a git worktree)")
    parser.add_argument("--out", default="/tmp/same_behaviour", help="runs go under OUT/{ref,here}")
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated names of RUNS")
    parser.add_argument("--fresh", action="store_true", help="run the reference's runs again too")
    args = parser.parse_args()
    model_cache = os.path.join(ROOT, "out", ".tiny")
    trees = {"ref": os.path.abspath(args.ref), "here": ROOT}
    result = {"ref": trees["ref"], "here": ROOT, "runs": {}}
    for name in args.runs.split(","):
        for tag, tree in trees.items():
            os.makedirs(os.path.join(args.out, tag), exist_ok=True)
            reuse = tag == "ref" and not args.fresh
            run(tree, os.path.join(args.out, tag, name), RUNS[name], model_cache, reuse)
        a, b = (os.path.join(args.out, tag, name) for tag in trees)
        result["runs"][name] = compare(a, b)
    digests = {}
    for tag, tree in trees.items():
        folder = subprocess.run([sys.executable, "-c", "import sys, tinyworld; print(tinyworld."
                                 "model_folder('tiny', sys.argv[1]))", model_cache], cwd=tree,
                                capture_output=True, text=True, check=True).stdout.strip()
        digests[tag] = subprocess.run([sys.executable, "-c", UPDATE, folder], cwd=tree,
                                      capture_output=True, text=True, check=True).stdout.strip()
    result["update"] = {"same": digests["ref"] == digests["here"], "sha256": digests}
    checks = [r["metrics_same"] and r["samples_same"] and r["files_same"]
              for r in result["runs"].values()]
    result["same"] = all(checks) and result["update"]["same"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
