"""data.py and the repository standing alone: `python evaluate.py fetch` against a local HTTP server on
127.0.0.1 that plays GitHub and the Hugging Face Hub (the real download code, only the hosts swapped), a corrupted
file the checksum refuses, the clear stops of evaluate.py and train.py when data is missing, and --help built
from the config comments."""
import gzip
import hashlib
import http.server
import os
import subprocess
import sys
import threading

import pytest

import data
import evaluate
import startup
import train
from conftest import ROOT, SHARED


@pytest.fixture
def server(tmp_path):
    """(folder, base URL): an HTTP server on 127.0.0.1 serving `folder` (GET only), shut down after."""
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def put(folder, relative, content):
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def fetch_cfg(out, base, **overrides):
    return dict(data.config, data_dir=str(out), github_url=f"{base}/gh", hf_url=f"{base}/hf", **overrides)


def test_fetch_downloads_unpacks_joins_and_checks(server, tmp_path):
    """Synthetic sources (no ../shared needed): a plain file, a gzipped one, a dataset of three parts whose middle
    part lacks its final newline, and one whose bytes differ from the pinned hash: the good ones land checked, the
    bad one leaves nothing behind (not even a partial file) and the run stops naming it."""
    folder, base = server
    plain = b'{"a": 1}\n{"a": 2}\n'
    packed = b'{"b": 1}\n'
    parts = [b'{"c": 1}\n', b'{"c": 2}', b'{"c": 3}\n']
    put(folder, "gh/o/r/c0mm1t/plain.jsonl", plain)
    put(folder, "gh/o/r/c0mm1t/packed.jsonl.gz", gzip.compress(packed))
    for i, part in enumerate(parts):
        put(folder, f"hf/datasets/o/d/resolve/r3v/part{i}.jsonl", part)
    put(folder, "gh/o/r/c0mm1t/bad.jsonl", b'{"a": 1}\n{"a": 3}\n')
    joined = b'{"c": 1}\n{"c": 2}\n{"c": 3}\n'
    sources = {
        "plain": dict(host="github", parts=["o/r/c0mm1t/plain.jsonl"], records=2,
                      sha256=hashlib.sha256(plain).hexdigest()),
        "packed": dict(host="github", parts=["o/r/c0mm1t/packed.jsonl.gz"], gzip=True, records=1,
                       sha256=hashlib.sha256(packed).hexdigest()),
        "joined": dict(host="hf", parts=[f"datasets/o/d/resolve/r3v/part{i}.jsonl" for i in range(3)],
                       records=3, sha256=hashlib.sha256(joined).hexdigest()),
        "counted": dict(host="hf", parts=["datasets/o/d/resolve/r3v/part0.jsonl"], records=1, sha256=None),
        "bad": dict(host="github", parts=["o/r/c0mm1t/bad.jsonl"], records=2,
                    sha256=hashlib.sha256(plain).hexdigest()),
    }
    out = tmp_path / "data"
    lines = []
    with pytest.raises(SystemExit, match="not fetched: bad"):
        data.fetch(fetch_cfg(out, base), sources, log=lines.append)
    assert (out / "plain.jsonl").read_bytes() == plain
    assert (out / "packed.jsonl").read_bytes() == packed
    assert (out / "joined.jsonl").read_bytes() == joined
    assert sorted(os.listdir(out)) == ["counted.jsonl", "joined.jsonl", "packed.jsonl", "plain.jsonl"]
    assert any("bad: sha256" in line and "pinned" in line for line in lines)
    # a second run checks what is there instead of downloading it again
    lines.clear()
    data.fetch(fetch_cfg(out, base, only="plain,joined"), sources, log=lines.append)
    assert lines == ["plain: already there, checked", "joined: already there, checked"]
    # an unreachable host and an unknown name fail clearly
    with pytest.raises(SystemExit, match="not fetched: plain"):
        data.fetch(fetch_cfg(out, "http://127.0.0.1:9", force=True, only="plain"), sources, log=lines.append)
    assert "plain: download failed" in lines[-1]
    with pytest.raises(SystemExit, match="unknown"):
        data.fetch(fetch_cfg(out, base, only="nope"), sources)


def test_hf_endpoint_is_the_default_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1234/")
    assert data.hosts(data.config)["hf"] == "http://127.0.0.1:1234"
    monkeypatch.delenv("HF_ENDPOINT")
    assert data.hosts(data.config)["hf"] == "https://huggingface.co"


