"""Member ratings (design §6): the rating systems, behind the functions the rest of the code calls.

Why a file of its own: the rating system is a part researchers swap (Elo, Glicko, a plain win
rate). A rating is ONE opaque value that only this file reads: a member carries it as
member["rating"], checkpoints store it as it is (JSON), and everything else goes through
new / win_probability / update / score / fitness / child / flat / band. Another system is a
function per entry of SYSTEMS and a line there, in this file alone; `--rating NAME` picks it, and a
checkpoint of another system is refused by name before the model loads.

A rating value is {"system": name, ...the system's own fields}; flat() gives the fields
metrics.jsonl logs as rating/<member>/<field> (TrueSkill: mu, sigma).
"""
import math

import trueskill

# ----------------------------------------------------------------------------- TrueSkill
# A local environment: trueskill.setup() would change the package's global one for everyone in the
# process. design §6: mu0 25, sigma0 25/3, beta 25/6, tau 25/300, draw probability 0.1.
TRUESKILL = trueskill.TrueSkill(mu=25.0, sigma=25.0 / 3, beta=25.0 / 6, tau=25.0 / 300,
                                draw_probability=0.1)


def trueskill_new():
    return {"mu": TRUESKILL.mu, "sigma": TRUESKILL.sigma}


def trueskill_win_probability(student, teacher):
    """P(student beats teacher) under TrueSkill's performance model:
    Phi(d_mu / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2))."""
    spread = math.sqrt(2 * TRUESKILL.beta ** 2 + student["sigma"] ** 2 + teacher["sigma"] ** 2)
    return TRUESKILL.cdf((student["mu"] - teacher["mu"]) / spread)


def trueskill_update(teacher, student, outcome):
    """(teacher, student) fields after one match."""
    t = TRUESKILL.create_rating(teacher["mu"], teacher["sigma"])
    s = TRUESKILL.create_rating(student["mu"], student["sigma"])
    if outcome == -1:
        t, s = TRUESKILL.rate_1vs1(t, s)
    else:
        s, t = TRUESKILL.rate_1vs1(s, t, drawn=outcome == 0)
    return {"mu": t.mu, "sigma": t.sigma}, {"mu": s.mu, "sigma": s.sigma}


def trueskill_score(rating, selection):
    """inherit: mu; conservative: mu - 3 sigma."""
    if selection == "conservative":
        return rating["mu"] - 3 * rating["sigma"]
    return rating["mu"]


def trueskill_child(parents, selection):
    """The parents' mean mu, and their mean sigma (inherit) or a fresh one (conservative)."""
    mu = sum(p["mu"] for p in parents) / len(parents)
    if selection == "conservative":
        return {"mu": mu, "sigma": TRUESKILL.sigma}
    return {"mu": mu, "sigma": sum(p["sigma"] for p in parents) / len(parents)}


def trueskill_band(flat):
    """A logged rating's (centre, low, high) for a plot: mu and mu +- sigma."""
    return flat["mu"], flat["mu"] - flat["sigma"], flat["mu"] + flat["sigma"]


# ----------------------------------------------------------------------------- the table
# The rating systems (cfg["rating"]): name -> its functions, each over the system's own fields:
#   new() -> fields                     a new member's rating
#   win_probability(student, teacher)   P(student beats teacher): matchmaking's weights
#   update(teacher, student, outcome)   -> (teacher, student) fields after one match
#   score(fields, selection)            what evolution ranks a role by: higher is kept
#   child(parents' fields, selection)   -> a child's fields
#   band(flat) -> (centre, low, high)   a logged rating, drawn by report.py
#   unit                                a score difference that matters (weighted_multi's
#                                       fitness unit: a new member's uncertainty)
SYSTEMS = {
    "trueskill": dict(new=trueskill_new, win_probability=trueskill_win_probability,
                      update=trueskill_update, score=trueskill_score, child=trueskill_child,
                      band=trueskill_band, unit=TRUESKILL.sigma),
}

# How evolution ranks a role and rates a child (cfg["selection"], design §7), rules every system
# answers. The paper does not say; the choice is ours, made with bench/selection.py
# (results/selection/): a simulation of the population's ratings with latent skills.
#   inherit       rank by the rating's point estimate (TrueSkill: mu); a child inherits its parents'
#                 mean rating, as if it were their continuation (the default)
#   conservative  rank by a lower bound (mu - 3 sigma); a child gets the parents' mean estimate and
#                 a new member's uncertainty (the first rule). A child still has a large sigma at
#                 the next event, so it ranks last again whatever it did: this rule culls the
#                 newest child in most events.
SELECTIONS = ("inherit", "conservative")


# ----------------------------------------------------------------------------- what others call

def system_of(rating):
    return SYSTEMS[rating["system"]]


def fields(rating):
    return {k: v for k, v in rating.items() if k != "system"}


def new(system="trueskill"):
    """The rating of a new member under `system` (a name of SYSTEMS)."""
    return {"system": system, **SYSTEMS[system]["new"]()}


def win_probability(student, teacher):
    """P(the student of rating `student` beats the teacher of rating `teacher`)."""
    return system_of(student)["win_probability"](fields(student), fields(teacher))


def update(teacher, student, outcome):
    """The two ratings after one match: (teacher, student), new values. outcome: 1 student wins, 0
    draw, -1 teacher wins (train.MATCH_RULES)."""
    system = teacher["system"]
    t, s = SYSTEMS[system]["update"](fields(teacher), fields(student), outcome)
    return {"system": system, **t}, {"system": system, **s}


def score(rating, selection="inherit"):
    """What evolution ranks a role by under a rule of SELECTIONS: higher is kept."""
    return system_of(rating)["score"](fields(rating), selection)


def fitness(rating, selection="inherit"):
    """score in units of a new member's uncertainty (evolve's weighted_multi: T = 1 tilts
    mildly)."""
    return score(rating, selection) / system_of(rating)["unit"]


def child(parents, selection="inherit"):
    """The rating of a child made from parents of ratings `parents`."""
    system = parents[0]["system"]
    made = SYSTEMS[system]["child"]([fields(p) for p in parents], selection)
    return {"system": system, **made}


def flat(rating):
    """{field: number}: what metrics.jsonl logs as rating/<member>/<field>."""
    return fields(rating)


def band(flat_rating):
    """(centre, low, high) of a logged rating (flat's fields, read back from metrics.jsonl), by
    the system whose fields these are; None if no system logs these fields."""
    for system in SYSTEMS.values():
        if set(system["new"]()) == set(flat_rating):
            return system["band"](flat_rating)
    return None


def legacy(saved_member):
    """A member record of a checkpoint written before ratings were opaque (TrueSkill's mu and
    sigma on the member itself): its rating."""
    return {"system": "trueskill", "mu": saved_member["mu"], "sigma": saved_member["sigma"]}
