"""
Greedy pass@1 of every member of a PopuLoRA checkpoint, the base model and a baseline run on the
paper's ten benchmarks (design §11), with AZR's evaluation protocol (docs/eval.md); `report`
draws the training dynamics.

  # the benchmarks and AZR's seed archives, pinned and checked, into data/ (data.py)
  python evaluate.py fetch
  python evaluate.py --ckpt out/step_000200 --benchmarks all [--limit N]
  python evaluate.py --ckpt out/step_000200 --baseline_ckpt out-base/step_000200
  # any model as the baseline row, e.g. a full fine-tune (AZR's released checkpoint)
  python evaluate.py --ckpt out/step_000200 --baseline_model FOLDER_OR_HUB_ID
  # every student on fresh problems of every teacher (figure 12): crossplay.json/.md/.png
  python evaluate.py crossplay --ckpt out/step_000200
  # PNG figures + report.md from metrics.jsonl (report.py)
  python evaluate.py report out [out-base]
  # gold answers / canonical solutions, one JSON line
  python evaluate.py selfcheck
  # the laptop world, held out
  python evaluate.py --ckpt out/tiny/step_000060 --benchmarks tiny

Code: HumanEval+ and MBPP+ (EvalPlus's chat prompt as AZR's converted checkpoints render it, 768 new
tokens; "+" = base and plus tests pass), LiveCodeBench release_v5 (AZR's <think> prompt, public +
private tests).
Math: AIME 24/25, AMC 23, MATH-500, Minerva, OlympiadBench (AZR's six) and GSM8K (PopuLoRA's
seventh): AZR's <think>/<answer> prompt and answer extraction. Scoring (math-verify, the sandboxed
tests) is in graders.py.
Tiny (not in "all"): the laptop world's held-out problems (tinyworld.heldout_benchmark: 200 per
task type, from a generator seed the warm start never used, no program it ever showed), in the
students' own prompt (verify.student_prompt); answers parsed and graded by verify.py in the sandbox
against golds computed there at load time; data_dir/tiny.jsonl when present, else generated once
into --model_cache.
All members, the base and the baseline's adapter share one engine and one batched engines.generate
call per benchmark: the base is an extra LoRA slot left at its zero init (B = 0 is exactly the
base), the baseline's adapter is loaded into another slot (same base model and LoRA shape
required).
Deviations: (1) the math prompt ends in "Assistant: <think>" like the training prompts; the
azr_boxed hint wording is ours; (2) the answer is the content of the \\boxed{} (AZR keeps the
wrapper, which strip_string's trailing-\\text rule then breaks: "\\boxed{\\text{Evelyn}}" loses its
closing brace); (3) Minerva golds get the same strip_string (without units) as predictions: AZR
normalises only the prediction, so its spaces vanish on one side ("\\omega i" -> "\\omegai") and 11
golds cannot match themselves; (4) EvalPlus's tree-sitter sanitiser is replaced by an ast pass
keeping imports, defs, classes and assignments; (5) EvalPlus's stop string is applied after
generation (engines.generate has no stop strings).
Not covered: pass@k > 1, LiveCodeBench date windows, EvalPlus's base-model (no chat template)
prompt.
"""
import base64
import json
import os
import re
import sys
import zlib

from tqdm import tqdm

import data
import graders
import logs
import rollout
import startup
import train
import verify
from verify import TASKS

# -----------------------------------------------------------------------------
config = dict(
    ckpt="",                    # checkpoint folder of the population run (out/step_000200)
    baseline_ckpt="",           # checkpoint of the single-agent baseline (same base, LoRA shape)
    baseline_model="",          # or any model as the baseline row: hub id or folder (fine-tune)
    benchmarks="all",           # comma-separated names, or all / code / math
    data_dir="data",            # folder of benchmark JSONL files (`python evaluate.py fetch`)
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
    math_timeout=3.0,           # seconds per math-verify check (AZR: 3); a timeout scores wrong
    min_time_limit=10.0,        # EvalPlus per-input limit floor, seconds (AZR: --min-time-limit 10)
    time_limit_factor=8.0,      # EvalPlus per-input limit = factor x reference time (AZR: 8)
    task_timeout=60.0,          # EvalPlus cap per base/plus run, s (EVALPLUS_TIMEOUT_PER_TASK)
    lcb_timeout=60.0,           # LiveCodeBench limit per test, seconds (AZR: --timeout 60)
    reference_timeout=300.0,    # seconds to run a canonical solution for its expected outputs
    memory_mb=4096,             # address-space limit of a sandboxed program, MiB (EvalPlus: 4 GiB)
    workers=0,                  # math scoring processes; 0 = cpu count
    seed=2,                     # generation seed (greedy, so only ties care)
    tiny_tokens=256,            # new tokens per tiny-world answer (the warm start's are < 150)
    crossplay_problems=0,       # crossplay: fresh problems per teacher and task type (0 = the run's)
    crossplay_samples=0,        # crossplay: attempts per problem (0 = the run's solve_samples)
    model_cache="out/.tiny",    # where the tiny / tiny-warm bases and tiny.jsonl are built once
    # run model-written code even where the sandbox cannot isolate the filesystem (verify.py layers)
    unsafe_sandbox_without_filesystem_isolation=False,
)

