"""Red team round 35: the names a code_i answer may read are the builtins and the program's
imports, less what the program's module binds; a name bound inside a function or a class, or an
answer's own lambda parameter or comprehension target, is not the program's. Each test failed on
the code before the fix (the commit that added them says how)."""
import pytest

import screen
import verify


def _grade(program, given, answers):
    [result] = verify.validate("code_i", [{"program": program, "input": given}])
    assert result["valid"], result
    problem = dict({"program": program, "input": given},
                   **{k: v for k, v in result.items() if k not in ("valid", "reason")})
    return verify.grade("code_i", [dict(problem, answer=a) for a in answers])


# A01: the teacher binds the builtin's name in an inner scope; the answer's `list` is still the
# builtin in stock Python (the call runs in the module), so a right answer is right
@pytest.mark.parametrize("program, given, answer", [
    ("def f(list):\n    return sum(list)", "[1, 2]", "list(range(3))"),
    ("def f(x):\n    list = 5\n    return sum(x) * list", "[1, 2]", "list(range(3))"),
    ("class A:\n    list = tuple\ndef f(x):\n    return sum(x)", "[1, 2]", "list(range(3))"),
    ("def f(nums):\n    return [len for len in nums if len > 1]", "[3, 1, 2]", "[len('abc'), 1, 2]"),
])
def test_a_builtin_bound_only_inside_the_program_is_still_the_answers(program, given, answer):
    right, wrong = _grade(program, given, [answer, "[9]"])
    assert right["correct"] and not right["void"], right
    assert not wrong["correct"] and not wrong["void"], wrong


# A02: rebound at the top level, stock Python reads the program's binding, which an answer may
# not reach: void, not wrong (the other attempt of the problem keeps its verdict)
@pytest.mark.parametrize("binding", ["list = tuple", "for list in [tuple]:\n    pass",
                                     "[(list := tuple) for _ in 'a']",
                                     "def g():\n    global list\n    list = tuple\ng()"])
def test_a_builtin_the_program_rebinds_at_its_top_level_voids_the_answer(binding):
    program = binding + "\ndef f(x):\n    return sum(x) * 2"
    rebound, plain = _grade(program, "[1, 2]", ["list(range(3))", "[0, 1, 2]"])
    assert rebound["void"] and not rebound["correct"], rebound
    assert "rebinds" in rebound["reason"], rebound
    assert plain["correct"] and not plain["void"], plain


# A03: the answer's own names are not the program's f; reading f, a helper or a class is still
# a search through the program: wrong, not void
def test_an_answers_own_f_is_not_the_programs():
    program = "def g(x):\n    return x\ndef f(x):\n    return sum(x)"
    results = _grade(program, "[0, 1, 2]", ["[f for f in range(3)]", "(lambda f: [0, f, 2])(1)",
                                            "[f for f in f([3])]", "[0, 1, g(2)]",
                                            "[0, 1, (lambda f: f)(f([2]))]"])
    assert [r["correct"] for r in results] == [True, True, False, False, False], results
    for result in results[2:]:
        assert not result["void"] and "the program's own" in result["reason"], result


def test_the_names_a_program_binds_are_its_modules():
    program = ("import math\nfrom json import dumps as sorted\nK = 1\n[(W := 2) for _ in 'a']\n"
               "class A:\n    max = 3\ndef g():\n    global G\n    G = 4\ndef f(min, *, abs=1):\n"
               "    len = 5\n    return [sum for sum in min]")
    answer = "K, W, G, A, g, f, math, sorted, max, min, abs, len, sum, list"
    assert screen.own_names_read(program, [answer]) == ["A", "G", "K", "W", "f", "g"]


