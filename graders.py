"""
Scorers of evaluate.py: is a model's answer to a benchmark item right? (design §11,
docs/eval.md §3). (verify.grade is the other judge: the training verifier's verdict on an
attempt.)

Math: AZR's strip_string normalisation (Qwen2.5-Math's parser, without its word2number step), then
math-verify's verify(parse(\\boxed{gold}), parse(\\boxed{prediction})) in a spawned process pool
with a per-item timeout (score_math).
Code: programs run in verify.execute's sandbox under a small harness (_harness, whose source is the
job's code):
  - HumanEval+ / MBPP+ as EvalPlus (score_evalplus): expected outputs from one run of the canonical
    solution on the base and plus inputs; per-input limit max(min_time_limit, factor x reference
    time), a per-task cap; exact `==`, else np.allclose(rtol 1e-7, atol) for float outputs
    (atol 1e-6 when the task gives none); the special oracles (set equality, output not None,
    MBPP+ 164/295/581/558, HumanEval/32's |poly(x)| <= atol).
  - LiveCodeBench as lcb_runner (score_lcb): functional (LeetCode `class Solution` or a function,
    JSON arguments per line, `==` with tuples as lists) and stdin (the program reads the test's
    input; stripped output lines must match, or match as Decimals), every public and private
    test, a per-test limit, stop at the first failure.
The sandbox sends back, per input, a hash of a canonical text of the value (equal text <=> `==` on
plain data) and the numbers needed for tolerance rules; the comparison happens here. So the expected
outputs never enter the sandbox and always-equal objects compare unequal. The program can print a
result line of its own: it is schema-checked (a malformed one fails that program alone) and can
claim no more than hashes that must match. The per-input SIGALRM is the program's to switch off, so
the limits are also checked on the CPU seconds the kernel counted for each run (the whole base/plus
run against min(cap, summed per-input limits)).
Deviations: tolerance needs the numbers, shipped only for float outputs of up to 1000 numbers; LCB's
Decimal fallback only runs on outputs up to 4096 characters; the sandbox has no threads
(RLIMIT_NPROC = 0), so the LCB trick of deep recursion in a thread fails; LCB's mocked open(0) is
not provided; tests of one EvalPlus task run in pieces in parallel (the per-task cap is checked on
the summed times).
Not covered: a program that switches the alarm off can move time between the inputs of one run (each
input's own limit is the alarm's; only the run's total is the kernel's).
"""
import inspect
import itertools
import json
import math
import multiprocessing
import os
import re
import sys
import time

from tqdm import tqdm

MARK = "@@populora-eval@@"   # prefix of the harness's one result line in the sandbox's stdout

# ----------------------------------------------------------------------------- math

# AZR's unit words (from MathQA, via Qwen2.5-Math's parser); used as regexes, unescaped, as there
UNITS = ("east|degree|mph|kmph|ft|m sqaure| m east|sq m|deg|mile|q .|monkey|prime|ratio|"
         "profit of rs|rd|o|gm|p . m|lb|tile|per|dm|lt|gain|ab|way|west|a .|b .|c .|d .|e .|f .|"
         "g .|h .|t|a|h|no change|men|soldier|pie|bc|excess|st|inches|noon|percent|by|gal|kmh|c|"
         "acre|rise|a . m|th|π r 2|sq|mark|l|toy|coin|sq . m|gallon|° f|profit|minw|yr|women|feet|"
         "am|pm|hr|cu cm|square|v â € ™|are|rupee|rounds|cubic|cc|mtr|s|ohm|number|kmph|day|hour|"
         "minute|min|second|man|woman|sec|cube|mt|sq inch|mp|∏ cm ³|hectare|more|sec|unit|cu . m|"
         "cm 2|rs .|rs|kg|g|month|km|m|cm|mm|apple|liter|loss|yard|pure|year|increase|decrease|d|"
         "less|Surface|litre|pi sq m|s .|metre|meter|inch").split("|")
UNITS += [u + "s" for u in UNITS]
# (a literal part of the unit, its rule): the part is searched first at C speed (a unit whose text
# is absent cannot match), so a long answer is not walked 800 times by the regex engine
UNIT_RULES = [(max(u.split("."), key=len), re.compile(r"(^|\W)" + u + r"($|\W)")) for u in UNITS]


