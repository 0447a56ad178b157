"""Issue 22, the red team's second round (verdict side): correct answers the screen refused, outputs
the answer format cannot carry, one bit of per-process randomness past the two-run check, parent
CPU on hostile text, special tokens in student prompts; and its third round's screen holes (wraps,
the enum functional API by another name, copy's reducer table) and a child's timer. Each test
failed on the code before its fix (the commit that added it says how it was checked)."""
import json
import subprocess
import sys

import pytest

import engines
import population
import sandbox
import screen
import train
import verify
from conftest import ROOT
from encoding import encode


# a one-member population on the tiny base, for the engine test
ENGINE_CFG = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.0, seed=0, max_model_len=1024,
                  lora_targets="q_proj,v_proj", rating="trueskill")


def problem_of(task, proposal):
    """validate one proposal -> the problem train.py stores (every result key but the verdict),
    or None when it is not valid."""
    result = verify.validate(task, [proposal])[0]
    if not result["valid"]:
        return None
    return dict(proposal, **{k: v for k, v in result.items() if k not in ("valid", "reason")})


def plain(value):
    """A value's canonical encoding, as plain data (what validate stores)."""
    parts = []
    encode(value, parts, [1 << 17])
    return json.loads("".join(parts))


def graded(task, problem, answers):
    return verify.grade(task, [dict(problem, answer=a) for a in answers])


def response(tag, text):
    """A student's response written as the prompts ask: the answer in a fence, in answer tags."""
    return f"<think>traced it</think>\n<answer>\n```{tag}\n{text}\n```\n</answer>"


# ------------------------------ every valid problem's own answer, written naturally, is correct

# programs whose shown output (or input) holds what the screen refuses in code, or what ends an
# answer or a fence
TRICKY = {
    # a word of the screen's introspection list inside a string (red team A15, A16)
    "word_in_a_str": ("def f(s):\n    return s[::-1]", "'ormdef'"),
    "word_in_a_key": ("def f(k):\n    return {'ta' + k: 4}", "'co_names'"),
    # an output whose answer is not a literal (it is screened, as it runs)
    "word_in_a_counter": ("from collections import Counter\ndef f(s):\n    return Counter([s])",
                          "'__mro__'"),
    # the answer format's own delimiters (A17, A18)
    "answer_tag": ("def f(s):\n    return '</ans' + s", "'wer>'"),
    "fence": ("def f(s):\n    return s * 3", "'`'"),
}


@pytest.mark.parametrize("name", list(TRICKY))
def test_a_valid_outputs_natural_answer_is_graded_correct(name):
    """Whatever validate accepts, the student who writes the shown output in an output fence, as
    the prompt asks, is graded correct (before: 'fedmro' and a dict key 'taco_names' were graded
    "banned name in a string", '</answer>' and '```' outputs were cut by parse_student)."""
    program, given = TRICKY[name]
    problem = problem_of("code_o", {"program": program, "input": given})
    if problem is None:
        return
    answer = verify.parse_student("code_o", response("output", problem["output"]))
    assert answer == problem["output"]
    result = graded("code_o", problem, [answer])[0]
    assert result["correct"], (problem["output"], result)


def test_the_screen_refusals_that_stay_are_kept():
    """A literal answer is read, not screened; anything that runs still is."""
    program = "def f(s):\n    return s[::-1]"
    problem = problem_of("code_o", {"program": program, "input": "'ormdef'"})
    assert problem["output"] == "'fedmro'"
    results = graded("code_o", problem, ["'fedmro'", "'fed' + ().__class__.__name__", "'fedmr'"])
    assert [r["correct"] for r in results] == [True, False, False]
    assert "banned" in results[1]["reason"]


