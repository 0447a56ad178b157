"""
PopuLoRA (arXiv 2605.16727) on the AZR recipe (arXiv 2505.03335): N_T teacher and N_S student LoRA adapters on one
frozen code LLM. Each step teachers propose code_i / code_o / code_f problems, the sandbox keeps the valid ones, the
matched students attempt them, every adapter gets one task-relative REINFORCE++ update, TrueSkill rates every match,
and every `evolve_every` steps the weakest members are replaced by LoRA weight-space children of strong ones. The
step (SPEC §4), rewards, advantages and loss (SPEC §5) are written out here; verify.py (prompts, sandbox),
population.py (adapters, generation, ratings, checkpoints) and evolve.py (operators) hold the rest.

How to run (every config key is a flag, `--key value` or `--key=value`):
  python train.py --model tiny --steps 3                          # CPU smoke run, built-in random model
  python train.py                                                 # one GPU, the paper-scale defaults
  torchrun --standalone --nproc_per_node 8 train.py --teachers 4 --students 4
  python train.py --baseline                                      # AZR single agent, same per-adapter batches
  python train.py --seed_archive ../shared/azr_seeds/7b_coder_seed_io.jsonl --resume auto
  python train.py --plan --gpu_memory_gb 80                       # per-rank GPU memory plan, nothing loaded

Deliberate deviations from the paper and from AZR (keep this list honest):
1) The matched student's attempts are used both for the teacher's reward (its solve rate p) and for the student's
   own update. AZR samples 8 extra solver answers per proposal only to estimate learnability, throws them away and
   trains the solver on separate buffer problems; we waste no rollouts (SPEC §4).
2) TRR++ normalises per sequence, A = (r - mean) / (std + 1e-6) per (adapter, role, task) group (AZR's veRL whitens
   token-weighted). One optimizer step per step on fresh samples: PPO ratio 1, no clipping, KL, critic or reference.
3) A valid problem always solved pays its teacher 0, one never solved `teacher_reward_unsolved` (0: the paper's
   equation; AZR's code pays -0.5 for both). LoRA (rank 32, lr 1e-5) instead of full fine-tuning at lr 1e-6.
4) The archive keeps 16,384 problems per task type, evicting the oldest (AZR drops new ones once full). A student
   whose teacher made fewer than `min_problems` valid problems of a type is topped up with recent archive problems
   (they train the student, they do not score the teacher). A too long teacher prompt shows fewer references.
5) Sequences with advantage 0 are not forwarded in the update (no gradient; their tokens still count in the loss
   denominator), so `entropy/*` is over trained tokens only. A response the engine could not generate (its prompt
   leaves no room) gets no reward and no update; it is counted in `teacher/<m>/not_generated`.
6) Baseline: the single adapter "a0" plays itself; the self-match is logged, not rated. A teacher matched to several
   students (N_S > N_T) is paid on all their attempts. `--teachers 0`: students train on the seed archive alone.
7) Evolution happens at the start of every `evolve_every`-th step, before matchmaking, not after the update: every
   checkpoint (the one evaluate.py scores included) holds members that have trained, and the last step makes no
   children that nobody trains.
"""
import argparse
import contextlib
import datetime
import functools
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import evolve
import plan
import population
import verify

# -----------------------------------------------------------------------------
# config: every knob, one line, with its unit. Types come from the defaults; "" = auto/none, -1 = never.
config = dict(
    model="Qwen/Qwen2.5-Coder-7B",  # frozen base: hub id or local folder; "tiny" = built-in random model, no download
    teachers=4,                     # teacher adapters (propose problems); --teachers 1 --students 1 is 1T+1S
    students=4,                     # student adapters (solve them)
    baseline=False,                 # AZR single agent: one adapter "a0" plays teacher and student
    lora_rank=32,                   # r, the same for every member (evolution keeps it)
    lora_alpha=64,                  # LoRA scale alpha / r
    lora_dropout=0.0,               # dropout on the LoRA input
    lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",  # modules that get an adapter
    lr=1e-5,                        # AdamW learning rate, constant (SPEC §5)
    weight_decay=0.0,               # AdamW weight decay
    grad_clip=1.0,                  # max global gradient norm per member and step
    micro_batch_tokens=16384,       # padded tokens per forward/backward (gradient accumulation); lower first on OOM
    logprob_chunk=1024,             # completion tokens per vocabulary-projection chunk of the log-prob pass
    gradient_checkpointing=None,    # recompute layer activations in backward; None = on with CUDA, off on CPU
    steps=200,                      # training steps
    propose_per_task=16,            # proposals per teacher per task type per step
    solve_samples=8,                # attempts per valid problem by the matched student
    min_problems=4,                 # valid problems per (teacher, task type) below which the student is topped up
    references=6,                   # K archive problems shown to a code_i / code_o teacher
    temperature=1.0,                # sampling temperature for teachers and students
    top_p=1.0,                      # nucleus sampling
    max_prompt_tokens=6144,         # tokens; a longer teacher prompt shows fewer references
    max_new_tokens=4096,            # tokens per response
    teacher_reward_unsolved=0.0,    # teacher reward for a valid problem its student never solves (AZR code: -0.5)
    draw_margin=0.05,               # a solve rate within 0.5 +- margin is a draw (SPEC §6)
    validate_timeout=5.0,           # seconds per sandboxed run
    archive_cap=16384,              # problems kept per task type; the oldest are evicted
    seed_archive="",                # AZR seed JSONL files, comma-separated (snippet+input, or snippet+inputs+message)
    evolve_every=10,                # steps between evolution events; -1 = never
    evolve_frac=0.25,               # fraction of each role replaced per event
    crossover_prob=0.5,             # probability a child is a crossover (else a mutation)
    mutations="spectral_jitter,gauss_rel,component_resample,scale_jitter,rank_rotation,input_noise",  # enabled M1-M6
    crossovers="module_swap,layer_block_swap,delta_lincomb_svd,component_splice,aligned_factor_avg,core_ties,"
               "weighted_multi",  # enabled crossovers (SPEC §7; the controls copy_parent, linear_0_5 are off)
    engine="auto",                  # generation: vllm | hf | auto (vllm when importable and CUDA present)
    device="",                      # "" = cuda when available, else cpu
    dtype="",                       # "" = bfloat16 on GPU, float32 on CPU
    gpu_memory_utilization=0.4,     # share of GPU memory vLLM may take (training uses the rest); lower on OOM
    lora_dir="",                    # folder for the vLLM adapter sync; "" = /dev/shm if it has room, else out_dir
    dist_timeout_min=60,            # minutes a rank may wait in a collective before torchrun gives up
    plan=False,                     # print the per-rank GPU memory plan (no weights loaded) and exit
    gpu_memory_gb=0.0,              # GPU memory per rank for the plan; 0 = detect (needs a GPU)
    model_cache="out/.tiny",        # where the built-in `tiny` / `tiny-warm` bases are built once and reused
    out_dir="out",                  # metrics.jsonl, samples.jsonl, config.json, step_NNNNNN/ checkpoints
    save_every=10,                  # steps between checkpoints (the last step is always saved); -1 = only the last
    resume="",                      # "" = fresh, "auto" = newest checkpoint in out_dir, or a step_NNNNNN folder
    samples_per_step=4,             # problems (with one answer each) written to samples.jsonl per step
    wandb_project="",               # Weights & Biases project for the metrics.jsonl rows; "" = off
    wandb_run="",                   # wandb run name; "" = wandb's own
    seed=1337,                      # everything random derives from it
)

