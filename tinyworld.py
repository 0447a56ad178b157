"""A laptop-scale PopuLoRA world: a tiny Qwen2 base warm-started on a synthetic corpus, so that on
CPU its teachers write some valid programs and the self-play rewards carry signal (issue 7).

  # build (or reuse) the cached warm base in out/.tiny, print its folder
  python tinyworld.py [CACHE_DIR]
  # baseline vs 4T+4S on it, then evaluate.py report for both
  python bench/tiny_world.py
  # (cache: out_dir/.tiny)
  python train.py --model tiny-warm --seed_archive out/.tiny/tiny-warm-<key>/seeds.jsonl ...

What is here:
- a seeded generator of small Python programs `f` over ints, strings, lists and dicts, from a table
  of statement templates with a complexity level (1 straight-line, 2 + branches, 3 + loops, 4 +
  nested loop/branch) and a number of statements; a program can also be grown from an earlier one
  by one statement, and its teacher transcript then shows the parent among the references ("build
  on snippet j"): the way a teacher can build on the archive. Inputs are random literals; outputs
  come from verify.validate, so every clean example is valid by the project's own rules; code_f
  messages describe the statements in words;
- complete transcripts in the project's real format: verify.teacher_prompt / verify.student_prompt
  + a response `<think> ... </think> <answer> fences </answer>` + end of text, for the six (role,
  task) pairs, with a low rate (`noise`) of wrong answers, programs with a line dropped (mostly
  invalid) and a missing closing tag;
- the tokenizer: byte-level BPE (build_tiny's byte alphabet and special tokens, so any text
  encodes) with 1024 merges learned on the corpus, plus one added token per constant chunk of
  verify.py's prompt templates. The prompts are verify.py's text unchanged, so train.py needs no
  knob; the tiny model reads ~10 tokens for ~2 kB of boilerplate (the issue's "compact prompt",
  done in the vocabulary). Raw bytes measured ~650 tokens/transcript and ~500 tokens/s of training
  on this shared CPU; the BPE cuts tokens ~6x;
- the warm start: next-token loss (response tokens weight 1, prompt tokens 0.25), AdamW, cosine
  lr, a fixed number of steps: deterministic given the seed and thread count; cached under
  cache_dir keyed by a hash of every setting, written atomically, with seeds.jsonl (a start-up
  archive from the same world, for --seed_archive).
- the held-out benchmark (heldout_benchmark, `evaluate.py --benchmarks tiny`): 200 problems per
  task type from a generator seed the warm start never used, none of whose programs appears
  anywhere in its corpus or seed archive (40% of raw draws would: short programs repeat, so they
  are filtered out); training pools in AZR's seed format drawn the same way and disjoint from it
  (pool_rows; stream_pool, a cached pool large enough to serve as a stream of fresh problems for
  bench/learning_check.py); the statistics every held-out number is reported with (Wilson
  intervals, paired differences with the sign test, unbiased pass@k).
Measured on the default settings (step 0 of 4T+4S through train.py, temperature 1,
`bench/tiny_world.py --probe`): teacher proposals 75% valid (code_i 81%, code_o 81%, code_f 62%),
student solve rate 14% (code_i 6%, code_o 10%, code_f 26%): inside the issue's aim (>= 30% valid,
solve rate in (0.1, 0.9)). The build: 4,000 programs, 24,000 transcripts, 4,000 steps (4.6 M
tokens, final loss 1.03), 13 minutes here at 6.2 k tokens/s under load 3-4 (~12 k tokens/s on 2
free cores: ~7 minutes). What got it there: loading the tokenizer as saved
(population.load_tokenizer; with Qwen's pre-split the same weights gave 0-15% valid) and 10x the
training (400 steps on 600 programs: 24% valid, 4% solved; 1,500 on 1,500: 65% / 7%). Student
code_f grows most with training (it turns the message into code).
Not here: any RL (train.py does that), any claim that the tiny model reasons: it learns program
shapes and guesses.
"""
import fcntl
import hashlib
import json
import math
import os
import random
import re
import shutil
import string
import sys
import tempfile
import time

import torch

import population
import verify

# ------------------------------------------------- settings (all of them go in the cache key)
WORLD = dict(seed=0, programs=4000, vocab_size=1024, levels=4, max_statements=4, references=3,
             noise=0.06, grow_prob=0.35)
MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
             # head_dim 32: the smallest head size vLLM's CPU attention accepts
             num_key_value_heads=2,
             max_position_embeddings=32768, rope_theta=10000.0, tie_word_embeddings=False,
             initializer_range=0.02)
TRAIN = dict(steps=4000, lr=3e-3, warmup=20, batch_tokens=1200, prompt_weight=0.25, threads=2,
             seed=0)
# bump when the generator or the training code changes what gets built
VERSION = 2

