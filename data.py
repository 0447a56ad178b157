"""The data a paper-scale run needs and where it comes from: the ten evaluation benchmarks and AZR's
two seed archives, each pinned to a commit (or a revision) of its public source and checked against
its sha256 (LiveCodeBench against its record count: no hash of it is published that we could
check). `python evaluate.py fetch` downloads them into `data/` (git-ignored); evaluate.py and
train.py read them from there. The provenance table with licences is docs/data.md.

  python evaluate.py fetch                         # everything (LiveCodeBench is ~3.5 GB)
  python evaluate.py fetch --only aime24,gsm8k     # some
  python evaluate.py fetch --data_dir /scratch/data --hf_url https://hf-mirror.example

Why a file of its own: fetching is the one place the project talks to the internet; everything else
reads local files. Each host is a setting (github_url, hf_url; hf_url defaults to $HF_ENDPOINT like
huggingface_hub), so a mirror or a local server stands in for it; the tests serve copies from
127.0.0.1. Every file is downloaded to a temporary name, unpacked, checked, then renamed into place:
an interrupted or corrupted download never leaves a file that looks fetched.
"""
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import urllib.request

# LeapLabTHU/Absolute-Zero-Reasoner at the commit the AZR numbers come from (2025-06-29)
AZR = "LeapLabTHU/Absolute-Zero-Reasoner/a82124e514e27692aa9860c5ee21dbf9d81e3bc5"
AZR_MATH = AZR + "/evaluation/math_eval/eval/data"
# EvalPlus's HumanEval+ release repository, "bump to v0.1.10"
HUMANEVALPLUS = "evalplus/humanevalplus_release/200defce9e3429d28ca215b6dd061c0f7f31c18b"
# livecodebench/code_generation_lite at a commit that holds test.jsonl .. test6.jsonl;
# release_v5 = the first five files (880 problems, May 2023 - Jan 2025)
LCB = "livecodebench/code_generation_lite"
LCB_REVISION = "0fe84c3912ea0c4d4a78037083943e8f0c4dd505"