IDENTITY = "def f(a):\n    return a"  # AZR's minimal seed program (azr.md §5.2)
IDENTITY_F = dict(program=IDENTITY, message="Write a function that returns whatever you input",  # AZR's code_f seed
                  inputs=['"Hello world"', "1", "dict(a=1, b=2)", "(1.1, 1.2, 1.3)",
                          '"[[1, 0, 0], [0, 0, 0], [0, 0, 0]]"', "1001101100010001",
                          "[3, 1, 2]", "'abc'", "{'x': [1, 2]}", "None"])  # + 4 of ours: verify.py wants 10
BOX = {"ast_depth": 20, "cyclomatic": 20, "loc": 60, "variables": 30}  # coverage box: descriptor / max, clipped

def str2bool(text):
    if text.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("1", "true", "yes")

def parse_config(defaults, argv):
    """--key value / --key=value for every config key, typed like its default; a bool also as a bare --key, and a
    None default is an optional bool (None = decided at start-up, e.g. by the device)."""
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], allow_abbrev=False)
    for key, value in defaults.items():
        if value is None or isinstance(value, bool):
            kind = dict(type=str2bool, nargs="?", const=True)
        else:
            kind = dict(type=type(value))
        parser.add_argument(f"--{key}", default=value, **kind)
    # unknown flags and bad values: argparse prints the reason and exits (2)
    return vars(parser.parse_args(argv))


def check_config(cfg, roles):
    """Everything cheap that can be wrong, before any model or process group exists: one clear message each.
    Returns the checkpoint folder to resume from, or None."""
    for key in ("steps", "propose_per_task", "solve_samples", "micro_batch_tokens", "logprob_chunk",
                "archive_cap", "max_new_tokens", "dist_timeout_min"):
        if cfg[key] < 1:
            raise SystemExit(f"--{key} {cfg[key]}: must be >= 1")
    if not cfg["baseline"]:
        if cfg["students"] < 1:
            raise SystemExit(f"--students {cfg['students']}: must be >= 1 (or --baseline: one adapter plays "
                             "both roles)")
        if cfg["teachers"] < 0:
            raise SystemExit(f"--teachers {cfg['teachers']}: must be >= 0 (0: students train on the seed "
                             "archive alone)")
    if cfg["gpu_memory_gb"] < 0:
        raise SystemExit(f"--gpu_memory_gb {cfg['gpu_memory_gb']}: must be >= 0 (0 = detect)")
    for key, allowed in (("engine", ("auto", "hf", "vllm")), ("dtype", ("", "float32", "bfloat16", "float16"))):
        if cfg[key] not in allowed:
            raise SystemExit(f"--{key} {cfg[key]!r}: expected one of {list(allowed)}")
    for key, allowed in (("mutations", evolve.MUTATIONS), ("crossovers", evolve.CROSSOVERS)):
        if any(name.strip() not in allowed for name in cfg[key].split(",")):
            raise SystemExit(f"--{key} {cfg[key]!r}: expected names of {list(allowed)}")
    try:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        tempfile.TemporaryFile(dir=cfg["out_dir"]).close()
    except OSError as e:
        raise SystemExit(f"--out_dir {cfg['out_dir']!r} is not writable: {e}")
    resume = population.latest_checkpoint(cfg["out_dir"]) if cfg["resume"] == "auto" else cfg["resume"]
    try:  # a checkpoint of another population or base model stops the run here, naming the difference
        with open(os.path.join(resume, "state.json")) if resume else contextlib.nullcontext() as f:
            saved = json.load(f) if resume else {"config": cfg, "members": [{"role": r} for r in roles]}
        saved = dict(saved["config"], roles=[m["role"] for m in saved["members"]])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--resume {resume!r}: not a readable checkpoint folder ({e})")
    for key, ours in [("roles", roles)] + [(key, cfg[key]) for key in ("model", "lora_rank", "lora_targets")]:
        if saved.get(key) != ours:
            raise SystemExit(f"--resume {resume}: the checkpoint has {key} {saved.get(key)!r} (a population of "
                             f"{len(saved['roles'])}), this run has {ours!r} (a population of {len(roles)})")
    return resume


# ----------------------------------------------------------------------------- small helpers

def print0(*args):
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args, flush=True)

