"""Whom does evolution replace? (issue 24) The population's ratings simulated with latent skills,
per candidate selection rule: how often a cull hits the newest child, and how often it removes a
truly weakest member.

    python bench/selection.py                                     # the committed run (~25 min)
    python bench/selection.py --seeds 4 --steps 60 --out out/selection_quick   # a quick look

The model. Every member has a latent skill (logits). Each step train.matchmake pairs teachers and
students from their ratings, as train.py does; in each match the teacher makes `--problems` valid
problems, each with its own difficulty d ~ N(0, problem_sd); the student attempts each `--samples`
times and is right with probability sigmoid(student skill - teacher skill - d); its mean
correctness is the match's solve rate, train.match_outcome turns that into the outcome (draw
margin 0.05) and ratings.update rates the match. Then every skill takes a random-walk step
N(0, walk_sd): training moves members apart (initial skills N(0, init_sd)). Every `--evolve_every`
steps, per role, the rule picks evolve.n_culled(n, evolve_frac) members, never the best by the
rule's score (a rule of ratings.SELECTIONS ranks through evolve.ranked_roles, as
evolve.replacement_step does); each becomes a child of top-half parents (two with probability
crossover_prob, else one), rated by ratings.child under the rule's child rating (the parents' mean
mu, and a fresh sigma or the parents' mean sigma), with a latent skill from the child model:
  neutral     the parents' mean skill + N(0, child_sd)
  worse       the parents' mean skill - 0.3 + N(0, 0.3): usually below its parents, often the
              weakest
  recovering  neutral, plus a temporary deficit of 0.5 that shrinks by x0.85 a step
              (results/retention: children start below their parent and are back within 10-20
              steps of training)
  unrelated   the role's mean skill + N(0, init_sd): the parents say nothing about the child
  retention   what results/retention measured: a mutation's child is neutral; a crossover's is
              neutral plus a deficit of 0.25 (about 0.05 of solve rate near p = 0.3, the crossovers'
              start gaps 0.02-0.07) shrinking x0.85 a step (most are back within 12-14 steps)
Not modelled: a teacher without a valid problem (it loses its match), N_T != N_S, skills that
depend on the opponent (one number per member).

Measured per cull, at the event, before anyone is replaced (k = members culled per role):
  newest       the culled member is a child made at the previous event
  weakest      it is one of the role's k truly weakest (latent skill, deficit included)
  door         newest and not one of the k weakest: culled for being new (the revolving door)
  regret       its skill minus the role's weakest skill (logits; 0 = the weakest was culled)
  final_skill  the population's mean skill after the last step (selection lifts it)
Per seed: the share (or mean) over its culls; the tables give the mean over seeds and a 95 %
bootstrap interval (2,000 resamples of the seeds). Rule `random` (uniform among all but the best
by mu) gives the chance levels. For the grace rules newest is 0 by construction (the previous
event's child may not be culled); their door opens one event later.

Writes OUT/report.md (command, commit, tables) and OUT/results.json; prints ONE JSON line:
{"rows": [{"child_model", "size", "rule", "culls", "newest", "weakest", "door", "regret",
"final_skill"}], ...} with each measure as [mean, low, high].
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import evolve  # noqa: E402
import ratings  # noqa: E402
import train  # noqa: E402
from learning_check import git_state  # noqa: E402  (bench/ is on sys.path: the script's folder)


def mu_minus_sigma(member):
    """A TrueSkill-only candidate (this simulation runs TrueSkill): mu - sigma of the logged
    fields."""
    fields = ratings.flat(member["rating"])
    return fields["mu"] - fields["sigma"]


# The candidates. rank: a rule of ratings.SELECTIONS ("inherit" ranks by mu, "conservative" by
# mu - 3 sigma) through evolve.ranked_roles, a score function (higher is kept), or None (random).
# child: whose ratings.child rates a child ("conservative": a fresh sigma; "inherit": the parents'
# mean sigma). grace: rated matches a child plays before it may be culled. The first two are
# train.py's options.
CANDIDATES = {
    "conservative": dict(rank="conservative", child="conservative", grace=0),
    "inherit": dict(rank="inherit", child="inherit", grace=0),
    "mu": dict(rank="inherit", child="conservative", grace=0),
    "mu_minus_sigma": dict(rank=mu_minus_sigma, child="conservative", grace=0),
    "conservative_grace20": dict(rank="conservative", child="conservative", grace=20),
    "mu_grace20": dict(rank="inherit", child="conservative", grace=20),
    "conservative_inherit": dict(rank="conservative", child="inherit", grace=0),
    "random": dict(rank=None, child="conservative", grace=0),
}


def child_skill(model, parents, same_role, rng, args):
    """(skill, deficit) of a new child under the child model (see the docstring)."""
    mean = sum(p["skill"] for p in parents) / len(parents)
    if model == "neutral":
        return mean + rng.normal(0, args.child_sd), 0.0
    if model == "worse":
        return mean - 0.3 + rng.normal(0, 0.3), 0.0
    if model == "recovering":
        return mean + rng.normal(0, args.child_sd), 0.5
    if model == "unrelated":
        role_mean = sum(m["skill"] for m in same_role) / len(same_role)
        return role_mean + rng.normal(0, args.init_sd), 0.0
    if model == "retention":
        return mean + rng.normal(0, args.child_sd), 0.25 * (len(parents) == 2)
    raise ValueError(f"unknown child model {model!r}")


def effective(member):
    """The skill a member plays with now: its skill less a new child's remaining deficit."""
    return member["skill"] - member["deficit"]