def _fix_fracs(s):
    """\\frac12 -> \\frac{1}{2}, \\frac1{x} -> \\frac{1}{x} (AZR's _fix_fracs)."""
    parts = s.split("\\frac")
    out = parts[0]
    for p in parts[1:]:
        out += "\\frac"
        if p[:1] == "{":
            out += p
        elif len(p) < 2:
            return s
        elif p[1] != "{":
            out += "{" + p[0] + "}{" + p[1] + "}" + p[2:]
        else:
            out += "{" + p[0] + "}" + p[1:]
    return out


def sub_braced(s, opening, repl):
    """What re.sub(re.escape(opening) + "(.*?)}", lambda m: repl(m[1]), s) gives on a string
    without newlines, in one pass: the regex scanned to the end again from every opening left
    unclosed (quadratic: "\\text{a" x 7,000 took 4.6 s); once no "}" follows an opening, none
    follows the later ones either."""
    out, i = [], 0
    while True:
        start = s.find(opening, i)
        if start < 0:
            break
        end = s.find("}", start + len(opening))
        if end < 0:
            break
        out += [s[i:start], repl(s[start + len(opening):end])]
        i = end + 1
    return "".join(out) + s[i:]


def cut_trailing_text(s):
    """What AZR's re.sub of a trailing \\text{...} (the regex "\\\\text{.*?}$") gives on a string
    without newlines: when the string ends in "}", the match starts at the first \\text{ (its lazy
    .*? stretches to that final "}"). The regex tried every \\text{ up to the end: quadratic."""
    start = s.find("\\text{")
    if start < 0 or not s.endswith("}"):
        return s
    return s[:start]


# AZR's (\d+)\.0*([^\d]) and (\d+)\.0*$ ("2.00" -> "2"), tried only where a run of digits starts
# and without backtracking: the same matches (a match inside a run would also match from the
# run's start), but the originals rescanned the rest of a run from each of its digits (quadratic:
# 50,000 digits took 40 s)
DECIMAL_ZEROS = re.compile(r"(?<!\d)(\d++)\.0*+([^\d])")
DECIMAL_ZEROS_END = re.compile(r"(?<!\d)(\d++)\.0*+$")


