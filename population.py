"""The population: one frozen base model, many LoRA members on it (SPEC §6, §8, §10).

What is here, as plain functions over plain data:
- the base model: a Hugging Face id or folder, `tiny` (a random 2-layer Qwen2 with a byte-level tokenizer, built
  in code, no download) for tests and smoke runs, or `tiny-warm` (tinyworld.py); both cached by cached_folder;
- members: peft LoRA adapters on ONE PeftModel (adapter name = member name), each described by a dict
  {"name", "role", "id", "lora_id", "mu", "sigma", "lineage"}; get/set an adapter as a plain state dict;
- generation for a list of (prompt, member) pairs in one batched call, on vLLM (multi-LoRA, fixed
  lora_int_id per member slot, versioned adapter folders) or on HF + peft (mixed-adapter batches);
- per-token log-probs of given completions under one member (the training forward);
- TrueSkill ratings, the match-outcome rule and PFSP matchmaking (SPEC §4.1, §6);
- atomic checkpoints of the whole population (SPEC §10).
Not here: the loss, advantages and the training loop (train.py), the evolution operators (evolve.py).
token_logprobs never builds full-vocabulary float32 logits for a whole sequence: the vocabulary projection runs
over `chunk` completion tokens at a time and is recomputed in backward, so its memory grows with the chunk, not
with batch x length x vocabulary. vLLM engines stay resident (no sleep mode: never measured on a GPU).
"""
import contextlib
import gc
import hashlib
import importlib.util
import json
import math
import os
import random
import re
import shutil
import tempfile

import numpy as np
import torch
import torch.utils.checkpoint
import trueskill
from safetensors.torch import load_file, save_file

# ----------------------------------------------------------------------------- base model

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1,  # head_dim 32: the smallest head size vLLM's CPU attention accepts
            max_position_embeddings=32768,  # byte-level AZR prompts run to several thousand tokens
            initializer_range=0.1,  # larger than the default 0.02 so greedy decoding is rarely a near-tie
            rope_theta=10000.0, tie_word_embeddings=False)
SPECIALS = ["<|endoftext|>", "<|pad|>"]  # ids 256 (eos) and 257 (pad), after the 256 bytes


def _byte_chars():
    """GPT-2's byte -> printable character map (what the ByteLevel pre-tokenizer emits), so token id == byte."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), 256))
    moved = [b for b in range(256) if b not in keep]  # control bytes and space go to U+0100 onwards
    return {b: chr(b) if b in keep else chr(256 + moved.index(b)) for b in range(256)}


@contextlib.contextmanager
def _seeded(seed):
    """Seed torch's global RNGs (CPU and every GPU) inside the block and restore the caller's states after."""
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
        torch.manual_seed(seed)
        yield


def build_tiny(folder, seed=0):
    """Write a random tiny Qwen2 and a byte-level tokenizer (one token per UTF-8 byte, no merges, so nothing is
    trained or downloaded) to `folder` as a Hugging Face model folder vLLM can load. Same seed -> same files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    vocab = {c: b for b, c in _byte_chars().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIALS[0], pad_token=SPECIALS[1])
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=256, pad_token_id=257,
                         dtype="float32", **TINY)
    with _seeded(seed):
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)  # makes the folder
    tokenizer.save_pretrained(folder)
    return folder