def solve_rate(student, teacher, rng, args):
    """One match's solve rate: `problems` problems of random difficulty, `samples` attempts each."""
    difficulty = rng.normal(0, args.problem_sd, args.problems)
    p = 1 / (1 + np.exp(-(effective(student) - effective(teacher) - difficulty)))
    return float(rng.binomial(args.samples, p).sum()) / (args.problems * args.samples)


def ranked(same_role, rule, pick):
    """The role's members, best first, by the rule's score (random: shuffled after the best)."""
    score = rule["rank"]
    if isinstance(score, str):
        return evolve.ranked_roles(same_role, score)[same_role[0]["role"]]
    if score is None:
        order = sorted(same_role, key=lambda m: -ratings.score(m["rating"]))
        rest = order[1:]
        pick.shuffle(rest)
        return order[:1] + rest
    return sorted(same_role, key=lambda m: -score(m))


def cull(same_role, rule, k, pick):
    """(losers, top-half parents): the k lowest-ranked members that may be culled, never the
    best."""
    order = ranked(same_role, rule, pick)
    top = order[:math.ceil(len(order) / 2)]
    allowed = []
    for m in order[1:]:
        if m["born"] is None or m["matches"] >= rule["grace"]:
            allowed.append(m)
    return allowed[len(allowed) - min(k, len(allowed)):], top


def event(members, rule, step, rng, pick, args, tally):
    """One evolution event: per role, cull, record what the culls hit, then make the children."""
    for role in ("teacher", "student"):
        same_role = [m for m in members if m["role"] == role]
        k = evolve.n_culled(len(same_role), args.evolve_frac)
        losers, top = cull(same_role, rule, k, pick)
        truth = sorted(same_role, key=effective)
        weakest = {m["name"] for m in truth[:k]}
        for loser in losers:
            newest = loser["born"] == step - args.evolve_every
            tally["newest"].append(newest)
            tally["weakest"].append(loser["name"] in weakest)
            tally["door"].append(newest and loser["name"] not in weakest)
            tally["regret"].append(effective(loser) - effective(truth[0]))
        for loser in losers:
            if len(top) >= 2 and pick.random() < args.crossover_prob:
                parents = pick.sample(top, 2)
            else:
                parents = [pick.choice(top)]
            rating = ratings.child([p["rating"] for p in parents], rule["child"])
            skill, deficit = child_skill(args.child_model, parents, same_role, rng, args)
            loser.update(rating=rating, skill=skill, deficit=deficit, born=step, matches=0)


def simulate(seed, rule, size, args):
    """One run of `args.steps` steps; returns this seed's measures."""
    # decisions (matches, parents) and nature (skills, outcomes) draw from separate streams
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    members = []
    for role in ("teacher", "student"):
        for i in range(size):
            member = {"name": f"{role[0]}{i}", "role": role, "skill": rng.normal(0, args.init_sd),
                      "deficit": 0.0, "born": None, "matches": 0, "rating": ratings.new()}
            members.append(member)
    by_name = {m["name"]: m for m in members}
    tally = {"newest": [], "weakest": [], "door": [], "regret": []}
    for step in range(args.steps):
        if step > 0 and step % args.evolve_every == 0:
            event(members, rule, step, rng, pick, args, tally)
        teachers = [m for m in members if m["role"] == "teacher"]
        students = [m for m in members if m["role"] == "student"]
        for teacher_name, student_name in train.matchmake(teachers, students, pick):
            teacher, student = by_name[teacher_name], by_name[student_name]
            rate = solve_rate(student, teacher, rng, args)
            outcome = train.match_outcome(rate, vars(args))
            teacher["rating"], student["rating"] = ratings.update(teacher["rating"],
                                                                  student["rating"], outcome)
            teacher["matches"] += 1
            student["matches"] += 1
        for m in members:
            m["skill"] += rng.normal(0, args.walk_sd)
            m["deficit"] *= 0.85
    result = {key: sum(values) / len(values) for key, values in tally.items()}
    result["final_skill"] = sum(effective(m) for m in members) / len(members)
    result["culls"] = len(tally["newest"])
    return result


