"""
PopuLoRA (arXiv 2605.16727) on the AZR recipe (arXiv 2505.03335): N_T teacher and N_S student LoRA
adapters on one frozen code LLM. Each step teachers propose code_i / code_o / code_f problems, the
sandbox keeps the valid ones, the matched students attempt them, every adapter gets one
task-relative REINFORCE++ update, TrueSkill rates every match, and every `evolve_every` steps the
weakest members are replaced by LoRA weight-space children of strong ones.

Here: the config, the rewards, advantages, loss and match rule (design §5, §6), the swap points'
tables (SWAPS: every idea a researcher swaps is a function and a line), the update, and main(),
whose loop names each phase of a step once, numbered as in README and the `ALGO n` comments:
1 evolve, 2 match, 3 propose, 4 validate, 5 solve, 6 grade, 7 reward, 8 update, 9 rate, 10 log
and save. Elsewhere: rollout.py (propose, validate, solve, grade: generation and the sandbox),
startup.py (the CLI and start-up checks), checkpoint.py (what a run saves and resumes),
verify.py (prompts, parsing, validity, grading), population.py (base, adapters, log-probs,
checkpoint folders), engines.py (generation), ratings.py (the rating systems), evolve.py
(operators, the replacement step), variants.py (OpenSIR, SOAR, LEEPS), archive.py (the problem
archive), logs.py (metrics and samples), plan.py (the GPU memory plan).

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
import contextlib
import json
import os
import random
import sys
import time

import torch

import archive
import checkpoint
import distributed
import engines
import evolve
import logs
import plan
import population
import preflight
import ratings
import rollout
import startup
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
    # The swap points (see SWAPS below: each key names an entry of its table; --help lists them).
    # Related systems (README "Variants") are entries too; the defaults are PopuLoRA's own.
    teacher_reward="populora",      # how a teacher is paid: a name of TEACHER_REWARDS
    advantage="trr++",              # the advantage estimator: a name of ADVANTAGES
    match_rule="margin",            # a match's outcome from its solve rate: a name of MATCH_RULES
    rating="trueskill",             # the rating system: a name of ratings.SYSTEMS
    opensir_novelty_weight=0.5,     # OpenSIR: weight of novelty against the difficulty band term
    opensir_band_low=0.2,           # OpenSIR: solve rates in [low, high] are fully "learnable"
    opensir_band_high=0.8,          # OpenSIR: upper end of that band
    opensir_neighbours=4,           # OpenSIR: archive problems novelty is measured against
    soar_probe="",                  # SOAR: JSONL of hard probe problems (task + AZR seed fields)
    topup="recent",                 # the top-up sampler: a name of rollout.TOPUPS
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
    # operators' hyperparameters, JSON {operator: {name: value}}, e.g. {"gauss_rel": {"sigma":
    # 0.01}}; "" = defaults; checked against their signatures (evolve.operator_hp)
    evolve_hp="",
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


# ----------------------------------------------------------------------------- the algorithm
# The parts a researcher changes: pure functions, each unit-tested (tests/test_train.py).

def student_reward(correct, well_formed):
    """AZR's solver reward (design §4.6): correct 1, well-formed but wrong -0.5, format error -1."""
    if correct:
        return 1.0
    if well_formed:
        return -0.5
    return -1.0


def teacher_reward(proposal, cfg):
    """The proposer reward for one proposal (design §4.6, deviation 3): invalid or badly formatted
    -1; a valid problem its matched student solves at rate p pays 1 - p (the student's failure
    rate, the paper's words) if 0 < p < 1, 0 if p = 1 (too easy) and `teacher_reward_unsolved` if
    p = 0 (our default 0 is AZR's learnability reward; AZR's code pays -0.5)."""
    if not proposal["valid"]:
        return -1.0
    solve_rate = proposal["solve_rate"]
    if solve_rate == 1:
        return 0.0
    if solve_rate == 0:
        return cfg["teacher_reward_unsolved"]
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