def strip_string(s, skip_unit=False):
    """AZR's answer normalisation (Qwen2.5-Math parser.strip_string), step for step, without
    word2number; linear in the answer (a degenerate one runs to math_tokens)."""
    s = str(s).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = sub_braced(s, "\\begin{array}{", lambda inner: "\\begin{pmatrix}")
    s = s.replace("\\end{array}", "\\end{pmatrix}").replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    t = cut_trailing_text(s).strip()   # a trailing \text{unit}
    if t:
        s = t
    if not skip_unit:
        for _ in range(2):
            for part, rule in UNIT_RULES:
                if part not in s:
                    continue
                t = rule.sub(r"\1\2", s)
                if t:
                    s = t
    # degrees, dollars, inline-math delimiters
    for old in ("^{\\circ}", "^\\circ", "\\$", "$", "\\(", "\\)"):
        s = s.replace(old, "")
    s = sub_braced(s, "\\text{", lambda inner: inner)
    for key in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"):
        s = s.replace(key, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "").replace(" .", " 0.").replace("{.", "{0.")
    # (AZR's "strip {}/()/[] around an alphanumeric string" needs isalnum() of the bracketed text:
    # never true)
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = sub_braced(s, "\\mbox{", lambda inner: "")
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = DECIMAL_ZEROS.sub(r"\1\2", s)
    s = DECIMAL_ZEROS_END.sub(r"\1", s)
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:   # "k = 3" -> "3"
        s = s.split("=")[1]
    s = _fix_fracs(re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", ""))
    if len(s.split("/")) == 2:   # a/b -> \frac{a}{b} for integers
        a, b = s.split("/")
        try:
            if "sqrt" not in a:
                a = int(a)
            if "sqrt" not in b:
                b = int(b)
            if s == f"{a}/{b}":
                s = f"\\frac{{{a}}}{{{b}}}"
        except ValueError:
            pass
    return s


def _math_pair(pair):
    """One (gold, prediction) comparison in a worker process (math-verify's timeouts use SIGALRM,
    which only works in a main thread): AZR's verify(parse(\\boxed{gold}), parse(\\boxed{pred}))."""
    gold, pred, timeout = pair
    # math-verify's timeouts go to signal.alarm: whole seconds
    timeout = max(1, math.ceil(timeout))
    if not pred or not gold:
        return False
    try:
        from math_verify import parse, verify
        g = parse("\\boxed{" + gold + "}", parsing_timeout=timeout)
        p = parse("\\boxed{" + pred + "}", parsing_timeout=timeout)
        return bool(g and p and verify(g, p, timeout_seconds=timeout))
    except Exception:
        return False


def score_math(pairs, timeout, workers=0, desc="math"):
    """[(gold, pred)] (both normalised) -> [bool], in a spawned process pool (spawn: no fork of a
    process that holds vLLM/torch threads). A worker stuck past every timeout is killed with the
    pool: its items score wrong."""
    if not pairs:
        return []
    workers = min(workers or os.cpu_count() or 1, len(pairs))
    main = getattr(sys.modules["__main__"], "__file__", None)
    # spawn re-imports __main__ by path (not `python -`)
    if workers == 1 or main and not os.path.isfile(main):
        results = []
        for gold, prediction in tqdm(pairs, desc=desc, leave=False, mininterval=2):
            results.append(_math_pair((gold, prediction, timeout)))
        return results
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        jobs = [pool.apply_async(_math_pair, ((g, p, timeout),)) for g, p in pairs]
        deadline = time.monotonic() + 60 + 4 * timeout * len(pairs) / workers
        results = []
        for job in tqdm(jobs, desc=desc, leave=False, mininterval=2):
            try:
                results.append(job.get(max(0.0, deadline - time.monotonic())))
            except multiprocessing.TimeoutError:
                results.append(False)
        pool.terminate()
    return results


# ----------------------------------------------------------------------------- code
# _plain ... _harness below run inside the sandbox (their source is the job's code, HARNESS); _canon
# and _emit also run here, on reference values and oracle answers, so both sides hash the same text.


def _plain(x):
    """True when repr(x) already is the canonical text: x holds only list/tuple/str/None, ints below
    10**18 and non-integral, non-nan floats. Checked level by level with C-speed scans (huge
    outputs: MBPP+ 255)."""
    level, ok = [x], {str, int, float, type(None), list, tuple}
    while level:
        types = set(map(type, level))
        if not types <= ok:
            return False
        if int in types:
            ints = [e for e in level if type(e) is int]
            if not -10**18 < min(ints) <= max(ints) < 10**18:
                return False
        if float in types:
            floats = [f for f in level if type(f) is float]
            if not all(f == f and not f.is_integer() for f in floats):
                return False
        if not types & {list, tuple}:
            return True
        containers = level
        if not types <= {list, tuple}:
            containers = [c for c in level if type(c) in (list, tuple)]
        level = list(itertools.chain.from_iterable(containers))
    return True


def _write(x, put):
    """Write the canonical text of x through put(str): equal text <=> `==` on plain data (True ~ 1,
    2.0 ~ 2, set and dict order ignored, list != tuple); repr's format where repr is canonical (fast
    path, in chunks, for the 1 GB outputs of MBPP+ 255); other types -> <type>repr, equal to no
    plain value."""
    if isinstance(x, list):
        put("[")
        _write_items(x, put)
        put("]")
    elif isinstance(x, tuple):
        put("(")
        _write_items(x, put)
        if len(x) == 1:
            put(",")
        put(")")
    elif x is None:
        put("None")
    elif isinstance(x, (bool, int)):
        if -10**18 < x < 10**18:
            put(str(int(x)))
        else:
            # hex past 18 digits: str() of a huge int is quadratic in CPython 3.11
            put(format(int(x), "#x"))
    elif isinstance(x, float):
        if x != x:
            put("nan")
        elif x.is_integer():
            _write(int(x), put)
        else:
            put(float.__repr__(x))
    elif isinstance(x, complex):
        if x.imag == 0:
            _write(x.real, put)
        else:
            put(f"c({_canon(x.real)}, {_canon(x.imag)})")
    elif isinstance(x, str):
        put(str.__repr__(x))
    elif isinstance(x, bytes):
        put(bytes.__repr__(x))
    elif isinstance(x, (set, frozenset)):
        put("{" + ", ".join(sorted(_canon(e) for e in x)) + "}")
    elif isinstance(x, dict):
        put("d{" + ", ".join(sorted(_canon(k) + ": " + _canon(v) for k, v in x.items())) + "}")
    elif type(x).__module__ == "numpy" and hasattr(x, "tolist"):
        _write(x.tolist(), put)
    else:
        put(f"<{type(x).__qualname__}>{x!r}")


def _write_items(x, put):
    """The items of a list or tuple, comma-separated, in chunks of 4096: a chunk of plain values is
    one repr."""
    for k in range(0, len(x), 4096):
        chunk = list(x[k:k + 4096])
        if k:
            put(", ")
        if _plain(chunk):
            put(repr(chunk)[1:-1])
            continue
        for j, e in enumerate(chunk):
            if j:
                put(", ")
            _write(e, put)


def _canon(x):
    parts = []
    _write(x, parts.append)
    return "".join(parts)


def _numeric(x, limit=1000):
    """(shape text, float leaves) of a float or a list/tuple nest of numbers that holds a float, for
    EvalPlus's np.allclose rule; None otherwise or past `limit` leaves."""
    leaves, has_float = [], []

    def walk(v):
        if isinstance(v, bool):
            raise TypeError
        if isinstance(v, (int, float)):
            has_float.append(isinstance(v, float))
            leaves.append(float(v))
            return "n"
        if isinstance(v, (list, tuple)) and len(leaves) + len(v) <= limit:
            return type(v).__name__ + "(" + ",".join([walk(e) for e in v]) + ")"
        raise TypeError
    try:
        # EvalPlus asserts type(out) == type(expected) first
        shape = type(x).__name__ + ":" + walk(x)
    except (TypeError, OverflowError, RecursionError):
        return None
    if not (any(has_float) or shape.endswith(":n")) or len(leaves) > limit:
        return None
    return [shape, leaves]


def _emit(v):
    """What the parent needs of one value: a hash of its canonical text, numbers for EvalPlus's
    tolerance."""
    import hashlib
    h = hashlib.sha256()
    _write(v, lambda s: h.update(s.encode("utf-8", "surrogatepass")))
    out = {"h": h.hexdigest()[:32]}
    if isinstance(v, (int, float, list, tuple)):
        numbers = _numeric(v)
        if numbers:
            out["n"] = numbers
    all_floats = isinstance(v, (list, tuple)) and v and all(isinstance(e, float) for e in v)
    if isinstance(v, float) or all_floats:
        out["f"] = 1   # EvalPlus's is_floats: atol defaults to 1e-6 against this expected value
    return out


def _lines(text):
    """LCB's stdout view: the stripped lines of the stripped text, hashed; the lines themselves up
    to 4096 chars."""
    lines = [line.strip() for line in text.strip().split("\n")]
    joined = "\n".join(lines)
    out = _emit(joined)
    out["lines"] = None
    if len(joined) <= 4096:
        out["lines"] = lines
    return out


def _as_compared(v, mode):
    """A program's output as its mode compares it: a set (EvalPlus's set oracle), "is not None"
    (its not-None oracle; a program's own bool stands), a tuple as a list (LCB)."""
    if mode == "set":
        return set(v)
    # EvalPlus: outputs that only need to be non-None
    if mode in ("notnone", "notnone_ref"):
        if mode == "notnone" and isinstance(v, bool):
            return v
        return v is not None
    if mode == "lcb" and isinstance(v, tuple):
        return list(v)
    return v


def _harness():
    """Sandbox side: job JSON on stdin -> run the program on every input/test under a per-test
    SIGALRM limit, stop at the first error or overrun -> one MARK line: {"outs": [emitted], "times":
    [s], "error", "wall"}."""
    import io, json, math, signal, sys, time   # noqa: E401 (runs as a standalone script)
    sys.set_int_max_str_digits(0)
    start, job = time.perf_counter(), json.loads(sys.stdin.read())
    # CPU seconds per input (the reference times, EvalPlus's per-task cap): wall time would also
    # count the other sandboxed runs sharing the cores; the per-input limit itself is wall-clock
    # (SIGALRM), as in EvalPlus/LCB
    dumps, clock, timer, real_out = json.dumps, time.process_time, signal.setitimer, sys.stdout

    class Limit(BaseException):
        pass

    def ring(*_):
        raise Limit()

    class Null:
        def write(self, s):
            return len(s)

        def flush(self):
            pass
    signal.signal(signal.SIGALRM, ring)
    res, i, mode = {"outs": [], "times": [], "error": ""}, 0, job["mode"]
    if job["kind"] == "stdin":
        cases = job["tests"]
    elif mode == "lcb":
        cases = [[json.loads(line) for line in t.split("\n")] for t in job["tests"]]
    else:
        cases = eval(job["inputs"], {"inf": math.inf, "nan": math.nan})
    try:
        sys.stdout = Null()   # the program's prints are not the result channel
        code = compile(job["code"], "<solution>", "exec")
        if job["kind"] == "call":
            namespace = {}
            if mode == "lcb":
                namespace = {"__name__": "tmp_sol"}
            exec(code, namespace)
            if "class Solution" in job["code"]:
                fn = getattr(namespace["Solution"](), job["entry"])
            else:
                fn = namespace[job["entry"]]
        for i, case in enumerate(cases):
            timer(signal.ITIMER_REAL, job["limits"][i])
            t0 = clock()
            try:
                if job["kind"] == "call":
                    v = fn(*case)
                else:
                    sys.stdout = io.StringIO()
                    sys.stdin = io.TextIOWrapper(io.BytesIO(case.encode()))
                    try:
                        exec(code, {"__name__": "__main__"})
                    except SystemExit:
                        pass
                    v = sys.stdout.getvalue()
            finally:
                timer(signal.ITIMER_REAL, 0)
                sys.stdout = Null()
            res["times"].append(clock() - t0)
            v = _as_compared(v, mode)
            if job["kind"] == "stdin":
                res["outs"].append(_lines(v))
            else:
                res["outs"].append(_emit(v))
    except Limit:
        res["error"] = f"time limit on test {i + job.get('first', 0)}"
    except BaseException as e:
        res["error"] = f"test {i + job.get('first', 0)}: {type(e).__name__}: {e}"[:300]
    res["wall"] = time.perf_counter() - start
    real_out.write(MARK + dumps(res) + "\n")


HARNESS_FUNCTIONS = (_plain, _write, _write_items, _canon, _numeric, _emit, _lines, _as_compared,
                     _harness)
HARNESS = "\n\n".join([f"import itertools\nMARK = {MARK!r}"]
                      + [inspect.getsource(f) for f in HARNESS_FUNCTIONS])
HARNESS += "\n_harness()\n"
# lcb_runner's import_string, prepended to every program
LCB_MODULES = ("string re datetime collections heapq bisect copy math random statistics itertools "
               "functools operator io sys json").split()
LCB_STAR_IMPORTS = LCB_MODULES + ["builtins", "typing"]
LCB_PRELUDE = "".join(f"from {module} import *\n" for module in LCB_STAR_IMPORTS)
LCB_PRELUDE += "import " + ", ".join(LCB_MODULES) + "\nsys.setrecursionlimit(50000)\n"


def run_jobs(payloads, timeouts, desc, memory_mb):
    """Harness runs through verify.execute, in chunks for the progress bar -> [result dict]
    ({"outs", "times", "error", "wall"} as _harness writes it, checked, plus "cpu": the run's CPU
    seconds as the kernel counted them). The program can print a MARK line of its own: a line that
    is not exactly what _harness writes fails that run alone; one that is cannot say more than the
    outputs' hashes, which still have to match."""
    import verify
    jobs = [{"code": HARNESS, "stdin": json.dumps(p), "timeout": t, "memory_mb": memory_mb}
            for p, t in zip(payloads, timeouts)]
    # long ones first
    order = sorted(range(len(jobs)), key=lambda i: (-timeouts[i], -len(jobs[i]["stdin"])))
    results, step = [None] * len(jobs), 4096   # big chunks: a chunk waits for its slowest job
    for k in tqdm(range(0, len(jobs), step), desc=desc, leave=False, disable=len(jobs) <= step):
        for i, r in zip(order[k:k + step], verify.execute([jobs[i] for i in order[k:k + step]])):
            line = next((x for x in reversed(r["stdout"].split("\n")) if x.startswith(MARK)), None)
            try:
                results[i] = _checked(json.loads(line[len(MARK):]))
            # whatever the program put in the line fails its own run, never the whole scoring
            except Exception:
                error = "no result (killed or crashed)"
                if line:
                    error = "malformed result"
                error = r.get("error") or error
                results[i] = {"outs": [], "times": [], "error": error, "wall": 0.0}
            results[i]["cpu"] = r.get("cpu_s", 0.0)
    return results


def _checked(result):
    """A harness result as parsed from the program's stdout -> itself, if it has exactly _harness's
    shape and types (sizes capped); else ValueError. Nothing in it is trusted beyond that (see
    run_jobs). Every number is a float, as _harness writes them: an int from the line could be past
    float's range, and arithmetic mixing it with a float raises OverflowError."""
    def number(x):
        return type(x) is float and math.isfinite(x)
    if type(result) is not dict or set(result) != {"outs", "times", "error", "wall"}:
        raise ValueError("not a harness result")
    if type(result["outs"]) is not list or type(result["times"]) is not list:
        raise ValueError("not a harness result")
    if type(result["error"]) is not str:
        raise ValueError("not a harness result")
    if not number(result["wall"]) or not all(number(t) for t in result["times"]):
        raise ValueError("not a harness result")
    for out in result["outs"]:
        if type(out) is not dict or type(out.get("h")) is not str:
            raise ValueError("not an emitted value")
        if not set(out) <= {"h", "n", "f", "lines"}:
            raise ValueError("not an emitted value")
        n = out.get("n")
        if n is None:
            pass
        elif type(n) is not list or len(n) != 2 or type(n[0]) is not str or type(n[1]) is not list:
            raise ValueError("not an emitted value")
        # _numeric writes float(v) for every leaf (inf and nan included)
        elif len(n[1]) > 1000 or not all(type(x) is float for x in n[1]):
            raise ValueError("not an emitted value")
        # one leaf per "n" of the shape (after the type name: list(n,tuple(n,n)), ...)
        elif len(n[1]) != n[0].partition(":")[2].count("n"):
            raise ValueError("not an emitted value")
        lines = out.get("lines")
        if lines is not None and not (type(lines) is list and all(type(x) is str for x in lines)):
            raise ValueError("not an emitted value")
    result["error"] = result["error"][:300]
    return result


# EvalPlus's special oracles (evalplus/eval/_special_oracle.py facts): set equality, "output not
# None", and Mbpp/164, 295, 581, 558, HumanEval/32 below
MBPP_SET = {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
            "larg_nnum", "intersection_array", "find_dissimilar", "Diff"}
MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}