def cached_folder(cache_dir, prefix, settings, build):
    """cache_dir/<prefix>-<hash of settings>, made once by build(tmp_folder) in a temporary folder renamed into
    place (atomic; a concurrent builder may win the race, which is fine) and reused after that."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    path = os.path.join(cache_dir, f"{prefix}-{key}")
    if not os.path.exists(os.path.join(path, "config.json")):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{prefix}-", dir=cache_dir)
        try:
            build(tmp)
            os.rename(tmp, path)
        except OSError:
            if not os.path.exists(os.path.join(path, "config.json")):  # not a lost race: a real error
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_base(model, dtype="float32", device="cpu", cache_dir="out/.tiny"):
    """(model, tokenizer, model_path) with every base parameter frozen. `model` is a hub id, a local folder or
    "tiny" (built once into cache_dir, keyed by a hash of its build config) or "tiny-warm" (tinyworld.warm_base)."""
    from transformers import AutoModelForCausalLM
    path = model_folder(model, cache_dir)
    tokenizer = load_tokenizer(path)
    # straight onto the device: `.to(device)` after loading would hold the whole base in host RAM on every rank
    base = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), device_map=device)
    base.requires_grad_(False)
    return base, tokenizer, path


def model_folder(model, cache_dir="out/.tiny"):
    """The folder or hub id to load for `model`: "tiny" and "tiny-warm" are built once into cache_dir."""
    if model == "tiny":
        return cached_folder(cache_dir, "tiny", [TINY, SPECIALS, 0], build_tiny)
    if model == "tiny-warm":  # tinyworld.py: the tiny base warm-started on a synthetic corpus, built once, cached
        import tinyworld
        return tinyworld.warm_base(cache_dir)
    return model


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
        with _seeded(cfg["seed"] * 1000 + i):  # lora_A's random init, reproducible per (seed, slot)
            if model is None:
                model = get_peft_model(base, _lora_config(cfg), adapter_name=name)
            else:
                model.add_adapter(name, _lora_config(cfg))
        members.append({"name": name, "role": role, "id": i, "lora_id": i + 1, "mu": RATING.mu,
                        "sigma": RATING.sigma, "lineage": []})
    # Every member trains, so every LoRA parameter keeps requires_grad; peft only flips these flags for the
    # "active" adapter, and a flag turned off between forward and backward silently drops that gradient.
    for n, p in model.named_parameters():
        p.requires_grad_(_adapter_of(n) is not None)
    return model, members


def _adapter_of(param_name):
    """Adapter name inside a peft parameter name (`...q_proj.lora_A.t0.weight` -> "t0"), or None for the base."""
    found = re.search(r"\.lora_\w+?\.([^.]+)", param_name)
    return found.group(1) if found else None


def _adapter_params(model, name):
    """{PEFT state-dict key (adapter name removed): Parameter} for one adapter, in model order."""
    out = {}
    for n, p in model.named_parameters():
        if _adapter_of(n) == name:
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
            if _adapter_of(n) is not None:
                p.requires_grad_(True)


def _write_adapter(model, name, folder, dtype=None):
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


# ----------------------------------------------------------------------------- generation (SPEC §8)

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM 0.32 accepts


def make_engine(kind, model_path, model, tokenizer, members, cfg):
    """Engine state for generate(): "vllm", "hf", or "auto" (vllm when it imports and CUDA is present)."""
    if kind == "auto":
        kind = "vllm" if torch.cuda.is_available() and importlib.util.find_spec("vllm") else "hf"
    if kind not in ("vllm", "hf"):
        raise ValueError(f"unknown engine {kind!r}; expected vllm, hf or auto")
    max_len = cfg.get("max_model_len") or cfg["max_prompt_tokens"] + cfg["max_new_tokens"]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    engine = {"kind": kind, "model": model, "tokenizer": tokenizer, "max_model_len": max_len,
              "eos": sorted(e for e in eos if e is not None), "batch_size": cfg.get("hf_batch_size", 64),
              "lora_ids": {m["name"]: m["lora_id"] for m in members}}
    if kind == "vllm":
        engine["dtype"] = getattr(torch, cfg.get("dtype") or "float32")
        engine["lora_dir"] = lora_folder(cfg.get("lora_dir", ""), cfg.get("out_dir", "out"),
                                         adapter_bytes(model, members[0]["name"], engine["dtype"]) * len(members))
        engine["llm"] = _make_llm(model_path, len(members), max_len, cfg)
        engine["paths"] = {}
        sync_adapters(engine, model, [m["name"] for m in members], 0)
    return engine


def adapter_bytes(model, name, dtype):
    """Bytes of one adapter's weights written in `dtype` (what one vLLM sync writes per member)."""
    element = torch.empty(0, dtype=dtype).element_size()
    return sum(p.numel() for p in trainable_params(model, name)) * element