# ------------------------------------------------- the program generator
# (level, input type, output type, template, description). $a = the statement's input variable,
# $d = its output, $k = a small int constant or an int argument, $p = a constant >= 2, $c/$e =
# letters, $w = a short word.
OPS = [
    (1, "int", "int", "$d = $a * $k", "multiply by $k"),
    (1, "int", "int", "$d = $a + $k", "add $k"),
    (1, "int", "int", "$d = $a % $p", "take it modulo $p"),
    (1, "int", "int", "$d = abs($a - $k)", "distance to $k"),
    (1, "int", "str", "$d = str($a)", "turn it into text"),
    (1, "int", "list", "$d = [$a, $a + $k, $a * 2]", "make a list of three numbers from it"),
    (2, "int", "int",
     "if $a % 2 == 0:\n"
     "    $d = $a // 2\n"
     "else:\n"
     "    $d = $a * 3 + 1",
     "one Collatz step"),
    (2, "int", "int", "$d = $a if $a > $k else -$a", "keep it if above $k, else negate"),
    (3, "int", "int",
     "$d = 0\n"
     "for i in range(abs($a) % $p + 1):\n"
     "    $d += i * $k",
     "sum a short range times $k"),
    (3, "int", "list",
     "$d = []\n"
     "for i in range(abs($a) % 5):\n"
     "    $d.append(i * $k)",
     "list multiples of $k"),
    (4, "int", "int",
     "$d = 0\n"
     "for i in range(abs($a) % 6 + 1):\n"
     "    if i % 2 == 0:\n"
     "        $d += i\n"
     "    else:\n"
     "        $d -= $k",
     "alternate adding and subtracting"),
    (1, "str", "str", "$d = $a[::-1]", "reverse the text"),
    (1, "str", "str", "$d = $a.upper()", "upper-case it"),
    (1, "str", "int", "$d = len($a)", "count its characters"),
    (1, "str", "str", "$d = $a + '$w'", "append '$w'"),
    (1, "str", "str", "$d = ''.join(sorted($a))", "sort its letters"),
    (1, "str", "str", "$d = $a.replace('$c', '$e')", "replace '$c' by '$e'"),
    (1, "str", "int", "$d = $a.count('$c')", "count the letter '$c'"),
    (1, "str", "list", "$d = [ord(ch) % $p for ch in $a]", "letter codes modulo $p"),
    (2, "str", "str", "$d = $a.upper() if len($a) > $k else $a",
     "upper-case it when longer than $k"),
    (3, "str", "int",
     "$d = 0\n"
     "for ch in $a:\n"
     "    if ch in 'aeiou':\n"
     "        $d += 1",
     "count the vowels"),
    (3, "str", "str",
     "$d = ''\n"
     "for ch in $a:\n"
     "    $d = ch + $d",
     "reverse it letter by letter"),
    (4, "str", "str",
     "$d = ''\n"
     "for i, ch in enumerate($a):\n"
     "    if i % 2 == 0:\n"
     "        $d += ch.upper()\n"
     "    else:\n"
     "        $d += ch",
     "upper-case every other letter"),
    (1, "list", "list", "$d = sorted($a)", "sort the list"),
    (1, "list", "list", "$d = $a[::-1]", "reverse the list"),
    (1, "list", "list", "$d = [v * $k for v in $a]", "multiply each item by $k"),
    (1, "list", "int", "$d = sum($a)", "add the items up"),
    (1, "list", "int", "$d = len($a)", "count the items"),
    (1, "list", "list", "$d = $a + [$k]", "append $k"),
    (1, "list", "int", "$d = max($a + [$k])", "the largest item or $k"),
    (2, "list", "list", "$d = [v for v in $a if v % 2 == 0]", "keep the even items"),
    (2, "list", "list", "$d = sorted($a) if len($a) > $p else $a[::-1]",
     "sort it if longer than $p, else reverse"),
    (3, "list", "int",
     "$d = 0\n"
     "for v in $a:\n"
     "    if v > $k:\n"
     "        $d += v\n"
     "    else:\n"
     "        $d -= 1",
     "add the items above $k, minus one for each other"),
    (3, "list", "dict",
     "$d = {}\n"
     "for v in $a:\n"
     "    $d[v % $p] = $d.get(v % $p, 0) + 1",
     "count items by remainder mod $p"),
    (4, "list", "list",
     "$d = []\n"
     "total = 0\n"
     "for v in $a:\n"
     "    total += v\n"
     "    if total % 2 == 0:\n"
     "        $d.append(total)",
     "even running totals"),
    (1, "dict", "int", "$d = sum($a.values())", "add up the values"),
    (1, "dict", "list", "$d = sorted($a.values())", "sorted values"),
    (1, "dict", "int", "$d = len($a)", "count the keys"),
    (1, "dict", "dict", "$d = {key: val * $k for key, val in $a.items()}",
     "multiply every value by $k"),
    (2, "dict", "dict", "$d = {key: val for key, val in $a.items() if val > $k}",
     "keep the values above $k"),
    (3, "dict", "int",
     "$d = 0\n"
     "for key, val in $a.items():\n"
     "    $d += len(str(key)) * val",
     "key lengths times values"),
    (4, "dict", "dict",
     "$d = {}\n"
     "for key in sorted($a):\n"
     "    if $a[key] % 2 == 0:\n"
     "        $d[key] = $a[key] // 2\n"
     "    else:\n"
     "        $d[key] = $a[key] * 3",
     "halve the even values, triple the odd ones"),
]
ARG_NAMES = {"int": "n", "str": "s", "list": "xs", "dict": "d"}
LETTERS = "abcdeilnorstu"