# Round 36, B1: an import the program's module also binds otherwise (an annotation, a branch that
# never runs, a helper's `global`): stock Python may read the module, the verifier cannot tell, so
# an answer reading it is void, not wrong; reading f or a helper stays wrong
@pytest.mark.parametrize("program, answer", [
    ("import math\nmath: int\ndef f(x):\n    return x * 2", "math.floor(3.5)"),
    ("import math\nif 0:\n    math = 0\ndef f(x):\n    return x * 2", "math.floor(3.5)"),
    ("import math\ndef _g():\n    global math\n    math = 0\ndef f(x):\n    return x * 2",
     "math.floor(3.5)"),
    ("from fractions import Fraction\nif 0:\n    Fraction = None\ndef f(x):\n    return int(x * 2)",
     "Fraction(3, 1)"),
])
def test_an_import_the_module_rebinds_voids_the_answer(program, answer):
    rebound, plain, search = _grade(program, "3", [answer, "3", "[3 for f in [f]][0]"])
    assert rebound["void"] and "rebinds" in rebound["reason"], rebound
    assert plain["correct"], plain
    assert not search["correct"] and not search["void"], search


# Round 36, B2: an import in a block of the module's scope (`try:`, `if True:`) is in scope for a
# code_o answer, as in stock Python; a from-import of a name its module lacks is refused anywhere
@pytest.mark.parametrize("program, given, answer", [
    ("try:\n    import fractions\nexcept ImportError:\n    pass\ndef f(x):\n"
     "    return fractions.Fraction(x, 3)", "1", "fractions.Fraction(1, 3)"),
    ("if True:\n    import math\ndef f(x):\n    return math.floor(x)", "1.5", "math.floor(1.5)"),
])
def test_an_import_in_a_block_of_the_module_is_in_the_answers_scope(program, given, answer):
    [result] = verify.validate("code_o", [{"program": program, "input": given}])
    assert result["valid"], result
    problem = dict({"program": program, "input": given},
                   **{k: v for k, v in result.items() if k not in ("valid", "reason")})
    right, wrong = verify.grade("code_o", [dict(problem, answer=answer), dict(problem, answer="0")])
    assert right["correct"] and not wrong["correct"], (right, wrong)


@pytest.mark.parametrize("where", ["", "if 0:\n    ", "try:\n    pass\nexcept ValueError:\n    "])
def test_a_from_import_of_a_name_the_module_lacks_is_refused_in_its_scope(where):
    program = f"{where}from math import no_such_name\ndef f(x):\n    return x"
    with pytest.raises(screen.Invalid, match="math has no no_such_name"):
        screen.prepare_program(program)
    assert screen.prepare_program("from collections import abc\ndef f(x):\n    return x")
    # a function's stays out of the imports line (round 11, A03)
    assert screen.prepare_program("def g():\n    from math import no_such_name\n"
                                  "def f(x):\n    return x")[1] == ""


# Round 36, C1: a program of many names and many scopes: symtable's Symbol objects scanned every
# child scope per name (quadratic); the scopes are read from their own flags, the same answers
def test_the_scopes_are_read_alike_from_their_flags():
    import symtable
    program = ("import math\nK = 1\ndef g():\n    global G\n    G = lambda: K\n"
               "class A:\n    x = [y for y in range(3)]\ndef f(x):\n    return [x for x in x]")
    tables = [symtable.symtable(program, "<p>", "exec")]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        slow = {s.get_name(): (s.is_assigned(), s.is_global(), s.is_referenced(), s.is_local(),
                               s.is_free()) for s in table.get_symbols()}
        fast = {s.get_name(): (s.is_assigned(), s.is_global(), s.is_referenced(), s.is_local(),
                               s.is_free()) for s in screen._symbols(table)}
        assert fast == slow, table.get_name()


# Round 37, B1: a module a helper or a class body binds by `global json; import json`: stock
# Python reads it if that helper ran, so an answer reading it is void, not wrong
@pytest.mark.parametrize("binding", ["def g():\n    global json\n    import json\ng()",
                                     "class K:\n    global json\n    import json"])
def test_a_module_imported_through_a_global_voids_the_answer(binding):
    program = binding + "\ndef f(x):\n    return json.dumps(x)"
    rebound, plain = _grade(program, "[1, 2]", ["json.loads('[1, 2]')", "[1, 2]"])
    assert rebound["void"] and "rebinds" in rebound["reason"], rebound
    assert plain["correct"], plain


