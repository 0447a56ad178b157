"""The population: one frozen base model, many LoRA members on it (SPEC §6, §8, §10).

What is here, as plain functions over plain data:
- loading the base (a Hugging Face id or a local folder; tinyworld.py builds the built-in tiny bases)
  with its tokenizer, every base parameter frozen;
- members: peft LoRA adapters on ONE PeftModel (adapter name = member name), each described by a
  dict {"name", "role", "id", "lora_id", "mu", "sigma", "lineage"}; get/set an adapter as a plain
  state dict; `active(model, name)` for the one place the library's active-adapter state is used;
- per-token log-probs of given completions under one member (the training forward), computed in
  chunks of completion tokens: memory grows with the chunk, not with batch x length x vocabulary;
- atomic checkpoints of the whole population (SPEC §10).
Not here: generation (engines.py), ratings (ratings.py), the loss, advantages and the loop
(train.py), the evolution operators (evolve.py).
"""
import contextlib
import json
import os
import random
import re
import shutil

import numpy as np
import torch
import torch.utils.checkpoint
from safetensors.torch import load_file, save_file

import ratings

# ----------------------------------------------------------------------------- base model

@contextlib.contextmanager
def seeded(seed):
    """Seed torch's global RNGs (CPU and every GPU) inside the block, restore the caller's after."""
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
        torch.manual_seed(seed)
        yield


def load_base(path, dtype="float32", device="cpu"):
    """(model, tokenizer) from a hub id or a local folder, every base parameter frozen. The built-in
    tiny bases are folders too: tinyworld.model_folder builds them."""
    from transformers import AutoModelForCausalLM
    tokenizer = load_tokenizer(path)
    # straight onto the device: `.to(device)` after loading would hold the whole base in host RAM
    # on every rank
    base = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), device_map=device)
    base.requires_grad_(False)
    return base, tokenizer


def load_tokenizer(path):
    """The folder's tokenizer, left padding. A folder whose tokenizer.json is the whole tokenizer (ours: "tiny",
    "tiny-warm") is loaded as such: transformers 5's AutoTokenizer picks Qwen2Tokenizer from a qwen2 config, which
    puts Qwen's regex split in front of the saved pre-tokenizer and silently changes the ids of a BPE without it."""
    from transformers import AutoTokenizer, TokenizersBackend
    config = os.path.join(path, "tokenizer_config.json")
    own = os.path.exists(config) and json.load(open(config)).get("tokenizer_class") == "TokenizersBackend"
    tokenizer = (TokenizersBackend if own else AutoTokenizer).from_pretrained(path)
    tokenizer.padding_side = "left"
    return tokenizer


# ----------------------------------------------------------------------------- members

PREFIX = {"teacher": "t", "student": "s", "both": "a"}  # member names t0.., s0.., a0 (baseline, both roles)


def _lora_config(cfg):
    from peft import LoraConfig
    return LoraConfig(r=cfg["lora_rank"], lora_alpha=cfg["lora_alpha"], lora_dropout=cfg["lora_dropout"],
                      target_modules=[t.strip() for t in cfg["lora_targets"].split(",") if t.strip()],
                      bias="none", task_type="CAUSAL_LM")


def init_population(base, tokenizer, cfg, roles):
    """Wrap `base` in one PeftModel holding one adapter per role; B = 0 (peft's default init) so every new member
    equals the base. Returns (peft_model, members); member i has lora_id i + 1, the fixed vLLM slot id."""
    from peft import get_peft_model
    members, counts, model = [], {}, None
    for i, role in enumerate(roles):
        if role not in PREFIX:
            raise ValueError(f"unknown role {role!r}; expected one of {sorted(PREFIX)}")
        name = f"{PREFIX[role]}{counts.get(role, 0)}"
        counts[role] = counts.get(role, 0) + 1
        with seeded(cfg["seed"] * 1000 + i):  # lora_A's random init, reproducible per (seed, slot)
            if model is None:
                model = get_peft_model(base, _lora_config(cfg), adapter_name=name)
            else:
                model.add_adapter(name, _lora_config(cfg))
        members.append({"name": name, "role": role, "id": i, "lora_id": i + 1, **ratings.initial(),
                        "lineage": []})
    # Every member trains, so every LoRA parameter keeps requires_grad; peft only flips these flags for the
    # "active" adapter, and a flag turned off between forward and backward silently drops that gradient.
    for n, p in model.named_parameters():
        p.requires_grad_(adapter_of(n) is not None)
    return model, members