def _value(out):
    # a scalar number (KeyError/TypeError otherwise: not a number, wrong answer)
    return out["n"][1][0]


def _same(name, item, args, exp, out, atol):
    """EvalPlus's verdict on one input, from the emitted expected and actual values."""
    ep, exact = item["entry_point"], out["h"] == exp["h"]
    try:
        if name == "mbppplus" and ep == "are_equivalent":    # Mbpp/164: EvalPlus accepts any output
            return True
        if name == "mbppplus" and ep == "sum_div":           # Mbpp/295: or 0
            return exact or out["h"] == _emit(0)["h"]
        # Mbpp/581: or the slant-height reading, within atol
        if name == "mbppplus" and ep == "surface_Area":
            a, h = args
            slant_reading = round(a * a + 2 * a * math.sqrt((a / 2) ** 2 + h * h))
            return exact or abs(_value(out) - slant_reading) <= atol
        # Mbpp/558: or zero-padded digit distance
        if name == "mbppplus" and ep == "digit_distance_nums":
            x, y = str(args[0]), str(args[1])
            width = max(len(x), len(y))
            distance = sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(width), y.zfill(width)))
            return exact or out["h"] == _emit(distance)["h"]
        # HumanEval/32: any root, |poly(x)| <= atol
        if name == "humanevalplus" and ep == "find_zero":
            return abs(sum(c * math.pow(_value(out), i) for i, c in enumerate(args[0]))) <= atol
        return exact or _close(exp, out, atol)
    # a value the program chose: a wrong answer, not the end of the benchmark's scoring
    except (TypeError, ValueError, ArithmeticError, IndexError, KeyError):
        return False