# name -> where it comes from. host: github (raw files at a commit) or hf (a dataset file at a
# revision); parts: paths joined in order into data/<name>.jsonl; gzip: the part is gzipped;
# sha256 of the final file (None: not published), records: JSON lines in it.
SOURCES = {
    "aime24": dict(host="github", parts=[AZR_MATH + "/aime24/test.jsonl"], records=30,
                   sha256="af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac"),
    "aime25": dict(host="github", parts=[AZR_MATH + "/aime25/test.jsonl"], records=30,
                   sha256="20c1ca392758d96bd1e28af15d9f30df5660257927cacc9eac7301c29f677d1a"),
    "amc23": dict(host="github", parts=[AZR_MATH + "/amc23/test.jsonl"], records=40,
                  sha256="43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4"),
    "math500": dict(host="github", parts=[AZR_MATH + "/math500/test.jsonl"], records=500,
                    sha256="35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
    "minerva_math": dict(host="github", parts=[AZR_MATH + "/minerva_math/test.jsonl"],
                         records=272,
                         sha256="0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2"),
    "gsm8k": dict(host="github", parts=[AZR_MATH + "/gsm8k/test.jsonl"], records=1319,
                  sha256="9f098df7ff4522078d6ccec27a5c38a454790fdb51131bedfaa0e490070d5394"),
    "olympiadbench": dict(host="github", parts=[AZR_MATH + "/olympiadbench/test.jsonl"],
                          records=675,
                          sha256="bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416"),
    "mbppplus": dict(host="github", parts=[AZR + "/evaluation/code_eval/data/MbppPlus.jsonl"],
                     records=378,
                     sha256="b54e762755248ca411b523c917fa9f93c07b5ff2966bf60b3917b853926a3dad"),
    "humanevalplus": dict(host="github", parts=[HUMANEVALPLUS + "/HumanEvalPlus.jsonl.gz"],
                          gzip=True, records=164,
                          sha256="42526ec0e7d5f3ee0b06d6ced98f8c8bae3d76519151bfb3d36f79010645bd7f"),
    "livecodebench": dict(host="hf", records=880, sha256=None,
                          parts=[f"datasets/{LCB}/resolve/{LCB_REVISION}/test{suffix}.jsonl"
                                 for suffix in ("", "2", "3", "4", "5")]),
    "7b_coder_seed_io": dict(host="github", parts=[AZR + "/data/7b_coder_seed_io.jsonl"],
                             records=256,
                             sha256="33b9608e76737785fa159b94dabe6dfdbc6389a8c55e082ab54e52d9031c717f"),
    "7b_coder_code_f_seed_io": dict(host="github",
                                    parts=[AZR + "/data/7b_coder_code_f_seed_io.jsonl"],
                                    records=256, sha256="ce609e87fe330f90cfa9f167ac050b4df8bd1bf9d"
                                                        "4ab135d90b9a0f5d48f4b84"),
}
SEEDS = ("7b_coder_seed_io", "7b_coder_code_f_seed_io")
FETCH = "python evaluate.py fetch"

config = dict(
    data_dir="data",                # where the files go (git-ignored)
    only="",                        # comma-separated names; "" = all of SOURCES
    github_url="https://raw.githubusercontent.com",  # raw GitHub files: {url}/{owner}/{repo}/...
    # Hugging Face: {url}/datasets/...; "" = $HF_ENDPOINT, else https://huggingface.co
    hf_url="",
    force=False,                    # download again even when a checked file is there
)


def path(name, data_dir):
    """Where `name` lives once fetched."""
    return os.path.join(data_dir, f"{name}.jsonl")


def require(name, data_dir):
    """The path of a fetched file, or a stop that names the command that fetches it."""
    where = path(name, data_dir)
    if not os.path.isfile(where):
        raise SystemExit(f"{name}: {where} is missing. Fetch it with `{FETCH} --only {name}"
                         f" --data_dir {data_dir}` (or point --data_dir at an offline copy)")
    return where


def problem(name, where, sha256, records):
    """Why the file at `where` is not the pinned one, or None when it is."""
    digest = hashlib.sha256()
    lines = 0
    with open(where, "rb") as f:
        for line in f:
            digest.update(line)
            lines += bool(line.strip())
    if sha256 is not None and digest.hexdigest() != sha256:
        return f"{name}: sha256 {digest.hexdigest()} != the pinned {sha256}"
    if lines != records:
        return f"{name}: {lines} records, expected {records}"
    return None


def hosts(cfg):
    """host name -> base URL, from the config (no trailing slash)."""
    hf = cfg["hf_url"] or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return {"github": cfg["github_url"].rstrip("/"), "hf": hf.rstrip("/")}


def download(url, out):
    """Stream `url` into the open binary file `out`, 1 MiB at a time."""
    request = urllib.request.Request(url, headers={"User-Agent": "populora-fetch"})
    with urllib.request.urlopen(request, timeout=120) as response:
        while True:
            block = response.read(1 << 20)
            if not block:
                return
            out.write(block)


def fetch_one(name, source, data_dir, bases, force=False):
    """Download, unpack and check one file into data_dir; returns a one-line status. Raises
    RuntimeError (nothing left behind) when a download fails or the file is not the pinned one."""
    final = path(name, data_dir)
    if not force and os.path.isfile(final):
        if problem(name, final, source["sha256"], source["records"]) is None:
            return f"{name}: already there, checked"
    fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=data_dir)
    try:
        with os.fdopen(fd, "w+b") as out:
            for number, part in enumerate(source["parts"]):
                # parts are JSON lines: one without a final newline must not glue its last record
                # to the next part's first
                if number > 0 and out.tell() > 0:
                    out.seek(-1, os.SEEK_END)
                    if out.read(1) != b"\n":
                        out.write(b"\n")
                url = f"{bases[source['host']]}/{part}"
                if not source.get("gzip"):
                    download(url, out)
                    continue
                with tempfile.TemporaryFile() as packed:
                    download(url, packed)
                    packed.seek(0)
                    with gzip.GzipFile(fileobj=packed) as text:
                        shutil.copyfileobj(text, out, 1 << 20)
        why = problem(name, partial, source["sha256"], source["records"])
        if why:
            raise RuntimeError(f"{why} (from {bases[source['host']]}); nothing was written")
        os.replace(partial, final)
    except OSError as e:
        raise RuntimeError(f"{name}: download failed: {e}") from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return f"{name}: fetched and checked ({source['records']} records)"


def fetch(cfg, sources=SOURCES, log=print):
    """Every requested file: one line each; all are tried, then a stop names the failures."""
    names = [n.strip() for n in cfg["only"].split(",") if n.strip()] or list(sources)
    unknown = [n for n in names if n not in sources]
    if unknown:
        raise SystemExit(f"--only: unknown {unknown}; known: {', '.join(sources)}")
    os.makedirs(cfg["data_dir"], exist_ok=True)
    bases = hosts(cfg)
    failed = []
    for name in names:
        try:
            log(fetch_one(name, sources[name], cfg["data_dir"], bases, cfg["force"]))
        except RuntimeError as e:
            log(str(e))
            failed.append(name)
    if failed:
        raise SystemExit(f"not fetched: {', '.join(failed)}")
    return names


def read_jsonl(where):
    """The JSON objects of a JSON-lines file; a bad line stops with its file and number."""
    rows = []
    with open(where, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise SystemExit(f"{where} line {number} is not JSON: {e}") from None
    return rows
