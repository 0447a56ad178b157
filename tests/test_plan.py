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


@pytest.mark.parametrize("hidden, intermediate, layers, heads", [(256, 1024, 4, 4), (768, 2048, 6, 12)])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_activation_estimate_within_30_percent_of_measured(hidden, intermediate, layers, heads, checkpointing):
    """The peak of one real training micro-batch (token_logprobs + backward under the member, as train_member runs
    it) on random Qwen2s of ~20 and ~90M parameters, 4 x 1024 tokens, against plan.activation_bytes."""
    config = Qwen2Config(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), vocab_size=32000,
                         max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(config)
    base.requires_grad_(False)
    cfg = dict(train.config, lora_rank=8, lora_alpha=16, seed=0)
    model, _ = population.init_population(base, None, cfg, ["student"])
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    prompts = [torch.randint(0, 32000, (512,)).tolist() for _ in range(4)]
    completions = [torch.randint(0, 32000, (512,)).tolist() for _ in range(4)]
    chunk = 256

    def step():
        with population.active(model, "s0"):
            logp, mask, _ = population.token_logprobs(model, "s0", prompts, completions, chunk=chunk)
            (-(logp * mask).sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)

    measured, _ = peak_live_bytes(step)
    estimate = plan.activation_bytes(config, 4 * 1024, 4, checkpointing, chunk)
    assert 0.7 * measured <= estimate <= 1.3 * measured, (measured / 1e6, estimate / 1e6)