def match_outcome(solve_rate, cfg):
    """1 student wins, 0 draw, -1 teacher wins (design §6 [ours]): a solve rate within 0.5 +-
    draw_margin is a draw. solve_rate = the student's mean correctness over the teacher's valid
    problems; None (the teacher had no valid problem) is a teacher loss."""
    if solve_rate is None:
        return 1
    if solve_rate < 0.5 - cfg["draw_margin"]:
        return -1
    if solve_rate > 0.5 + cfg["draw_margin"]:
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
            p = ratings.win_probability(student["rating"], teacher["rating"])
            weights.append(max(p * (1 - p), 1e-12))
        k = rng.choices(range(len(pool)), weights)[0]
        pairs.append((teacher["name"], pool.pop(k)["name"]))
    return pairs


# ----------------------------------------------------------------------------- the swap points
# Every place a researcher swaps an idea is one line of a table: its config key names the entry,
# check_config refuses a name with no entry (listing the names), and the step dispatches through
# the same table. A new idea is a function and a line here.

# How a teacher is paid (cfg["teacher_reward"]). reward(proposal, cfg) -> float, for a proposal
# with "valid" and "solve_rate" (and what its measure put there). Optional hooks, each
# hook(proposals, matches, cfg, tools, state) (`tools`: main's run dict, `state`: the variants'
# state, variants.initial_state): check(cfg) at start-up, start(cfg, tools, state) once before the
# model loads, measure in the rewards phase before teachers are paid, after_students: the teachers
# are paid and updated only after the students' update, which this hook measures.
TEACHER_REWARDS = {
    "populora": dict(reward=teacher_reward),
    # OpenSIR: novelty + a learnable band (README "Variants")
    "opensir": dict(reward=variants.opensir_teacher_reward, measure=variants.measure_novelty),
    # SOAR: the matched student's gain on a probe set over its update
    "soar": dict(reward=variants.soar_teacher_reward, check=variants.check_soar,
                 start=variants.start_soar, measure=variants.probe_before,
                 after_students=variants.probe_gains),
}
# The advantage estimator (cfg["advantage"]): (rewards, groups) -> advantages, one per sequence.
ADVANTAGES = {"trr++": trr_advantages}
# A match's outcome (cfg["match_rule"]): (solve rate or None, cfg) -> 1 student wins, 0, -1.
MATCH_RULES = {"margin": match_outcome}
# config key -> the table its value must name (ratings.SYSTEMS and SELECTIONS: ratings.py's own)
SWAPS = {"teacher_reward": TEACHER_REWARDS, "topup": rollout.TOPUPS, "advantage": ADVANTAGES,
         "match_rule": MATCH_RULES, "rating": ratings.SYSTEMS, "selection": ratings.SELECTIONS}


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
    "role", "task"} (the member's WHOLE batch, identical on every rank): advantages (TRR++ by
    default) over the whole batch, this rank's token-balanced share forwarded in micro-batches of
    `micro_batch_tokens`, gradients summed over ranks, global grad-norm clip, and the same AdamW
    step on every rank (design §5, §9). Returns {"loss", "grad_norm", "entropy" {role: nats summed},
    "tokens" {role: count}, "mismatch" {"mean", "max"}: |log pi_vLLM - log pi_train| over the
    forwarded tokens the engine gave log-probs for (None without)}."""
    rewards = [s["reward"] for s in sequences]
    groups = [(s["role"], s["task"]) for s in sequences]
    advantages = ADVANTAGES[cfg["advantage"]](rewards, groups)
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


@contextlib.contextmanager
def timed(times, key):
    start = time.time()
    yield
    times[key] += time.time() - start


# ----------------------------------------------------------------------------- the step's phases
# The records of a step (proposal, attempt, match, member) and their keys: rollout.py's docstring.
# Generation and grading are rollout.py's; here the decisions, the rewards, the update, the rating.

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


def assign_rewards(proposals, attempts, matches, cfg, tools, state):
    """design §4.6: every attempt's student_reward, every proposal's reward by TEACHER_REWARDS
    (after what it measures; one whose measure needs the students' update is paid in `update`), and
    the top-up sampler's record. A response the engine could not generate gets no reward (and no
    update); so does a valid problem none of whose attempts was generated."""
    for a in attempts:
        a["reward"] = None
        # a void attempt decides nothing: neither rewarded nor penalised (verify.grade: its
        # problem's own answer not graded correct in this batch, or a code_i answer the sandbox
        # cannot decide)
        if not a["gen"]["error"] and not a.get("void"):
            a["reward"] = student_reward(a["correct"], a["answer"] is not None)
    for p in proposals:
        graded = [a["correct"] for a in p["attempts"] if not a["gen"]["error"]]
        p["solve_rate"] = logs.mean(graded) if p["valid"] else None
        # a problem with a void attempt: its teacher is not paid for it (else a teacher that made
        # its students' right answers void would be paid on the wrong ones left)
        p["void"] = any(a.get("void") for a in p["attempts"])
        if p["void"]:
            p["solve_rate"] = None
        p["reward"] = None
    paid = TEACHER_REWARDS[cfg["teacher_reward"]]
    if "measure" in paid:
        paid["measure"](proposals, matches, cfg, tools, state)
    if "after_students" not in paid:
        pay_teachers(proposals, paid["reward"], cfg)
    sampler = rollout.TOPUPS[cfg["topup"]]
    if "record" in sampler:
        sampler["record"](attempts, cfg, state)


def pay_teachers(proposals, reward, cfg):
    """Each proposal's reward(proposal, cfg), except where nothing was generated (None)."""
    for p in proposals:
        if p["gen"]["error"] or (p["valid"] and p["solve_rate"] is None):
            continue
        p["reward"] = reward(p, cfg)


