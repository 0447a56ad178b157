"""
Greedy pass@1 of every member of a PopuLoRA checkpoint, the base model and a baseline run on the paper's ten
benchmarks (SPEC §11), with AZR's evaluation protocol (reference/eval.md); `report` draws the training dynamics.

  python evaluate.py --ckpt out/step_000200 --benchmarks all --data_dir ../shared/benchmarks [--limit N]
  python evaluate.py --ckpt out/step_000200 --baseline_ckpt out-base/step_000200 --data_dir ../shared/benchmarks
  python evaluate.py report out [out-base]           # PNG figures + report.md from metrics.jsonl (report.py)
  python evaluate.py selfcheck --data_dir ../shared/benchmarks   # gold answers / canonical solutions, one JSON line

Code: HumanEval+ and MBPP+ (EvalPlus's prompt, 768 new tokens, expected outputs from the canonical solution on
base + plus inputs, per-input limit max(min_time_limit, factor x reference time), atol / float rule and special
oracles as EvalPlus; "+" = base and plus pass), LiveCodeBench release_v5 (AZR's <think> prompt, public + private
tests, functional and stdin, per-test limit). Math: AIME 24/25, AMC 23, MATH-500, Minerva, OlympiadBench (AZR's
six) and GSM8K (PopuLoRA's seventh): AZR's <think>/<answer> prompt, its answer extraction and strip_string
normalisation, then math-verify on \\boxed{} wrapped strings in a process pool with a per-item timeout.
All members, the base (a zero-initialised LoRA slot, B = 0, which is exactly the base) and the baseline's adapter
share one engine: one batched population.generate call per benchmark. Programs run in verify.execute's sandbox;
the parent compares their outputs (hashes of a canonical text of each value), so the reference outputs never
enter the sandbox and a program cannot print its own verdict.
Deviations: (1) the math prompt ends in "Assistant: <think>" like the training prompts; the azr_boxed hint
wording is ours; (2) AZR's word-to-number step (word2number) is not applied; (3) EvalPlus's tree-sitter
sanitiser is replaced by an ast pass keeping imports, defs, classes and assignments; (4) tolerance comparisons
need the value, which is only shipped for float outputs of up to 1000 numbers; (5) LiveCodeBench's Decimal
fallback only runs on outputs of at most 4096 characters (longer ones must match line by line).
Not covered: pass@k > 1, LiveCodeBench date windows, EvalPlus's base-model (no chat template) prompt.
"""
import argparse
import base64
import hashlib
import inspect
import itertools
import json
import math
import multiprocessing
import os
import re
import sys
import time
import zlib

from tqdm import tqdm

# -----------------------------------------------------------------------------
config = dict(
    ckpt="",                    # checkpoint folder of the population run (out/step_000200)
    baseline_ckpt="",           # checkpoint of the single-agent baseline run (same base model and LoRA shape)
    benchmarks="all",           # comma-separated names, or all / code / math
    data_dir="",                # folder with the benchmark JSONL files; "" = download (needs network + datasets)
    limit=0,                    # first N items of each benchmark; 0 = all
    out="",                     # folder for eval.json / eval.md; "" = the checkpoint folder
    model="",                   # base model override; "" = the one recorded in the checkpoint
    engine="auto",              # vllm | hf | auto
    device="",                  # "" = cuda when available, else cpu
    dtype="",                   # "" = bfloat16 on GPU, float32 on CPU
    max_model_len=32768,        # tokens, prompt + completion (AZR's math eval uses 32768)
    gpu_memory_utilization=0.85,  # share of GPU memory vLLM may take
    math_tokens=16000,          # new tokens per math answer (AZR)
    lcb_tokens=8096,            # new tokens per LiveCodeBench answer (AZR)
    evalplus_tokens=768,        # new tokens per HumanEval+/MBPP+ answer (EvalPlus)
    math_prompt="azr_boxed",    # azr | azr_boxed (AZR used azr_boxed for AZR-Coder-7B)
    math_timeout=3.0,           # seconds per math-verify comparison (AZR: 3); a timeout scores wrong
    min_time_limit=10.0,        # EvalPlus per-input limit floor, seconds (AZR: --min-time-limit 10)
    time_limit_factor=8.0,      # EvalPlus per-input limit = factor x reference time (AZR: 8)
    task_timeout=60.0,          # EvalPlus cap on one base/plus run, seconds (EVALPLUS_TIMEOUT_PER_TASK)
    lcb_timeout=60.0,           # LiveCodeBench limit per test, seconds (AZR: --timeout 60)
    reference_timeout=300.0,    # seconds for computing a task's expected outputs from its canonical solution
    workers=0,                  # math grading processes; 0 = cpu count
    seed=2,                     # generation seed (greedy, so only ties care)
)

CODE = ("humanevalplus", "mbppplus", "livecodebench")
MATH6 = ("aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench")  # AZR's Math Avg
MATH7 = MATH6 + ("gsm8k",)                                                        # PopuLoRA adds GSM8K
BENCHMARKS = CODE + MATH7
# where a benchmark comes from when there is no --data_dir: (HF dataset id, config, split); EvalPlus's own
# release files for HumanEval+/MBPP+ (their HF copies lack the plus inputs); LCB's raw files (release_v5 = 1..5)
SOURCES = {"aime24": ("HuggingFaceH4/aime_2024", None, "train"), "aime25": ("math-ai/aime25", None, "test"),
           "amc23": ("math-ai/amc23", None, "test"), "math500": ("HuggingFaceH4/MATH-500", None, "test"),
           "minerva_math": ("math-ai/minervamath", None, "test"), "gsm8k": ("openai/gsm8k", "main", "test"),
           "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
           "humanevalplus": "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/HumanEvalPlus.jsonl.gz",
           "mbppplus": "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus.jsonl.gz",
           "livecodebench": ("livecodebench/code_generation_lite", ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 6)])}