# Round 37, C1: a name the answer binds itself by a walrus is its own (it runs as written, as in
# stock Python); one the program's module binds stays the program's
def test_a_name_the_answer_binds_itself_is_its_own():
    program = "def g(x):\n    return x\ndef f(x):\n    return x * 2"
    results = _grade(program, "3", ["[(h := 3), h][1]", "[h for _ in [0] if (h := 3)][0]",
                                    "[(h := 4), h][1]", "[h, (h := 3)][1]", "[(g := 3), g][1]"])
    assert [r["correct"] for r in results] == [True, True, False, False, False], results
    assert "the program's own g" in results[-1]["reason"], results


# Round 37, A1: a code_i answer (it runs after the program's top level and may read only builtins
# and modules) reached f through what a module holds: an attribute the program gave a module's
# object, a decimal context of the program's own class, a class's dict (round 38: one a class
# holds, an attribute replaced in place). An answer's expression is
# sealed: no code of the program runs from it, by any route (void: the teacher exposed f itself);
# the literal answer of the same problem stays right
SEARCH = "next(x for x in range(10007) if {} == 8906)"
BASE = "def f(x):\n    return (x * 7919) % 10007\n"


@pytest.mark.parametrize("program, route", [
    ("import re\n" + BASE + "I = re.IGNORECASE\nI.fn = f\n", "re.IGNORECASE.fn(x)"),
    ("import json\n" + BASE + "d = json.dumps\nd.fn = f\n", "json.dumps.fn(x)"),
    ("import json\n" + BASE + "e = json.JSONEncoder.default\ne.fn = f\n",
     "json.JSONEncoder.default.fn(x)"),
    ("import decimal\nclass C(decimal.Context):\n    pass\n" + BASE
     + "c = C()\nc.fn = f\ndecimal.setcontext(c)\n", "decimal.getcontext().fn(x)"),
    ("import textwrap\n" + BASE + "T = textwrap.TextWrapper\nd = T.unicode_whitespace_trans\n"
     "d[9] = f\n", "textwrap.TextWrapper.unicode_whitespace_trans[9](x)"),
    ("import re\n" + BASE + "m = re.RegexFlag\nm._value2member_map_['k'] = f\n",
     "re.RegexFlag._value2member_map_['k'](x)"),
    ("import re\n" + BASE + "def g():\n    yield 4242\nm = re.RegexFlag\n"
     "m._value2member_map_['k'] = g()\n", "next(re.RegexFlag._value2member_map_['k']) + 0 * x"),
    ("import re\n" + BASE + "class K:\n    def __eq__(self, o):\n        return True\n"
     "m = re.RegexFlag\nm._value2member_map_['k'] = K()\n",
     "[re.RegexFlag._value2member_map_['k'] == 1, x][1]"),
    # round 38, A1/A2: a dict a class holds, an attribute that existed replaced (same size)
    ("import statistics\n" + BASE + "L = statistics.LinearRegression\n"
     "L._field_defaults.update(q=f)\n", "statistics.LinearRegression._field_defaults['q'](x)"),
    ("import re\n" + BASE + "I = re.IGNORECASE\nI._sort_order_ = f\n",
     "re.IGNORECASE._sort_order_(x)"),
])
def test_no_code_of_the_program_runs_from_an_answer(program, route):
    search, right = _grade(program, "4242", [SEARCH.format(route), "4242"])
    assert not search["correct"] and search["void"], search
    assert "the program's own code" in search["reason"], search
    assert "caught" not in search["reason"], search
    assert right["correct"], right


def test_a_top_level_that_uses_the_modules_is_not_refused():
    program = ("import re, typing, json, statistics, collections, functools, decimal, enum\n"
               + BASE + "c = decimal.getcontext()\nc.prec = 5\nflags = re.IGNORECASE | re.MULTILINE\n"
               "seen = (re.I.name, re.I.value, typing.List[int], typing.Optional[str], "
               "json.dumps([1]), statistics.mean([1, 2]), collections.Counter('ab').most_common(1),"
               " functools.reduce(max, [1, 2]))\n")
    right, search = _grade(program, "4242", ["4242", "[4242][0]"])
    assert right["correct"] and search["correct"], (right, search)


