"""population.py: tiny base, members, both generation engines (and their agreement), log-probs, ratings,
matchmaking and checkpoints. vLLM tests share one engine per module (start-up costs seconds)."""
import json
import os
import random
import statistics

import numpy as np
import pytest
import torch

import engines
import population as P
import ratings
import tinyworld
import train
from conftest import require_vllm

CFG = dict(lora_rank=8, lora_alpha=16, lora_dropout=0.0, seed=0, max_model_len=1024, rating="trueskill",
           lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
ROLES4 = ["teacher", "teacher", "student", "student"]


def make_population(tiny_dir, roles=ROLES4, scale=0.2, seed=0):
    """Fresh base + members whose adapters are random (B = 0 would make every member equal the base)."""
    path = tiny_dir
    base, tokenizer = P.load_base(tiny_dir)
    model, members = P.init_population(base, tokenizer, CFG, roles)
    g = torch.Generator().manual_seed(seed)
    for m in members:
        P.set_adapter(model, m["name"], {k: torch.randn(v.shape, generator=g) * scale
                                         for k, v in P.get_adapter(model, m["name"]).items()})
    return model, tokenizer, path, members


def prompts(n, seed=0, longest=400):
    rng = random.Random(seed)
    return ["".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(1, longest))) for _ in range(n)]


def sgd_step(model, name, lr=0.5):
    """One real optimizer step on member `name` (AdamW on a log-likelihood loss), returns the optimizer."""
    optimizer = torch.optim.AdamW(P.trainable_params(model, name), lr=lr, weight_decay=0.0)
    logp, mask, _ = P.token_logprobs(model, name, [[10, 20, 30, 40], [50, 60]], [[70, 80, 90], [100]])
    (-(logp.sum() / mask.sum())).backward()
    optimizer.step()
    optimizer.zero_grad()
    return optimizer


def full_logits(model, name, ids):
    """Reference forward: whole-sequence logits under one adapter via peft's own adapter_names= path."""
    model.eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), adapter_names=[name]).logits[0]


# ----------------------------------------------------------------------------- base model


def test_build_tiny_is_deterministic_and_byte_level(tmp_path):
    a, b, c = (tinyworld.build_tiny(str(tmp_path / x), seed=s) for x, s in (("a", 0), ("b", 0), ("c", 1)))
    names = sorted(os.listdir(a))
    assert "model.safetensors" in names and "tokenizer.json" in names
    for n in names:
        assert open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read(), n
    assert open(os.path.join(a, "model.safetensors"), "rb").read() != open(os.path.join(c, "model.safetensors"), "rb").read()
    _, tokenizer = P.load_base(a)
    text = "def f(x):\n    return x + 'é✓'\t"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode())  # one token per byte, id == byte value, no BOS
    assert tokenizer.decode(ids) == text
    assert len(tokenizer) == 258 and tokenizer.eos_token_id == 256 and tokenizer.pad_token_id == 257


def test_saved_bpe_tokenizer_loads_with_the_ids_it_was_trained_with(tmp_path, tiny_dir):
    """A BPE whose merges span spaces (the tiny-warm tokenizer), saved next to a qwen2 config: load_base must not
    swap in Qwen2Tokenizer's regex pre-split (transformers 5's AutoTokenizer does), which changes every id."""
    import shutil
    import tinyworld
    texts = ["I will write a new function and a test input. def f(n: int):\n    return n * 3"] * 20
    tok = tinyworld.make_tokenizer(texts, 300)
    folder = str(tmp_path / "bpe")
    tok.save_pretrained(folder)
    shutil.copy(os.path.join(tiny_dir, "config.json"), folder)  # model_type qwen2, as in a real model folder
    loaded = P.load_tokenizer(folder)
    for text in texts[:1] + ["x = 'not in the corpus'\n\tf(-7)"]:
        want = tok(text, add_special_tokens=False)["input_ids"]
        assert loaded(text, add_special_tokens=False)["input_ids"] == want
        assert loaded.decode(want) == text
    assert len(loaded(texts[0])["input_ids"]) < len(texts[0]) / 3  # merges apply (bytes alone would pass the rest)
    assert loaded.padding_side == "left"


