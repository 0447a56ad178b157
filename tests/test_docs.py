"""docs/: the design the code cites lives in the repository. Every `design §n` (docs/design.md) and
`docs/<name>.md §n` / `appendix X` reference in the repository's .py, .md and .txt files points at a
heading or numbered item that exists; references inside docs/ resolve too; nothing outside tests/
points at notes that live outside the repository.

    python -m pytest tests/test_docs.py -v

Heading convention of docs/*.md (what `sections` reads):
    ## 4. One training step          section "4"
    ### 4.1 Matchmaking              section "4.1"
    6. text at column 0              item 6 of the numbered list under "4": "4.6"
    ## Appendix B. Benchmark ...     "appendix B"
Inside docs/, a bare "§7" means the same file's section 7, "evolve.md §4.1" another doc's.
"""
import os
import re
import subprocess

import pytest

from conftest import ROOT

DOCS = os.path.join(ROOT, "docs")
HERE = os.path.relpath(os.path.abspath(__file__), ROOT)
HEADING = re.compile(r"^(#{2,6})\s+(\d+(?:\.\d+)*)\.?\s+\S")
APPENDIX = re.compile(r"^(#{2,6})\s+Appendix\s+([A-Z])\b")
OTHER_HEADING = re.compile(r"^(#{1,6})\s")
ITEM = re.compile(r"^(\d+)\.\s+\S")
NUMBER = r"\d+(?:\.\d+)*"
# §4, "§4.6, §10", "§4–§7": the numbers of one citation
CHAIN = re.compile(rf"§\s?({NUMBER})((?:\s*(?:,|–|—|-|and|or)\s*§\s?{NUMBER})*)")
# what a citation names before its §: "design" or "docs/evolve.md"; a docstring or comment may
# wrap between the two ("docs/evolve.md\n    §6", "# ... docs/azr.md\n# §9")
ANCHOR = re.compile(r"\b(design|docs/([a-z_]+)\.md)\b([\s#]*)(§|appendix\s+([A-Z])\b)")
DOC_MENTION = re.compile(r"\bdocs/([a-z_]+)\.md\b")
# a quoted phrase right after a citation must appear in the cited section
QUOTE = re.compile(r'\s*:?\s*"([^"\n]{12,})"')
# pointers to notes that live outside the repository (tests may use ../shared as extra data)
OUTSIDE = ("../shared", "SPEC §", "reference §", "reference/")