def train_members(members, proposals, attempts, cfg, tools):
    """One AdamW step per member (design §5): teachers on their proposals, students on their
    attempts; every rank trains every member on its share of that member's sequences. The engine
    then generates with the new weights. Returns stats per member."""
    stats = {}
    with timed(tools["times"], "train"):
        for m in members:
            sequences = []
            for x in proposals + attempts:
                if x["member"] == m["name"] and x["reward"] is not None:
                    sequences.append(dict(x["gen"], reward=x["reward"], role=x["role"],
                                          task=x["task"]))
            optimizer = tools["optimizers"][m["name"]]
            stats[m["name"]] = train_member(tools["model"], m["name"], optimizer, sequences, cfg,
                                            tools["rank"], tools["world"])
        engines.sync_adapters(tools["engine"], tools["model"], [m["name"] for m in members],
                              2 * tools["step"] + 1)
    return stats


def update(members, proposals, attempts, matches, cfg, tools, state):
    """Every member's update (design §5). A teacher reward paid on the students' update
    (TEACHER_REWARDS' after_students: soar) splits it: the students first, that measurement, the
    teachers' rewards, then the teachers. Returns stats per member."""
    paid = TEACHER_REWARDS[cfg["teacher_reward"]]
    if "after_students" not in paid:
        return train_members(members, proposals, attempts, cfg, tools)
    students = [m for m in members if m["role"] == "student"]
    teachers = [m for m in members if m["role"] == "teacher"]
    stats = train_members(students, proposals, attempts, cfg, tools)
    paid["after_students"](proposals, matches, cfg, tools, state)
    pay_teachers(proposals, paid["reward"], cfg)
    stats.update(train_members(teachers, proposals, attempts, cfg, tools))
    return stats


def rate(matches, attempts, members, cfg):
    """One rated match per (teacher, student) pair (design §6): the student's solve rate on its
    teacher's valid problems decides the outcome, none counted of a problem the student has a void
    attempt of (a pair whose every problem is void is not rated). Fills the match records;
    returns the rated ones (students-only runs have none)."""
    by_name = {m["name"]: m for m in members}
    played = []
    for match in matches:
        if match["teacher"] is None:
            continue
        theirs = [a for a in attempts if a["proposal"] is not None
                  and a["teacher"] == match["teacher"] and a["student"] == match["student"]]
        # a problem this student has a void attempt of counts not (another student's void attempt
        # changes no match of this one's: red team round 18, A03)
        void = {id(a["proposal"]) for a in theirs if a.get("void")}
        mine = [a["correct"] for a in theirs if id(a["proposal"]) not in void]
        # every problem of the pair void: the match decides nothing (not the teacher's loss of
        # a teacher with no valid problem, which a student's void answer would then buy)
        if theirs and not mine:
            continue
        match["solve_rate"] = logs.mean(mine)
        match["outcome"] = MATCH_RULES[cfg["match_rule"]](match["solve_rate"], cfg)
        # deviation 6: a self-match carries no rating information
        if not cfg["baseline"]:
            teacher, student = by_name[match["teacher"]], by_name[match["student"]]
            teacher["rating"], student["rating"] = ratings.update(teacher["rating"],
                                                                  student["rating"],
                                                                  match["outcome"])
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
        generator = torch.Generator().manual_seed(rollout.derive_seed(cfg["seed"], step, "evolve"))
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
        member.update(id=child["id"], rating=child["rating"], lineage=member["lineage"] + [event])
    return children, max([next_id] + [child["id"] + 1 for child in children])


