"""The canonical encoding of a program's value, the one format that crosses the sandbox's wall
(design §3: "verdicts are decided outside the untrusted process").

A child (sandbox.py) encodes each value it computed with `encode`; the parent decodes what the
child sent with `decode` and compares with Python's == (verify.equal), and stores encodings as a
problem's "gold". An encoding is plain JSON data: a ["tag", ...] list of strings and lists, ints and
floats in hex (so big ints, nan, inf and -0.0 are exact). Exact builtin and
collections/fractions/decimal types only, checked with the real `type`: no subclass, no user class,
no always-equal object ever reaches an ==. Size (MAX_UNITS) and depth (MAX_DEPTH) are capped both
ways.

Both sides of the wall import this file: the zygote (sandbox.py run as a script with -S, a scrubbed
environment, before any lock-down) and the parent. So it imports the standard library only, and
does nothing at import but build its tables.
"""
import json
import math
import re
from collections import Counter, OrderedDict, defaultdict, deque
from decimal import Decimal
from fractions import Fraction

MAX_DEPTH = 100        # nesting levels of an encoded value
MAX_UNITS = 1 << 16    # size budget of one encoded value: a node is 1 unit, 16 chars of text 1 more
# the parent's work on a value must stay linear: == between an int and a Decimal converts the int
# (quadratic), a Fraction is normalised with gcd (quadratic), a set or dict whose keys share a hash
# is built in quadratic time. So, both ways:
MAX_INT_BITS = 1 << 14       # bits of an int (4,932 decimal digits) and of each part of a Fraction
MAX_DECIMAL_CHARS = 1 << 12  # chars of a Decimal's text
MAX_SAME_HASH = 8            # keys of one set or mapping that share a hash

# type -> tag, for encoding
_SEQUENCES = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset", deque: "deque"}
_MAPPINGS = {dict: "dict", OrderedDict: "OrderedDict", Counter: "Counter",
             defaultdict: "defaultdict"}
# None and Ellipsis are written as their whole encoding
_TAGS = {**_SEQUENCES, **_MAPPINGS, str: "str", int: "int", float: "float", complex: "complex",
         bytes: "bytes", bytearray: "bytearray", range: "range", Fraction: "Fraction",
         Decimal: "Decimal", bool: "bool", type(None): '["None"]', type(...): '["Ellipsis"]'}
_BOOLS = {True: '["True"]', False: '["False"]'}
# a Fraction's parts, read from its slots with the descriptors its class had at import: the
# numerator and denominator properties live on a Python class that a program can patch through an
# alias (`[fractions.Fraction][0].numerator = 7` showed Fraction(7, 3) for f's Fraction(1, 3): red
# team round 10, A15); a slot descriptor is a C object
_NUMERATOR = Fraction.__dict__["_numerator"]
_DENOMINATOR = Fraction.__dict__["_denominator"]
# a str -> its JSON string literal, ASCII only (the C escaper: a child's result line is built with
# it alone)
escape = json.encoder.encode_basestring_ascii
# JSON writes a character past U+FFFF as the escapes of its two surrogates, so the two code points
# '\ud83d\ude00' and the one '\U0001f600' are the same JSON text, read back as the one (red team
# round 31, A14: a shown output of 1 where python3 prints 2). A str holding a surrogate code point
# crosses as its code points instead: ["codepoints", "<hex> <hex> ..."]; a "str" never holds one
_SURROGATE = re.compile("[\ud800-\udfff]")

# tag -> value or type, for decoding
_EMPTY = {"None": None, "Ellipsis": ..., "True": True, "False": False}
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "deque": deque,
               "dict": dict, "OrderedDict": OrderedDict, "Counter": Counter,
               "defaultdict": defaultdict}
_PAIRS = (dict, OrderedDict, Counter, defaultdict)
# a defaultdict's factory when it is a builtin type (by name); any other shows as "?" and comes back
# as _unknown_factory (its repr is not a literal either way)
_FACTORIES = {t.__name__: t for t in (list, dict, set, frozenset, tuple, int, float, complex, str,
                                      bytes, bool)}
_FACTORY_NAMES = {t: name for name, t in _FACTORIES.items()}


def _spread(keys):
    """Raise ValueError when more than MAX_SAME_HASH of `keys` share a hash (a set or dict of them
    would take quadratic time to build), TypeError when one is unhashable."""
    # too few to matter (most sets and dicts): no count
    if len(keys) <= MAX_SAME_HASH:
        return
    seen = {}
    for key in keys:
        h = hash(key)
        seen[h] = seen.get(h, 0) + 1
        if seen[h] > MAX_SAME_HASH:
            raise ValueError("too many keys with one hash")