R1 = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
      "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
      "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
      "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.")
MARK = "@@populora-eval@@"   # prefix of the harness's one result line in the sandbox's stdout


def parse_config(defaults, argv):
    """--key value / --key=value for every key, typed like its default (train.py's pattern)."""
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], allow_abbrev=False)
    for key, value in defaults.items():
        parser.add_argument(f"--{key}", type=type(value), default=value)
    return vars(parser.parse_args(argv))  # unknown flags and bad values: argparse says why, exits 2


def benchmark_names(spec):
    names = {"all": BENCHMARKS, "code": CODE, "math": MATH7}.get(spec) or [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)} (or all, code, math)")
    return list(names)

# ----------------------------------------------------------------------------- loaders


def _records(name, data_dir):
    """Raw records in the offline files' format: data_dir/<name>.jsonl, or downloaded when data_dir is ""."""
    if data_dir:
        path = os.path.join(data_dir, f"{name}.jsonl")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name}: no data file {path} (see ../shared/benchmarks/README.md for the format)")
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    source = SOURCES[name]
    if isinstance(source, str):   # EvalPlus release asset
        import gzip
        import urllib.request
        with urllib.request.urlopen(source, timeout=120) as r:
            return [json.loads(line) for line in gzip.decompress(r.read()).decode().splitlines() if line.strip()]
    if name == "livecodebench":
        from huggingface_hub import hf_hub_download
        rows = []
        for file in source[1]:
            with open(hf_hub_download(source[0], file, repo_type="dataset"), encoding="utf-8") as f:
                rows += [json.loads(line) for line in f if line.strip()]
        return rows
    try:
        import datasets   # optional: only needed without --data_dir
    except ImportError:
        raise SystemExit(f"{name}: no --data_dir given and the `datasets` package is not installed") from None
    return [dict(r) for r in datasets.load_dataset(source[0], source[1], split=source[2])]


def _last_boxed(text):
    """The last \\boxed{...} (brace-matched, including "\\boxed"), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start:j + 1]
    return None


def _unbox(text):
    box = _last_boxed(text or "")
    return box[box.index("{") + 1:-1] if box else ""


def _lcb_tests(field):
    """LCB test lists are JSON text, or base64(zlib(pickle(JSON text))). The pickle holds one str; a restricted
    unpickler that resolves no globals keeps a hostile file from running code."""
    import io
    import pickle
    try:
        return json.loads(field)
    except ValueError:
        class Plain(pickle.Unpickler):
            def find_class(self, module, name):
                raise pickle.UnpicklingError(f"global {module}.{name} refused")
        return json.loads(Plain(io.BytesIO(zlib.decompress(base64.b64decode(field)))).load())


def load_benchmark(name, data_dir, limit=0):
    """Plain dicts with "id" and what prompting and grading need: math {"question", "gold"} (gold before
    normalisation); EvalPlus {"prompt", "entry_point", "canonical", "base_input", "plus_input", "atol"};
    LCB {"question", "starter_code", "fn_name" (None = stdin), "tests": [{"input", "output"}]}."""
    rows = _records(name, data_dir)[:limit or None]
    items = []
    for k, r in enumerate(rows):
        if name in CODE[:2]:
            inputs = [r["base_input"], r["plus_input"] or []]   # Mbpp/793 has plus_input {}
            if name == "mbppplus":
                inputs = [_mbpp_types(r["task_id"], x) for x in inputs]
            items.append(dict(id=r["task_id"], prompt=r["prompt"], entry_point=r["entry_point"],
                              canonical=r["prompt"] + r["canonical_solution"], base_input=inputs[0],
                              plus_input=inputs[1], atol=float(r.get("atol") or 0)))
        elif name == "livecodebench":
            meta = json.loads(r.get("metadata") or "{}")
            tests = _lcb_tests(r["public_test_cases"]) + _lcb_tests(r["private_test_cases"])
            items.append(dict(id=r["question_id"], question=r["question_content"], starter_code=r.get("starter_code") or "",
                              fn_name=meta.get("func_name"), tests=[{"input": t["input"], "output": t["output"]} for t in tests]))
        else:
            if name in ("math500", "minerva_math"):
                gold = _unbox(r.get("solution")) or str(r.get("answer", ""))   # AZR: last \boxed{} of the solution
            elif name == "gsm8k":
                gold = r["answer"].split("####")[-1].strip()
            elif name == "olympiadbench":
                gold = r["final_answer"][0].strip().strip("$")
            else:
                gold = str(r["answer"])
            items.append(dict(id=str(r.get("id", r.get("unique_id", r.get("idx", k)))),
                              question=r.get("question") or r.get("problem"), gold=gold))
    return items


# EvalPlus stores MBPP+ inputs as JSON; these tasks take tuples/sets/complex (evalplus/data/mbpp.py facts)
_MBPP_TUPLE_ARGS = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809}
_MBPP_TUPLE_LISTS = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}


def _mbpp_types(task_id, inputs):
    n = int(task_id.split("/")[-1])
    deep = lambda v: tuple(deep(e) for e in v) if isinstance(v, list) else v   # noqa: E731
    if n in _MBPP_TUPLE_ARGS:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in _MBPP_TUPLE_LISTS:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in (75, 413, 444, 753):
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in (106, 750):
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:   # EvalPlus turns an empty list into {} (a dict), kept as is
        return [[[set(x) if isinstance(x, list) and x else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}] + inp[1:] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in (580, 615, 791):
        return [deep(inp) for inp in inputs]
    return inputs

# ----------------------------------------------------------------------------- prompts and answer extraction


def make_prompt(name, item, cfg):
    """AZR's evaluation prompts (reference/eval.md §3): R1 <think>/<answer> for math and LCB; EvalPlus's
    instruction + primed python fence (as AZR's converted checkpoints' plain chat template renders it)."""
    if name in CODE[:2]:
        return ("Please provide a self-contained Python script that solves the following problem in a markdown code "
                f"block:\n```\n{item['prompt'].strip()}\n```\n\nBelow is a Python script with a self-contained "
                "function that solves the problem and passes corresponding tests:\n```python\n")
    if name == "livecodebench":
        if item["fn_name"]:
            fmt = ("You will use the following starter code to write the solution to the problem and enclose your "
                   f"code within delimiters.\n```python\n{item['starter_code']}\n```")
        else:
            fmt = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                   "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
                   "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n"
                   "```python\n# YOUR CODE HERE\n```")
        task = ("You will be given a question (problem specification) and will generate a correct Python program "
                "that matches the specification and passes all tests.\n\n"
                f"Question: {item['question']}\n\n{fmt}")
        return f"{R1} User: {task}\nAssistant: <think>"
    question = item["question"]
    if item["gold"].strip().lower() in ("yes", "no"):
        question += " (Yes or No)"
    elif item["gold"].strip().lower() in ("true", "false"):
        question += " (True or False)"
    hint = " The final answer in <answer> </answer> is extracted from \\boxed{}." if cfg["math_prompt"] == "azr_boxed" else ""
    return f"{R1}{hint} User: {question}\nAssistant: <think>"


def extract_math(response):
    """AZR's extract_azr_answer: the last <answer>, its last \\boxed{} if it has one; else the last \\boxed{}
    anywhere; else the first \\[ ... \\]; else "" (wrong). Returns the box's content: strip_string's trailing
    \\text rule would otherwise eat the wrapper's closing brace ([ours]; AZR keeps the \\boxed)."""
    if "<answer>" in response:
        text = response.split("<answer>")[-1].split("</answer>")[0]
        if "boxed" not in text:
            return text.replace("\\[", "").replace("\\]", "").strip()
        return _unbox(text)
    if "boxed" in response:
        return _unbox(response)
    m = re.search(r"\\\[(.*?)\\\]", response, re.S)
    return m.group(1).strip() if m else ""


