"""
Training-dynamics figures of PopuLoRA runs from their metrics.jsonl (SPEC §10), like the paper's Figures 3, 4, 5, 9
and 12, and a short report.md linking them. Called as `python evaluate.py report OUT_DIR [OTHER_OUT_DIR ...]`
(or `python report.py ...`); several runs (population and baseline) share the axes of every figure.

Figures (PNG, in OUT_DIR/report/ unless --out): rates (format and validity rate of teachers, format and solve rate of
students, per task type), difficulty (teacher difficulty = 1 - solve rate of its valid problems, rewards),
complexity (the four axes of valid proposals), ratings (TrueSkill mu +- sigma per member, evolution events as
dotted lines), matches (outcome shares per step, and each member's running win rate from its own side),
archive (CVT coverage and size per task type), student_vs_teacher (each student's solve rate against each
teacher, averaged over a few windows of steps), response_len (tokens per teacher and student response).
Why its own file: plotting is a concern of its own and evaluate.py is at its line budget.
Not covered: anything not in metrics.jsonl (per-sample text is in samples.jsonl).
"""
import argparse
import json
import math
import os
import re

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

import logs  # noqa: E402
from verify import TASKS  # noqa: E402

AXES = ("ast_depth", "cyclomatic", "loc", "variables")
STYLES = ("-", "--", ":", "-.")   # one line style per run, one colour per series


def load_run(folder):
    """{"name", "rows": [metrics dicts sorted by step]}; a clear error for a folder without metrics.jsonl."""
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"report: {path} not found (expected a training out_dir)")
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except ValueError:
                print(f"report: {path} line {n} is not JSON (a run still writing?), skipped")
    cfg = {}
    if os.path.isfile(os.path.join(folder, "config.json")):
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
    cfg = cfg.get("config", cfg)   # train.py writes {"config": {...}, "git_commit": ...}
    name = os.path.basename(os.path.normpath(folder)) + (" (baseline)" if cfg.get("baseline") else "")
    return {"name": name, "rows": sorted((r for r in rows if "step" in r), key=lambda r: r["step"])}