def _unknown_factory():
    """The factory of a decoded defaultdict whose own factory was not a builtin type."""
    raise KeyError("a default factory that did not cross the sandbox's wall")


def encode(value, parts, budget, depth=0):
    """Append the canonical encoding of `value` to `parts` as JSON text. `budget` ([units left])
    caps the size, depth is capped at MAX_DEPTH, so a cyclic value fails (ValueError). Returns False
    when the value holds a type whose repr is not a plain literal (Counter, nan, ...): such a repr
    must be shown with a rule (verify.shown_output)."""
    t = type(value)
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise ValueError("output too large or too deeply nested (or cyclic)")
    tag = _TAGS.get(t)
    if tag is None:
        raise ValueError("output is not a plain value (builtin and standard-library types only)")
    if t is str:
        if _SURROGATE.search(value) is None:
            budget[0] -= len(value) >> 4
            parts.append('["str", %s]' % escape(value))
            return True
        # its units are its text's, as decode counts them (round 32, A03: counted four times over
        # there, a right answer within the budget was refused)
        text = " ".join("%x" % ord(c) for c in value)
        budget[0] -= len(text) >> 4
        if budget[0] < 0:
            raise ValueError("output too large or too deeply nested (or cyclic)")
        parts.append('["codepoints", "%s"]' % text)
        return True
    if t is int:
        if value.bit_length() > MAX_INT_BITS:
            raise ValueError(f"output too large (an int of more than {MAX_INT_BITS} bits)")
        budget[0] -= value.bit_length() >> 6
        parts.append('["int", "%x"]' % value)
        return True
    if t is bool:
        parts.append(_BOOLS[value])
        return True
    if value is None or value is ...:
        parts.append(tag)
        return True
    if t is float:
        parts.append('["float", "%s"]' % float.hex(value))
        # False for nan and +-inf (their reprs are names)
        return value - value == 0.0
    # `& literal`, not `and`: every item is encoded, literal or not
    if t in _MAPPINGS:
        parts.append('["%s", [' % tag)
        literal = t is dict
        # OrderedDict's own order (move_to_end does not move the underlying dict's); the type's
        # method, not an attribute the instance may carry
        items = dict.items(value)
        if t is OrderedDict:
            items = OrderedDict.items(value)
        for n, (k, v) in enumerate(items):
            if n:
                parts.append(", [")
            else:
                parts.append("[")
            literal = encode(k, parts, budget, depth + 1) & literal
            parts.append(", ")
            literal = encode(v, parts, budget, depth + 1) & literal
            parts.append("]")
        parts.append("]")
        # what repr shows beyond the items: a defaultdict's factory (by name for a builtin type)
        if t is defaultdict and value.default_factory is not None:
            parts.append(', "%s"' % _FACTORY_NAMES.get(value.default_factory, "?"))
        parts.append("]")
        return literal
    if t in _SEQUENCES:
        parts.append('["%s", [' % tag)
        literal = t is not deque
        for n, v in enumerate(value):
            if n:
                parts.append(", ")
            literal = encode(v, parts, budget, depth + 1) & literal
        parts.append("]")
        # ... and a deque's maxlen
        if t is deque and value.maxlen is not None:
            parts.append(', "%x"' % value.maxlen)
        parts.append("]")
        return literal
    if t is bytes or t is bytearray:
        budget[0] -= len(value) >> 3
        parts.append('["%s", "%s"]' % (tag, value.hex()))
        return t is bytes
    if t is complex:
        parts.append('["complex", "%s", "%s"]' % (float.hex(value.real), float.hex(value.imag)))
        return value - value == 0j
    if t is range:
        parts.append('["range", "%x", "%x", "%x"]' % (value.start, value.stop, value.step))
        return False
    if t is Fraction:
        numerator, denominator = _NUMERATOR.__get__(value), _DENOMINATOR.__get__(value)
        bits = max(numerator.bit_length(), denominator.bit_length())
        if bits > MAX_INT_BITS:
            raise ValueError(f"output too large (a Fraction of more than {MAX_INT_BITS} bits)")
        # one made unnormalised (`_normalize=False`) compares by its raw parts in Python and by the
        # normalised ones here (red team round 11, A02)
        if denominator <= 0 or math.gcd(numerator, denominator) != 1:
            raise ValueError("output is an unnormalised Fraction")
        # gcd is quadratic: its units grow 4x faster than an int's
        budget[0] -= (numerator.bit_length() + denominator.bit_length()) >> 4
        parts.append('["Fraction", "%x", "%x"]' % (numerator, denominator))
        return False
    # t is Decimal
    text = Decimal.__str__(value)
    if len(text) > MAX_DECIMAL_CHARS:
        raise ValueError(f"output too large (a Decimal of more than {MAX_DECIMAL_CHARS} chars)")
    budget[0] -= len(text) >> 4
    parts.append('["Decimal", %s]' % escape(text))
    return False


