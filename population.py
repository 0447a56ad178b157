"""The population: one frozen base model, many LoRA members on it (design §6, §8, §10).

What is here, as plain functions over plain data:
- loading the base (a Hugging Face id or a local folder; tinyworld.py builds the built-in tiny
  bases) with its tokenizer, every base parameter frozen;
- members: peft LoRA adapters on ONE PeftModel (adapter name = member name), each described by a
  dict {"name", "role", "id", "lora_id", "rating", "lineage"} (the rating: ratings.py's opaque
  value); get/set an adapter as a plain
  state dict; `active(model, name)` for the one place the library's active-adapter state is used;
- per-token log-probs of given completions under one member (the training forward), computed in
  chunks of completion tokens: memory grows with the chunk, not with batch x length x vocabulary;
- atomic checkpoints of the whole population (design §10).
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
    """(model, tokenizer) from a hub id or a local folder, every base parameter frozen. The
    built-in tiny bases are folders too: tinyworld.model_folder builds them."""
    from transformers import AutoModelForCausalLM
    tokenizer = load_tokenizer(path)
    # Straight onto the device: `.to(device)` after loading would hold the whole base in host RAM
    # on every rank.
    base = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), device_map=device)
    base.requires_grad_(False)
    return base, tokenizer


def load_tokenizer(path):
    """The folder's tokenizer, left padding.

    A folder whose tokenizer.json is the whole tokenizer (ours: "tiny", "tiny-warm") is loaded as
    such: transformers 5's AutoTokenizer picks Qwen2Tokenizer from a qwen2 config, which puts
    Qwen's regex split in front of the saved pre-tokenizer and silently changes the ids of a BPE
    without it."""
    from transformers import AutoTokenizer, TokenizersBackend
    config_path = os.path.join(path, "tokenizer_config.json")
    tokenizer_class = None
    if os.path.exists(config_path):
        with open(config_path) as f:
            tokenizer_class = json.load(f).get("tokenizer_class")
    if tokenizer_class == "TokenizersBackend":
        tokenizer = TokenizersBackend.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return tokenizer


# ----------------------------------------------------------------------------- members

# Member names are t0.., s0.., and a0 (the baseline, which plays both roles).
PREFIX = {"teacher": "t", "student": "s", "both": "a"}


def _lora_config(cfg):
    from peft import LoraConfig
    targets = []
    for target in cfg["lora_targets"].split(","):
        if target.strip():
            targets.append(target.strip())
    return LoraConfig(
        r=cfg["lora_rank"],
        lora_alpha=cfg["lora_alpha"],
        lora_dropout=cfg["lora_dropout"],
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )


def text_ids(tokenizer, texts):
    """Texts -> their token ids (a list per text): no special token added, and none made from the
    text itself. Prompts hold model-written programs, inputs and outputs; "<|endoftext|>" or
    "<|im_start|>" inside one must stay those characters, never the special token's id (which
    add_special_tokens=False alone does not prevent: split_special_tokens does for a tokenizer
    whose special tokens are added ones, as Qwen's). A tokenizer whose BPE merges rebuild a special
    token from its characters (tinyworld's learns them from transcripts that hold it) still gives
    its id: such a text is tokenized again with each special token's text one character a piece."""
    rows = tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    special = set(tokenizer.all_special_ids)
    for n, row in enumerate(rows):
        if special.intersection(row):
            rows[n] = _spelled_out(tokenizer, texts[n])
    return rows


def _spelled_out(tokenizer, text):
    """text_ids of one text with every special token's text split into single characters."""
    names = sorted(tokenizer.all_special_tokens, key=len, reverse=True)
    pieces = re.split("(" + "|".join(map(re.escape, names)) + ")", text)
    chunks = []
    # re.split with a group: the special tokens' texts are the odd pieces
    for k, piece in enumerate(pieces):
        if k % 2:
            chunks += list(piece)
        elif piece:
            chunks.append(piece)
    ids = tokenizer(chunks, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [i for row in ids for i in row]


def init_population(base, tokenizer, cfg, roles):
    """Wrap `base` in one PeftModel holding one adapter per role; B = 0 (peft's default init) so
    every new member equals the base. Returns (peft_model, members); member i has lora_id i + 1,
    the fixed vLLM slot id."""
    from peft import get_peft_model
    members = []
    count_by_role = {}
    model = None
    for i, role in enumerate(roles):
        if role not in PREFIX:
            raise ValueError(f"unknown role {role!r}; expected one of {sorted(PREFIX)}")
        name = f"{PREFIX[role]}{count_by_role.get(role, 0)}"
        count_by_role[role] = count_by_role.get(role, 0) + 1
        # lora_A's random init, reproducible per (seed, slot)
        with seeded(cfg["seed"] * 1000 + i):
            if model is None:
                model = get_peft_model(base, _lora_config(cfg), adapter_name=name)
            else:
                model.add_adapter(name, _lora_config(cfg))
        member = {"name": name, "role": role, "id": i, "lora_id": i + 1,
                  "rating": ratings.new(cfg["rating"]), "lineage": []}
        members.append(member)
    # Every member trains, so every LoRA parameter keeps requires_grad; peft only flips these flags
    # for the "active" adapter, and a flag turned off between forward and backward silently drops
    # that gradient.
    for param_name, param in model.named_parameters():
        param.requires_grad_(adapter_of(param_name) is not None)
    return model, members


def adapter_of(param_name):
    """Adapter name inside a peft parameter name (`...q_proj.lora_A.t0.weight` -> "t0"), or None
    for the base."""
    found = re.search(r"\.lora_\w+?\.([^.]+)", param_name)
    if found is None:
        return None
    return found.group(1)


def _adapter_params(model, name):
    """{PEFT state-dict key (adapter name removed): Parameter} for one adapter, in model order."""
    adapter_in_name = rf"(\.lora_\w+)\.{re.escape(name)}(?=\.|$)"
    params = {}
    for param_name, param in model.named_parameters():
        if adapter_of(param_name) == name:
            key = re.sub(adapter_in_name, r"\1", param_name)
            params[key] = param
    if not params:
        raise KeyError(f"no adapter named {name!r} in the model")
    return params


def get_adapter(model, name):
    """Detached copy of one adapter's weights, keyed like a saved PEFT
    adapter_model.safetensors."""
    weights = {}
    for key, param in _adapter_params(model, name).items():
        weights[key] = param.detach().clone()
    return weights


def set_adapter(model, name, weights):
    """Copy `weights` (get_adapter's format) into adapter `name` in place (optimizers keep their
    Parameters)."""
    params = _adapter_params(model, name)
    if set(weights) != set(params):
        missing = sorted(set(params) - set(weights))
        extra = sorted(set(weights) - set(params))
        raise ValueError(
            f"adapter {name!r}: keys differ (missing {missing[:3]}, unexpected {extra[:3]})")
    with torch.no_grad():
        for key, param in params.items():
            if weights[key].shape != param.shape:
                got = tuple(weights[key].shape)
                raise ValueError(
                    f"adapter {name!r}: {key} has shape {got}, expected {tuple(param.shape)}")
            param.copy_(weights[key])


def trainable_params(model, name):
    """The LoRA parameters of member `name` (what its optimizer owns), in a fixed order."""
    return list(_adapter_params(model, name).values())


@contextlib.contextmanager
def active(model, name):
    """Make `name` the only active adapter inside the block, then restore the previous one;
    requires_grad flags untouched.

    Keep the block open through backward: gradient checkpointing re-runs each layer's forward
    during backward, with whatever adapter is active then. The previous adapter is read from the
    LoraModel (model.base_model): PeftModel.active_adapter keeps its first value after
    base_model.set_adapter."""
    previous = model.base_model.active_adapter
    model.base_model.set_adapter(name)
    try:
        yield
    finally:
        model.base_model.set_adapter(previous)
        _every_adapter_trainable(model)


def _every_adapter_trainable(model):
    """Undo peft's flag flipping: set_adapter turns requires_grad off for every adapter it does not
    activate, but every member trains (see init_population)."""
    for param_name, param in model.named_parameters():
        if adapter_of(param_name) is not None:
            param.requires_grad_(True)


def write_adapter(model, name, folder, dtype=None):
    """Save one adapter as a PEFT folder (adapter_config.json + adapter_model.safetensors): loadable
    by PeftModel.from_pretrained and by vLLM's LoRARequest.

    dtype None keeps the weights' own (checkpoints: exact); the vLLM sync writes the engine's dtype
    (bf16 at 7B: half the bytes of peft's float32 adapter weights)."""
    os.makedirs(folder, exist_ok=True)
    weights = {}
    for key, value in get_adapter(model, name).items():
        if dtype is not None:
            value = value.to(dtype)
        weights[key] = value.contiguous().cpu()
    weights_path = os.path.join(folder, "adapter_model.safetensors")
    save_file(weights, weights_path, metadata={"format": "pt"})
    model.peft_config[name].save_pretrained(folder)


# ------------------------------------------------------------------------ log-probs for the loss


def _pack_right_padded(prompt_ids, completion_ids):
    """Prompt + completion per row, right padded. Returns (input_ids [B, L], attention [B, L],
    mask [B, T] float: 1 on completion tokens, rows [N], positions [N], targets [N]): one entry
    of the last three per completion token, in [B, T] row-major order."""
    batch = len(prompt_ids)
    longest_completion = max((len(c) for c in completion_ids), default=0)
    longest_row = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    input_ids = torch.zeros((batch, longest_row), dtype=torch.long)
    attention = torch.zeros((batch, longest_row), dtype=torch.long)
    mask = torch.zeros((batch, longest_completion))
    rows, positions, targets = [], [], []
    for i, (prompt, completion) in enumerate(zip(prompt_ids, completion_ids)):
        row_length = len(prompt) + len(completion)
        input_ids[i, :row_length] = torch.tensor(list(prompt) + list(completion))
        attention[i, :row_length] = 1
        mask[i, :len(completion)] = 1
        rows += [i] * len(completion)
        # The output at position j predicts token j + 1: completion token t is predicted at
        # len(prompt) - 1 + t.
        positions += range(len(prompt) - 1, row_length - 1)
        targets += list(completion)
    return input_ids, attention, mask, rows, positions, targets


def token_logprobs(model, name, prompt_ids, completion_ids, chunk=1024):
    """One micro-batch forward under member `name` alone. Returns (logp [B, T], mask [B, T] float,
    entropy [B, T]), T = longest completion, row i's completion tokens at 0..len-1 (right padded,
    mask 0 after). Gradients reach only `name`'s LoRA parameters; entropy (nats, over the full
    vocabulary) is detached.

    Memory (design §5): the vocabulary projection, log-softmax and entropy run over `chunk`
    completion tokens at a time (completion_chunk), and with gradients each chunk is checkpointed:
    only its hidden states are kept and the chunk's logits are rebuilt in backward. Peak extra
    memory ~ chunk x vocabulary x 4 bytes x a few, not B x T x vocabulary. Callers that train keep
    `active(model, name)` open through backward."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    for prompt in prompt_ids:
        if len(prompt) == 0:
            raise ValueError(
                "every prompt needs at least one token (it predicts the first completion token)")
    device = next(model.parameters()).device
    input_ids, attention, mask, rows, positions, targets = _pack_right_padded(
        prompt_ids, completion_ids)
    B, T = mask.shape
    base = model.get_base_model()
    with active(model, name):
        # Right padding: pad rows sit after the real tokens, so positions and causal masks need no
        # adjusting.
        decoder = base.get_decoder()
        outputs = decoder(input_ids=input_ids.to(device), attention_mask=attention.to(device))
        hidden = outputs.last_hidden_state
        row_index = torch.tensor(rows, device=device)
        position_index = torch.tensor(positions, device=device)
        picked = hidden[row_index, position_index]  # [N, H]
        head = base.get_output_embeddings()
        targets = torch.tensor(targets, dtype=torch.long, device=device)
        checkpoint_chunks = torch.is_grad_enabled() and picked.requires_grad
        logp_parts, entropy_parts = [], []
        for start in range(0, len(targets), chunk):
            hidden_chunk = picked[start:start + chunk]
            target_chunk = targets[start:start + chunk]
            if checkpoint_chunks:
                logp, entropy = torch.utils.checkpoint.checkpoint(
                    completion_chunk, head, hidden_chunk, target_chunk, use_reentrant=False)
            else:
                logp, entropy = completion_chunk(head, hidden_chunk, target_chunk)
            logp_parts.append(logp)
            entropy_parts.append(entropy)
    mask = mask.to(device)
    # indices of the completion tokens in the flattened [B * T]
    flat = mask.flatten().nonzero().squeeze(-1)  # [N]
    if logp_parts:
        logp_values = torch.cat(logp_parts)
    else:
        logp_values = torch.zeros(0, device=device)
    logp = torch.zeros(B * T, device=device).index_put((flat,), logp_values)
    entropy = torch.zeros(B * T, device=device)
    if entropy_parts:
        entropy[flat] = torch.cat(entropy_parts)
    return logp.view(B, T), mask, entropy.view(B, T)


@contextlib.contextmanager
def _base_only(model):
    """Every adapter off inside the block. peft's disable_adapter re-enables the layers through
    set_adapter, which turns requires_grad off for every non-active adapter: put the flags back (see
    init_population)."""
    try:
        with model.disable_adapter():
            yield
    finally:
        _every_adapter_trainable(model)


def embed_texts(model, tokenizer, texts, batch_size=16):
    """The frozen base's view of each text: its last hidden states, mean-pooled over the text's
    tokens, with every adapter switched off. [len(texts), hidden] float32 on the CPU; deterministic
    (the base never changes), so a resumed run recomputes the same vectors. Used by the
    related-systems options (OpenSIR's novelty, LEEPS's neighbours)."""
    base = model.get_base_model()
    device = next(model.parameters()).device
    rows = []
    with torch.no_grad(), _base_only(model):
        for start in range(0, len(texts), batch_size):
            ids = [row or [0] for row in text_ids(tokenizer, texts[start:start + batch_size])]
            # the texts as prompts with empty completions: right padded, attention 1 on each text
            input_ids, attention = _pack_right_padded(ids, [[] for _ in ids])[:2]
            hidden = base.get_decoder()(input_ids=input_ids.to(device),
                                        attention_mask=attention.to(device)).last_hidden_state
            mask = attention.to(device)[..., None]
            pooled = (hidden.float() * mask).sum(1) / mask.sum(1)
            rows.append(pooled.cpu())
    if not rows:
        return torch.zeros(0, base.config.hidden_size)
    return torch.cat(rows)


def completion_chunk(head, hidden, targets):
    """log pi(target) and the entropy (detached) for a chunk of completion tokens: hidden [n, H]
    -> [n], [n]. Logits in float32 for an exact log-softmax, for this chunk only."""
    logp_all = torch.log_softmax(head(hidden).float(), dim=-1)  # [n, V]
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


# ----------------------------------------------------------------------- checkpoints (design §10)


def rng_state():
    """Python's, numpy's and torch's CPU RNG states as JSON-ready lists.

    No GPU state: torch.cuda.get_rng_state_all() holds one state per visible GPU, and restoring
    it on a node with fewer (CUDA_VISIBLE_DEVICES=0, a 4-GPU resume of an 8-GPU run) raised
    IndexError. Nothing needs it: every step reseeds torch (CPU and GPUs) from (seed, step,
    rank), and generation seeds each call."""
    state = {
        "python": random.getstate(),
        "numpy": list(np.random.get_state()),
        "torch": torch.get_rng_state().tolist(),
    }
    state["numpy"][1] = state["numpy"][1].tolist()
    return state


def set_rng_state(state):
    """Restore what rng_state returned. A "cuda" entry (checkpoints written before it was
    dropped) is ignored, whatever the number of GPUs here."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def _file_sizes(folder):
    """{path relative to folder: bytes} for every file under folder."""
    sizes = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            sizes[os.path.relpath(path, folder)] = os.path.getsize(path)
    return sizes


def save_checkpoint(out_dir, step, model, members, optimizers, state, archive):
    """Write out_dir/step_NNNNNN/ = adapters/<member>/ (PEFT folders), optim/<member>.pt,
    archive.jsonl and state.json ({**state, step, members, rng, archive_sizes, files: {relative
    path: bytes}}), all into a temporary folder renamed into place at the end, so a crash never
    leaves a half checkpoint under the final name."""
    final = os.path.join(out_dir, f"step_{step:06d}")
    tmp = os.path.join(out_dir, f".tmp_step_{step:06d}_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "optim"))
    for member in members:
        write_adapter(model, member["name"], os.path.join(tmp, "adapters", member["name"]))
    for name, optimizer in optimizers.items():
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optim", f"{name}.pt"))
    with open(os.path.join(tmp, "archive.jsonl"), "w") as f:
        for task, problems in archive.items():
            for problem in problems:
                f.write(json.dumps({"task": task, "problem": problem}) + "\n")
    archive_sizes = {task: len(problems) for task, problems in archive.items()}
    full = dict(state)
    full["step"] = step
    full["members"] = members
    full["rng"] = rng_state()
    full["archive_sizes"] = archive_sizes
    full["files"] = _file_sizes(tmp)
    # state.json is written last: its presence marks a complete folder
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(full, f)
        f.flush()
        os.fsync(f.fileno())
    old = f"{final}.old_{os.getpid()}"
    # Re-saving a step (after a resume): move the old one aside, delete it after.
    if os.path.exists(final):
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _checkpoint_error(folder, relative_path, why):
    return ValueError(f"checkpoint {folder}: {relative_path} {why}")


def _read_checkpoint_file(folder, relative_path, loader):
    """loader(path) for one file of the checkpoint; a missing or damaged file is a ValueError
    naming it."""
    path = os.path.join(folder, relative_path)
    if not os.path.isfile(path):
        raise _checkpoint_error(
            folder, relative_path, "is missing (an incomplete checkpoint, or not one)")
    try:
        return loader(path)
    except Exception as e:
        # json, safetensors and torch.load each raise their own types on damaged files
        raise _checkpoint_error(folder, relative_path, f"is unreadable: {e!r}") from None


def _load_json_or_jsonl(path):
    with open(path) as f:
        if path.endswith(".json"):
            return json.load(f)
        return [json.loads(line) for line in f]


def _load_optimizer_state(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def _read_state(folder):
    """state.json, checked: it has its keys and every file it lists has the size it lists."""
    full = _read_checkpoint_file(folder, "state.json", _load_json_or_jsonl)
    for key in ("files", "members", "rng", "archive_sizes"):
        if key not in full:
            raise _checkpoint_error(
                folder, "state.json", "lacks files/members/rng/archive_sizes")
    for relative_path, size in full["files"].items():
        path = os.path.join(folder, relative_path)
        if not os.path.isfile(path):
            continue
        actual = os.path.getsize(path)
        if actual != size:
            raise _checkpoint_error(
                folder, relative_path, f"has {actual} bytes, expected {size} (truncated?)")
    return full


def _read_adapters(folder, model, names):
    """{member: adapter weights} from the checkpoint, each checked against the model's layout."""
    adapters = {}
    for name in names:
        relative_path = f"adapters/{name}/adapter_model.safetensors"
        adapters[name] = _read_checkpoint_file(folder, relative_path, load_file)
        config_path = f"adapters/{name}/adapter_config.json"
        _read_checkpoint_file(folder, config_path, _load_json_or_jsonl)
        expected = {k: tuple(v.shape) for k, v in _adapter_params(model, name).items()}
        found = {k: tuple(v.shape) for k, v in adapters[name].items()}
        if found != expected:
            raise _checkpoint_error(
                folder, relative_path,
                "does not match the model's adapter layout (rank or target modules differ)")
    return adapters


def _read_optimizer_states(folder, optimizers):
    """{member: optimizer state dict}, each checked against its optimizer's parameter groups."""
    optimizer_states = {}
    for name, optimizer in optimizers.items():
        relative_path = f"optim/{name}.pt"
        state = _read_checkpoint_file(folder, relative_path, _load_optimizer_state)
        sizes = [len(group["params"]) for group in state["param_groups"]]
        expected_sizes = [len(group["params"]) for group in optimizer.param_groups]
        if sizes != expected_sizes:
            raise _checkpoint_error(
                folder, relative_path,
                f"has parameter groups of sizes {sizes}, the optimizer's differ")
        optimizer_states[name] = state
    return optimizer_states


def _read_archive(folder, expected_sizes):
    """{task: [problem]} from archive.jsonl, checked against the sizes state.json recorded."""
    rows = _read_checkpoint_file(folder, "archive.jsonl", _load_json_or_jsonl)
    archive = {task: [] for task in expected_sizes}
    for row in rows:
        if row.get("task") not in archive:
            raise _checkpoint_error(
                folder, "archive.jsonl", f"has a row of unknown task {row.get('task')!r}")
        archive[row["task"]].append(row["problem"])
    sizes = {task: len(problems) for task, problems in archive.items()}
    if sizes != expected_sizes:
        raise _checkpoint_error(
            folder, "archive.jsonl", f"holds {sizes}, expected {expected_sizes}")
    return archive


def load_checkpoint(folder, model, members, optimizers):
    """Restore adapters, optimizer states, members (rating, lineage, ids: each dict updated in
    place) and the global RNG states from save_checkpoint's folder.

    Every file is read and checked first; any problem raises ValueError naming the file and
    nothing is changed. Returns (state as saved by the caller, incl. step, archive)."""
    full = _read_state(folder)
    saved = {m["name"]: m for m in full["members"]}
    model_names = sorted(m["name"] for m in members)
    if sorted(saved) != model_names:
        raise _checkpoint_error(
            folder, "state.json", f"holds members {sorted(saved)}, the model has {model_names}")
    adapters = _read_adapters(folder, model, saved)
    optimizer_states = _read_optimizer_states(folder, optimizers)
    archive = _read_archive(folder, full["archive_sizes"])

    # everything read and checked: now apply
    for name, weights in adapters.items():
        set_adapter(model, name, weights)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(optimizer_states[name])
    for member in members:
        restored = dict(saved[member["name"]])
        if "rating" not in restored:
            # a checkpoint from before ratings were opaque: TrueSkill's mu and sigma on the member
            restored["rating"] = ratings.legacy(restored)
            del restored["mu"], restored["sigma"]
        member.clear()
        member.update(restored)
    set_rng_state(full["rng"])
    caller_state = {}
    for key, value in full.items():
        if key not in ("members", "rng", "archive_sizes", "files"):
            caller_state[key] = value
    return caller_state, archive


def complete_checkpoints(out_dir):
    """[(step, folder)] of every complete step_NNNNNN folder in out_dir (state.json is written
    last), oldest first."""
    if not os.path.isdir(out_dir):
        return []
    steps = []
    for name in os.listdir(out_dir):
        match = re.fullmatch(r"step_(\d+)", name)
        if match is None:
            continue
        if os.path.isfile(os.path.join(out_dir, name, "state.json")):
            steps.append((int(match.group(1)), os.path.join(out_dir, name)))
    return sorted(steps)


def latest_checkpoint(out_dir):
    """The newest complete step_NNNNNN folder in out_dir, or None."""
    steps = complete_checkpoints(out_dir)
    if not steps:
        return None
    return steps[-1][1]


def prune_checkpoints(out_dir, keep, current):
    """Delete all but the `keep` newest complete checkpoints (0 = keep all); `current`, the folder
    just written, is always kept. Called after save_checkpoint's rename, so the checkpoint that
    `--resume auto` would take is never removed while its successor is still being written; a
    folder still being written is not complete and is never listed. Returns the deleted folders."""
    if keep <= 0:
        return []
    steps = complete_checkpoints(out_dir)
    kept = {folder for _, folder in steps[-keep:]}
    kept.add(current)
    deleted = []
    for _, folder in steps:
        if folder in kept:
            continue
        # rename first: a crash mid-delete leaves a folder latest_checkpoint never picks
        doomed = f"{folder}.deleting_{os.getpid()}"
        os.rename(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        deleted.append(folder)
    return deleted
