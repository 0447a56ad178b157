"""The related systems as options of the loop (issue 15): OpenSIR's novelty + learnable-band teacher
reward, SOAR's probe-grounded teacher reward, LEEPS's explore/exploit top-up sampler. Pure functions on
hand-computed cases, then each option end to end on the tiny model with resume == uninterrupted.

    python -m pytest tests/test_variants.py -v
"""
import json
import os
import random

import pytest
import torch

from conftest import FIXTURES_DIR
import archive
import logs
import train
import variants
import verify
from test_train import checkpoint, read_jsonl, same, tiny_cfg


@pytest.mark.parametrize("rate, expected", [(0.5, 1.0), (0.2, 1.0), (0.8, 1.0), (0.1, 0.5), (0.0, 0.0),
                                            (0.9, 0.5), (1.0, 0.0), (0.05, 0.25)])
def test_band_difficulty_is_a_trapezoid(rate, expected):
    assert variants.band_difficulty(rate, 0.2, 0.8) == pytest.approx(expected)


def test_novelty_is_the_mean_cosine_distance_to_the_nearest():
    x = torch.tensor([1.0, 0.0])
    assert variants.novelty(x, torch.zeros(0, 2), 4) == 1.0  # nothing to compare with: new
    assert variants.novelty(x, torch.tensor([[2.0, 0.0]]), 4) == pytest.approx(0.0)
    assert variants.novelty(x, torch.tensor([[0.0, 1.0]]), 4) == pytest.approx(0.5)
    assert variants.novelty(x, torch.tensor([[-1.0, 0.0]]), 4) == pytest.approx(1.0)
    # k = 1: only the nearest (the copy) counts; k = 2: the copy and the orthogonal one
    others = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert variants.novelty(x, others, 1) == pytest.approx(0.0)
    assert variants.novelty(x, others, 2) == pytest.approx(0.25)


def test_opensir_and_soar_teacher_rewards():
    cfg = dict(train.config, opensir_novelty_weight=0.5, opensir_band_low=0.2, opensir_band_high=0.8)
    def proposal(valid, rate, **measured):
        return dict(valid=valid, solve_rate=rate, **measured)
    assert variants.opensir_teacher_reward(proposal(False, None, novelty=0.9), cfg) == -1.0
    assert variants.opensir_teacher_reward(proposal(True, 0.5, novelty=0.4), cfg) == pytest.approx(0.5 * 1.0 + 0.5 * 0.4)
    # too easy: novelty only
    assert variants.opensir_teacher_reward(proposal(True, 1.0, novelty=0.4), cfg) == pytest.approx(0.2)
    assert variants.soar_teacher_reward(proposal(False, None, probe_gain=0.3), cfg) == -1.0
    assert variants.soar_teacher_reward(proposal(True, 0.5, probe_gain=-0.25), cfg) == -0.25


def problem(step, history=None, program="p"):
    p = {"step": step, "program": program}
    if history is not None:
        p["history"] = history
    return p


def test_leeps_splits_the_budget_by_portfolio_success():
    # 0-3: exploit (varied before), 4-7: explore (never topped up), 8: made this step (not eligible)
    problems = [problem(0, [1, 0]), problem(0, [1, 1]), problem(0, [0, 1]), problem(0, [1]),
                problem(0), problem(0), problem(0), problem(0), problem(5)]
    vectors = torch.eye(9)
    good_exploit = {"exploit": [90, 100], "explore": [5, 100]}
    picks = variants.leeps_pick(problems, 5, 4, random.Random(0), {'embeddings': vectors, 'stats': good_exploit})
    assert len(picks) == len(set(picks)) == 4 and 8 not in picks
    assert sorted(picks) == [0, 1, 2, 3]  # exploit ~0.9 vs explore ~0.06: all 4 from exploit
    good_explore = {"exploit": [5, 100], "explore": [90, 100]}
    picks = variants.leeps_pick(problems, 5, 4, random.Random(0), {'embeddings': vectors, 'stats': good_explore})
    assert sorted(picks) == [4, 5, 6, 7]
    # deterministic given the rng; more than there are: repeats
    assert variants.leeps_pick(problems, 5, 4, random.Random(3), {'embeddings': vectors, 'stats': good_exploit}) == \
        variants.leeps_pick(problems, 5, 4, random.Random(3), {'embeddings': vectors, 'stats': good_exploit})
    assert len(variants.leeps_pick(problems, 5, 12, random.Random(0), {'embeddings': vectors, 'stats': good_exploit})) == 12
    assert variants.leeps_pick(problems, 0, 3, random.Random(0), {'embeddings': vectors, 'stats': good_exploit}) == []