# ----------------------------------------------------------------------------- main


# the parts of a step whose seconds are logged as time/<phase>
PHASES = ("generate", "verify", "train", "evolve", "checkpoint")


def start_tools(cfg, rank, world):
    """(tools, state): `tools` is what the phases and the swap points' hooks use beside cfg (rank,
    world, the step's phase seconds, check; main adds the model and, per step, the step and
    generate); `state` is the related systems' state (variants.initial_state) after the swap
    points' start hooks (soar: its probe set, validated)."""
    tools = dict(rank=rank, world=world, times=dict.fromkeys(PHASES, 0.0))

    def check(fn, jobs):
        # sandbox work (validate or grade) split over ranks, gathered back on every rank
        with timed(tools["times"], "verify"):
            def verify_part(part):
                return rollout.run_verify(fn, part, cfg["validate_timeout"])
            return distributed.split_run(verify_part, jobs, rank, world)
    tools["check"] = check
    state = variants.initial_state()
    for entry in (TEACHER_REWARDS[cfg["teacher_reward"]], rollout.TOPUPS[cfg["topup"]]):
        if "start" in entry:
            entry["start"](cfg, tools, state)
    return tools, state


def generator(cfg, engine, step, tools):
    """generate(requests, purpose, temperature) for this step: ONE batched call per phase, split
    over ranks in contiguous blocks (a problem's attempts go to one rank, which prefills it once),
    its seed a function of (seed, step, rank, purpose): reproducible after a resume."""
    rank, world = tools["rank"], tools["world"]

    def generate(requests, purpose, temperature=cfg["temperature"]):
        seed = rollout.derive_seed(cfg["seed"], step, rank, purpose)
        with timed(tools["times"], "generate"):
            return distributed.split_blocks(lambda share: engines.generate(
                engine, share, temperature, cfg["top_p"], cfg["max_new_tokens"], seed),
                requests, rank, world)
    return generate