def adapter_of(param_name):
    """Adapter name inside a peft parameter name (`...q_proj.lora_A.t0.weight` -> "t0"), or None for the base."""
    found = re.search(r"\.lora_\w+?\.([^.]+)", param_name)
    return found.group(1) if found else None


def _adapter_params(model, name):
    """{PEFT state-dict key (adapter name removed): Parameter} for one adapter, in model order."""
    out = {}
    for n, p in model.named_parameters():
        if adapter_of(n) == name:
            out[re.sub(rf"(\.lora_\w+)\.{re.escape(name)}(?=\.|$)", r"\1", n)] = p
    if not out:
        raise KeyError(f"no adapter named {name!r} in the model")
    return out


def get_adapter(model, name):
    """Detached copy of one adapter's weights, keyed like a saved PEFT adapter_model.safetensors."""
    return {k: p.detach().clone() for k, p in _adapter_params(model, name).items()}


def set_adapter(model, name, weights):
    """Copy `weights` (get_adapter's format) into adapter `name` in place (optimizers keep their Parameters)."""
    params = _adapter_params(model, name)
    if set(weights) != set(params):
        missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
        raise ValueError(f"adapter {name!r}: keys differ (missing {missing[:3]}, unexpected {extra[:3]})")
    with torch.no_grad():
        for k, p in params.items():
            if weights[k].shape != p.shape:
                raise ValueError(f"adapter {name!r}: {k} has shape {tuple(weights[k].shape)}, expected {tuple(p.shape)}")
            p.copy_(weights[k])


def trainable_params(model, name):
    """The LoRA parameters of member `name` (what its optimizer owns), in a fixed order."""
    return list(_adapter_params(model, name).values())


@contextlib.contextmanager
def active(model, name):
    """Make `name` the only active adapter inside the block, then restore the previous one; requires_grad flags
    untouched. Keep the block open through backward: gradient checkpointing re-runs each layer's forward during
    backward, with whatever adapter is active then. The previous adapter is read from the LoraModel
    (model.base_model): PeftModel.active_adapter keeps its first value after base_model.set_adapter."""
    previous = model.base_model.active_adapter
    model.base_model.set_adapter(name)
    try:
        yield
    finally:
        model.base_model.set_adapter(previous)
        # undo peft's flag flipping (see init_population)
        for n, p in model.named_parameters():
            if adapter_of(n) is not None:
                p.requires_grad_(True)


def write_adapter(model, name, folder, dtype=None):
    """Save one adapter as a PEFT folder (adapter_config.json + adapter_model.safetensors): loadable by
    PeftModel.from_pretrained and by vLLM's LoRARequest. dtype None keeps the weights' own (checkpoints: exact);
    the vLLM sync writes the engine's dtype (bf16 at 7B: half the bytes of peft's float32 adapter weights)."""
    os.makedirs(folder, exist_ok=True)
    weights = {}
    for k, v in get_adapter(model, name).items():
        if dtype is not None:
            v = v.to(dtype)
        weights[k] = v.contiguous().cpu()
    save_file(weights, os.path.join(folder, "adapter_model.safetensors"), metadata={"format": "pt"})
    model.peft_config[name].save_pretrained(folder)


# ----------------------------------------------------------------------------- log-probs for the loss


