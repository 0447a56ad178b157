"""Parent CPU on hostile model text (issue 22, red team causes 7: A34, A36); prints ONE JSON line.

  python bench/parent_bench.py [--repeats 5]

Side by side in one run, alternating, medians in ms:
  parse_old_ms / parse_new_ms: parse_student + parse_teacher of a response of `</think><answer>`
    repeated with no `</answer>` (16 KB and 64 KB: what 4,096 and 16,384 tokens hold), with the
    regexes verify.py used before (a lazy `.*?</answer>` tried at every `<answer>`) and with
    verify.py's parser now.
  shown_old_ms / shown_new_ms: refusing an output whose repr is over MAX_REPR chars, as a child
    sends it (60,000 small ints; a 1,000,000-char str; 6,000 ten-deep lists): before, decoded and
    repr'd in full, then refused; now verify.shown_output, which bounds it on the encoding first.
No sandbox runs: the cost measured is the parent's alone.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import verify  # noqa: E402
from encoding import decode, encode  # noqa: E402

# verify.py's response regexes before issue 22's round 2
OLD_FORMAT = re.compile(r"(?s).*?</think>\s*<answer>.*?</answer>")
OLD_ANSWER = re.compile(r"(?s)<answer>(.*?)</answer>")


def old_parse(response):
    if not OLD_FORMAT.match(response):
        return None
    return OLD_ANSWER.findall(response)[-1]


def new_parse(response):
    return verify.parse_student("code_o", response), verify.parse_teacher("code_f", response)


def old_shown(encoding):
    """What shown_output did before: decode, check, repr, then compare the length."""
    text = repr(decode(encoding))
    return len(text) <= verify.MAX_REPR


def new_shown(encoding):
    try:
        verify.shown_output(encoding, set())
    except verify.Invalid:
        return False
    return True


def plain(value):
    parts = []
    encode(value, parts, [1 << 20])
    return json.loads("".join(parts))


def side_by_side(old_fn, new_fn, arg, repeats):
    """(old, new) median process CPU ms of one call each, alternating so that load on the shared
    machine hits both alike."""
    old, new = [], []
    for _ in range(repeats):
        for fn, times in ((old_fn, old), (new_fn, new)):
            start = time.process_time()
            fn(arg)
            times.append((time.process_time() - start) * 1000)
    return round(statistics.median(old), 3), round(statistics.median(new), 3)


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    responses = {"16KB": "</think><answer>" * 1024, "64KB": "</think><answer>" * 4096}
    outputs = {"ints_60000": plain(list(range(60000))),
               "str_1000000": plain(chr(0x2028) * 1000000),
               "nested_6000": plain([[[[[[[[[[1]]]]]]]]]] * 6000)}
    row = {}
    for name, response in responses.items():
        old, new = side_by_side(old_parse, new_parse, response, args.repeats)
        row[f"parse_old_ms/{name}"], row[f"parse_new_ms/{name}"] = old, new
    for name, encoding in outputs.items():
        assert not old_shown(encoding) and not new_shown(encoding)
        old, new = side_by_side(old_shown, new_shown, encoding, args.repeats)
        row[f"shown_old_ms/{name}"], row[f"shown_new_ms/{name}"] = old, new
    print(json.dumps(row))


if __name__ == "__main__":
    main()
