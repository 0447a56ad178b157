"""The memory plan (plan.py, `train.py --plan`): exact parameter counts for the paper's 7B configuration, the fit
verdicts, the start-up refusal, and the activation estimate against peaks measured on CPU.

    python -m pytest tests/test_plan.py -v
"""
import json

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from conftest import peak_live_bytes
import plan
import population
import train

PAPER = dict(train.config, teachers=4, students=4)
ROLES = ["teacher"] * 4 + ["student"] * 4


def test_seven_b_counts_are_exact_and_fit_80_not_24(capsys):
    """Qwen2.5-Coder-7B from the shipped config: 7,615,616,512 base parameters; rank 32 on all seven projections of
    28 layers is 32 x (2 x 3584 + 2 x (3584 + 512) + 3 x (3584 + 18944)) x 28 = 80,740,352 per member."""
    row = train.main(dict(PAPER, plan=True, gpu_memory_gb=80.0))
    assert row["params/base"] == 7_615_616_512
    per_layer = 32 * (2 * (3584 + 3584) + 2 * (3584 + 512) + 3 * (3584 + 18944))
    assert row["params/adapter"] == per_layer * 28 == 80_740_352
    assert row["gb/base"] == pytest.approx(15.23, abs=0.01)
    assert row["gb/optimizer"] == pytest.approx(8 * 80_740_352 * 8 / 1e9, abs=0.01)  # two fp32 moments
    assert row["gb/vllm"] == pytest.approx(32.0)
    assert row["fits"] is True and row["max_micro_batch_tokens"] >= PAPER["micro_batch_tokens"]
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1]) == row and "memory plan per rank" in printed[0]
    for key in ("params/base", "params/adapter", "gb/base", "gb/adapters", "gb/optimizer", "gb/vllm",
                "gb/activations", "gb/total", "gb/limit", "fits", "max_micro_batch_tokens"):
        assert key in row, key
    small = train.main(dict(PAPER, plan=True, gpu_memory_gb=24.0))
    assert small["fits"] is False and small["gb/total"] > 24


def test_start_up_refuses_a_configuration_that_does_not_fit():
    with pytest.raises(SystemExit, match=r"(?s)memory plan per rank.*does NOT fit.*does not fit in 24 GB.*--plan"):
        plan.check_fits(dict(PAPER, gpu_memory_gb=24.0, dtype="bfloat16", gradient_checkpointing=True), ROLES)
    assert plan.check_fits(dict(PAPER, gpu_memory_gb=80.0, dtype="bfloat16", gradient_checkpointing=True),
                           ROLES)["fits"]


def test_plan_without_a_gpu_asks_for_the_size():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: its size is detected")
    with pytest.raises(SystemExit, match="--gpu_memory_gb"):
        plan.memory_plan(dict(PAPER, gpu_memory_gb=0.0), ROLES)


def test_plan_reads_a_local_folder(tiny_dir):
    row = plan.memory_plan(dict(train.config, model=tiny_dir, gpu_memory_gb=80.0, lora_rank=8), ["student"])
    base, _ = population.load_base(tiny_dir)
    assert row["params/base"] == sum(p.numel() for p in base.parameters())