def sections(path):
    """{id: text} of one doc, ids as in this file's docstring; ValueError on a duplicate id. A
    section's text runs to the next heading of its level or above (subsections included); an
    item's to the next item or heading. Fenced code is text, never a heading or an item."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    fenced = False
    section, level = None, 0
    for n, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading, appendix = HEADING.match(line), APPENDIX.match(line)
        if heading:
            section, level = heading.group(2), len(heading.group(1))
            found.append((section, n, "heading", level))
        elif appendix:
            section, level = f"appendix {appendix.group(2)}", len(appendix.group(1))
            found.append((section, n, "heading", level))
        elif OTHER_HEADING.match(line):
            section, level = None, len(OTHER_HEADING.match(line).group(1))
            found.append((None, n, "heading", level))
        elif ITEM.match(line) and section is not None:
            found.append((f"{section}.{ITEM.match(line).group(1)}", n, "item", level))
    texts = {}
    for k, (key, start, kind, lvl) in enumerate(found):
        end = len(lines)
        for _, later, later_kind, later_level in found[k + 1:]:
            if later_kind == "heading" and later_level <= lvl:
                end = later
                break
            if kind == "item":
                end = later
                break
        if key is None:
            continue
        if key in texts:
            raise ValueError(f"{path}: section {key} appears twice")
        texts[key] = "\n".join(lines[start:end])
    return texts


def squash(text):
    """Lower case, one space for any run of whitespace and comment/quote markers."""
    return " ".join(re.sub(r"[#>*`]", " ", text).split()).lower()


def citations(text):
    """[(line number, doc name, section id, quoted phrase or None)] for every `design §n` and
    `docs/<name>.md §n` / `appendix X` in a text; ranges and lists give one entry per number."""
    out = []
    for anchor in ANCHOR.finditer(text):
        doc = anchor.group(2) or "design"
        line = text.count("\n", 0, anchor.start()) + 1
        if anchor.group(5):
            out.append((line, doc, f"appendix {anchor.group(5)}", None))
            continue
        chain = CHAIN.match(text, anchor.start(4))
        if chain is None:
            out.append((line, doc, "§?", None))
            continue
        quote = QUOTE.match(text, chain.end())
        phrase = quote.group(1) if quote else None
        for number in re.findall(NUMBER, chain.group(0)):
            out.append((line, doc, number, phrase))
    return out


def doc_citations(text, own):
    """Citations inside docs/<own>.md: "evolve.md §4.1" (or "design §4") names a doc, a bare §n is
    the same doc."""
    out = []
    for chain in CHAIN.finditer(text):
        before = text[max(0, chain.start() - 40):chain.start()]
        named = re.search(r"\b(?:([a-z_]+)\.md|(design))\s*$", before)
        doc = own
        if named:
            doc = named.group(1) or named.group(2)
        line = text.count("\n", 0, chain.start()) + 1
        for number in re.findall(NUMBER, chain.group(0)):
            out.append((line, doc, number, None))
    return out


def repository_files():
    """The repository's files (tracked, plus untracked ones git does not ignore), relative paths;
    without git, a walk that skips hidden folders, out*/ and caches."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
        paths = sorted(set(p for p in listed.splitlines() if p))
        return [p for p in paths if os.path.isfile(os.path.join(ROOT, p))]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for folder, subfolders, names in os.walk(ROOT):
            subfolders[:] = [d for d in subfolders if not d.startswith((".", "out", "__pycache__"))]
            for name in names:
                paths.append(os.path.relpath(os.path.join(folder, name), ROOT))
        return sorted(paths)


def text_files():
    return [p for p in repository_files() if p.endswith((".py", ".md", ".txt"))]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def unresolved(cites, where, cache):
    """Messages for the citations whose doc, section or quoted phrase does not exist."""
    problems = []
    for line, doc, key, phrase in cites:
        path = os.path.join(DOCS, f"{doc}.md")
        if not os.path.isfile(path):
            problems.append(f"{where}:{line}: docs/{doc}.md does not exist")
            continue
        if path not in cache:
            cache[path] = sections(path)
        known = cache[path]
        if key not in known:
            problems.append(f"{where}:{line}: docs/{doc}.md has no section {key}")
        elif phrase and squash(phrase) not in squash(known[key]):
            problems.append(f"{where}:{line}: docs/{doc}.md §{key} does not say \"{phrase}\"")
    return problems


# ----------------------------------------------------------------------------- the parser itself

def test_parser_reads_headings_items_appendices_and_citations(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Title\n\n## 1. Method\nText.\n\n## 4. Step\n1. **Match** a\n   more\n"
                   "2. Propose\n\n```\n7. not an item\n## 9. not a heading\n```\n"
                   "### 4.7 Sub\nverdicts are decided outside\n## Appendix B. Bench\nx\n")
    found = sections(str(doc))
    assert set(found) == {"1", "4", "4.1", "4.2", "4.7", "appendix B"}
    assert "more" in found["4.1"] and "Propose" not in found["4.1"]
    assert "verdicts" in found["4"] and "Bench" not in found["4"]
    code = ('x = 1  # design §4.6, deviation 3; (design §4–§7) docs/evolve.md\n    §6.1 and\n'
            '# docs/evolve.md appendix B, design §3 "verdicts are decided outside the process"\n'
            "AZR §3.3.5, PopuLoRA §7")
    got = [(doc, key) for _, doc, key, _ in citations(code)]
    assert got == [("design", "4.6"), ("design", "4"), ("design", "7"), ("evolve", "6.1"),
                   ("evolve", "appendix B"), ("design", "3")]
    assert citations(code)[-1][3] == "verdicts are decided outside the process"
    assert doc_citations("see §4.1 and evolve.md §6, §6.4; design §2", "azr") == [
        (1, "azr", "4.1", None), (1, "evolve", "6", None), (1, "evolve", "6.4", None),
        (1, "design", "2", None)]
    dup = tmp_path / "dup.md"
    dup.write_text("## 4. A\n1. x\n### 4.1 B\n")
    with pytest.raises(ValueError, match="4.1 appears twice"):
        sections(str(dup))


