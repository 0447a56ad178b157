"""train.py's start-up: the command line (also evaluate.py's and data.py's), the checks, and what
main builds before its loop.

Why a file of its own: a reader of train.py wants the config and the step. How a config dict
becomes a command line (argparse, --help from the config's own comments), everything cheap that
can be wrong before a model or process group exists (one clear message each; the checkpoint a run
resumes from and whether it fits this run), and the objects the loop works with (the seed archive,
the population on its device, the optimizers, the engine, the embedding cache) are plumbing a
reader can skip.
"""
import argparse
import ast
import io
import json
import os
import tempfile
import tokenize

import torch
import torch.distributed as dist

import archive
import data
import engines
import evolve
import logs
import plan
import population
import tinyworld
import verify


def str2bool(text):
    if text.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("1", "true", "yes")


def config_help(path):
    """key -> its comments in the `config = dict(...)` of the file at `path`, so --help shows the
    config's own words (one source): the comment at the end of the key's line (else the comment
    lines just above it), and comment lines below it that start in the same column as its
    end-of-line comment (a continuation)."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    # row -> (column, text) of every comment; code-free rows are the comment-only lines
    comments, code_rows = {}, set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.start[1], token.string.lstrip("#").strip())
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_rows.update(range(token.start[0], token.end[0] + 1))
    call = next(node.value for node in ast.parse(source).body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "config")
    helps, previous = {}, call.lineno
    for keyword in call.keywords:
        rows = range(keyword.lineno, keyword.end_lineno + 1)
        own = [comments[row] for row in rows if row in comments]
        above = [comments[row][1] for row in range(previous + 1, keyword.lineno)
                 if row in comments and row not in code_rows]
        # comment lines above a key with its own comment head a group: not its help
        text = " ".join(above)
        previous = keyword.end_lineno
        if own:
            column, text = own[-1]
            while (previous + 1 in comments and previous + 1 not in code_rows
                   and comments[previous + 1][0] == column):
                previous += 1
                text = f"{text} {comments[previous][1]}"
        helps[keyword.arg] = text
    return helps


def parse_config(defaults, argv, description, source, tables=None):
    """--key value / --key=value for every config key, typed like its default; a bool also as a
    bare --key, and a None default is an optional bool. Each flag's --help is the key's comment in
    `source` (the file defining `defaults`), the names of its table in `tables` (key -> table: the
    swap points) and its default."""
    helps = config_help(source)
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, value in defaults.items():
        if value is None or isinstance(value, bool):
            kind = dict(type=str2bool, nargs="?", const=True, metavar="BOOL")
        else:
            kind = dict(type=type(value), metavar=type(value).__name__.upper())
        # argparse formats help with %: a literal one is written %%
        text = helps.get(key, "").replace("%", "%%")
        if key in (tables or {}):
            text = f"{text}: {' | '.join(tables[key])}"
        parser.add_argument(f"--{key}", default=value, help=f"{text} (default: {value!r})",
                            **kind)
    # unknown flags and bad values: argparse prints the reason and exits (2)
    return vars(parser.parse_args(argv))


def check_config(cfg, roles, swaps):
    """Everything cheap that can be wrong, before any model or process group exists: one clear
    message each. `swaps`: config key -> the table its value must name (train.SWAPS); an entry's
    "check" hook runs here. Returns the checkpoint folder to resume from, or None."""
    for key in ("steps", "propose_per_task", "solve_samples", "micro_batch_tokens", "logprob_chunk",
                "archive_cap", "max_new_tokens", "dist_timeout_min"):
        if cfg[key] < 1:
            raise SystemExit(f"--{key} {cfg[key]}: must be >= 1")
    if not cfg["baseline"]:
        if cfg["students"] < 1:
            raise SystemExit(f"--students {cfg['students']}: must be >= 1 (or --baseline: one "
                             "adapter plays both roles)")
        if cfg["teachers"] < 0:
            raise SystemExit(f"--teachers {cfg['teachers']}: must be >= 0 (0: students train on "
                             "the seed archive alone)")
    if cfg["gpu_memory_gb"] < 0:
        raise SystemExit(f"--gpu_memory_gb {cfg['gpu_memory_gb']}: must be >= 0 (0 = detect)")
    if cfg["dtype"] == "float16":
        # no loss scaling: pg_loss divides by the member's token count (~1e6 at paper scale)
        raise SystemExit("--dtype float16: not supported (training has no loss scaling, and the "
                         "gradients of a loss divided by the token count underflow in float16); "
                         "use bfloat16 (same memory, float32's range) or float32")
    if cfg["keep_checkpoints"] < 0:
        raise SystemExit(f"--keep_checkpoints {cfg['keep_checkpoints']}: must be >= 0 (0 = all)")
    choices = {"engine": ("auto", "hf", "vllm"), "dtype": ("", "float32", "bfloat16"), **swaps}
    for key, allowed in choices.items():
        if cfg[key] not in allowed:
            raise SystemExit(f"--{key} {cfg[key]!r}: expected one of {list(allowed)}")
    if not 0 <= cfg["opensir_novelty_weight"] <= 1:
        weight = cfg["opensir_novelty_weight"]
        raise SystemExit(f"--opensir_novelty_weight {weight}: must be in [0, 1]")
    if not 0 < cfg["opensir_band_low"] <= cfg["opensir_band_high"] < 1:
        raise SystemExit("--opensir_band_low/--opensir_band_high: need 0 < low <= high < 1")
    for key, table in swaps.items():
        # a swap point's own checks (soar: a probe file, separate roles)
        entry = table[cfg[key]] if isinstance(table, dict) else None
        if isinstance(entry, dict) and "check" in entry:
            entry["check"](cfg)
    for name, path in init_adapter_paths(cfg["init_adapters"]).items():
        if not os.path.isfile(path):
            raise SystemExit(f"--init_adapters {name}={path}: no such file (a PEFT folder or its "
                             "adapter_model.safetensors)")
    for key, allowed in (("mutations", evolve.MUTATIONS), ("crossovers", evolve.CROSSOVERS)):
        if any(name.strip() not in allowed for name in cfg[key].split(",")):
            raise SystemExit(f"--{key} {cfg[key]!r}: expected names of {list(allowed)}")
    try:
        evolve.operator_hp(cfg["evolve_hp"])
    except ValueError as e:
        raise SystemExit(f"--evolve_hp {cfg['evolve_hp']!r}: {e}")
    try:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        tempfile.TemporaryFile(dir=cfg["out_dir"]).close()
    except OSError as e:
        raise SystemExit(f"--out_dir {cfg['out_dir']!r} is not writable: {e}")
    return check_resume(cfg, roles)


def init_adapter_paths(text):
    """--init_adapters "s0=PATH,t1=PATH" -> {member: safetensors file}; PATH is a PEFT folder (a
    checkpoint's adapters/<member>/) or its adapter_model.safetensors."""
    paths = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SystemExit(f"--init_adapters {item!r}: expected MEMBER=PATH, e.g. s0=child/")
        path = path.strip()
        if os.path.isdir(path):
            path = os.path.join(path, "adapter_model.safetensors")
        paths[name.strip()] = path
    return paths


def check_resume(cfg, roles):
    """The checkpoint to resume from, or None; one of another population or base model stops the
    run here, naming the difference."""
    resume = cfg["resume"]
    if resume == "auto":
        resume = population.latest_checkpoint(cfg["out_dir"])
    if not resume:
        return None
    try:
        with open(os.path.join(resume, "state.json")) as f:
            saved = json.load(f)
        saved = dict(saved["config"], roles=[m["role"] for m in saved["members"]])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--resume {resume!r}: not a readable checkpoint folder ({e})")
    # the ratings are the rating system's own values: another system cannot read them (a
    # checkpoint from before --rating existed is TrueSkill's)
    if saved.get("rating", "trueskill") != cfg["rating"]:
        raise SystemExit(f"--resume {resume}: the checkpoint's ratings are "
                         f"{saved.get('rating', 'trueskill')!r} ratings, this run has --rating "
                         f"{cfg['rating']!r}; resume with --rating "
                         f"{saved.get('rating', 'trueskill')}")
    for key, ours in [("roles", roles), ("model", cfg["model"]), ("lora_rank", cfg["lora_rank"]),
                      ("lora_targets", cfg["lora_targets"])]:
        if saved.get(key) != ours:
            raise SystemExit(f"--resume {resume}: the checkpoint has {key} {saved.get(key)!r} (a "
                             f"population of {len(saved['roles'])}), this run has {ours!r} (a "
                             f"population of {len(roles)})")
    return resume


def seed_files(cfg):
    """--seed_archive as comma-separated files ("" = AZR's identity program, archive.IDENTITY)."""
    choice = cfg["seed_archive"]
    if choice == "identity" or (choice == "auto" and cfg["model"] == "tiny"):
        return ""
    if choice == "auto" and cfg["model"] == "tiny-warm":
        # the laptop world's own seeds (tinyworld.write_seeds): the identity program gives it
        # nothing to solve
        return os.path.join(tinyworld.model_folder("tiny-warm", cfg["model_cache"]), "seeds.jsonl")
    if choice == "auto":
        # a stop that names `python evaluate.py fetch` when they are not there
        return ",".join(data.require(name, cfg["data_dir"]) for name in data.SEEDS)
    return choice


def member_roles(cfg):
    if cfg["baseline"]:
        return ["both"]
    return ["teacher"] * cfg["teachers"] + ["student"] * cfg["students"]


def precision(cfg, device, roles):
    """(dtype, gradient checkpointing) resolved for this device; on CUDA, before loading 15 GB, a
    stop with the plan's table when this configuration cannot fit."""
    dtype = cfg["dtype"] or ("bfloat16" if device.startswith("cuda") else "float32")
    checkpointing = cfg["gradient_checkpointing"]
    if checkpointing is None:
        checkpointing = device.startswith("cuda")
    if device.startswith("cuda"):
        plan.check_fits(dict(cfg, dtype=dtype, gradient_checkpointing=checkpointing), roles)
    return dtype, checkpointing


def first_archive(cfg, roles, check):
    """The seed archive, validated in the sandbox (before the slow model: a bad seed file fails
    fast). Students alone (--teachers 0) may train on code_f seeds only: nobody proposes from
    them."""
    def validate_seeds(jobs):
        return check(verify.validate, jobs)
    has_teachers = any(role in ("teacher", "both") for role in roles)
    problems, line = archive.seed_archive(seed_files(cfg), validate_seeds, has_teachers)
    logs.print0(line)
    return problems


def load_population(cfg, roles, dtype, device, checkpointing):
    """The frozen base and one LoRA adapter per member on it: (folder, model, tokenizer, members).
    Every member's initialisation is seeded by (seed, slot), so it is the same on every rank."""
    try:
        folder = tinyworld.model_folder(cfg["model"], cfg["model_cache"])
        base, tokenizer = population.load_base(folder, dtype, device)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--model {cfg['model']!r}: cannot load it ({type(e).__name__}: {e})")
    model, members = population.init_population(base, tokenizer, cfg, roles)
    if checkpointing:
        # activations of one layer at a time; population.active keeps a member's adapter on
        # through backward
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # the HF engine switches to eval for generation and back
    model.train()
    return folder, model, tokenizer, members


def optimizer_factory(model, cfg):
    """make_optimizer(member name) -> its AdamW (design §5: constant lr); every rank holds every
    member's state (design §9)."""
    def make_optimizer(name):
        params = population.trainable_params(model, name)
        return torch.optim.AdamW(params, lr=cfg["lr"], betas=(0.9, 0.999),
                                 weight_decay=cfg["weight_decay"])
    return make_optimizer


def start_engine(cfg, folder, model, tokenizer, members, dtype):
    """The generation engine (engines.make_engine), after any resume: vLLM loads the adapters."""
    try:
        return engines.make_engine(cfg["engine"], folder, model, tokenizer, members,
                                   dict(cfg, dtype=dtype))
    except OSError as e:
        raise SystemExit(f"--engine {cfg['engine']}: {e}")


def embedder(model, tokenizer):
    """embed(programs) -> [N, H]: the frozen base's embedding of each program, cached (recomputed
    after a resume: deterministic). OpenSIR's novelty and LEEPS's neighbours read it."""
    vectors = {}

    def embed(programs):
        missing = [p for p in dict.fromkeys(programs) if p not in vectors]
        if missing:
            # one text per forward: in a padded batch the float sums depend on the batch's shape,
            # and a resumed run, which fills the cache in other batches, must see the same vectors
            computed = population.embed_texts(model, tokenizer, missing, batch_size=1)
            for program, vector in zip(missing, computed):
                vectors[program] = vector
        if not programs:
            return torch.zeros(0, model.get_base_model().config.hidden_size)
        return torch.stack([vectors[p] for p in programs])
    return embed


def finish(engine, wandb_run):
    """vLLM's shutdown tears down the default process group under torchrun: the engine goes
    first."""
    engines.close_engine(engine)
    if wandb_run is not None:
        wandb_run.finish()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
