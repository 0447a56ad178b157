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
   denominator), so `entropy/*` is over trained tokens only.
6) Baseline: the single adapter "a0" plays itself; the self-match is logged, not rated. A teacher matched to several
   students (N_S > N_T) is paid on all their attempts.
"""
import argparse
import contextlib
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
    micro_batch=8,                  # sequences per forward/backward (gradient accumulation); lower first on OOM
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
    seed_archive="",                # AZR seed JSONL (snippet+input, or snippet+inputs+message); "" = identity program
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
    model_cache="out/.tiny",        # where the built-in `tiny` / `tiny-warm` bases are built once and reused
    out_dir="out",                  # metrics.jsonl, samples.jsonl, config.json, step_NNNNNN/ checkpoints
    save_every=10,                  # steps between checkpoints (the last step is always saved); -1 = only the last
    resume="",                      # "" = fresh, "auto" = newest checkpoint in out_dir, or a step_NNNNNN folder
    samples_per_step=4,             # problems (with one answer each) written to samples.jsonl per step
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
    """--key value / --key=value for every config key, typed like its default; a bool also as a bare --key."""
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], allow_abbrev=False)
    for key, value in defaults.items():
        kind = dict(type=str2bool, nargs="?", const=True) if isinstance(value, bool) else dict(type=type(value))
        parser.add_argument(f"--{key}", default=value, **kind)
    return vars(parser.parse_args(argv))  # unknown flags and bad values: argparse prints the reason and exits (2)

def check_config(cfg, roles):
    """Everything cheap that can be wrong, before any model or process group exists: one clear message each.
    Returns the checkpoint folder to resume from, or None."""
    for key in ("steps", "propose_per_task", "solve_samples", "micro_batch", "archive_cap", "max_new_tokens") + (
            () if cfg["baseline"] else ("teachers", "students")):
        if cfg[key] < 1:
            raise SystemExit(f"--{key} {cfg[key]}: must be >= 1" + (" (or --baseline: one adapter plays both roles)"
                                                                     if key in ("teachers", "students") else ""))
    for key, allowed in (("engine", ("auto", "hf", "vllm")), ("dtype", ("", "float32", "bfloat16", "float16")),
                         ("mutations", evolve.MUTATIONS), ("crossovers", evolve.CROSSOVERS)):
        if any(name.strip() not in allowed for name in (cfg[key].split(",") if key.endswith("s") else [cfg[key]])):
            raise SystemExit(f"--{key} {cfg[key]!r}: expected {'names' if key.endswith('s') else 'one'} of "
                             f"{list(allowed)}")
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

def to_cpu(obj):  # optimizer states travel between ranks as CPU tensors
    return ({k: to_cpu(v) for k, v in obj.items()} if isinstance(obj, dict) else obj.detach().cpu() if
            torch.is_tensor(obj) else [to_cpu(v) for v in obj] if isinstance(obj, list) else obj)

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

def as_problem(task, proposal, result):  # the proposal with the verifier's normalised program and its output(s)
    key = "outputs" if task == "code_f" else "output"
    return dict(proposal, program=result["program"], **{key: result[key]})

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

def train_member(model, name, optimizer, sequences, cfg):
    """One AdamW step of member `name` on its sequences {"prompt_ids", "completion_ids", "reward", "role", "task"}:
    TRR++ advantages per (role, task), micro-batches with gradient accumulation, global grad-norm clip."""
    advantages = trr_advantages([s["reward"] for s in sequences], [(s["role"], s["task"]) for s in sequences])
    sequences = [dict(s, advantage=a) for s, a in zip(sequences, advantages)]
    total_tokens = sum(len(s["completion_ids"]) for s in sequences)
    work = sorted((s for s in sequences if s["advantage"] != 0 and s["completion_ids"]),  # deviation 5
                  key=lambda s: len(s["prompt_ids"]) + len(s["completion_ids"]))  # similar lengths share a batch
    optimizer.zero_grad(set_to_none=True)
    stats = {"loss": 0.0, "entropy": {"teacher": 0.0, "student": 0.0}, "tokens": {"teacher": 0, "student": 0}}
    for start in range(0, len(work), cfg["micro_batch"]):
        batch = work[start:start + cfg["micro_batch"]]
        logp, mask, entropy = population.token_logprobs(model, name, [s["prompt_ids"] for s in batch],
                                                        [s["completion_ids"] for s in batch])  # [B, T] each
        advantages = torch.tensor([s["advantage"] for s in batch], dtype=logp.dtype, device=logp.device)
        loss = pg_loss(logp, mask, advantages, total_tokens)
        loss.backward()
        stats["loss"] += loss.item()
        for row, s in enumerate(batch):
            stats["entropy"][s["role"]] += entropy[row].sum().item()
            stats["tokens"][s["role"]] += int(mask[row].sum().item())
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(population.trainable_params(model, name),
                                                              cfg["grad_clip"]))  # before clipping
    optimizer.step()  # parameters without a gradient (all advantages 0) are left alone by AdamW: a no-op step
    return stats


# ----------------------------------------------------------------------------- archive, evolution, checkpoints, logs

def seed_problems(cfg, rank, world):
    """Start-up archive: AZR's identity program, or the --seed_archive problems (a broken line stops the run naming
    its number) re-validated in the sandbox, invalid ones dropped and counted. Code_i/o seeds go into both archives."""
    pairs, induction = [dict(program=IDENTITY, input='"Hello world"')], [dict(IDENTITY_F)]
    if cfg["seed_archive"]:
        pairs, induction, number = [], [], 0
        try:
            with open(cfg["seed_archive"]) as f:
                for number, line in enumerate(f, 1):
                    row = json.loads(line) if line.strip() else None  # AZR's snippets already hold their imports
                    if row is not None:
                        (induction if "inputs" in row else pairs).append(dict(program=row.get("snippet") or row[
                            "program"], **dict(inputs=list(map(str, row["inputs"])), message=str(row["message"]))
                            if "inputs" in row else dict(input=str(row["input"]))))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise SystemExit(f"--seed_archive {cfg['seed_archive']!r}: {e!r} at line {number}; expected JSON lines "
                             "with snippet + input, or snippet + inputs + message (AZR's seed format)")
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
    """SPEC §7: rank 0 plans the children (evolve.replacement_step) and writes them into their slots; plan and weights
    go to every rank; each child's optimizer state is reset, or copied per module from its donor parent."""
    records = None
    if rank == 0:
        adapters = {m["name"]: population.get_adapter(model, m["name"]) for m in members}
        generator = torch.Generator().manual_seed(derive_seed(cfg["seed"], step, "evolve"))
        records = evolve.replacement_step(members, adapters, cfg, generator, step, next_id)
        for r in records:
            population.set_adapter(model, r["name"], r.pop("adapter"))
            r["reason"] = r.pop("info").get("reason", "")
    records = broadcast_object(records, 0, world)
    owner = {m["name"]: i % world for i, m in enumerate(members)}
    donors = sorted({d for r in records for d in [r["copy_optimizer_from"], *(r["optimizer_donors"] or {}).values()]
                     if d})
    states = {d: broadcast_object(to_cpu(optimizers[d].state_dict()) if rank == owner[d] else None, owner[d], world)
              for d in donors}  # every rank calls each broadcast; the donor's owner holds its live state
    keys = list(population.get_adapter(model, members[0]["name"]))  # parameter order of every member's optimizer
    for r in records:
        broadcast_member(model, r["name"], 0, world)
        optimizers[r["name"]] = make_optimizer(r["name"])
        donor_of = [(r["optimizer_donors"] or {}).get(k.rsplit(".lora_", 1)[0], r["copy_optimizer_from"]) for k in keys]
        copied = {k: {n: v.clone() if torch.is_tensor(v) else v for n, v in states[d]["state"][k].items()}  # own copy
                  for k, d in enumerate(donor_of) if d and k in states[d]["state"]}
        if copied and owner[r["name"]] == rank:  # only the child's owner steps it (SPEC §9)
            optimizers[r["name"]].load_state_dict(dict(optimizers[r["name"]].state_dict(), state=copied))
        member = next(m for m in members if m["name"] == r["name"])
        member.update(id=r["id"], mu=r["mu"], sigma=r["sigma"], lineage=member["lineage"] + [
            {k: r[k] for k in ("step", "id", "parents", "parent_names", "operator", "kind", "fallback", "reason")}])
    return records, max([next_id] + [r["id"] + 1 for r in records])