def extract_code(name, response):
    """EvalPlus: the completion continues an open ```python fence: cut at the closing fence, keep the longest prefix
    that parses, then only imports/defs/classes/assignments (drops demo prints and asserts). LCB: the last
    ```python block inside <answer> (or the whole answer when it has no fence)."""
    import ast
    if name == "livecodebench":
        if "<answer>" not in response:
            return ""
        answer = response.split("<answer>")[-1].split("</answer>")[0]
        blocks = re.findall(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", answer, re.S)
        return blocks[-1] if blocks else answer.strip()
    lines = response.split("```")[0].split("\n")
    for cut in range(len(lines), 0, -1):
        try:
            tree = ast.parse("\n".join(lines[:cut]))
        except (SyntaxError, ValueError):
            continue
        keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
        tree.body = [node for node in tree.body if isinstance(node, keep)]
        return ast.unparse(tree)
    return ""

# ----------------------------------------------------------------------------- math grading


# AZR's unit words (from MathQA, via Qwen2.5-Math's parser); used as regexes, unescaped, as there
UNITS = ("east|degree|mph|kmph|ft|m sqaure| m east|sq m|deg|mile|q .|monkey|prime|ratio|profit of rs|rd|o|gm|p . m|lb|"
         "tile|per|dm|lt|gain|ab|way|west|a .|b .|c .|d .|e .|f .|g .|h .|t|a|h|no change|men|soldier|pie|bc|excess|st|"
         "inches|noon|percent|by|gal|kmh|c|acre|rise|a . m|th|π r 2|sq|mark|l|toy|coin|sq . m|gallon|° f|profit|minw|yr|"
         "women|feet|am|pm|hr|cu cm|square|v â € ™|are|rupee|rounds|cubic|cc|mtr|s|ohm|number|kmph|day|hour|minute|min|"
         "second|man|woman|sec|cube|mt|sq inch|mp|∏ cm ³|hectare|more|sec|unit|cu . m|cm 2|rs .|rs|kg|g|month|km|m|cm|"
         "mm|apple|liter|loss|yard|pure|year|increase|decrease|d|less|Surface|litre|pi sq m|s .|metre|meter|inch").split("|")
UNITS += [u + "s" for u in UNITS]


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


def strip_string(s, skip_unit=False):
    """AZR's answer normalisation (Qwen2.5-Math parser.strip_string), step for step, without word2number."""
    s = str(s).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\neq", "\\ne").replace("\\leq", "\\le")
    s = s.replace("\\geq", "\\ge").replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    t = re.sub(r"\\text{.*?}$", "", s).strip()   # a trailing \text{unit}
    if t:
        s = t
    if not skip_unit:
        for _ in range(2):
            for unit in UNITS:
                t = re.sub(r"(^|\W)" + unit + r"($|\W)", r"\1\2", s)
                if t:
                    s = t
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "").replace("$", "").replace("\\(", "").replace("\\)", "")
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for key in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"):
        s = s.replace(key, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "").replace(" .", " 0.").replace("{.", "{0.")
    # (AZR's "strip {}/()/[] around an alphanumeric string" needs isalnum() of the bracketed text: never true)
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = re.sub(r"\\mbox{.*?}", "", s)
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0*$", r"\1", s)
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
            a, b = (a if "sqrt" in a else int(a)), (b if "sqrt" in b else int(b))
            if s == f"{a}/{b}":
                s = f"\\frac{{{a}}}{{{b}}}"
        except ValueError:
            pass
    return s


