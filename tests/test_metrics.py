"""The metrics the paper's figures read (issue 24): the matched solve rate apart from top-ups
(figures 3, 11), the complexity of programs teachers wrote (figure 4), entropy per member (figure
18), and every archive problem's solve statistics (figure 8), checkpointed with the archive."""
import archive
import logs
import ratings


def gen(error=None, tokens=3):
    return {"error": error, "completion_ids": [0] * tokens}


def problem(task, loc):
    return {"program": "def f(a):\n    return a", "cell": 0, "step": 0,
            "complexity": {"ast_depth": 1, "cyclomatic": 1, "loc": loc, "variables": 1}}


def proposal(teacher, task, valid, loc=0):
    made = None
    if valid:
        made = problem(task, loc)
    return {"teacher": teacher, "member": teacher, "task": task, "valid": valid, "gen": gen(),
            "parsed": {}, "reward": 0.5, "solve_rate": 0.5 if valid else None, "problem": made,
            "attempts": []}


def attempt(student, task, correct, source, error=None):
    """An attempt on a proposal's problem (source = the proposal) or on a top-up problem."""
    matched = "teacher" in source
    return {"student": student, "member": student, "task": task, "correct": correct,
            "answer": "1", "reward": 1.0 if correct else -0.5, "gen": gen(error),
            "proposal": source if matched else None,
            "problem": source["problem"] if matched else source}


def stats(entropy, tokens, role):
    return {"loss": 0.0, "grad_norm": 0.0,
            "entropy": {"teacher": 0.0, "student": 0.0, role: entropy},
            "tokens": {"teacher": 0, "student": 0, role: tokens}}


def test_step_metrics_split_matched_and_topup_complexity_and_entropy():
    members = [{"name": "t0", "role": "teacher", "id": 0, "rating": ratings.new()},
               {"name": "s0", "role": "student", "id": 1, "rating": ratings.new()}]
    code_o = proposal("t0", "code_o", True, loc=4)
    code_f = proposal("t0", "code_f", True, loc=40)
    invalid = proposal("t0", "code_i", False)
    topup = problem("code_o", 9)
    attempts = [attempt("s0", "code_o", True, code_o), attempt("s0", "code_o", True, code_o),
                attempt("s0", "code_o", False, topup), attempt("s0", "code_o", False, topup),
                attempt("s0", "code_o", False, topup), attempt("s0", "code_f", False, code_f)]
    problems = {"code_i": [], "code_o": [code_o["problem"], topup], "code_f": [code_f["problem"]]}
    row = logs.step_metrics(3, members, [code_o, code_f, invalid], attempts, [], problems,
                            {"t0": stats(6.0, 3, "teacher"), "s0": stats(2.0, 4, "student")}, [])
    assert row["student/s0/matched_solve_rate/code_o"] == 1.0
    assert row["student/s0/topup_solve_rate/code_o"] == 0.0
    assert row["student/s0/solve_rate/code_o"] == 2 / 5
    assert row["student/matched_solve_rate/code_o"] == 1.0
    assert row["student/s0/topup_solve_rate/code_f"] is None
    assert row["student/s0/matched_solve_rate/code_i"] is None
    # the code_f program (loc 40) was shown to its teacher, not written
    assert row["complexity/loc"] == 4
    assert row["entropy/t0"] == 2.0 and row["entropy/s0"] == 0.5
    assert row["entropy/teacher"] == 2.0 and row["entropy/student"] == 0.5


def test_record_solves_counts_graded_attempts_on_each_problem():
    made = proposal("t0", "code_o", True)
    topup = problem("code_o", 1)
    archive.describe([made["problem"], topup])
    assert (topup["attempts"], topup["correct"]) == (0, 0)
    attempts = [attempt("s0", "code_o", True, made), attempt("s0", "code_o", False, made),
                attempt("s1", "code_o", True, topup),
                attempt("s1", "code_o", False, topup, error="prompt too long")]
    archive.record_solves(attempts)
    archive.record_solves(attempts[:1])
    assert (made["problem"]["attempts"], made["problem"]["correct"]) == (3, 2)
    # the attempt the engine could not generate is not graded
    assert (topup["attempts"], topup["correct"]) == (1, 1)
    # bookkeeping: never shown to a model or the verifier
    assert "attempts" not in archive.problem_core(topup)
    assert "correct" not in archive.problem_core(topup)
    old = {"program": "def f(a):\n    return a"}
    archive.record_solves([attempt("s0", "code_o", True, old)])
    assert (old["attempts"], old["correct"]) == (1, 1)