def test_load_base_tiny_cached_and_frozen(tmp_path):
    path = tinyworld.model_folder("tiny", str(tmp_path))
    base, _ = P.load_base(path)
    stamp = os.path.getmtime(os.path.join(path, "model.safetensors"))
    path2 = tinyworld.model_folder("tiny", str(tmp_path))
    assert path2 == path and os.path.getmtime(os.path.join(path, "model.safetensors")) == stamp
    assert len([n for n in os.listdir(tmp_path) if n.startswith("tiny-")]) == 1
    assert all(not p.requires_grad for p in base.parameters())
    cfg = base.config
    assert cfg.hidden_size // cfg.num_attention_heads >= 32 and cfg.max_position_embeddings >= 16384


# ----------------------------------------------------------------------------- members


def test_init_population_names_ids_and_roles(tiny_dir):
    base, tokenizer = P.load_base(tiny_dir)
    _, members = P.init_population(base, tokenizer, CFG, ["teacher", "student", "teacher", "student", "student"])
    assert [m["name"] for m in members] == ["t0", "s0", "t1", "s1", "s2"]
    assert [m["lora_id"] for m in members] == [1, 2, 3, 4, 5] and len({m["id"] for m in members}) == 5
    assert all(m["rating"] == ratings.new("trueskill") and m["lineage"] == [] for m in members)
    base, tokenizer = P.load_base(tiny_dir)
    _, single = P.init_population(base, tokenizer, CFG, ["both"])
    assert [(m["name"], m["role"]) for m in single] == [("a0", "both")]
    with pytest.raises(ValueError, match="unknown role"):
        P.init_population(*P.load_base(tiny_dir), CFG, ["coach"])


def test_zero_init_adapter_is_a_no_op(tiny_dir):
    base, tokenizer = P.load_base(tiny_dir)
    ids = list(b"def f(a, b):\n    return a * b + 1")
    base.eval()
    with torch.no_grad():
        expected = base(input_ids=torch.tensor([ids])).logits[0].clone()
    model, members = P.init_population(base, tokenizer, CFG, ROLES4)
    for m in members:
        assert torch.equal(full_logits(model, m["name"], ids), expected), m["name"]
        logp, _, _ = P.token_logprobs(model, m["name"], [ids[:5]], [ids[5:]])
        want = torch.log_softmax(expected[4:-1], -1).gather(-1, torch.tensor(ids[5:])[:, None])[:, 0]
        assert torch.allclose(logp[0], want, atol=1e-5)
    # and the lora_A factors are random (peft's default), differently per member
    a0, a1 = P.get_adapter(model, "t0"), P.get_adapter(model, "t1")
    key = next(k for k in a0 if "lora_A" in k)
    assert a0[key].abs().sum() > 0 and not torch.equal(a0[key], a1[key])


def test_get_set_adapter_round_trip_and_errors(tiny_dir):
    model, _, _, _ = make_population(tiny_dir, roles=["teacher", "student"])
    w = P.get_adapter(model, "s0")
    P.set_adapter(model, "t0", w)
    assert all(torch.equal(w[k], v) for k, v in P.get_adapter(model, "t0").items())
    w[next(iter(w))] += 1.0  # get_adapter returned a copy: editing it leaves the model alone
    assert not torch.equal(w[next(iter(w))], P.get_adapter(model, "s0")[next(iter(w))])
    with pytest.raises(ValueError, match="keys differ"):
        P.set_adapter(model, "t0", dict(list(w.items())[1:]))
    with pytest.raises(ValueError, match="shape"):
        P.set_adapter(model, "t0", {k: v[:1] for k, v in w.items()})
    with pytest.raises(KeyError, match="zz"):
        P.get_adapter(model, "zz")


def test_training_step_touches_only_its_member(tiny_dir):
    model, _, _, members = make_population(tiny_dir)
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    others_before = {m["name"]: P.get_adapter(model, m["name"]) for m in members}
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    optimizer = torch.optim.AdamW(P.trainable_params(model, "s0"), lr=1e-2)
    logp, mask, _ = P.token_logprobs(model, "s0", [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]])
    (-(logp.sum() / mask.sum())).backward()
    for n, p in model.named_parameters():
        if P.adapter_of(n) == "s0":
            assert p.grad is not None and p.grad.abs().sum() > 0, n
        else:
            assert p.grad is None, n
    optimizer.step()
    for n, p in model.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]), f"base weight {n} changed"
    for m in members:
        same = all(torch.equal(v, others_before[m["name"]][k]) for k, v in P.get_adapter(model, m["name"]).items())
        assert same == (m["name"] != "s0"), m["name"]


