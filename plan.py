"""The per-rank GPU memory plan (`python train.py --plan`), computed before anything is loaded.

Why a file of its own: train.py runs the loop; this answers one question before a node is rented
(does this configuration fit one GPU per rank?), and train.py asks it again at start-up on CUDA,
stopping with the table when the answer is no.

What one rank holds (design §9: every rank holds the base, every member, every optimizer state and
its own vLLM engine; it trains every member, one at a time):
- the base for training, in the training dtype (counted exactly on the meta device: nothing loaded);
- every member's LoRA weights in float32 (peft keeps adapters in float32 under a bf16 base), counted
  exactly from the target modules' shapes: r x (in + out) per module;
- one member's gradients (float32; freed after its step) and, with world > 1, the all_reduce buffer;
- AdamW's two float32 moments for every member;
- vLLM's reservation: gpu_memory_utilization x the GPU; inside it, its own copy of the base, one
  adapter slot per member, a working reserve, and the KV cache it leaves (which must hold at least
  one max-length sequence);
- activations of one micro-batch (`activation_bytes`: a formula calibrated against measured peaks
  of training micro-batches on CPU in float32 and in bf16, tests/test_plan.py) of
  max(micro_batch_tokens, max_prompt_tokens + max_new_tokens) tokens: pack_micro_batches sends a
  sequence longer than the budget alone;
- a fixed CUDA context and allocator slack.
The config of the default model ships in configs/ (a public fact), so the plan needs no download.
"""
import json
import os

import torch

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
SHIPPED = {"Qwen/Qwen2.5-Coder-7B": "Qwen2.5-Coder-7B.json"}
GB = 1e9
CUDA_CONTEXT_GB = 1.5       # CUDA context, cuBLAS workspaces, allocator fragmentation
VLLM_RESERVE_GB = 2.0       # vLLM's own activations and sampler buffers, inside its share
# Activation calibration, measured on CPU with tests/test_plan.py's live-bytes counter (one training
# micro-batch, forward and backward) on random Qwen2s: a decoder layer keeps ~1.0 x layer_elements
# per token in the base's dtype for backward, plus, under a bf16 base, ~0.7 x float32_elements in
# float32 (peft casts each adapted module's input to the adapter's float32, Qwen2's RMSNorm works
# in float32; 0.65-0.67 measured at 7B layer shapes and at Qwen2.5-0.5B's); the log-prob pass peaks
# at 3 float32 [chunk, vocabulary] copies (logits, log-softmax, its gradient).
LAYER_ACTIVATIONS = 1.0
FLOAT32_COPIES = 0.7
CHUNK_COPIES = 3


def model_config(model, cache_dir="out/.tiny"):
    """The transformers config of `model`: a local folder, the hub cache, or configs/'s copy."""
    from transformers import AutoConfig
    import tinyworld
    if model in SHIPPED:
        try:
            return AutoConfig.from_pretrained(model, local_files_only=True)
        except OSError:
            with open(os.path.join(CONFIGS, SHIPPED[model])) as f:
                values = json.load(f)
            return AutoConfig.for_model(values.pop("model_type"), **values)
    return AutoConfig.from_pretrained(tinyworld.model_folder(model, cache_dir))