def test_an_input_the_answer_format_cannot_carry_is_invalid():
    """code_i: the student answers with the teacher's input; one holding `</answer>` or ``` is
    refused at validation (before: valid, and the natural answer was cut); ``` is refused in any
    text shown inside a fence (red team round 15, A05)."""
    for given, why in (("'</answer>'", "answer format"), ("'a```b'", "inside a fence")):
        result = verify.validate("code_o", [{"program": "def f(s):\n    return len(s)",
                                            "input": given}])[0]
        assert not result["valid"] and why in result["reason"], result
    # the same input with nothing to cut is fine
    assert verify.validate("code_o", [{"program": "def f(s):\n    return len(s)",
                                       "input": "'</a>'"}])[0]["valid"]


def test_a_code_f_student_may_write_a_word_in_a_string():
    """code_f: the mapping appends 'mro'; the student's natural `return x + 'mro'` is correct."""
    inputs = [repr(w) for w in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")]
    problem = problem_of("code_f", {"program": "def f(x):\n    return x + 'm' + 'ro'",
                                    "inputs": inputs, "message": "append a word"})
    assert problem is not None
    assert graded("code_f", problem, ["def f(x):\n    return x + 'mro'"])[0]["correct"]


# --------------------------------------- one bit of per-process randomness decides nothing

@pytest.fixture
def six_zygotes(monkeypatch):
    """Three zygotes per family (as on a node with 3+ cores): grading spreads over zygotes that
    validation did not use, each with its own hash seed and addresses."""
    sandbox.shutdown()
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 3)
    yield
    sandbox.shutdown()


@pytest.mark.slow
def test_a_one_bit_program_never_pays_its_teacher_for_a_correct_answer(six_zygotes):
    """f depends on one bit of the hash seed: half such programs pass the two
    validation runs. Graded with the teacher's own input, an attempt is correct or VOID, never
    wrong; and a void problem pays its teacher nothing. (Before: 16 such programs gave ~8 valid
    problems whose own input was graded wrong on the zygotes whose bit differs.)"""
    # (hash and id are refused by the screen now; a set of two strings iterates in an order set by
    # the hash seed)
    programs = []
    for k in range(24):
        programs.append(f"def f(x):\n    return x + (next(iter({{'s{k}', 't{k}'}})) == 's{k}')")
    results = verify.validate("code_o", [{"program": p, "input": "10"} for p in programs])
    problems = []
    for p, r in zip(programs, results):
        if r["valid"]:
            kept = {k: v for k, v in r.items() if k not in ("valid", "reason")}
            problems.append(dict(kept, program=p, input="10"))
    assert len(problems) >= 4
    attempts = []
    for problem in problems:
        attempts += [dict(problem, answer="10")] * 12
    verdicts = verify.grade("code_i", attempts)
    wrong = [v for v in verdicts if not v["correct"] and not v.get("void")]
    assert not wrong, wrong
    # a zygote with the other bit was reached: some problems were voided, not all kept
    assert any(v.get("void") for v in verdicts)


def test_a_void_problem_pays_nobody():
    """train.py: a void attempt gets no reward; a proposal with one pays its teacher nothing and
    its match counts only the attempts that decided something."""
    gen = {"error": None}
    attempts = [dict(gen=gen, correct=False, void=True, answer="1", teacher="t", student="s"),
                dict(gen=gen, correct=False, void=False, answer="1", teacher="t", student="s")]
    proposals = [dict(gen=gen, valid=True, attempts=attempts[:1]),
                 dict(gen=gen, valid=True, attempts=attempts[1:])]
    for a, p in zip(attempts, proposals):
        a["proposal"] = p
    cfg = dict(train.config, teacher_reward="populora", teacher_reward_unsolved=0.0,
               draw_margin=0.05, baseline=True)
    train.assign_rewards(proposals, attempts, [], cfg, {}, {})
    assert attempts[0]["reward"] is None and attempts[1]["reward"] == -0.5
    assert proposals[0]["reward"] is None and proposals[0]["void"]
    assert proposals[1]["reward"] == 0.0 and not proposals[1]["void"]
    matches = [dict(teacher="t", student="s")]
    train.rate(matches, attempts, [{"name": "t"}, {"name": "s"}], cfg)
    assert matches[0]["solve_rate"] == 0.0


