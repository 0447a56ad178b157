"""torchrun SPMD for train.py (design §9), in a few named helpers so that the step reads as the
algorithm. Every helper but rank_share is a collective: every rank calls it, in the same order.

Why a file of its own: the algorithm never needs to know how many processes run it; these are the
only places that do (plain `python train.py` is world size 1 and every helper is then a no-op).
"""
import datetime
import os

import torch
import torch.distributed as dist

import population


def setup_distributed(cfg):
    """torchrun sets RANK / WORLD_SIZE / LOCAL_RANK (plain python: rank 0 of 1). Returns (rank,
    world, device). nccl on GPU, gloo on CPU (so the CPU tests run the multi-process path); the
    timeout is a config key because a 7B step keeps ranks apart longer than NCCL's default 10
    minutes between collectives."""
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
        timeout = datetime.timedelta(minutes=cfg["dist_timeout_min"])
        dist.init_process_group(backend, timeout=timeout)
    return rank, world, device


def broadcast_object(obj, src, world):
    """obj from rank src on every rank."""
    box = [obj]
    if world > 1:
        dist.broadcast_object_list(box, src=src)
    return box[0]


def split_run(fn, items, rank, world):
    """fn on this rank's share items[rank::world], the results gathered back into item order on
    every rank (an empty share too takes part)."""
    share = items[rank::world]
    parts = [fn(share) if share else []] * world
    if world > 1:
        dist.all_gather_object(parts, parts[rank])
    merged = [None] * len(items)
    for r, part in enumerate(parts):
        merged[r::world] = part
    return merged


def rank_share(sequences, rank, world):
    """This rank's share of one member's sequences, balanced by tokens: longest first, each to the
    rank with the fewest tokens so far (ties: the lower rank). Every rank computes the same split;
    not a collective."""
    load = [0] * world
    shares = [[] for _ in range(world)]

    def length(i):
        return len(sequences[i]["prompt_ids"]) + len(sequences[i]["completion_ids"])
    for i in sorted(range(len(sequences)), key=lambda i: -length(i)):
        r = load.index(min(load))
        shares[r].append(sequences[i])
        load[r] += length(i)
    return shares[rank]


def sum_over_ranks(params, numbers, world):
    """Sum every rank's gradients of `params` and the float `numbers` (loss, entropy, token counts)
    in ONE all_reduce. A parameter this rank gave no gradient contributes zeros. Returns the summed
    numbers; the gradients are replaced by the sums."""
    if world == 1:
        return numbers
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    pieces = [g.flatten().float() for g in grads]
    pieces.append(torch.tensor(numbers, device=grads[0].device))
    flat = torch.cat(pieces)
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p).to(p.dtype)
        offset += p.numel()
    return flat[offset:].tolist()


def broadcast_member(model, name, src, world):
    """Adapter `name` from rank src to every rank as one flat tensor."""
    params = population.trainable_params(model, name)
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(params)
        if world > 1:
            dist.broadcast(flat, src=src)
            torch.nn.utils.vector_to_parameters(flat, params)