def _close(exp, out, atol):
    """EvalPlus's np.allclose(out, exp, rtol=1e-7, atol) on the emitted numbers, for float
    outputs."""
    if not atol and exp.get("f"):
        atol = 1e-6
    if not atol or not exp.get("n") or not out.get("n") or exp["n"][0] != out["n"][0]:
        return False
    # the same shape and as many leaves (zip would stop at the shorter)
    if len(out["n"][1]) != len(exp["n"][1]):
        return False
    for a, b in zip(out["n"][1], exp["n"][1]):
        if not (a == b or abs(a - b) <= atol + 1e-7 * abs(b)):
            return False
    return True


def _pieces(n, times=None, size=256, budget=2.0):
    """Cut inputs 0..n into consecutive (lo, hi) runs of at most `size` inputs and `budget`
    reference seconds, so one slow task (MBPP+ 599: ~40 s over 88 inputs) spreads over the sandbox
    pool (a job costs ~10 ms)."""
    cuts, lo, spent = [], 0, 0.0
    for i in range(n):
        if i > lo and (i - lo >= size or times and spent + times[i] > budget):
            cuts.append((lo, i))
            lo, spent = i, 0.0
        if times:
            spent += times[i]
    return cuts + [(lo, n)]


def _grouped(keys, results):
    """Join the pieces of each run (in order, up to the first piece with an error) -> {key: run}."""
    runs = {}
    for key, r in zip(keys, results):
        run = runs.setdefault(key, {"outs": [], "times": [], "error": "", "overhead": 0.0,
                                    "cpu": 0.0})
        # the kernel's count, every piece (a program cannot fake it)
        run["cpu"] += r["cpu"]
        if not run["error"]:
            run["outs"] += r["outs"]
            run["times"] += r["times"]
            run["error"] = r["error"]
            # decoding inputs, hashing outputs
            run["overhead"] += max(0.0, r.get("wall", 0.0) - sum(r["times"]))
    return runs