CODE = ("humanevalplus", "mbppplus", "livecodebench")
# AZR's Math Avg
MATH6 = ("aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench")
# PopuLoRA adds GSM8K
MATH7 = MATH6 + ("gsm8k",)
BENCHMARKS = CODE + MATH7
TINY = "tiny"                                  # the laptop world's held-out set
R1 = ("A conversation between User and Assistant. The user asks a question, and the Assistant "
      "solves it. The assistant first thinks about the reasoning process in the mind and then "
      "provides the user with the answer. The reasoning process and answer are enclosed within "
      "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
      "process here </think> <answer> answer here </answer>.")


def parse_config(defaults, argv):
    """train.py's CLI pattern: --key value / --key=value for every key, typed like its default."""
    return startup.parse_config(defaults, argv, description=__doc__.strip().split("\n\n")[0],
                                source=__file__)


def check_config(cfg):
    """Bad values stop here, before any data or model is loaded."""
    for key, allowed in (("math_prompt", ("azr", "azr_boxed")), ("engine", ("vllm", "hf", "auto"))):
        if cfg[key] not in allowed:
            raise SystemExit(f"--{key} {cfg[key]!r}: expected one of {', '.join(allowed)}")
    # budgets must be > 0; counts (limit, workers) and the seed >= 0
    budgets = ("timeout", "time_limit", "factor", "tokens", "len", "memory_mb", "utilization")
    for key, value in cfg.items():
        if not isinstance(value, (int, float)):
            continue
        if key.endswith(budgets) and value <= 0:
            raise SystemExit(f"--{key} {value}: must be > 0")
        if not key.endswith(budgets) and value < 0:
            raise SystemExit(f"--{key} {value}: must be >= 0")
    benchmark_names(cfg["benchmarks"])
    if cfg["baseline_ckpt"] and cfg["baseline_model"]:
        raise SystemExit("--baseline_ckpt and --baseline_model both name the baseline row: "
                         "give one")
    return cfg


def benchmark_names(spec):
    """all / code / math, or comma-separated names -> [name]; an unknown name stops here."""
    names = {"all": BENCHMARKS, "code": CODE, "math": MATH7}.get(spec)
    if not names:
        names = [part.strip() for part in spec.split(",") if part.strip()]
    unknown = [n for n in names if n not in BENCHMARKS and n != TINY]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}, {TINY} "
                         "(or all, code, math)")
    return list(names)

# ----------------------------------------------------------------------------- loaders


def _records(name, data_dir, cache_dir="out/.tiny"):
    """Raw records in the fetched files' format: data_dir/<name>.jsonl (data.py; tiny: generated
    into cache_dir when data_dir has no tiny.jsonl)."""
    if name == TINY and not os.path.isfile(data.path(name, data_dir)):
        import tinyworld
        return _records(name, os.path.dirname(tinyworld.heldout_benchmark(cache_dir)))
    return data.read_jsonl(data.require(name, data_dir))


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
    """The content of the last \\boxed{...}, or "" without one."""
    box = _last_boxed(text or "")
    if not box:
        return ""
    return box[box.index("{") + 1:-1]


def decode_lcb_tests(field):
    """LCB test lists are JSON text, or base64(zlib(pickle(JSON text))). The pickle holds one str; a
    restricted unpickler that resolves no globals keeps a hostile file from running code."""
    import io
    import pickle
    try:
        return json.loads(field)
    except ValueError:
        class Plain(pickle.Unpickler):
            def find_class(self, module, name):
                raise pickle.UnpicklingError(f"global {module}.{name} refused")
        return json.loads(Plain(io.BytesIO(zlib.decompress(base64.b64decode(field)))).load())


def load_benchmark(name, data_dir, limit=0, cache_dir="out/.tiny"):
    """Plain dicts with "id" and what prompting and scoring need: math {"question", "gold"} (gold
    before normalisation); EvalPlus {"prompt", "entry_point", "canonical", "base_input",
    "plus_input", "atol"}; LCB {"question", "starter_code", "fn_name" (None = stdin), "tests":
    [{"input", "output"}]}; tiny {"task", "problem"} (the row plus verify.validate's normalised
    program and gold)."""
    try:
        rows = _records(name, data_dir, cache_dir)[:limit or None]
        if name == TINY:
            return _tiny_items(rows)
        return _items(name, rows)
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise SystemExit(f"{name}: a record lacks a field of the expected format ({e!r})") from None


def _tiny_items(rows):
    """Tiny rows (tinyworld.problem_rows) validated in the sandbox, one batched call per task type:
    the problem is the row's proposal plus every key of the verifier's result but valid/reason (the
    gold output(s) and whatever else scoring needs)."""
    keys = {"code_i": ("program", "input"), "code_o": ("program", "input"),
            "code_f": ("program", "inputs", "message")}
    items = [None] * len(rows)
    for task in TASKS:
        index = [k for k, row in enumerate(rows) if row["task"] == task]
        proposals = [{key: rows[k][key] for key in keys[task]} for k in index]
        for k, proposal, result in zip(index, proposals, verify.validate(task, proposals)):
            if not result["valid"]:
                raise SystemExit(f"tiny: problem {rows[k]['id']} is not valid ({result['reason']})")
            gold = {key: value for key, value in result.items() if key not in ("valid", "reason")}
            items[k] = dict(id=rows[k]["id"], task=task, problem=dict(proposal, **gold))
    if None in items:
        raise SystemExit(f"tiny: a row has an unknown task type; expected one of {TASKS}")
    return items