def derive_seed(*parts):  # 31-bit seed from (seed, step, rank, purpose): reproducible after a resume, no state
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little") >> 1

def mean(values):
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None  # None (null in JSON) = nothing to average this step

def broadcast_object(obj, src, world):  # obj from rank src on every rank (collective: every rank calls it)
    box = [obj]
    if world > 1:
        dist.broadcast_object_list(box, src=src)
    return box[0]

def split_run(fn, items, rank, world):
    """SPEC §9: fn on this rank's share items[rank::world], the results gathered back into item order on every rank
    (collective: every rank calls it, with an empty share too)."""
    parts = [fn(items[rank::world]) if items[rank::world] else []] * world
    if world > 1:
        dist.all_gather_object(parts, parts[rank])
    merged = [None] * len(items)
    for r, part in enumerate(parts):
        merged[r::world] = part
    return merged

def run_verify(fn, jobs, timeout):
    """[(task, item)] -> verify.validate / verify.grade results in order; one batched sandbox call per task type."""
    results = [None] * len(jobs)
    for task in verify.TASKS:
        index = [i for i, (t, _) in enumerate(jobs) if t == task]
        for i, result in zip(index, fn(task, [jobs[i][1] for i in index], timeout=timeout) if index else []):
            results[i] = result
    return results

def broadcast_member(model, name, src, world):
    """Adapter `name` from rank src to every rank as one flat tensor (collective)."""
    params = population.trainable_params(model, name)
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(params)
        if world > 1:
            dist.broadcast(flat, src=src)
            torch.nn.utils.vector_to_parameters(flat, params)

@functools.lru_cache(maxsize=1)
def cvt_centroids(cells=4096, iterations=5):
    """The fixed 4096-cell CVT of the unit box over the 4 complexity descriptors (SPEC §10): Lloyd's k-means over
    uniform samples with a fixed seed, computed once per process (a few seconds, deterministic)."""
    samples = torch.rand(cells * 4, len(BOX), generator=torch.Generator().manual_seed(0))
    centroids = samples[:cells].clone()
    for _ in range(iterations):
        nearest = torch.cat([torch.cdist(chunk, centroids).argmin(1) for chunk in samples.split(4096)])
        counts = torch.bincount(nearest, minlength=cells)[:, None]
        sums = torch.zeros_like(centroids).index_add_(0, nearest, samples)
        centroids = torch.where(counts > 0, sums / counts.clamp(min=1), centroids)
    return centroids

def describe(problems):
    """Store each problem's complexity descriptors (verify.complexity) and its CVT cell in the problem."""
    for p in problems:
        p["complexity"] = verify.complexity(p["program"])
        point = torch.tensor([[min(p["complexity"][k] / top, 1.0) for k, top in BOX.items()]])  # box-normalised
        p["cell"] = int(torch.cdist(point, cvt_centroids()).argmin())

def problem_core(problem):  # what the verifier and the prompts need of an archive problem (no bookkeeping keys)
    return {k: v for k, v in problem.items() if k not in ("step", "cell", "complexity")}

def as_problem(task, proposal, result):
    """The proposal with what the verifier made of it: its normalised program, its output(s) (repr strings, for the
    prompts) and the gold encoding(s) grading compares against (every result key but the verdict)."""
    return dict(proposal, **{k: v for k, v in result.items() if k not in ("valid", "reason")})

def pick_recent(problems, step, need, rng):
    """Top-up problems like AZR's `max_new` mix: those added at the previous step first (the seeds count as that at
    step 0), then uniform draws over everything older than this step."""
    older = [i for i, p in enumerate(problems) if p["step"] < step]
    picks = rng.sample(recent := [i for i in older if problems[i]["step"] >= step - 1], max(0, min(need, len(recent))))
    return picks + [rng.choice(older) for _ in range(need - len(picks))] if older else []

@contextlib.contextmanager
def timed(times, key):
    start = time.time()
    yield
    times[key] += time.time() - start


# ----------------------------------------------------------------------------- the algorithm (SPEC §5)

def trr_advantages(rewards, groups):
    """TRR++ (AZR §3.3.5): A_i = (r_i - mean) / (std + 1e-6) within each group (one adapter's (role, task) set), std
    unbiased. A group of one, or with all rewards equal, gets A = 0: an all-equal step trains nothing."""
    advantages = [0.0] * len(rewards)
    for key in set(groups):
        index = [i for i, g in enumerate(groups) if g == key]
        r = torch.tensor([rewards[i] for i in index], dtype=torch.float64)
        for i, a in zip(index, ((r - r.mean()) / (r.std() + 1e-6)).tolist() if len(index) > 1 and r.std() > 0 else []):
            advantages[i] = a
    return advantages

def pg_loss(logp, mask, advantages, total_tokens):
    """Token-level policy gradient (SPEC §5): loss = -sum_i A_i sum_t log pi(y_it) / sum_i |y_i|. logp, mask [B, T]
    over one micro-batch's completion tokens, advantages [B]; total_tokens = sum_i |y_i| over the member's WHOLE
    batch, so the micro-batch losses add up to the full loss (gradient accumulation needs no rescaling)."""
    return -(advantages[:, None] * logp * mask).sum() / max(total_tokens, 1)

def student_reward(correct, well_formed):
    """AZR's solver reward (SPEC §4.6): correct 1, well-formed but wrong -0.5, format error -1."""
    if correct:
        return 1.0
    if well_formed:
        return -0.5
    return -1.0


def teacher_reward(valid, solve_rate, unsolved):
    """The proposer reward (SPEC §4.6, deviation 3) for one proposal: invalid or badly formatted -1; a valid problem
    its matched student solves at rate p pays 1 - p if 0 < p < 1, 0 if p = 1 (too easy) and `unsolved` if p = 0
    (the paper's equation: 0; AZR's code: -0.5)."""
    if not valid:
        return -1.0
    if solve_rate == 1:
        return 0.0
    if solve_rate == 0:
        return unsolved
    return 1.0 - solve_rate