# ----------------------------------------------------------------------------- the repository

def test_every_citation_points_at_a_section_that_exists():
    cache, problems, count = {}, [], 0
    for path in text_files():
        if path == HERE:
            continue
        text = read(path)
        cites = citations(text)
        if path.startswith("docs/") and path.endswith(".md"):
            cites += doc_citations(text, os.path.basename(path)[:-3])
        else:
            count += len(cites)
        for match in DOC_MENTION.finditer(text):
            if not os.path.isfile(os.path.join(DOCS, f"{match.group(1)}.md")):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{path}:{line}: docs/{match.group(1)}.md does not exist")
        problems += unresolved(cites, path, cache)
    assert not problems, "\n".join(sorted(set(problems)))
    # the code and its text cite the docs ~95 times: a scan that finds few has broken
    assert count >= 80, f"only {count} citations found outside docs/"


def test_design_keeps_the_section_numbers_the_code_cites():
    found = sections(os.path.join(DOCS, "design.md"))
    numbered = [key for key in found if re.fullmatch(r"\d+", key)]
    assert numbered[:12] == [str(n) for n in range(1, 13)]


def test_docs_index_and_line_length():
    names = sorted(n for n in os.listdir(DOCS) if n.endswith(".md"))
    assert {"README.md", "design.md", "evolve.md", "azr.md", "eval.md", "vllm.md"} <= set(names)
    index = read("docs/README.md")
    long_lines = []
    for name in names:
        if name != "README.md":
            assert f"({name})" in index, f"docs/README.md does not link {name}"
        for n, line in enumerate(read(f"docs/{name}").split("\n"), 1):
            if len(line) > 100:
                long_lines.append(f"docs/{name}:{n}: {len(line)} characters")
    assert not long_lines, "\n".join(long_lines)


def test_nothing_outside_tests_points_outside_the_repository():
    """Any file but tests/ (which may read ../shared as extra data) and .ci/ (as the issue's grep)."""
    problems = []
    for path in repository_files():
        if path.startswith(("tests/", ".ci/")):
            continue
        try:
            text = read(path)
        except UnicodeDecodeError:
            # a figure or another binary file
            continue
        for n, line in enumerate(text.split("\n"), 1):
            for needle in OUTSIDE:
                if needle in line:
                    problems.append(f"{path}:{n}: {needle!r}: {line.strip()[:80]}")
    assert not problems, "\n".join(problems)


def test_one_numbering_of_the_step_phases():
    """Issue 25: README's "The algorithm on one screen", train.py's docstring and the `ALGO n`
    comments of train.main's loop number the step's phases the same way, in the order they run."""
    readme = read("README.md")
    screen = readme.split("## The algorithm on one screen", 1)[1].split("\n## ", 1)[0]
    phases = re.findall(r"^(\d+)\. \*\*([^*]+)\*\*", screen, re.M)
    assert [int(n) for n, _ in phases] == list(range(1, len(phases) + 1)) and len(phases) >= 8
    names = [name.strip().lower() for _, name in phases]
    source = read("train.py")
    main = source.split("\ndef main(", 1)[1]
    comments = re.findall(r"# ---- ALGO (\d+): (.+)", main)
    assert [int(n) for n, _ in comments] == list(range(1, len(names) + 1)), comments
    for (n, text), name in zip(comments, names):
        assert text.lower().startswith(name), f"ALGO {n}: {text!r} is README's {name!r}"
    docstring = " ".join(source.split('"""', 2)[1].split())
    listed = ", ".join(f"{n} {name}" for n, name in enumerate(names, 1))
    assert listed in docstring, listed
