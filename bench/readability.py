"""The readability counters of issue 13, per file, for this tree (or any Python files given): the share
of lines over 100 characters, the mean line length, conditional expressions (and how many are
chained), nested comprehensions, lines with 4 or more closing brackets, the longest function, and
the comment share. Prints ONE JSON line {file: {counter: value}}.

    python bench/readability.py                       # the project's main files
    python bench/readability.py path/to/nanogpt/train.py ...

Counted on non-blank lines; a docstring counts as comment lines.
"""
import ast
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("train.py", "population.py", "engines.py", "archive.py", "logs.py", "ratings.py", "plan.py",
         "variants.py", "distributed.py",
         "evolve.py", "verify.py", "prompts.py", "sandbox.py", "encoding.py", "evaluate.py", "graders.py",
         "report.py", "tinyworld.py")


def docstring_lines(tree):
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def counters(path):
    text = open(path).read()
    tree = ast.parse(text)
    lines = text.splitlines()
    code = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    docs = docstring_lines(tree)
    comments = sum(1 for number, line in code if line.strip().startswith("#") or number in docs)
    conditionals, chained, nested = 0, 0, 0
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp):
            conditionals += 1
            if isinstance(node.orelse, ast.IfExp):
                chained += 1
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if len(node.generators) > 1:
                nested += 1
    longest = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            longest = max(longest, node.end_lineno - node.lineno + 1)
    closing = sum(1 for _, line in code if sum(line.count(c) for c in ")]}") >= 4)
    return {
        "lines": len(code),
        "over_100": round(sum(1 for _, line in code if len(line) > 100) / len(code), 3),
        "mean_length": round(sum(len(line) for _, line in code) / len(code), 1),
        "conditional_expressions": conditionals,
        "chained": chained,
        "nested_comprehensions": nested,
        "closing_4plus": closing,
        "longest_function": longest,
        "comment_share": round(comments / len(code), 3),
    }


def main():
    paths = sys.argv[1:] or [os.path.join(ROOT, f) for f in FILES if os.path.exists(os.path.join(ROOT, f))]
    print(json.dumps({os.path.basename(p): counters(p) for p in paths}))


if __name__ == "__main__":
    main()
