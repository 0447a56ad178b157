"""
Training-dynamics figures of PopuLoRA runs from their metrics.jsonl (design §10), like the paper's
Figures 3, 4, 5, 9 and 12, and a short report.md linking them. Called as
`python evaluate.py report OUT_DIR [OTHER_OUT_DIR ...]` (or `python report.py ...`); several runs
(population and baseline) share the axes of every figure.

Figures (PNG, in OUT_DIR/report/ unless --out): rates (format and validity rate of teachers, format
rate of students and their solve rate on their matched teachers' problems per task type — the
oscillation of figures 3 and 11 — and apart, on archive top-ups), difficulty (teacher difficulty =
1 - solve rate of its valid problems, rewards), complexity (the four axes of the programs teachers
wrote: valid code_i and code_o proposals), ratings (each member's rating and its band, TrueSkill
mu +- sigma; evolution events as dotted lines), matches (outcome shares per step, and each
member's running win rate from its own side), archive (CVT coverage and size per task type),
student_vs_teacher (each student's solve rate against each teacher, averaged over a few windows of
steps), entropy (per member, the spread of figure 18), response_len (tokens per teacher and student response), problem_solve_rates
(the newest checkpoint's archive: each attempted problem's solve rate, figure 8).
Why its own file: plotting is a concern of its own, apart from scoring answers.
Not covered: anything not in metrics.jsonl or the newest checkpoint's archive.jsonl (per-sample
text is in samples.jsonl).
"""
import argparse
import json
import math
import os
import re

import matplotlib

# files only, no display
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import logs  # noqa: E402
import ratings  # noqa: E402
from verify import TASKS  # noqa: E402

AXES = ("ast_depth", "cyclomatic", "loc", "variables")
# one line style per run, one colour per series
STYLES = ("-", "--", ":", "-.")


def load_run(folder):
    """{"name", "rows": [metrics dicts sorted by step]}; a clear error for a folder without
    metrics.jsonl."""
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
    # train.py writes {"config": {...}, "git_commit": ...}
    cfg = cfg.get("config", cfg)
    name = os.path.basename(os.path.normpath(folder))
    if cfg.get("baseline"):
        name += " (baseline)"
    stepped = [r for r in rows if "step" in r]
    return {"name": name, "folder": folder, "rows": sorted(stepped, key=lambda r: r["step"])}


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def series(run, key):
    """(steps, values) where the key has a number (None / missing steps are gaps, not zeros)."""
    steps, values = [], []
    for r in run["rows"]:
        if _is_number(r.get(key)):
            steps.append(r["step"])
            values.append(r[key])
    return steps, values


def keys(runs, pattern):
    """Sorted distinct metric keys matching a regex over all runs, with its first group (e.g.
    member name)."""
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
    if len(runs) > 1:
        return f"{label} · {run['name']}"
    return label


def lines(ax, runs, key_labels, title, ylabel=""):
    """One line per (metric key, label) and run: colour per series, line style per run."""
    for style, run in zip(STYLES * 4, runs):
        for colour, (key, label) in enumerate(key_labels):
            x, y = series(run, key)
            if not x:
                continue
            # markers only while points are few enough to see
            marker = None
            if len(x) < 30:
                marker = "."
            ax.plot(x, y, style, color=f"C{colour % 10}", marker=marker,
                    label=tag(label, run, runs))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.lines:
        ax.legend(fontsize=6)