def test_token_logprobs_match_full_forward_and_ignore_padding(tiny_dir):
    model, _, _, _ = make_population(tiny_dir, roles=["teacher", "student"])
    rows = [(list(b"abc"), list(b"defgh")), (list(b"x" * 40), list(b"yz")), (list(b"q"), [])]
    logp, mask, entropy = P.token_logprobs(model, "s0", [p for p, _ in rows], [c for _, c in rows])
    assert logp.shape == mask.shape == entropy.shape == (3, 5)
    assert mask.tolist() == [[1] * 5, [1, 1, 0, 0, 0], [0] * 5]
    for i, (p, c) in enumerate(rows):
        if not c:
            assert logp[i].abs().sum() == 0 and entropy[i].abs().sum() == 0
            continue
        ref = torch.log_softmax(full_logits(model, "s0", p + c)[len(p) - 1:-1], -1)
        assert torch.allclose(logp[i, :len(c)], ref.gather(-1, torch.tensor(c)[:, None])[:, 0], atol=1e-5)
        assert torch.allclose(entropy[i, :len(c)], -(ref.exp() * ref).sum(-1), atol=1e-5)
        alone, _, _ = P.token_logprobs(model, "s0", [p], [c])  # padding in the batch changes nothing
        assert torch.allclose(alone[0], logp[i, :len(c)], atol=1e-5)
    other, _, _ = P.token_logprobs(model, "t0", [p for p, _ in rows], [c for _, c in rows])
    assert not torch.allclose(other, logp)  # the member argument matters
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


# ----------------------------------------------------------------------------- hf engine


def test_hf_mixed_batch_equals_one_at_a_time_and_manual_greedy(tiny_dir):
    model, tokenizer, path, members = make_population(tiny_dir)
    engine = engines.make_engine("hf", path, model, tokenizer, members, CFG)
    requests = [(p, members[i % 4]["name"]) for i, p in enumerate(prompts(8, longest=60))]
    mixed = engines.generate(engine, requests, 0.0, 1.0, 12, seed=0)
    for r, out in zip(requests, mixed):
        assert engines.generate(engine, [r], 0.0, 1.0, 12, seed=0)[0] == out
        assert out["prompt_ids"] == list(r[0].encode()) and out["error"] is None
        assert out["text"] == tokenizer.decode(out["completion_ids"], skip_special_tokens=True)
    ids = list(requests[0][0].encode())  # manual greedy decode of the first request
    for _ in range(12):
        ids.append(int(full_logits(model, requests[0][1], ids)[-1].argmax()))
    assert mixed[0]["completion_ids"] == ids[-12:]
    assert len({tuple(o["completion_ids"]) for o in mixed[:4]}) > 1  # members really differ


def test_hf_sampling_is_seeded_and_prompt_overflow_is_per_item(tiny_dir):
    model, tokenizer, path, members = make_population(tiny_dir, roles=["teacher", "student"])
    engine = engines.make_engine("hf", path, model, tokenizer, members, dict(CFG, max_model_len=64))
    requests = [(p, "t0") for p in prompts(4, seed=1, longest=40)]
    a, b = (engines.generate(engine, requests, 1.0, 0.95, 10, seed=3) for _ in range(2))
    c = engines.generate(engine, requests, 1.0, 0.95, 10, seed=4)
    assert a == b and a != c
    out = engines.generate(engine, [("x" * 70, "s0"), ("y" * 60, "s0"), ("hello", "t0")], 0.0, 1.0, 10, seed=0)
    assert "max_model_len" in out[0]["error"] and out[0]["completion_ids"] == []
    assert len(out[1]["completion_ids"]) <= 4 and out[1]["error"] is None  # 64 - 60 tokens of room
    assert out[2]["error"] is None and len(out[2]["completion_ids"]) > 0
    with pytest.raises(KeyError, match="zz"):
        engines.generate(engine, [("x", "zz")], 0.0, 1.0, 4, seed=0)
    if not torch.cuda.is_available():  # auto = vllm only with CUDA
        assert engines.make_engine("auto", path, model, tokenizer, members, dict(CFG))["kind"] == "hf"
    with pytest.raises(ValueError, match="unknown engine"):
        engines.make_engine("sglang", path, model, tokenizer, members, dict(CFG))