def series(run, key):
    """(steps, values) where the key has a number (None / missing steps are gaps, not zeros)."""
    pts = [(r["step"], r[key]) for r in run["rows"]
           if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return [p[0] for p in pts], [p[1] for p in pts]


def keys(runs, pattern):
    """Sorted distinct metric keys matching a regex over all runs, with its first group (e.g. member name)."""
    found = {}
    for run in runs:
        for r in run["rows"]:
            for k in r:
                m = re.fullmatch(pattern, k)
                if m:
                    found[k] = m.groups()
    return sorted(found.items())


def tag(label, run, runs):
    """Legend text: the series, and the run when several share the axes."""
    return f"{label} · {run['name']}" if len(runs) > 1 else label


def lines(ax, runs, key_labels, title, ylabel=""):
    for style, run in zip(STYLES * 4, runs):
        for colour, (key, label) in enumerate(key_labels):
            x, y = series(run, key)
            if x:
                ax.plot(x, y, style, color=f"C{colour % 10}", marker="." if len(x) < 30 else None,
                        label=tag(label, run, runs))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.lines:
        ax.legend(fontsize=6)


def figure(path, n, draw, width=4.2):
    fig, axes = plt.subplots(1, n, figsize=(width * n, 3.4), squeeze=False)
    draw(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evolution_steps(run):
    return sorted({r["step"] for r in run["rows"] for k in r if k.startswith("evolve/")})


def draw_all(runs, out):
    """Write every figure; returns {figure name: one-line caption}."""
    task_keys = lambda fmt: [(fmt.format(t), t) for t in TASKS]   # noqa: E731
    figs = {}

    def rates(ax):
        lines(ax[0], runs, [("teacher/format_rate", "format")] + task_keys("teacher/valid_rate/{}"),
              "teachers: format and validity rate")
        lines(ax[1], runs, [("student/format_rate", "format")] + task_keys("student/solve_rate/{}"),
              "students: format and solve rate")
    figure(os.path.join(out, "rates.png"), 2, rates)
    figs["rates"] = "Teacher format/validity and student format/solve rates per task type (population aggregate)."

    def difficulty(ax):
        lines(ax[0], runs, [("teacher/difficulty", "difficulty")],
              "teacher difficulty (1 - solve rate of valid problems)")
        lines(ax[1], runs, [("teacher/reward", "teacher"), ("student/reward", "student")], "mean reward")
    figure(os.path.join(out, "difficulty.png"), 2, difficulty)
    figs["difficulty"] = "Difficulty of valid proposals and mean rewards."

    def complexity(ax):
        for a, axis in zip(ax, AXES):
            lines(a, runs, [(f"complexity/{axis}", axis)], f"complexity: {axis}")
    figure(os.path.join(out, "complexity.png"), 4, complexity, 3.2)
    figs["complexity"] = "The four complexity axes of valid proposals (step means)."

    def ratings(ax):
        for style, run in zip(STYLES * 4, runs):
            for colour, (key, (name,)) in enumerate(keys([run], r"rating/([^/]+)/mu")):
                x, mu = series(run, key)
                _, sd = series(run, f"rating/{name}/sigma")
                ax[0].plot(x, mu, style, color=f"C{colour % 10}", label=tag(name, run, runs))
                if len(sd) == len(mu):
                    ax[0].fill_between(x, [m - s for m, s in zip(mu, sd)], [m + s for m, s in zip(mu, sd)],
                                       color=f"C{colour % 10}", alpha=0.1)
            for s in evolution_steps(run):
                ax[0].axvline(s, color="grey", linestyle=":", linewidth=0.8)
        ax[0].set_title("TrueSkill mu +- sigma per member (dotted: evolution)", fontsize=9)
        ax[0].set_xlabel("step", fontsize=8)
        if ax[0].lines:
            ax[0].legend(fontsize=6)
    figure(os.path.join(out, "ratings.png"), 1, ratings, 6.5)
    figs["ratings"] = "TrueSkill rating of every member slot; evolution replaces a slot's adapter at the dotted steps."

    def matches(ax):
        for style, run in zip(STYLES * 4, runs):
            outcomes = [[r[k] for k in r if re.fullmatch(r"match/[^/]+/[^/]+/outcome", k) and r[k] is not None]
                        for r in run["rows"]]
            steps = [r["step"] for r in run["rows"]]
            for colour, (value, label) in enumerate(((1, "student wins"), (0, "draws"), (-1, "teacher wins"))):
                share = [sum(o == value for o in os_) / len(os_) if os_ else math.nan for os_ in outcomes]
                ax[0].plot(steps, share, style, color=f"C{colour}", label=tag(label, run, runs))
            wins = {}   # member -> running (wins, matches) from its own side
            for r in run["rows"]:
                for k, v in r.items():
                    m = re.fullmatch(r"match/([^/]+)/([^/]+)/outcome", k)
                    if m and v is not None and m.group(1) != m.group(2):   # a baseline's self-match has no side
                        for who, won in ((m.group(1), v == -1), (m.group(2), v == 1)):
                            w, n, xs, ys = wins.setdefault(who, [0, 0, [], []])
                            wins[who][:2] = [w + won, n + 1]
                            xs.append(r["step"])
                            ys.append((w + won) / (n + 1))
            for colour, (who, (_, _, xs, ys)) in enumerate(sorted(wins.items())):
                ax[1].plot(xs, ys, style, color=f"C{colour % 10}", label=tag(who, run, runs))
        ax[0].set_title("match outcomes per step (share of matches)", fontsize=9)
        ax[1].set_title("running win rate, each member from its own side", fontsize=9)
        for a in ax:
            a.set_xlabel("step", fontsize=8)
            if a.lines:
                a.legend(fontsize=6)
    figure(os.path.join(out, "matches.png"), 2, matches)
    figs["matches"] = ("Outcomes from both perspectives: students' wins, draws and teachers' wins; per-member running "
                       "win rates.")

    def archive(ax):
        lines(ax[0], runs, [("archive/coverage", "coverage")], "archive coverage (share of 4096 CVT cells)")
        lines(ax[1], runs, task_keys("archive/size/{}"), "archive size per task type")
    figure(os.path.join(out, "archive.png"), 2, archive)
    figs["archive"] = "Archive coverage of the complexity descriptor space and archive sizes."

    pop = next((r for r in runs if keys([r], r"match/([^/]+)/([^/]+)/solve_rate")), None)
    if pop:
        pairs = [g for _, g in keys([pop], r"match/([^/]+)/([^/]+)/solve_rate")]
        teachers, students = sorted({t for t, _ in pairs}), sorted({s for _, s in pairs})
        rows, parts = pop["rows"], min(4, len(pop["rows"]))   # up to four windows of consecutive steps
        windows = [rows[i * len(rows) // parts:(i + 1) * len(rows) // parts] for i in range(parts)]

        def heat(ax):
            for a, win in zip(ax, windows):
                grid = [[_mean([r.get(f"match/{t}/{s}/solve_rate") for r in win]) for t in teachers] for s in students]
                image = a.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
                a.set_xticks(range(len(teachers)), teachers, fontsize=7)
                a.set_yticks(range(len(students)), students, fontsize=7)
                a.set_title(f"steps {win[0]['step']}-{win[-1]['step']}", fontsize=9)
            plt.colorbar(image, ax=ax[-1], label="student solve rate")
        figure(os.path.join(out, "student_vs_teacher.png"), len(windows), heat, 3.2)
        figs["student_vs_teacher"] = (f"Solve rate of each student (rows) against each teacher (columns) of "
                                      f"{pop['name']}, per window of steps (blank: never matched).")

    def length(ax):
        lines(ax[0], runs, [("response_len/teacher", "teacher"), ("response_len/student", "student")],
              "response length (tokens)")
    figure(os.path.join(out, "response_len.png"), 1, length, 6.5)
    figs["response_len"] = "Mean completion length of teacher and student responses."
    return figs


def _mean(values):
    """logs.mean, with NaN (a gap in a figure) for nothing to average."""
    value = logs.mean(v for v in values if isinstance(v, (int, float)))
    return math.nan if value is None else value


def main(argv):
    parser = argparse.ArgumentParser(prog="evaluate.py report", description=__doc__.strip().split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("runs", nargs="+", help="training out_dirs (metrics.jsonl); the first is the population run")
    parser.add_argument("--out", default="", help="folder for the PNGs and report.md (default: FIRST_RUN/report)")
    args = parser.parse_args(argv)
    runs = [load_run(folder) for folder in args.runs]
    if not any(run["rows"] for run in runs):
        raise SystemExit("report: no metrics rows in " + ", ".join(args.runs))
    out = args.out or os.path.join(args.runs[0], "report")
    os.makedirs(out, exist_ok=True)
    figs = draw_all(runs, out)
    text = ["# Training report", "", "| run | steps | last step: teacher validity | student solve rate | "
            "archive coverage |", "|---|---|---|---|---|"]
    for run in runs:
        last = run["rows"][-1] if run["rows"] else {}
        valid = _mean([last.get(f"teacher/valid_rate/{t}") for t in TASKS])
        solve = _mean([last.get(f"student/solve_rate/{t}") for t in TASKS])
        coverage = last.get("archive/coverage") or 0.0
        text.append(f"| {run['name']} | {len(run['rows'])} | {valid:.3f} | {solve:.3f} | {coverage:.4f} |")
    text += [""] + [f"## {name}\n\n![{name}]({name}.png)\n\n{caption}\n" for name, caption in figs.items()]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(text))
    print(json.dumps({"out": out, "figures": [f"{name}.png" for name in figs]}))
    return out


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