def token_logprobs(model, name, prompt_ids, completion_ids, chunk=1024):
    """One micro-batch forward under member `name` alone. Returns (logp [B, T], mask [B, T] float, entropy
    [B, T]), T = longest completion, row i's completion tokens at 0..len-1 (right padded, mask 0 after).
    Gradients reach only `name`'s LoRA parameters; entropy (nats, over the full vocabulary) is detached.

    Memory (SPEC §5): the vocabulary projection, log-softmax and entropy run over `chunk` completion tokens at a
    time (completion_chunk), and with gradients each chunk is checkpointed: only its hidden states are kept and
    the chunk's logits are rebuilt in backward. Peak extra memory ~ chunk x vocabulary x 4 bytes x a few, not
    B x T x vocabulary. Callers that train keep `active(model, name)` open through backward."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token (it predicts the first completion token)")
    device = next(model.parameters()).device
    B, T = len(prompt_ids), max((len(c) for c in completion_ids), default=0)
    L = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    input_ids = torch.zeros((B, L), dtype=torch.long)
    attention = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, T))
    rows, positions, targets = [], [], []  # one entry per completion token, in [B, T] row-major order
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        n = len(p) + len(c)
        input_ids[i, :n] = torch.tensor(list(p) + list(c))
        attention[i, :n] = 1
        mask[i, :len(c)] = 1
        rows += [i] * len(c)
        # the output at position j predicts token j + 1: completion token t is predicted at len(p) - 1 + t
        positions += range(len(p) - 1, n - 1)
        targets += list(c)
    base = model.get_base_model()
    with active(model, name):
        # right padding: pad rows sit after the real tokens, so positions and causal masks need no adjusting
        hidden = base.get_decoder()(input_ids=input_ids.to(device),
                                    attention_mask=attention.to(device)).last_hidden_state
        picked = hidden[torch.tensor(rows, device=device), torch.tensor(positions, device=device)]  # [N, H]
        head = base.get_output_embeddings()
        targets = torch.tensor(targets, dtype=torch.long, device=device)
        logp_parts, entropy_parts = [], []
        for start in range(0, len(targets), chunk):
            piece = (picked[start:start + chunk], targets[start:start + chunk])
            if torch.is_grad_enabled() and picked.requires_grad:
                logp, entropy = torch.utils.checkpoint.checkpoint(completion_chunk, head, *piece,
                                                                  use_reentrant=False)
            else:
                logp, entropy = completion_chunk(head, *piece)
            logp_parts.append(logp)
            entropy_parts.append(entropy)
    mask = mask.to(device)
    flat = mask.flatten().nonzero().squeeze(-1)  # [N] indices of completion tokens in [B * T]
    logp = torch.zeros(B * T, device=device).index_put((flat,), torch.cat(logp_parts) if logp_parts else
                                                       torch.zeros(0, device=device))
    entropy = torch.zeros(B * T, device=device)
    if entropy_parts:
        entropy[flat] = torch.cat(entropy_parts)
    return logp.view(B, T), mask, entropy.view(B, T)


def completion_chunk(head, hidden, targets):
    """log pi(target) and the entropy (detached) for a chunk of completion tokens: hidden [n, H] -> [n], [n].
    Logits in float32 for an exact log-softmax, for this chunk only."""
    logp_all = torch.log_softmax(head(hidden).float(), dim=-1)  # [n, V]
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


# ----------------------------------------------------------------------------- checkpoints (SPEC §10)


def rng_state():
    state = {"python": random.getstate(), "numpy": list(np.random.get_state()), "torch": torch.get_rng_state().tolist()}
    state["numpy"][1] = state["numpy"][1].tolist()
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def save_checkpoint(out_dir, step, model, members, optimizers, state, archive):
    """Write out_dir/step_NNNNNN/ = adapters/<member>/ (PEFT folders), optim/<member>.pt, archive.jsonl and
    state.json ({**state, step, members, rng, archive_sizes, files: {relative path: bytes}}), all into a temporary
    folder renamed into place at the end, so a crash never leaves a half checkpoint under the final name."""
    final = os.path.join(out_dir, f"step_{step:06d}")
    tmp = os.path.join(out_dir, f".tmp_step_{step:06d}_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "optim"))
    for m in members:
        write_adapter(model, m["name"], os.path.join(tmp, "adapters", m["name"]))
    for name, optimizer in optimizers.items():
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optim", f"{name}.pt"))
    with open(os.path.join(tmp, "archive.jsonl"), "w") as f:
        f.writelines(json.dumps({"task": t, "problem": p}) + "\n" for t, problems in archive.items() for p in problems)
    files = {os.path.relpath(os.path.join(root, n), tmp): os.path.getsize(os.path.join(root, n))
             for root, _, names in os.walk(tmp) for n in names}
    full = {**state, "step": step, "members": members, "rng": rng_state(),
            "archive_sizes": {task: len(p) for task, p in archive.items()}, "files": files}
    with open(os.path.join(tmp, "state.json"), "w") as f:  # written last: its presence marks a complete folder
        json.dump(full, f)
        f.flush()
        os.fsync(f.fileno())
    old = f"{final}.old_{os.getpid()}"
    if os.path.exists(final):  # re-saving a step (after a resume): move the old one aside, delete it after
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(folder, model, members, optimizers):
    """Restore adapters, optimizer states, members (mu, sigma, lineage, ids: each dict updated in place) and the
    global RNG states from save_checkpoint's folder. Every file is read and checked first; any problem raises
    ValueError naming the file and nothing is changed. Returns (state as saved by the caller, incl. step, archive)."""
    def bad(rel, why):
        return ValueError(f"checkpoint {folder}: {rel} {why}")

    def read(rel, loader):
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            raise bad(rel, "is missing (an incomplete checkpoint, or not one)")
        try:
            return loader(path)
        except Exception as e:  # json, safetensors and torch.load each raise their own types on damaged files
            raise bad(rel, f"is unreadable: {e!r}") from None

    def json_file(path):
        with open(path) as f:
            return json.load(f) if path.endswith(".json") else [json.loads(line) for line in f]

    full = read("state.json", json_file)
    if not all(k in full for k in ("files", "members", "rng", "archive_sizes")):
        raise bad("state.json", "lacks files/members/rng/archive_sizes")
    for rel, size in full["files"].items():
        if os.path.isfile(os.path.join(folder, rel)) and os.path.getsize(os.path.join(folder, rel)) != size:
            raise bad(rel, f"has {os.path.getsize(os.path.join(folder, rel))} bytes, expected {size} (truncated?)")
    saved = {m["name"]: m for m in full["members"]}
    if sorted(saved) != sorted(m["name"] for m in members):
        raise bad("state.json", f"holds members {sorted(saved)}, the model has {sorted(m['name'] for m in members)}")
    adapters, optim = {}, {}
    for name in saved:
        rel = f"adapters/{name}/adapter_model.safetensors"
        adapters[name] = read(rel, load_file)
        read(f"adapters/{name}/adapter_config.json", json_file)
        want = {k: tuple(v.shape) for k, v in _adapter_params(model, name).items()}
        if {k: tuple(v.shape) for k, v in adapters[name].items()} != want:
            raise bad(rel, "does not match the model's adapter layout (rank or target modules differ)")
    for name, optimizer in optimizers.items():
        optim[name] = read(f"optim/{name}.pt", lambda p: torch.load(p, map_location="cpu", weights_only=True))
        sizes = [len(g["params"]) for g in optim[name]["param_groups"]]
        if sizes != [len(g["params"]) for g in optimizer.param_groups]:
            raise bad(f"optim/{name}.pt", f"has parameter groups of sizes {sizes}, the optimizer's differ")
    rows = read("archive.jsonl", json_file)
    archive = {task: [] for task in full["archive_sizes"]}
    for row in rows:
        if row.get("task") not in archive:
            raise bad("archive.jsonl", f"has a row of unknown task {row.get('task')!r}")
        archive[row["task"]].append(row["problem"])
    if {t: len(p) for t, p in archive.items()} != full["archive_sizes"]:
        raise bad("archive.jsonl", f"holds {({t: len(p) for t, p in archive.items()})}, expected {full['archive_sizes']}")
    # everything read and checked: now apply
    for name, weights in adapters.items():
        set_adapter(model, name, weights)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(optim[name])
    for m in members:
        restored = saved[m["name"]]
        m.clear()
        m.update(restored)
    set_rng_state(full["rng"])
    return {k: v for k, v in full.items() if k not in ("members", "rng", "archive_sizes", "files")}, archive


def latest_checkpoint(out_dir):
    """The newest complete step_NNNNNN folder in out_dir (state.json is written last), or None."""
    names = os.listdir(out_dir) if os.path.isdir(out_dir) else []
    steps = [(int(m.group(1)), n) for n in names if (m := re.fullmatch(r"step_(\d+)", n))
             and os.path.isfile(os.path.join(out_dir, n, "state.json"))]
    return os.path.join(out_dir, max(steps)[1]) if steps else None