def count_parameters(config, targets, rank):
    """(base parameters, LoRA parameters of one member), both exact: built on the meta device."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    base = sum(p.numel() for p in model.parameters())
    adapter = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            adapter += rank * (module.in_features + module.out_features)
    return base, adapter


def head_size(config):
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_bytes_per_token(config, dtype_bytes):
    """Bytes of one token's keys and values in every layer of vLLM's KV cache."""
    per_layer = 2 * config.num_key_value_heads * head_size(config) * dtype_bytes
    return config.num_hidden_layers * per_layer


def layer_elements(config):
    """Elements per token one decoder layer keeps for backward: residual input, two norm outputs,
    q, attention output, o-projection input, k and v, and the MLP's gate, up, activation,
    product."""
    kv = config.num_key_value_heads * head_size(config)
    return 7 * config.hidden_size + 2 * kv + 4 * config.intermediate_size


def float32_elements(config, targets):
    """Elements per token one decoder layer keeps in float32 under a bf16 base: every adapted
    module's input, cast to float32 by peft (q, k and v each their own copy), and the float32
    input of both RMSNorms."""
    inputs = {"q_proj": config.hidden_size, "k_proj": config.hidden_size,
              "v_proj": config.hidden_size, "gate_proj": config.hidden_size,
              "up_proj": config.hidden_size,
              "o_proj": config.num_attention_heads * head_size(config),
              "down_proj": config.intermediate_size}
    return 2 * config.hidden_size + sum(inputs.get(target, 0) for target in targets)


def activation_bytes(config, tokens, dtype_bytes, checkpointing, chunk, targets):
    """Peak activation bytes of one training micro-batch of `tokens` (prompt + completion, padded)
    on a base of `dtype_bytes` per element with float32 adapters on `targets`. With checkpointing
    every layer keeps only its input and one layer at a time is rebuilt in backward; without,
    every layer keeps everything. The log-prob pass adds a few float32 [chunk, vocabulary]
    copies."""
    layers, hidden = config.num_hidden_layers, config.hidden_size
    per_token = LAYER_ACTIVATIONS * layer_elements(config) * dtype_bytes
    if dtype_bytes < 4:
        # float32 copies: a float32 base's casts are no-ops
        per_token += FLOAT32_COPIES * float32_elements(config, targets) * 4
    one_layer = tokens * per_token
    chunk_bytes = CHUNK_COPIES * min(chunk, tokens) * config.vocab_size * 4
    # the final norm's input and the last hidden states the log-prob pass reads
    kept = tokens * 2 * hidden * dtype_bytes
    if not checkpointing:
        # every layer's activations are alive while the log-prob pass runs
        return kept + layers * one_layer + chunk_bytes
    # every layer keeps its input; the log-prob pass (first in backward) and the one layer rebuilt
    # at a time (later) never overlap, so the peak is the larger of the two
    kept += tokens * layers * hidden * dtype_bytes
    return kept + max(chunk_bytes, one_layer)


def gpu_size_gb(cfg):
    """--gpu_memory_gb, or the size of this process's GPU."""
    if cfg["gpu_memory_gb"]:
        return cfg["gpu_memory_gb"]
    if not torch.cuda.is_available():
        raise SystemExit("--plan: no GPU to read the memory size from; pass --gpu_memory_gb "
                         "(e.g. 80)")
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GB