def interval(values, resamples=2000):
    """[mean, low, high]: the mean over seeds and its 95 % percentile bootstrap interval."""
    values = np.asarray(values, dtype=float)
    draws = np.random.default_rng(0).integers(0, len(values), (resamples, len(values)))
    means = values[draws].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return [round(float(values.mean()), 3), round(float(low), 3), round(float(high), 3)]


def cell(value):
    return f"{value[0]:.2f} [{value[1]:.2f}, {value[2]:.2f}]"


def report(result):
    """report.md: the command, the commit, one table per (child model, population size)."""
    commit = f"Git commit: `{result['git_commit']}`"
    if result["git_dirty"]:
        commit += f" (uncommitted changes in: {', '.join(result['git_dirty'])})"
    settings = ", ".join(f"{k} {v}" for k, v in result["settings"].items())
    lines = ["# Selection rules: whom does evolution replace?", "",
             f"Command: `{result['command']}`", "", commit, "",
             f"Model and measures: bench/selection.py's docstring. Settings: {settings}.",
             "Each cell: mean over seeds [95 % bootstrap interval]. newest = share of culls that"
             " hit the child made at the previous event; weakest = share that remove one of the"
             " role's truly weakest; door = newest and not weakest (culled for being new); regret ="
             " the culled member's latent skill above the weakest's (logits).", ""]
    header = ("| rule | newest | weakest | door | regret | final skill |\n"
              "|---|---|---|---|---|---|")
    groups = {}
    for row in result["rows"]:
        groups.setdefault((row["child_model"], row["size"]), []).append(row)
    for (model, size), rows in groups.items():
        lines += [f"## child model `{model}`, {size}T+{size}S ({rows[0]['culls']} culls per seed)",
                  "", header]
        for row in rows:
            lines.append(f"| {row['rule']} | {cell(row['newest'])} | {cell(row['weakest'])} | "
                         f"{cell(row['door'])} | {cell(row['regret'])} | "
                         f"{cell(row['final_skill'])} |")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sizes", default="4,8", help="N_T = N_S per population, comma-separated")
    parser.add_argument("--child_models", default="neutral,worse,recovering,unrelated,retention")
    parser.add_argument("--rules", default=",".join(CANDIDATES))
    parser.add_argument("--evolve_every", type=int, default=10)
    parser.add_argument("--evolve_frac", type=float, default=0.25)
    parser.add_argument("--crossover_prob", type=float, default=0.5)
    parser.add_argument("--problems", type=int, default=24, help="valid problems per match")
    parser.add_argument("--samples", type=int, default=8, help="attempts per problem")
    parser.add_argument("--problem_sd", type=float, default=1.0, help="problem difficulty spread")
    parser.add_argument("--draw_margin", type=float, default=0.05)
    parser.add_argument("--init_sd", type=float, default=0.3, help="initial skill spread")
    parser.add_argument("--walk_sd", type=float, default=0.05, help="skill random walk per step")
    parser.add_argument("--child_sd", type=float, default=0.2, help="child skill spread")
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "selection"))
    args = parser.parse_args()
    # the code that runs is the code at start
    commit, dirty = git_state()
    started = time.time()
    rows = []
    for child_model in args.child_models.split(","):
        args.child_model = child_model
        for size in [int(s) for s in args.sizes.split(",")]:
            for name in args.rules.split(","):
                runs = [simulate(seed, CANDIDATES[name], size, args) for seed in range(args.seeds)]
                row = {"child_model": child_model, "size": size, "rule": name,
                       "culls": runs[0]["culls"]}
                for key in ("newest", "weakest", "door", "regret", "final_skill"):
                    row[key] = interval([r[key] for r in runs])
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "child_model")}
    command = "python bench/selection.py " + " ".join(sys.argv[1:])
    result = {"command": command.strip(), "git_commit": commit, "git_dirty": dirty,
              "settings": settings, "rows": rows, "wall_s": round(time.time() - started, 1)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