# Round 40, R1 / round 41, B1-B3: a teacher's import of a name the code_f student binds anywhere
# is left out of the line before its program (kept, a teacher's unused `from itertools import
# count` made a student's local `count[c] = 1` "modify an imported module": a lever); a right
# program that then reads the module the teacher imported is void, not wrong
def _code_f_problem(teacher, inputs):
    [result] = verify.validate("code_f", [{"program": teacher, "inputs": inputs, "message": "m"}])
    assert result["valid"], result
    return dict({"program": teacher, "inputs": inputs, "message": "m"},
                **{k: v for k, v in result.items() if k not in ("valid", "reason")})


def test_a_teachers_unused_import_does_not_fail_a_students_local():
    teacher = "from itertools import count\ndef f(s):\n    return max(s.count(c) for c in set(s))"
    problem = _code_f_problem(teacher, [repr(w) for w in ["a", "abab", "aaab", "xy", "zzzz", "q",
                                                          "abcabc", "mm", "nnn", "pqp"]])
    local = ("def f(s):\n    count = {}\n    for c in s:\n        count[c] = count.get(c, 0) + 1\n"
             "    return max(count.values())")
    graded = verify.grade("code_f", [dict(problem, answer=a) for a in (local, local + " + 1")])
    assert [g["correct"] for g in graded] == [True, False], graded
    assert not graded[1]["void"], graded


def test_a_students_program_reading_an_import_left_out_is_void():
    teacher = ("import string\ndef f(s):\n    return ''.join(c for c in s if c in "
               "string.ascii_lowercase)")
    problem = _code_f_problem(teacher, [repr(w) for w in ["aB1c", "XYZ", "hello World", "q", "",
                                                          "Ab", "zz9", "a b", "M", "ok!"]])
    uses = "''.join(c for c in s if c in string.ascii_lowercase)"
    answers = [
        "def keep(string, ch):\n    return ch in string\n\ndef f(s):\n"
        "    return ''.join(c for c in s if keep(string.ascii_lowercase, c))",
        f"if False:\n    string = 0\n\ndef f(s):\n    return {uses}",
        f"def f(s):\n    [string for string in range(1)]\n    return {uses}",
        # the student's own binding, read: its own
        "string = 'abcdefghijklmnopqrstuvwxyz'\n\ndef f(s):\n"
        "    return ''.join(c for c in s if c in string)",
        f"def f(s):\n    return {uses}.upper()",
        f"def f(s):\n    return {uses} + undefined_name"]
    graded = verify.grade("code_f", [dict(problem, answer=a) for a in answers])
    assert [(g["correct"], g["void"]) for g in graded] == [
        (False, True), (False, True), (False, True), (True, False), (False, False),
        (False, False)], graded
    assert "import of string was left out" in graded[0]["reason"], graded


# Round 40, R2: the limit on a program's length is the student's text's, not that of the text the
# verifier makes of it (the teacher's imports, its docstring again)
def test_a_code_f_program_within_the_limit_is_not_refused_for_what_the_verifier_adds():
    teacher = "import math\ndef f(x):\n    return math.floor(x / 2) + math.isqrt(x)"
    problem = _code_f_problem(teacher, [str(n) for n in range(1, 11)])
    body = "import math\ndef f(x):\n    return math.floor(x / 2) + math.isqrt(x)\n"
    tabs = '"""' + "\t" * 17000 + '"""\n' + body
    padded = body + "#" * (screen.MAX_PROGRAM - len(body))
    assert len(padded) == screen.MAX_PROGRAM
    graded = verify.grade("code_f", [dict(problem, answer=a) for a in (tabs, padded, padded + "#")])
    assert [g["correct"] for g in graded] == [True, True, False], graded
    assert "longer than" in graded[2]["reason"], graded