def largest_budget(config, room, dtype_bytes, checkpointing, chunk, targets, longest):
    """The largest micro_batch_tokens whose activations fit in `room` bytes (bisection), or 0 when
    even the longest sequence (`longest` tokens, a micro-batch of its own whatever the budget)
    does not fit."""
    def fits(tokens):
        used = max(tokens, longest)
        return activation_bytes(config, used, dtype_bytes, checkpointing, chunk, targets) <= room
    if not fits(0):
        return 0
    low, high = 0, 1 << 22
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def memory_plan(cfg, roles):
    """The plan as one flat dict (the JSON line of --plan); sizes in GB (1e9 bytes)."""
    config = model_config(cfg["model"], cfg["model_cache"])
    dtype = cfg["dtype"] or "bfloat16"
    dtype_bytes = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    targets = [t.strip() for t in cfg["lora_targets"].split(",") if t.strip()]
    base, adapter = count_parameters(config, targets, cfg["lora_rank"])
    members = len(roles)
    checkpointing = cfg["gradient_checkpointing"]
    if checkpointing is None:
        checkpointing = True  # the GPU default
    limit = gpu_size_gb(cfg)
    # vLLM's share holds its own base copy, one adapter slot per member, a reserve and the KV cache
    vllm = cfg["gpu_memory_utilization"] * limit * GB
    slots = members * adapter * dtype_bytes
    kv_cache = vllm - base * dtype_bytes - slots - VLLM_RESERVE_GB * GB
    kv_tokens = max(0, int(kv_cache // kv_bytes_per_token(config, dtype_bytes)))
    max_len = cfg["max_prompt_tokens"] + cfg["max_new_tokens"]
    # one member's float32 gradients and the flat all_reduce buffer (counted with one rank too, so
    # that --plan, which knows no world size, and the start-up check under torchrun agree)
    gradients = 2 * adapter * 4
    fixed = {
        "base": base * dtype_bytes,
        "adapters": members * adapter * 4,
        "gradients": gradients,
        "optimizer": members * adapter * 2 * 4,
        "vllm": vllm,
        "cuda_context": CUDA_CONTEXT_GB * GB,
    }
    chunk = cfg["logprob_chunk"]
    # the largest micro-batch: the budget, or one sequence of the longest length alone
    tokens = max(cfg["micro_batch_tokens"], max_len)
    activations = activation_bytes(config, tokens, dtype_bytes, checkpointing, chunk, targets)
    total = sum(fixed.values()) + activations
    room = limit * GB - sum(fixed.values())
    row = {"model": cfg["model"], "dtype": dtype, "members": members,
           "gradient_checkpointing": checkpointing, "micro_batch_tokens": cfg["micro_batch_tokens"],
           "activation_tokens": tokens, "params/base": base, "params/adapter": adapter}
    for key, value in fixed.items():
        row[f"gb/{key}"] = round(value / GB, 2)
    row["gb/kv_cache"] = round(kv_cache / GB, 2)
    row["kv_cache_tokens"] = kv_tokens
    row["gb/activations"] = round(activations / GB, 2)
    row["gb/total"] = round(total / GB, 2)
    row["gb/limit"] = round(limit, 2)
    # it fits when the total does and vLLM's KV cache holds at least one max-length sequence
    row["fits"] = bool(total <= limit * GB and kv_tokens >= max_len)
    row["max_micro_batch_tokens"] = largest_budget(config, room, dtype_bytes, checkpointing, chunk,
                                                   targets, max_len)
    return row


def table(row):
    """The plan as a small per-rank table, one component a line."""
    lines = [f"memory plan per rank: {row['model']}, {row['members']} members, {row['dtype']}, "
             f"micro_batch_tokens {row['micro_batch_tokens']}, "
             f"checkpointing {row['gradient_checkpointing']}",
             f"  parameters: base {row['params/base']:,}, "
             f"adapter {row['params/adapter']:,} per member"]
    notes = {
        "base": "training copy of the frozen base",
        "adapters": "every member's LoRA weights, float32",
        "gradients": "one member at a time + its all_reduce buffer",
        "optimizer": "AdamW moments, every member",
        "vllm": (f"engine share (KV cache {row['gb/kv_cache']} GB = "
                 f"{row['kv_cache_tokens']:,} tokens)"),
        "cuda_context": "context, workspaces, fragmentation",
        "activations": f"one micro-batch of {row['activation_tokens']:,} tokens, calibrated",
    }
    for key, note in notes.items():
        lines.append(f"  {key:<13}{row['gb/' + key]:>8.2f} GB  {note}")
    verdict = "fits" if row["fits"] else "does NOT fit"
    largest = f"largest micro_batch_tokens that fits: {row['max_micro_batch_tokens']:,}"
    if row["max_micro_batch_tokens"] == 0:
        largest = "not even one sequence of max_prompt_tokens + max_new_tokens fits"
    lines.append(f"  {'total':<13}{row['gb/total']:>8.2f} GB  of {row['gb/limit']:.2f} GB: "
                 f"{verdict}; {largest}")
    return "\n".join(lines)


def check_fits(cfg, roles):
    """train.py's start-up check on CUDA: the plan, or SystemExit with its table when it does not
    fit."""
    row = memory_plan(cfg, roles)
    if not row["fits"]:
        budget = f"--micro_batch_tokens (at most {row['max_micro_batch_tokens']:,} fits)"
        if row["max_micro_batch_tokens"] == 0:
            budget = "--max_new_tokens or --max_prompt_tokens (one sequence alone does not fit)"
        raise SystemExit(f"{table(row)}\nthis configuration does not fit in "
                         f"{row['gb/limit']:.0f} GB per GPU (python train.py --plan shows this "
                         f"plan): lower {budget}, --gpu_memory_utilization or --max_new_tokens, "
                         f"or use fewer members per node")
    return row
