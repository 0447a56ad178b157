"""Member ratings (design §6): TrueSkill, behind the five functions the rest of the code calls.

Why a file of its own: the rating system is a part researchers swap (Elo, Glicko, a plain win
rate). Everything else — matchmaking in train.py, the replacement step in evolve.py, the metrics in
logs.py — goes through initial / win_probability / update / selection_score / child, so another
system is a change to this file alone. A member carries its rating as the keys "mu" and "sigma"
(checkpoints and metrics.jsonl record them under those names).
"""
import math

import trueskill

# A local environment: trueskill.setup() would change the package's global one for everyone in the
# process. design §6: mu0 25, sigma0 25/3, beta 25/6, tau 25/300, draw probability 0.1.
TRUESKILL = trueskill.TrueSkill(mu=25.0, sigma=25.0 / 3, beta=25.0 / 6, tau=25.0 / 300,
                                draw_probability=0.1)


def initial():
    """The rating of a new member."""
    return {"mu": TRUESKILL.mu, "sigma": TRUESKILL.sigma}


def win_probability(student, teacher):
    """P(student beats teacher) under TrueSkill's performance model:
    Phi(d_mu / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2))."""
    spread = math.sqrt(2 * TRUESKILL.beta ** 2 + student["sigma"] ** 2 + teacher["sigma"] ** 2)
    return TRUESKILL.cdf((student["mu"] - teacher["mu"]) / spread)


def update(teacher, student, outcome):
    """Both members' ratings after one match, in place. outcome: 1 student wins, 0 draw, -1 teacher
    wins (train.match_outcome)."""
    t = TRUESKILL.create_rating(teacher["mu"], teacher["sigma"])
    s = TRUESKILL.create_rating(student["mu"], student["sigma"])
    if outcome == -1:
        t, s = TRUESKILL.rate_1vs1(t, s)
    else:
        s, t = TRUESKILL.rate_1vs1(s, t, drawn=outcome == 0)
    teacher["mu"], teacher["sigma"] = t.mu, t.sigma
    student["mu"], student["sigma"] = s.mu, s.sigma


# How evolution ranks a role and rates a child (cfg["selection"], design §7). The paper does not
# say; the choice is ours, made with bench/selection.py (results/selection/): a simulation of the
# population's ratings with latent skills.
#   inherit       rank by mu; a child inherits its parents' mean mu AND mean sigma, as if it were
#                 their continuation (the default)
#   conservative  rank by mu - 3 sigma; a child gets the parents' mean mu and a fresh sigma (the
#                 first rule). A child still has a large sigma at the next event, so it ranks last
#                 again whatever it did: this rule culls the newest child in most events.
SELECTIONS = ("inherit", "conservative")


def selection_score(member, selection):
    """What the replacement step ranks by within a role: higher is kept."""
    if selection == "conservative":
        return member["mu"] - 3 * member["sigma"]
    return member["mu"]


def child(parents, selection):
    """The rating of a child made from `parents` (member records) under the selection rule."""
    mu = sum(p["mu"] for p in parents) / len(parents)
    if selection == "conservative":
        return {"mu": mu, "sigma": TRUESKILL.sigma}
    return {"mu": mu, "sigma": sum(p["sigma"] for p in parents) / len(parents)}
