"""ratings.py: the properties every rating system of ratings.SYSTEMS must have (a new system is tested by
them the moment it has a line in the table), and TrueSkill's own numbers."""
import json
import math

import pytest
import trueskill

import ratings

SYSTEMS = sorted(ratings.SYSTEMS)


def played(system, wins, rounds=6):
    """A rating after `rounds` matches against new members: the student wins `wins` of them."""
    student = ratings.new(system)
    for k in range(rounds):
        outcome = 1 if k < wins else -1
        _, student = ratings.update(ratings.new(system), student, outcome)
    return student


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_rates_matches_the_same_way_round(system):
    a, b = ratings.new(system), ratings.new(system)
    assert a == b and ratings.win_probability(a, b) == pytest.approx(0.5)
    # a rating is JSON (checkpoints store it as it is) and its flat fields are finite numbers
    assert json.loads(json.dumps(a)) == a
    assert ratings.flat(a) and all(math.isfinite(v) for v in ratings.flat(a).values())
    t, s = ratings.update(a, b, 1)
    assert ratings.score(s) > ratings.score(b) and ratings.score(t) < ratings.score(a)
    assert a == ratings.new(system)  # update returns new values, the inputs stay as they were
    t, s = ratings.update(a, b, -1)
    assert ratings.score(s) < ratings.score(b) and ratings.score(t) > ratings.score(a)
    t, s = ratings.update(a, b, 0)  # a draw between equals moves neither's estimate up past the other
    assert ratings.score(s) == pytest.approx(ratings.score(t))
    strong, weak = played(system, 6), played(system, 0)
    p = ratings.win_probability(strong, weak)
    assert p > 0.5 and p + ratings.win_probability(weak, strong) == pytest.approx(1)
    for selection in ratings.SELECTIONS:
        assert ratings.score(strong, selection) > ratings.score(weak, selection)
        child = ratings.child([strong, weak], selection)
        assert ratings.score(weak) <= ratings.score(child) <= ratings.score(strong)
        assert math.isfinite(ratings.fitness(child, selection))
    assert ratings.child([strong], "inherit") == strong


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_has_a_band_report_can_draw(system):
    rating = played(system, 4)
    centre, low, high = ratings.band(ratings.flat(rating))
    assert low <= centre <= high and centre == pytest.approx(ratings.score(rating, "inherit"))
    assert ratings.band({"no_such_field": 1.0}) is None


def test_trueskill_constants_and_updates():
    env = ratings.TRUESKILL
    assert (env.mu, env.sigma, env.beta, env.tau, env.draw_probability) == (25.0, 25 / 3, 25 / 6, 25 / 300, 0.1)
    own = trueskill.TrueSkill(mu=25.0, sigma=25 / 3, beta=25 / 6, tau=25 / 300, draw_probability=0.1)
    for outcome in (1, 0, -1):
        t = {"system": "trueskill", "mu": 27.0, "sigma": 6.0}
        s = {"system": "trueskill", "mu": 23.0, "sigma": 7.0}
        t, s = ratings.update(t, s, outcome)
        rt, rs = own.create_rating(27.0, 6.0), own.create_rating(23.0, 7.0)
        if outcome == -1:
            rt, rs = own.rate_1vs1(rt, rs)
        else:
            rs, rt = own.rate_1vs1(rs, rt, drawn=outcome == 0)
        assert ratings.flat(t) == {"mu": rt.mu, "sigma": rt.sigma}
        assert ratings.flat(s) == {"mu": rs.mu, "sigma": rs.sigma}
    assert trueskill.global_env().mu == 25.0  # the package's global environment is untouched


def test_trueskill_win_probability_and_selection_rules():
    def rating(mu, sigma):
        return {"system": "trueskill", "mu": mu, "sigma": sigma}
    strong, new = rating(35.0, 2.0), ratings.new("trueskill")
    assert ratings.win_probability(strong, new) > 0.8
    x, y, z = rating(30.0, 8.0), rating(26.0, 1.0), rating(20.0, 0.5)
    assert ratings.score(x, "conservative") == 6.0
    order = sorted([x, y, z], key=lambda r: ratings.score(r, "conservative"), reverse=True)
    assert order == [y, z, x]
    assert [ratings.score(r, "inherit") for r in (x, y, z)] == [30.0, 26.0, 20.0]
    assert ratings.child([x, y], "inherit") == rating(28.0, 4.5)
    assert ratings.child([x, y], "conservative") == rating(28.0, 25 / 3)
    assert ratings.fitness(x, "inherit") == 30.0 / (25 / 3)
    assert ratings.band({"mu": 30.0, "sigma": 8.0}) == (30.0, 22.0, 38.0)
    assert ratings.legacy({"name": "t0", "mu": 30.0, "sigma": 8.0}) == x
