"""Red team round 13b A08/A09: a child sends the parent no more than the parent can use. Each model
job carries the units it may spend (verify.OUTPUT_UNITS an output, MAX_ARG_UNITS for arguments);
a larger value fails in the child, before this process reads and parses ~1 MB of it. Each test
failed on the code before the fix (the commit that added them says how)."""
import json

import pytest

import sandbox
import verify

# 70 chars, 54,500 units: under the encoding's 65,536, ~1 MB of JSON a line
BIG = "{(i, ()): ((), ()) for i in range(10900)}"
# what the parent may read of one run here: far under the ~1 MB lines of round 13b
MAX_SENT = 100_000


@pytest.fixture
def sent(monkeypatch):
    """The JSON size of every run's values this process received from the sandbox."""
    sizes, run = [], sandbox.run

    def recording(jobs):
        runs = run(jobs)
        sizes.extend(len(json.dumps(r.get("values"))) for r in runs)
        return runs
    monkeypatch.setattr(sandbox, "run", recording)
    return sizes


def test_a_huge_output_is_refused_in_the_child(sent):
    # a set in the input: run in both families and as written, three lines of ~1 MB before
    program = f"def f(x):\n    return {BIG}"
    [result] = verify.validate("code_o", [{"program": program, "input": "{1, 2}"}])
    assert not result["valid"]
    assert result["reason"].startswith("invalid output: output repr longer than 2000 chars")
    assert len(sent) == 2 and max(sent) < MAX_SENT, sent


def test_a_long_string_as_the_last_value_is_refused_too(sent):
    # the encoding checks its budget before each node: a final string could overdraw it
    [result] = verify.validate("code_o", [{"program": "def f(x):\n    return 'a' * 10**6",
                                           "input": "1"}])
    assert result["reason"].startswith("invalid output: output repr longer than 2000 chars")
    assert max(sent) < MAX_SENT, sent


# code_i: an answer that reaches the huge value off the gold's path (A09: two ~1 MB lines each);
# code_o: an answer evaluated (not a literal) to a huge value
ANSWERED = {
    "code_i": (f"def f(x):\n    if x == 0:\n        return {BIG}\n    return x + 1", "5",
               "len({0}) - 1", "5"),
    "code_o": ("def f(x):\n    return x", "1", "[0] * 60000", "1 + 0"),
}


@pytest.mark.parametrize("task", sorted(ANSWERED))
def test_an_answer_reaching_a_huge_value_fails_in_the_child(sent, task):
    program, given, huge, right = ANSWERED[task]
    [problem] = verify.validate(task, [{"program": program, "input": given}])
    assert problem["valid"], problem
    sent.clear()
    attempts = [dict(problem, input=given, answer=a) for a in (huge, right)]
    wrong, correct = verify.grade(task, attempts)
    assert not wrong["correct"] and "output too large" in wrong["reason"], wrong
    # a value the sandbox cannot carry may still equal a small gold (a Decimal with 5,000
    # trailing zeros; red team round 17, A01; code_o's answer too: round 34, F1): that attempt
    # alone is void
    assert wrong["void"], wrong
    assert correct["correct"], correct
    assert max(sent) < MAX_SENT, sent


def test_an_input_pack_over_the_argument_budget_fails_in_the_child(sent):
    [result] = verify.validate("code_o", [{"program": "def f(x):\n    return len(x)",
                                           "input": "list(range(60000))"}])
    # as the parent said it when it had read them all
    assert result["reason"] == f"error: input too large (its arguments take more than " \
                               f"{verify.MAX_ARG_UNITS} units)", result
    # the arguments' budget: ~16,000 units of ints, not the 60,000 that were sent before
    assert max(sent) < 4 * MAX_SENT, sent


def test_outputs_at_the_repr_cap_stay_valid():
    # 1,998 chars of repr, 667 units: and ten of them in one code_f run
    result = verify.validate("code_o", [{"program": "def f(x):\n    return [x] * 666",
                                         "input": "0"}])[0]
    assert result["valid"] and len(result["output"]) == 1998, result
    inputs = [str(k) for k in range(10)]
    result = verify.validate("code_f", [{"program": "def f(x):\n    return [x] * 666",
                                         "inputs": inputs, "message": "repeat"}])[0]
    assert result["valid"], result
    # nested as deep as a value may go (2 chars a unit: the densest repr)
    program = "def f(x):\n    v = x\n    for _ in range(99):\n        v = [v]\n    return v"
    result = verify.validate("code_o", [{"program": program, "input": "0"}])[0]
    assert result["valid"], result