def test_code_f_is_graded_on_the_arguments_validation_used():
    """A hidden code_f input written as an expression is not evaluated again at grading: f gets
    the argument values stored with the problem (before: the text was evaluated again, so a
    `hash('k') % 2 + 100` input could differ from the one the gold was made from, A27). Here the
    stored arguments say 7 where the text says 50 + 50: only grading on them gives the gold 14.
    Such an input is also run as written, as stock Python passes it (red team round 29, A06-A08),
    where the teacher's own program no longer gives that gold: the problem is void, never wrong."""
    inputs = [str(n) for n in range(9)] + ["50 + 50"]
    problem = problem_of("code_f", {"program": "def f(x):\n    return x * 2", "inputs": inputs,
                                    "message": "double it"})
    assert problem["args"][-1] == plain(((100,), {}))
    problem["args"][-1] = plain(((7,), {}))
    problem["gold"][-1] = plain(14)
    results = graded("code_f", problem, ["def f(x):\n    return x * 2"] * 4)
    assert all(r["void"] and not r["correct"] for r in results), results
    assert all("own answer" in r["reason"] for r in results), results
    # the inputs all literals: graded on the stored arguments alone
    problem = problem_of("code_f", {"program": "def f(x):\n    return x * 2", "message": "double",
                                    "inputs": [str(n) for n in range(10)]})
    problem["args"][-1] = plain(((7,), {}))
    problem["gold"][-1] = plain(14)
    results = graded("code_f", problem, ["def f(x):\n    return x * 2"] * 4)
    assert all(r["correct"] for r in results), results


# ------------------------------------------------------------- parent CPU on hostile text

