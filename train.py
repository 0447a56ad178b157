"""
PopuLoRA (arXiv 2605.16727) on the AZR recipe (arXiv 2505.03335): N_T teacher and N_S student LoRA
adapters on one frozen code LLM. Each step teachers propose code_i / code_o / code_f problems, the
sandbox keeps the valid ones, the matched students attempt them, every adapter gets one
task-relative REINFORCE++ update, TrueSkill rates every match, and every `evolve_every` steps the
weakest members are replaced by LoRA weight-space children of strong ones.

Here: the config, the step (design §4) as one function per phase, the rewards, advantages, loss and
match rule (design §5, §6), and main(). Elsewhere: verify.py (prompts, parsing, validity, grading),
population.py (base, adapters, log-probs, checkpoints), engines.py (generation), ratings.py
(TrueSkill), evolve.py (operators, the replacement step), archive.py (the problem archive),
logs.py (metrics and samples), plan.py (the GPU memory plan).

How to run (every config key is a flag, `--key value` or `--key=value`):
  python train.py --model tiny --steps 3                  # CPU smoke run, built-in random model
  python train.py                                         # one GPU, the paper-scale defaults
  torchrun --standalone --nproc_per_node 8 train.py --teachers 4 --students 4
  python train.py --baseline                              # AZR single agent, same batches
  python train.py --seed_archive a.jsonl,b.jsonl --resume auto    # default: data/'s AZR seeds
  python train.py --plan --gpu_memory_gb 80               # per-rank GPU memory plan, nothing loaded

Deliberate deviations from the paper and from AZR (keep this list honest):
1) The matched student's attempts are used both for the teacher's reward (its solve rate p) and for
   the student's own update. AZR samples 8 extra solver answers per proposal only to estimate
   learnability, throws them away and trains the solver on separate buffer problems; we waste no
   rollouts (design §4).
2) TRR++ normalises per sequence, A = (r - mean) / (std + 1e-6) per (adapter, role, task) group
   (AZR's veRL whitens token-weighted). One optimizer step per step on fresh samples: PPO ratio 1,
   no clipping, KL, critic or reference.
3) The paper says only that the student's failure rate is the teacher's reward. A valid problem
   its matched student solves at rate 0 < p < 1 pays 1 - p (the failure rate), at p = 1 it pays 0,
   and at p = 0 `teacher_reward_unsolved` (0) instead of a failure rate of 1: AZR's learnability
   reward, so a problem nobody solves (perhaps nobody can) earns nothing. AZR's code pays -0.5 at
   both ends. LoRA (rank 32, lr 1e-5) instead of full fine-tuning at lr 1e-6.
4) The archive keeps 16,384 problems per task type, evicting the oldest (AZR drops new ones once
   full). A student whose teacher made fewer than `min_problems` valid problems of a type is topped
   up with recent archive problems (they train the student, they do not score the teacher). A too
   long teacher prompt shows fewer references.
5) Sequences with advantage 0 are not forwarded in the update (no gradient; their tokens still
   count in the loss denominator), so `entropy/*` is over trained tokens only. A response the
   engine could not generate (its prompt leaves no room) gets no reward and no update; it is
   counted in `teacher/<m>/not_generated`.
6) Baseline: the single adapter "a0" plays itself; the self-match is logged, not rated. A teacher
   matched to several students (N_S > N_T) is paid on all their attempts. `--teachers 0`: students
   train on the seed archive alone.
7) Evolution happens at the start of every `evolve_every`-th step, before matchmaking, not after
   the update: every checkpoint (the one evaluate.py scores included) holds members that have
   trained, and the last step makes no children that nobody trains.
8) Evolution ranks each role by TrueSkill mu, and a child inherits its parents' mean mu and sigma
   (selection="inherit"; the paper does not say). mu - 3 sigma with a child at a fresh sigma
   ("conservative", our first rule) ranks a child last again at the next event whatever it did,
   and culled the newest child in most events of a simulation (bench/selection.py).
"""
import argparse
import ast
import contextlib
import hashlib
import io
import json
import os
import random
import sys
import tempfile
import time
import tokenize

import torch
import torch.distributed as dist

import archive
import data
import distributed
import engines
import evolve
import logs
import plan
import population
import preflight
import ratings
import tinyworld
import variants
import verify