def lora_folder(choice, out_dir, need):
    """A fresh folder for the vLLM adapter sync, which writes every member's adapter (`need` bytes) and keeps the
    previous version until the new one is loaded (2 x need). `choice` "" = tmpfs (/dev/shm) when it has room, else
    a folder under out_dir; any other value is used as given, if it has room. A clear error otherwise: Docker's
    default /dev/shm is 64 MB, and one rank-32 7B adapter alone is ~160 MB in bf16."""
    candidates = [choice] if choice else ["/dev/shm", os.path.join(out_dir, "lora_sync")]
    seen = []
    for folder in candidates:
        try:
            os.makedirs(folder, exist_ok=True)
            free = shutil.disk_usage(folder).free
        except OSError as e:
            seen.append(f"{folder}: {e.strerror or e}")
            continue
        if free >= 2 * need:
            return tempfile.mkdtemp(prefix="populora-lora-", dir=folder)
        seen.append(f"{folder}: {free / 1e6:.0f} MB free")
    raise OSError(f"no room for the vLLM adapter sync ({2 * need / 1e6:.0f} MB needed: every member's adapter, "
                  f"twice); {'; '.join(seen)}. Pass --lora_dir a folder with room (or enlarge /dev/shm, e.g. "
                  f"docker run --shm-size 8g)")


def _make_llm(model_path, n_members, max_len, cfg):
    from vllm import LLM
    cuda = torch.cuda.is_available()
    # CPU-only vLLM bug (reference/vllm.md): with every slot busy, "no LoRA" rows index slot -1 = the last
    # adapter; one spare slot keeps the last slot empty. max_cpu_loras >= population so nothing is evicted.
    max_loras = cfg.get("max_loras") or (n_members if cuda else n_members + 1)
    rank = next(r for r in VLLM_RANKS if r >= cfg["lora_rank"])
    kwargs = dict(model=model_path, tokenizer=model_path, enable_lora=True, max_loras=max_loras,
                  max_lora_rank=rank, max_cpu_loras=max(max_loras, n_members), dtype=cfg.get("dtype", "float32"),
                  max_model_len=max_len, seed=cfg["seed"], enforce_eager=not cuda,
                  gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.5))
    kwargs.update({k: cfg[k] for k in ("max_num_seqs", "max_num_batched_tokens") if cfg.get(k)})
    if not cuda:  # otherwise the CPU worker reserves gpu_memory_utilization x host RAM for the KV cache
        kwargs["kv_cache_memory_bytes"] = cfg.get("kv_cache_memory_bytes", 64 << 20)
        # vLLM 0.32 CPU bug: a seeded request whose prompt is split over steps (chunked prefill) rewinds its
        # torch.Generator with set_offset, which CPU generators lack (RuntimeError). Schedule prompts whole.
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_len, 4096))
    if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        # one independent engine per torchrun rank inside the existing process group (SPEC §9)
        kwargs.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1)
    states = _rng_state()
    try:
        return LLM(**kwargs)
    finally:
        _set_rng_state(states)  # LLM(seed=) reseeds the global RNGs; training randomness must not depend on it


def sync_adapters(engine, model, names, version):
    """Make the engine generate with the model's current weights of `names` (after an update or evolution).
    vLLM: write each adapter to a new versioned folder, reload it ONCE in place under its fixed lora_int_id, then
    drop the prefix cache, whose key is (lora name, path) and would serve stale KV for long prompts."""
    if engine["kind"] != "vllm":
        return  # the hf engine reads the live PeftModel
    from vllm.lora.request import LoRARequest
    llm = engine["llm"]
    for name in names:
        path = os.path.join(engine["lora_dir"], name, f"v{version}")
        _write_adapter(model, name, path, engine["dtype"])
        llm.llm_engine.add_lora(LoRARequest(name, engine["lora_ids"][name], path, load_inplace=True))
        old, engine["paths"][name] = engine["paths"].get(name), path
        if old and old != path:
            shutil.rmtree(old, ignore_errors=True)
    llm.reset_prefix_cache()