def test_leeps_explore_follows_the_neighbours():
    # two unexplored problems; one sits next to a problem that always varies, one next to a dead one
    problems = [problem(0, [1, 1, 1]), problem(0, [0, 0, 0]), problem(0), problem(0)]
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.1, 0.9]])
    stats = {"exploit": [0, 1000], "explore": [1000, 1000]}  # budget: explore only
    counts = [0, 0, 0, 0]
    rng = random.Random(1)
    for _ in range(200):
        for i in variants.leeps_pick(problems, 1, 1, rng, {'embeddings': vectors, 'stats': stats}, neighbours=1):
            counts[i] += 1
    # weights ~ the neighbours' shares (1.0 vs the 0.05 floor), and the all-trivial one at the floor
    assert counts[2] > 5 * counts[3] and counts[2] > 5 * counts[1]


def attempt(problem_ref, student, reward, proposal=None):
    return {"problem": problem_ref, "student": student, "reward": reward, "proposal": proposal}


def test_outcomes_are_recorded_per_group_and_counted_per_portfolio():
    seen, fresh = problem(0, [1]), problem(0)
    attempts = [attempt(seen, "s0", 1.0), attempt(seen, "s0", -0.5),      # varied
                attempt(fresh, "s0", -1.0), attempt(fresh, "s0", -1.0),   # all equal
                attempt(fresh, "s1", 1.0), attempt(fresh, "s1", None),    # one reward: no variance
                attempt(seen, "s0", 1.0, proposal={"teacher": "t0"})]     # not a top-up: ignored
    stats = {"exploit": [0, 0], "explore": [0, 0]}
    variants.record_outcomes(attempts, 2, stats)
    assert seen["history"] == [1, 1] and fresh["history"] == [0, 0]
    assert stats == {"exploit": [1, 1], "explore": [0, 2]}
    variants.record_outcomes(attempts[:2], 2, stats)
    assert seen["history"] == [1, 1]  # the last 2 kept
    assert "history" not in archive.problem_core(seen)  # bookkeeping: never shown or graded


def test_zero_variance_share():
    a, b = problem(0), problem(0)
    attempts = [attempt(a, "s0", 1.0), attempt(a, "s0", -0.5), attempt(b, "s0", -1.0),
                attempt(b, "s0", -1.0, proposal={"x": 1}), attempt(b, "s1", -1.0, proposal={"x": 1})]
    shares = logs.zero_variance(attempts)
    # groups: (a, s0) varied; (b, s0) equal; (b, s1) equal -> 2/3; top-ups: (a, s0) and (b, s0)
    assert shares["groups/zero_variance"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("options", [
    dict(teacher_reward="opensir", topup="leeps"),
    dict(teacher_reward="soar", soar_probe=os.path.join(FIXTURES_DIR, "probe.jsonl")),
    dict(teacher_reward="opensir", topup="leeps", warm=True),
], ids=["opensir+leeps", "soar", "opensir+leeps-warm"])
def test_option_end_to_end_and_resume(tiny_dir, tmp_path, options, request):
    """Each option runs the whole step on the tiny model; a run resumed at step 2 equals 4
    uninterrupted steps (LEEPS's histories and portfolio counts and SOAR's probe rates are
    checkpointed). On the warm base teachers write valid problems, so OpenSIR's novelty really
    embeds programs: the resumed run rebuilds its embedding cache in other batches and must get
    the same vectors (the rewards, hence the metrics and adapters, depend on them)."""
    options = dict(options)
    model = tiny_dir
    if options.pop("warm", False):
        model = request.getfixturevalue("warm_dir")
        options.update(seed_archive=os.path.join(model, "seeds.jsonl"), max_new_tokens=96,
                       propose_per_task=2)
    cfg = tiny_cfg(model, tmp_path / "whole", steps=4, save_every=2, min_problems=2, **options)
    train.main(cfg)
    train.main(dict(cfg, out_dir=str(tmp_path / "resumed"), steps=2))
    train.main(dict(cfg, out_dir=str(tmp_path / "resumed"), steps=4, resume="auto"))
    a, b = checkpoint(tmp_path / "whole" / "step_000004"), checkpoint(tmp_path / "resumed" / "step_000004")
    assert same(a[1], b[1]) and a[3] == b[3] and a[0]["members"] == b[0]["members"]

    def strip(row):
        return {k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}
    rows = read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    assert [strip(r) for r in rows] == [strip(r) for r in read_jsonl(tmp_path / "resumed" / "metrics.jsonl")]
    assert all(r["topup/zero_variance"] is not None for r in rows)
    state = a[0]
    if model != tiny_dir:
        valid = [r[f"teacher/{t}/valid_rate/{k}"] or 0 for r in rows for t in ("t0", "t1") for k in verify.TASKS]
        assert max(valid) > 0  # novelty was measured on real programs
    if options.get("topup") == "leeps":
        assert sum(state["leeps_stats"]["explore"]) + sum(state["leeps_stats"]["exploit"]) > 0
        histories = [json.loads(line)["problem"].get("history") for line in a[3].splitlines()]
        assert any(histories)
    if options.get("teacher_reward") == "soar":
        assert state["probe_rates"] and "time/probe" in rows[-1]