def pack_micro_batches(sequences, budget):
    """Micro-batches of at most `budget` padded tokens (batch size x its longest prompt + completion), over
    sequences sorted by length so similar lengths share a batch. A sequence longer than the budget gets a batch of
    its own. The budget, not a sequence count, bounds activation memory (SPEC §5)."""
    batches, batch, longest = [], [], 0
    for s in sorted(sequences, key=lambda s: len(s["prompt_ids"]) + len(s["completion_ids"])):
        length = len(s["prompt_ids"]) + len(s["completion_ids"])
        if batch and (len(batch) + 1) * max(longest, length) > budget:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(s)
        longest = max(longest, length)
    if batch:
        batches.append(batch)
    return batches


def rank_share(sequences, rank, world):
    """SPEC §9: this rank's share of one member's sequences, balanced by tokens: longest first, each to the rank
    with the fewest tokens so far (ties: the lower rank). Every rank computes the same split."""
    load = [0] * world
    shares = [[] for _ in range(world)]
    order = sorted(range(len(sequences)),
                   key=lambda i: -(len(sequences[i]["prompt_ids"]) + len(sequences[i]["completion_ids"])))
    for i in order:
        r = load.index(min(load))
        shares[r].append(sequences[i])
        load[r] += len(sequences[i]["prompt_ids"]) + len(sequences[i]["completion_ids"])
    return shares[rank]


def sum_over_ranks(params, numbers, world):
    """Sum every rank's gradients of `params` and the float `numbers` (loss, entropy, token counts) in ONE
    all_reduce (a collective: every rank calls it for every member it trains, in the same order). A parameter
    this rank gave no gradient contributes zeros. Returns the summed numbers; the gradients are replaced."""
    if world == 1:
        return numbers
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.flatten().float() for g in grads] + [torch.tensor(numbers, device=grads[0].device)])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p).to(p.dtype)
        offset += p.numel()
    return flat[offset:].tolist()


def train_member(model, name, optimizer, sequences, cfg, rank=0, world=1):
    """One AdamW step of member `name` on its sequences {"prompt_ids", "completion_ids", "reward", "role",
    "task"} (the member's WHOLE batch, identical on every rank): TRR++ advantages over the whole batch, this
    rank's token-balanced share forwarded in micro-batches of `micro_batch_tokens`, gradients summed over ranks,
    global grad-norm clip, and the same AdamW step on every rank (SPEC §5, §9)."""
    advantages = trr_advantages([s["reward"] for s in sequences], [(s["role"], s["task"]) for s in sequences])
    sequences = [dict(s, advantage=a) for s, a in zip(sequences, advantages)]
    # the loss denominator: the member's completion tokens over all ranks, zero-advantage ones included
    total_tokens = sum(len(s["completion_ids"]) for s in sequences)
    # deviation 5: a zero-advantage sequence has no gradient, so it is not forwarded
    work = [s for s in sequences if s["advantage"] != 0 and s["completion_ids"]]
    stats = {"loss": 0.0, "entropy": {"teacher": 0.0, "student": 0.0}, "tokens": {"teacher": 0, "student": 0},
             "grad_norm": 0.0}
    if not work:
        # the same on every rank: no collective, no AdamW step (the moments are left as they are)
        return stats
    params = population.trainable_params(model, name)
    optimizer.zero_grad(set_to_none=True)
    # `name` stays active through backward: gradient checkpointing re-runs the forward during backward
    with population.active(model, name):
        for batch in pack_micro_batches(rank_share(work, rank, world), cfg["micro_batch_tokens"]):
            logp, mask, entropy = population.token_logprobs(
                model, name, [s["prompt_ids"] for s in batch], [s["completion_ids"] for s in batch],
                chunk=cfg["logprob_chunk"])  # [B, T] each
            batch_advantages = torch.tensor([s["advantage"] for s in batch], dtype=logp.dtype,
                                            device=logp.device)
            loss = pg_loss(logp, mask, batch_advantages, total_tokens)
            loss.backward()
            stats["loss"] += loss.item()
            for row, s in enumerate(batch):
                stats["entropy"][s["role"]] += entropy[row].sum().item()
                stats["tokens"][s["role"]] += int(mask[row].sum().item())
    numbers = [stats["loss"], stats["entropy"]["teacher"], stats["entropy"]["student"],
               stats["tokens"]["teacher"], stats["tokens"]["student"]]
    numbers = sum_over_ranks(params, numbers, world)
    stats["loss"] = numbers[0]
    stats["entropy"] = {"teacher": numbers[1], "student": numbers[2]}
    stats["tokens"] = {"teacher": int(round(numbers[3])), "student": int(round(numbers[4]))}
    # the norm before clipping, of the summed gradient: the same on every rank
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"]))
    optimizer.step()
    # free this member's gradients before the next member's backward (one member's gradients at a time)
    optimizer.zero_grad(set_to_none=True)
    return stats


# ----------------------------------------------------------------------------- archive, evolution, checkpoints, logs