def close_engine(engine):
    """Shut the vLLM engine down now (hf: nothing to do) and delete its adapter folder. Under torchrun, vLLM's
    shutdown also destroys the default process group: call this first, then dist.destroy_process_group() only if
    dist.is_initialized()."""
    llm = engine.pop("llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    if engine.get("lora_dir"):
        shutil.rmtree(engine["lora_dir"], ignore_errors=True)


def generate(engine, requests, temperature, top_p, max_new_tokens, seed):
    """Complete every (prompt_text, member_name) in one batched call. Returns, per request, {"text", "prompt_ids",
    "completion_ids" (including the end-of-sequence token when one was generated), "error" (None, or why this
    item was not generated)}. temperature 0 = greedy. A prompt that leaves no room in max_model_len is a per-item
    error; a shorter one gets at most max_model_len - prompt tokens new tokens in both engines."""
    tokenizer = engine["tokenizer"]
    for _, name in requests:
        if name not in engine["lora_ids"]:
            raise KeyError(f"unknown member {name!r}; engine has {sorted(engine['lora_ids'])}")
    # token ids go to both engines so they see identical prompts (no re-tokenisation, no implicit BOS)
    ids = tokenizer([p for p, _ in requests], add_special_tokens=False)["input_ids"] if requests else []
    out = [{"text": "", "prompt_ids": list(p), "completion_ids": [], "error": None} for p in ids]
    todo = []
    for i, p in enumerate(ids):
        room = min(max_new_tokens, engine["max_model_len"] - len(p))
        if not p or room <= 0:
            out[i]["error"] = f"prompt of {len(p)} tokens: empty, or no room left in max_model_len {engine['max_model_len']}"
        else:
            todo.append((i, room))
    run = _generate_vllm if engine["kind"] == "vllm" else _generate_hf
    completions = run(engine, [(ids[i], requests[i][1], room) for i, room in todo], temperature, top_p, seed) if todo else []
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    for (i, _), c, t in zip(todo, completions, texts):
        out[i]["completion_ids"], out[i]["text"] = c, t
    return out


def _generate_vllm(engine, items, temperature, top_p, seed):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    greedy = temperature <= 0
    # a per-request seed makes sampling independent of batch composition, so a resumed run repeats itself
    params = [SamplingParams(temperature=0.0 if greedy else temperature, top_p=1.0 if greedy else top_p,
                             max_tokens=room, seed=None if greedy else (seed * 1_000_003 + k) % 2**31,
                             detokenize=False) for k, (_, _, room) in enumerate(items)]
    loras = [LoRARequest(name, engine["lora_ids"][name], engine["paths"][name]) for _, name, _ in items]
    outs = engine["llm"].generate([TokensPrompt(prompt_token_ids=p) for p, _, _ in items], params,
                                  lora_request=loras, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _generate_hf(engine, items, temperature, top_p, seed):
    """peft mixed-adapter generate (adapter_names= picks the adapter per row), left padding, batches of similar
    prompt length. Sampling uses the global torch RNG seeded with `seed` inside a fork (restored after)."""
    from transformers import GenerationConfig
    model, tokenizer, eos = engine["model"], engine["tokenizer"], engine["eos"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    greedy = temperature <= 0
    order = sorted(range(len(items)), key=lambda k: -len(items[k][0]))
    results = [None] * len(items)
    device, was_training = next(model.parameters()).device, model.training
    model.eval()  # peft refuses adapter_names= in training mode
    try:
        with _seeded(seed):
            for start in range(0, len(order), engine["batch_size"]):
                chunk = order[start:start + engine["batch_size"]]
                width = max(len(items[k][0]) for k in chunk)
                input_ids = torch.tensor([[pad] * (width - len(items[k][0])) + items[k][0] for k in chunk])
                mask = (torch.arange(width) >= torch.tensor([[width - len(items[k][0])] for k in chunk])).long()
                gen = GenerationConfig(max_new_tokens=max(items[k][2] for k in chunk), do_sample=not greedy,
                                       temperature=None if greedy else temperature, top_p=None if greedy else top_p,
                                       top_k=0, eos_token_id=eos, pad_token_id=pad)
                seqs = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                      generation_config=gen, adapter_names=[items[k][1] for k in chunk])
                for row, k in enumerate(chunk):
                    c = seqs[row, width:].tolist()[:items[k][2]]
                    stop = next((j for j, t in enumerate(c) if t in eos), None)
                    results[k] = c if stop is None else c[:stop + 1]
    finally:
        model.train(was_training)
    return results


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


# ----------------------------------------------------------------------------- ratings and matchmaking (SPEC §6, §4.1)

# A local environment: trueskill.setup() would change the package's global one for everyone in the process.
RATING = trueskill.TrueSkill(mu=25.0, sigma=25.0 / 3, beta=25.0 / 6, tau=25.0 / 300, draw_probability=0.1)


def win_probability(student, teacher):
    """P(student beats teacher) under the TrueSkill performance model: Phi(dmu / sqrt(2 beta^2 + s1^2 + s2^2))."""
    spread = math.sqrt(2 * RATING.beta ** 2 + student["sigma"] ** 2 + teacher["sigma"] ** 2)
    return RATING.cdf((student["mu"] - teacher["mu"]) / spread)


def match_outcome(solve_rate, draw_margin):
    """1 student wins, 0 draw, -1 teacher wins. solve_rate = the student's mean correctness over the teacher's
    valid problems; None (the teacher had no valid problem) is a teacher loss. SPEC §6 [ours]."""
    if solve_rate is None:
        return 1
    if solve_rate < 0.5 - draw_margin:
        return -1
    return 1 if solve_rate > 0.5 + draw_margin else 0


def rate_match(teacher, student, outcome):
    """Update both members' mu/sigma in place after one match (outcome as match_outcome)."""
    t, s = RATING.create_rating(teacher["mu"], teacher["sigma"]), RATING.create_rating(student["mu"], student["sigma"])
    if outcome == -1:
        t, s = RATING.rate_1vs1(t, s)
    else:
        s, t = RATING.rate_1vs1(s, t, drawn=outcome == 0)
    teacher["mu"], teacher["sigma"], student["mu"], student["sigma"] = t.mu, t.sigma, s.mu, s.sigma


def conservative_score(member):
    return member["mu"] - 3 * member["sigma"]


def matchmake(teachers, students, rng):
    """PFSP pairing: teachers (in an rng-shuffled order, cycling) each draw one student from the pool of not yet
    matched students with weight p(1 - p), p = P(student beats teacher) (most balanced pairs first); the pool
    refills once empty. Runs max(N_T, N_S) matches so every member plays: with N_T = N_S each student plays
    exactly one teacher. Returns [(teacher name, student name)]; deterministic given rng."""
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
        weights = [max(p * (1 - p), 1e-12) for p in (win_probability(s, teacher) for s in pool)]
        k = rng.choices(range(len(pool)), weights)[0]
        pairs.append((teacher["name"], pool.pop(k)["name"]))
    return pairs


# ----------------------------------------------------------------------------- checkpoints (SPEC §10)


def _rng_state():
    state = {"python": random.getstate(), "numpy": list(np.random.get_state()), "torch": torch.get_rng_state().tolist()}
    state["numpy"][1] = state["numpy"][1].tolist()
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def _set_rng_state(state):
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
        _write_adapter(model, m["name"], os.path.join(tmp, "adapters", m["name"]))
    for name, optimizer in optimizers.items():
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optim", f"{name}.pt"))
    with open(os.path.join(tmp, "archive.jsonl"), "w") as f:
        f.writelines(json.dumps({"task": t, "problem": p}) + "\n" for t, problems in archive.items() for p in problems)
    files = {os.path.relpath(os.path.join(root, n), tmp): os.path.getsize(os.path.join(root, n))
             for root, _, names in os.walk(tmp) for n in names}
    full = {**state, "step": step, "members": members, "rng": _rng_state(),
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
    _set_rng_state(full["rng"])
    return {k: v for k, v in full.items() if k not in ("members", "rng", "archive_sizes", "files")}, archive


def latest_checkpoint(out_dir):
    """The newest complete step_NNNNNN folder in out_dir (state.json is written last), or None."""
    names = os.listdir(out_dir) if os.path.isdir(out_dir) else []
    steps = [(int(m.group(1)), n) for n in names if (m := re.fullmatch(r"step_(\d+)", n))
             and os.path.isfile(os.path.join(out_dir, n, "state.json"))]
    return os.path.join(out_dir, max(steps)[1]) if steps else None