def _evalplus_payload(name, item, code, part, lo, hi, limits, reference):
    """The harness job for inputs lo..hi of one part ("base" or "plus") of an EvalPlus item."""
    entry = item["entry_point"]
    mode = ""
    if name == "mbppplus" and entry in MBPP_SET:
        mode = "set"
    if name == "mbppplus" and entry in MBPP_NOT_NONE:
        if reference:
            mode = "notnone_ref"
        else:
            mode = "notnone"
    return {"kind": "call", "mode": mode, "code": code, "entry": entry,
            "inputs": repr(item[part + "_input"][lo:hi]), "limits": limits, "first": lo}


def _input_limits(ref, cfg):
    """EvalPlus's per-input limits: max(min_time_limit, factor x reference time), seconds."""
    limits = []
    for seconds in ref["times"]:
        limits.append(max(cfg["min_time_limit"], cfg["time_limit_factor"] * seconds))
    return limits


def _evalplus_failure(name, item, part, ref, run, cfg):
    """Why one program's run of one part fails EvalPlus's rules; "" when it passes."""
    args = item[part + "_input"]
    limits = _input_limits(ref, cfg)
    slack = 1.0 + 2 * max(0.0, ref["cpu"] - sum(ref["times"]))
    if ref["error"] or len(ref["outs"]) != len(args):
        return f"reference run failed: {ref['error']}"
    if run["error"] or len(run["outs"]) != len(args):
        return run["error"] or "incomplete run"
    if run["cpu"] > min(cfg["task_timeout"], sum(limits)) + slack:
        # EvalPlus caps a whole base/plus run; the per-input SIGALRM is the program's to
        # switch off, so the limits are checked on the CPU time the kernel counted (the
        # reference's overhead and a second allowed on top)
        return f"{run['cpu']:.1f} s of CPU, over the time limits"
    for i, arg in enumerate(args):
        if not _same(name, item, arg, ref["outs"][i], run["outs"][i], item["atol"]):
            return f"wrong output on input {i}"
    return ""