# ----------------------------------------------------------------------------- vllm engine


@pytest.fixture(scope="module")
def vllm_population(tiny_dir):
    require_vllm()
    model, tokenizer, path, members = make_population(tiny_dir)
    engine = engines.make_engine("vllm", path, model, tokenizer, members, CFG)
    yield model, tokenizer, path, members, engine
    engines.close_engine(engine)  # frees the engine for other modules' tests; also deletes its adapter folders
    assert "llm" not in engine and not os.path.exists(engine["lora_dir"])


@pytest.mark.vllm
def test_vllm_equals_hf_greedy_before_and_after_updates(vllm_population):
    model, tokenizer, path, members, engine = vllm_population
    hf = engines.make_engine("hf", path, model, tokenizer, members, CFG)
    # per member: a short prompt and one over 2 KV blocks (2 x 128 tokens), where a stale prefix cache would show
    texts = prompts(4, seed=2, longest=50) + ["def f(x):\n" + "    x = x * 3 + 1\n" * 20 + "    return"]
    assert len(texts[-1]) > 300
    requests = [(t, m["name"]) for m in members for t in (texts[members.index(m)], texts[-1])]

    def both():
        v, h = (engines.generate(e, requests, 0.0, 1.0, 24, seed=0) for e in (engine, hf))
        for r, a, b in zip(requests, v, h):
            assert a["completion_ids"] == b["completion_ids"], f"engines disagree for {r[1]}"
            assert a["prompt_ids"] == b["prompt_ids"] and a["text"] == b["text"]
        return [tuple(o["completion_ids"]) for o in v]

    before = both()
    assert len(set(before)) == len(before)  # 4 distinct members, 2 prompts each
    sgd_step(model, "t1")
    engines.sync_adapters(engine, model, ["t1"], version=1)
    after = both()
    changed = [b != a for b, a in zip(before, after)]
    assert changed[2] and changed[3] and not any(changed[:2] + changed[4:])  # only t1's two rows moved
    P.set_adapter(model, "s1", P.get_adapter(model, "t0"))  # an evolution-style overwrite of a slot
    engines.sync_adapters(engine, model, ["s1"], version=2)
    final = both()
    assert final[7] == final[1]  # s1 now writes exactly what t0 writes on the long prompt
    assert sorted(os.listdir(os.path.join(engine["lora_dir"], "s1"))) == ["v2"]  # old versions deleted


@pytest.mark.vllm
def test_vllm_sampling_seeded_per_call_not_per_request(vllm_population, monkeypatch):
    """One seed per generation call (issue 21, item 5): a seed per request made vLLM 0.32 sample every seeded row in
    a Python loop at every decode step (topk_topp_sampler.random_sample). The same call with the same seed gives the
    same completions; another seed others; the same prompt several times in one call, different samples."""
    _, _, _, members, engine = vllm_population
    sent = []
    real_generate = engine["llm"].generate

    def spy(prompts, params, **kwargs):
        sent.extend(params)
        return real_generate(prompts, params, **kwargs)
    monkeypatch.setattr(engine["llm"], "generate", spy)
    requests = [(p, members[i % 4]["name"]) for i, p in enumerate(prompts(6, seed=4, longest=80))]
    a = engines.generate(engine, requests, 1.0, 0.9, 16, seed=7)
    b = engines.generate(engine, requests, 1.0, 0.9, 16, seed=7)
    c = engines.generate(engine, requests, 1.0, 0.9, 16, seed=8)
    assert a == b and a != c
    assert len(sent) == 18 and all(p.seed is None for p in sent)
    assert len({tuple(o["completion_ids"]) for o in engines.generate(engine, [requests[0]] * 4, 1.0, 1.0, 16, seed=7)}) > 1
    # more prompt tokens than one scheduler step takes (4096): on CPU a split prompt + seed used to crash vLLM
    many = [(p * 3, members[i % 4]["name"]) for i, p in enumerate(prompts(40, seed=5, longest=100))]  # no shared prefixes
    assert sum(len(p) for p, _ in many) > 4096
    assert all(0 < len(o["completion_ids"]) <= 4 for o in engines.generate(engine, many, 1.0, 1.0, 4, seed=1))