def _items(name, rows):
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
            tests = decode_lcb_tests(r["public_test_cases"])
            tests += decode_lcb_tests(r["private_test_cases"])
            items.append(dict(id=r["question_id"], question=r["question_content"],
                              starter_code=r.get("starter_code") or "",
                              fn_name=meta.get("func_name"),
                              tests=[{"input": t["input"], "output": t["output"]} for t in tests]))
        else:
            if name in ("math500", "minerva_math"):
                # AZR: the last \boxed{} of the solution
                gold = _unbox(r.get("solution")) or str(r.get("answer", ""))
            elif name == "gsm8k":
                gold = r["answer"].split("####")[-1].strip()
            elif name == "olympiadbench":
                gold = r["final_answer"][0].strip().strip("$")
            else:
                gold = str(r["answer"])
            items.append(dict(id=str(r.get("id", r.get("unique_id", r.get("idx", k)))),
                              question=r.get("question") or r.get("problem"), gold=gold))
    return items


# EvalPlus stores MBPP+ inputs as JSON; these tasks take tuples/sets/complex (evalplus/data/mbpp.py
# facts)
_MBPP_TUPLE_ARGS = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596,
                    616, 630, 726, 740, 744, 809}
_MBPP_TUPLE_LISTS = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}


def _deep_tuple(value):
    """Lists at every depth -> tuples."""
    if isinstance(value, list):
        return tuple(_deep_tuple(e) for e in value)
    return value


def _set_or_empty_dict(x):
    # EvalPlus turns an empty list into {} (a dict), kept as is
    if isinstance(x, list) and x:
        return set(x)
    return {}


def _tuple_if_list(x):
    if isinstance(x, list):
        return tuple(x)
    return x


def _mbpp_types(task_id, inputs):
    """An MBPP+ task's inputs (JSON lists) with the tuples, sets and complex numbers its function
    takes."""
    n = int(task_id.split("/")[-1])
    if n in _MBPP_TUPLE_ARGS:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in _MBPP_TUPLE_LISTS:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in (75, 413, 444, 753):
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in (106, 750):
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[_set_or_empty_dict(x) for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(_tuple_if_list(x) for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}] + inp[1:] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in (580, 615, 791):
        return [_deep_tuple(inp) for inp in inputs]
    return inputs

# -------------------------------------------------------------------- prompts and answer extraction


def make_prompt(name, item, cfg):
    """AZR's evaluation prompts (docs/eval.md §3): R1 <think>/<answer> for math and LCB;
    EvalPlus's instruction + primed python fence (as AZR's converted checkpoints' plain chat
    template renders it); tiny: the student prompt of training (verify.student_prompt)."""
    if name == TINY:
        return verify.student_prompt(item["task"], item["problem"])
    if name in CODE[:2]:
        return ("Please provide a self-contained Python script that solves the following problem "
                f"in a markdown code block:\n```\n{item['prompt'].strip()}\n```\n\nBelow is a "
                "Python script with a self-contained function that solves the problem and passes "
                "corresponding tests:\n```python\n")
    if name == "livecodebench":
        if item["fn_name"]:
            fmt = ("You will use the following starter code to write the solution to the problem "
                   "and enclose your code within delimiters.\n```python\n"
                   f"{item['starter_code']}\n```")
        else:
            fmt = ("Read the inputs from stdin solve the problem and write the answer to stdout "
                   "(do not directly test on the sample inputs). Enclose your code within "
                   "delimiters as follows. Ensure that when the python program runs, it reads the "
                   "inputs, runs the algorithm and writes output to STDOUT.\n"
                   "```python\n# YOUR CODE HERE\n```")
        task = ("You will be given a question (problem specification) and will generate a correct "
                "Python program that matches the specification and passes all tests.\n\n"
                f"Question: {item['question']}\n\n{fmt}")
        return f"{R1} User: {task}\nAssistant: <think>"
    question = item["question"]
    if item["gold"].strip().lower() in ("yes", "no"):
        question += " (Yes or No)"
    elif item["gold"].strip().lower() in ("true", "false"):
        question += " (True or False)"
    boxed = cfg["math_prompt"] == "azr_boxed"
    hint = " The final answer in <answer> </answer> is extracted from \\boxed{}." * boxed
    return f"{R1}{hint} User: {question}\nAssistant: <think>"


def extract_math(response):
    """AZR's extract_azr_answer: the last <answer>, its last \\boxed{} if it has one; else the last
    \\boxed{} anywhere; else the first \\[ ... \\]; else "" (wrong). Returns the box's content:
    strip_string's trailing \\text rule would otherwise eat the wrapper's closing brace ([ours]; AZR
    keeps the \\boxed)."""
    if "<answer>" in response:
        text = response.split("<answer>")[-1].split("</answer>")[0]
        if "boxed" not in text:
            return text.replace("\\[", "").replace("\\]", "").strip()
        return _unbox(text)
    if "boxed" in response:
        return _unbox(response)
    # the first \[ and the first \] after it (what re.search(r"\\\[(.*?)\\\]") finds) in one pass:
    # the regex tried every later \[ again when none was closed (30,000 of them: 17 s)
    start = response.find("\\[")
    end = response.find("\\]", start + 2)
    if start < 0 or end < 0:
        return ""
    return response[start + 2:end].strip()