def decode(encoding):
    """A canonical encoding (encode's output, parsed: ["tag", ...] lists of strings) -> the value
    it stands for, made of builtin and collections/fractions/decimal types only, so `==` on it runs
    no model code. Schema, size (MAX_UNITS) and depth (MAX_DEPTH) are checked; raises ValueError for
    anything else. Used by the parent to judge, and by a child to receive plain arguments (code_i
    grading) before any user code runs."""
    try:
        return _build(encoding, [MAX_UNITS], 0)
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError) as e:
        raise ValueError(f"malformed encoding ({type(e).__name__})") from None


def _text(item, budget):
    if type(item) is not str:
        raise TypeError("not a string")
    budget[0] -= len(item) >> 4
    if budget[0] < 0:
        raise ValueError("too large")
    return item


def _build(enc, budget, depth):
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise ValueError("too large or too deep")
    if type(enc) is not list or not enc or type(enc[0]) is not str:
        raise TypeError("not an encoding")
    tag, args = enc[0], enc[1:]
    if tag in _EMPTY and not args:
        return _EMPTY[tag]
    # a scalar's arguments are strings
    texts = []
    if tag not in _CONTAINERS:
        for item in args:
            texts.append(_text(item, budget))
    if tag == "str" and len(texts) == 1:
        if _SURROGATE.search(texts[0]) is not None:
            raise ValueError("a str holding a surrogate (only a codepoints entry may)")
        return texts[0]
    if tag == "codepoints" and len(texts) == 1:
        text = "".join(chr(int(h, 16)) for h in texts[0].split(" "))
        if _SURROGATE.search(text) is None:
            raise ValueError("a codepoints entry without a surrogate (a str entry is its form)")
        return text
    if tag in ("int", "Fraction", "range"):
        for text in texts:
            if len(text) > MAX_INT_BITS // 4 + 1:
                raise ValueError("an int too large")
    if tag == "int" and len(texts) == 1:
        return int(texts[0], 16)
    if tag == "float" and len(texts) == 1:
        return float.fromhex(texts[0])
    if tag == "complex" and len(texts) == 2:
        return complex(float.fromhex(texts[0]), float.fromhex(texts[1]))
    if tag == "bytes" and len(texts) == 1:
        return bytes.fromhex(texts[0])
    if tag == "bytearray" and len(texts) == 1:
        return bytearray.fromhex(texts[0])
    if tag == "range" and len(texts) == 3:
        return range(int(texts[0], 16), int(texts[1], 16), int(texts[2], 16))
    if tag == "Fraction" and len(texts) == 2:
        budget[0] -= (len(texts[0]) + len(texts[1])) >> 2
        if budget[0] < 0:
            raise ValueError("too large")
        return Fraction(int(texts[0], 16), int(texts[1], 16))
    if tag == "Decimal" and len(texts) == 1:
        if len(texts[0]) > MAX_DECIMAL_CHARS:
            raise ValueError("a Decimal too large")
        return Decimal(texts[0])
    # a container's first argument is the list of its items (a mapping's: [key, value] pairs); a
    # deque may add its maxlen, a defaultdict its factory
    extra = None
    if tag in ("deque", "defaultdict") and len(args) == 2:
        extra = _text(args[1], budget)
        args = args[:1]
    if tag not in _CONTAINERS or len(args) != 1 or type(args[0]) is not list:
        raise TypeError(f"unknown tag or shape: {tag[:20]!r}")
    kind, items = _CONTAINERS[tag], []
    for item in args[0]:
        if kind not in _PAIRS:
            items.append(_build(item, budget, depth + 1))
        elif type(item) is list and len(item) == 2:
            key = _build(item[0], budget, depth + 1)
            value = _build(item[1], budget, depth + 1)
            items.append((key, value))
        else:
            raise TypeError("not a key-value pair")
    if kind in _PAIRS:
        _spread([key for key, _ in items])
    elif kind in (set, frozenset):
        _spread(items)
    if kind is defaultdict:
        factory = None
        if extra is not None:
            factory = _FACTORIES.get(extra, _unknown_factory)
        return defaultdict(factory, items)
    if kind is deque and extra is not None:
        return deque(items, int(extra, 16))
    if kind is Counter:
        return Counter(dict(items))
    return kind(items)