# ----------------------------------------------------------------------------- config
# Every knob, one line, with its unit. Types come from the defaults; "" = auto/none, -1 = never,
# None = an optional bool decided at start-up.
config = dict(
    # frozen base: hub id or local folder; "tiny" = built-in random model, "tiny-warm" = laptop
    model="Qwen/Qwen2.5-Coder-7B",
    teachers=4,                     # teacher adapters (propose problems); 0 = students only
    students=4,                     # student adapters (solve them)
    baseline=False,                 # AZR single agent: one adapter "a0" plays teacher and student
    lora_rank=32,                   # r, the same for every member (evolution keeps it)
    lora_alpha=64,                  # LoRA scale alpha / r
    lora_dropout=0.0,               # dropout on the LoRA input
    lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",  # adapted modules
    lr=1e-5,                        # AdamW learning rate, constant (design §5)
    weight_decay=0.0,               # AdamW weight decay
    grad_clip=1.0,                  # max global gradient norm per member and step
    micro_batch_tokens=16384,       # padded tokens per forward/backward; lower first on OOM
    logprob_chunk=1024,             # completion tokens per vocabulary-projection chunk
    gradient_checkpointing=None,    # recompute activations in backward; None = on with CUDA only
    steps=200,                      # training steps
    propose_per_task=16,            # proposals per teacher per task type per step
    solve_samples=8,                # attempts per valid problem by the matched student
    min_problems=4,                 # valid problems per (teacher, task) below which we top up
    references=6,                   # K archive problems shown to a code_i / code_o teacher
    temperature=1.0,                # sampling temperature for teachers and students
    top_p=1.0,                      # nucleus sampling
    max_prompt_tokens=6144,         # tokens; a longer teacher prompt shows fewer references
    max_new_tokens=4096,            # tokens per response
    teacher_reward_unsolved=0.0,    # reward for a valid problem never solved (AZR code: -0.5)
    draw_margin=0.05,               # a solve rate within 0.5 +- margin is a draw (design §6)
    # related systems (README "Variants"); the defaults are PopuLoRA's own
    teacher_reward="populora",      # populora | opensir (novelty + learnable band) | soar (probes)
    opensir_novelty_weight=0.5,     # OpenSIR: weight of novelty against the difficulty band term
    opensir_band_low=0.2,           # OpenSIR: solve rates in [low, high] are fully "learnable"
    opensir_band_high=0.8,          # OpenSIR: upper end of that band
    opensir_neighbours=4,           # OpenSIR: archive problems novelty is measured against
    soar_probe="",                  # SOAR: JSONL of hard probe problems (task + AZR seed fields)
    topup="recent",                 # recent (AZR's mix) | leeps (explore/exploit over outcomes)
    leeps_history=8,                # LEEPS: outcomes remembered per archive problem
    validate_timeout=5.0,           # seconds per sandboxed run
    # run model-written code even where the sandbox cannot isolate the filesystem (verify.py layers)
    unsafe_sandbox_without_filesystem_isolation=False,
    archive_cap=16384,              # problems kept per task type; the oldest are evicted
    seed_archive="auto",            # AZR seed JSONL files, comma-separated; "identity" = AZR's
                                    # identity program; "auto" = AZR's two seed archives in data_dir
                                    # (tiny: identity; tiny-warm: the laptop world's seeds.jsonl)
    data_dir="data",                # fetched data (`python evaluate.py fetch`): AZR's seed archives
    evolve_every=10,                # steps between evolution events; -1 = never
    evolve_frac=0.25,               # fraction of each role replaced per event
    # evolution's ranking and child ratings (deviation 8): inherit (by mu; a child inherits its
    # parents' mu and sigma) | conservative (by mu - 3 sigma, a child at a fresh sigma: the first)
    selection="inherit",
    crossover_prob=0.5,             # probability a child is a crossover (else a mutation)
    # enabled mutations M1-M6 (design §7; the control copy_parent is off)
    mutations="spectral_jitter,gauss_rel,component_resample,scale_jitter,rank_rotation,input_noise",
    # enabled crossovers X1-X9 (design §7; the controls copy_parent and linear_0_5 are off)
    crossovers="module_swap,layer_block_swap,delta_lincomb_svd,component_splice,aligned_factor_avg,"
               "core_ties,core_dare,weighted_multi,delta_slerp",
    engine="auto",                  # generation: vllm | hf | auto (vllm if importable and CUDA)
    device="",                      # "" = cuda when available, else cpu
    dtype="",                       # "" = bfloat16 on GPU, float32 on CPU
    gpu_memory_utilization=0.4,     # share of GPU memory vLLM may take; lower on OOM
    lora_dir="",                    # vLLM adapter sync folder; "" = /dev/shm if room, else out_dir
    dist_timeout_min=60,            # minutes a rank may wait in a collective
    plan=False,                     # print the per-rank GPU memory plan (nothing loaded) and exit
    preflight=False,                # one of everything at these flags, measured vs the plan; exit
    gpu_memory_gb=0.0,              # GPU memory per rank for the plan; 0 = detect (needs a GPU)
    model_cache="out/.tiny",        # where the built-in tiny / tiny-warm bases are built and kept
    out_dir="out",                  # metrics.jsonl, samples.jsonl, config.json, step_NNNNNN/
    save_every=10,                  # steps between checkpoints (the last always saved); -1 = last
    keep_checkpoints=3,             # newest checkpoints kept (7.75 GB each at 4T+4S 7B); 0 = all
    resume="",                      # "" = fresh, "auto" = newest checkpoint, or a step folder
    init_adapters="",               # "s0=PATH,...": start members from saved adapters, fresh AdamW
    samples_per_step=4,             # problems (with one answer each) to samples.jsonl per step
    wandb_project="",               # Weights & Biases project for the metrics rows; "" = off
    wandb_run="",                   # wandb run name; "" = wandb's own
    seed=1337,                      # everything random derives from it
)


def str2bool(text):
    if text.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("1", "true", "yes")


