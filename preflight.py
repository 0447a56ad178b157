"""`python train.py --preflight` (or under torchrun, with the flags of the real run): the first
thing to run on a rented node. In a few minutes it does one of everything a step does, at the real
sizes, and prints what it measured beside what the memory plan (plan.py) says:
- the base loaded and the members made (train.main, before this runs);
- one generation call (one student prompt per member and task type on every rank): tokens/s,
  vLLM's KV-cache tokens, and the rollout-trainer log-prob mismatch on what it generated;
- one update of one member at the planned micro-batch (max(micro_batch_tokens, the longest
  sequence) tokens on every rank): its peak memory above what was allocated before;
- one adapter sync of every member, one all_reduce of a member's gradient size per member;
- one checkpoint written by rank 0 and read back by every rank (a node that cannot read out_dir
  could not resume);
- a sandbox burst: validations of the seed problems on every rank at once, as a step runs them.
It exits 1 when a memory measurement exceeds the plan by more than 10 %, vLLM's KV cache holds
10 % fewer tokens than planned, a rank cannot read the checkpoint, or a seed problem fails
validation under the burst (timeouts on an oversubscribed node). Throughputs have no plan to
exceed: they are printed to size the run (seconds per step).

Why a file of its own: train.py runs the loop; this checks a node before the loop is trusted
with it. It takes main's objects (the model, the engine, the check closure) and train_member as
arguments, so it imports nothing from train.py.
"""
import json
import os
import random
import shutil
import time

import torch
import torch.distributed as dist

import archive
import distributed
import engines
import plan
import population
import verify

MARGIN = 1.10              # a measurement may exceed its plan by 10 %
BURST_PER_RANK = 128       # sandbox validations per rank in the burst
GB = 1e9


def peak_live_bytes(fn):
    """Peak bytes of CPU tensors alive at once while fn() runs, above those alive before: torch's
    profiler records every allocation and free (self_cpu_memory_usage per op); their running sum
    in time order is the live total. Exact for tensor memory, blind to the interpreter's own;
    fn's return value is returned with it."""
    import torch.profiler
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        result = fn()
    events = []
    for event in prof.events():
        if event.self_cpu_memory_usage:
            events.append((event.time_range.start, event.self_cpu_memory_usage))
    live = peak = 0
    for _, change in sorted(events):
        live += change
        peak = max(peak, live)
    return peak, result