def random_value(rng, kind):
    """Python source of a random literal of `kind`."""
    if kind == "int":
        return str(rng.randint(-5, 20))
    if kind == "str":
        return repr("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 6))))
    if kind == "list":
        return "[" + ", ".join(str(rng.randint(-3, 12)) for _ in range(rng.randint(2, 6))) + "]"
    keys = rng.sample(["a", "b", "c", "x", "y", "z", "k", "m"], rng.randint(2, 4))
    return "{" + ", ".join(f"'{key}': {rng.randint(0, 9)}" for key in keys) + "}"


def new_program(rng, level, statements):
    """A fresh program state: {"args": [(name, type)], "steps": [(source lines, description)],
    "vars": [(name, type)]} then `statements` statements drawn at or below `level`."""
    kind = rng.choice(list(ARG_NAMES))
    args = [(ARG_NAMES[kind], kind)]
    if kind != "int" and rng.random() < 0.3:
        args.append(("k", "int"))
    # the main argument is the newest
    state = {"args": args, "steps": [], "vars": args[::-1], "level": level}
    for _ in range(statements):
        grow(rng, state)
    return state


def grow(rng, state):
    """Append one statement that reads a recent variable (usually the newest) and binds a new
    one."""
    if rng.random() < 0.8:
        name, kind = state["vars"][-1]
    else:
        name, kind = rng.choice(state["vars"])
    op = rng.choice([o for o in OPS if o[0] <= state["level"] and o[1] == kind])
    ints = [n for n, t in state["args"] if t == "int" and n != name]
    out = f"v{len(state['steps']) + 1}"
    c, e = rng.sample(LETTERS, 2)
    if ints and rng.random() < 0.5:
        k = rng.choice(ints)
    else:
        k = str(rng.randint(1, 5))
    p = str(rng.randint(2, 5))
    w = "".join(rng.sample(LETTERS, 2))
    fill = dict(a=name, d=out, k=k, p=p, c=c, e=e, w=w)
    source = string.Template(op[3]).substitute(fill)
    description = string.Template(op[4]).substitute(fill)
    state["steps"].append((source, description))
    state["vars"].append((out, op[2]))
    return state


def render(state):
    """Program source: typed signature (it tells a reader what inputs fit), the statements, return
    the newest var."""
    lines = []
    for source, _ in state["steps"]:
        for line in source.split("\n"):
            lines.append("    " + line)
    body = "\n".join(lines)
    sig = ", ".join(f"{n}: {t}" for n, t in state["args"])
    return f"def f({sig}):\n{body}\n    return {state['vars'][-1][0]}"


def make_input(rng, state):
    return ", ".join(random_value(rng, t) for _, t in state["args"])


def make_message(state):
    kinds = []
    for name, kind in state["args"]:
        if kind == "int":
            kinds.append(f"an {kind} {name}")
        else:
            kinds.append(f"a {kind} {name}")
    steps = ", then ".join(d for _, d in state["steps"])
    return f"The function takes {' and '.join(kinds)}; it does: " + steps + "."


def build_pool(seed, count, levels, max_statements, grow_prob):
    """`count` valid problems {"state","program","input","output","inputs","outputs","message",
    "parent"}: fresh programs, and (grow_prob) programs grown by one statement from an earlier one
    (parent = its index)."""
    rng = random.Random(seed)
    pool = []
    tries = 0
    # rounds of ~count/8, so later rounds can grow earlier programs
    while len(pool) < count and tries < 100:
        tries += 1
        batch = []
        for _ in range(min(count - len(pool) + 8, max(16, count // 8))):
            parent = None
            if pool and rng.random() < grow_prob:
                parent = rng.randrange(len(pool))
            if parent is not None and len(pool[parent]["state"]["steps"]) < max_statements + 2:
                src = pool[parent]["state"]
                state = grow(rng, dict(src, steps=list(src["steps"]), vars=list(src["vars"])))
            else:
                # short ones more often
                statements = min(rng.randint(1, max_statements), rng.randint(1, max_statements))
                parent = None
                state = new_program(rng, rng.randint(1, levels), statements)
            program = render(state)
            first_input = make_input(rng, state)
            inputs = [make_input(rng, state) for _ in range(verify.N_INPUTS)]
            batch.append(dict(state=state, program=program, input=first_input, inputs=inputs,
                              message=make_message(state), parent=parent))
        io_problems = [{"program": b["program"], "input": b["input"]} for b in batch]
        f_problems = []
        for b in batch:
            f_problems.append({"program": b["program"], "inputs": b["inputs"],
                               "message": b["message"]})
        io = verify.validate("code_o", io_problems)
        fs = verify.validate("code_f", f_problems)
        for b, r, q in zip(batch, io, fs):
            if r["valid"] and q["valid"] and len(pool) < count:
                pool.append(dict(b, output=r["output"], outputs=q["outputs"]))
    return pool


# ------------------------------------------------- transcripts in the project's format
END = "<|endoftext|>"


def _wrap(think, answer):
    return f" {think} </think> <answer>{answer}</answer>"


def transcripts(pool, seed, references, noise):
    """(prompt, response) pairs for every (role, task): teacher code_o/code_i (shown `references`
    pool problems, a grown problem builds on one of them), teacher code_f, student
    code_o/code_i/code_f. A `noise` share is damaged: wrong answers, a statement dropped (often an
    invalid program), or a broken format."""
    rng = random.Random(seed)
    out = []
    fence = verify.fence
    io_keys = ("program", "input", "output")
    for p in pool:
        problem = {k: p[k] for k in io_keys}
        for task in ("code_o", "code_i"):
            shown = min(rng.randint(1, references), len(pool))
            refs = []
            for j in rng.sample(range(len(pool)), shown):
                refs.append({k: pool[j][k] for k in io_keys})
            think = "I will write a new function and a test input."
            if p["parent"] is not None:
                j = rng.randrange(len(refs) + 1)
                refs.insert(j, {k: pool[p["parent"]][k] for k in io_keys})
                del refs[references:]
                if j < references:
                    think = f"I will build on snippet {j} and add one more step."
            program = p["program"]
            # drop a middle line: usually a NameError or a syntax error
            if rng.random() < noise:
                lines = program.split("\n")
                if len(lines) > 2:
                    program = "\n".join(lines[:-2] + lines[-1:])
            answer = f"{fence('python', program)}\n\n{fence('input', p['input'])}"
            out.append((verify.teacher_prompt(task, refs), _wrap(think, answer)))
        input_fences = "\n".join(fence("input", x) for x in p["inputs"])
        answer = input_fences + "\n" + fence("message", p["message"])
        think = "I will pick varied inputs and describe the function."
        out.append((verify.teacher_prompt("code_f", [], p["program"]), _wrap(think, answer)))
        # a wrong student answer is another pool problem's
        other = pool[rng.randrange(len(pool))]
        wrong = rng.random() < noise
        answered = p
        if wrong:
            answered = other
        answer = fence("output", answered["output"])
        think = "Let me run the code on the input."
        out.append((verify.student_prompt("code_o", problem), _wrap(think, answer)))
        answer = fence("input", answered["input"])
        think = "Let me find an input that gives this output."
        out.append((verify.student_prompt("code_i", problem), _wrap(think, answer)))
        fproblem = {k: p[k] for k in ("program", "inputs", "outputs", "message")}
        answer = fence("python", answered["program"])
        think = "Let me match the pairs and the message."
        out.append((verify.student_prompt("code_f", fproblem), _wrap(think, answer)))
    for k in range(len(out)):
        # broken format: the closing tag goes missing
        if rng.random() < noise / 2:
            out[k] = (out[k][0], out[k][1].replace("</answer>", "", 1))
    return [(prompt, response + END) for prompt, response in out]


# ------------------------------------------------- tokenizer and model


def prompt_chunks():
    """The constant text of verify.py's prompt templates: each prompt with sentinel values, split at
    the sentinels, pieces of 24+ characters. Teacher code_i/code_o prompts cut at the references,
    student ones at each field."""
    x = "\x00"
    io_fields = {"program": x, "input": x, "output": x}
    f_fields = {"program": x, "inputs": [x, x], "outputs": [x, x], "message": x}
    texts = [verify.teacher_prompt(t, [io_fields]) for t in ("code_i", "code_o")]
    texts += [verify.teacher_prompt("code_f", [], x)]
    texts += [verify.student_prompt(t, io_fields) for t in ("code_i", "code_o")]
    texts += [verify.student_prompt("code_f", f_fields)]
    pieces = set()
    for text in texts:
        for piece in text.split(x):
            if len(piece) >= 24:
                pieces.add(piece)
    return sorted(pieces, key=lambda s: (-len(s), s))


def make_tokenizer(texts, vocab_size):
    """Byte-level BPE (build_tiny's byte alphabet and special tokens, so any text still encodes)
    with merges learned on the corpus texts, plus one added (non-special) token per prompt chunk.
    Bytes alone measured ~650 tokens per transcript and ~500 tokens/s of training here; the merges
    cut that ~6x."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    chunks = prompt_chunks()
    # the chunks get their own tokens: learn merges on the rest
    for c in chunks:
        texts = [t.replace(c, "\n") for t in texts]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    added = []
    for c in chunks:
        added.append(AddedToken(c, normalized=False, special=False, lstrip=False, rstrip=False))
    tok.add_tokens(added)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIALS[0],
                                   pad_token=SPECIALS[1])


def encode(tok, pairs):
    """[(prompt ids, response ids)]; ids exactly as population.generate would see the prompt."""
    p = tok([a for a, _ in pairs], add_special_tokens=False)["input_ids"]
    r = tok([b for _, b in pairs], add_special_tokens=False)["input_ids"]
    return list(zip(p, r))


def batches(data, batch_tokens, rng):
    """Length-sorted buckets of about batch_tokens padded tokens, shuffled."""
    order = sorted(range(len(data)), key=lambda i: len(data[i][0]) + len(data[i][1]))
    out, cur = [], []
    for i in order:
        width = len(data[i][0]) + len(data[i][1])
        if cur and width * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    out.append(cur)
    rng.shuffle(out)
    return out


def pad_batch(rows, pad_token_id, prompt_weight):
    """Token ids [B, T] of (prompt ids, response ids) rows, right-padded, and the loss weight of
    each token [B, T]: response tokens 1, prompt tokens prompt_weight, padding 0."""
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), pad_token_id)
    weight = torch.zeros((len(rows), width))
    for b, (p, r) in enumerate(rows):
        ids[b, :len(p) + len(r)] = torch.tensor(p + r)
        weight[b, :len(p)] = prompt_weight
        weight[b, len(p):len(p) + len(r)] = 1.0
    return ids, weight


def warm_lr(step, train):
    """Learning rate at `step`: linear warmup over train["warmup"] steps times a cosine decay."""
    warmup = min(1.0, (step + 1) / train["warmup"])
    cosine = 1 + math.cos(math.pi * step / train["steps"])
    return train["lr"] * warmup * 0.5 * cosine


def warm_step(model, opt, rows, pad_token_id, lr, prompt_weight):
    """One optimizer step of weighted next-token loss on `rows` at learning rate `lr`. Returns the
    loss and the number of non-padding tokens."""
    ids, weight = pad_batch(rows, pad_token_id, prompt_weight)
    for g in opt.param_groups:
        g["lr"] = lr
    mask = (ids != pad_token_id).long()
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    # the programs in prompts teach code too
    loss = (nll * weight[:, 1:]).sum() / weight[:, 1:].sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, int((ids != pad_token_id).sum())


def train_warm(folder, world=WORLD, model_cfg=MODEL, train=TRAIN, log=print):
    """Build the corpus, the tokenizer and a fresh tiny Qwen2 in `folder`, train it, save it.
    Returns stats."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    t0 = time.time()
    pool = build_pool(world["seed"], world["programs"], world["levels"], world["max_statements"],
                      world["grow_prob"])
    pairs = transcripts(pool, world["seed"] + 1, world["references"], world["noise"])
    tok = make_tokenizer([a + b for a, b in pairs], world["vocab_size"])
    data = encode(tok, pairs)
    t_corpus = time.time() - t0
    # torch._C's function, not torch.set_num_threads: vLLM's CPU worker replaces that one with a
    # no-op in its process, which left a warm start built after a vLLM engine (e.g. in the test
    # session) at 1 thread, half speed
    threads = torch.get_num_threads()
    set_threads = torch._C.set_num_threads
    set_threads(train["threads"])
    used_threads = torch.get_num_threads()
    try:
        with population.seeded(train["seed"]):
            config = Qwen2Config(vocab_size=len(tok), bos_token_id=None,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                 dtype="float32", **model_cfg)
            model = Qwen2ForCausalLM(config)
            opt = torch.optim.AdamW(model.parameters(), lr=train["lr"], betas=(0.9, 0.95),
                                    weight_decay=0.01)
            rng = random.Random(train["seed"])
            plan = []
            tokens = 0
            losses = []
            model.train()
            for step in range(train["steps"]):
                if not plan:
                    plan = batches(data, train["batch_tokens"], rng)
                rows = [data[i] for i in plan.pop()]
                lr = warm_lr(step, train)
                loss, step_tokens = warm_step(model, opt, rows, tok.pad_token_id, lr,
                                              train["prompt_weight"])
                tokens += step_tokens
                losses.append(loss.item())
                if step % 50 == 0 or step == train["steps"] - 1:
                    log(f"warm step {step}/{train['steps']} loss {loss.item():.3f} "
                        f"{tokens / (time.time() - t0 - t_corpus):.0f} tok/s")
    finally:
        set_threads(threads)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    stats = dict(corpus_s=t_corpus, train_s=time.time() - t0 - t_corpus, examples=len(data),
                 pool=len(pool), tokens=tokens, final_loss=sum(losses[-20:]) / len(losses[-20:]),
                 vocab=len(tok), params=sum(p.numel() for p in model.parameters()),
                 threads=used_threads)
    record = dict(world=world, model=model_cfg, train=train, version=VERSION, stats=stats)
    with open(os.path.join(folder, "tinyworld.json"), "w") as f:
        json.dump(record, f, indent=1)
    return stats


def write_seeds(path, world=WORLD, count=32):
    """A start-up archive for train.py --seed_archive (AZR's seed JSON lines): `count` fresh pool
    problems as {"snippet","input"} and as {"snippet","inputs","message"}, from a seed the warm
    start never saw."""
    pool = build_pool(world["seed"] + 1000, count, world["levels"], world["max_statements"], 0.0)
    rows = [{"snippet": p["program"], "input": p["input"]} for p in pool]
    for p in pool:
        rows.append({"snippet": p["program"], "inputs": p["inputs"], "message": p["message"]})
    return write_jsonl(path, rows)


# ------------------------------------------------- held-out benchmark, training pools
# Generator seeds apart from the warm start's (WORLD["seed"]) and the seed archive's (+1000).
# evaluate.py --benchmarks tiny: 200 problems per task type (600: a 5-point gain of one model over
# another on them is significant at p < 0.01 when it is ~40 problems gained against ~10 lost; with
# 90 problems one problem was 1.1 points and nothing short of +15 could show)
HELDOUT = dict(seed=2000, per_task=200)
# pool_rows' default: a training pool for bench/learning_check.py
POOL_SEED = 3000
FENCED_PROGRAM = re.compile(r"```python\n(.*?)\n```", re.S)


# seen_programs per world settings, computed once per process
_SEEN = {}


def seen_programs(world=WORLD):
    """Every program text the warm start or its seed archive shows: the python fences of the whole
    corpus (pool programs, their damaged copies, references) and the seed archive's programs.
    Rebuilds the corpus once per process (~15 s, most of it the sandbox validating the pool)."""
    key = json.dumps(world, sort_keys=True)
    if key not in _SEEN:
        _SEEN[key] = _corpus_programs(world)
    return set(_SEEN[key])


def _corpus_programs(world):
    levels, statements = world["levels"], world["max_statements"]
    pool = build_pool(world["seed"], world["programs"], levels, statements, world["grow_prob"])
    seen = set()
    pairs = transcripts(pool, world["seed"] + 1, world["references"], world["noise"])
    for prompt, response in pairs:
        seen.update(FENCED_PROGRAM.findall(prompt + response))
    seeds = build_pool(world["seed"] + 1000, 32, levels, statements, 0.0)
    seen.update(p["program"] for p in seeds)
    return seen


def fresh_pool(seed, count, world, exclude):
    """`count` valid pool problems from `seed` with the world's settings, each program new: not in
    `exclude` and not repeated. Short programs repeat often (the default corpus of 4,000 holds
    ~2,800 distinct ones), so this asks build_pool for 2x, 4x, ... `count` until enough survive.
    Deterministic given its arguments."""
    ask = 2 * count
    while True:
        pool = build_pool(seed, ask, world["levels"], world["max_statements"], world["grow_prob"])
        kept, taken = [], set(exclude)
        for p in pool:
            if p["program"] not in taken:
                taken.add(p["program"])
                kept.append(p)
        if len(kept) >= count or ask >= 64 * count:
            return kept[:count]
        ask *= 2


def problem_rows(pool, prefix):
    """Pool problems as proposals of the three task types in turn: {"id", "task", "program"} plus
    "input" (code_i, code_o) or "inputs" and "message" (code_f), what verify.validate takes."""
    rows = []
    for k, p in enumerate(pool):
        task = verify.TASKS[k % len(verify.TASKS)]
        row = {"id": f"{prefix}/{k}", "task": task, "program": p["program"]}
        if task == "code_f":
            row.update(inputs=p["inputs"], message=p["message"])
        else:
            row["input"] = p["input"]
        rows.append(row)
    return rows


def heldout_rows(world=WORLD, heldout=HELDOUT):
    """The held-out benchmark: 3 x per_task problems, task types in turn, from a generator seed the
    warm start never used, and none of whose programs the warm start or the seed archive showed."""
    count = 3 * heldout["per_task"]
    return problem_rows(fresh_pool(heldout["seed"], count, world, seen_programs(world)), "tiny")


def pool_rows(count, world=WORLD, seed=POOL_SEED, heldout=HELDOUT):
    """A training pool in AZR's seed format (train.py --seed_archive): `count` programs, each as
    {"snippet", "input"} (train.py files it under code_i and code_o) and as {"snippet", "inputs",
    "message"} (code_f); drawn like the held-out benchmark, with none of its programs and none the
    warm start showed."""
    exclude = seen_programs(world)
    benchmark = fresh_pool(heldout["seed"], 3 * heldout["per_task"], world, exclude)
    exclude.update(p["program"] for p in benchmark)
    rows = []
    for p in fresh_pool(seed, count, world, exclude):
        rows.append({"snippet": p["program"], "input": p["input"]})
        rows.append({"snippet": p["program"], "inputs": p["inputs"], "message": p["message"]})
    return rows


def write_jsonl(path, rows):
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    os.replace(path + ".tmp", path)
    return path


def heldout_benchmark(cache_dir="out/.tiny", world=None, heldout=None):
    """Path of the held-out benchmark file (tiny.jsonl: heldout_rows), built once per settings under
    cache_dir and reused; evaluate.py validates its rows in the sandbox for the gold answers.
    Generated, not committed: it must come from the world settings of the warm base it measures."""
    world = world or WORLD
    heldout = heldout or HELDOUT

    def build(folder):
        write_jsonl(os.path.join(folder, "tiny.jsonl"), heldout_rows(world, heldout))
        # cached_folder's "done" mark
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(dict(world=world, heldout=heldout, version=VERSION), f, indent=1)
    folder = cached_folder(cache_dir, "tiny-heldout", [world, heldout, VERSION], build)
    return os.path.join(folder, "tiny.jsonl")


def stream_pool(count, cache_dir="out/.tiny", world=None, seed=POOL_SEED):
    """Path of a training pool file (pool_rows(count) of `world`), built once per settings under
    cache_dir: a pool large enough that students topped up from it rarely meet a problem twice
    is a stream of fresh problems from the held-out set's distribution (bench/learning_check.py)."""
    world = world or WORLD

    def build(folder):
        write_jsonl(os.path.join(folder, "pool.jsonl"), pool_rows(count, world, seed))
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(dict(world=world, count=count, seed=seed, heldout=HELDOUT,
                           version=VERSION), f, indent=1)
    settings = [world, count, seed, HELDOUT, VERSION]
    return os.path.join(cached_folder(cache_dir, "tiny-pool", settings, build), "pool.jsonl")


# ------------------------------------------------- held-out statistics
# Every held-out number the bench scripts write comes with one of these intervals (95 %).
Z95 = 1.959964


def wilson(successes, n, z=Z95):
    """Wilson score interval of one rate (successes of n), as (low, high) fractions."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    # exactly 0 and 1 at the ends (the formula gives them up to rounding)
    low, high = centre - half, centre + half
    if successes == 0:
        low = 0.0
    if successes == n:
        high = 1.0
    return low, high


def sign_test(gained, lost):
    """Exact two-sided sign test (McNemar's exact test) of `gained` vs `lost` changed items under
    p = 1/2."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(before, after, z=Z95):
    """Two models' 0/1 verdicts on the same problems -> {"diff": after - before in points, "ci":
    (low, high) in points (normal interval of the mean paired difference), "gained", "lost", "p"
    (sign_test)}."""
    n = len(before)
    gained = sum(a == 0 and b == 1 for a, b in zip(before, after))
    lost = sum(a == 1 and b == 0 for a, b in zip(before, after))
    diff = (gained - lost) / n
    # per problem the difference is +1, 0 or -1: its sample variance
    variance = ((gained + lost) / n - diff * diff) * n / max(1, n - 1)
    half = z * math.sqrt(variance / n)
    return {"diff": round(100 * diff, 2), "ci": (round(100 * (diff - half), 2),
                                                 round(100 * (diff + half), 2)),
            "gained": gained, "lost": lost, "p": sign_test(gained, lost)}


def paired_scores(before, after, z=Z95):
    """Per-problem scores in [0, 1] of two rows on the same problems (e.g. a population's mean over
    its members) -> {"diff": mean after - before in points, "ci": its normal 95 % interval in
    points, "p": two-sided normal p of the mean difference}."""
    n = len(before)
    diffs = [b - a for a, b in zip(before, after)]
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / max(1, n - 1)
    error = math.sqrt(variance / n)
    p = 1.0
    if error > 0:
        p = math.erfc(abs(mean) / error / math.sqrt(2))
    elif mean != 0:
        p = 0.0
    return {"diff": round(100 * mean, 2), "ci": (round(100 * (mean - z * error), 2),
                                                 round(100 * (mean + z * error), 2)), "p": p}


def pass_at_k(n, c, k):
    """Unbiased pass@k of one problem from n samples of which c are correct (Chen et al. 2021):
    1 - C(n - c, k) / C(n, k)."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_interval(values, z=Z95):
    """Mean of per-problem scores (pass@k estimates) with a normal 95 % interval over problems:
    (mean, low, high)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, mean, mean
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    half = z * math.sqrt(variance / len(values))
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def rate_text(successes, n):
    """"12.3 % [10.1, 14.9]": a pass rate in % with its Wilson interval."""
    low, high = wilson(successes, n)
    return f"{100 * successes / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def warm_base(cache_dir="out/.tiny", world=None, model_cfg=None, train=None, log=print):
    """Folder of the warm-started tiny base, built once per settings (key = hash of every setting)
    and reused; it also holds seeds.jsonl, a start-up archive in the same world (train.py
    --seed_archive). Settings default to the module's WORLD / MODEL / TRAIN at call time."""
    world = world or WORLD
    model_cfg = model_cfg or MODEL
    train = train or TRAIN
    # the prompts' constant text is in the key: the base is trained on verify.py's prompts word for
    # word (a changed prompt, e.g. a longer banned-word list, makes it write garbage), so a changed
    # prompt builds a new base instead of reusing a stale one
    settings = [world, model_cfg, train, VERSION, prompt_chunks()]

    def build(folder):
        train_warm(folder, world, model_cfg, train, log)
    path = cached_folder(cache_dir, "tiny-warm", settings, build)
    if not os.path.exists(os.path.join(path, "seeds.jsonl")):
        write_seeds(os.path.join(path, "seeds.jsonl"), world)
    return path


# ------------------------------------------------- the built-in bases
# The random `tiny` base and the cache both bases live in (moved here from population.py, which now
# only loads folders: one module builds the laptop-scale bases, and imports go one way).

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            # head_dim 32: the smallest head size vLLM's CPU attention accepts
            num_key_value_heads=1,
            # byte-level AZR prompts run to several thousand tokens
            max_position_embeddings=32768,
            # larger than the default 0.02 so greedy decoding is rarely a near-tie
            initializer_range=0.1,
            rope_theta=10000.0, tie_word_embeddings=False)
# ids 256 (eos) and 257 (pad), after the 256 bytes
SPECIALS = ["<|endoftext|>", "<|pad|>"]


def _byte_chars():
    """GPT-2's byte -> printable character map (what the ByteLevel pre-tokenizer emits), so token
    id == byte."""
    keep = set(range(ord("!"), ord("~") + 1))
    keep |= set(range(ord("¡"), ord("¬") + 1))
    keep |= set(range(ord("®"), 256))
    # control bytes and space go to U+0100 onwards
    moved = [b for b in range(256) if b not in keep]
    chars = {}
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + moved.index(b))
    return chars


def build_tiny(folder, seed=0):
    """Write a random tiny Qwen2 and a byte-level tokenizer (one token per UTF-8 byte, no merges, so
    nothing is trained or downloaded) to `folder` as a Hugging Face model folder vLLM can load. Same
    seed -> same files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    vocab = {c: b for b, c in _byte_chars().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIALS[0],
                                        pad_token=SPECIALS[1])
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=256,
                         pad_token_id=257, dtype="float32", **TINY)
    with population.seeded(seed):
        model = Qwen2ForCausalLM(config)
    # makes the folder
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def cached_folder(cache_dir, prefix, settings, build):
    """cache_dir/<prefix>-<hash of settings>, made once by build(tmp_folder) in a temporary folder
    renamed into place (atomic) under a lock file, and reused after that."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    path = os.path.join(cache_dir, f"{prefix}-{key}")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    os.makedirs(cache_dir, exist_ok=True)
    # one builder per folder: another process asking for the same one (a test beside a bench, two
    # torchrun ranks) waits for it instead of repeating minutes of training
    with open(os.path.join(cache_dir, f".{prefix}-{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(path, "config.json")):
            return path
        tmp = tempfile.mkdtemp(prefix=f".{prefix}-", dir=cache_dir)
        try:
            build(tmp)
            os.rename(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def model_folder(model, cache_dir="out/.tiny"):
    """The folder or hub id to load for `model`: "tiny" and "tiny-warm" are built once into
    cache_dir."""
    if model == "tiny":
        return cached_folder(cache_dir, "tiny", [TINY, SPECIALS, 0], build_tiny)
    if model == "tiny-warm":
        # the tiny base warm-started on the synthetic corpus below, built once, cached
        return warm_base(cache_dir)
    return model


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(warm_base(sys.argv[1]))
    else:
        print(warm_base("out/.tiny"))