def _math_pair(pair):
    """One (gold, prediction) comparison in a worker process (math-verify's timeouts use SIGALRM, which only
    works in a main thread): AZR's verify(parse(\\boxed{gold}), parse(\\boxed{pred}))."""
    gold, pred, timeout = pair
    timeout = max(1, math.ceil(timeout))   # math-verify's timeouts go to signal.alarm: whole seconds
    if not pred or not gold:
        return False
    try:
        from math_verify import parse, verify
        g = parse("\\boxed{" + gold + "}", parsing_timeout=timeout)
        p = parse("\\boxed{" + pred + "}", parsing_timeout=timeout)
        return bool(g and p and verify(g, p, timeout_seconds=timeout))
    except Exception:
        return False


def grade_math(pairs, timeout, workers=0, desc="math"):
    """[(gold, pred)] (both normalised) -> [bool], in a spawned process pool (spawn: no fork of a process that
    holds vLLM/torch threads). A worker stuck past every timeout is killed with the pool: its items score wrong."""
    if not pairs:
        return []
    workers = min(workers or os.cpu_count() or 1, len(pairs))
    main = getattr(sys.modules["__main__"], "__file__", None)
    if workers == 1 or main and not os.path.isfile(main):   # spawn re-imports __main__ by path (not `python -`)
        return [_math_pair((g, p, timeout)) for g, p in tqdm(pairs, desc=desc, leave=False, mininterval=2)]
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

# ----------------------------------------------------------------------------- code grading
# _canon, _numeric, _emit and _harness run inside the sandbox (their source is the job's code) and _canon/_emit
# also here, on reference values, so both sides hash the same text.


def _plain(x):
    """True when repr(x) already is the canonical text: x holds only list/tuple/str/None, ints below 10**18 and
    non-integral, non-nan floats. Checked level by level with C-speed scans (huge outputs: MBPP+ 255)."""
    level, ok = [x], {str, int, float, type(None), list, tuple}
    while level:
        types = set(map(type, level))
        if not types <= ok:
            return False
        if int in types and not -10**18 < min(e for e in level if type(e) is int) <= max(e for e in level if type(e) is int) < 10**18:
            return False
        if float in types and not all(f == f and not f.is_integer() for f in level if type(f) is float):
            return False
        if not types & {list, tuple}:
            return True
        level = list(itertools.chain.from_iterable(level if types <= {list, tuple} else
                                                   (c for c in level if type(c) in (list, tuple))))
    return True


def _write(x, put):
    """Write the canonical text of x through put(str): equal text <=> `==` on plain data (True ~ 1, 2.0 ~ 2,
    set and dict order ignored, list != tuple); repr's format where repr is canonical (fast path, in chunks, for
    the 1 GB outputs of MBPP+ 255); other types -> <type>repr, equal to no plain value."""
    if isinstance(x, (list, tuple)):
        put("[" if isinstance(x, list) else "(")
        for k in range(0, len(x), 4096):
            chunk = list(x[k:k + 4096])
            put(", " if k else "")
            if _plain(chunk):
                put(repr(chunk)[1:-1])
                continue
            for j, e in enumerate(chunk):
                put(", " if j else "")
                _write(e, put)
        put("]" if isinstance(x, list) else ("," if len(x) == 1 else "") + ")")
    elif x is None:
        put("None")
    elif isinstance(x, (bool, int)):   # hex past 18 digits: str() of a huge int is quadratic in CPython 3.11
        put(str(int(x)) if -10**18 < x < 10**18 else format(int(x), "#x"))
    elif isinstance(x, float):
        _write(int(x), put) if x == x and x.is_integer() else put("nan" if x != x else float.__repr__(x))
    elif isinstance(x, complex):
        _write(x.real, put) if x.imag == 0 else put(f"c({_canon(x.real)}, {_canon(x.imag)})")
    elif isinstance(x, (str, bytes)):
        put((str if isinstance(x, str) else bytes).__repr__(x))
    elif isinstance(x, (set, frozenset)):
        put("{" + ", ".join(sorted(_canon(e) for e in x)) + "}")
    elif isinstance(x, dict):
        put("d{" + ", ".join(sorted(_canon(k) + ": " + _canon(v) for k, v in x.items())) + "}")
    elif type(x).__module__ == "numpy" and hasattr(x, "tolist"):
        _write(x.tolist(), put)
    else:
        put(f"<{type(x).__qualname__}>{x!r}")


def _canon(x):
    parts = []
    _write(x, parts.append)
    return "".join(parts)


def _numeric(x, limit=1000):
    """(shape text, float leaves) of a float or a list/tuple nest of numbers that holds a float, for EvalPlus's
    np.allclose rule; None otherwise or past `limit` leaves."""
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
        shape = type(x).__name__ + ":" + walk(x)   # EvalPlus asserts type(out) == type(expected) first
    except (TypeError, OverflowError, RecursionError):
        return None
    return [shape, leaves] if (any(has_float) or shape.endswith(":n")) and len(leaves) <= limit else None