def seed_problems(cfg, rank, world):
    """Start-up archive: AZR's identity program, or the --seed_archive problems (a broken line stops the run naming
    its number) re-validated in the sandbox, invalid ones dropped and counted. Code_i/o seeds go into both archives."""
    pairs, induction = [dict(program=IDENTITY, input='"Hello world"')], [dict(IDENTITY_F)]
    if cfg["seed_archive"]:
        pairs, induction = [], []
        # several files, comma-separated: AZR seeds code_i/code_o and code_f from separate files
        for path in [p.strip() for p in cfg["seed_archive"].split(",") if p.strip()]:
            number = 0
            try:
                with open(path) as f:
                    for number, line in enumerate(f, 1):
                        if not line.strip():
                            continue
                        # AZR's snippets already hold their imports
                        row = json.loads(line)
                        program = row.get("snippet") or row["program"]
                        if "inputs" in row:
                            induction.append(dict(program=program, inputs=[str(x) for x in row["inputs"]],
                                                  message=str(row["message"])))
                        else:
                            pairs.append(dict(program=program, input=str(row["input"])))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise SystemExit(f"--seed_archive {path!r}: {e!r} at line {number}; expected JSON lines with "
                                 "snippet + input, or snippet + inputs + message (AZR's seed format)")
    jobs = [("code_o", p) for p in pairs] + [("code_f", p) for p in induction]
    archive = {task: [] for task in verify.TASKS}
    for (task, p), r in zip(jobs, split_run(lambda share: run_verify(verify.validate, share, cfg["validate_timeout"]),
                                            jobs, rank, world)):
        for t in (("code_i", "code_o") if task == "code_o" else ("code_f",)) if r["valid"] else ():
            archive[t].append(dict(as_problem(task, p, r), step=-1))
    describe([p for problems in archive.values() for p in problems])  # (the cap applies from the first step on)
    kept = len(archive["code_o"]) + len(archive["code_f"])
    print0(f"seed archive: {len(archive['code_o'])}/{len(pairs)} code_i/code_o and {len(archive['code_f'])}/"
           f"{len(induction)} code_f seeds valid; {len(jobs) - kept} dropped")
    if not archive["code_o"]:
        raise SystemExit("no valid code_i/code_o seed program: teachers would have nothing to build on")
    return archive

def evolve_population(model, members, optimizers, make_optimizer, cfg, step, next_id, rank, world):
    """SPEC §7: rank 0 plans the children (evolve.replacement_step) and writes them into their slots; the plan and
    the children's weights go to every rank (the only weight broadcast of the run). Every rank holds every
    member's optimizer state (SPEC §9), so each rank resets a child's state, or copies it per module from its
    donor parent, on its own."""
    records = None
    if rank == 0:
        adapters = {m["name"]: population.get_adapter(model, m["name"]) for m in members}
        generator = torch.Generator().manual_seed(derive_seed(cfg["seed"], step, "evolve"))
        records = evolve.replacement_step(members, adapters, cfg, generator, step, next_id)
        for r in records:
            population.set_adapter(model, r["name"], r.pop("adapter"))
            r["reason"] = r.pop("info").get("reason", "")
    records = broadcast_object(records, 0, world)
    # donors' states before any child's slot is reset (a donor may itself be replaced in this event)
    donors = set()
    for r in records:
        donors |= {r["copy_optimizer_from"], *(r["optimizer_donors"] or {}).values()}
    states = {d: optimizers[d].state_dict() for d in donors if d}
    # parameter order of every member's optimizer
    keys = list(population.get_adapter(model, members[0]["name"]))
    for r in records:
        broadcast_member(model, r["name"], 0, world)
        optimizers[r["name"]] = make_optimizer(r["name"])
        module_donor = r["optimizer_donors"] or {}
        copied = {}
        for k, key in enumerate(keys):
            donor = module_donor.get(key.rsplit(".lora_", 1)[0], r["copy_optimizer_from"])
            if donor and k in states[donor]["state"]:
                # an own copy: the child's moments must not alias the donor's
                copied[k] = {n: v.clone() if torch.is_tensor(v) else v for n, v in states[donor]["state"][k].items()}
        if copied:
            optimizers[r["name"]].load_state_dict(dict(optimizers[r["name"]].state_dict(), state=copied))
        member = next(m for m in members if m["name"] == r["name"])
        event = {k: r[k] for k in ("step", "id", "parents", "parent_names", "operator", "kind", "fallback", "reason")}
        member.update(id=r["id"], mu=r["mu"], sigma=r["sigma"], lineage=member["lineage"] + [event])
    return records, max([next_id] + [r["id"] + 1 for r in records])


def step_metrics(step, members, proposals, attempts, outcomes, archive, stats, records):
    """The metrics.jsonl row of SPEC §10, per member and aggregate; None (null) = nothing to average this step."""
    row = {"step": step}
    for m in [None] + members:  # None = the aggregate over the whole population
        pre, name = (f"{m['name']}/" if m else ""), m and m["name"]
        props = [p for p in proposals if m is None or p["teacher"] == name] if not m or m["role"] != "student" else None
        atts = [a for a in attempts if m is None or a["student"] == name] if not m or m["role"] != "teacher" else None
        if props is not None:
            # a response the engine could not generate is neither a format error nor rewarded
            generated = [p for p in props if not p["gen"]["error"]]
            row[f"teacher/{pre}format_rate"] = mean(p["parsed"] is not None for p in generated)
            row[f"teacher/{pre}reward"] = mean(p["reward"] for p in generated)
            row[f"teacher/{pre}not_generated"] = len(props) - len(generated)
            solved = [p["solve_rate"] for p in props if p["valid"] and p["solve_rate"] is not None]
            row[f"teacher/{pre}difficulty"] = mean(1 - rate for rate in solved)
            row.update({f"teacher/{pre}valid_rate/{t}": mean(p["valid"] for p in props if p["task"] == t)
                        for t in verify.TASKS})
        if atts is not None:
            generated = [a for a in atts if not a["gen"]["error"]]
            row[f"student/{pre}format_rate"] = mean(a["answer"] is not None for a in generated)
            row[f"student/{pre}reward"] = mean(a["reward"] for a in generated)
            row.update({f"student/{pre}solve_rate/{t}": mean(a["correct"] for a in atts if a["task"] == t)
                        for t in verify.TASKS})
        if m:
            row.update({f"rating/{name}/mu": m["mu"], f"rating/{name}/sigma": m["sigma"], f"member/{name}/id": m["id"],
                        f"loss/{name}": stats[name]["loss"], f"grad_norm/{name}": stats[name]["grad_norm"]})
    for t, s, rate, outcome in outcomes:
        row[f"match/{t}/{s}/solve_rate"], row[f"match/{t}/{s}/outcome"] = rate, outcome
    row.update({f"complexity/{k}": mean(p["problem"]["complexity"][k] for p in proposals if p["valid"]) for k in BOX})
    row.update({f"archive/size/{task}": len(archive[task]) for task in verify.TASKS})
    row["archive/coverage"] = len({p["cell"] for ps in archive.values() for p in ps}) / len(cvt_centroids())
    for role, items in (("teacher", proposals), ("student", attempts)):
        row[f"response_len/{role}"] = mean(len(x["gen"]["completion_ids"]) for x in items)
        tokens = sum(s["tokens"][role] for s in stats.values())
        row[f"entropy/{role}"] = sum(s["entropy"][role] for s in stats.values()) / tokens if tokens else None
    for r in records:
        row.update({f"evolve/{r['name']}/parents": r["parent_names"], f"evolve/{r['name']}/operator": r["operator"]})
    return row