def extract_code(name, response):
    """EvalPlus: the completion continues an open ```python fence: cut at the closing fence, keep
    the longest prefix that parses, then only imports/defs/classes/assignments (drops demo prints
    and asserts). LCB: the last ```python block inside <answer> (or the whole answer when it has no
    fence)."""
    import ast
    if name == "livecodebench":
        if "<answer>" not in response:
            return ""
        answer = response.split("<answer>")[-1].split("</answer>")[0]
        blocks = re.findall(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", answer, re.S)
        if not blocks:
            return answer.strip()
        return blocks[-1]
    lines = response.split("```")[0].split("\n")
    for cut in range(len(lines), 0, -1):
        try:
            tree = ast.parse("\n".join(lines[:cut]))
        except (SyntaxError, ValueError):
            continue
        except (RecursionError, MemoryError):
            return ""
        keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                ast.Assign, ast.AnnAssign)
        tree.body = [node for node in tree.body if isinstance(node, keep)]
        try:
            return ast.unparse(tree)
        except RecursionError:
            return ""
    return ""


def extract_tiny(task, response):
    """The student's answer as training parses it (verify.parse_student); "" for a format error."""
    return verify.parse_student(task, response) or ""


def score_tiny(items, answers):
    """Tiny answers [(item index, answer)] graded by verify.grade in the sandbox, one call per task
    type, with the validated problem (its gold) plus the answer; "" is a format error."""
    verdicts = [None] * len(answers)
    for task in TASKS:
        index = [n for n, (k, _) in enumerate(answers) if items[k]["task"] == task]
        attempts = []
        for n in index:
            k, answer = answers[n]
            attempts.append(dict(items[k]["problem"], answer=answer or None))
        if not attempts:
            continue
        # the training verifier's verdict on each answer
        for n, result in zip(index, verify.grade(task, attempts)):
            verdicts[n] = {"correct": bool(result["correct"]), "reason": result["reason"]}
    return verdicts


def score(name, items, answers, cfg):
    """One benchmark, many answers: [(item index, extracted answer or program)] -> [{"correct",
    "reason", ...}]."""
    if name == TINY:
        return score_tiny(items, answers)
    if name in MATH7:
        return _score_math(name, items, answers, cfg)
    todo = [(n, k, code) for n, (k, code) in enumerate(answers) if code.strip()]
    verdicts = [{"correct": False, "base": False, "reason": "no code"} for _ in answers]
    programs = [(k, code) for _, k, code in todo]
    if name == "livecodebench":
        done = graders.score_lcb(items, programs, cfg)
    else:
        done = graders.score_evalplus(name, items, programs, cfg)
    for (n, _, _), v in zip(todo, done):
        verdicts[n] = v
    return verdicts


def _score_math(name, items, answers, cfg):
    """Math answers: AZR's normalisation of gold and answer, then math-verify."""
    # AZR: no unit stripping for Minerva (deviation 3 for its golds)
    skip_unit = name == "minerva_math"
    pairs = []
    for k, answer in answers:
        gold = graders.strip_string(items[k]["gold"], skip_unit)
        prediction = ""
        if answer:
            prediction = graders.strip_string(answer, skip_unit)
        pairs.append((gold, prediction))
    verdicts = []
    for correct in graders.score_math(pairs, cfg["math_timeout"], cfg["workers"], name):
        reason = ""
        if not correct:
            reason = "not equivalent"
        verdicts.append({"correct": correct, "reason": reason})
    return verdicts


# ----------------------------------------------------------------------- evaluation of a checkpoint


def _state(folder, flag):
    try:
        with open(os.path.join(folder, "state.json")) as f:
            state = json.load(f)
        state["config"], state["members"]
        return state
    except (OSError, ValueError, KeyError, TypeError) as e:
        hint = ""
        if os.path.isdir(folder):
            steps = sorted(n for n in os.listdir(folder) if n.startswith("step_"))
            if steps:
                hint = f"; did you mean {os.path.join(folder, steps[-1])}?"
        raise SystemExit(f"--{flag} {folder!r} is not a checkpoint folder "
                         f"(out_dir/step_NNNNNN with state.json): {e}{hint}")


def engine_settings(cfg):
    """(engine kind, device, dtype) for cfg's engine / device / dtype, "" and auto resolved."""
    import importlib.util
    import torch
    cuda = torch.cuda.is_available()
    engine = cfg["engine"]
    if engine == "auto" and cuda and importlib.util.find_spec("vllm"):
        engine = "vllm"
    elif engine == "auto":
        engine = "hf"
    # with vLLM our copy of the model only writes adapter files: keep it off the GPU, where vLLM
    # holds its own
    device = cfg["device"]
    if not device and cuda and engine == "hf":
        device = "cuda"
    elif not device:
        device = "cpu"
    dtype = cfg["dtype"]
    if not dtype and cuda:
        dtype = "bfloat16"
    elif not dtype:
        dtype = "float32"
    return engine, device, dtype