def _emit(v):
    """What the parent needs of one value: a hash of its canonical text, numbers for EvalPlus's tolerance."""
    import hashlib
    h = hashlib.sha256()
    _write(v, lambda s: h.update(s.encode("utf-8", "surrogatepass")))
    out = {"h": h.hexdigest()[:32]}
    n = _numeric(v) if isinstance(v, (int, float, list, tuple)) else None
    if n:
        out["n"] = n
    if isinstance(v, float) or isinstance(v, (list, tuple)) and v and all(isinstance(e, float) for e in v):
        out["f"] = 1   # EvalPlus's is_floats: atol defaults to 1e-6 against this expected value
    return out


def _lines(text):
    """LCB's stdout view: the stripped lines of the stripped text, hashed; the lines themselves up to 4096 chars."""
    lines = [line.strip() for line in text.strip().split("\n")]
    joined = "\n".join(lines)
    out = _emit(joined)
    out["lines"] = lines if len(joined) <= 4096 else None
    return out


def _harness():
    """Sandbox side: job JSON on stdin -> run the program on every input/test under a per-test SIGALRM limit,
    stop at the first error or overrun -> one MARK line: {"outs": [emitted], "times": [s], "error", "wall"}."""
    import io, json, math, signal, sys, time   # noqa: E401 (runs as a standalone script)
    sys.set_int_max_str_digits(0)
    start, job = time.perf_counter(), json.loads(sys.stdin.read())
    dumps, clock, timer, real_out = json.dumps, time.perf_counter, signal.setitimer, sys.stdout

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
            g = {"__name__": "tmp_sol"} if mode == "lcb" else {}
            exec(code, g)
            fn = getattr(g["Solution"](), job["entry"]) if "class Solution" in job["code"] else g[job["entry"]]
        for i, case in enumerate(cases):
            timer(signal.ITIMER_REAL, job["limits"][i])
            t0 = clock()
            try:
                if job["kind"] == "call":
                    v = fn(*case)
                else:
                    sys.stdout, sys.stdin = io.StringIO(), io.TextIOWrapper(io.BytesIO(case.encode()))
                    try:
                        exec(code, {"__name__": "__main__"})
                    except SystemExit:
                        pass
                    v = sys.stdout.getvalue()
            finally:
                timer(signal.ITIMER_REAL, 0)
                sys.stdout = Null()
            res["times"].append(clock() - t0)
            if mode == "set":
                v = set(v)
            elif mode in ("notnone", "notnone_ref"):   # EvalPlus: outputs that only need to be non-None
                v = v if mode == "notnone" and isinstance(v, bool) else v is not None
            elif mode == "lcb" and isinstance(v, tuple):
                v = list(v)
            res["outs"].append(_lines(v) if job["kind"] == "stdin" else _emit(v))
    except Limit:
        res["error"] = f"time limit on test {i + job.get('first', 0)}"
    except BaseException as e:
        res["error"] = f"test {i + job.get('first', 0)}: {type(e).__name__}: {e}"[:300]
    res["wall"] = clock() - start
    real_out.write(MARK + dumps(res) + "\n")


HARNESS = "\n\n".join([f"import itertools\nMARK = {MARK!r}"] + [inspect.getsource(f) for f in (_plain, _write, _canon, _numeric, _emit, _lines, _harness)])
HARNESS += "\n_harness()\n"
LCB_PRELUDE = "".join(f"from {m} import *\n" for m in ("string re datetime collections heapq bisect copy math random "
                                                       "statistics itertools functools operator io sys json builtins typing").split())
LCB_PRELUDE += ("import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools, "
                "functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n")


def run_jobs(payloads, timeouts, desc, memory_mb=4096):
    """Harness runs through verify.execute, in chunks for the progress bar -> [result dict | {"error"}]."""
    import verify
    jobs = [{"code": HARNESS, "stdin": json.dumps(p), "timeout": t, "memory_mb": memory_mb} for p, t in zip(payloads, timeouts)]
    order = sorted(range(len(jobs)), key=lambda i: (-timeouts[i], -len(jobs[i]["stdin"])))   # long ones first
    results, step = [None] * len(jobs), 512   # big chunks: a chunk waits for its slowest job
    for k in tqdm(range(0, len(jobs), step), desc=desc, leave=False, disable=len(jobs) <= step):
        for i, r in zip(order[k:k + step], verify.execute([jobs[i] for i in order[k:k + step]])):
            line = next((x for x in reversed(r["stdout"].split("\n")) if x.startswith(MARK)), None)
            try:
                results[i] = json.loads(line[len(MARK):])
            except (TypeError, ValueError):
                results[i] = {"outs": [], "times": [], "error": r.get("error") or "no result (killed or crashed)"}
    return results


# EvalPlus's special oracles (evalplus/eval/_special_oracle.py facts): set equality, "output not None", and
# Mbpp/164, 295, 581, 558, HumanEval/32 below
MBPP_SET = {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
            "intersection_array", "find_dissimilar", "Diff"}
MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}


def _value(out):
    return out["n"][1][0]   # a scalar number (KeyError/TypeError otherwise: not a number, wrong answer)