def main(cfg):
    # ---- PLUMBING: cheap checks first, then the memory plan, then processes and models
    roles = startup.member_roles(cfg)
    resume = startup.check_config(cfg, roles, SWAPS)
    if cfg["plan"]:
        # print the per-rank memory plan and stop: nothing is loaded, no GPU needed
        memory = plan.memory_plan(cfg, roles)
        print(plan.table(memory))
        print(json.dumps(memory))
        return memory
    rank, world, device = distributed.setup_distributed(cfg)
    dtype, checkpointing = startup.precision(cfg, device, roles)
    # model-written code runs only where the sandbox isolates the filesystem, unless the user
    # accepts the risk by name (every rank starts its own sandbox pool)
    verify.require_isolation(cfg["unsafe_sandbox_without_filesystem_isolation"])
    # decisions (matches, references, top-ups) are drawn on rank 0 only and broadcast
    rng = random.Random(cfg["seed"])
    tools, state = start_tools(cfg, rank, world)
    check = tools["check"]
    problems = None
    if not resume:
        problems = startup.first_archive(cfg, roles, check)

    # ---- the population: frozen base + one LoRA adapter per member, identical on every rank
    folder, model, tokenizer, members = startup.load_population(cfg, roles, dtype, device,
                                                                 checkpointing)

    make_optimizer = startup.optimizer_factory(model, cfg)
    optimizers = {m["name"]: make_optimizer(m["name"]) for m in members}
    start, next_id = 0, len(members)
    if resume:
        problems, start, next_id = checkpoint.restore(resume, model, members, optimizers, rng, cfg,
                                                      state)
    checkpoint.load_init_adapters(cfg, model, members, optimizers, make_optimizer)
    engine = startup.start_engine(cfg, folder, model, tokenizer, members, dtype)
    if cfg["preflight"]:
        # one update, generation, sync, all_reduce, checkpoint and sandbox burst beside the plan
        resolved = dict(cfg, dtype=dtype, gradient_checkpointing=checkpointing)
        return preflight.run(resolved, roles, model, members, optimizers, engine, problems, check,
                             train_member, rank, world)
    paths = {name: os.path.join(cfg["out_dir"], f"{name}.jsonl") for name in ("metrics", "samples")}
    wandb_run = None
    if rank == 0:
        wandb_run = logs.start_logs(cfg, paths, start, world, resume)
    tools.update(model=model, engine=engine, optimizers=optimizers, members=members,
                 embed=startup.embedder(model, tokenizer), problems=problems)
    logs.print0(f"{[m['name'] for m in members]} on {world} rank(s), {device}, {dtype}, "
                f"{engine['kind']} engine, gradient checkpointing {checkpointing}, "
                f"steps {start}..{cfg['steps']}")
    started = time.time()

    for step in range(start, cfg["steps"]):
        t_step = time.time()
        times = dict.fromkeys(PHASES, 0.0)
        tools.update(step=step, times=times, generate=generator(cfg, engine, step, tools))
        # e.g. dropout: a function of (step, rank), also after a resume
        torch.manual_seed(rollout.derive_seed(cfg["seed"], step, rank, "torch"))

        # ---- ALGO 1: evolve every evolve_every steps (design §7), at the START of the step, so
        # every checkpoint holds members that have trained (deviation 7); true on every rank
        children = []
        if cfg["evolve_every"] > 0 and step > 0 and step % cfg["evolve_every"] == 0:
            with timed(times, "evolve"):
                children, next_id = evolve_population(model, members, optimizers, make_optimizer,
                                                      cfg, step, next_id, rank, world)
                engines.sync_adapters(engine, model, [c["name"] for c in children], 2 * step)

        # ---- ALGO 2: match (PFSP over the ratings) and pick the references: rank 0 decides
        teachers = [m for m in members if m["role"] in ("teacher", "both")]
        students = [m for m in members if m["role"] in ("student", "both")]
        decisions = None
        if rank == 0:
            decisions = plan_step(cfg, members, teachers, students, problems, rng)
        slots, matches, shown = distributed.broadcast_object(decisions, 0, world)

        # ---- ALGO 3: propose
        proposals = rollout.propose(slots, shown, problems, tokenizer, cfg, tools["generate"])

        # ---- ALGO 4: validate; valid problems join the archive (cap, oldest evicted)
        rollout.validate(proposals, step, check)
        rollout.archive_valid(problems, proposals, cfg)

        # ---- ALGO 5: solve, with top-ups picked by rank 0
        topups = None
        if rank == 0:
            topups = rollout.pick_topups(matches, proposals, problems, cfg, rng, tools, state)
        topups = distributed.broadcast_object(topups, 0, world)
        attempts = rollout.solve(matches, proposals, topups, problems, cfg, tools["generate"])

        # ---- ALGO 6: grade; every problem keeps its solve statistics
        rollout.grade(attempts, check)
        archive.record_solves(attempts)

        # ---- ALGO 7: reward
        assign_rewards(proposals, attempts, matches, cfg, tools, state)

        # ---- ALGO 8: update, then the engines generate with the new weights
        stats = update(members, proposals, attempts, matches, cfg, tools, state)

        # ---- ALGO 9: rate, one rated match per (teacher, student) pair
        played = rate(matches, attempts, members, cfg)

        # ---- ALGO 10: log and save: a checkpoint every save_every steps and at the end
        last = step + 1 == cfg["steps"]
        if last or (cfg["save_every"] > 0 and (step + 1) % cfg["save_every"] == 0):
            with timed(times, "checkpoint"):
                checkpoint.save(cfg, step, model, members, optimizers, problems, rng, next_id,
                                state, rank, world)
        if rank == 0:
            row = logs.step_row(step, members, proposals, attempts, played, problems, stats,
                                children, times, time.time() - t_step)
            samples = logs.step_samples(step, proposals, attempts, cfg["samples_per_step"])
            logs.write_step(paths, wandb_run, row, samples)
            logs.print0(logs.step_line(step, cfg["steps"], row, started, start))

    startup.finish(engine, wandb_run)
    return {"model": model, "members": members, "archive": problems, "optimizers": optimizers}


def parse_args(argv):
    """train.py's command line: every config key a flag (startup.parse_config), --help from the
    config's comments and the swap points' tables."""
    description = __doc__.strip().split("\n\n")[0]
    return startup.parse_config(config, argv, description, __file__, SWAPS)


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