def load_model(model_name, run, roles, cfg):
    """A base model (hub id, folder, tiny or tiny-warm) with one LoRA slot per role in the run's
    LoRA shape, all at their zero init. -> (path, model, tokenizer, members)."""
    import population
    import tinyworld
    _, device, dtype = engine_settings(cfg)
    path = tinyworld.model_folder(model_name, cfg["model_cache"])
    try:
        base, tokenizer = population.load_base(path, dtype, device)
    except (OSError, ValueError) as e:
        raise SystemExit(f"model {model_name!r}: cannot load it ({type(e).__name__}: {e})")
    model, members = population.init_population(base, tokenizer, run, roles)
    return path, model, tokenizer, members


def start_engine(path, model, tokenizer, members, run, cfg):
    import engines
    kind, _, dtype = engine_settings(cfg)
    engine_cfg = dict(lora_rank=run["lora_rank"], max_model_len=cfg["max_model_len"],
                      seed=cfg["seed"], dtype=dtype,
                      gpu_memory_utilization=cfg["gpu_memory_utilization"])
    return engines.make_engine(kind, path, model, tokenizer, members, engine_cfg)


def load_rows(cfg):
    """One engine for the checkpoint's members, the baseline's adapter and the base: two extra
    zero-initialised "both" slots (B = 0 is exactly the base; the first is overwritten by the
    baseline). -> (engine, {row: slot}, {row: role}, state, the checkpoint's archive)."""
    import population
    state = _state(cfg["ckpt"], "ckpt")
    run, roles = state["config"], [m["role"] for m in state["members"]]
    baseline = cfg["baseline_ckpt"] and _state(cfg["baseline_ckpt"], "baseline_ckpt")
    if baseline and baseline["config"].get("model") != run.get("model"):
        raise SystemExit(f"--baseline_ckpt {cfg['baseline_ckpt']} was trained on another base "
                         "model than --ckpt")
    extra_roles = ["both"] * (1 + bool(baseline))
    path, model, tokenizer, members = load_model(cfg["model"] or run["model"], run,
                                                 roles + extra_roles, cfg)
    own, extra = members[:len(roles)], members[len(roles):]
    try:
        _, problems = population.load_checkpoint(cfg["ckpt"], model, own, {})
        if cfg["baseline_ckpt"]:
            population.load_checkpoint(cfg["baseline_ckpt"], model, extra[:1], {})
    except ValueError as e:
        raise SystemExit(str(e)) from None
    rows = {m["name"]: m["name"] for m in own}
    if cfg["baseline_ckpt"]:
        rows["baseline"] = extra[0]["name"]
    rows["base"] = extra[-1]["name"]
    engine = start_engine(path, model, tokenizer, own + extra, run, cfg)
    return engine, rows, {m["name"]: m["role"] for m in own}, state, problems


def close_engine(engine):
    """Shut the engine down and free its model's memory before another model loads."""
    import gc
    import engines
    import torch
    engines.close_engine(engine)
    engine.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def load_baseline_model(cfg, run):
    """--baseline_model: any model (a hub id or folder, e.g. a full fine-tune such as AZR's
    released checkpoint) as the baseline row, in an engine of its own: one zero LoRA slot (B = 0
    is exactly the model). -> (engine, {"baseline": slot})."""
    path, model, tokenizer, members = load_model(cfg["baseline_model"], run, ["both"], cfg)
    engine = start_engine(path, model, tokenizer, members, run, cfg)
    return engine, {"baseline": members[0]["name"]}


def average(values):
    """The table's averages: the mean of the scores present (None = not run), to 2 decimals."""
    value = logs.mean(values)
    if value is None:
        return None
    return round(value, 2)


def summarize(scores, roles):
    """Per row: averages (code, math over AZR's six, math over seven; overall = the mean of code and
    math-7, the paper's ten benchmarks, and overall_azr = the mean of code and math-6, AZR's); table
    rows: base, baseline, population mean, best teacher, best student, weakest member, chosen by
    overall: the paper's claims ("even the weakest member beats the baseline on aggregate") are
    over its three code and seven math benchmarks. [ours] The paper does not write its aggregate
    out; we take AZR's form, the mean of the code and math averages."""
    for row_scores in scores.values():
        row_scores["code_avg"] = average(row_scores.get(b) for b in CODE)
        row_scores["math_avg6"] = average(row_scores.get(b) for b in MATH6)
        row_scores["math_avg7"] = average(row_scores.get(b) for b in MATH7)
        row_scores["overall"] = average([row_scores["code_avg"], row_scores["math_avg7"]])
        row_scores["overall_azr"] = average([row_scores["code_avg"], row_scores["math_avg6"]])
        # only the tiny benchmark was run
        if row_scores["overall"] is None:
            row_scores["overall"] = row_scores.get(TINY)
    members = [r for r in roles if r in scores]
    keys = set()
    for r in members:
        keys.update(scores[r])
    table = {"base": dict(scores["base"], row="base")}
    if "baseline" in scores:
        table["baseline"] = dict(scores["baseline"], row="baseline")
    mean_row = {key: average(scores[r].get(key) for r in members) for key in sorted(keys)}
    table["population mean"] = dict(mean_row, row="mean")

    def overall(r):
        # a member without an overall ranks below every scored one
        if scores[r]["overall"] is None:
            return -1.0
        return scores[r]["overall"]
    picks = (("best teacher", "teacher", max), ("best student", "student", max),
             ("weakest member", None, min))
    for label, pool, pick in picks:
        candidates = [r for r in members if pool is None or roles[r] in (pool, "both")]
        if candidates:
            r = pick(candidates, key=overall)
            table[label] = dict(scores[r], row=r)
    return table