@pytest.mark.vllm
def test_vllm_log_probs_match_training_and_equal_prompts_are_prefilled_once(vllm_population):
    """vLLM returns each sampled token's log-prob (SamplingParams(logprobs=0)); in float32 they equal the training
    forward's (population.token_logprobs) on the same member, so engines.logprob_gaps, the rollout-trainer mismatch
    train.py logs, is ~0 here (bf16 on GPU is what it watches). One member's attempts at one problem in one call:
    the prompt is prefilled once, the prefix cache serves the rest."""
    model, _, _, members, engine = vllm_population
    prompt = "def f(x):\n" + "    x = x * 3 + 1\n" * 20 + "    return"
    requests = [(prompt, members[1]["name"])] * 6 + [(prompt[:40], members[2]["name"])] * 2
    cached = engine["cached_tokens"]
    out = engines.generate(engine, requests, 1.0, 1.0, 12, seed=3)
    # vLLM's CPU blocks hold 128 tokens: 5 repeats each find the prompt's full blocks cached
    assert engine["cached_tokens"] - cached >= 5 * (len(out[0]["prompt_ids"]) // 128) * 128 > 0
    for member in (members[1], members[2]):
        rows = [o for (_, name), o in zip(requests, out) if name == member["name"]]
        logp, mask, _ = P.token_logprobs(model, member["name"], [o["prompt_ids"] for o in rows],
                                         [o["completion_ids"] for o in rows])
        total, count, largest = engines.logprob_gaps(logp, rows)
        assert count == mask.sum() > 0 and all(len(o["logprobs"]) == len(o["completion_ids"]) for o in rows)
        assert largest < 1e-3 and total / count < 1e-4, (largest, total / count)
    hf = engines.make_engine("hf", None, model, engine["tokenizer"], members, CFG)
    assert all(o["logprobs"] is None for o in engines.generate(hf, requests[:2], 1.0, 1.0, 4, seed=3))


@pytest.mark.vllm
def test_train_member_reports_the_rollout_trainer_mismatch(vllm_population):
    """train_member compares the log-probs vLLM sampled with against its own forward on the tokens it trains on and
    reports mean and max |difference| (summed over ranks; train.py logs them as mismatch/<m>/mean and /max): ~0 in
    float32. Sequences without engine log-probs (the hf engine) report None."""
    model, _, _, members, engine = vllm_population
    name = members[2]["name"]
    outputs = engines.generate(engine, [(p, name) for p in prompts(6, seed=9, longest=60)], 1.0, 1.0, 16, seed=5)
    rewards = [1.0, -0.5, -1.0]
    sequences = [dict(o, reward=rewards[i % 3], role="student", task="code_o") for i, o in enumerate(outputs)]
    cfg = dict(train.config, micro_batch_tokens=4096, logprob_chunk=64)
    # lr 0: the module's shared population stays as it is
    optimizer = torch.optim.SGD(P.trainable_params(model, name), lr=0.0)
    stats = train.train_member(model, name, optimizer, sequences, cfg)
    assert stats["grad_norm"] > 0
    assert 0 <= stats["mismatch"]["mean"] <= stats["mismatch"]["max"] < 1e-3
    without = [dict(s, logprobs=None) for s in sequences]
    assert train.train_member(model, name, optimizer, without, cfg)["mismatch"] == {"mean": None, "max": None}


# ----------------------------------------------------------------------------- ratings and matchmaking


def test_match_outcome_rule():
    cases = [(None, 1), (0.0, -1), (0.44, -1), (0.45, 0), (0.5, 0), (0.55, 0), (0.56, 1), (1.0, 1)]
    assert [train.match_outcome(s, {"draw_margin": 0.05}) for s, _ in cases] == [o for _, o in cases]
    assert train.match_outcome(0.5, {"draw_margin": 0.0}) == 0
    assert train.match_outcome(0.6, {"draw_margin": 0.2}) == 0


def rated(prefix, mus):
    """Members with TrueSkill ratings of these mu (sigma 3)."""
    return [{"name": f"{prefix}{i}", "rating": {"system": "trueskill", "mu": mu, "sigma": 3.0}}
            for i, mu in enumerate(mus)]


def test_matchmake_covers_everyone_and_is_deterministic():
    rng = random.Random(0)
    for _ in range(50):
        teachers, students = rated("t", [rng.uniform(15, 35) for _ in range(4)]), rated("s", [rng.uniform(15, 35) for _ in range(4)])
        seed = rng.random()
        pairs = train.matchmake(teachers, students, random.Random(seed))
        assert sorted(t for t, _ in pairs) == ["t0", "t1", "t2", "t3"] and sorted(s for _, s in pairs) == ["s0", "s1", "s2", "s3"]
        assert pairs == train.matchmake(teachers, students, random.Random(seed))
    two, four = rated("t", [25, 25]), rated("s", [25] * 4)
    pairs = train.matchmake(two, four, random.Random(1))
    assert sorted(s for _, s in pairs) == ["s0", "s1", "s2", "s3"] and sorted(t for t, _ in pairs) == ["t0", "t0", "t1", "t1"]
    pairs = train.matchmake(four, two, random.Random(1))
    assert sorted(t for t, _ in pairs) == ["s0", "s1", "s2", "s3"] and sorted(s for _, s in pairs) == ["t0", "t0", "t1", "t1"]
    assert train.matchmake(rated("a", [25]), rated("a", [25]), random.Random(0)) == [("a0", "a0")]  # baseline


def test_matchmake_prefers_balanced_pairs():
    # t0 ~ s0 (p = 0.5) and t1 ~ s1; the crossed pairs are lopsided (p far from 0.5)
    teachers, students = rated("t", [20.0, 32.0]), rated("s", [20.0, 32.0])
    balanced = sum(sorted(train.matchmake(teachers, students, random.Random(seed))) == [("t0", "s0"), ("t1", "s1")]
                   for seed in range(2000)) / 2000
    w = lambda s, t: (lambda p: p * (1 - p))(ratings.win_probability(s["rating"], t["rating"]))  # noqa: E731
    # whichever teacher draws first picks its balanced partner with probability w_bal / (w_bal + w_crossed)
    expect = statistics.mean([w(students[0], teachers[0]) / (w(students[0], teachers[0]) + w(students[1], teachers[0])),
                              w(students[1], teachers[1]) / (w(students[1], teachers[1]) + w(students[0], teachers[1]))])
    assert expect > 0.6 and abs(balanced - expect) < 0.035  # ~3.5 standard errors at n = 2000


# ----------------------------------------------------------------------------- checkpoints


def checkpointed(tiny_dir, tmp_path, step=3):
    model, _, _, members = make_population(tiny_dir, roles=["teacher", "student", "student"])
    optimizers = {m["name"]: sgd_step(model, m["name"], lr=1e-3) for m in members}
    # a rated member: its rating differs from a new one's
    members[1]["rating"] = ratings.update(members[0]["rating"], members[1]["rating"], 1)[1]
    members[2]["lineage"].append({"step": 2, "parents": [0, 1], "operator": "linear_0_5"})
    archive = {"code_i": [{"program": "def f(x):\n    return x", "input": "1", "output": "1"}], "code_o": [],
               "code_f": [{"program": "def f(a):\n    return -a", "inputs": ["1"], "outputs": ["-1"], "message": "negate"}]}
    state = {"config": dict(CFG), "next_id": 3, "matchmaking_rng": list(random.Random(5).getstate()[1][:3])}
    folder = P.save_checkpoint(str(tmp_path), step, model, members, optimizers, state, archive)
    return folder, model, members, optimizers, state, archive


def test_checkpoint_round_trip_is_exact(tiny_dir, tmp_path):
    folder, model, members, optimizers, state, archive = checkpointed(tiny_dir, tmp_path)
    assert os.path.basename(folder) == "step_000003" and not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]
    draws = (random.random(), float(np.random.rand()), torch.rand(3))  # RNG right after the save
    fresh, _, _, fresh_members = make_population(tiny_dir, roles=["teacher", "student", "student"], seed=9)
    fresh_opt = {m["name"]: torch.optim.AdamW(P.trainable_params(fresh, m["name"]), lr=1e-3) for m in fresh_members}
    identity = [id(m) for m in fresh_members]
    loaded_state, loaded_archive = P.load_checkpoint(folder, fresh, fresh_members, fresh_opt)
    assert [id(m) for m in fresh_members] == identity  # dicts updated in place: other references stay valid
    assert (random.random(), float(np.random.rand())) == draws[:2] and torch.equal(torch.rand(3), draws[2])
    assert loaded_state == {**state, "step": 3} and loaded_archive == archive and fresh_members == members
    for m in members:
        assert all(torch.equal(v, P.get_adapter(fresh, m["name"])[k]) for k, v in P.get_adapter(model, m["name"]).items())
        a, b = optimizers[m["name"]].state_dict(), fresh_opt[m["name"]].state_dict()
        assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
        for i in a["state"]:
            assert all(torch.equal(a["state"][i][k], b["state"][i][k]) for k in a["state"][i])
    # the adapter folders are plain PEFT folders
    from peft import PeftModel
    base, _ = P.load_base(tiny_dir)
    peft_model = PeftModel.from_pretrained(base, os.path.join(folder, "adapters", "s1"), adapter_name="s1")
    assert all(torch.equal(v, P.get_adapter(peft_model, "s1")[k]) for k, v in P.get_adapter(model, "s1").items())


