"""What a training run saves beside its members and takes back on resume (design §10).

Why a file of its own: population.py writes and reads a checkpoint folder atomically (adapters,
optimizer states, members, the archive, RNG states); this file decides what else a run puts in it
(the decisions RNG, the next member id, the variants' state), how an older archive is brought up
to date on resume, and how --init_adapters swaps a member's weights afterwards — plumbing a reader
of train.py's step can skip.
"""
import torch.distributed as dist

import logs
import population
import startup
import verify


def save(cfg, step, model, members, optimizers, problems, rng, next_id, state, rank, world):
    """The checkpoint after `step` (0-based) on rank 0: the population (population.save_checkpoint,
    atomic: rank 0 holds every optimizer state, nothing to gather) and the run's state; the oldest
    beyond keep_checkpoints removed. Every rank waits for it."""
    if rank == 0:
        rates = [[name, i, rate] for (name, i), rate in state["probe_rates"].items()]
        saved = dict(config=cfg, next_id=next_id, decisions_rng=rng.getstate(),
                     leeps_stats=state["leeps_stats"], probe_rates=rates)
        written = population.save_checkpoint(cfg["out_dir"], step + 1, model, members, optimizers,
                                             saved, problems)
        # after the rename: the newest complete checkpoint is never the one removed
        population.prune_checkpoints(cfg["out_dir"], cfg["keep_checkpoints"], written)
    if world > 1:
        # called on every rank: nobody runs ahead of a checkpoint
        dist.barrier()


def restore(resume, model, members, optimizers, rng, cfg, state):
    """Every rank reads the same checkpoint: weights, optimizer states, ratings, lineage, RNG states
    and the variants' `state` (variants.initial_state), in place. Returns (archive, the step to
    start at, the next member id)."""
    try:
        saved, problems = population.load_checkpoint(resume, model, members, optimizers)
    except ValueError as e:
        raise SystemExit(f"--resume: {e}")
    version, internal, gauss = saved["decisions_rng"]
    rng.setstate((version, tuple(internal), gauss))
    state["leeps_stats"] = saved.get("leeps_stats", state["leeps_stats"])
    state["probe_rates"] = {(name, i): rate for name, i, rate in saved.get("probe_rates", [])}
    return upgrade_archive(problems, cfg), saved["step"], saved["next_id"]


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


def load_init_adapters(cfg, model, members, optimizers, make_optimizer):
    """--init_adapters: each named member takes the saved weights (after any --resume, so a
    checkpoint's member can be swapped for another adapter, e.g. an evolution child) and a fresh
    AdamW state. The weights are read on every rank, so they agree without a broadcast."""
    from safetensors.torch import load_file
    names = [m["name"] for m in members]
    for name, path in startup.init_adapter_paths(cfg["init_adapters"]).items():
        if name not in names:
            raise SystemExit(f"--init_adapters {name}={path}: no member {name!r} (members {names})")
        try:
            population.set_adapter(model, name, load_file(path))
        except (OSError, ValueError) as e:
            raise SystemExit(f"--init_adapters {name}={path}: {e}")
        optimizers[name] = make_optimizer(name)
