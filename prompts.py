"""The AZR prompts (design §2): the R1 wrapper, the teacher's two proposal tasks and the student's
three solve tasks, and the two functions that fill them in. verify.py re-exports teacher_prompt and
student_prompt with the task checked and the screen's banned list filled in.

The text is AZR's structure in our own words (docs/azr.md §9.12: without AZR's swapped difficulty
bullet). Keep every byte: a warm-started model was trained on these prompts word for word, and
tinyworld.prompt_chunks gives each constant piece of them its own token. Some template lines are
over 100 characters for that reason.
"""

# the R1-Zero template AZR uses, verbatim for comparability
WRAPPER = ("A conversation between User and Assistant. The user asks a question, and the "
           "Assistant solves it. The assistant first thinks about the reasoning process in the "
           "mind and then provides the user with the answer. The reasoning process and answer are "
           "enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
           "<think> reasoning process here </think> <answer> answer here </answer>. "
           "User: {}\nAssistant: <think>")

# the code requirements a teacher (and a code_f student) is shown; {banned}: the screen's
# listed modules
CODE_RULES = """- Call the entry function `f`. Helper functions, nested functions and classes are fine; put imports and
  class definitions at the top.
- `f` takes at least one argument and returns a value.
- Deterministic: no randomness, dates or times, files, network, printing or any outside state.
- It should take several steps of reasoning, with state tracked over a sequence of transformations.
- It must finish within 10 seconds.
- These words may not appear anywhere, not even in comments: {banned}"""

# teacher, code_i/code_o: a new program and one input; {shown}: what the student will see
# beside the program, {hidden}: what it must work out
PROPOSE_IO = """## Task: write a Python snippet and one input for it
Create a new Python code snippet and one matching test input. A test subject will be shown the snippet and the
{shown}, and must work out the {hidden}. Think of it as an I.Q. test: hard to crack, yet solvable.

### Code requirements
{rules}
- Do not copy the test input into the snippet.

### Input requirements
- Exactly one input. Separate several arguments with commas and quote strings.

### Answer format
```python
def f(...):
    # your code
    return ...
```

```input
arg1, arg2, ...
```
For example:
```python
def f(name: str, info: dict):
    return name + ' is ' + str(info['age'])
```

```input
'John', {{'age': 20, 'city': 'New York'}}
```

### How the snippet is judged
- It runs without errors.
- It is hard for the subject to deduce the {hidden} from the snippet and the {shown}.
- It is creative and unlike the reference snippets below.

First plan how your snippet will be challenging, different from the references and creative; then write the
final code and input.

### Reference code snippets
{references}"""

# teacher, code_f: {n} inputs and a message for an archive program
PROPOSE_F = """## Task: choose inputs that reveal a function
Below is a Python snippet. Write {n} inputs for it and a message. A test subject will see half of the inputs
with their outputs, plus your message, and must write the function; the other half checks their answer.
Pick inputs that cover the input space and give diverse outputs, so the function can be deduced. The message
can be a coding question or a plain-language hint; it must not contain the code.

```python
{program}
f(<|YOUR INPUT WILL BE PLUGGED HERE|>)
```

### Answer format
Each input in its own fence (separate arguments with commas, quote strings), then the message:
```input
arg1, arg2, ...
```
```message
your message
```

### How it is judged
- Every input runs without errors.
- The inputs cover the input space and give varied outputs.
- The function is challenging but possible to deduce from the shown pairs and the message."""

# the student's task per task type: code_o predicts the output, code_i finds an input, code_f
# writes the function from the shown pairs
SOLVE = {
    "code_o": ("## Task: predict the output\nWork out the output of the snippet below for the "
               "given input. Think step by step, then give the output in an ```output fence. "
               "Quote strings; use a tuple for several return values.\n\n"
               "```python\n{program}\n```\n\n```input\n{input}\n```"),
    "code_i": ("## Task: find an input\nFind one input that makes the snippet below return the "
               "given output. Think step by step, then give the input in an ```input fence. "
               "Separate several arguments with commas and quote strings.\n\n"
               "```python\n{program}\n```\n\n```output\n{output}\n```"),
    "code_f": ("## Task: write the function\nFrom the input/output pairs and the message below, "
               "write the function `f` that produced them.\n\n{pairs}\n"
               "```message\n{message}\n```\n\n### Code requirements\n{rules}\n\n"
               "Give your function in a ```python fence. Name your entry function f()."),
}


def fence(tag, text):
    """A markdown code fence: ```tag, the text, ```."""
    return f"```{tag}\n{text}\n```"


def code_rules(banned):
    """The code requirements both a teacher (code_i/code_o) and a code_f student are shown;
    `banned`: the module names listed as forbidden."""
    return CODE_RULES.format(banned=", ".join(sorted(banned)))


def teacher_prompt(task, references, program, banned, n_inputs):
    """The full teacher prompt of a known task. code_i/code_o: `references` = archive problems
    {"program", "input", "output"} (K of them, may be empty), shown as numbered snippets. code_f:
    `program` = the archive program to write `n_inputs` inputs for. `banned`: the module names the
    code rules list."""
    if task == "code_f":
        return WRAPPER.format(PROPOSE_F.format(n=n_inputs, program=program))
    # what the test subject is shown and what it must work out
    if task == "code_i":
        shown, hidden = "output", "input"
    else:
        shown, hidden = "input", "output"
    snippets = []
    for j, reference in enumerate(references):
        parts = [f"<snippet_{j}>",
                 fence("python", reference["program"]),
                 fence("input", reference["input"]),
                 fence("output", reference["output"]),
                 f"</snippet_{j}>"]
        snippets.append("\n".join(parts))
    task_text = PROPOSE_IO.format(shown=shown, hidden=hidden, rules=code_rules(banned),
                                  references="\n".join(snippets))
    return WRAPPER.format(task_text)


def student_prompt(task, problem, banned):
    """The full student prompt of a known task. code_i/code_o: problem {"program", "input",
    "output"}; code_f: {"program", "inputs", "outputs", "message"}, of which the first half of the
    pairs is shown (the rest is hidden for grading) and the program never. `banned`: as above."""
    if task != "code_f":
        return WRAPPER.format(SOLVE[task].format(**problem))
    shown = len(problem["inputs"]) // 2
    pairs = []
    for k in range(shown):
        shown_input = fence(f"input_{k}", problem["inputs"][k])
        shown_output = fence(f"output_{k}", problem["outputs"][k])
        pairs.append(shown_input + "\n" + shown_output)
    task_text = SOLVE["code_f"].format(pairs="\n".join(pairs), message=problem["message"],
                                       rules=code_rules(banned))
    return WRAPPER.format(task_text)
