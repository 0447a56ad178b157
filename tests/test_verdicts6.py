"""Issue 22, red team round 12: a code_i answer's runs in different zygotes (12a A08), and what one
item may cost the parent (12b A01, A05/A06/A10: a proposal at the API's caps, a 50-char proposal
whose runs sent back ~58 MB of parsed lists, a MemoryError that lost a whole batch). Each test
failed on the code before its fix (the commit that added it says how), unless it says otherwise."""
import json

import sandbox
import screen
import verify

# a set of its own input (so every answer is also run as written) and a bit that follows the
# zygote's hash seed (the order of a set of two strings)
SEEDED = {"program": "def f(s):\n    return sorted(s) + [next(iter({'ab', 'cd'}))]",
          "input": "{3, 1, 2}"}


def validated(task, proposal):
    result = verify.validate(task, [proposal])[0]
    assert result["valid"], result
    return dict(proposal, **{k: v for k, v in result.items() if k not in ("valid", "reason")})


def recording(monkeypatch, change=None):
    """Record every (job, result) sandbox.run makes; `change`, if given, edits a job before it
    runs."""
    seen, run = [], sandbox.run

    def wrapped(jobs):
        if change is not None:
            jobs = [change(job) for job in jobs]
        results = run(jobs)
        seen.extend(zip(jobs, results))
        return results

    monkeypatch.setattr(sandbox, "run", wrapped)
    return seen


def validated_seeded():
    """SEEDED, validated: its bit agrees in the two families only about half the time."""
    for _ in range(40):
        result = verify.validate("code_i", [SEEDED])[0]
        if result["valid"]:
            return dict(SEEDED, **{k: v for k, v in result.items() if k != "valid"})
        sandbox.shutdown()
    raise AssertionError("SEEDED never validated in 40 pools")


# ---------------------------------------- 12a A08: every run of an attempt in one zygote

def test_a_code_i_answer_is_run_as_written_where_it_ran_as_plain_data(monkeypatch):
    """Red team round 12a A08: the run of an answer as written went to any zygote, while the f
    run and the problem's check ran in one: a per-zygote bit graded the teacher's own input wrong
    (4/40, not void). Now the answer's runs and the problem's checks (the teacher's input as
    written too) all run in the zygote of the attempt's f run. (Its f run in the other family,
    round 16 A05, is only compared with it.)"""
    problem = validated_seeded()
    seen = recording(monkeypatch)
    graded = verify.grade("code_i", [dict(problem, answer=SEEDED["input"])])
    f_runs = [r for job, r in seen if "args" in job and job.get("zygote", 0) == 0]
    assert len(f_runs) == 2 and f_runs[0]["ok"], seen
    where = f_runs[0]["zygote"]
    written = [(job, r) for job, r in seen if "calls" in job]
    # the answer as written, and the teacher's input as written in the check
    assert len(written) == 2, written
    assert all(job.get("zygote") == where and r["zygote"] == where for job, r in written), seen
    assert all(r["zygote"] == where for _, r in seen if r is not f_runs[1]), seen
    assert graded[0]["correct"] or graded[0]["void"], graded


def test_an_attempt_whose_zygote_is_replaced_between_its_runs_is_void(monkeypatch):
    """The other half of the rule: an answer's run as written that cannot go where its f run
    went (that zygote replaced meanwhile) decides nothing; it is void, not wrong."""
    problem = validated("code_i", {"program": "def f(s):\n    return sorted(s)",
                                   "input": "{3, 1, 2}"})

    def elsewhere(job):
        # an id no zygote has: the sandbox answers as for a replaced one
        if "calls" in job and job.get("zygote"):
            return dict(job, zygote=-1)
        return job

    recording(monkeypatch, elsewhere)
    graded = verify.grade("code_i", [dict(problem, answer="{1, 2, 3}")])
    assert graded[0]["void"] and not graded[0]["correct"], graded


# ------------------------------------------------------ 12b A01: a proposal's inputs together

def test_a_code_f_proposal_too_long_altogether_is_refused_before_anything_runs(monkeypatch):
    """Red team round 12b A01: 64 inputs of 20,000 chars each (each under its own cap) cost ~3 s
    of the parent's CPU. The inputs together are capped at what train.py's 10 inputs can hold."""
    items = ",".join(["1"] * 9990)
    proposal = {"program": "def f(xs):\n    return xs[-1] % 3",
                "inputs": [f"[{items},{k}]" for k in range(64)], "message": "the last, mod 3"}
    seen = recording(monkeypatch)
    result = verify.validate("code_f", [proposal])[0]
    assert not result["valid"] and "too long together" in result["reason"], result
    assert seen == []
    assert verify.MAX_INPUTS_CHARS >= verify.N_INPUTS * screen.MAX_INPUT


