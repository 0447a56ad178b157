"""evolve.py: docs/evolve.md §6.4 — the universal properties 1–8 for every operator
(parametrised), the per-operator properties against dense float64 algebra on small shapes, the
fail-safe, and the replacement step (design §7). The LoraConfig part of property 1 does not apply:
operators never see the config (evolve.py docstring)."""
import math

import pytest
import torch

import evolve
import ratings
import train

R = 4
# (out, in)
SHAPES = {"self_attn.q_proj": (48, 64), "self_attn.k_proj": (16, 64), "mlp.down_proj": (64, 96)}
OPS = [("mutation", n) for n in evolve.MUTATIONS] + [("crossover", n) for n in evolve.CROSSOVERS]
# every operator but evolve.DETERMINISTIC's draws from its generator (a new one needs no line here)
STOCHASTIC = (set(evolve.MUTATIONS) | set(evolve.CROSSOVERS)) - set(evolve.DETERMINISTIC)
A, B = evolve.A_KEY, evolve.B_KEY


def make(seed, layers=6, r=R, dtype=torch.float32, zero_b=False, shapes=SHAPES):
    """A trained-looking adapter: PEFT-init A rows U(±1/√in), B columns with a decaying scale
    (or B = 0, fresh)."""
    g = torch.Generator().manual_seed(seed)
    ad = {}
    for layer in range(layers):
        for name, (out, inp) in shapes.items():
            stem = f"base_model.model.model.layers.{layer}.{name}"
            ad[stem + A] = ((torch.rand(r, inp, generator=g) * 2 - 1) / inp ** 0.5).to(dtype)
            decay = 0.8 ** torch.arange(r)
            b = 0.05 * torch.randn(out, r, generator=g) * decay * (not zero_b)
            ad[stem + B] = b.to(dtype)
    return ad


def run(kind, name, parents, seed=0, **hp):
    gen = torch.Generator().manual_seed(seed)
    if kind == "mutation":
        return evolve.MUTATIONS[name](parents[0], gen, **hp)
    return evolve.CROSSOVERS[name](parents[0], parents[1], gen, **hp)


def pair(kind, dtype=torch.float32, **kw):
    if kind == "mutation":
        return [make(0, dtype=dtype, **kw)]
    return [make(0, dtype=dtype, **kw), make(1, dtype=dtype, **kw)]


def dw(ad, s):
    return ad[s + B].double() @ ad[s + A].double()


def rel(x, y):
    return float((x - y).norm() / y.norm().clamp_min(1e-300))


def svd_top(M, r=R):
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    return U[:, :r], S[:r], Vh[:r].T, S


