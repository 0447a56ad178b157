"""torchrun SPMD for train.py (design §9), in a few named helpers so that the step reads as the
algorithm. The collectives (every rank calls them, in the same order): barrier, from_node_writer,
broadcast_object, split_run, split_blocks, sum_over_ranks, max_over_ranks, broadcast_member; the
other helpers only read the environment or compute a split.

One node or several: torchrun's LOCAL_RANK and GROUP_RANK say where a rank runs. What a node has
once (its /dev/shm, its cores) is shared by its ranks: one writer of the vLLM adapter sync per
node (engines.py), sandbox pools sized to the node's cores per rank; what the run has once
(checkpoints, logs) is written by rank 0.

Why a file of its own: the algorithm never needs to know how many processes run it; these are the
only places that do (plain `python train.py` is world size 1 and every helper is then a no-op).
"""
import datetime
import os

import torch
import torch.distributed as dist

import population
import sandbox


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
    share_sandbox_cores()
    return rank, world, device


def share_sandbox_cores():
    """Every rank runs its own sandbox pool (started at its first use), and a node's ranks share its
    cores: each pool takes cores / ranks on this node per zygote family (as sandbox.py does for one
    process, at most 8), so 8 ranks x a full-size pool do not oversubscribe the node and time
    programs out. POPULORA_SANDBOX_WORKERS, when set, wins."""
    if os.environ.get("POPULORA_SANDBOX_WORKERS"):
        return
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cores = len(os.sched_getaffinity(0))
    sandbox.WORKERS_PER_FAMILY = max(1, min(cores // ranks_here, 8))


def local_rank():
    """This process's rank on its node (torchrun's LOCAL_RANK; plain python: 0)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def node_rank():
    """This node's index (torchrun's GROUP_RANK, the --node_rank of a multi-node run; plain
    python: 0)."""
    return int(os.environ.get("GROUP_RANK", "0"))


def multi_rank():
    """True under torchrun with more than one rank (a process group is up)."""
    if not dist.is_available() or not dist.is_initialized():
        return False
    return dist.get_world_size() > 1


def barrier():
    """Every rank waits for every other (no-op with one rank)."""
    if multi_rank():
        dist.barrier()


def from_node_writer(value):
    """The `value` of local rank 0 of this rank's node, on every rank of the node (what the node's
    one writer chose, e.g. its adapter sync folder). A collective: every rank calls it."""
    if not multi_rank():
        return value
    entries = [None] * dist.get_world_size()
    dist.all_gather_object(entries, (node_rank(), local_rank(), value))
    for node, local, theirs in entries:
        if node == node_rank() and local == 0:
            return theirs
    raise RuntimeError(f"node {node_rank()} has no local rank 0 (LOCAL_RANK / GROUP_RANK unset?)")


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


def block_bounds(items, world):
    """[(start, end)] of each rank's contiguous block of items, about len(items) / world each,
    never cutting a run of equal consecutive items (one problem's attempts: its rank prefills the
    prompt once, the other attempts share it). Not a collective."""
    # where each run of equal items ends
    ends = [i for i in range(1, len(items)) if items[i] != items[i - 1]] + [len(items)]
    bounds, start = [], 0
    for r in range(world):
        target = len(items) * (r + 1) / world
        end = min((e for e in ends if e >= start), key=lambda e: abs(e - target))
        bounds.append((start, end))
        start = end
    return bounds


def split_blocks(fn, items, rank, world):
    """fn on this rank's block of items (block_bounds), the results gathered back into item order
    on every rank (an empty block too takes part)."""
    start, end = block_bounds(items, world)[rank]
    share = items[start:end]
    parts = [fn(share) if share else []] * world
    if world > 1:
        dist.all_gather_object(parts, parts[rank])
    merged = []
    for part in parts:
        merged += part
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


def max_over_ranks(value, world, device):
    """The largest of every rank's float `value` (one small all_reduce)."""
    if world == 1:
        return value
    box = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return box.item()


def broadcast_member(model, name, src, world):
    """Adapter `name` from rank src to every rank as one flat tensor."""
    params = population.trainable_params(model, name)
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(params)
        if world > 1:
            dist.broadcast(flat, src=src)
            torch.nn.utils.vector_to_parameters(flat, params)