def _same(name, item, args, exp, out, atol):
    """EvalPlus's verdict on one input, from the emitted expected and actual values."""
    ep, exact = item["entry_point"], out["h"] == exp["h"]
    try:
        if name == "mbppplus" and ep == "are_equivalent":    # Mbpp/164: EvalPlus accepts any output
            return True
        if name == "mbppplus" and ep == "sum_div":           # Mbpp/295: or 0
            return exact or out["h"] == _emit(0)["h"]
        if name == "mbppplus" and ep == "surface_Area":      # Mbpp/581: or the slant-height reading, within atol
            a, h = args
            return exact or abs(_value(out) - round(a * a + 2 * a * math.sqrt((a / 2) ** 2 + h * h))) <= atol
        if name == "mbppplus" and ep == "digit_distance_nums":   # Mbpp/558: or zero-padded digit distance
            x, y = str(args[0]), str(args[1])
            width = max(len(x), len(y))
            return exact or out["h"] == _emit(sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(width), y.zfill(width))))["h"]
        if name == "humanevalplus" and ep == "find_zero":    # HumanEval/32: any root, |poly(x)| <= atol
            return abs(sum(c * math.pow(_value(out), i) for i, c in enumerate(args[0]))) <= atol
    except (TypeError, ValueError, OverflowError, IndexError, KeyError):
        return False
    if exact:
        return True
    atol = atol or (1e-6 if exp.get("f") else 0.0)
    if not atol or not exp.get("n") or not out.get("n") or exp["n"][0] != out["n"][0]:
        return False
    return all(a == b or abs(a - b) <= atol + 1e-7 * abs(b) for a, b in zip(out["n"][1], exp["n"][1]))


def _pieces(n, times=None, size=32, budget=1.0):
    """Cut inputs 0..n into consecutive (lo, hi) runs of at most `size` inputs and `budget` reference seconds,
    so one slow task (MBPP+ 599: ~40 s over 88 inputs) spreads over the sandbox pool."""
    cuts, lo, spent = [], 0, 0.0
    for i in range(n):
        if i > lo and (i - lo >= size or times and spent + times[i] > budget):
            cuts.append((lo, i))
            lo, spent = i, 0.0
        spent += times[i] if times else 0.0
    return cuts + [(lo, n)]


def _grouped(keys, results):
    """Join the pieces of each run (in order, up to the first piece with an error) -> {key: run}."""
    runs = {}
    for key, r in zip(keys, results):
        run = runs.setdefault(key, {"outs": [], "times": [], "error": "", "overhead": 0.0})
        if not run["error"]:
            run["outs"] += r["outs"]
            run["times"] += r["times"]
            run["error"] = r["error"]
            run["overhead"] += max(0.0, r.get("wall", 0.0) - sum(r["times"]))   # decoding inputs, hashing outputs
    return runs


def grade_evalplus(name, items, programs, cfg):
    """[(item index, program)] -> [{"correct" (base and plus pass), "base", "reason"}]. Expected outputs and
    reference times come from running each canonical solution once on its base and plus inputs."""
    def payload(item, code, part, lo, hi, limits, reference):
        ep = item["entry_point"]
        mode = "set" if name == "mbppplus" and ep in MBPP_SET else ""
        if name == "mbppplus" and ep in MBPP_NOT_NONE:
            mode = "notnone_ref" if reference else "notnone"
        return {"kind": "call", "mode": mode, "code": code, "entry": ep, "inputs": repr(item[part + "_input"][lo:hi]),
                "limits": limits, "first": lo}
    parts, keys, payloads = ("base", "plus"), [], []
    for k, it in enumerate(items):
        for p in parts:
            for lo, hi in _pieces(len(it[p + "_input"])):
                keys.append((k, p))
                payloads.append(payload(it, it["canonical"], p, lo, hi, [0] * (hi - lo), True))
    refs = _grouped(keys, run_jobs(payloads, [cfg["reference_timeout"]] * len(payloads), f"{name} reference"))
    keys, payloads, timeouts = [], [], []
    for n, (k, code) in enumerate(programs):
        for p in parts:
            ref = refs[(k, p)]
            limits = [max(cfg["min_time_limit"], cfg["time_limit_factor"] * t) for t in ref["times"]]
            for lo, hi in _pieces(len(limits), ref["times"]) if not ref["error"] else ():
                keys.append((n, p))
                payloads.append(payload(items[k], code, p, lo, hi, limits[lo:hi], False))
                timeouts.append(min(cfg["task_timeout"], sum(limits[lo:hi])) + 2 + 2 * ref["overhead"])
    runs = _grouped(keys, run_jobs(payloads, timeouts, f"{name} tests"))
    verdicts = []
    for n, (k, code) in enumerate(programs):
        ok, reason = [], ""
        for p in parts:
            ref, run, args = refs[(k, p)], runs.get((n, p)), items[k][p + "_input"]
            if ref["error"] or len(ref["outs"]) != len(args):
                why = f"reference run failed: {ref['error']}"
            elif run["error"] or len(run["outs"]) != len(args):
                why = run["error"] or "incomplete run"
            elif sum(run["times"]) > cfg["task_timeout"]:   # EvalPlus caps a whole base/plus run
                why = f"{sum(run['times']):.1f} s over the {cfg['task_timeout']} s cap"
            else:
                bad = next((i for i, a in enumerate(args) if not _same(name, items[k], a, ref["outs"][i], run["outs"][i], items[k]["atol"])), None)
                why = "" if bad is None else f"wrong output on input {bad}"
            ok.append(not why)
            reason = reason or (f"{p}: {why}" if why else "")
        verdicts.append({"correct": all(ok), "base": ok[0], "reason": reason})
    return verdicts


def _lcb_same(exp, out, stdin):
    """LCB: functional outputs ==; stdin outputs line by line after strip, a line may also match as Decimals."""
    from decimal import Decimal, InvalidOperation
    if out["h"] == exp["h"]:
        return True
    if not stdin or out.get("lines") is None or exp.get("lines") is None or len(out["lines"]) != len(exp["lines"]):
        return False
    try:
        return all(a == b or [Decimal(x) for x in a.split()] == [Decimal(x) for x in b.split()]
                   for a, b in zip(out["lines"], exp["lines"]))
    except InvalidOperation:
        return False