def step_samples(step, proposals, attempts, count):
    """A few whole problems with one answer each, valid ones first, plus one top-up problem (so a step without
    valid proposals still shows student answers): RL bugs show in the text."""
    pairs = [(p, (p["attempts"] or [None])[0]) for p in sorted(proposals, key=lambda p: not p["valid"])[:count]]
    pairs += [(None, a) for a in attempts if a["proposal"] is None][:min(count, 1)]
    return [{"step": step, "teacher": p and p["teacher"], "task": (p or a)["task"], "valid": p and p["valid"],
             "teacher_response": p and p["response"], "reason": p and p["reason"], "problem": (p or a)["problem"] and
             problem_core((p or a)["problem"]), "student": a and a["student"], "student_response": a and a["response"],
             "answer": a and a["answer"], "correct": a and a["correct"]} for p, a in pairs]

def write_lines(path, rows):
    with open(path, "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def setup_distributed(cfg):
    """torchrun sets RANK / WORLD_SIZE / LOCAL_RANK (plain python: rank 0 of 1). Returns (rank, world, device).
    nccl on GPU, gloo on CPU (so the CPU tests run the multi-process path); the timeout is a config key because a
    7B step can keep ranks apart for longer than the default 10 minutes between collectives."""
    ddp = "RANK" in os.environ
    rank, world = 0, 1
    if ddp:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = cfg["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        torch.cuda.set_device(device)
    if ddp:
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=cfg["dist_timeout_min"]))
    return rank, world, device


def start_logs(cfg, paths, start, world, resume):
    """Rank 0: drop the metrics/samples lines after the checkpoint a resumed run continues from, save the
    resolved config and the git commit, open wandb if asked for (lazy import). Returns the wandb run or None."""
    for path in paths.values():
        kept = []
        if os.path.exists(path):
            kept = [line for line in open(path) if line.endswith("\n") and json.loads(line)["step"] < start]
        with open(path + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(path + ".tmp", path)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    with open(os.path.join(cfg["out_dir"], "config.json"), "w") as f:
        json.dump({"config": cfg, "world": world, "resumed_from": resume, "git_commit": commit}, f, indent=1)
    if not cfg["wandb_project"]:
        return None
    import wandb
    return wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run"] or None, config=cfg,
                      dir=cfg["out_dir"], resume="allow")


def step_line(step, cfg, row, started, first_step):
    """The per-step console line: fixed fields, then an ETA from the mean step time of this process."""
    fields = [f"step {step + 1}/{cfg['steps']}"]
    for key in ("teacher/reward", "student/reward", "archive/coverage", "time/step"):
        if row.get(key) is not None:
            fields.append(f"{key} {row[key]:.4g}")
    done = step + 1 - first_step
    left = (time.time() - started) / done * (cfg["steps"] - step - 1)
    fields.append(f"eta {left / 3600:.0f}h{left % 3600 / 60:02.0f}m")
    return " | ".join(fields)