def score_evalplus(name, items, programs, cfg):
    """[(item index, program)] -> [{"correct" (base and plus pass), "base", "reason"}]. Expected
    outputs and reference times come from running each canonical solution once on its base and plus
    inputs."""
    parts = ("base", "plus")
    keys, payloads = [], []
    for k, item in enumerate(items):
        for part in parts:
            for lo, hi in _pieces(len(item[part + "_input"])):
                keys.append((k, part))
                no_limits = [0] * (hi - lo)
                payloads.append(_evalplus_payload(name, item, item["canonical"], part, lo, hi,
                                                  no_limits, True))
    timeouts = [cfg["reference_timeout"]] * len(payloads)
    results = run_jobs(payloads, timeouts, f"{name} reference", cfg["memory_mb"])
    refs = _grouped(keys, results)
    keys, payloads, timeouts = [], [], []
    for n, (k, code) in enumerate(programs):
        for part in parts:
            ref = refs[(k, part)]
            if ref["error"]:
                continue
            limits = _input_limits(ref, cfg)
            for lo, hi in _pieces(len(limits), ref["times"], size=1024):
                keys.append((n, part))
                payloads.append(_evalplus_payload(name, items[k], code, part, lo, hi,
                                                  limits[lo:hi], False))
                cap = min(cfg["task_timeout"], sum(limits[lo:hi]))
                timeouts.append(cap + 2 + 2 * ref["overhead"])
    runs = _grouped(keys, run_jobs(payloads, timeouts, f"{name} tests", cfg["memory_mb"]))
    verdicts = []
    for n, (k, code) in enumerate(programs):
        passed, reason = [], ""
        for part in parts:
            why = _evalplus_failure(name, items[k], part, refs[(k, part)], runs.get((n, part)), cfg)
            passed.append(not why)
            # the first failing part gives the reason
            if why and not reason:
                reason = f"{part}: {why}"
        verdicts.append({"correct": all(passed), "base": passed[0], "reason": reason})
    return verdicts