def grade_lcb(items, programs, cfg):
    """[(item index, program)] -> [{"correct", "reason"}]: every public + private test within lcb_timeout each."""
    payloads, timeouts = [], []
    for k, code in programs:
        it = items[k]
        payloads.append({"kind": "call" if it["fn_name"] else "stdin", "mode": "lcb" if it["fn_name"] else "",
                         "code": LCB_PRELUDE + code, "entry": it["fn_name"], "tests": [t["input"] for t in it["tests"]],
                         "limits": [cfg["lcb_timeout"]] * len(it["tests"])})
        timeouts.append((cfg["lcb_timeout"] + 1) * len(it["tests"]) + 5)   # LCB's global per-problem limit
    runs = run_jobs(payloads, timeouts, "livecodebench tests") if programs else []
    verdicts = []
    for (k, code), run in zip(programs, runs):
        it, reason = items[k], run["error"]
        if not reason and len(run["outs"]) != len(it["tests"]):
            reason = "incomplete run"
        for i, t in enumerate(it["tests"] if not reason else ()):
            try:
                exp = _emit(json.loads(t["output"])) if it["fn_name"] else _lines(t["output"])
            except ValueError:
                exp = {"h": None}
            if not _lcb_same(exp, run["outs"][i], not it["fn_name"]):
                reason = f"wrong output on test {i}"
                break
        verdicts.append({"correct": not reason, "reason": reason})
    return verdicts


def grade(name, items, programs_or_answers, cfg):
    """One benchmark, many answers: [(item index, model text extracted)] -> [{"correct", "reason", ...}]."""
    if name in MATH7:
        skip = name == "minerva_math"   # AZR: no unit stripping for Minerva (nor gold normalisation: see docstring)
        pairs = [(strip_string(items[k]["gold"], skip), strip_string(a, skip) if a else "") for k, a in programs_or_answers]
        return [{"correct": c, "reason": "" if c else "not equivalent"} for c in grade_math(pairs, cfg["math_timeout"], cfg["workers"], name)]
    todo = [(n, k, code) for n, (k, code) in enumerate(programs_or_answers) if code.strip()]
    verdicts = [{"correct": False, "base": False, "reason": "no code"} for _ in programs_or_answers]
    run = grade_lcb if name == "livecodebench" else lambda i, p, c: grade_evalplus(name, i, p, c)
    for (n, _, _), v in zip(todo, run(items, [(k, code) for _, k, code in todo], cfg)):
        verdicts[n] = v
    return verdicts

# ----------------------------------------------------------------------------- evaluation of a checkpoint


def _state(folder, flag):
    try:
        with open(os.path.join(folder, "state.json")) as f:
            state = json.load(f)
        state["config"], state["members"]
        return state
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--{flag} {folder!r} is not a checkpoint folder (out_dir/step_NNNNNN with state.json): {e}")


def load_rows(cfg):
    """One engine for the checkpoint's members, the baseline's adapter and the base: two extra zero-initialised
    "both" slots (B = 0 is exactly the base; the first is overwritten by the baseline). -> (engine, {row: slot},
    {row: role}, state)."""
    state = _state(cfg["ckpt"], "ckpt")
    run, roles = state["config"], [m["role"] for m in state["members"]]
    if cfg["baseline_ckpt"] and _state(cfg["baseline_ckpt"], "baseline_ckpt")["config"].get("model") != run.get("model"):
        raise SystemExit(f"--baseline_ckpt {cfg['baseline_ckpt']} was trained on another base model than --ckpt")
    import torch
    import population
    device = cfg["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    base, tokenizer, path = population.load_base(cfg["model"] or run["model"], dtype, device)
    model, members = population.init_population(base, tokenizer, run, roles + ["both"] * (1 + bool(cfg["baseline_ckpt"])))
    own, extra = members[:len(roles)], members[len(roles):]
    try:
        population.load_checkpoint(cfg["ckpt"], model, own, {})
        if cfg["baseline_ckpt"]:
            population.load_checkpoint(cfg["baseline_ckpt"], model, extra[:1], {})
    except ValueError as e:
        raise SystemExit(str(e)) from None
    rows = {m["name"]: m["name"] for m in own}
    rows.update({"baseline": extra[0]["name"]} if cfg["baseline_ckpt"] else {}, base=extra[-1]["name"])
    engine_cfg = dict(lora_rank=run["lora_rank"], max_model_len=cfg["max_model_len"], seed=cfg["seed"], dtype=dtype,
                      gpu_memory_utilization=cfg["gpu_memory_utilization"])
    engine = population.make_engine(cfg["engine"], path, model, tokenizer, own + extra, engine_cfg)
    return engine, rows, {m["name"]: m["role"] for m in own}, state


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 2) if values else None


def summarize(scores, roles):
    """Per row: averages (code, math over AZR's six, math over seven, overall = mean of code and math-6); table
    rows: base, baseline, population mean, best teacher, best student, weakest member (by overall)."""
    for s in scores.values():
        s.update(code_avg=_mean(s.get(b) for b in CODE), math_avg6=_mean(s.get(b) for b in MATH6),
                 math_avg7=_mean(s.get(b) for b in MATH7))
        s["overall"] = _mean([s["code_avg"], s["math_avg6"]])
    members = [r for r in roles if r in scores]
    keys = sorted({k for r in members for k in scores[r]})
    table = {"base": dict(scores["base"], row="base")}
    if "baseline" in scores:
        table["baseline"] = dict(scores["baseline"], row="baseline")
    table["population mean"] = dict({k: _mean(scores[r].get(k) for r in members) for k in keys}, row="mean")
    key = lambda r: scores[r]["overall"] if scores[r]["overall"] is not None else -1.0   # noqa: E731
    for label, pool, pick in (("best teacher", "teacher", max), ("best student", "student", max), ("weakest member", None, min)):
        pool = [r for r in members if pool in (None, roles[r], "both" if roles[r] == "both" else None)]
        if pool:
            r = pick(pool, key=key)
            table[label] = dict(scores[r], row=r)
    return table


