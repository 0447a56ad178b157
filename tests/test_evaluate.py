"""evaluate.py, graders.py and report.py: loaders on the shipped fixtures, AZR
extraction/normalisation, math-verify scoring, EvalPlus/LCB scoring through the real sandbox
(verify.execute), hostile programs, the CLI end to end on a tiny checkpoint, the report figures; on
../shared (slow, skipped without it) every canonical solution of HumanEval+ and MBPP+ and every gold
answer of the seven math sets."""
import base64
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import time
import zlib

import pytest

import evaluate as E
import graders as G
from conftest import ROOT, shared_path

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "bench")
CFG = dict(E.config, data_dir=FIX, workers=2)
# Canonical solutions known not to pass here, each with its reason (checked by
# test_canonical_solutions_real):
KNOWN_CODE = {"Mbpp/599": "the canonical solution itself needs 25-50 s of CPU for its 88 plus "
                          "inputs (EvalPlus: ~51 s, docs/eval.md §2.3), close to the 60 s "
                          "per-task cap: passes here, may not on a slower machine"}
# Gold answers that cannot be scored correct even against themselves:
KNOWN_MATH = {"math500": {"test/prealgebra/105.json": "gold \\text{east}: AZR's strip_string removes "
                                                      "'east' (a unit word), leaving an empty gold "
                                                      "(docs/eval.md §1.2)"}}