@pytest.mark.slow
def test_fetch_the_real_table_from_a_local_mirror(server, tmp_path):
    """The pinned table itself (data.SOURCES: paths, commits, hashes, record counts) against copies of the real
    files served at the hosts' own paths: every benchmark and both seed archives but LiveCodeBench (no local copy;
    ~3.5 GB) land byte-identical; a copy with one changed byte is refused by its sha256. Needs the offline copies
    beside the repository (../shared) or an earlier fetch (data/)."""
    copies = {}
    for name in data.SOURCES:
        for where in (os.path.join(ROOT, "data", f"{name}.jsonl"),
                      os.path.join(SHARED, "benchmarks", f"{name}.jsonl"),
                      os.path.join(SHARED, "azr_seeds", f"{name}.jsonl")):
            if os.path.isfile(where):
                copies[name] = where
                break
    if len(copies) < len(data.SOURCES) - 1:
        pytest.skip("no offline copies of the data (run `python evaluate.py fetch` once, or keep ../shared beside "
                    "the repository)")
    folder, base = server
    for name, where in copies.items():
        content = open(where, "rb").read()
        source = data.SOURCES[name]
        if source.get("gzip"):
            content = gzip.compress(content)
        put(folder, f"{source['host'].replace('github', 'gh')}/{source['parts'][0]}", content)
    names = [name for name in data.SOURCES if name != "livecodebench"]
    out = tmp_path / "data"
    data.fetch(fetch_cfg(out, base, only=",".join(names)))
    for name in names:
        assert (out / f"{name}.jsonl").read_bytes() == open(copies[name], "rb").read(), name
    # one byte changed on the server: refused, and the good file already there is kept
    source = data.SOURCES["amc23"]
    served = folder / "gh" / source["parts"][0]
    served.write_bytes(served.read_bytes().replace(b"27", b"28", 1))
    lines = []
    with pytest.raises(SystemExit, match="not fetched: amc23"):
        data.fetch(fetch_cfg(out, base, only="amc23", force=True), log=lines.append)
    assert "sha256" in lines[0]
    assert (out / "amc23.jsonl").read_bytes() == open(copies["amc23"], "rb").read()


def test_missing_data_stops_with_the_fetch_command(tmp_path, tiny_dir):
    """evaluate.py and train.py's default seed archive stop before any model loads, naming the command."""
    empty = str(tmp_path / "nothing")
    with pytest.raises(SystemExit, match=r"aime24: .*missing\. Fetch it with `python evaluate\.py fetch --only aime24"):
        evaluate.load_benchmark("aime24", empty)
    cfg = dict(train.config, model=tiny_dir, data_dir=empty, out_dir=str(tmp_path / "out"), engine="hf")
    with pytest.raises(SystemExit, match=r"7b_coder_seed_io: .*python evaluate\.py fetch"):
        train.main(cfg)
    # explicit choices need no data; tiny and tiny-warm have their own defaults
    assert startup.seed_files(dict(cfg, seed_archive="identity")) == ""
    assert startup.seed_files(dict(cfg, model="tiny")) == ""
    assert startup.seed_files(dict(cfg, seed_archive="a.jsonl,b.jsonl")) == "a.jsonl,b.jsonl"


def test_default_seed_archive_reads_the_fetched_files(tmp_path, tiny_dir):
    """With both seed archives in data_dir the default resolves to them (the README's paper command has no flag)."""
    for name in data.SEEDS:
        (tmp_path / f"{name}.jsonl").write_text("{}\n")
    files = startup.seed_files(dict(train.config, model=tiny_dir, data_dir=str(tmp_path)))
    assert files.split(",") == [str(tmp_path / f"{name}.jsonl") for name in data.SEEDS]


@pytest.mark.parametrize("command", [["train.py"], ["evaluate.py"], ["evaluate.py", "fetch"]])
def test_help_shows_every_keys_comment_and_default(command):
    """--help is the config's own comments (one source) with each default; every key has a comment."""
    module = {"train.py": train, "evaluate.py": evaluate}[command[0]]
    if command[1:] == ["fetch"]:
        module = data
    helps = startup.config_help(module.__file__)
    assert set(helps) == set(module.config)
    assert all(helps.values()), [key for key, text in helps.items() if not text]
    out = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, COLUMNS="400"), check=True).stdout
    # each option's block: its line and the indented lines under it
    blocks = {}
    for line in out.splitlines():
        if line.strip().startswith("--"):
            key = line.split()[0][2:]
            blocks[key] = ""
        if blocks:
            blocks[key] += " " + line.strip()
    for key, value in module.config.items():
        assert helps[key] in blocks[key] and f"(default: {value!r})" in blocks[key], blocks[key]


def test_config_help_reads_continuations_and_group_comments(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('config = dict(\n'
                      '    # a group heading\n'
                      '    a=1,          # one\n'
                      '                  # and more\n'
                      '    # what b is\n'
                      '    # over two lines\n'
                      '    b="x#y",\n'
                      '    c=2,  # 50% of it\n'
                      ')\n')
    assert startup.config_help(str(source)) == {"a": "one and more", "b": "what b is over two lines", "c": "50% of it"}
    cfg = startup.parse_config({"a": 1, "b": "x#y", "c": 2}, ["--c", "3"], "d", str(source))
    assert cfg == {"a": 1, "b": "x#y", "c": 3}


def test_provenance_table_matches_the_pins():
    """docs/data.md is what a reader sees; data.SOURCES is what the fetch checks: one table row per file with its
    record count, one sha256sum line per hashed file, and the commits and revision named in both."""
    table = open(os.path.join(ROOT, "docs", "data.md"), encoding="utf-8").read()
    rows, hashes = {}, {}
    for line in table.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].endswith(".jsonl"):
            rows[cells[0][:-len(".jsonl")]] = cells
        words = line.split()
        if len(words) == 2 and len(words[0]) == 64 and words[1].endswith(".jsonl"):
            hashes[words[1][:-len(".jsonl")]] = words[0]
    assert set(rows) == set(data.SOURCES)
    assert hashes == {name: s["sha256"] for name, s in data.SOURCES.items() if s["sha256"]}
    for name, source in data.SOURCES.items():
        assert rows[name][1] == str(source["records"]), name
    for pin in (data.AZR.split("/")[-1], data.HUMANEVALPLUS.split("/")[-1], data.LCB_REVISION):
        assert pin in table