# ------------------------------ 12b A05/A06/A10: what one item may cost the parent's memory

def test_an_input_whose_arguments_are_too_large_is_refused_before_f_runs(monkeypatch):
    """Red team round 12b A05/A06: a 25-char pack made 64,000 units of arguments (13 MB parsed
    here), sent back by five runs of the proposal and kept to the end of the batch. Now the
    arguments are sized as they come back, and f never runs on them."""
    seen = recording(monkeypatch)
    result = verify.validate("code_o", [{"program": "def f(xs, s):\n    return xs",
                                         "input": "[[[[None]]]] * 16000, {0}"}])[0]
    assert not result["valid"] and "input too large" in result["reason"], result
    assert seen and not any("args" in job for job, _ in seen), [job.keys() for job, _ in seen]


def test_a_code_i_answer_whose_arguments_are_too_large_is_wrong_alone():
    problem = validated("code_i", {"program": "def f(xs):\n    return len(xs)", "input": "[1, 2]"})
    graded = verify.grade("code_i", [dict(problem, answer="[None] * 60000"),
                                     dict(problem, answer="[None, None]")])
    assert "input too large" in graded[0]["reason"] and not graded[0]["correct"], graded
    assert graded[1]["correct"], graded


def test_a_memory_error_reading_one_items_runs_fails_that_item_only(monkeypatch):
    """Red team round 12b A06/A10: 32 such proposals (112 such answers) ran this process out of
    memory while reading the children's lines: MemoryError out of validate (grade), every verdict
    of the batch lost. Simulated here: any run of a batch holding the hostile program raises."""
    hostile = "def f(x):\n    return [x] * 3"
    run = sandbox.run

    def short_of_memory(jobs):
        if any(hostile in job["code"] for job in jobs):
            raise MemoryError
        return run(jobs)

    monkeypatch.setattr(sandbox, "run", short_of_memory)
    # the jobs' code as text (sandbox compiles text itself), so the hostile one can be told
    monkeypatch.setattr(screen, "compiled", lambda text, mode="exec": text)
    results = verify.validate("code_o", [{"program": "def f(x):\n    return x + 1", "input": "1"},
                                         {"program": hostile, "input": "2"},
                                         {"program": "def f(x):\n    return x * 2", "input": "3"}])
    assert [r["valid"] for r in results] == [True, False, True], results
    assert "out of memory" in results[1]["reason"], results


def test_a_memory_error_reading_one_answer_fails_that_answer_only(monkeypatch):
    problem = validated("code_o", {"program": "def f(x):\n    return x * 2", "input": "21"})
    answer_value = screen.answer_value

    def short_of_memory(text):
        if text == "[None] * 99":
            raise MemoryError
        return answer_value(text)

    monkeypatch.setattr(screen, "answer_value", short_of_memory)
    graded = verify.grade("code_o", [dict(problem, answer="42"),
                                     dict(problem, answer="[None] * 99"),
                                     dict(problem, answer="6 * 7")])
    assert [g["correct"] for g in graded] == [True, False, True], graded
    assert "out of memory" in graded[1]["reason"], graded


def test_outputs_kept_as_text_still_make_plain_golds_and_grade():
    """Not a failing-first test: runs whose values together pass MAX_KEPT_UNITS are kept as JSON
    text (_slim); their golds are still plain JSON data, and answers are still compared by ==."""
    inputs = [str(400 + k) for k in range(12)]
    problem = validated("code_f", {"program": "def f(n):\n    return list(range(n))",
                                   "inputs": inputs, "message": "the numbers below n"})
    assert sum(len(g[1]) for g in problem["gold"]) > verify.MAX_KEPT_UNITS
    assert json.loads(json.dumps(problem["gold"])) == problem["gold"]
    graded = verify.grade("code_f", [dict(problem, answer="def f(n):\n    return [*range(n)]"),
                                     dict(problem, answer="def f(n):\n    return list(range(1, n))")])
    assert [g["correct"] for g in graded] == [True, False], graded