def test_checkpoint_from_before_opaque_ratings_loads(tiny_dir, tmp_path):
    """A checkpoint written when members carried TrueSkill's mu and sigma themselves loads into
    ratings.py's value."""
    folder, model, members, optimizers, state, archive = checkpointed(tiny_dir, tmp_path)
    path = os.path.join(folder, "state.json")
    saved = json.load(open(path))
    for m in saved["members"]:
        fields = ratings.flat(m.pop("rating"))
        m.update(mu=fields["mu"], sigma=fields["sigma"])
    json.dump(saved, open(path, "w"))
    fresh, _, _, fresh_members = make_population(tiny_dir, roles=["teacher", "student", "student"], seed=9)
    fresh_opt = {m["name"]: torch.optim.AdamW(P.trainable_params(fresh, m["name"]), lr=1e-3) for m in fresh_members}
    P.load_checkpoint(folder, fresh, fresh_members, fresh_opt)
    assert fresh_members == members and ratings.score(members[1]["rating"]) > ratings.score(members[0]["rating"])


def test_latest_checkpoint_skips_incomplete(tiny_dir, tmp_path):
    assert P.latest_checkpoint(str(tmp_path / "nothing")) is None
    checkpointed(tiny_dir, tmp_path, step=1)
    folder, model, members, optimizers, state, archive = checkpointed(tiny_dir, tmp_path, step=12)
    os.makedirs(tmp_path / "step_000020" / "adapters")  # a crashed copy without state.json
    os.makedirs(tmp_path / ".tmp_step_000030_1")
    assert P.latest_checkpoint(str(tmp_path)) == folder
    again = P.save_checkpoint(str(tmp_path), 12, model, members, optimizers, {"note": "resaved"}, archive)
    assert again == folder and json.load(open(os.path.join(folder, "state.json")))["note"] == "resaved"