def update_sequences(cfg, vocab, world):
    """A member's batch that gives every rank one micro-batch of the planned size:
    max(micro_batch_tokens, longest) tokens (up to rounding), as few equal sequences (no padding)
    of at most the longest length; rewards alternate so that every advantage is non-zero (all
    forwarded). Returns (sequences, tokens per rank)."""
    longest = cfg["max_prompt_tokens"] + cfg["max_new_tokens"]
    tokens = max(cfg["micro_batch_tokens"], longest)
    # at least two: a group of one has advantage 0 and would not be forwarded
    count = max(2, -(-tokens // longest))
    length = tokens // count
    completion = min(cfg["max_new_tokens"], length - 1)
    rng = random.Random(cfg["seed"])
    sequences = []
    for i in range(count * world):
        sequences.append(dict(prompt_ids=[rng.randrange(vocab) for _ in range(length - completion)],
                              completion_ids=[rng.randrange(vocab) for _ in range(completion)],
                              reward=float(i % 2), role="student", task="code_o"))
    return sequences, count * length


def planned_update_bytes(cfg, tokens):
    """The plan's bytes for one member's first update: its activations, gradients and all_reduce
    buffer, and its two AdamW moments (made at its first step)."""
    config = plan.model_config(cfg["model"], cfg["model_cache"])
    targets = [t.strip() for t in cfg["lora_targets"].split(",") if t.strip()]
    _, adapter = plan.count_parameters(config, targets, cfg["lora_rank"])
    dtype_bytes = torch.empty(0, dtype=getattr(torch, cfg["dtype"])).element_size()
    activations = plan.activation_bytes(config, tokens, dtype_bytes, cfg["gradient_checkpointing"],
                                        cfg["logprob_chunk"], targets)
    return activations + 2 * adapter * 4 + 2 * adapter * 4


def measure_update(cfg, model, member, optimizer, train_member, rank, world):
    """(peak bytes above the start, seconds, tokens on this rank) of one update of `member`."""
    device = next(model.parameters()).device
    vocab = model.get_base_model().config.vocab_size
    sequences, tokens = update_sequences(cfg, vocab, world)

    def update():
        return train_member(model, member, optimizer, sequences, cfg, rank, world)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        started = time.time()
        update()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before, time.time() - started, tokens
    # CPU: the profiler that counts the bytes slows the update down; a second one is timed
    peak, _ = peak_live_bytes(update)
    started = time.time()
    update()
    return peak, time.time() - started, tokens


def kv_cache_tokens(engine):
    """(tokens vLLM's KV cache holds, tokens planned for it); None for the hf engine. The plan is
    plan.memory_plan's on CUDA; on CPU vLLM is given kv_cache_memory_bytes, planned the same way."""
    if engine["kind"] != "vllm":
        return None
    cache = engine["llm"].llm_engine.vllm_config.cache_config
    measured = cache.num_gpu_blocks * cache.block_size
    config = engine["model"].get_base_model().config
    dtype_bytes = torch.empty(0, dtype=engine["dtype"]).element_size()
    per_token = plan.kv_bytes_per_token(config, dtype_bytes)
    if not cache.kv_cache_memory_bytes:
        # CUDA: vLLM sizes the cache itself; summarise takes the plan's number
        return measured, None
    return measured, int(cache.kv_cache_memory_bytes // per_token)


def measure_generation(cfg, engine, model, members, problems):
    """One generation call on this rank: (requests, those generated, new tokens, seconds,
    mismatch mean, mismatch max)."""
    requests = []
    for member in members:
        for task in verify.TASKS:
            if problems[task]:
                core = archive.problem_core(problems[task][0])
                requests.append((verify.student_prompt(task, core), member["name"]))
    started = time.time()
    outputs = engines.generate(engine, requests, cfg["temperature"], cfg["top_p"],
                               cfg["max_new_tokens"], cfg["seed"])
    seconds = time.time() - started
    tokens = sum(len(o["completion_ids"]) for o in outputs)
    # a prompt that leaves no room in max_prompt_tokens + max_new_tokens is not generated
    served = sum(o["error"] is None for o in outputs)
    # the first member's outputs: their log-probs under training's forward against vLLM's
    mine = [o for (_, name), o in zip(requests, outputs)
            if name == members[0]["name"] and o["completion_ids"]]
    gap_sum, gap_count, gap_max = 0.0, 0, 0.0
    if mine and mine[0]["logprobs"] is not None:
        with torch.no_grad():
            logp, _, _ = population.token_logprobs(model, members[0]["name"],
                                                   [o["prompt_ids"] for o in mine],
                                                   [o["completion_ids"] for o in mine],
                                                   chunk=cfg["logprob_chunk"])
        gap_sum, gap_count, gap_max = engines.logprob_gaps(logp, mine)
    if not gap_count:
        return len(requests), served, tokens, seconds, None, None
    return len(requests), served, tokens, seconds, gap_sum / gap_count, gap_max


def measure_all_reduce(model, members, world):
    """(bytes per member, seconds) of one all_reduce of a member's float32 gradient size per
    member; None with one rank."""
    if world == 1:
        return None
    params = population.trainable_params(model, members[0]["name"])
    count = sum(p.numel() for p in params)
    flat = torch.zeros(count, dtype=torch.float32, device=params[0].device)
    # one unmeasured call: NCCL sets up its communicators on the first
    dist.all_reduce(flat)
    distributed.barrier()
    started = time.time()
    for _ in members:
        dist.all_reduce(flat)
    if flat.is_cuda:
        torch.cuda.synchronize(flat.device)
    return count * 4, time.time() - started


def measure_checkpoint(cfg, model, members, optimizers, problems, rank):
    """Rank 0 writes a checkpoint under out_dir/preflight, every rank reads it back. Returns
    (bytes, write seconds or None off rank 0, read seconds or None, read error or None)."""
    folder = os.path.join(cfg["out_dir"], "preflight")
    written, write_seconds = 0, None
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
        started = time.time()
        path = population.save_checkpoint(folder, 0, model, members, optimizers,
                                          {"preflight": True}, problems)
        write_seconds = time.time() - started
        with open(os.path.join(path, "state.json")) as f:
            written = sum(json.load(f)["files"].values())
    distributed.barrier()
    read_seconds, error = None, None
    started = time.time()
    try:
        latest = population.latest_checkpoint(folder)
        if latest is None:
            raise ValueError(f"{folder}: no checkpoint visible from this rank (is out_dir on a "
                             "filesystem every node shares?)")
        population.load_checkpoint(latest, model, members, optimizers)
        read_seconds = time.time() - started
    except ValueError as e:
        error = str(e)
    distributed.barrier()
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
    return written, write_seconds, read_seconds, error


def burst_jobs(problems, world):
    """BURST_PER_RANK validations per rank of the seed problems (all valid: each must pass)."""
    seeds = []
    for problem in problems["code_o"]:
        seeds.append(("code_o", dict(program=problem["program"], input=problem["input"])))
    for problem in problems["code_f"]:
        seeds.append(("code_f", dict(program=problem["program"], inputs=problem["inputs"],
                                     message=problem["message"])))
    jobs = []
    while seeds and len(jobs) < BURST_PER_RANK * world:
        jobs.append(seeds[len(jobs) % len(seeds)])
    return jobs


def rank_measurements(cfg, model, members, optimizers, engine, problems, check, train_member,
                      rank, world):
    """Every measurement on this rank, as one flat dict (the collectives inside run on every
    rank in the same order)."""
    first = members[0]["name"]
    row = {"rank": rank, "node": distributed.node_rank()}
    device = next(model.parameters()).device
    startup_peak = 0
    if device.type == "cuda":
        # measure_update resets the peak: keep the start-up's (loading, vLLM's profiling run)
        startup_peak = torch.cuda.max_memory_allocated(device)
    # a step's order: generate (the engine holds the trained weights), update, sync
    requests, served, tokens, seconds, mean, largest = measure_generation(cfg, engine, model,
                                                                         members, problems)
    row.update({"generate/requests": requests, "generate/served": served,
                "generate/tokens": tokens, "generate/seconds": seconds,
                "mismatch/mean": mean, "mismatch/max": largest})
    peak, seconds, tokens = measure_update(cfg, model, first, optimizers[first], train_member,
                                           rank, world)
    row.update({"update/peak_bytes": peak, "update/seconds": seconds, "update/tokens": tokens})
    started = time.time()
    engines.sync_adapters(engine, model, [m["name"] for m in members], 10**6)
    row["sync/seconds"] = time.time() - started
    # the hf engine reads the live model: nothing to sync
    row["sync/bytes"] = None
    if engine["kind"] == "vllm":
        row["sync/bytes"] = sum(engines.adapter_bytes(model, m["name"], engine["dtype"])
                                for m in members)
    row["all_reduce"] = measure_all_reduce(model, members, world)
    written, write_seconds, read_seconds, error = measure_checkpoint(cfg, model, members,
                                                                     optimizers, problems, rank)
    row.update({"checkpoint/bytes": written, "checkpoint/write_seconds": write_seconds,
                "checkpoint/read_seconds": read_seconds, "checkpoint/error": error})
    jobs = burst_jobs(problems, world)
    started = time.time()
    results = check(verify.validate, jobs)
    row.update({"sandbox/jobs": len(jobs), "sandbox/seconds": time.time() - started,
                "sandbox/valid": sum(bool(r["valid"]) for r in results)})
    row["peak_bytes"] = None
    if device.type == "cuda":
        row["peak_bytes"] = max(startup_peak, torch.cuda.max_memory_allocated(device))
    return row


def compare(name, measured, planned, larger_is_worse=True):
    """One line of the report: {"what", "measured", "planned", "ok"}; ok when within MARGIN of
    the plan (or when there is no plan)."""
    ok = True
    if measured is not None and planned:
        if larger_is_worse:
            ok = measured <= MARGIN * planned
        else:
            ok = measured >= planned / MARGIN
    return {"what": name, "measured": measured, "planned": planned, "ok": ok}


def summarise(cfg, roles, rows, kv, engine_kind):
    """The report from every rank's measurements: lines compared with the plan, and rates."""
    world = len(rows)
    nodes = len({row["node"] for row in rows})
    worst = max(rows, key=lambda row: row["update/peak_bytes"])
    planned = planned_update_bytes(cfg, worst["update/tokens"])
    lines = [compare("update peak GB (largest rank)", worst["update/peak_bytes"] / GB,
                     planned / GB)]
    if rows[0]["peak_bytes"] is not None:
        # the allocator sees neither the CUDA context nor fragmentation
        memory = plan.memory_plan(cfg, roles)
        expected = memory["gb/total"] - memory["gb/cuda_context"]
        peak = max(row["peak_bytes"] for row in rows) / GB
        lines.append(compare("peak GB allocated (largest rank)", peak, expected))
        if kv is not None:
            kv = (kv[0], memory["kv_cache_tokens"])
    if kv is not None:
        lines.append(compare("vLLM KV-cache tokens", kv[0], kv[1], larger_is_worse=False))
    errors = [f"rank {row['rank']}: {row['checkpoint/error']}" for row in rows
              if row["checkpoint/error"]]
    lines.append({"what": "checkpoint read on every rank", "measured": errors or "all read",
                  "planned": None, "ok": not errors})
    # the burst's results are gathered on every rank: rank 0's row holds them all
    valid = rows[0]["sandbox/valid"]
    lines.append({"what": "seed problems valid under the burst",
                  "measured": f"{valid}/{rows[0]['sandbox/jobs']}", "planned": None,
                  "ok": valid == rows[0]["sandbox/jobs"]})
    served = sum(row["generate/served"] for row in rows)
    asked = sum(row["generate/requests"] for row in rows)
    lines.append({"what": "generation requests served", "measured": f"{served}/{asked}",
                  "planned": None, "ok": served == asked})
    # rank 0 writes the checkpoint and its node's adapter sync; the slowest rank sets the pace
    writer = rows[0]
    reads = [r["checkpoint/read_seconds"] for r in rows if r["checkpoint/read_seconds"]]
    written = writer["checkpoint/bytes"] / GB
    rates = {
        "update tokens/s per rank": writer["update/tokens"] / max(r["update/seconds"]
                                                                  for r in rows),
        "generation tokens/s per rank": sum(r["generate/tokens"] / r["generate/seconds"]
                                            for r in rows) / world,
        "adapter sync GB/s": None,
        "checkpoint write GB/s": written / writer["checkpoint/write_seconds"],
        "checkpoint read GB/s (slowest rank)": None,
        "validations/s per node": rows[0]["sandbox/jobs"] / rows[0]["sandbox/seconds"] / nodes,
    }
    if writer["sync/bytes"] is not None:
        rates["adapter sync GB/s"] = writer["sync/bytes"] / GB / writer["sync/seconds"]
    if reads:
        rates["checkpoint read GB/s (slowest rank)"] = written / max(reads)
    if writer["all_reduce"] is not None:
        size, seconds = writer["all_reduce"]
        rates["all_reduce GB/s"] = len(roles) * size / GB / seconds
    means = [r["mismatch/mean"] for r in rows if r["mismatch/mean"] is not None]
    mismatch = None
    if means:
        mismatch = {"mean": sum(means) / len(means),
                    "max": max(r["mismatch/max"] for r in rows if r["mismatch/max"] is not None)}
    return {"world": world, "nodes": nodes, "engine": engine_kind, "lines": lines, "rates": rates,
            "mismatch": mismatch, "ok": all(line["ok"] for line in lines)}


def show(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(cfg, report):
    """The report as lines: measured beside planned, then the rates."""
    out = [f"preflight: {cfg['model']}, {report['world']} rank(s) on {report['nodes']} node(s), "
           f"{cfg['dtype']}, micro_batch_tokens {cfg['micro_batch_tokens']}, "
           f"{report['engine']} engine",
           f"  {'':<40}{'measured':>16}{'planned':>16}"]
    for line in report["lines"]:
        verdict = "ok" if line["ok"] else "OVER THE PLAN"
        out.append(f"  {line['what']:<40}{show(line['measured']):>16}{show(line['planned']):>16}"
                   f"  {verdict}")
    for what, value in report["rates"].items():
        out.append(f"  {what:<40}{show(value):>16}")
    if report["mismatch"]:
        out.append(f"  {'|log p_vLLM - log p_train| mean / max':<40}"
                   f"{show(report['mismatch']['mean']):>16}{show(report['mismatch']['max']):>16}")
    verdict = "every measurement within the plan"
    if not report["ok"]:
        verdict = "FAILED: " + "; ".join(line["what"] for line in report["lines"] if not line["ok"])
    out.append(f"preflight: {verdict}")
    return "\n".join(out)


def run(cfg, roles, model, members, optimizers, engine, problems, check, train_member, rank,
        world):
    """Measure, report on rank 0 (a table, then one JSON line), shut the engine and the process
    group down, and raise SystemExit(1) on every rank when a measurement is over its plan.
    Returns the report otherwise."""
    row = rank_measurements(cfg, model, members, optimizers, engine, problems, check,
                            train_member, rank, world)
    rows = [row] * world
    if world > 1:
        dist.all_gather_object(rows, row)
    report = summarise(cfg, roles, rows, kv_cache_tokens(engine), engine["kind"])
    report["ranks"] = rows
    if rank == 0:
        print(table(cfg, report), flush=True)
        print(json.dumps(report), flush=True)
    # vLLM's shutdown tears down the default process group under torchrun: the engine goes first
    engines.close_engine(engine)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    if not report["ok"]:
        raise SystemExit(1)
    return report