def step_metrics(step, members, proposals, attempts, outcomes, archive, stats, records):
    """The metrics.jsonl row of SPEC §10, per member and aggregate; None (null) = nothing to average this step."""
    row = {"step": step}
    for m in [None] + members:  # None = the aggregate over the whole population
        pre, name = (f"{m['name']}/" if m else ""), m and m["name"]
        props = [p for p in proposals if m is None or p["teacher"] == name] if not m or m["role"] != "student" else None
        atts = [a for a in attempts if m is None or a["student"] == name] if not m or m["role"] != "teacher" else None
        if props is not None:
            row[f"teacher/{pre}format_rate"] = mean(p["parsed"] is not None for p in props)
            row[f"teacher/{pre}reward"] = mean(p["reward"] for p in props)
            row[f"teacher/{pre}difficulty"] = mean(1 - p["solve_rate"] for p in props if p["valid"])  # 1 - solve rate
            row.update({f"teacher/{pre}valid_rate/{t}": mean(p["valid"] for p in props if p["task"] == t)
                        for t in verify.TASKS})
        if atts is not None:
            row[f"student/{pre}format_rate"] = mean(a["answer"] is not None for a in atts)
            row[f"student/{pre}reward"] = mean(a["reward"] for a in atts)
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


def main(cfg):
    # ---- PLUMBING: cheap checks first; torchrun sets RANK / WORLD_SIZE / LOCAL_RANK (plain python: rank 0 of 1)
    roles = ["both"] if cfg["baseline"] else ["teacher"] * cfg["teachers"] + ["student"] * cfg["students"]
    resume = check_config(cfg, roles)
    ddp = "RANK" in os.environ
    rank, world = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if ddp else (0, 1)
    device = cfg["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        torch.cuda.set_device(device)
    if ddp:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")  # gloo: the CPU tests run this path
    dtype = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    rng = random.Random(cfg["seed"])  # decisions (matches, references, top-ups): drawn on rank 0 only, broadcast
    archive = None if resume else seed_problems(cfg, rank, world)  # before the (slow) model: a bad seed file fails fast

    # ---- population: frozen base + one LoRA adapter per member, identical on every rank
    try:  # every rank loads (the tiny build is atomic, hub downloads lock their files)
        base, tokenizer, model_path = population.load_base(cfg["model"], dtype, device, cfg["model_cache"])
    except (OSError, ValueError) as e:
        raise SystemExit(f"--model {cfg['model']!r}: cannot load it ({type(e).__name__}: {e})")
    model, members = population.init_population(base, tokenizer, cfg, roles)
    if device.startswith("cuda"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # 7B activations
    model.train()  # the HF engine switches to eval for generation and back
    make_optimizer = lambda name: torch.optim.AdamW(  # noqa: E731  SPEC §5: AdamW, constant lr
        population.trainable_params(model, name), lr=cfg["lr"], betas=(0.9, 0.999), weight_decay=cfg["weight_decay"])
    optimizers = {m["name"]: make_optimizer(m["name"]) for m in members}
    start, next_id = 0, len(members)
    if resume:
        try:
            state, archive = population.load_checkpoint(resume, model, members, optimizers)
        except ValueError as e:
            raise SystemExit(f"--resume: {e}")
        start, next_id, (version, internal, gauss) = state["step"], state["next_id"], state["decisions_rng"]
        rng.setstate((version, tuple(internal), gauss))
    for i, m in enumerate(members):
        broadcast_member(model, m["name"], 0, world)  # every rank starts from rank 0's weights
        optimizers[m["name"]].state.clear() if i % world != rank else None  # only the owner needs Adam moments
    engine = population.make_engine(cfg["engine"], model_path, model, tokenizer, members, dict(cfg, dtype=dtype))
    paths = {name: os.path.join(cfg["out_dir"], f"{name}.jsonl") for name in ("metrics", "samples")}
    if rank == 0:
        for path in paths.values():  # a resumed run rewrites the steps after its checkpoint: drop them first
            kept = [line for line in open(path) if line.endswith("\n") and json.loads(line)["step"] < start
                    ] if os.path.exists(path) else []
            with open(path + ".tmp", "w") as f:
                f.writelines(kept)
            os.replace(path + ".tmp", path)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        with open(os.path.join(cfg["out_dir"], "config.json"), "w") as f:
            json.dump({"config": cfg, "world": world, "resumed_from": resume, "git_commit": commit}, f, indent=1)
    print0(f"{[m['name'] for m in members]} on {world} rank(s), {device}, {dtype}, {engine['kind']} engine, "
           f"steps {start}..{cfg['steps']}")

    for step in range(start, cfg["steps"]):
        t_step, times = time.time(), dict.fromkeys(("generate", "verify", "train", "evolve", "checkpoint"), 0.0)
        torch.manual_seed(derive_seed(cfg["seed"], step, rank, "torch"))  # e.g. dropout: a function of (step, rank)
        teachers, students = ([m for m in members if m["role"] in (role, "both")] for role in ("teacher", "student"))

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
        plan = broadcast_object(dict(  # evaluated on rank 0 only
            matches=[(members[0]["name"],) * 2] if cfg["baseline"] else population.matchmake(teachers, students, rng),
            shown=[[rng.randrange(len(io))] if task == "code_f" else rng.sample(range(len(archive[task])), min(
                cfg["references"], len(archive[task]))) for _, task in slots]) if rank == 0 else None, 0, world)

        # ---- ALGO 2: propose: every teacher x task type x propose_per_task, one batched generation
        proposals, requests = [], []
        for (teacher, task), shown in zip(slots, plan["shown"]):
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
        topup = broadcast_object({(i, task): pick_recent(archive[task], step, cfg["min_problems"] - len(
            valid_of[(t, task)]), rng) for i, (t, _) in enumerate(plan["matches"]) for task in verify.TASKS}
            if rank == 0 else None, 0, world)
        attempts = [dict(student=student, member=student, role="student", teacher=teacher, task=task, problem=problem,
                         proposal=proposal)
                    for i, (teacher, student) in enumerate(plan["matches"]) for task in verify.TASKS
                    for problem, proposal in [(p["problem"], p) for p in valid_of[(teacher, task)]]
                    + [(archive[task][j], None) for j in topup[(i, task)]] for _ in range(cfg["solve_samples"])]
        requests = [(verify.student_prompt(a["task"], problem_core(a["problem"])), a["student"]) for a in attempts]
        for a, out in zip(attempts, generate(requests, "solve")):
            a.update(gen=out, response=out["text"],
                     answer=None if out["error"] else verify.parse_student(a["task"], out["text"]))
            a["proposal"] and a["proposal"]["attempts"].append(a)

        # ---- ALGO 5: grade every well-formed attempt in the sandbox (batched)
        grades = check(verify.grade, [(a["task"], dict(problem_core(a["problem"]), answer=a["answer"]))
                                      for a in attempts if a["answer"] is not None])
        for a in attempts:
            a["correct"] = a["answer"] is not None and bool(next(grades)["correct"])

        # ---- ALGO 6: rewards (AZR values, SPEC §4.6). Student: correct 1, well-formed but wrong -0.5, format
        # error -1. Teacher: invalid or format error -1; valid with matched solve rate p: 1 - p if 0 < p < 1,
        # 0 if p = 1, teacher_reward_unsolved if p = 0 (deviation 3)
        for a in attempts:
            a["reward"] = 1.0 if a["correct"] else -0.5 if a["answer"] is not None else -1.0
        for p in proposals:
            p["solve_rate"] = rate = mean(a["correct"] for a in p["attempts"]) if p["valid"] else None
            p["reward"] = (-1.0 if rate is None else 1.0 - rate if 0 < rate < 1 else 0.0 if rate == 1
                           else cfg["teacher_reward_unsolved"])

        # ---- ALGO 7: TRR++ advantages per (adapter, role, task) and one AdamW step per member (SPEC §5)
        with timed(times, "train"):
            mine = [m["name"] for i, m in enumerate(members) if i % world == rank]  # SPEC §9: member i: rank i % world
            stats = {name: train_member(model, name, optimizers[name], [dict(x["gen"], reward=x["reward"], role=x[
                "role"], task=x["task"]) for x in proposals + attempts if x["member"] == name], cfg) for name in mine}
            stats = {name: s for part in split_run(lambda share: [stats], list(range(world)), rank, world)
                     for name, s in part.items()}  # every rank's stats on every rank (a collective)
            for i, m in enumerate(members):
                broadcast_member(model, m["name"], i % world, world)  # the owner's new weights to every rank
            population.sync_adapters(engine, model, [m["name"] for m in members], 2 * step + 1)

        # ---- ALGO 8: TrueSkill, one rated match per (teacher, student) pair (SPEC §6)
        outcomes = []
        for teacher, student in plan["matches"]:
            rate = mean(a["correct"] for a in attempts if a["proposal"] and a["teacher"] == teacher
                        and a["student"] == student)
            outcome = population.match_outcome(rate, cfg["draw_margin"])  # None (no valid problem): teacher loses
            if not cfg["baseline"]:  # deviation 6: a self-match carries no rating information
                population.rate_match(*[m for n in (teacher, student) for m in members if m["name"] == n], outcome)
            outcomes.append((teacher, student, rate, outcome))

        # ---- ALGO 9: evolution every evolve_every steps (SPEC §7)
        records = []
        if cfg["evolve_every"] > 0 and (step + 1) % cfg["evolve_every"] == 0:  # true on all ranks (collectives inside)
            with timed(times, "evolve"):
                records, next_id = evolve_population(model, members, optimizers, make_optimizer, cfg, step, next_id,
                                                     rank, world)
                population.sync_adapters(engine, model, [r["name"] for r in records], 2 * step + 2)

        # ---- PLUMBING: checkpoint, then logging (rank 0; every rank holds the same gathered data)
        if step + 1 == cfg["steps"] or (cfg["save_every"] > 0 and (step + 1) % cfg["save_every"] == 0):  # all ranks
            with timed(times, "checkpoint"):  # rank 0 gathers the Adam moments of members trained elsewhere, writes
                parts = [None] * world
                if world > 1:  # a collective; gather_object fills `parts` on rank 0 only
                    dist.gather_object({name: to_cpu(optimizers[name].state_dict()) for name in mine},
                                       parts if rank == 0 else None, dst=0)
                if rank == 0:
                    for name, state in [item for part in parts[1:] for item in part.items()]:
                        optimizers[name].load_state_dict(state)
                    population.save_checkpoint(cfg["out_dir"], step + 1, model, members, optimizers, dict(
                        config=cfg, next_id=next_id, decisions_rng=rng.getstate()), archive)  # atomic (SPEC §10)
                    for i, m in enumerate(members):
                        optimizers[m["name"]].state.clear() if i % world else None  # rank 0 keeps its own moments only
                if world > 1:
                    dist.barrier()  # nobody runs ahead of a checkpoint being written
        if rank == 0:
            row = step_metrics(step, members, proposals, attempts, outcomes, archive, stats, records) | {
                f"time/{k}": v for k, v in times.items()} | {"time/step": time.time() - t_step, "tokens_per_s": sum(
                    len(x["gen"]["completion_ids"]) for x in proposals + attempts) / max(times["generate"], 1e-9)}
            write_lines(paths["metrics"], [row])
            write_lines(paths["samples"], step_samples(step, proposals, attempts, cfg["samples_per_step"]))
            print0(" | ".join([f"step {step + 1}/{cfg['steps']}"] + [f"{k} {row[k]:.4g}" for k in (
                "teacher/reward", "student/reward", "archive/coverage", "time/step") if row[k] is not None]))
    if ddp:
        dist.destroy_process_group()
    return {"model": model, "members": members, "archive": archive, "optimizers": optimizers}


if __name__ == "__main__":
    main(parse_config(config, sys.argv[1:]))