def _lcb_same(exp, out, stdin):
    """LCB: functional outputs ==; stdin outputs line by line after strip, a line may also match as
    Decimals."""
    from decimal import Decimal, InvalidOperation
    if out["h"] == exp["h"]:
        return True
    if not stdin or out.get("lines") is None or exp.get("lines") is None:
        return False
    if len(out["lines"]) != len(exp["lines"]):
        return False
    try:
        for a, b in zip(out["lines"], exp["lines"]):
            if a == b:
                continue
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        return True
    except InvalidOperation:
        return False


def _lcb_payload(item, code, cfg):
    """The harness job running every test of an LCB item: functional (fn_name) or stdin."""
    if item["fn_name"]:
        kind, mode = "call", "lcb"
    else:
        kind, mode = "stdin", ""
    return {"kind": kind, "mode": mode, "code": LCB_PRELUDE + code, "entry": item["fn_name"],
            "tests": [test["input"] for test in item["tests"]],
            "limits": [cfg["lcb_timeout"]] * len(item["tests"])}


def _lcb_failure(item, run, cfg):
    """Why one program's run fails LCB's rules; "" when it passes."""
    if run["error"]:
        return run["error"]
    if len(run["outs"]) != len(item["tests"]):
        return "incomplete run"
    # the alarm is switchable
    if run["cpu"] > cfg["lcb_timeout"] * len(item["tests"]) + 1.0:
        return f"{run['cpu']:.1f} s of CPU, over the time limits"
    for i, test in enumerate(item["tests"]):
        try:
            if item["fn_name"]:
                exp = _emit(json.loads(test["output"]))
            else:
                exp = _lines(test["output"])
        except ValueError:
            exp = {"h": None}
        if not _lcb_same(exp, run["outs"][i], not item["fn_name"]):
            return f"wrong output on test {i}"
    return ""


def score_lcb(items, programs, cfg):
    """[(item index, program)] -> [{"correct", "reason"}]: every public + private test within
    lcb_timeout each."""
    payloads, timeouts = [], []
    for k, code in programs:
        payloads.append(_lcb_payload(items[k], code, cfg))
        # LCB's global per-problem limit
        timeouts.append((cfg["lcb_timeout"] + 1) * len(items[k]["tests"]) + 5)
    runs = []
    if programs:
        runs = run_jobs(payloads, timeouts, "livecodebench tests", cfg["memory_mb"])
    verdicts = []
    for (k, code), run in zip(programs, runs):
        reason = _lcb_failure(items[k], run, cfg)
        verdicts.append({"correct": not reason, "reason": reason})
    return verdicts