@pytest.mark.parametrize("damage", ["truncate_adapter", "garble_adapter", "drop_state", "garble_state", "drop_optim",
                                    "truncate_archive"])
def test_damaged_checkpoint_is_a_clear_error_and_loads_nothing(tiny_dir, tmp_path, damage):
    folder, _, _, _, _, _ = checkpointed(tiny_dir, tmp_path)
    target = {"truncate_adapter": "adapters/s0/adapter_model.safetensors",
              "garble_adapter": "adapters/s0/adapter_model.safetensors", "drop_state": "state.json",
              "garble_state": "state.json", "drop_optim": "optim/t0.pt", "truncate_archive": "archive.jsonl"}[damage]
    path = os.path.join(folder, target)
    data = open(path, "rb").read()
    if damage.startswith("drop"):
        os.remove(path)
    elif damage.startswith("truncate"):
        open(path, "wb").write(data[:len(data) // 2])
    else:  # same size, broken content
        open(path, "wb").write(b"\x00" * len(data))
    fresh, _, _, fresh_members = make_population(tiny_dir, roles=["teacher", "student", "student"], seed=9)
    fresh_opt = {m["name"]: torch.optim.AdamW(P.trainable_params(fresh, m["name"]), lr=1e-3) for m in fresh_members}
    before = {m["name"]: P.get_adapter(fresh, m["name"]) for m in fresh_members}
    members_before = json.loads(json.dumps(fresh_members))
    with pytest.raises(ValueError, match=target.replace(".", r"\.")):
        P.load_checkpoint(folder, fresh, fresh_members, fresh_opt)
    assert fresh_members == members_before and all(not o.state for o in fresh_opt.values())
    for m in fresh_members:
        assert all(torch.equal(v, before[m["name"]][k]) for k, v in P.get_adapter(fresh, m["name"]).items())


def test_checkpoints_hold_no_gpu_rng_state_and_resume_on_fewer_gpus(tiny_dir, tmp_path, monkeypatch):
    """Resume with fewer visible GPUs (issue 21, item 4): a checkpoint stored one CUDA RNG state per visible GPU, and
    torch.cuda.set_rng_state_all indexes torch.cuda.default_generators[i] for every saved state, so an 8-GPU
    checkpoint restored where 1 GPU is visible raised IndexError. No GPU here: the two torch.cuda calls are replaced
    by what they do on a node with 2 GPUs at save time and 1 at restore time (torch/cuda/random.py)."""
    model, _, _, members = make_population(tiny_dir, roles=["teacher", "student"])
    optimizers = {m["name"]: sgd_step(model, m["name"], lr=1e-3) for m in members}
    archive = {"code_i": [], "code_o": [], "code_f": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [torch.zeros(16, dtype=torch.uint8)] * 2)

    def set_rng_state_all(states):
        generators = ["the one visible GPU's generator"]
        for i, _ in enumerate(states):
            generators[i]  # IndexError from the second state on, as in torch
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_rng_state_all)
    folder = P.save_checkpoint(str(tmp_path), 1, model, members, optimizers, {"next_id": 2}, archive)
    draws = torch.rand(3)
    state_path = os.path.join(folder, "state.json")
    state = json.load(open(state_path))
    assert "cuda" not in state["rng"]
    # a checkpoint written by the old code on 8 GPUs restores its CPU states and ignores the GPU ones
    state["rng"]["cuda"] = [[0] * 16] * 8
    with open(state_path, "w") as f:
        json.dump(state, f)
    torch.rand(5)
    P.load_checkpoint(folder, model, members, optimizers)
    assert torch.equal(torch.rand(3), draws)


def test_prune_checkpoints_keeps_the_newest_and_the_one_just_written(tmp_path):
    def complete(step):
        folder = tmp_path / f"step_{step:06d}"
        folder.mkdir()
        (folder / "state.json").write_text("{}")
        return str(folder)
    folders = {step: complete(step) for step in (10, 20, 30, 40, 50)}
    # a checkpoint being written (not yet renamed) and a crashed copy without state.json are never counted
    (tmp_path / ".tmp_step_000060_123").mkdir()
    (tmp_path / "step_000055").mkdir()
    assert P.prune_checkpoints(str(tmp_path), 0, folders[50]) == []
    # resumed from step 20 and just re-saved it: it stays beside the 2 newest
    deleted = P.prune_checkpoints(str(tmp_path), 2, folders[20])
    assert deleted == [folders[10], folders[30]]
    assert sorted(os.listdir(tmp_path)) == [".tmp_step_000060_123", "step_000020", "step_000040", "step_000050",
                                            "step_000055"]
    assert P.latest_checkpoint(str(tmp_path)) == folders[50]
    assert P.prune_checkpoints(str(tmp_path), 1, folders[50]) == [folders[20], folders[40]]