def main(cfg):
    # ---- PLUMBING: cheap checks first, then the memory plan, then processes and models
    if cfg["baseline"]:
        roles = ["both"]
    else:
        roles = ["teacher"] * cfg["teachers"] + ["student"] * cfg["students"]
    resume = check_config(cfg, roles)
    if cfg["plan"]:
        # print the per-rank memory plan and stop: nothing is loaded, no GPU needed
        memory = plan.memory_plan(cfg, roles)
        print(plan.table(memory))
        print(json.dumps(memory))
        return memory
    rank, world, device = setup_distributed(cfg)
    dtype = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    checkpointing = cfg["gradient_checkpointing"]
    if checkpointing is None:
        checkpointing = device.startswith("cuda")
    if device.startswith("cuda"):
        # before loading 15 GB: stop with the plan's table when this configuration cannot fit
        plan.check_fits(dict(cfg, dtype=dtype, gradient_checkpointing=checkpointing), roles)
    # decisions (matches, references, top-ups) are drawn on rank 0 only and broadcast
    rng = random.Random(cfg["seed"])
    # the seed archive before the (slow) model: a bad seed file fails fast
    archive = None if resume else seed_problems(cfg, rank, world)

    # ---- population: frozen base + one LoRA adapter per member, identical on every rank
    try:  # every rank loads (the tiny build is atomic, hub downloads lock their files)
        base, tokenizer, model_path = population.load_base(cfg["model"], dtype, device, cfg["model_cache"])
    except (OSError, ValueError) as e:
        raise SystemExit(f"--model {cfg['model']!r}: cannot load it ({type(e).__name__}: {e})")
    # identical on every rank: every member's initialisation is seeded by (seed, slot)
    model, members = population.init_population(base, tokenizer, cfg, roles)
    if checkpointing:
        # activations of one layer at a time; population.active keeps the member's adapter on through backward
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # the HF engine switches to eval for generation and back

    def make_optimizer(name):  # SPEC §5: AdamW, constant lr; every rank holds every member's state (SPEC §9)
        return torch.optim.AdamW(population.trainable_params(model, name), lr=cfg["lr"], betas=(0.9, 0.999),
                                 weight_decay=cfg["weight_decay"])
    optimizers = {m["name"]: make_optimizer(m["name"]) for m in members}
    start, next_id = 0, len(members)
    if resume:
        try:
            # every rank reads the same checkpoint: weights, optimizer states, ratings, RNG states
            state, archive = population.load_checkpoint(resume, model, members, optimizers)
        except ValueError as e:
            raise SystemExit(f"--resume: {e}")
        start, next_id = state["step"], state["next_id"]
        version, internal, gauss = state["decisions_rng"]
        rng.setstate((version, tuple(internal), gauss))
    try:
        engine = population.make_engine(cfg["engine"], model_path, model, tokenizer, members, dict(cfg, dtype=dtype))
    except OSError as e:
        raise SystemExit(f"--engine {cfg['engine']}: {e}")
    paths = {name: os.path.join(cfg["out_dir"], f"{name}.jsonl") for name in ("metrics", "samples")}
    wandb_run = start_logs(cfg, paths, start, world, resume) if rank == 0 else None
    print0(f"{[m['name'] for m in members]} on {world} rank(s), {device}, {dtype}, {engine['kind']} engine, "
           f"gradient checkpointing {'on' if checkpointing else 'off'}, steps {start}..{cfg['steps']}")
    started = time.time()

    for step in range(start, cfg["steps"]):
        t_step = time.time()
        times = dict.fromkeys(("generate", "verify", "train", "evolve", "checkpoint"), 0.0)
        # e.g. dropout: a function of (step, rank), also after a resume
        torch.manual_seed(derive_seed(cfg["seed"], step, rank, "torch"))

        # ---- ALGO 9: evolution every evolve_every steps (SPEC §7), at the START of the step: every checkpoint
        # (saved at the end of a step) then holds members that have trained, and the last step never makes
        # children nobody trains (deviation 7). A collective: true on every rank.
        records = []
        if cfg["evolve_every"] > 0 and step > 0 and step % cfg["evolve_every"] == 0:
            with timed(times, "evolve"):
                records, next_id = evolve_population(model, members, optimizers, make_optimizer, cfg, step,
                                                     next_id, rank, world)
                population.sync_adapters(engine, model, [r["name"] for r in records], 2 * step)
        teachers = [m for m in members if m["role"] in ("teacher", "both")]
        students = [m for m in members if m["role"] in ("student", "both")]

        def generate(requests, purpose):  # ONE batched call per phase, split over ranks (SPEC §9)
            with timed(times, "generate"):
                seed = derive_seed(cfg["seed"], step, rank, purpose)  # reproducible, also after a resume
                return split_run(lambda share: population.generate(engine, share, cfg["temperature"], cfg["top_p"],
                                                                   cfg["max_new_tokens"], seed), requests, rank, world)
        def check(fn, jobs):  # batched sandbox calls (validate or grade), split over ranks
            with timed(times, "verify"):
                return iter(split_run(lambda share: run_verify(fn, share, cfg["validate_timeout"]), jobs, rank, world))

        # ---- ALGO 1: matchmaking (PFSP over TrueSkill, SPEC §4.1) and the references each teacher sees: rank 0
        slots = [(t["name"], task) for t in teachers for task in verify.TASKS for _ in range(cfg["propose_per_task"])]
        io = archive["code_i"] + archive["code_o"]  # a code_f teacher gets one program from code_i U code_o
        decisions = None
        if rank == 0:
            if cfg["baseline"]:
                matches = [(members[0]["name"],) * 2]
            elif not teachers:
                # students only (a fixed problem pool): no matches, every student is topped up from the archive
                matches = [(None, s["name"]) for s in students]
            else:
                matches = population.matchmake(teachers, students, rng)
            shown = []
            for _, task in slots:
                if task == "code_f":
                    shown.append([rng.randrange(len(io))])
                else:
                    shown.append(rng.sample(range(len(archive[task])), min(cfg["references"], len(archive[task]))))
            decisions = dict(matches=matches, shown=shown)
        decisions = broadcast_object(decisions, 0, world)

        # ---- ALGO 2: propose: every teacher x task type x propose_per_task, one batched generation
        proposals, requests = [], []
        for (teacher, task), shown in zip(slots, decisions["shown"]):
            program = problem_core(io[shown[0]])["program"] if task == "code_f" else None
            references = [] if program else [problem_core(archive[task][i]) for i in shown]
            prompt = verify.teacher_prompt(task, references, program)
            while references and len(tokenizer(prompt)["input_ids"]) > cfg["max_prompt_tokens"]:
                references.pop()  # deviation 4: fewer references rather than a truncated prompt
                prompt = verify.teacher_prompt(task, references, program)
            proposals.append(dict(teacher=teacher, member=teacher, role="teacher", task=task, program=program,
                                  attempts=[]))
            requests.append((prompt, teacher))
        for p, out in zip(proposals, generate(requests, "propose")):
            p.update(gen=out, response=out["text"],
                     parsed=None if out["error"] else verify.parse_teacher(p["task"], out["text"]))

        # ---- ALGO 3: validate in the sandbox (batched); valid problems join the archive (cap, oldest evicted)
        results = check(verify.validate, [(p["task"], dict(p["parsed"], program=p["program"]) if p["program"]
                                           else p["parsed"]) for p in proposals if p["parsed"] is not None])
        for p in proposals:
            r = next(results) if p["parsed"] is not None else {"valid": False, "reason": "format error"}
            if p["gen"]["error"]:
                r = {"valid": False, "reason": "not generated: " + p["gen"]["error"]}
            p.update(valid=r["valid"], reason=r["reason"],
                     problem=dict(as_problem(p["task"], p["parsed"], r), step=step) if r["valid"] else None)
        describe([p["problem"] for p in proposals if p["valid"]])
        for task in verify.TASKS:
            archive[task] += [p["problem"] for p in proposals if p["valid"] and p["task"] == task]
            del archive[task][:max(0, len(archive[task]) - cfg["archive_cap"])]

        # ---- ALGO 4: solve: each match's student attempts each valid problem of its teacher solve_samples times; a
        # teacher with < min_problems valid of a type gets its student topped up from the archive (rank 0 picks)
        valid_of = {(t["name"], task): [p for p in proposals if p["valid"] and p["teacher"] == t["name"]
                                        and p["task"] == task] for t in teachers for task in verify.TASKS}
        topup = None
        if rank == 0:
            topup = {}
            for i, (teacher, _) in enumerate(decisions["matches"]):
                for task in verify.TASKS:
                    need = cfg["min_problems"] - len(valid_of.get((teacher, task), []))
                    topup[(i, task)] = pick_recent(archive[task], step, need, rng)
        topup = broadcast_object(topup, 0, world)
        attempts = []
        for i, (teacher, student) in enumerate(decisions["matches"]):
            for task in verify.TASKS:
                problems = [(p["problem"], p) for p in valid_of.get((teacher, task), [])]
                problems += [(archive[task][j], None) for j in topup[(i, task)]]
                for problem, proposal in problems:
                    for _ in range(cfg["solve_samples"]):
                        attempts.append(dict(student=student, member=student, role="student", teacher=teacher,
                                             task=task, problem=problem, proposal=proposal))
        requests = [(verify.student_prompt(a["task"], problem_core(a["problem"])), a["student"]) for a in attempts]
        for a, out in zip(attempts, generate(requests, "solve")):
            a.update(gen=out, response=out["text"],
                     answer=None if out["error"] else verify.parse_student(a["task"], out["text"]))
            if a["proposal"] is not None:
                a["proposal"]["attempts"].append(a)

        # ---- ALGO 5: grade every well-formed attempt in the sandbox (batched)
        grades = check(verify.grade, [(a["task"], dict(problem_core(a["problem"]), answer=a["answer"]))
                                      for a in attempts if a["answer"] is not None])
        for a in attempts:
            a["correct"] = a["answer"] is not None and bool(next(grades)["correct"])

        # ---- ALGO 6: rewards (AZR values, SPEC §4.6); a response the engine could not generate (prompt too long)
        # gets no reward and no update: it is nobody's format error
        for a in attempts:
            a["reward"] = None if a["gen"]["error"] else student_reward(a["correct"], a["answer"] is not None)
        for p in proposals:
            graded = [a["correct"] for a in p["attempts"] if not a["gen"]["error"]]
            p["solve_rate"] = mean(graded) if p["valid"] else None
            p["reward"] = None
            # no reward without a generated response, nor for a valid problem no attempt of which was generated
            if not p["gen"]["error"] and not (p["valid"] and p["solve_rate"] is None):
                p["reward"] = teacher_reward(p["valid"], p["solve_rate"], cfg["teacher_reward_unsolved"])

        # ---- ALGO 7: TRR++ advantages per (adapter, role, task) and one AdamW step per member (SPEC §5). Every
        # rank trains every member on its share of that member's sequences; one all_reduce per member (SPEC §9)
        with timed(times, "train"):
            stats = {}
            for m in members:
                sequences = []
                for x in proposals + attempts:
                    if x["member"] == m["name"] and x["reward"] is not None:
                        sequences.append(dict(x["gen"], reward=x["reward"], role=x["role"], task=x["task"]))
                stats[m["name"]] = train_member(model, m["name"], optimizers[m["name"]], sequences, cfg, rank, world)
            population.sync_adapters(engine, model, [m["name"] for m in members], 2 * step + 1)

        # ---- ALGO 8: TrueSkill, one rated match per (teacher, student) pair (SPEC §6)
        outcomes = []
        for teacher, student in decisions["matches"]:
            if teacher is None:
                continue  # students only: nobody to play
            rate = mean(a["correct"] for a in attempts if a["proposal"] and a["teacher"] == teacher
                        and a["student"] == student)
            outcome = population.match_outcome(rate, cfg["draw_margin"])  # None (no valid problem): teacher loses
            if not cfg["baseline"]:  # deviation 6: a self-match carries no rating information
                population.rate_match(*[m for n in (teacher, student) for m in members if m["name"] == n], outcome)
            outcomes.append((teacher, student, rate, outcome))

        # ---- PLUMBING: checkpoint (rank 0 holds every optimizer state: nothing to gather), then logging
        last = step + 1 == cfg["steps"]
        if last or (cfg["save_every"] > 0 and (step + 1) % cfg["save_every"] == 0):  # true on all ranks
            with timed(times, "checkpoint"):
                if rank == 0:
                    population.save_checkpoint(cfg["out_dir"], step + 1, model, members, optimizers, dict(
                        config=cfg, next_id=next_id, decisions_rng=rng.getstate()), archive)  # atomic (SPEC §10)
                if world > 1:
                    dist.barrier()  # a collective: nobody runs ahead of a checkpoint being written
        if rank == 0:
            row = step_metrics(step, members, proposals, attempts, outcomes, archive, stats, records)
            row.update({f"time/{k}": v for k, v in times.items()})
            row["time/step"] = time.time() - t_step
            generated = sum(len(x["gen"]["completion_ids"]) for x in proposals + attempts)
            row["tokens_per_s"] = generated / max(times["generate"], 1e-9)
            write_lines(paths["metrics"], [row])
            write_lines(paths["samples"], step_samples(step, proposals, attempts, cfg["samples_per_step"]))
            if wandb_run is not None:
                wandb_run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)
            print0(step_line(step, cfg, row, started, start))
    # vLLM's shutdown tears down the default process group under torchrun: the engine goes first
    population.close_engine(engine)
    if wandb_run is not None:
        wandb_run.finish()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return {"model": model, "members": members, "archive": archive, "optimizers": optimizers}


if __name__ == "__main__":
    main(parse_config(config, sys.argv[1:]))