def figure(path, n, draw, width=4.2):
    """A row of n axes, drawn by draw(axes), saved as a PNG."""
    fig, axes = plt.subplots(1, n, figsize=(width * n, 3.4), squeeze=False)
    draw(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evolution_steps(run):
    """Steps with an evolution event (any evolve/ metric)."""
    steps = set()
    for r in run["rows"]:
        if any(k.startswith("evolve/") for k in r):
            steps.add(r["step"])
    return sorted(steps)


def _task_keys(pattern):
    """[(metric key, task type)] for a key pattern with one {} for the task type."""
    return [(pattern.format(task), task) for task in TASKS]


def draw_all(runs, out):
    """Write every figure; returns {figure name: one-line caption}."""
    figs = {}

    def rates(ax):
        teachers = [("teacher/format_rate", "format")] + _task_keys("teacher/valid_rate/{}")
        lines(ax[0], runs, teachers, "teachers: format and validity rate")
        students = [("student/format_rate", "format")]
        students += _task_keys("student/matched_solve_rate/{}")
        lines(ax[1], runs, students, "students: format rate, solve rate on matched problems")
        lines(ax[2], runs, _task_keys("student/topup_solve_rate/{}"),
              "students: solve rate on archive top-ups")
    figure(os.path.join(out, "rates.png"), 3, rates)
    figs["rates"] = ("Teacher format/validity rates; student format rate and solve rate on the "
                     "matched teachers' problems, and apart on archive top-ups, per task type "
                     "(population aggregate).")

    def difficulty(ax):
        lines(ax[0], runs, [("teacher/difficulty", "difficulty")],
              "teacher difficulty (1 - solve rate of valid problems)")
        rewards = [("teacher/reward", "teacher"), ("student/reward", "student")]
        lines(ax[1], runs, rewards, "mean reward")
    figure(os.path.join(out, "difficulty.png"), 2, difficulty)
    figs["difficulty"] = "Difficulty of valid proposals and mean rewards."

    def complexity(ax):
        for a, axis in zip(ax, AXES):
            lines(a, runs, [(f"complexity/{axis}", axis)], f"complexity: {axis}")
    figure(os.path.join(out, "complexity.png"), 4, complexity, 3.2)
    figs["complexity"] = ("The four complexity axes of the programs teachers wrote (valid code_i "
                          "and code_o proposals; a code_f teacher is shown its program), step "
                          "means.")

    figure(os.path.join(out, "ratings.png"), 1, lambda ax: _draw_ratings(ax, runs), 6.5)
    figs["ratings"] = ("The rating of every member slot (TrueSkill: mu +- sigma); evolution "
                       "replaces a slot's adapter at the dotted steps.")

    figure(os.path.join(out, "matches.png"), 2, lambda ax: _draw_matches(ax, runs))
    figs["matches"] = ("Outcomes from both perspectives: students' wins, draws and teachers' wins; "
                       "per-member running win rates.")

    def archive(ax):
        lines(ax[0], runs, [("archive/coverage", "coverage")],
              "archive coverage (share of 4096 CVT cells)")
        lines(ax[1], runs, _task_keys("archive/size/{}"), "archive size per task type")
    figure(os.path.join(out, "archive.png"), 2, archive)
    figs["archive"] = "Archive coverage of the complexity descriptor space and archive sizes."

    caption = _student_vs_teacher(runs, out)
    if caption:
        figs["student_vs_teacher"] = caption

    def entropy(ax):
        members = [(key, name) for key, (name,) in keys(runs, r"entropy/([^/]+)")
                   if name not in ("teacher", "student")]
        lines(ax[0], runs, members, "token entropy per member (nats, trained tokens)")
        roles = [("entropy/teacher", "teachers"), ("entropy/student", "students")]
        lines(ax[1], runs, roles, "token entropy per role")
    figure(os.path.join(out, "entropy.png"), 2, entropy)
    figs["entropy"] = "Mean token entropy of each member's trained tokens, and per role."

    caption = _problem_solve_rates(runs[0], out)
    if caption:
        figs["problem_solve_rates"] = caption

    def length(ax):
        lengths = [("response_len/teacher", "teacher"), ("response_len/student", "student")]
        lines(ax[0], runs, lengths, "response length (tokens)")
    figure(os.path.join(out, "response_len.png"), 1, length, 6.5)
    figs["response_len"] = "Mean completion length of teacher and student responses."
    return figs


def rating_series(run):
    """{member: (steps, centre, low, high)} of each member's logged rating (ratings.band: TrueSkill
    mu and mu +- sigma). Ratings of fields no system of ratings.py logs stop the report."""
    series_of = {}
    names = dict.fromkeys(name for _, (name, _) in keys([run], r"rating/([^/]+)/([^/]+)"))
    for name in names:
        x, centre, low, high = [], [], [], []
        for r in run["rows"]:
            flat = logs.logged_rating(r, name)
            if not flat:
                continue
            band = ratings.band(flat)
            if band is None:
                raise SystemExit(f"report: {run['name']} logs ratings {sorted(flat)} that no "
                                 f"system of ratings.SYSTEMS {list(ratings.SYSTEMS)} logs")
            x.append(r["step"])
            centre.append(band[0])
            low.append(band[1])
            high.append(band[2])
        series_of[name] = (x, centre, low, high)
    return series_of


def _draw_ratings(ax, runs):
    """Each member's rating and its band (rating_series), evolution steps dotted."""
    for style, run in zip(STYLES * 4, runs):
        for colour, (name, (x, centre, low, high)) in enumerate(rating_series(run).items()):
            ax[0].plot(x, centre, style, color=f"C{colour % 10}", label=tag(name, run, runs))
            ax[0].fill_between(x, low, high, color=f"C{colour % 10}", alpha=0.1)
        for step in evolution_steps(run):
            ax[0].axvline(step, color="grey", linestyle=":", linewidth=0.8)
    ax[0].set_title("rating per member, and its band (dotted: evolution)", fontsize=9)
    ax[0].set_xlabel("step", fontsize=8)
    if ax[0].lines:
        ax[0].legend(fontsize=6)


OUTCOME = r"match/([^/]+)/([^/]+)/outcome"   # teacher, student
OUTCOMES = ((1, "student wins"), (0, "draws"), (-1, "teacher wins"))


def _outcome_shares(rows, value):
    """Per row, the share of its matches with this outcome (NaN for a step without matches)."""
    shares = []
    for r in rows:
        outcomes = [r[k] for k in r if re.fullmatch(OUTCOME, k) and r[k] is not None]
        if outcomes:
            shares.append(sum(o == value for o in outcomes) / len(outcomes))
        else:
            shares.append(math.nan)
    return shares


def _running_win_rates(rows):
    """{member: (steps, running win rate)}, each member from its own side (a teacher wins at
    outcome -1, a student at +1)."""
    tally = {}   # member -> [wins, matches, steps, rates]
    for r in rows:
        for k, v in r.items():
            m = re.fullmatch(OUTCOME, k)
            # a baseline's self-match has no side
            if not m or v is None or m.group(1) == m.group(2):
                continue
            for who, won in ((m.group(1), v == -1), (m.group(2), v == 1)):
                record = tally.setdefault(who, [0, 0, [], []])
                record[0] += won
                record[1] += 1
                record[2].append(r["step"])
                record[3].append(record[0] / record[1])
    return {who: (steps, rates) for who, (_, _, steps, rates) in tally.items()}


def _draw_matches(ax, runs):
    """Outcome shares per step; each member's running win rate."""
    for style, run in zip(STYLES * 4, runs):
        steps = [r["step"] for r in run["rows"]]
        for colour, (value, label) in enumerate(OUTCOMES):
            share = _outcome_shares(run["rows"], value)
            ax[0].plot(steps, share, style, color=f"C{colour}", label=tag(label, run, runs))
        rates = _running_win_rates(run["rows"])
        for colour, (who, (xs, ys)) in enumerate(sorted(rates.items())):
            ax[1].plot(xs, ys, style, color=f"C{colour % 10}", label=tag(who, run, runs))
    ax[0].set_title("match outcomes per step (share of matches)", fontsize=9)
    ax[1].set_title("running win rate, each member from its own side", fontsize=9)
    for a in ax:
        a.set_xlabel("step", fontsize=8)
        if a.lines:
            a.legend(fontsize=6)


def _student_vs_teacher(runs, out):
    """Heat maps of each student's solve rate against each teacher, per window of steps, for the
    first run with per-match solve rates; returns the caption, or None without such a run."""
    solve_rate = r"match/([^/]+)/([^/]+)/solve_rate"
    pop = next((r for r in runs if keys([r], solve_rate)), None)
    if not pop:
        return None
    pairs = [groups for _, groups in keys([pop], solve_rate)]
    teachers = sorted({t for t, _ in pairs})
    students = sorted({s for _, s in pairs})
    rows = pop["rows"]
    # up to four windows of consecutive steps
    parts = min(4, len(rows))
    windows = [rows[i * len(rows) // parts:(i + 1) * len(rows) // parts] for i in range(parts)]

    def heat(ax):
        for a, window in zip(ax, windows):
            grid = []
            for s in students:
                cells = []
                for t in teachers:
                    cells.append(_mean([r.get(f"match/{t}/{s}/solve_rate") for r in window]))
                grid.append(cells)
            image = a.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            a.set_xticks(range(len(teachers)), teachers, fontsize=7)
            a.set_yticks(range(len(students)), students, fontsize=7)
            a.set_title(f"steps {window[0]['step']}-{window[-1]['step']}", fontsize=9)
        plt.colorbar(image, ax=ax[-1], label="student solve rate")
    figure(os.path.join(out, "student_vs_teacher.png"), len(windows), heat, 3.2)
    return (f"Solve rate of each student (rows) against each teacher (columns) of "
            f"{pop['name']}, per window of steps (blank: never matched).")


def newest_archive(folder):
    """The archive.jsonl of the run's newest complete checkpoint (state.json is written last), or
    None."""
    steps = []
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if re.fullmatch(r"step_\d+", name) and os.path.isfile(os.path.join(path, "state.json")):
                steps.append(name)
    if not steps:
        return None
    return os.path.join(folder, max(steps), "archive.jsonl")


def _problem_solve_rates(run, out):
    """Histogram of the solve rate (correct / attempts) of every attempted problem in the run's
    newest checkpoint, per task type; returns the caption, or None without a checkpoint holding
    solve statistics."""
    path = newest_archive(run["folder"])
    if path is None:
        return None
    rates = {task: [] for task in TASKS}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            problem = row["problem"]
            if problem.get("attempts"):
                rates[row["task"]].append(problem["correct"] / problem["attempts"])
    counted = sum(len(values) for values in rates.values())
    if not counted:
        return None

    def histogram(ax):
        for a, task in zip(ax, TASKS):
            a.hist(rates[task], bins=[i / 10 for i in range(11)], color="C0")
            a.set_title(f"{task}: {len(rates[task])} attempted problems", fontsize=9)
            a.set_xlabel("solve rate over all attempts", fontsize=8)
    figure(os.path.join(out, "problem_solve_rates.png"), len(TASKS), histogram, 3.2)
    always = sum(rate == 1 for values in rates.values() for rate in values)
    never = sum(rate == 0 for values in rates.values() for rate in values)
    return (f"Solve rate of each attempted archive problem of {run['name']} at "
            f"{os.path.basename(os.path.dirname(path))} (matched and top-up attempts): "
            f"{always} of {counted} always solved, {never} never.")


def _mean(values):
    """logs.mean, with NaN (a gap in a figure) for nothing to average."""
    value = logs.mean(v for v in values if isinstance(v, (int, float)))
    if value is None:
        return math.nan
    return value


def main(argv):
    parser = argparse.ArgumentParser(prog="evaluate.py report",
                                     description=__doc__.strip().split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("runs", nargs="+",
                        help="training out_dirs (metrics.jsonl); the first is the population run")
    parser.add_argument("--out", default="",
                        help="folder for the PNGs and report.md (default: FIRST_RUN/report)")
    args = parser.parse_args(argv)
    runs = [load_run(folder) for folder in args.runs]
    if not any(run["rows"] for run in runs):
        raise SystemExit("report: no metrics rows in " + ", ".join(args.runs))
    out = args.out or os.path.join(args.runs[0], "report")
    os.makedirs(out, exist_ok=True)
    figs = draw_all(runs, out)
    text = ["# Training report", "",
            "| run | steps | last step: teacher validity | matched solve rate | top-up solve rate "
            "| archive coverage |",
            "|---|---|---|---|---|---|"]
    for run in runs:
        last = {}
        if run["rows"]:
            last = run["rows"][-1]
        valid = _mean([last.get(f"teacher/valid_rate/{t}") for t in TASKS])
        matched = _mean([last.get(f"student/matched_solve_rate/{t}") for t in TASKS])
        topup = _mean([last.get(f"student/topup_solve_rate/{t}") for t in TASKS])
        coverage = last.get("archive/coverage") or 0.0
        text.append(f"| {run['name']} | {len(run['rows'])} | {valid:.3f} | {matched:.3f} "
                    f"| {topup:.3f} | {coverage:.4f} |")
    text.append("")
    for name, caption in figs.items():
        text.append(f"## {name}\n\n![{name}]({name}.png)\n\n{caption}\n")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(text))
    print(json.dumps({"out": out, "figures": [f"{name}.png" for name in figs]}))
    return out


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