def cli(*args, cwd=None, timeout=600):
    command = [sys.executable, os.path.join(ROOT, "evaluate.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout)


# ---------------------------------------------------------------------------- loaders and bad input

def test_loaders_read_every_fixture_in_the_real_formats():
    items = {n: E.load_benchmark(n, FIX) for n in E.BENCHMARKS}
    assert all(len(v) >= 2 for v in items.values())
    assert items["gsm8k"][0]["gold"] == "18" and "Janet" in items["gsm8k"][0]["question"]
    assert items["amc23"][0]["gold"] == "27.0"
    math500 = {it["id"]: it for it in items["math500"]}
    # the last \boxed{} of the solution
    assert math500["test/prealgebra/105.json"]["gold"] == "\\text{east}"
    olympiad = {it["id"]: it for it in items["olympiadbench"]}
    # final_answer[0] without $
    assert olympiad["2615"]["gold"] == "d=\\frac{1+\\sqrt{1+8 n}}{2}"
    mbpp = {it["id"]: it for it in items["mbppplus"]}
    # EvalPlus's tuple args
    assert all(isinstance(a, tuple) for inp in mbpp["Mbpp/2"]["base_input"] for a in inp)
    assert isinstance(mbpp["Mbpp/124"]["plus_input"][0][1], complex) and mbpp["Mbpp/793"]["plus_input"] == []
    assert mbpp["Mbpp/124"]["atol"] == 1e-4 and mbpp["Mbpp/2"]["canonical"].startswith('"""')
    lcb = {it["id"]: it for it in items["livecodebench"]}
    # 1 public + 2 pickled private
    assert lcb["fx-1"]["fn_name"] == "addTwo" and len(lcb["fx-1"]["tests"]) == 3
    assert lcb["fx-2"]["fn_name"] is None and lcb["fx-2"]["tests"][1]["output"] == "1.5\n2.5\n3.5\n3\n"
    assert [len(E.load_benchmark(n, FIX, limit=1)) for n in ("gsm8k", "mbppplus")] == [1, 1]


def test_bad_input_gives_clear_errors(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(SystemExit, match=r"gsm8k\.jsonl is missing\. Fetch it with `python evaluate\.py fetch"):
        E.load_benchmark("gsm8k", str(tmp_path / "empty"))
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": oops}\n')
    with pytest.raises(SystemExit, match="line 2 is not JSON"):
        E.load_benchmark("gsm8k", str(tmp_path))
    (tmp_path / "aime24.jsonl").write_text('{"problem": "1+1?"}\n')
    with pytest.raises(SystemExit, match="lacks a field"):
        E.load_benchmark("aime24", str(tmp_path))
    with pytest.raises(SystemExit, match="unknown benchmark"):
        E.benchmark_names("gsm8k,humaneval++")
    # a pickled LCB test field that would run os.system when unpickled by a plain pickle.loads
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    field = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        E.decode_lcb_tests(field)
    r = cli("--ckpt", str(tmp_path), "--benchmarks", "gsm8k,nope", "--data_dir", FIX)
    assert r.returncode != 0 and "unknown benchmark" in r.stderr
    r = cli("--ckpt", str(tmp_path), "--benchmarks", "gsm8k", "--data_dir", str(tmp_path / "empty"))
    assert r.returncode != 0 and os.path.join(str(tmp_path / "empty"), "gsm8k.jsonl") in r.stderr
    r = cli("--ckpt", str(tmp_path), "--benchmarks", "gsm8k", "--data_dir", FIX)
    assert r.returncode != 0 and "is not a checkpoint folder" in r.stderr
    # no abbreviations, typed
    assert cli("--limt", "2").returncode == 2 and cli("--limit", "two").returncode == 2
    for flag, value in (("--engine", "tpu"), ("--math_prompt", "cot"), ("--lcb_timeout", "0"), ("--limit", "-1")):
        r = cli("--ckpt", str(tmp_path), flag, value)
        assert r.returncode != 0 and flag in r.stderr, (flag, r.stderr)


# ----------------------------------------------------------------------------- math

def test_math_extraction_and_azr_normalisation():
    ex = E.extract_math
    assert ex("<think>\\boxed{1}</think> <answer>so \\boxed{\\frac{1}{2}}</answer>") == "\\frac{1}{2}"
    assert ex("no tags, \\boxed{3} then \\boxed{\\text{(C)}}") == "\\text{(C)}"
    assert ex("<answer> 42 </answer>") == "42" and ex("x \\[ 7 \\] y \\[ 8 \\]") == "7"
    assert ex("nothing here") == "" and ex("<answer>\\boxed{3</answer>") == ""
    # unclosed \[ after unclosed \[: read in one pass (the regex took 17 s on 30,000 of them)
    start = time.process_time()
    assert ex("\\[" * 30_000) == "" and ex("\\[ 1 \\[ 2 \\]") == "1 \\[ 2"
    assert time.process_time() - start < 1.0
    st = G.strip_string
    assert st("\\dfrac{1}{2}") == "\\frac{1}{2}" and st("\\frac12") == "\\frac{1}{2}" and st("3/4") == "\\frac{3}{4}"
    assert st("27.0") == "27" and st("x = 3") == "3" and st("10\\%") == "10" and st("5 \\text{ cm}") == "5"
    assert st("\\left( 3, \\frac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})" and st("90^\\circ") == "90"
    assert st("\\text{east}") == "" and st("5 m", skip_unit=True) == "5m"


# (answer, strip_string, strip_string with skip_unit) as AZR's regex steps gave them (commit
# 634a100, before the one-pass rewrite)
NORMALISED = [
    ('\\frac{1}{2}', '\\frac{1}{2}', '\\frac{1}{2}'), ('27.0', '27', '27'), ('x = 3', '3', '3'),
    ('10\\%', '10', '10'), ('5 \\text{ cm}', '5', '5'), ('\\text{(C)}', '(C)', '(C)'),
    ('3.50', '3.50', '3.50'), ('2.000 meters', '2', '2meters'),
    ('\\begin{array}{cc} 1 & 2 \\end{array}', '\\begin{pmatrix}1&2\\end{pmatrix}',
     '\\begin{pmatrix}1&2\\end{pmatrix}'),
    ('\\mbox{ units}12', '12', '12'), ('\\$4.00', '4', '4'), ('.5', '0.5', '0.5'),
    ('1,000.00', '1,000', '1,000'), ('\\{1, 2\\}', '{1,2}', '{1,2}'),
    ('(-\\infty, 3]', '(-\\infty,3]', '(-\\infty,3]'),
    ('x \\in [0, 1]', 'x\\in[0,1]', 'x\\in[0,1]'),
    ('\\sqrt2', '\\sqrt{2}', '\\sqrt{2}'), ('12 \\text{ inches}', '12', '12'),
    ('\\text{Monday}', 'Monday', 'Monday'), ('5 \\text{ and } 6', '56', '56'),
    ('y = 2x + 1', '2x+1', '2x+1'), ('100.', '100', '100'), ('4 apples', '4', '4apples'),
    ('2j', '2i', '2i'), ('-3.0', '-3', '-3'), ('90^\\circ', '90', '90'),
    ('\\left[ 1, 2 \\right)', '[1,2)', '[1,2)'), ('k = 3.00', '3', '3'),
    ('\\text{east}', '', 'east'),
    ('(2.50, 3.0)', '(2.50,3)', '(2.50,3)'), ('\\frac{7.0}{2}', '\\frac{7}{2}', '\\frac{7}{2}'),
    ('1.05', '1.05', '1.05'), ('\\text{A}, \\text{B}', 'A,B', 'A,B'),
]


def test_one_pass_normalisation_gives_what_azrs_regexes_give():
    # ordinary answers: the outputs of the regex version
    for answer, plain, skip_unit in NORMALISED:
        assert (G.strip_string(answer), G.strip_string(answer, True)) == (plain, skip_unit), answer
    # each one-pass step against the regex it replaced, on random strings of what the regexes turn
    # on (strip_string has removed newlines by then)
    atoms = ["0", "1", "7", "٣", ".", " ", "x", "}", "{", "\\text{", "\\mbox{", "\\begin{array}{"]
    rng = random.Random(0)
    for _ in range(20_000):
        s = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 12)))
        unwrapped = G.sub_braced(s, "\\text{", lambda inner: inner)
        assert unwrapped == re.sub(r"\\text\{(.*?)\}", r"\1", s)
        assert G.sub_braced(s, "\\mbox{", lambda inner: "") == re.sub(r"\\mbox{.*?}", "", s)
        pmatrix = G.sub_braced(s, "\\begin{array}{", lambda inner: "\\begin{pmatrix}")
        assert pmatrix == re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
        assert G.cut_trailing_text(s) == re.sub(r"\\text{.*?}$", "", s)
        assert G.DECIMAL_ZEROS.sub(r"\1\2", s) == re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
        assert G.DECIMAL_ZEROS_END.sub(r"\1", s) == re.sub(r"(\d+)\.0*$", r"\1", s)


def test_degenerate_math_answers_are_normalised_in_linear_time():
    # answers a model can degenerate into until math_tokens (redteam12b A04): 50,000 characters
    # each, normalised in a child under a 30 s CPU limit (the kernel's count, not a clock): the
    # regex version spent 35-40 s on each run of digits alone (quadratic), this one well under a
    # second on all of them
    n = 50_000
    answers = {"1" * n: "1" * n, "1" * n + ".0": "1" * n,
               "1." + "0" * n + "1": "1." + "0" * n + "1",
               "(1." + "0" * n + ")": "(1)", "\\text{a" * (n // 7): "\\text{" * (n // 7),
               "\\mbox{x" * (n // 7): "\\mbox{x" * (n // 7),
               "\\begin{array}{" * 3570 + "x": "\\begin{pmatrix}{" * 1785 + "x"}
    child = ("import json, resource, sys\nresource.setrlimit(resource.RLIMIT_CPU, (30, 30))\n"
             "import graders\n"
             "print(json.dumps([graders.strip_string(a) for a in json.load(sys.stdin)]))")
    r = subprocess.run([sys.executable, "-c", child], input=json.dumps(list(answers)), cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"killed ({r.returncode}) or failed: {r.stderr[-500:]}"
    assert json.loads(r.stdout) == list(answers.values())


def test_math_scoring_right_wrong_and_hostile_answers():
    right = [("\\frac{1}{2}", "0.5"), ("27", "27"), ("(3,\\frac{\\pi}{2})", "(3,\\frac{\\pi}{2})"),
             ("[1,3]", "[1, 3]"), ("x^2+2x+1", "(x+1)^2"), ("1000", "1,000")]
    wrong = [("18", "17"), ("\\frac{1}{2}", "\\frac{1}{3}"), ("(1,2)", "(2,1)"), ("3", ""),
             ("\\frac{\\sqrt{3}}{2}", "\\sin(60^\\circ)"), ("2", "x" * 3000), ("1", "9^{9^{9^{9}}}"),
             ("4", "\\frac{1}{0}"), ("5", "\\boxed{\\boxed{\\boxed{6}}}")]
    start = time.monotonic()
    pairs = [(G.strip_string(g), G.strip_string(p)) for g, p in right + wrong]
    got = G.score_math(pairs, timeout=3.0, workers=2)
    assert got == [True] * len(right) + [False] * len(wrong)
    assert time.monotonic() - start < 120   # the power tower times out (3 s) instead of hanging


def test_selfcheck_cli_on_the_fixtures():
    r = cli("selfcheck", "--data_dir", FIX)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(report) == set(E.BENCHMARKS) - {"livecodebench"}   # LCB ships no reference solutions
    for name, row in report.items():
        assert row["records"] == len(E.load_benchmark(name, FIX))
        assert row["passed"] + len(row["failed"]) == row["records"]
        assert set(row["failed"]) == set(KNOWN_MATH.get(name, {})), (name, row)


# ----------------------------------------------------------------------------- code

# fixture task -> (program that passes by EvalPlus's rules, program that fails)
HUMANEVAL_WRONG = {
    0: ("def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n",
        "def has_close_elements(numbers, threshold):\n    return False\n"),
    1: ("def truncate_number(number):\n    return number % 1.0 + 1e-9\n",   # inside atol 1e-6
        "def truncate_number(number):\n    return number % 1.0 + 1e-3\n"),
    # Newton from another start: any root with |poly| <= atol passes (HumanEval/32's special oracle)
    2: ("def find_zero(xs):\n    x = 3.0\n    for _ in range(200):\n"
        "        f = sum(c * x ** i for i, c in enumerate(xs))\n"
        "        d = sum(i * c * x ** (i - 1) for i, c in enumerate(xs) if i)\n"
        "        x = x - f / d if d else x + 0.1\n    return x\n",
        "def find_zero(xs):\n    return 0.0\n"),
}
MBPP_WRONG = {
    # set oracle
    0: ("def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b), reverse=True))\n",
        "def similar_elements(a, b):\n    return tuple(set(a) | set(b))\n"),
    # output-not-None oracle
    2: ("import re\ndef check_str(s):\n    return bool(re.match('[aeiouAEIOU]', s))\n",
        "def check_str(s):\n    return None\n"),
    4: ("def last(arr, x):\n    return max(i for i, v in enumerate(arr) if v == x)\n",
        "def last(arr, x):\n    return 0\n"),
}


def test_evalplus_scoring_canonical_right_and_wrong_programs():
    for name, table in (("humanevalplus", HUMANEVAL_WRONG), ("mbppplus", MBPP_WRONG)):
        items = E.load_benchmark(name, FIX)
        programs = [(k, it["canonical"]) for k, it in enumerate(items)]
        programs += [(k, ok) for k, (ok, _) in table.items()]
        programs += [(k, bad) for k, (_, bad) in table.items()]
        verdicts = G.score_evalplus(name, items, programs, CFG)
        want = [True] * len(items) + [True] * len(table) + [False] * len(table)
        shown = [(p[1][:40], v) for p, v in zip(programs, verdicts)]
        assert [v["correct"] for v in verdicts] == want, shown
        assert all(v["reason"] for v in verdicts if not v["correct"])


def test_hostile_programs_are_wrong_answers_not_crashes_or_hangs():
    items = E.load_benchmark("humanevalplus", FIX)[:1]   # has_close_elements(numbers, threshold)
    head = "def has_close_elements(numbers, threshold):\n"
    hostile = [head + "    while True:\n        pass\n",
               "import sys\nsys.exit(0)\n" + head + "    return True\n",
               "import os\n" + head + "    os._exit(0)\n",
               head + "    print('x' * 10**6)\n    return True\n",
               head + "    x = [0] * (10**10)\n",
               head + "    return has_close_elements(numbers, threshold)\n",
               "class Equal:\n    def __eq__(self, other):\n        return True\n" + head + "    return Equal()\n",
               "import os, signal\n" + head + "    os.kill(os.getppid(), signal.SIGKILL)\n",
               "import sys, json\n" + head + "    sys.__stdout__.write('@@populora-eval@@' + json.dumps({'outs': [], "
               "'times': [], 'error': ''}) + '\\n')\n    sys.stdout.write('@@populora-eval@@{}\\n')\n"
               "    raise SystemExit\n",
               "import builtins\nbuiltins.repr = lambda x: 'True'\nbuiltins.sorted = lambda x: []\n" + head +
               "    return None\n",
               "def broken(:\n"]
    cfg = dict(CFG, min_time_limit=1.0, task_timeout=4.0)
    start = time.monotonic()
    programs = [(0, code) for code in hostile] + [(0, items[0]["canonical"])]
    verdicts = E.score("humanevalplus", items, programs, cfg)
    assert [v["correct"] for v in verdicts] == [False] * len(hostile) + [True], verdicts
    assert all(v["reason"] for v in verdicts[:-1])
    assert time.monotonic() - start < 120


# a result line the program forges (redteam12b A03): it writes to the harness's real stdout and
# fills its own past the 1 MiB cap, so the harness's line is lost; its numbers are past float's
# range: an output's number, an input's time, the run's wall time, times whose sum is
FORGED_FIELDS = ['{"outs": [{"h": "0", "n": ["float:n", [10 ** 400]]}] * n, "times": [0.0] * n, '
                 '"wall": 0.0}',
                 '{"outs": [{"h": "0"}] * n, "times": [10 ** 400] * n, "wall": 0.0}',
                 '{"outs": [{"h": "0"}] * n, "times": [0.0] * n, "wall": 10 ** 400}',
                 '{"outs": [{"h": "0"}] * n, "times": [10 ** 308] * n, "wall": 0.0}']


def test_forged_result_lines_out_of_float_range_fail_that_program_alone():
    items = E.load_benchmark("humanevalplus", FIX)   # items[1]: truncate_number, a float output
    forged = []
    for fields in FORGED_FIELDS:
        forged.append("import json, sys\ndef truncate_number(number):\n"
                      "    harness = sys._getframe(1).f_locals\n    n = len(harness['cases'])\n"
                      f"    line = dict({fields}, error='')\n"
                      f"    harness['real_out'].write({G.MARK!r} + json.dumps(line) + '\\n')\n"
                      "    harness['real_out'].write('x' * (1 << 21))\n    return number % 1.0\n")
    programs = [(1, code) for code in forged] + [(1, items[1]["canonical"])]
    verdicts = E.score("humanevalplus", items, programs, CFG)
    assert [v["correct"] for v in verdicts] == [False] * len(forged) + [True], verdicts
    assert all("malformed result" in v["reason"] for v in verdicts[:-1]), verdicts


LCB_PROGRAMS = [   # (fixture item, program, passes?)
    (0, "class Solution:\n    def addTwo(self, a: int, b: int) -> int:\n        return a + b\n", True),
    (0, "class Solution:\n    def addTwo(self, a, b):\n        return a - b\n", False),
    (0, "class Solution:\n    def addTwo(self, a, b):\n        while True:\n            pass\n", False),
    (1, "n = int(input())\nxs = list(map(int, input().split()))\nfor x in xs:\n    print(x / 2)\nprint(n)\n", True),
    (1, "import sys\nd = sys.stdin.read().split()\nfor x in d[1:]:\n    print('%.2f' % (int(x) / 2))\n"
        "print(d[0])\n", True),   # "0.50" vs "0.5": equal as Decimals
    (1, "if __name__ == '__main__':\n    n = int(input())\n"
        "    print(*[int(x) / 2 for x in input().split()], sep='\\n')\n    print(n)\n", True),
    (1, "print(1)\n", False),
    (1, "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)\n", False),
]


def test_livecodebench_functional_and_stdin_tests():
    items = E.load_benchmark("livecodebench", FIX)
    programs = [(k, code) for k, code, _ in LCB_PROGRAMS]
    verdicts = E.score("livecodebench", items, programs, dict(CFG, lcb_timeout=2.0))
    assert [v["correct"] for v in verdicts] == [ok for _, _, ok in LCB_PROGRAMS], verdicts
    assert "time limit" in verdicts[2]["reason"]


def test_code_extraction():
    evalplus = "def f(x):\n    return x + 1\n\nprint(f(1))\nassert f(2) == 3\n```\nSome explanation."
    assert E.extract_code("humanevalplus", evalplus) == "def f(x):\n    return x + 1"
    # cut off at the token budget
    cut = "import math\ndef g(y):\n    return math.sqrt(y)\ndef h(\n"
    assert E.extract_code("mbppplus", cut) == "import math\n\ndef g(y):\n    return math.sqrt(y)"
    lcb = ("<think>```python\nwrong()\n```</think>\n<answer>Here:\n```python\nprint(1)\n```\nand\n"
           "```python\nprint(2)\n```</answer>")
    assert E.extract_code("livecodebench", lcb) == "print(2)\n"
    # no <answer>: no program
    assert E.extract_code("livecodebench", "```python\nprint(3)\n```") == ""


# ----------------------------------------------------------------------------- end to end

def _checkpoint(folder, roles, cache, scale):
    """A saved tiny population; scale > 0 perturbs lora_B of the first member (others stay zero =
    the base)."""
    import torch
    import population as P
    cfg = dict(model="tiny", lora_rank=4, lora_alpha=8, lora_dropout=0.0, seed=0, rating="trueskill",
               lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    import tinyworld
    base, tokenizer = P.load_base(tinyworld.model_folder("tiny", cache))
    model, members = P.init_population(base, tokenizer, cfg, roles)
    if scale:
        gen = torch.Generator().manual_seed(1)
        weights = P.get_adapter(model, members[0]["name"])
        perturbed = {}
        for k, v in weights.items():
            perturbed[k] = v
            if "lora_B" in k:
                perturbed[k] = torch.randn(v.shape, generator=gen) * scale
        P.set_adapter(model, members[0]["name"], perturbed)
    archive = {"code_i": [], "code_o": [], "code_f": []}
    return P.save_checkpoint(folder, 3, model, members, {}, {"config": cfg}, archive)


def test_evaluate_end_to_end_on_a_tiny_checkpoint(tmp_path):
    pop = _checkpoint(str(tmp_path / "pop"), ["teacher", "student"], str(tmp_path / "out" / ".tiny"), 0.5)
    baseline = _checkpoint(str(tmp_path / "base"), ["both"], str(tmp_path / "out" / ".tiny"), 0.0)
    r = cli("--ckpt", pop, "--baseline_ckpt", baseline, "--benchmarks", "all", "--data_dir", FIX, "--limit", "2",
            "--engine", "hf", "--math_tokens", "12", "--lcb_tokens", "12", "--evalplus_tokens", "12",
            "--out", str(tmp_path / "eval"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["benchmarks"] == list(E.BENCHMARKS) and result["n_items"] == {n: 2 for n in E.BENCHMARKS}
    assert set(result["scores"]) == {"t0", "s0", "base", "baseline"}
    assert result["roles"] == {"t0": "teacher", "s0": "student"}
    for row in result["scores"].values():
        assert all(0.0 <= row[n] <= 100.0 for n in E.BENCHMARKS)
        assert row["math_avg6"] == round(sum(row[n] for n in E.MATH6) / 6, 2)
    assert list(result["table"]) == ["base", "baseline", "population mean", "best teacher",
                                     "best student", "weakest member"]
    assert result["table"]["best teacher"]["row"] == "t0"
    assert result["table"]["best student"]["row"] == "s0"
    assert all(len(result["items"][n][row]) == 2 for n in E.BENCHMARKS for row in result["scores"])
    # the zero-B slots equal the base exactly; the perturbed teacher does not (adapters really are
    # applied)
    def text(row):
        responses = []
        for n in E.BENCHMARKS:
            responses += [s["response"] for s in result["samples"][n][row]]
        return responses
    assert text("s0") == text("base") == text("baseline")
    assert text("t0") != text("base")
    md = (tmp_path / "eval" / "eval.md").read_text()
    assert "| best teacher | t0 |" in md and "math_avg7" in md and md.count("\n|") >= 8


def _tiny_data(folder, count=6):
    """data_dir/tiny.jsonl: `count` problems of the laptop world, task types in turn (tinyworld's
    rows)."""
    import tinyworld
    os.makedirs(folder, exist_ok=True)
    rows = tinyworld.problem_rows(tinyworld.build_pool(5, count, 4, 4, 0.0), "tiny")
    tinyworld.write_jsonl(os.path.join(folder, "tiny.jsonl"), rows)
    return str(folder)


def test_tiny_benchmark_grades_golds_right_and_others_wrong(tmp_path):
    data = _tiny_data(tmp_path / "data", 9)
    items = E.load_benchmark("tiny", data)
    assert [it["task"] for it in items] == ["code_i", "code_o", "code_f"] * 3
    report = E.selfcheck(dict(CFG, data_dir=data, benchmarks="tiny"))
    assert report == {"tiny": {"records": 9, "passed": 9, "failed": []}}
    # another problem's gold, a format error, and f(...) as a code_o answer (f is not in scope
    # there)
    golds = {"code_i": "input", "code_o": "output", "code_f": "program"}
    wrong = [(k, items[(k + 3) % 9]["problem"][golds[it["task"]]]) for k, it in enumerate(items)]
    wrong += [(0, ""), (1, f"f({items[1]['problem']['input']})")]
    verdicts = E.score("tiny", items, wrong, CFG)
    # a code_i input may fit two programs
    assert sum(v["correct"] for v in verdicts[:9]) <= 2, verdicts
    assert not verdicts[9]["correct"] and "format error" in verdicts[9]["reason"]
    assert not verdicts[10]["correct"]
    response = f"x </think> <answer>```output\n{items[1]['problem']['output']}\n```</answer>"
    assert E.extract_tiny("code_o", response) == items[1]["problem"]["output"]
    assert E.extract_tiny("code_o", "no tags") == ""


def test_evaluate_tiny_end_to_end(tmp_path):
    pop = _checkpoint(str(tmp_path / "pop"), ["student", "student"], str(tmp_path / "out" / ".tiny"), 0.5)
    data = _tiny_data(tmp_path / "data")
    r = cli("--ckpt", pop, "--benchmarks", "tiny", "--data_dir", data, "--engine", "hf", "--tiny_tokens", "6",
            "--out", str(tmp_path / "eval"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["benchmarks"] == ["tiny"] and result["n_items"] == {"tiny": 6}
    assert set(result["scores"]) == {"s0", "s1", "base"}
    for row in result["scores"].values():
        assert {"tiny", "tiny_code_i", "tiny_code_o", "tiny_code_f"} <= set(row)
        assert row["overall"] == row["tiny"]
    assert list(result["table"]) == ["base", "population mean", "best student", "weakest member"]
    samples = result["samples"]["tiny"]
    assert samples["s1"][0]["response"] == samples["base"][0]["response"] != samples["s0"][0]["response"]
    md = (tmp_path / "eval" / "eval.md").read_text()
    assert "tiny_code_f" in md and "math_avg6" not in md


def test_report_writes_every_figure(tmp_path):
    fixtures = os.path.dirname(FIX)
    for name, src, cfg in (("pop", "metrics_small.jsonl", {}),
                           ("base", "metrics_small_baseline.jsonl", {"config": {"baseline": True}})):
        os.makedirs(tmp_path / name)
        shutil.copy(os.path.join(fixtures, src), tmp_path / name / "metrics.jsonl")
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    r = cli("report", str(tmp_path / "pop"), str(tmp_path / "base"))
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout.strip().splitlines()[-1])["figures"]
    names = ("rates", "difficulty", "complexity", "ratings", "matches", "archive",
             "student_vs_teacher", "entropy", "response_len")
    assert sorted(figures) == sorted(f"{n}.png" for n in names)
    md = (tmp_path / "pop" / "report" / "report.md").read_text()
    for f in figures:
        data = (tmp_path / "pop" / "report" / f).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000 and f"({f})" in md
    assert "pop" in md and "base (baseline)" in md
    r = cli("report", str(tmp_path / "nothing"))
    assert r.returncode != 0 and "metrics.jsonl not found" in r.stderr


def test_report_draws_every_members_rating_or_stops():
    """Issue 25: the ratings figure reads ratings through ratings.band; a member with ratings logged
    has a point per step, and fields no rating system logs stop the report (it drew an empty figure)."""
    import report
    rows = [json.loads(line) for line in open(os.path.join(os.path.dirname(FIX), "metrics_small.jsonl"))]
    series = report.rating_series({"name": "pop", "rows": rows})
    members = {k.split("/")[1] for k in rows[0] if k.startswith("rating/")}
    assert set(series) == members and members
    for x, centre, low, high in series.values():
        assert len(x) == len(rows) and all(lo <= c <= hi for lo, c, hi in zip(low, centre, high))
    odd = [{"step": 0, "rating/t0/glicko_rd": 1.0}]
    with pytest.raises(SystemExit, match=r"logs ratings \['glicko_rd'\] that no system"):
        report.rating_series({"name": "odd", "rows": odd})


# ------------------------------------------------------------------------ the real data (../shared)

@pytest.mark.slow
def test_canonical_solutions_real():
    data = shared_path("benchmarks")
    report = E.selfcheck(dict(E.config, data_dir=data, benchmarks="humanevalplus,mbppplus"))
    print(json.dumps(report))
    assert report["humanevalplus"]["records"] == 164 and report["mbppplus"]["records"] == 378
    for row in report.values():
        assert set(row["failed"]) <= set(KNOWN_CODE), row["failed"]


@pytest.mark.slow
def test_gold_answers_real():
    data = shared_path("benchmarks")
    report = E.selfcheck(dict(E.config, data_dir=data, benchmarks="math"))
    print(json.dumps(report))
    records = {"aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "minerva_math": 272,
               "olympiadbench": 675, "gsm8k": 1319}
    assert {n: r["records"] for n, r in report.items()} == records
    for name, row in report.items():
        assert set(row["failed"]) == set(KNOWN_MATH.get(name, {})), (name, row["failed"])