def measured_and_planned(hidden, intermediate, layers, heads, vocab, dtype, checkpointing, rows, length, chunk):
    """(measured, planned) peak bytes of one real training micro-batch (token_logprobs + backward under the member,
    as train_member runs it) of rows x length tokens on a random Qwen2 in `dtype` with float32 LoRA adapters (rank
    8, all seven projections, as peft makes them under a bf16 base)."""
    config = Qwen2Config(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), vocab_size=vocab,
                         max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    base.requires_grad_(False)
    cfg = dict(train.config, lora_rank=8, lora_alpha=16, seed=0)
    model, _ = population.init_population(base, None, cfg, ["student"])
    assert next(p for n, p in model.named_parameters() if "lora_A" in n).dtype == torch.float32
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    prompts = [torch.randint(0, vocab, (length // 2,)).tolist() for _ in range(rows)]
    completions = [torch.randint(0, vocab, (length - length // 2,)).tolist() for _ in range(rows)]

    def step():
        with population.active(model, "s0"):
            logp, mask, _ = population.token_logprobs(model, "s0", prompts, completions, chunk=chunk)
            (-(logp * mask).sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)

    measured, _ = peak_live_bytes(step)
    dtype_bytes = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    targets = cfg["lora_targets"].split(",")
    return measured, plan.activation_bytes(config, rows * length, dtype_bytes, checkpointing, chunk, targets)


@pytest.mark.parametrize("hidden, intermediate, layers, heads", [(256, 1024, 4, 4), (768, 2048, 6, 12)])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_activation_estimate_within_15_percent_of_measured(hidden, intermediate, layers, heads, checkpointing):
    """float32 on random Qwen2s of ~20 and ~90M parameters, 4 x 1024 tokens, a 32k vocabulary (the log-prob chunk
    matters): measured 0.95-1.05 x the estimate."""
    measured, estimate = measured_and_planned(hidden, intermediate, layers, heads, 32000, "float32", checkpointing,
                                              rows=4, length=1024, chunk=256)
    assert 0.85 * measured <= estimate <= 1.15 * measured, (measured / 1e6, estimate / 1e6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_activation_estimate_holds_in_bf16_where_the_layers_dominate(dtype, checkpointing):
    """The GPU run's dtypes: a bf16 base with float32 adapters keeps float32 copies in every layer (peft casts each
    adapted module's input to float32, RMSNorm computes in float32). A small vocabulary, so the layers and not the
    log-prob chunk set the peak. Measured 0.97-1.09 x the estimate; the float32-only calibration planned 1.53-1.59 x
    too little in bf16 (issue 21)."""
    measured, estimate = measured_and_planned(256, 1344, 2, 4, 2048, dtype, checkpointing, rows=2, length=256,
                                              chunk=64)
    assert 0.85 * measured <= estimate <= 1.15 * measured, (measured / 1e6, estimate / 1e6)


def test_the_longest_sequence_sets_the_activations_when_it_exceeds_the_budget():
    """pack_micro_batches sends a sequence longer than micro_batch_tokens alone: the plan counts max(budget,
    max_prompt_tokens + max_new_tokens) tokens, and its "largest budget that fits" is 0 when one such sequence
    alone does not fit."""
    cfg = dict(PAPER, plan=True, gpu_memory_gb=80.0, micro_batch_tokens=2048)
    row = train.main(cfg)
    longest = cfg["max_prompt_tokens"] + cfg["max_new_tokens"]
    assert row["activation_tokens"] == longest == 10240
    config = plan.model_config(cfg["model"])
    targets = cfg["lora_targets"].split(",")
    expected = plan.activation_bytes(config, longest, 2, True, cfg["logprob_chunk"], targets)
    assert row["gb/activations"] == round(expected / 1e9, 2)
    assert plan.activation_bytes(config, 2048, 2, True, cfg["logprob_chunk"], targets) < expected / 2
    # 30 GB of activations for a 1M-token sequence: one sequence alone cannot fit, whatever the budget
    long_row = train.main(dict(cfg, max_new_tokens=1 << 20))
    assert long_row["max_micro_batch_tokens"] == 0 and not long_row["fits"]
    with pytest.raises(SystemExit, match="one sequence alone does not fit"):
        plan.check_fits(dict(cfg, max_new_tokens=1 << 20, dtype="bfloat16", gradient_checkpointing=True), ROLES)


def test_plan_is_the_same_inside_and_outside_torchrun(monkeypatch):
    """--plan (no torchrun) and the start-up check under torchrun print the same numbers: the all_reduce buffer is
    counted either way (it used to be counted only when WORLD_SIZE was set)."""
    cfg = dict(PAPER, gpu_memory_gb=80.0, dtype="bfloat16", gradient_checkpointing=True)
    outside = plan.memory_plan(cfg, ROLES)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "3")
    inside = plan.check_fits(cfg, ROLES)
    assert inside == outside and plan.table(inside) == plan.table(outside)
    assert outside["gb/gradients"] == pytest.approx(2 * 80_740_352 * 4 / 1e9, abs=0.01)