def config_help(path):
    """key -> its comments in the `config = dict(...)` of the file at `path`, so --help shows the
    config's own words (one source): the comment at the end of the key's line (else the comment
    lines just above it), and comment lines below it that start in the same column as its
    end-of-line comment (a continuation)."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    # row -> (column, text) of every comment; code-free rows are the comment-only lines
    comments, code_rows = {}, set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.start[1], token.string.lstrip("#").strip())
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_rows.update(range(token.start[0], token.end[0] + 1))
    call = next(node.value for node in ast.parse(source).body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "config")
    helps, previous = {}, call.lineno
    for keyword in call.keywords:
        rows = range(keyword.lineno, keyword.end_lineno + 1)
        own = [comments[row] for row in rows if row in comments]
        above = [comments[row][1] for row in range(previous + 1, keyword.lineno)
                 if row in comments and row not in code_rows]
        # comment lines above a key with its own comment head a group: not its help
        text = " ".join(above)
        previous = keyword.end_lineno
        if own:
            column, text = own[-1]
            while (previous + 1 in comments and previous + 1 not in code_rows
                   and comments[previous + 1][0] == column):
                previous += 1
                text = f"{text} {comments[previous][1]}"
        helps[keyword.arg] = text
    return helps


def parse_config(defaults, argv, description=None, source=__file__):
    """--key value / --key=value for every config key, typed like its default; a bool also as a
    bare --key, and a None default is an optional bool. Each flag's --help is the key's comment in
    `source` (the file defining `defaults`) and its default. evaluate.py uses it for its config."""
    if description is None:
        description = __doc__.strip().split("\n\n")[0]
    helps = config_help(source)
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, value in defaults.items():
        if value is None or isinstance(value, bool):
            kind = dict(type=str2bool, nargs="?", const=True, metavar="BOOL")
        else:
            kind = dict(type=type(value), metavar=type(value).__name__.upper())
        # argparse formats help with %: a literal one is written %%
        text = helps.get(key, "").replace("%", "%%")
        parser.add_argument(f"--{key}", default=value, help=f"{text} (default: {value!r})",
                            **kind)
    # unknown flags and bad values: argparse prints the reason and exits (2)
    return vars(parser.parse_args(argv))


def check_config(cfg, roles):
    """Everything cheap that can be wrong, before any model or process group exists: one clear
    message each. Returns the checkpoint folder to resume from, or None."""
    for key in ("steps", "propose_per_task", "solve_samples", "micro_batch_tokens", "logprob_chunk",
                "archive_cap", "max_new_tokens", "dist_timeout_min"):
        if cfg[key] < 1:
            raise SystemExit(f"--{key} {cfg[key]}: must be >= 1")
    if not cfg["baseline"]:
        if cfg["students"] < 1:
            raise SystemExit(f"--students {cfg['students']}: must be >= 1 (or --baseline: one "
                             "adapter plays both roles)")
        if cfg["teachers"] < 0:
            raise SystemExit(f"--teachers {cfg['teachers']}: must be >= 0 (0: students train on "
                             "the seed archive alone)")
    if cfg["gpu_memory_gb"] < 0:
        raise SystemExit(f"--gpu_memory_gb {cfg['gpu_memory_gb']}: must be >= 0 (0 = detect)")
    if cfg["dtype"] == "float16":
        # no loss scaling: pg_loss divides by the member's token count (~1e6 at paper scale)
        raise SystemExit("--dtype float16: not supported (training has no loss scaling, and the "
                         "gradients of a loss divided by the token count underflow in float16); "
                         "use bfloat16 (same memory, float32's range) or float32")
    if cfg["keep_checkpoints"] < 0:
        raise SystemExit(f"--keep_checkpoints {cfg['keep_checkpoints']}: must be >= 0 (0 = all)")
    for key, allowed in (("engine", ("auto", "hf", "vllm")),
                         ("dtype", ("", "float32", "bfloat16")),
                         ("teacher_reward", ("populora", "opensir", "soar")),
                         ("topup", ("recent", "leeps")),
                         ("selection", ratings.SELECTIONS)):
        if cfg[key] not in allowed:
            raise SystemExit(f"--{key} {cfg[key]!r}: expected one of {list(allowed)}")
    if not 0 <= cfg["opensir_novelty_weight"] <= 1:
        weight = cfg["opensir_novelty_weight"]
        raise SystemExit(f"--opensir_novelty_weight {weight}: must be in [0, 1]")
    if not 0 < cfg["opensir_band_low"] <= cfg["opensir_band_high"] < 1:
        raise SystemExit("--opensir_band_low/--opensir_band_high: need 0 < low <= high < 1")
    if cfg["teacher_reward"] == "soar":
        if cfg["baseline"]:
            raise SystemExit("--teacher_reward soar needs separate teachers and students "
                             "(not --baseline)")
        if not os.path.isfile(cfg["soar_probe"]):
            raise SystemExit(f"--soar_probe {cfg['soar_probe']!r}: not a file (JSON lines of hard "
                             "problems: task + AZR seed fields)")
    for name, path in init_adapter_paths(cfg["init_adapters"]).items():
        if not os.path.isfile(path):
            raise SystemExit(f"--init_adapters {name}={path}: no such file (a PEFT folder or its "
                             "adapter_model.safetensors)")
    for key, allowed in (("mutations", evolve.MUTATIONS), ("crossovers", evolve.CROSSOVERS)):
        if any(name.strip() not in allowed for name in cfg[key].split(",")):
            raise SystemExit(f"--{key} {cfg[key]!r}: expected names of {list(allowed)}")
    try:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        tempfile.TemporaryFile(dir=cfg["out_dir"]).close()
    except OSError as e:
        raise SystemExit(f"--out_dir {cfg['out_dir']!r} is not writable: {e}")
    return check_resume(cfg, roles)


def init_adapter_paths(text):
    """--init_adapters "s0=PATH,t1=PATH" -> {member: safetensors file}; PATH is a PEFT folder (a
    checkpoint's adapters/<member>/) or its adapter_model.safetensors."""
    paths = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SystemExit(f"--init_adapters {item!r}: expected MEMBER=PATH, e.g. s0=child/")
        path = path.strip()
        if os.path.isdir(path):
            path = os.path.join(path, "adapter_model.safetensors")
        paths[name.strip()] = path
    return paths


def load_init_adapters(cfg, model, members, optimizers, make_optimizer):
    """--init_adapters: each named member takes the saved weights (after any --resume, so a
    checkpoint's member can be swapped for another adapter, e.g. an evolution child) and a fresh
    AdamW state. The weights are read on every rank, so they agree without a broadcast."""
    from safetensors.torch import load_file
    names = [m["name"] for m in members]
    for name, path in init_adapter_paths(cfg["init_adapters"]).items():
        if name not in names:
            raise SystemExit(f"--init_adapters {name}={path}: no member {name!r} (members {names})")
        try:
            population.set_adapter(model, name, load_file(path))
        except (OSError, ValueError) as e:
            raise SystemExit(f"--init_adapters {name}={path}: {e}")
        optimizers[name] = make_optimizer(name)


def check_resume(cfg, roles):
    """The checkpoint to resume from, or None; one of another population or base model stops the
    run here, naming the difference."""
    resume = cfg["resume"]
    if resume == "auto":
        resume = population.latest_checkpoint(cfg["out_dir"])
    if not resume:
        return None
    try:
        with open(os.path.join(resume, "state.json")) as f:
            saved = json.load(f)
        saved = dict(saved["config"], roles=[m["role"] for m in saved["members"]])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--resume {resume!r}: not a readable checkpoint folder ({e})")
    for key, ours in [("roles", roles), ("model", cfg["model"]), ("lora_rank", cfg["lora_rank"]),
                      ("lora_targets", cfg["lora_targets"])]:
        if saved.get(key) != ours:
            raise SystemExit(f"--resume {resume}: the checkpoint has {key} {saved.get(key)!r} (a "
                             f"population of {len(saved['roles'])}), this run has {ours!r} (a "
                             f"population of {len(roles)})")
    return resume


# ----------------------------------------------------------------------------- the algorithm
# The parts a researcher changes: pure functions, each unit-tested (tests/test_train.py).

def student_reward(correct, well_formed):
    """AZR's solver reward (design §4.6): correct 1, well-formed but wrong -0.5, format error -1."""
    if correct:
        return 1.0
    if well_formed:
        return -0.5
    return -1.0


def teacher_reward(valid, solve_rate, unsolved):
    """The proposer reward for one proposal (design §4.6, deviation 3): invalid or badly formatted
    -1; a valid problem its matched student solves at rate p pays 1 - p (the student's failure
    rate, the paper's words) if 0 < p < 1, 0 if p = 1 (too easy) and `unsolved` if p = 0 (our
    default 0 is AZR's learnability reward; AZR's code pays -0.5)."""
    if not valid:
        return -1.0
    if solve_rate == 1:
        return 0.0
    if solve_rate == 0:
        return unsolved
    return 1.0 - solve_rate


def trr_advantages(rewards, groups):
    """TRR++ (AZR §3.3.5): A_i = (r_i - mean) / (std + 1e-6) within each group (one adapter's
    (role, task) set), std unbiased. A group of one, or with all rewards equal, gets A = 0: an
    all-equal step trains nothing."""
    advantages = [0.0] * len(rewards)
    for key in set(groups):
        index = [i for i, g in enumerate(groups) if g == key]
        r = torch.tensor([rewards[i] for i in index], dtype=torch.float64)
        if len(index) < 2 or r.std() == 0:
            continue
        normalised = (r - r.mean()) / (r.std() + 1e-6)
        for i, a in zip(index, normalised.tolist()):
            advantages[i] = a
    return advantages


def pg_loss(logp, mask, advantages, total_tokens):
    """Token-level policy gradient (design §5): loss = -sum_i A_i sum_t log pi(y_it) / sum_i |y_i|.
    logp, mask [B, T] over one micro-batch's completion tokens, advantages [B]; total_tokens =
    sum_i |y_i| over the member's WHOLE batch on all ranks, so micro-batch losses add up to the full
    loss (gradient accumulation needs no rescaling)."""
    return -(advantages[:, None] * logp * mask).sum() / max(total_tokens, 1)


def match_outcome(solve_rate, draw_margin):
    """1 student wins, 0 draw, -1 teacher wins (design §6 [ours]). solve_rate = the student's mean
    correctness over the teacher's valid problems; None (the teacher had no valid problem) is a
    teacher loss."""
    if solve_rate is None:
        return 1
    if solve_rate < 0.5 - draw_margin:
        return -1
    if solve_rate > 0.5 + draw_margin:
        return 1
    return 0


def matchmake(teachers, students, rng):
    """PFSP pairing (design §4.1): teachers (in an rng-shuffled order, cycling) each draw one student
    from the pool of not yet matched students with weight p(1 - p), p = P(student beats teacher),
    so balanced pairs are likeliest; the pool refills once empty. Runs max(N_T, N_S) matches so
    every member plays: with N_T = N_S each student plays exactly one teacher. Returns
    [(teacher name, student name)]; deterministic given rng."""
    if not teachers or not students:
        return []
    order, pool, pairs = [], [], []
    for _ in range(max(len(teachers), len(students))):
        if not order:
            order = list(teachers)
            rng.shuffle(order)
        if not pool:
            pool = list(students)
        teacher = order.pop(0)
        weights = []
        for student in pool:
            p = ratings.win_probability(student, teacher)
            weights.append(max(p * (1 - p), 1e-12))
        k = rng.choices(range(len(pool)), weights)[0]
        pairs.append((teacher["name"], pool.pop(k)["name"]))
    return pairs


# ----------------------------------------------------------------------------- the update

def pack_micro_batches(sequences, budget):
    """Micro-batches of at most `budget` padded tokens (batch size x its longest prompt +
    completion), over sequences sorted by length so similar lengths share a batch. A sequence
    longer than the budget gets a batch of its own. The budget, not a sequence count, bounds
    activation memory (design §5)."""
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


def train_member(model, name, optimizer, sequences, cfg, rank=0, world=1):
    """One AdamW step of member `name` on its sequences {"prompt_ids", "completion_ids", "reward",
    "role", "task"} (the member's WHOLE batch, identical on every rank): TRR++ advantages over the
    whole batch, this rank's token-balanced share forwarded in micro-batches of
    `micro_batch_tokens`, gradients summed over ranks, global grad-norm clip, and the same AdamW
    step on every rank (design §5, §9). Returns {"loss", "grad_norm", "entropy" {role: nats summed},
    "tokens" {role: count}, "mismatch" {"mean", "max"}: |log pi_vLLM - log pi_train| over the
    forwarded tokens the engine gave log-probs for (None without)}."""
    rewards = [s["reward"] for s in sequences]
    advantages = trr_advantages(rewards, [(s["role"], s["task"]) for s in sequences])
    sequences = [dict(s, advantage=a) for s, a in zip(sequences, advantages)]
    # the loss denominator: the member's completion tokens on all ranks, zero-advantage ones too
    total_tokens = sum(len(s["completion_ids"]) for s in sequences)
    # deviation 5: a zero-advantage sequence has no gradient, so it is not forwarded
    work = [s for s in sequences if s["advantage"] != 0 and s["completion_ids"]]
    stats = {"loss": 0.0, "grad_norm": 0.0, "entropy": {"teacher": 0.0, "student": 0.0},
             "tokens": {"teacher": 0, "student": 0}, "mismatch": {"mean": None, "max": None}}
    gaps = [0.0, 0, 0.0]  # rollout-trainer log-prob gaps: sum, count, max
    if not work:
        # the same on every rank: no collective, no AdamW step (the moments stay as they are)
        return stats
    params = population.trainable_params(model, name)
    optimizer.zero_grad(set_to_none=True)
    # `name` stays active through backward: gradient checkpointing re-runs the forward in backward
    with population.active(model, name):
        share = distributed.rank_share(work, rank, world)
        for batch in pack_micro_batches(share, cfg["micro_batch_tokens"]):
            prompts = [s["prompt_ids"] for s in batch]
            completions = [s["completion_ids"] for s in batch]
            # [B, T] each
            logp, mask, entropy = population.token_logprobs(model, name, prompts, completions,
                                                            chunk=cfg["logprob_chunk"])
            batch_advantages = torch.tensor([s["advantage"] for s in batch], dtype=logp.dtype,
                                            device=logp.device)
            loss = pg_loss(logp, mask, batch_advantages, total_tokens)
            loss.backward()
            gap_sum, gap_count, gap_max = engines.logprob_gaps(logp, batch)
            gaps = [gaps[0] + gap_sum, gaps[1] + gap_count, max(gaps[2], gap_max)]
            stats["loss"] += loss.item()
            for row, s in enumerate(batch):
                stats["entropy"][s["role"]] += entropy[row].sum().item()
                stats["tokens"][s["role"]] += int(mask[row].sum().item())
    numbers = [stats["loss"], stats["entropy"]["teacher"], stats["entropy"]["student"],
               stats["tokens"]["teacher"], stats["tokens"]["student"], gaps[0], gaps[1]]
    numbers = distributed.sum_over_ranks(params, numbers, world)
    stats["loss"] = numbers[0]
    stats["entropy"] = {"teacher": numbers[1], "student": numbers[2]}
    stats["tokens"] = {"teacher": int(round(numbers[3])), "student": int(round(numbers[4]))}
    gap_max = distributed.max_over_ranks(gaps[2], world, params[0].device)
    if numbers[6] > 0:
        stats["mismatch"] = {"mean": numbers[5] / numbers[6], "max": gap_max}
    # the norm before clipping, of the summed gradient: the same on every rank
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"]))
    optimizer.step()
    # free this member's gradients before the next member's backward
    optimizer.zero_grad(set_to_none=True)
    return stats


def derive_seed(*parts):
    """A 31-bit seed from (seed, step, rank, purpose): reproducible after a resume, no state."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little") >> 1


@contextlib.contextmanager
def timed(times, key):
    start = time.time()
    yield
    times[key] += time.time() - start


def run_verify(fn, jobs, timeout):
    """[(task, item)] -> verify.validate / verify.grade results in order; one batched sandbox call
    per task type."""
    results = [None] * len(jobs)
    for task in verify.TASKS:
        index = [i for i, (t, _) in enumerate(jobs) if t == task]
        if not index:
            continue
        for i, result in zip(index, fn(task, [jobs[i][1] for i in index], timeout=timeout)):
            results[i] = result
    return results


# ----------------------------------------------------------------------------- the step's phases
# The records that flow through a step, their keys written down where they are made:
#   proposal  (propose)  teacher, member (= teacher), role "teacher", task, program (code_f: the
#             archive program shown, else None), gen, response, parsed; validate adds valid,
#             reason, problem; solve adds attempts; rewards add solve_rate, void, reward
#   attempt   (solve)    student, member (= student), role "student", teacher, task, problem,
#             proposal (None for a top-up), gen, response, answer; grade adds correct, void;
#             rewards add reward
#   match     (plan_step) teacher, student; rate adds solve_rate, outcome
#   member    (population.init_population) name, role, id, lora_id, mu, sigma, lineage
# `generate(requests, purpose)` and `check(fn, jobs)` are main's closures that split the work over
# ranks and gather it back; the phases never see a rank.

def plan_step(cfg, members, teachers, students, problems, rng):
    """Rank 0's decisions (design §4.1): the matches, and per proposal slot the archive problems its
    teacher is shown (code_f: one program of code_i U code_o). Returns (slots, matches, shown)."""
    slots = []
    for t in teachers:
        for task in verify.TASKS:
            slots += [(t["name"], task)] * cfg["propose_per_task"]
    if cfg["baseline"]:
        pairs = [(members[0]["name"],) * 2]
    elif not teachers:
        # students only (a fixed problem pool): every student is topped up from the archive
        pairs = [(None, s["name"]) for s in students]
    else:
        pairs = matchmake(teachers, students, rng)
    matches = [{"teacher": t, "student": s} for t, s in pairs]
    programs = problems["code_i"] + problems["code_o"]
    shown = []
    for _, task in slots:
        if task == "code_f":
            shown.append([rng.randrange(len(programs))])
        else:
            count = min(cfg["references"], len(problems[task]))
            shown.append(rng.sample(range(len(problems[task])), count))
    return slots, matches, shown


def propose(slots, shown, problems, tokenizer, cfg, generate):
    """Every teacher x task type x propose_per_task in ONE batched generation (design §4.2)."""
    programs = problems["code_i"] + problems["code_o"]
    proposals, requests = [], []
    for (teacher, task), picks in zip(slots, shown):
        program, references = None, []
        if task == "code_f":
            program = archive.problem_core(programs[picks[0]])["program"]
        else:
            references = [archive.problem_core(problems[task][i]) for i in picks]
        prompt = verify.teacher_prompt(task, references, program)
        while references and len(population.text_ids(tokenizer, [prompt])[0]) > \
                cfg["max_prompt_tokens"]:
            # deviation 4: fewer references rather than a truncated prompt
            references.pop()
            prompt = verify.teacher_prompt(task, references, program)
        proposals.append(dict(teacher=teacher, member=teacher, role="teacher", task=task,
                              program=program, gen=None, response=None, parsed=None, attempts=[]))
        requests.append((prompt, teacher))
    for p, out in zip(proposals, generate(requests, "propose")):
        p["gen"], p["response"] = out, out["text"]
        if not out["error"]:
            p["parsed"] = verify.parse_teacher(p["task"], out["text"])
    return proposals


def validate(proposals, step, check):
    """Every parsed proposal in the sandbox, batched (design §4.3). A valid one becomes a problem."""
    jobs = []
    for p in proposals:
        if p["parsed"] is None:
            continue
        item = p["parsed"]
        if p["program"]:
            # code_f: the teacher wrote inputs and a message for the program it was shown
            item = dict(item, program=p["program"])
        jobs.append((p["task"], item))
    results = iter(check(verify.validate, jobs))
    for p in proposals:
        result = {"valid": False, "reason": "format error"}
        if p["parsed"] is not None:
            result = next(results)
        if p["gen"]["error"]:
            result = {"valid": False, "reason": "not generated: " + p["gen"]["error"]}
        p["valid"], p["reason"], p["problem"] = result["valid"], result["reason"], None
        if result["valid"]:
            p["problem"] = dict(archive.as_problem(p["parsed"], result), step=step)
    archive.describe([p["problem"] for p in proposals if p["valid"]])


def pick_topups(matches, proposals, problems, step, cfg, rng, embed=None, leeps_stats=None):
    """Rank 0: for each match and task type, archive problems that top the student's batch up to
    min_problems when its teacher made fewer valid ones (design §4.4): AZR's recent-first mix, or
    LEEPS's explore/exploit portfolios (topup=leeps; `embed` maps programs to base embeddings).
    {(match index, task): [index]}"""
    vectors = {}
    if cfg["topup"] == "leeps":
        # the archive's embeddings, once per task type (every match reads the same ones)
        for task in verify.TASKS:
            vectors[task] = embed([p["program"] for p in problems[task]])
    topups = {}
    for i, match in enumerate(matches):
        for task in verify.TASKS:
            made = [p for p in proposals if p["valid"] and p["teacher"] == match["teacher"]
                    and p["task"] == task]
            need = cfg["min_problems"] - len(made)
            if cfg["topup"] == "leeps":
                topups[(i, task)] = variants.leeps_pick(problems[task], step, need, rng,
                                                        vectors[task], leeps_stats)
            else:
                topups[(i, task)] = archive.pick_recent(problems[task], step, need, rng)
    return topups


def solve(matches, proposals, topups, problems, cfg, generate):
    """Each match's student attempts each valid problem of its teacher, and its top-ups,
    solve_samples times, in ONE batched generation (design §4.4)."""
    attempts = []
    for i, match in enumerate(matches):
        for task in verify.TASKS:
            work = []
            for p in proposals:
                if p["valid"] and p["teacher"] == match["teacher"] and p["task"] == task:
                    work.append((p["problem"], p))
            for j in topups[(i, task)]:
                work.append((problems[task][j], None))
            for problem, proposal in work:
                for _ in range(cfg["solve_samples"]):
                    attempts.append(dict(student=match["student"], member=match["student"],
                                         role="student", teacher=match["teacher"], task=task,
                                         problem=problem, proposal=proposal, gen=None,
                                         response=None, answer=None))
    requests = []
    for a in attempts:
        prompt = verify.student_prompt(a["task"], archive.problem_core(a["problem"]))
        requests.append((prompt, a["student"]))
    for a, out in zip(attempts, generate(requests, "solve")):
        a["gen"], a["response"] = out, out["text"]
        if not out["error"]:
            a["answer"] = verify.parse_student(a["task"], out["text"])
        if a["proposal"] is not None:
            a["proposal"]["attempts"].append(a)
    return attempts


def grade(attempts, check):
    """Every well-formed attempt in the sandbox, batched (design §4.5)."""
    jobs = []
    for a in attempts:
        if a["answer"] is not None:
            jobs.append((a["task"], dict(archive.problem_core(a["problem"]), answer=a["answer"])))
    results = iter(check(verify.grade, jobs))
    for a in attempts:
        a["correct"], a["void"] = False, False
        if a["answer"] is not None:
            result = next(results)
            # void: the problem's own answer was not graded correct in this batch (verify.grade)
            a["correct"], a["void"] = bool(result["correct"]), bool(result.get("void"))


def assign_rewards(proposals, attempts, cfg, novel=None):
    """design §4.6. A response the engine could not generate gets no reward (and no update); so does
    a valid problem none of whose attempts was generated. teacher_reward=opensir pays by
    opensir_teacher_reward (`novel`: proposal index -> novelty); soar pays later (assign_soar)."""
    for a in attempts:
        a["reward"] = None
        # a void problem decides nothing: its attempts are neither rewarded nor penalised
        if not a["gen"]["error"] and not a.get("void"):
            a["reward"] = student_reward(a["correct"], a["answer"] is not None)
    for k, p in enumerate(proposals):
        graded = [a["correct"] for a in p["attempts"] if not a["gen"]["error"]]
        p["solve_rate"] = logs.mean(graded) if p["valid"] else None
        p["void"] = any(a.get("void") for a in p["attempts"])
        p["reward"] = None
        # ... and its teacher is not paid for it
        if p["void"]:
            p["solve_rate"] = None
            continue
        if p["gen"]["error"] or (p["valid"] and p["solve_rate"] is None):
            continue
        if cfg["teacher_reward"] == "opensir":
            novel_k = novel.get(k, 1.0)
            p["reward"] = variants.opensir_teacher_reward(p["valid"], p["solve_rate"], novel_k, cfg)
        elif cfg["teacher_reward"] == "populora":
            unsolved = cfg["teacher_reward_unsolved"]
            p["reward"] = teacher_reward(p["valid"], p["solve_rate"], unsolved)


def assign_soar(proposals, matches, gains):
    """teacher_reward=soar, after the students' update: each proposal of a teacher gets
    soar_teacher_reward with its matched student's probe gain (None when nothing was generated)."""
    student_of = {m["teacher"]: m["student"] for m in matches}
    for p in proposals:
        if p["gen"]["error"] or (p["valid"] and p["solve_rate"] is None):
            continue
        p["reward"] = variants.soar_teacher_reward(p["valid"], gains[student_of[p["teacher"]]])


def update(model, members, optimizers, proposals, attempts, cfg, rank, world):
    """One AdamW step per member (design §5): teachers on their proposals, students on their
    attempts.
    Every rank trains every member on its share of that member's sequences. Returns stats per
    member."""
    stats = {}
    for m in members:
        sequences = []
        for x in proposals + attempts:
            if x["member"] == m["name"] and x["reward"] is not None:
                sequences.append(dict(x["gen"], reward=x["reward"], role=x["role"], task=x["task"]))
        stats[m["name"]] = train_member(model, m["name"], optimizers[m["name"]], sequences, cfg,
                                        rank, world)
    return stats


def soar_update(model, members, optimizers, proposals, attempts, matches, cfg, rank, world, engine,
                step, generate, check, probe, probe_rates, times):
    """teacher_reward=soar's update (design §5 otherwise unchanged): the students go first, their
    probe
    pass rates are measured before (when not known from the last step: a new child) and after, and
    each teacher is paid its matched student's gain before its own update. probe_rates {(name, id):
    rate} is updated in place. Returns stats per member."""
    students = [m for m in members if m["role"] == "student"]
    teachers = [m for m in members if m["role"] == "teacher"]
    unmeasured = [m["name"] for m in students if (m["name"], m["id"]) not in probe_rates]
    if unmeasured:
        before = variants.probe_pass_rates(unmeasured, probe, generate, check)
        for m in students:
            if m["name"] in before:
                probe_rates[(m["name"], m["id"])] = before[m["name"]]
    with timed(times, "train"):
        stats = update(model, students, optimizers, proposals, attempts, cfg, rank, world)
        engines.sync_adapters(engine, model, [m["name"] for m in students], 2 * step + 1)
    started = time.time()
    after = variants.probe_pass_rates([m["name"] for m in students], probe, generate, check)
    gains = {}
    for m in students:
        gains[m["name"]] = after[m["name"]] - probe_rates[(m["name"], m["id"])]
        probe_rates[(m["name"], m["id"])] = after[m["name"]]
    times["probe"] = time.time() - started
    assign_soar(proposals, matches, gains)
    with timed(times, "train"):
        stats.update(update(model, teachers, optimizers, proposals, attempts, cfg, rank, world))
        engines.sync_adapters(engine, model, [m["name"] for m in teachers], 2 * step + 1)
    return stats


def rate(matches, attempts, members, cfg):
    """One rated match per (teacher, student) pair (design §6): the student's solve rate on its
    teacher's valid problems decides the outcome. Fills the match records; returns the rated ones
    (students-only runs have none)."""
    by_name = {m["name"]: m for m in members}
    played = []
    for match in matches:
        if match["teacher"] is None:
            continue
        mine = [a["correct"] for a in attempts if a["proposal"] is not None and not a.get("void")
                and a["teacher"] == match["teacher"] and a["student"] == match["student"]]
        match["solve_rate"] = logs.mean(mine)
        match["outcome"] = match_outcome(match["solve_rate"], cfg["draw_margin"])
        # deviation 6: a self-match carries no rating information
        if not cfg["baseline"]:
            ratings.update(by_name[match["teacher"]], by_name[match["student"]], match["outcome"])
        played.append(match)
    return played


def evolve_population(model, members, optimizers, make_optimizer, cfg, step, next_id, rank, world):
    """design §7: rank 0 plans the children (evolve.replacement_step) and writes them into their
    slots; the plan and the children's weights go to every rank (the only weight broadcast of a
    run). Every rank holds every member's optimizer state (design §9), so each resets a child's
    state, or copies it per module from its donor parent, on its own. Returns (children, next
    id)."""
    children = None
    if rank == 0:
        adapters = {m["name"]: population.get_adapter(model, m["name"]) for m in members}
        generator = torch.Generator().manual_seed(derive_seed(cfg["seed"], step, "evolve"))
        children = evolve.replacement_step(members, adapters, cfg, generator, step, next_id)
        for child in children:
            population.set_adapter(model, child["name"], child.pop("adapter"))
            child["reason"] = child.pop("info").get("reason", "")
    children = distributed.broadcast_object(children, 0, world)
    # the donors' states before any slot is reset (a donor may itself be replaced in this event)
    donors = set()
    for child in children:
        donors |= {child["copy_optimizer_from"], *(child["optimizer_donors"] or {}).values()}
    states = {d: optimizers[d].state_dict() for d in donors if d}
    # parameter order of every member's optimizer
    keys = list(population.get_adapter(model, members[0]["name"]))
    for child in children:
        distributed.broadcast_member(model, child["name"], 0, world)
        optimizers[child["name"]] = make_optimizer(child["name"])
        module_donor = child["optimizer_donors"] or {}
        copied = {}
        for k, key in enumerate(keys):
            donor = module_donor.get(key.rsplit(".lora_", 1)[0], child["copy_optimizer_from"])
            if donor and k in states[donor]["state"]:
                # an own copy: the child's moments must not alias the donor's
                moments = states[donor]["state"][k]
                copied[k] = {n: v.clone() if torch.is_tensor(v) else v for n, v in moments.items()}
        if copied:
            state = dict(optimizers[child["name"]].state_dict(), state=copied)
            optimizers[child["name"]].load_state_dict(state)
        member = next(m for m in members if m["name"] == child["name"])
        event = {k: child[k] for k in ("step", "id", "parents", "parent_names", "operator", "kind",
                                       "fallback", "reason")}
        member.update(id=child["id"], mu=child["mu"], sigma=child["sigma"],
                      lineage=member["lineage"] + [event])
    return children, max([next_id] + [child["id"] + 1 for child in children])


# ----------------------------------------------------------------------------- main

def load_population(cfg, roles, dtype, device, checkpointing):
    """The frozen base and one LoRA adapter per member on it: (folder, model, tokenizer, members).
    Every member's initialisation is seeded by (seed, slot), so it is the same on every rank."""
    try:
        folder = tinyworld.model_folder(cfg["model"], cfg["model_cache"])
        base, tokenizer = population.load_base(folder, dtype, device)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--model {cfg['model']!r}: cannot load it ({type(e).__name__}: {e})")
    model, members = population.init_population(base, tokenizer, cfg, roles)
    if checkpointing:
        # activations of one layer at a time; population.active keeps a member's adapter on
        # through backward
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # the HF engine switches to eval for generation and back
    model.train()
    return folder, model, tokenizer, members


def restore(resume, model, members, optimizers, rng, cfg):
    """Every rank reads the same checkpoint: weights, optimizer states, ratings, lineage and RNG
    states in place. Returns (archive, the step to start at, the next member id, the saved
    state)."""
    try:
        state, problems = population.load_checkpoint(resume, model, members, optimizers)
    except ValueError as e:
        raise SystemExit(f"--resume: {e}")
    version, internal, gauss = state["decisions_rng"]
    rng.setstate((version, tuple(internal), gauss))
    return upgrade_archive(problems, cfg), state["step"], state["next_id"], state


def upgrade_archive(problems, cfg):
    """An archive saved before problems carried their gold encodings and argument lists (verify.py
    grades against those): each such problem is validated again and gets them; one no longer
    valid is dropped. A current archive comes back unchanged, nothing run."""
    upgraded = {}
    for task, items in problems.items():
        filled = verify.add_golds(task, items, cfg["validate_timeout"])
        upgraded[task] = [p for p in filled if p is not None]
        dropped = len(items) - len(upgraded[task])
        if dropped:
            logs.print0(f"resume: {dropped} {task} problems of the old archive are no longer valid")
    return upgraded


# the parts of a step whose seconds are logged as time/<phase>
PHASES = ("generate", "verify", "train", "evolve", "checkpoint")


def seed_files(cfg):
    """--seed_archive as comma-separated files ("" = AZR's identity program, archive.IDENTITY)."""
    choice = cfg["seed_archive"]
    if choice == "identity" or (choice == "auto" and cfg["model"] == "tiny"):
        return ""
    if choice == "auto" and cfg["model"] == "tiny-warm":
        # the laptop world's own seeds (tinyworld.write_seeds): the identity program gives it
        # nothing to solve
        return os.path.join(tinyworld.model_folder("tiny-warm", cfg["model_cache"]), "seeds.jsonl")
    if choice == "auto":
        # a stop that names `python evaluate.py fetch` when they are not there
        return ",".join(data.require(name, cfg["data_dir"]) for name in data.SEEDS)
    return choice


def member_roles(cfg):
    if cfg["baseline"]:
        return ["both"]
    return ["teacher"] * cfg["teachers"] + ["student"] * cfg["students"]


def main(cfg):
    # ---- PLUMBING: cheap checks first, then the memory plan, then processes and models
    roles = member_roles(cfg)
    resume = check_config(cfg, roles)
    if cfg["plan"]:
        # print the per-rank memory plan and stop: nothing is loaded, no GPU needed
        memory = plan.memory_plan(cfg, roles)
        print(plan.table(memory))
        print(json.dumps(memory))
        return memory
    rank, world, device = distributed.setup_distributed(cfg)
    dtype = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    checkpointing = cfg["gradient_checkpointing"]
    if checkpointing is None:
        checkpointing = device.startswith("cuda")
    if device.startswith("cuda"):
        # before loading 15 GB: stop with the plan's table when this configuration cannot fit
        plan.check_fits(dict(cfg, dtype=dtype, gradient_checkpointing=checkpointing), roles)
    # model-written code runs only where the sandbox isolates the filesystem, unless the user
    # accepts the risk by name (every rank starts its own sandbox pool)
    verify.require_isolation(cfg["unsafe_sandbox_without_filesystem_isolation"])
    # decisions (matches, references, top-ups) are drawn on rank 0 only and broadcast
    rng = random.Random(cfg["seed"])

    def check(fn, jobs):
        # sandbox work (validate or grade) split over ranks, gathered back on every rank
        with timed(times, "verify"):
            def verify_part(part):
                return run_verify(fn, part, cfg["validate_timeout"])
            return distributed.split_run(verify_part, jobs, rank, world)

    times = dict.fromkeys(PHASES, 0.0)
    # the related-systems options' state: LEEPS's portfolio counts (checkpointed), SOAR's probe set
    # and each student's last pass rate on it, keyed by (name, id): a child is measured afresh
    leeps_stats = {"exploit": [0, 0], "explore": [0, 0]}
    probe, probe_rates = [], {}
    if cfg["teacher_reward"] == "soar":
        probe = variants.load_probe(cfg["soar_probe"], check)
    problems = None
    if not resume:
        # the seed archive before the (slow) model: a bad seed file fails fast
        def validate_seeds(jobs):
            return check(verify.validate, jobs)
        # students alone (--teachers 0) may train on code_f seeds only: nobody proposes from them
        has_teachers = any(role in ("teacher", "both") for role in roles)
        problems, line = archive.seed_archive(seed_files(cfg), validate_seeds, has_teachers)
        logs.print0(line)

    # ---- the population: frozen base + one LoRA adapter per member, identical on every rank
    folder, model, tokenizer, members = load_population(cfg, roles, dtype, device, checkpointing)

    def make_optimizer(name):
        # design §5: AdamW, constant lr; every rank holds every member's state (design §9)
        params = population.trainable_params(model, name)
        return torch.optim.AdamW(params, lr=cfg["lr"], betas=(0.9, 0.999),
                                 weight_decay=cfg["weight_decay"])
    optimizers = {m["name"]: make_optimizer(m["name"]) for m in members}
    start, next_id = 0, len(members)
    if resume:
        problems, start, next_id, saved = restore(resume, model, members, optimizers, rng, cfg)
        leeps_stats = saved.get("leeps_stats", leeps_stats)
        probe_rates = {(name, i): rate for name, i, rate in saved.get("probe_rates", [])}
    load_init_adapters(cfg, model, members, optimizers, make_optimizer)
    # the frozen base's embedding of a program, cached (recomputed after a resume: deterministic)
    vectors = {}

    def embed(programs):
        missing = [p for p in dict.fromkeys(programs) if p not in vectors]
        if missing:
            # one text per forward: in a padded batch the float sums depend on the batch's shape,
            # and a resumed run, which fills the cache in other batches, must see the same vectors
            computed = population.embed_texts(model, tokenizer, missing, batch_size=1)
            for program, vector in zip(missing, computed):
                vectors[program] = vector
        if not programs:
            return torch.zeros(0, model.get_base_model().config.hidden_size)
        return torch.stack([vectors[p] for p in programs])
    try:
        engine = engines.make_engine(cfg["engine"], folder, model, tokenizer, members,
                                     dict(cfg, dtype=dtype))
    except OSError as e:
        raise SystemExit(f"--engine {cfg['engine']}: {e}")
    if cfg["preflight"]:
        # one update, generation, sync, all_reduce, checkpoint and sandbox burst beside the plan
        resolved = dict(cfg, dtype=dtype, gradient_checkpointing=checkpointing)
        return preflight.run(resolved, roles, model, members, optimizers, engine, problems, check,
                             train_member, rank, world)
    paths = {name: os.path.join(cfg["out_dir"], f"{name}.jsonl") for name in ("metrics", "samples")}
    wandb_run = None
    if rank == 0:
        wandb_run = logs.start_logs(cfg, paths, start, world, resume)
    logs.print0(f"{[m['name'] for m in members]} on {world} rank(s), {device}, {dtype}, "
                f"{engine['kind']} engine, gradient checkpointing {checkpointing}, "
                f"steps {start}..{cfg['steps']}")
    started = time.time()

    for step in range(start, cfg["steps"]):
        t_step = time.time()
        times = dict.fromkeys(PHASES, 0.0)
        # e.g. dropout: a function of (step, rank), also after a resume
        torch.manual_seed(derive_seed(cfg["seed"], step, rank, "torch"))

        def generate(requests, purpose, temperature=cfg["temperature"]):
            # ONE batched call per phase, split over ranks; seeds reproducible after a resume
            seed = derive_seed(cfg["seed"], step, rank, purpose)
            # contiguous blocks: a problem's attempts go to one rank, which prefills it once
            with timed(times, "generate"):
                return distributed.split_blocks(lambda share: engines.generate(
                    engine, share, temperature, cfg["top_p"], cfg["max_new_tokens"], seed),
                    requests, rank, world)

        # ---- ALGO 9: evolution every evolve_every steps (design §7), at the START of the step, so
        # every checkpoint holds members that have trained (deviation 7); true on every rank
        children = []
        if cfg["evolve_every"] > 0 and step > 0 and step % cfg["evolve_every"] == 0:
            with timed(times, "evolve"):
                children, next_id = evolve_population(model, members, optimizers, make_optimizer,
                                                      cfg, step, next_id, rank, world)
                engines.sync_adapters(engine, model, [c["name"] for c in children], 2 * step)
        teachers = [m for m in members if m["role"] in ("teacher", "both")]
        students = [m for m in members if m["role"] in ("student", "both")]

        # ---- ALGO 1: matchmaking (PFSP over TrueSkill) and the references: rank 0 decides
        decisions = None
        if rank == 0:
            decisions = plan_step(cfg, members, teachers, students, problems, rng)
        slots, matches, shown = distributed.broadcast_object(decisions, 0, world)

        # ---- ALGO 2: propose
        proposals = propose(slots, shown, problems, tokenizer, cfg, generate)

        # ---- ALGO 3: validate; valid problems join the archive (cap, oldest evicted)
        validate(proposals, step, check)
        for task in verify.TASKS:
            made = [p["problem"] for p in proposals if p["valid"] and p["task"] == task]
            archive.add_problems(problems, task, made, cfg["archive_cap"])

        # ---- ALGO 4: solve, with top-ups picked by rank 0
        topups = None
        if rank == 0:
            topups = pick_topups(matches, proposals, problems, step, cfg, rng, embed, leeps_stats)
        topups = distributed.broadcast_object(topups, 0, world)
        attempts = solve(matches, proposals, topups, problems, cfg, generate)

        # ---- ALGO 5: grade; every problem keeps its solve statistics
        grade(attempts, check)
        archive.record_solves(attempts)

        # ---- ALGO 6: rewards (teacher_reward=opensir: novelty measured on rank 0, broadcast)
        novel = None
        if cfg["teacher_reward"] == "opensir":
            if rank == 0:
                neighbours = cfg["opensir_neighbours"]
                novel = variants.novelty_of(proposals, problems, embed, neighbours, step)
            novel = distributed.broadcast_object(novel, 0, world)
        assign_rewards(proposals, attempts, cfg, novel)
        if cfg["topup"] == "leeps":
            variants.record_outcomes(attempts, cfg["leeps_history"], leeps_stats)

        # ---- ALGO 7: update, then the engines generate with the new weights
        if cfg["teacher_reward"] == "soar":
            stats = soar_update(model, members, optimizers, proposals, attempts, matches, cfg, rank,
                                world, engine, step, generate, check, probe, probe_rates, times)
        else:
            with timed(times, "train"):
                stats = update(model, members, optimizers, proposals, attempts, cfg, rank, world)
                engines.sync_adapters(engine, model, [m["name"] for m in members], 2 * step + 1)

        # ---- ALGO 8: TrueSkill, one rated match per (teacher, student) pair
        played = rate(matches, attempts, members, cfg)

        # ---- PLUMBING: checkpoint (rank 0 holds every optimizer state: nothing to gather), logs
        last = step + 1 == cfg["steps"]
        if last or (cfg["save_every"] > 0 and (step + 1) % cfg["save_every"] == 0):
            with timed(times, "checkpoint"):
                if rank == 0:
                    rates = [[name, i, rate] for (name, i), rate in probe_rates.items()]
                    state = dict(config=cfg, next_id=next_id, decisions_rng=rng.getstate(),
                                 leeps_stats=leeps_stats, probe_rates=rates)
                    written = population.save_checkpoint(cfg["out_dir"], step + 1, model, members,
                                                         optimizers, state, problems)
                    # after the rename: the newest complete checkpoint is never the one removed
                    population.prune_checkpoints(cfg["out_dir"], cfg["keep_checkpoints"], written)
                if world > 1:
                    # inside an if true on every rank: nobody runs ahead of a checkpoint
                    dist.barrier()
        if rank == 0:
            row = logs.step_metrics(step, members, proposals, attempts, played, problems, stats,
                                    children)
            row.update({f"time/{k}": v for k, v in times.items()})
            # problems whose own answer was not graded correct at grading: no reward either way
            row["void_problems"] = sum(bool(p.get("void")) for p in proposals)
            for name, member_stats in stats.items():
                # rollout-trainer mismatch (vLLM engine only; None with hf or nothing trained)
                row[f"mismatch/{name}/mean"] = member_stats["mismatch"]["mean"]
                row[f"mismatch/{name}/max"] = member_stats["mismatch"]["max"]
            row["time/step"] = time.time() - t_step
            generated = sum(len(x["gen"]["completion_ids"]) for x in proposals + attempts)
            row["tokens_per_s"] = generated / max(times["generate"], 1e-9)
            logs.write_lines(paths["metrics"], [row])
            logs.write_lines(paths["samples"],
                             logs.step_samples(step, proposals, attempts, cfg["samples_per_step"]))
            logs.log_wandb(wandb_run, row, step)
            logs.print0(logs.step_line(step, cfg["steps"], row, started, start))

    # vLLM's shutdown tears down the default process group under torchrun: the engine goes first
    engines.close_engine(engine)
    if wandb_run is not None:
        wandb_run.finish()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return {"model": model, "members": members, "archive": problems, "optimizers": optimizers}


if __name__ == "__main__":
    main(parse_config(config, sys.argv[1:]))