def test_a_hostile_response_parses_in_one_pass():
    """The response parser does not rescan the text per `<answer>` (before: `.*?</answer>` tried
    at each of them, quadratic: 1 MB took minutes). Run in a subprocess with a limit 100x what the
    linear parser needs, so a regression fails rather than hangs."""
    code = ("import verify\n"
            "hostile = '</think><answer>' * 65536\n"
            "print(verify.parse_student('code_o', hostile), "
            "verify.parse_teacher('code_f', hostile + '<message>' * 65536 + '</answer>'))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["None", "None"], done.stderr
    # the parser still finds what the regexes found
    assert verify.parse_student("code_o", "a</think>b</think> <answer>x</answer>y") == "x"
    assert verify.parse_student("code_o", "</think><answer>1</answer><answer>2</answer>") == "2"
    assert verify.parse_student("code_o", "<answer>x</answer></think><answer>") is None


def test_an_oversized_output_is_refused_before_it_is_decoded():
    """shown_output bounds the repr's length on the encoding as the child sent it, before any
    decoding: an output of 60,000 items whose last one is malformed is refused as too long (it
    never reaches the decoder, which would say "malformed")."""
    encoding = plain(list(range(60000)))
    encoding[1][-1] = ["int", "not hex"]
    with pytest.raises(verify.Invalid, match="longer than"):
        verify.shown_output(encoding, set())
    # a value just within the limit is shown
    assert verify.shown_output(plain(["x" * 1990]), set()) == repr(["x" * 1990])


# ------------------------------------------------ special tokens in student prompts

def test_model_text_in_a_prompt_never_becomes_a_special_token(tiny_dir):
    """A valid program with '<|endoftext|>' in a string: the prompt ids the engine generates from
    hold no special token id and decode back to the prompt's text (before: the end-of-text id was
    in them). Both engines get these ids (vLLM as TokensPrompt)."""
    base, tokenizer = population.load_base(tiny_dir)
    model, members = population.init_population(base, tokenizer, ENGINE_CFG, ["student"])
    engine = engines.make_engine("hf", tiny_dir, model, tokenizer, members, ENGINE_CFG)
    program = 'def f(x):\n    return x + len("<|endoftext|><|pad|>")'
    problem = problem_of("code_o", {"program": program, "input": "1"})
    prompt = verify.student_prompt("code_o", problem)
    out = engines.generate(engine, [(prompt, members[0]["name"])], 0.0, 1.0, 2, seed=0)[0]
    assert not set(out["prompt_ids"]) & set(tokenizer.all_special_ids)
    assert tokenizer.decode(out["prompt_ids"]) == prompt


def test_a_tokenizer_whose_merges_rebuild_a_special_token_is_spelled_out():
    """tinyworld's BPE learns merges from transcripts that end in "<|endoftext|>", so the merges
    rebuild its text into the special id even with split_special_tokens: text_ids spells such
    text out a character at a time, and the ids still decode to the text."""
    import tinyworld
    corpus = ["def f(x):\n    return x + 1\n<|endoftext|>", "print(f(2))<|endoftext|>"] * 40
    tokenizer = tinyworld.make_tokenizer(corpus, 400)
    text = 'return len("<|endoftext|>") + 1'
    plain = tokenizer([text], add_special_tokens=False, split_special_tokens=True)["input_ids"][0]
    assert set(plain) & set(tokenizer.all_special_ids)
    ids = population.text_ids(tokenizer, [text, "x = 1"])
    assert not set(ids[0] + ids[1]) & set(tokenizer.all_special_ids)
    assert tokenizer.decode(ids[0]) == text


def test_a_student_program_that_parses_but_does_not_compile_is_wrong_not_a_crash():
    """code_f: `y = *a` parses and fails in the compiler; grading said nothing and raised
    SyntaxError out of verify.grade, which ended a training run (found by the README's first
    command on a fresh clone)."""
    inputs = [repr(w) for w in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")]
    problem = problem_of("code_f", {"program": "def f(x):\n    return x + 'z'",
                                    "inputs": inputs, "message": "append z"})
    assert problem is not None
    verdict = graded("code_f", problem, ["def f(a):\n    y = *a\n    return y"])[0]
    assert not verdict["correct"] and "does not compile" in verdict["reason"], verdict


# ------------------------------ round 3: attribute names made at run time, and the child's timer

@pytest.fixture
def no_screen(monkeypatch):
    """The static screen off: programs run as they are (any bypass of it assumed found)."""
    monkeypatch.setattr(screen, "check", screen.nodes)


# functools.wraps(g) returns a partial of update_wrapper; a call's keywords replace the partial's,
# so anything but the decorator form reads and writes attributes named at run time
WRAPS = {
    "called_with_names": "import functools, statistics\ndef w():\n    pass\ndef f(x):\n"
                         "    n = 'glob' + 'als'\n    functools.wraps(statistics.mean)(w, (), "
                         "('__' + n + '__',))\n    return x",
    "its_func": "import functools\ndef f(x):\n    u = functools.wraps(f).func\n    return x",
    "bound": "from functools import wraps\ndef f(x):\n    d = wraps(f)\n    return x",
    "in_a_list": "import functools\ndef w():\n    pass\ndef f(x):\n"
                 "    return [functools.wraps(f)][0](w)",
    "on_a_class": "import functools\ndef f(x):\n    @functools.wraps(f)\n    class C:\n"
                  "        pass\n    return x",
}


@pytest.mark.parametrize("name", list(WRAPS))
def test_wraps_is_only_a_decorator(name):
    with pytest.raises(screen.Invalid, match="decorator"):
        screen.prepare_program(WRAPS[name])


def test_a_wraps_decorator_still_runs():
    program = ("from functools import wraps\ndef twice(g):\n    @wraps(g)\n"
               "    def inner(x):\n        return g(g(x))\n    return inner\n"
               "@twice\ndef f(x):\n    return x * 3")
    assert problem_of("code_o", {"program": program, "input": "2"})["output"] == "18"


# the functional API makes class attributes named by text made at run time (a dunder among them)
ENUM_SCREEN = {
    "subclass": "import enum\nclass B(enum.IntEnum):\n    pass\ndef f(x):\n"
                "    return B('X', {'__get' + 'attr__': x})",
    "deeper_and_later": "import enum\ndef f(x):\n    class C(B):\n        pass\n"
                        "    return C('X', names=[('a' + 'b', x)])\nclass B(enum.Flag):\n"
                        "    pass",
    # reads the module named by its text (sys.modules) into members
    "convert": "import enum\ndef f(x):\n    return enum.Enum._convert_('X', 'e' + 'num', str)",
    "create": "import enum\nclass B(enum.Enum):\n    pass\ndef f(x):\n"
              "    return B._create_('X', ['a'])",
}


@pytest.mark.parametrize("name", list(ENUM_SCREEN))
def test_the_enum_functional_api_is_refused_under_any_class_name(name):
    with pytest.raises(screen.Invalid):
        screen.prepare_program(ENUM_SCREEN[name])


# spellings the screen cannot see (the class as a value): the zygote refuses them at run time
ENUM_RUNTIME = {
    "partial": "import enum, functools\nclass B(enum.Enum):\n    pass\ndef f(x):\n"
               "    return len(functools.partial(B, 'X')({'__get' + 'attr__': x}))",
    "dunder_call": "import enum\nclass B(enum.Enum):\n    pass\ndef f(x):\n"
                   "    return len(B.__call__('X', {'a' + 'b': x}))",
    "alias": "import enum\ndef f(x):\n    e = [enum.Enum][0]\n    return len(e('X', 'a b'))",
}


@pytest.mark.parametrize("name", list(ENUM_RUNTIME))
def test_the_enum_functional_api_fails_at_run_time(name):
    result = verify.validate("code_o", [{"program": ENUM_RUNTIME[name], "input": "1"}])[0]
    assert not result["valid"] and "functional API" in result["reason"], result
    honest = ("import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\n"
              "def f(x):\n    return [Color(x).name, Color['BLUE'].value, len(Color)]")
    assert problem_of("code_o", {"program": honest, "input": "1"})["output"] == "['RED', 2, 2]"


# a module's mutable data changed by a method call: copy's table of reducers (copyreg's), whose
# state dicts copy.copy turns into setattr calls by name, and the rest of the kind
MUTABLE_STATE = {
    "dispatch_table": "import copy\nclass K:\n    pass\ndef red(k):\n"
                      "    return (K, (), (None, {'__repr' + '__': len}))\n"
                      "def f(x):\n    copy.dispatch_table.setdefault(K, red)\n"
                      "    return copy.copy(K())",
    "dispatch_table_update": "import copy\ndef f(x):\n    copy.dispatch_table.update({})\n"
                             "    return x",
    "imported": "from copy import dispatch_table\ndef f(x):\n    return len(dispatch_table)",
    "kwlist": "import keyword\ndef f(x):\n    keyword.kwlist.append(x)\n    return x",
}


@pytest.mark.parametrize("name", list(MUTABLE_STATE))
def test_a_modules_mutable_state_is_refused(name):
    with pytest.raises(screen.Invalid, match="banned attribute"):
        screen.prepare_program(MUTABLE_STATE[name])


def test_a_child_cannot_reach_its_timer_or_signal_functions(no_screen):
    """A program past the screen (here: screen off) that reached the zygote's globals finds the
    signal module's timer and signal functions disabled (they raise no audit event), in signal and
    in _signal; the harness armed its timer through a reference of its own."""
    program = ("import statistics\ndef f(x):\n"
               "    out = statistics.mean.__globals__['sys'].stdout.buffer\n"
               "    sig = type(out).write.__globals__['signal']\n"
               "    names = ['setitimer', 'alarm', 'signal', 'pthread_sigmask', 'pthread_kill']\n"
               "    zygote = type(out).write.__globals__\n"
               "    return [n for n in names if getattr(sig, n) or getattr(sig._signal, n)] + "
               "[n for n in zygote if 'itimer' in n.lower() and n != 'ITIMER_PROF']")
    # (and the harness's own reference is gone once it has armed the timer: red team round 4 G10)
    assert problem_of("code_o", {"program": program, "input": "1"})["output"] == "[]"