def rotated(ad, seed=7):
    return evolve.rank_rotation(ad, torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------- universal properties 1-7

@pytest.mark.parametrize("kind,name", OPS)
def test_same_keys_shapes_dtypes_devices_and_finite(kind, name):
    parents = pair(kind)
    child = run(kind, name, parents)
    assert list(child) == list(parents[0])
    for k, v in child.items():
        first = parents[0][k]
        assert (v.shape, v.dtype, v.device) == (first.shape, first.dtype, first.device), k
        # contiguous: safetensors
        assert torch.isfinite(v).all() and v.is_contiguous(), k


@pytest.mark.parametrize("kind,name", OPS)
def test_parents_untouched_and_not_aliased(kind, name):
    parents = pair(kind)
    before = [{k: v.clone() for k, v in p.items()} for p in parents]
    child = run(kind, name, parents)
    for p, b in zip(parents, before):
        assert all(torch.equal(p[k], b[k]) for k in p)
        # editing the child cannot edit a parent
        assert all(child[k].data_ptr() != p[k].data_ptr() for k in p)


@pytest.mark.parametrize("kind,name", OPS)
def test_seeded_reproducibility(kind, name):
    parents = pair(kind)
    first = run(kind, name, parents, seed=3)
    assert all(torch.equal(first[k], v) for k, v in run(kind, name, parents, seed=3).items())
    others = [run(kind, name, parents, seed=s) for s in range(5)]
    same = [all(torch.equal(first[k], o[k]) for k in first) for o in others]
    if name in STOCHASTIC:
        assert not all(same), "a stochastic operator ignored its generator"
    else:
        assert all(same), "a deterministic operator depends on the seed"


@pytest.mark.parametrize("kind,name", OPS)
def test_norm_band(kind, name):
    parents = pair(kind)
    norms = [evolve.delta_norm(p) for p in parents]
    n = evolve.delta_norm(run(kind, name, parents))
    assert evolve.SAFE_BAND[0] * min(norms) <= n <= evolve.SAFE_BAND[1] * max(norms)


def test_trace_trick_matches_dense():
    ad = make(3, dtype=torch.float64)
    dense = {s: float(dw(ad, s).norm()) for s in evolve.modules(ad)}
    for s, v in evolve.delta_norms(ad).items():
        assert v == pytest.approx(dense[s], rel=1e-10)
    ad32 = make(3)
    for s, v in evolve.delta_norms(ad32).items():
        assert v == pytest.approx(dense[s], rel=1e-6)
    whole = math.sqrt(sum(v * v for v in dense.values()))
    assert evolve.delta_norm(ad) == pytest.approx(whole, rel=1e-10)


@pytest.mark.parametrize("kind,name", OPS)
@pytest.mark.parametrize("fresh", [False, True], ids=["trained", "fresh_B0"])
def test_no_dead_slots(kind, name, fresh):
    """A slot with a_j = 0 and b_j = 0 never trains again; every child A row must be non-zero. A
    fresh (B = 0) parent has ΔW = 0, so SVD-based children refill every slot with a random row of
    norm 1/√3."""
    child = run(kind, name, pair(kind, zero_b=fresh))
    for s in evolve.modules(child):
        assert (child[s + A].norm(dim=1) > 1e-6).all(), s
        if fresh:
            assert torch.count_nonzero(child[s + B]) == 0, s


@pytest.mark.parametrize("kind,name", OPS)
def test_bf16_in_bf16_out_within_rounding(kind, name):
    parents16 = pair(kind, dtype=torch.bfloat16)
    child16 = run(kind, name, parents16)
    child32 = run(kind, name, [{k: v.float() for k, v in p.items()} for p in parents16])
    for s in evolve.modules(child16):
        assert child16[s + A].dtype == child16[s + B].dtype == torch.bfloat16
        ref = dw(child32, s)
        assert float((dw(child16, s) - ref).abs().max()) <= 2e-2 * float(ref.abs().max()) + 1e-30, s


# -------------------------------------------------------------------- property 8: scalability guard

@pytest.mark.parametrize("kind,name", OPS)
def test_scalability_guard_200k(kind, name):
    """out = in = 200,000, r = 4: the factors are 3 MB each, a dense ΔW would be 160 GB, so any
    densification fails (out of memory) or never finishes."""
    big = {"mlp.down_proj": (200_000, 200_000)}
    parents = [make(s, layers=1, shapes=big) for s in ((0,) if kind == "mutation" else (0, 1))]
    child, info = evolve.apply_operator(name, kind, parents, torch.Generator().manual_seed(0))
    assert not info["fallback"], info["reason"]
    assert all(child[k].shape == parents[0][k].shape for k in child)


# ----------------------------------------------------------------------------- mutations

@pytest.mark.parametrize("kind", ["mutation", "crossover"])
def test_copy_parent_is_exact(kind):
    parents = pair(kind)
    child = run(kind, "copy_parent", parents)
    assert all(torch.equal(child[k], parents[0][k]) for k in child)


def test_spectral_jitter():
    p = make(0, dtype=torch.float64)
    child = evolve.spectral_jitter(p, torch.Generator().manual_seed(0), tau=0.0, theta=0.0)
    for s in evolve.modules(p):
        assert rel(dw(child, s), dw(p, s)) < 1e-12
    tau = 0.1
    child = evolve.spectral_jitter(p, torch.Generator().manual_seed(1), tau=tau, theta=0.05)
    for s in evolve.modules(p):
        U, S, V, _ = svd_top(dw(p, s))
        d = dw(child, s)
        # same row/column spaces
        assert rel(U @ (U.T @ d), d) < 1e-10 and rel((d @ V) @ V.T, d) < 1e-10
        assert math.exp(-4 * tau) <= float(d.norm() / dw(p, s).norm()) <= math.exp(4 * tau)
        assert rel(d, dw(p, s)) > 1e-3


def test_gauss_rel():
    p = make(0, layers=1, dtype=torch.float64)
    stems = evolve.modules(p)
    same = evolve.gauss_rel(p, torch.Generator().manual_seed(0), sigma=0.0)
    assert all(torch.equal(same[k], p[k]) for k in p)
    sigma, gen = 0.02, torch.Generator().manual_seed(1)
    draws = [evolve.gauss_rel(p, gen, sigma=sigma) for _ in range(200)]
    for s in stems:
        change = sum(rel(dw(c, s), dw(p, s)) for c in draws) / len(draws)
        assert 0.5 * math.sqrt(2) * sigma <= change <= 2 * math.sqrt(2) * sigma
        mean = sum(dw(c, s) for c in draws) / len(draws)
        # E[ΔW'] = ΔW
        assert rel(mean, dw(p, s)) < 0.25 * change
    fresh = evolve.gauss_rel(make(0, zero_b=True), gen, sigma=0.05)
    assert all(torch.count_nonzero(fresh[s + B]) == 0 for s in stems)
    half = evolve.gauss_rel(make(0, layers=6), gen, module_frac=0.5)
    moved = [not torch.equal(half[s + A], make(0, layers=6)[s + A]) for s in evolve.modules(half)]
    assert 0 < sum(moved) < len(moved)


@pytest.mark.parametrize("mode", ["random", "smallest"])
def test_component_resample(mode):
    p = make(0, dtype=torch.float64)
    child = evolve.component_resample(p, torch.Generator().manual_seed(0), rho=0.5, mode=mode)
    k = 2  # ⌈0.5·4⌉
    for s in evolve.modules(p):
        U, S, V, _ = svd_top(dw(p, s))
        # removed part in the parent's singular basis
        C = U.T @ (dw(p, s) - dw(child, s)) @ V
        diag = torch.diagonal(C)
        assert (C - torch.diag(diag)).abs().max() < 1e-10 * S[0]
        dropped = (diag - S).abs() < 1e-10 * S[0]
        assert int(dropped.sum()) == k and bool(((diag.abs() < 1e-10 * S[0]) | dropped).all())
        if mode == "smallest":
            assert dropped[-k:].all()
        energy = dw(p, s).norm() ** 2 - dw(child, s).norm() ** 2
        assert float(energy) == pytest.approx(float((S[dropped] ** 2).sum()), rel=1e-9)
        dead = child[s + B].norm(dim=0) == 0
        assert int(dead.sum()) == k
        Ad, Al = child[s + A][dead], child[s + A][~dead]
        # fresh, orthogonal
        assert (Ad.norm(dim=1) > 0.5).all() and (Ad @ Al.T).abs().max() < 1e-10


def test_scale_jitter():
    p = make(0, dtype=torch.float64)
    ratios = {}
    for per_adapter in (True, False):
        child = evolve.scale_jitter(p, torch.Generator().manual_seed(2), sigma_s=0.3,
                                    per_adapter=per_adapter)
        r = []
        for s in evolve.modules(p):
            d, d0 = dw(child, s).flatten(), dw(p, s).flatten()
            assert float(d @ d0 / (d.norm() * d0.norm())) > 1 - 1e-6
            r.append(float(d.norm() / d0.norm()))
            assert 0.7 - 1e-9 <= r[-1] <= 1.4 + 1e-9
        ratios[per_adapter] = r
    assert max(ratios[True]) - min(ratios[True]) < 1e-9
    assert max(ratios[False]) - min(ratios[False]) > 1e-3
    clipped = evolve.scale_jitter(p, torch.Generator().manual_seed(0), sigma_s=50.0)
    c = evolve.delta_norm(clipped) / evolve.delta_norm(p)
    assert min(abs(c - 0.7), abs(c - 1.4)) < 1e-9


@pytest.mark.parametrize("theta", [None, 0.3])
def test_rank_rotation(theta):
    p = make(0, dtype=torch.float64)
    child = evolve.rank_rotation(p, torch.Generator().manual_seed(0), theta=theta)
    for s in evolve.modules(p):
        assert rel(dw(child, s), dw(p, s)) < 1e-12
        assert float(child[s + A].norm()) == pytest.approx(float(p[s + A].norm()), rel=1e-12)
        assert float(child[s + B].norm()) == pytest.approx(float(p[s + B].norm()), rel=1e-12)
        assert not torch.allclose(child[s + A], p[s + A])
    like = torch.empty(0, dtype=torch.float64)
    Rm = evolve.random_orthogonal(5, R, theta, torch.Generator().manual_seed(0), like)
    assert torch.allclose(Rm.mT @ Rm, torch.eye(R, dtype=torch.float64).expand(5, R, R), atol=1e-12)


def test_input_noise():
    p = make(0, dtype=torch.float64)
    child = evolve.input_noise(p, torch.Generator().manual_seed(0))
    for s in evolve.modules(p):
        assert torch.equal(child[s + B], p[s + B])
        Q = torch.linalg.qr(p[s + B]).Q
        d = dw(child, s)
        # col space ⊆ span(B)
        assert rel(Q @ (Q.T @ d), d) < 1e-12 and rel(d, dw(p, s)) > 1e-3


# ----------------------------------------------------------------------------- crossovers

def test_linear_0_5_is_a_factor_average_and_gauge_dependent():
    p1, p2 = make(0), make(1)
    child = evolve.linear_0_5(p1, p2)
    assert all(torch.equal(child[k], (p1[k] + p2[k]) / 2) for k in p1)
    q = make(0, dtype=torch.float64)
    # same ΔW, different gauge: the documented non-property
    child = evolve.linear_0_5(q, rotated(q))
    assert min(rel(dw(child, s), dw(q, s)) for s in evolve.modules(q)) > 0.05


def source(child, parents, s):
    hits = []
    for i, p in enumerate(parents):
        if all(torch.equal(child[s + x], p[s + x]) for x in (A, B)):
            hits.append(i)
    assert hits, f"module {s} is not a bit-for-bit copy of a parent module"
    return hits[0]


def test_module_swap():
    parents = [make(0), make(1)]
    gen = torch.Generator().manual_seed(0)
    child, info = evolve.apply_operator("module_swap", "crossover", parents, gen)
    src = {s: source(child, parents, s) for s in evolve.modules(child)}
    assert 0 < sum(src.values()) < len(src) and info["donors"] == src
    for p_swap, want in ((1.0, 0), (0.0, 1)):
        child = evolve.module_swap(*parents, torch.Generator().manual_seed(0), p_swap=p_swap)
        assert all(source(child, parents, s) == want for s in evolve.modules(child))


@pytest.mark.parametrize("k", [1, 2])
def test_layer_block_swap(k):
    parents = [make(0), make(1)]
    for seed in range(5):
        child = evolve.layer_block_swap(*parents, torch.Generator().manual_seed(seed), k=k)
        by_layer = {}
        for s in evolve.modules(child):
            by_layer.setdefault(evolve.layer_of(s), set()).add(source(child, parents, s))
        # a layer never mixes parents
        assert all(len(v) == 1 for v in by_layer.values())
        seq = [by_layer[l].pop() for l in sorted(by_layer)]
        # fitter first, exactly k cuts
        assert seq[0] == 0 and sum(a != b for a, b in zip(seq, seq[1:])) == k
    one = make(0, layers=1), make(1, layers=1)
    child = evolve.layer_block_swap(*one, torch.Generator().manual_seed(0))
    assert all(torch.equal(child[x], one[0][x]) for x in child)
    assert evolve.layer_of("base_model.model.model.layers.12.self_attn.q_proj") == 12
    assert evolve.layer_of("base_model.model.lm_head") is None


def test_delta_lincomb_svd_is_exact():
    p1, p2 = make(0, dtype=torch.float64), make(1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    for w in (0.5, 0.3, 1.25):
        child = evolve.delta_lincomb_svd(p1, p2, gen, w=w, norm="keep")
        for s in evolve.modules(p1):
            target = w * dw(p1, s) + (1 - w) * dw(p2, s)
            U, S, V, full = svd_top(target)
            # Eckart–Young, dense SVD in fp64
            assert rel(dw(child, s), U @ torch.diag(S) @ V.T) < 1e-8
            err = float((target - dw(child, s)).norm())
            assert err == pytest.approx(float(full[R:].square().sum().sqrt()), rel=1e-8)
    same = evolve.delta_lincomb_svd(p1, p1, gen)
    keep1 = evolve.delta_lincomb_svd(p1, p2, gen, w=1.0, norm="keep")
    gauge = evolve.delta_lincomb_svd(rotated(p1, 1), rotated(p2, 2), gen, norm="keep")
    plain = evolve.delta_lincomb_svd(p1, p2, gen, norm="keep")
    matched = evolve.delta_lincomb_svd(p1, p2, gen)
    for s in evolve.modules(p1):
        assert rel(dw(same, s), dw(p1, s)) < 1e-8 and rel(dw(keep1, s), dw(p1, s)) < 1e-8
        # invariant to either parent's gauge
        assert rel(dw(gauge, s), dw(plain, s)) < 1e-8
        mean = (dw(p1, s).norm() + dw(p2, s).norm()) / 2
        assert float(dw(matched, s).norm()) == pytest.approx(float(mean), rel=1e-5)
        # gauge fix: parents' A scale
        rms = (p1[s + A].norm() + p2[s + A].norm()) / 2
        assert float(matched[s + A].norm()) == pytest.approx(float(rms), rel=1e-8)


def components(d, idx):
    U, S, V, _ = svd_top(d)
    if not len(idx):
        return torch.zeros_like(d)
    return sum(S[j] * torch.outer(U[:, j], V[:, j]) for j in idx)


def test_component_splice():
    p1, p2 = make(0, dtype=torch.float64), make(1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    top = evolve.component_splice(p1, p2, gen, k=2, norm="keep")
    tail = evolve.component_splice(p1, p2, gen, k=1, variant="tail", norm="keep")
    all1 = evolve.component_splice(p1, p2, gen, k=R, norm="keep")
    rand = evolve.component_splice(p1, p2, gen, norm="keep")
    for s in evolve.modules(p1):
        d1, d2 = dw(p1, s), dw(p2, s)
        assert rel(dw(top, s), components(d1, [0, 1]) + components(d2, [0, 1])) < 1e-8
        assert rel(dw(tail, s), components(d1, [0]) + components(d2, [1, 2, 3])) < 1e-8
        assert rel(dw(all1, s), d1) < 1e-8
        options = [components(d1, range(k)) + components(d2, range(R - k)) for k in range(1, R)]
        # k ~ U{1..r-1} per module
        assert min(rel(dw(rand, s), o) for o in options) < 1e-8


def test_aligned_factor_avg():
    p = make(0, dtype=torch.float64)
    child = evolve.aligned_factor_avg(p, rotated(p))
    assert all(rel(dw(child, s), dw(p, s)) < 1e-10 for s in evolve.modules(p))
    p1, p2 = make(0, dtype=torch.float64), make(1, dtype=torch.float64)
    for s in evolve.modules(p1):
        a1, b1, a2, b2 = p1[s + A][None], p1[s + B][None], p2[s + A][None], p2[s + B][None]
        Rm = evolve.procrustes(a1, b1, a2, b2)
        assert torch.allclose(Rm.mT @ Rm, torch.eye(R, dtype=torch.float64), atol=1e-12)

        def cost(Q):
            return float((Q @ a2 - a1).square().sum() + (b2 @ Q.mT - b1).square().sum())
        assert cost(Rm) <= cost(torch.eye(R, dtype=torch.float64)[None]) + 1e-12


def test_core_ties_and_core_dare():
    p1, p2 = make(0, dtype=torch.float64), make(1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    for s in evolve.modules(p1):
        Bs = [p1[s + B][None], p2[s + B][None]]
        As = [p1[s + A][None], p2[s + A][None]]
        Qb, cores, Qa = evolve.core_space(Bs, As)
        for p, C in zip((p1, p2), cores):
            assert rel((Qb @ C @ Qa.mT)[0], dw(p, s)) < 1e-10                 # cores are lossless
    same = evolve.core_ties(p1, p1, gen, density=1.0)
    # zeros never vote
    only1 = evolve.core_ties(p1, p2, gen, density=1.0, weights=(1.0, 0.0), norm="keep")
    dare0 = evolve.core_dare(p1, p2, gen, p=0.0, norm="keep")
    exact = evolve.delta_lincomb_svd(p1, p2, gen, norm="keep")
    ties = evolve.core_ties(p1, p2, gen)
    for s in evolve.modules(p1):
        assert rel(dw(same, s), dw(p1, s)) < 1e-8 and rel(dw(only1, s), dw(p1, s)) < 1e-8
        assert rel(dw(dare0, s), dw(exact, s)) < 1e-8
        assert torch.linalg.matrix_rank(dw(ties, s)) <= R and rel(dw(ties, s), dw(exact, s)) > 1e-4


def test_weighted_multi():
    ps = [make(i, dtype=torch.float64) for i in range(3)]
    gen = torch.Generator().manual_seed(0)
    one_hot = []
    for w in ([1.0, 0.0], [0.0, 1.0]):
        one_hot.append(evolve.weighted_multi(ps[0], ps[1], gen, weights=w))
    twice = evolve.weighted_multi(ps[0], ps[1], gen, weights=[2.0, 2.0])
    equal = evolve.weighted_multi(ps[0], ps[1], gen, fitness=[3.0, 3.0])
    mean = evolve.delta_lincomb_svd(ps[0], ps[1], gen)
    three = evolve.weighted_multi(ps, None, gen, weights=[0.5, 0.3, 0.2])
    perm = evolve.weighted_multi(ps[2], [ps[0], ps[1]], gen, weights=[0.2, 0.5, 0.3])
    stems = evolve.modules(ps[0])
    first_module_from_0 = {s: float(i == 0) for i, s in enumerate(stems)}
    others_from_1 = {s: float(i != 0) for i, s in enumerate(stems)}
    per_module = evolve.weighted_multi(ps[0], ps[1], gen,
                                       weights=[first_module_from_0, others_from_1])
    for i, s in enumerate(stems):
        assert rel(dw(one_hot[0], s), dw(ps[0], s)) < 1e-8
        assert rel(dw(one_hot[1], s), dw(ps[1], s)) < 1e-8
        assert rel(dw(twice, s), dw(equal, s)) < 1e-10 and rel(dw(equal, s), dw(mean, s)) < 1e-10
        assert rel(dw(three, s), dw(perm, s)) < 1e-8
        assert rel(dw(per_module, s), dw(ps[0] if i == 0 else ps[1], s)) < 1e-8
    with pytest.raises(ValueError, match="sum to zero"):
        evolve.weighted_multi(ps[0], ps[1], gen, weights=[1.0, -1.0])


def unit(d):
    return d / d.norm()


def dense_slerp(d1, d2, t):
    """SLERP of two dense matrices: the arc point at fraction t, at the interpolated norm."""
    theta = torch.arccos((unit(d1) * unit(d2)).sum().clamp(-1, 1))
    n_t = (1 - t) * d1.norm() + t * d2.norm()
    direction = torch.sin((1 - t) * theta) * unit(d1) + torch.sin(t * theta) * unit(d2)
    return n_t * direction / torch.sin(theta)


def angle(x, y):
    return float(torch.arccos((unit(x) * unit(y)).sum().clamp(-1, 1)))


def test_delta_slerp_against_dense_algebra():
    p1, p2 = make(0, dtype=torch.float64), make(1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    ends = [evolve.delta_slerp(p1, p2, gen, t=t) for t in (0.0, 1.0)]
    same = evolve.delta_slerp(p1, p1, gen)
    fixed = evolve.delta_slerp(p1, p2, gen, t=0.3)
    gauge = evolve.delta_slerp(rotated(p1, 1), rotated(p2, 2), gen, t=0.3)
    middle = evolve.delta_slerp(p1, p2, gen, t=0.5)
    lerp = evolve.delta_lincomb_svd(p1, p2, gen, norm="keep")
    for s in evolve.modules(p1):
        d1, d2 = dw(p1, s), dw(p2, s)
        assert rel(dw(ends[0], s), d1) < 1e-8 and rel(dw(ends[1], s), d2) < 1e-8
        assert rel(dw(same, s), d1) < 1e-8
        # the arc point, truncated to rank r (dense SVD in fp64), back at the interpolated norm
        U, S, V, _ = svd_top(dense_slerp(d1, d2, 0.3))
        want = U @ torch.diag(S) @ V.T
        want = want * ((0.7 * d1.norm() + 0.3 * d2.norm()) / want.norm())
        assert rel(dw(fixed, s), want) < 1e-8
        assert rel(dw(gauge, s), dw(fixed, s)) < 1e-8                    # invariant to either gauge
        # unrelated parents: the lerp midpoint shrinks, the arc keeps the mean norm
        mean = float((d1.norm() + d2.norm()) / 2)
        assert float(dw(middle, s).norm()) == pytest.approx(mean, rel=1e-8)
        assert float(dw(lerp, s).norm()) < 0.85 * mean


def test_delta_slerp_walks_the_arc_with_a_random_t_per_module():
    """Parents with the same row and column spaces: their arc stays rank r, so no truncation and the
    child is exactly on it: the two angles add up to θ, the norm is interpolated at t = angle / θ.
    """
    p1 = make(0, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    p2 = {}
    for s in evolve.modules(p1):
        mix = torch.randn(R, R, generator=g, dtype=torch.float64)
        p2[s + A] = (torch.eye(R, dtype=torch.float64) + 0.5 * mix) @ p1[s + A]
        p2[s + B] = p1[s + B] @ torch.randn(R, R, generator=g, dtype=torch.float64)
    child = evolve.delta_slerp(p1, p2, torch.Generator().manual_seed(0))
    ts = []
    for s in evolve.modules(p1):
        d1, d2, d = dw(p1, s), dw(p2, s), dw(child, s)
        theta = angle(d1, d2)
        assert angle(d, d1) + angle(d, d2) == pytest.approx(theta, rel=1e-7)
        t = angle(d, d1) / theta
        interpolated = float((1 - t) * d1.norm() + t * d2.norm())
        assert float(d.norm()) == pytest.approx(interpolated, rel=1e-7)
        ts.append(t)
    assert min(ts) >= 0 and max(ts) <= 1 and max(ts) - min(ts) > 0.3       # t ~ U(0, 1) per module


def test_delta_slerp_falls_back_to_the_lerp():
    p1, fresh = make(0, dtype=torch.float64), make(1, dtype=torch.float64, zero_b=True)
    gen = torch.Generator().manual_seed(0)
    child = evolve.delta_slerp(p1, fresh, gen, t=0.25)                      # ΔW₂ = 0: no direction
    flipped = {k: -v if k.endswith(B) else v for k, v in p1.items()}
    opposite = evolve.delta_slerp(p1, flipped, gen, t=0.25)                # θ = π: no unique arc
    for s in evolve.modules(p1):
        assert rel(dw(child, s), 0.75 * dw(p1, s)) < 1e-8
        assert rel(dw(opposite, s), 0.5 * dw(p1, s)) < 1e-8
    for bad in (dict(t=1.5), dict(t_range=(0.6, 0.4)), dict(t_range=(-0.1, 1.0))):
        with pytest.raises(ValueError, match="delta_slerp"):
            evolve.delta_slerp(p1, p1, gen, **bad)


# ----------------------------------------------------------------------------- fail-safe and errors

def test_fallback_to_copy_parent():
    p, gen = make(0), torch.Generator().manual_seed(0)
    child, info = evolve.apply_operator("gauss_rel", "mutation", [p], gen, sigma=float("inf"))
    assert info["fallback"] and "non-finite" in info["reason"]
    assert all(torch.equal(child[k], p[k]) for k in p)
    child, info = evolve.apply_operator("scale_jitter", "mutation", [p], gen, c_min=20.0,
                                        c_max=20.0)
    assert info["fallback"] and "safe band" in info["reason"]
    assert all(torch.equal(child[k], p[k]) for k in p)
    child, info = evolve.apply_operator("scale_jitter", "mutation", [p], gen, c_min=20.0,
                                        c_max=20.0, band=(0.25, 30))
    assert not info["fallback"]
    assert info["delta_norm"] == pytest.approx(20 * info["parent_delta_norms"][0], rel=1e-3)


def test_bad_input_is_a_clear_error():
    p, gen = make(0), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="unknown operator"):
        evolve.apply_operator("nope", "mutation", [p], gen)
    with pytest.raises(ValueError, match="takes 2"):
        evolve.apply_operator("module_swap", "crossover", [p], gen)
    with pytest.raises(ValueError, match="different keys"):
        evolve.apply_operator("linear_0_5", "crossover", [p, make(0, layers=2)], gen)
    with pytest.raises(ValueError, match="lora_A"):
        evolve.modules({"x.weight": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match="rho"):
        evolve.component_resample(p, gen, rho=0.0)


# ----------------------------------------------------------------------- replacement step (design §7)

def trueskill(mu, sigma=1.0):
    return {"system": "trueskill", "mu": mu, "sigma": sigma}


def population(mus, roles=("teacher", "student")):
    members, adapters, i = [], {}, 0
    for role in roles:
        for j, mu in enumerate(mus):
            name = f"{role[0]}{j}"
            members.append({"name": name, "role": role, "id": i, "rating": trueskill(mu)})
            adapters[name] = make(i, layers=2)
            i += 1
    return members, adapters


def step(members, adapters, seed=0, **cfg):
    cfg = {"evolve_frac": 0.25, "crossover_prob": 0.5, **cfg}
    return evolve.replacement_step(members, adapters, cfg, torch.Generator().manual_seed(seed),
                                   step=10, next_id=100)


def test_replacement_step_records():
    members, adapters = population([30.0, 20.0, 25.0, 10.0])
    for m in members:
        m["rating"] = trueskill(ratings.score(m["rating"]), 1.0 + 0.1 * m["id"])
    # role of one: skipped
    members.append({"name": "solo", "role": "both", "id": 50, "rating": trueskill(0.0)})
    adapters["solo"] = make(50, layers=2)
    before = {n: {k: v.clone() for k, v in a.items()} for n, a in adapters.items()}
    for seed in range(6):
        records = step(members, adapters, seed)
        assert [r["name"] for r in records] == ["t3", "s3"]
        assert [r["id"] for r in records] == [100, 101]
        for r in records:
            by_name = {m["name"]: m for m in members}
            # top half only
            assert set(r["parent_names"]) <= {r["name"][0] + "0", r["name"][0] + "2"}
            ps = [by_name[n] for n in r["parent_names"]]
            assert [p["id"] for p in ps] == r["parents"]
            assert ps == sorted(ps, key=lambda m: -ratings.score(m["rating"]))
            assert r["kind"] == ("crossover" if len(ps) == 2 else "mutation") and r["step"] == 10
            assert r["operator"] in (evolve.CROSSOVERS if len(ps) == 2 else evolve.MUTATIONS)
            # the default rule (inherit): the parents' mean mu and mean sigma
            mean = {k: sum(ratings.flat(p["rating"])[k] for p in ps) / len(ps) for k in ("mu", "sigma")}
            assert ratings.flat(r["rating"]) == pytest.approx(mean)
            copies = r["operator"] == "copy_parent" or r["operator"] in evolve.SWAPS
            if copies or r["fallback"]:
                assert r["copy_optimizer_from"] == ps[0]["name"]
            else:
                assert r["copy_optimizer_from"] is None
            if r["operator"] in evolve.SWAPS:
                assert set(r["optimizer_donors"]) == set(evolve.modules(r["adapter"]))
                for stem, donor in r["optimizer_donors"].items():
                    assert torch.equal(r["adapter"][stem + A], adapters[donor][stem + A])
            assert list(r["adapter"]) == list(adapters[r["name"]])
            assert r["info"]["operator"] == r["operator"]
    assert all(torch.equal(adapters[n][k], v[k]) for n, v in before.items() for k in v)


def test_operator_hyperparameters_from_the_config():
    """--evolve_hp reaches the operators the replacement step runs, and a name no operator or
    signature has is refused naming the valid ones."""
    assert evolve.operator_hp("") == {}
    assert evolve.hyperparameters(evolve.gauss_rel) == {"sigma": 0.02, "module_frac": 1.0}
    members, adapters = population([30.0, 20.0, 25.0, 10.0])
    cfg = dict(mutations="gauss_rel", crossovers="", crossover_prob=0.0)
    noisy = step(members, adapters, **cfg)
    still = step(members, adapters, evolve_hp='{"gauss_rel": {"sigma": 0.0}}', **cfg)
    for a, b in zip(noisy, still):
        parent = adapters[b["parent_names"][0]]
        assert all(torch.equal(b["adapter"][k], v) for k, v in parent.items())  # sigma 0: a copy
        assert not all(torch.equal(a["adapter"][k], v) for k, v in parent.items())
    with pytest.raises(ValueError, match=r"unknown operator 'gauss'; operators: \[.*'gauss_rel'"):
        evolve.operator_hp('{"gauss": {"sigma": 0.1}}')
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) \['sgima'\]; gauss_rel takes \['module_frac', 'sigma'\]"):
        evolve.operator_hp('{"gauss_rel": {"sgima": 0.1}}')
    with pytest.raises(ValueError, match="fitness"):
        evolve.operator_hp('{"weighted_multi": {"fitness": [1, 2]}}')
    with pytest.raises(ValueError, match="not JSON"):
        evolve.operator_hp("sigma=0.1")


def test_replacement_step_never_replaces_the_best_and_is_reproducible():
    members, adapters = population([1.0, 5.0, 3.0, 4.0])
    records = step(members, adapters, evolve_frac=1.0)
    # n - 1 per role
    assert sorted(r["name"] for r in records) == ["s0", "s2", "s3", "t0", "t2", "t3"]
    again = step(members, adapters, evolve_frac=1.0)
    for r, q in zip(records, again):
        assert (r["operator"], r["parent_names"]) == (q["operator"], q["parent_names"])
        assert all(torch.equal(r["adapter"][k], q["adapter"][k]) for k in r["adapter"])


def test_one_operator_numbering():
    """Issue 24: every operator has one label, and its docstring starts with it (bench/retention.py
    and results/retention/ read the same table)."""
    import re
    assert set(evolve.MUTATION_LABELS) == set(evolve.MUTATIONS)
    assert set(evolve.CROSSOVER_LABELS) == set(evolve.CROSSOVERS)
    labels = list(evolve.MUTATION_LABELS.values()) + list(evolve.CROSSOVER_LABELS.values())
    assert len(set(labels)) == len(labels)
    for names, functions in ((evolve.MUTATION_LABELS, evolve.MUTATIONS),
                             (evolve.CROSSOVER_LABELS, evolve.CROSSOVERS)):
        for name, label in names.items():
            assert re.match(r"[MX][0-9L]+", functions[name].__doc__).group() == label, name


def child_with_a_good_record(selection):
    """4T+4S at an event: incumbents after many matches (σ 1.2), and s3, made at the previous event
    from s0 and s1 and rated by `selection`'s rule, has since won 6 of its 10 rated matches against a
    teacher rated like the middle student s1. Its μ ends above the weakest student's (s2, 24)."""
    members, adapters = population([30.0, 27.0, 24.0, 0.0])
    for m in members:
        m["rating"] = trueskill(ratings.score(m["rating"]), 1.2)
    child = members[7]
    child["rating"] = ratings.child([members[4]["rating"], members[5]["rating"]], selection)
    for outcome in [1] * 6 + [-1] * 4:
        _, child["rating"] = ratings.update(trueskill(27.0, 1.2), child["rating"], outcome)
    assert child["name"] == "s3" and ratings.score(child["rating"]) > 24.0 + 3
    return members, adapters


def test_default_selection_keeps_a_child_with_a_good_record():
    """Issue 24: under train.py's default rule a child with a good record survives the next event,
    and the weakest student goes instead. Under the first rule (μ − 3σ, a child at a fresh σ; kept
    as selection "conservative") the same record still ranks it last: culled for being new."""
    members, adapters = child_with_a_good_record(train.config["selection"])
    culled = step(members, adapters, **train.config)
    assert [r["name"] for r in culled] == ["t3", "s2"]
    members, adapters = child_with_a_good_record("conservative")
    old = step(members, adapters, **dict(train.config, selection="conservative"))
    assert [r["name"] for r in old] == ["t3", "s3"]
    assert [ratings.flat(r["rating"])["sigma"] for r in old] == [25 / 3, 25 / 3]
    with pytest.raises(ValueError, match="selection 'elo'"):
        step(members, adapters, selection="elo")


def test_replacement_step_operator_choice():
    members, adapters = population([4.0, 3.0, 2.0, 1.0])
    crossing = step(members, adapters, crossover_prob=1.0, crossovers="delta_lincomb_svd",
                    mutations="")
    assert all(r["operator"] == "delta_lincomb_svd" for r in crossing)
    assert all(len(set(r["parents"])) == 2 for r in crossing)
    drawn = set()
    for seed in range(12):
        records = step(members, adapters, seed, crossover_prob=0.0,
                       mutations="gauss_rel, scale_jitter")
        drawn.update(r["operator"] for r in records)
    # uniform over the enabled list
    assert drawn == {"gauss_rel", "scale_jitter"}
    two, adapters2 = population([2.0, 1.0])
    # one top-half parent: mutate
    forced = step(two, adapters2, crossover_prob=1.0, mutations="input_noise")
    assert [r["operator"] for r in forced] == ["input_noise", "input_noise"]
    with pytest.raises(ValueError, match="unknown operator"):
        step(members, adapters, mutations="gauss_rel,warp_drive")