def markdown(table, names, title):
    cols = names + ["code_avg", "math_avg6", "math_avg7"]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"   # noqa: E731
    lines = [f"# {title}", "", "Greedy pass@1 (%). Math avg (6) = AZR's six; (7) adds GSM8K.", "",
             "| | member | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    lines += [f"| {label} | {r['row']} | " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for label, r in table.items()]
    return "\n".join(lines) + "\n"


def _save(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def evaluate(cfg):
    """Load, generate (one batched call per benchmark for every row), grade, write eval.json and eval.md."""
    import population
    names = benchmark_names(cfg["benchmarks"])
    data, skipped = {}, {}
    for name in names:   # data problems first: no model is loaded for a run that cannot finish
        try:
            data[name] = load_benchmark(name, cfg["data_dir"], cfg["limit"])
        except FileNotFoundError as e:
            if cfg["benchmarks"] not in ("all", "code", "math"):
                raise SystemExit(str(e)) from None
            skipped[name] = str(e)
            print(f"skipping {name}: {e}", flush=True)
    engine, rows, roles, state = load_rows(cfg)
    budget = lambda n: cfg["math_tokens"] if n in MATH7 else cfg["lcb_tokens"] if n == "livecodebench" else cfg["evalplus_tokens"]  # noqa: E731
    scores, items_out, samples = {r: {} for r in rows}, {}, {}
    for name in tqdm(list(data), desc="benchmarks"):
        items = data[name]
        prompts = [make_prompt(name, it, cfg) for it in items]
        outs = population.generate(engine, [(p, slot) for slot in rows.values() for p in prompts], temperature=0.0,
                                   top_p=1.0, max_new_tokens=budget(name), seed=cfg["seed"])
        texts = [o["text"] for o in outs]
        answers = [extract_math(t) if name in MATH7 else extract_code(name, t) for t in texts]
        verdicts = grade(name, items, [(n % len(items), a) for n, a in enumerate(answers)], cfg)
        items_out[name] = {"ids": [it["id"] for it in items]}
        for j, row in enumerate(rows):
            part = verdicts[j * len(items):(j + 1) * len(items)]
            scores[row][name] = round(100.0 * sum(v["correct"] for v in part) / max(1, len(items)), 2)
            items_out[name][row] = [int(v["correct"]) for v in part]
            samples.setdefault(name, {})[row] = [{"id": items[k]["id"], "response": texts[j * len(items) + k][-2000:],
                                                 "answer": answers[j * len(items) + k][:1000], **part[k]} for k in range(min(2, len(items)))]
    table = summarize(scores, roles)
    out = cfg["out"] or cfg["ckpt"]
    os.makedirs(out, exist_ok=True)
    result = {"ckpt": cfg["ckpt"], "baseline_ckpt": cfg["baseline_ckpt"], "step": state.get("step"), "config": cfg,
              "benchmarks": list(data), "skipped": skipped, "n_items": {n: len(d) for n, d in data.items()},
              "roles": roles, "scores": scores, "table": table, "items": items_out, "samples": samples}
    _save(os.path.join(out, "eval.json"), json.dumps(result, indent=1))
    _save(os.path.join(out, "eval.md"), markdown(table, list(data), f"Evaluation of {cfg['ckpt']} (step {state.get('step')})"))
    print(markdown(table, list(data), f"Evaluation of {cfg['ckpt']}"), flush=True)
    return result


def selfcheck(cfg):
    """Gold answers (inside an <answer>\\boxed{}) and canonical solutions graded by this file's own graders, for
    every benchmark file in data_dir -> {benchmark: {"records", "passed", "failed": [ids]}}."""
    report = {}
    for name in benchmark_names(cfg["benchmarks"]):
        if not os.path.isfile(os.path.join(cfg["data_dir"], f"{name}.jsonl")) or name == "livecodebench":
            continue   # LCB ships no reference solutions
        items = load_benchmark(name, cfg["data_dir"], cfg["limit"])
        if name in MATH7:
            answers = [extract_math(f"<think>x</think> <answer>\\boxed{{{it['gold']}}}</answer>") for it in items]
        else:
            answers = [it["canonical"] for it in items]
        verdicts = grade(name, items, list(enumerate(answers)), cfg)
        failed = [it["id"] for it, v in zip(items, verdicts) if not v["correct"]]
        report[name] = {"records": len(items), "passed": len(items) - len(failed), "failed": failed}
    return report


if __name__ == "__main__":
    if sys.argv[1:2] == ["report"]:
        import report
        report.main(sys.argv[2:])
    elif sys.argv[1:2] == ["selfcheck"]:
        cfg = parse_config(config, sys.argv[2:])
        if not cfg["data_dir"]:
            raise SystemExit("selfcheck needs --data_dir (a folder of benchmark JSONL files)")
        print(json.dumps(selfcheck(cfg)), flush=True)
    else:
        cfg = parse_config(config, sys.argv[1:])
        if not cfg["ckpt"]:
            raise SystemExit("--ckpt is required (a checkpoint folder out_dir/step_NNNNNN); see --help")
        evaluate(cfg)