def _cell(value):
    if value is None:
        return "-"
    return f"{value:.1f}"


def markdown(table, names, title, skipped=()):
    """eval.md: the table's rows under one column per benchmark (and tiny task type) and the
    averages."""
    columns = list(names)
    if TINY in names:
        columns += [f"{TINY}_{task}" for task in TASKS]
    note = ""
    if any(name in BENCHMARKS for name in names):
        columns += ["code_avg", "math_avg6", "math_avg7", "overall", "overall_azr"]
        note = (" math_avg6 = AZR's six math benchmarks, math_avg7 adds GSM8K; overall = the mean "
                "of code_avg and math_avg7 (the paper's ten benchmarks; it picks the best and "
                "weakest rows), overall_azr = the mean of code_avg and math_avg6 (AZR's).")
    if skipped:
        note += (" Averages cover the benchmarks shown; not evaluated (no data file): "
                 f"{', '.join(skipped)}.")
    lines = [f"# {title}", "", f"Greedy pass@1 (%).{note}", "",
             "| | member | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 2) + "|"]
    for label, row in table.items():
        cells = " | ".join(_cell(row.get(column)) for column in columns)
        lines.append(f"| {label} | {row['row']} | " + cells + " |")
    return "\n".join(lines) + "\n"


def _percent(verdicts):
    """pass@1 in %, 2 decimals; 0 for no verdicts."""
    return round(100.0 * sum(v["correct"] for v in verdicts) / max(1, len(verdicts)), 2)


def _save(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _extract_answers(name, items, texts):
    """The answer or program in each response; texts[n] answers items[n % len(items)]."""
    answers = []
    for n, text in enumerate(texts):
        if name == TINY:
            answers.append(extract_tiny(items[n % len(items)]["task"], text))
        elif name in MATH7:
            answers.append(extract_math(text))
        else:
            answers.append(extract_code(name, text))
    return answers


def _evaluate_benchmark(name, items, engine, rows, budget, cfg, scores, items_out, samples):
    """Generate every row's answers to one benchmark, score them, and fill in scores[row],
    items_out[name] and samples[name]."""
    import engines
    prompts = [make_prompt(name, it, cfg) for it in items]
    # every row answers every prompt: row j's answers are texts[j·len(items) : (j+1)·len(items)]
    requests = []
    for slot in rows.values():
        requests += [(prompt, slot) for prompt in prompts]
    outs = engines.generate(engine, requests, temperature=0.0, top_p=1.0,
                            max_new_tokens=budget.get(name, cfg["evalplus_tokens"]),
                            seed=cfg["seed"])
    texts = [o["text"] for o in outs]
    answers = _extract_answers(name, items, texts)
    verdicts = score(name, items, [(n % len(items), a) for n, a in enumerate(answers)], cfg)
    # a second engine's rows (--baseline_model) join the first one's
    items_out.setdefault(name, {"ids": [it["id"] for it in items]})
    samples.setdefault(name, {})
    for j, row in enumerate(rows):
        first = j * len(items)
        part = verdicts[first:first + len(items)]
        scores[row][name] = _percent(part)
        items_out[name][row] = [int(v["correct"]) for v in part]
        # pass@1 per task type too
        if name == TINY:
            for task in TASKS:
                mine = [v for it, v in zip(items, part) if it["task"] == task]
                scores[row][f"{TINY}_{task}"] = _percent(mine)
        # the first two items: the text shows what went wrong
        samples[name][row] = []
        for k in range(min(2, len(items))):
            samples[name][row].append({"id": items[k]["id"],
                                       "response": texts[first + k][-2000:],
                                       "answer": answers[first + k][:1000], **part[k]})


def evaluate(cfg):
    """Load, generate (one batched call per benchmark for every row), score, write eval.json and
    eval.md."""
    # no benchmark code runs without filesystem isolation, unless the user accepts the risk by name
    verify.require_isolation(cfg["unsafe_sandbox_without_filesystem_isolation"])
    names = benchmark_names(cfg["benchmarks"])
    data, skipped = {}, {}
    # data problems first: no model is loaded for a run that cannot finish
    for name in names:
        try:
            data[name] = load_benchmark(name, cfg["data_dir"], cfg["limit"], cfg["model_cache"])
        except FileNotFoundError as e:
            if cfg["benchmarks"] not in ("all", "code", "math"):
                raise SystemExit(str(e)) from None
            skipped[name] = str(e)
            print(f"skipping {name}: {e}", flush=True)
    engine, rows, roles, state, _ = load_rows(cfg)
    # new tokens per answer: EvalPlus's budget unless named here
    budget = {n: cfg["math_tokens"] for n in MATH7}
    budget["livecodebench"] = cfg["lcb_tokens"]
    budget[TINY] = cfg["tiny_tokens"]
    scores = {r: {} for r in rows}
    items_out, samples = {}, {}
    for name in tqdm(list(data), desc="benchmarks"):
        _evaluate_benchmark(name, data[name], engine, rows, budget, cfg, scores, items_out, samples)
    if cfg["baseline_model"]:
        # another model: its own engine, after the first one is shut down (GPU memory)
        close_engine(engine)
        engine, rows = load_baseline_model(cfg, state["config"])
        scores["baseline"] = {}
        for name in tqdm(list(data), desc="baseline model"):
            _evaluate_benchmark(name, data[name], engine, rows, budget, cfg, scores, items_out,
                                samples)
        close_engine(engine)
    table = summarize(scores, roles)
    out = cfg["out"] or cfg["ckpt"]
    os.makedirs(out, exist_ok=True)
    result = {
        "ckpt": cfg["ckpt"],
        "baseline_ckpt": cfg["baseline_ckpt"],
        "baseline_model": cfg["baseline_model"],
        "step": state.get("step"),
        "config": cfg,
        "benchmarks": list(data),
        "skipped": skipped,
        "n_items": {n: len(d) for n, d in data.items()},
        "roles": roles,
        "scores": scores,
        "table": table,
        "items": items_out,
        "samples": samples,
    }
    _save(os.path.join(out, "eval.json"), json.dumps(result, indent=1))
    title = f"Evaluation of {cfg['ckpt']} (step {state.get('step')})"
    text = markdown(table, list(data), title, list(skipped))
    _save(os.path.join(out, "eval.md"), text)
    print(text, flush=True)
    return result


# ------------------------------------------------------------- cross-play (the paper's figure 12)

def crossplay(cfg):
    """Every student (and the base, and a --baseline_ckpt's adapter) on fresh problems of every
    teacher of one checkpoint, not only the pairs matchmaking happened to draw. The teachers
    propose as in training (train.plan_step's references from the checkpoint's archive, the run's
    sampling settings), the sandbox keeps the valid problems, every solver attempts every valid
    problem `crossplay_samples` times, and rollout.grade grades them. Writes crossplay.json
    (matrix[solver][teacher] = solve rate over that teacher's valid problems, None without one;
    the same per task type; each teacher's valid problems), crossplay.md and crossplay.png (the
    heat map) to --out (default: the checkpoint folder)."""
    import random
    import engines
    verify.require_isolation(cfg["unsafe_sandbox_without_filesystem_isolation"])
    engine, rows, roles, state, problems = load_rows(cfg)
    # the run's settings, a key it did not save at train.py's default
    run = dict(train.config, **state["config"])
    run["propose_per_task"] = cfg["crossplay_problems"] or run["propose_per_task"]
    run["solve_samples"] = cfg["crossplay_samples"] or run["solve_samples"]
    teachers = [m for m in state["members"] if m["role"] in ("teacher", "both")]
    if not teachers:
        raise SystemExit(f"--ckpt {cfg['ckpt']}: no teacher in this population")
    if not problems["code_i"] + problems["code_o"]:
        raise SystemExit(f"--ckpt {cfg['ckpt']}: its archive holds no code_i/code_o program for "
                         "the teachers' references")
    solvers = {row: slot for row, slot in rows.items() if roles.get(row) != "teacher"}

    def generate(requests, purpose):
        seed = rollout.derive_seed(cfg["seed"], "crossplay", purpose)
        return engines.generate(engine, requests, run["temperature"], run["top_p"],
                                run["max_new_tokens"], seed)

    def check(fn, jobs):
        return rollout.run_verify(fn, jobs, run["validate_timeout"])
    rng = random.Random(cfg["seed"])
    # no students: plan_step draws no matches, only the teachers' references
    slots, _, shown = train.plan_step(dict(run, baseline=False), state["members"], teachers, [],
                                      problems, rng)
    proposals = rollout.propose(slots, shown, problems, engine["tokenizer"], run, generate)
    rollout.validate(proposals, state.get("step"), check)
    matches = []
    for t in teachers:
        for slot in solvers.values():
            matches.append({"teacher": t["name"], "student": slot})
    topups = {(i, task): [] for i in range(len(matches)) for task in TASKS}
    attempts = rollout.solve(matches, proposals, topups, problems, run, generate)
    rollout.grade(attempts, check)
    result = crossplay_result(cfg, state, teachers, solvers, proposals, attempts)
    out = cfg["out"] or cfg["ckpt"]
    os.makedirs(out, exist_ok=True)
    _save(os.path.join(out, "crossplay.json"), json.dumps(result, indent=1))
    _save(os.path.join(out, "crossplay.md"), crossplay_markdown(result))
    crossplay_heatmap(result, os.path.join(out, "crossplay.png"))
    print(json.dumps({k: result[k] for k in ("ckpt", "step", "matrix")}), flush=True)
    return result


def crossplay_result(cfg, state, teachers, solvers, proposals, attempts):
    """The matrices of crossplay() from its graded attempts."""
    names = [t["name"] for t in teachers]
    result = {"ckpt": cfg["ckpt"], "step": state.get("step"), "teachers": names,
              "solvers": list(solvers), "matrix": {}, "per_task": {}, "attempts": {},
              "valid_problems": {}, "validity": {}}
    for t in names:
        mine = [p for p in proposals if p["teacher"] == t]
        result["validity"][t] = logs.mean(p["valid"] for p in mine)
        result["valid_problems"][t] = {}
        for task in TASKS:
            made = [p["problem"]["program"] for p in mine if p["valid"] and p["task"] == task]
            result["valid_problems"][t][task] = made
    for row, slot in solvers.items():
        result["matrix"][row], result["per_task"][row], result["attempts"][row] = {}, {}, {}
        for t in names:
            mine = [a for a in attempts if a["student"] == slot and a["teacher"] == t]
            result["matrix"][row][t] = logs.mean(a["correct"] for a in mine)
            result["attempts"][row][t] = len(mine)
            result["per_task"][row][t] = {}
            for task in TASKS:
                rate = logs.mean(a["correct"] for a in mine if a["task"] == task)
                result["per_task"][row][t][task] = rate
    return result


def crossplay_markdown(result):
    teachers = result["teachers"]
    lines = [f"# Cross-play of {result['ckpt']} (step {result['step']})", "",
             "Solve rate of each solver (rows) on fresh problems of each teacher (columns), over "
             "that teacher's valid problems; - = the teacher made no valid problem.", "",
             "| solver | " + " | ".join(teachers) + " |", "|---" * (len(teachers) + 1) + "|"]
    for row, cells in result["matrix"].items():
        shown = []
        for t in teachers:
            if cells[t] is None:
                shown.append("-")
            else:
                shown.append(f"{cells[t]:.2f}")
        lines.append(f"| {row} | " + " | ".join(shown) + " |")
    counts = []
    for t in teachers:
        made = sum(len(programs) for programs in result["valid_problems"][t].values())
        counts.append(f"{t} {made} (validity {result['validity'][t]:.2f})")
    lines += ["", "Valid problems per teacher: " + ", ".join(counts) + "."]
    return "\n".join(lines) + "\n"


def crossplay_heatmap(result, path):
    """Solvers x teachers, solve rate as colour and number (NaN, blank: no valid problem)."""
    import math
    import report
    teachers, solvers = result["teachers"], result["solvers"]
    grid = []
    for row in solvers:
        cells = []
        for t in teachers:
            value = result["matrix"][row][t]
            if value is None:
                value = math.nan
            cells.append(value)
        grid.append(cells)

    def draw(ax):
        image = ax[0].imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax[0].set_xticks(range(len(teachers)), teachers, fontsize=8)
        ax[0].set_yticks(range(len(solvers)), solvers, fontsize=8)
        ax[0].set_xlabel("teacher", fontsize=8)
        ax[0].set_ylabel("solver", fontsize=8)
        for i, cells in enumerate(grid):
            for j, value in enumerate(cells):
                if not math.isnan(value):
                    ax[0].text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                               color="white")
        ax[0].set_title(f"cross-play at step {result['step']}", fontsize=9)
        ax[0].figure.colorbar(image, ax=ax[0], label="solve rate")
    report.figure(path, 1, draw, 1.2 + 0.9 * len(teachers))


# tiny task type -> (answer fence, the problem's key holding the gold)
TINY_GOLD_FENCES = {"code_o": ("output", "output"), "code_i": ("input", "input"),
                    "code_f": ("python", "program")}


def selfcheck(cfg):
    """Gold answers (inside an <answer>\\boxed{}) and canonical solutions scored by this file's own
    graders, for every benchmark file in data_dir (tiny: its golds in a student's answer fence) ->
    {benchmark: {"records", "passed", "failed": [ids]}}."""
    report = {}
    for name in benchmark_names(cfg["benchmarks"]):
        present = os.path.isfile(os.path.join(cfg["data_dir"], f"{name}.jsonl"))
        # LCB ships no reference solutions; tiny is generated when absent
        if (not present and name != TINY) or name == "livecodebench":
            continue
        items = load_benchmark(name, cfg["data_dir"], cfg["limit"], cfg["model_cache"])
        # tiny: each gold in a student's answer fence, parsed as training parses it
        if name == TINY:
            answers = []
            for it in items:
                fence, gold = TINY_GOLD_FENCES[it["task"]]
                response = f"x </think> <answer>```{fence}\n{it['problem'][gold]}\n```</answer>"
                answers.append(extract_tiny(it["task"], response))
        elif name in MATH7:
            answers = []
            for it in items:
                response = f"<think>x</think> <answer>\\boxed{{{it['gold']}}}</answer>"
                answers.append(extract_math(response))
        else:
            answers = [it["canonical"] for it in items]
        verdicts = score(name, items, list(enumerate(answers)), cfg)
        failed = [it["id"] for it, v in zip(items, verdicts) if not v["correct"]]
        report[name] = {"records": len(items), "passed": len(items) - len(failed), "failed": failed}
    return report


if __name__ == "__main__":
    if sys.argv[1:2] == ["report"]:
        import report
        report.main(sys.argv[2:])
    elif sys.argv[1:2] == ["crossplay"]:
        cfg = check_config(parse_config(config, sys.argv[2:]))
        if not cfg["ckpt"]:
            raise SystemExit("crossplay needs --ckpt (a checkpoint folder out_dir/step_NNNNNN)")
        crossplay(cfg)
    elif sys.argv[1:2] == ["fetch"]:
        description = data.__doc__.strip().split("\n\n")[0]
        data.fetch(startup.parse_config(data.config, sys.argv[2:], description, data.__file__))
    elif sys.argv[1:2] == ["selfcheck"]:
        cfg = check_config(parse_config(config, sys.argv[2:]))
        print(json.dumps(selfcheck(cfg)), flush=True)
    else:
        cfg = check_config(parse_config(config, sys.argv[1:]))
        if not cfg["ckpt"]:
            raise SystemExit("--ckpt is required (a checkpoint folder out_dir/step_NNNNNN); "
                             "see --help")
        evaluate(cfg)
