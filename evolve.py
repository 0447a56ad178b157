"""Weight-space evolution of a same-rank LoRA population (PopuLoRA §7, design §7, docs/evolve.md
§6).

An adapter is a plain dict[str, Tensor] in PEFT state-dict naming: "<module>.lora_A.weight" [r, in]
and "<module>.lora_B.weight" [out, r], with ΔW = s·B·A. All members share r, alpha and target
modules, so the scaling s cancels: operators work on the raw B·A and never see (or change) the
LoraConfig, which the caller keeps per slot. Every operator returns a new dict with the same keys,
shapes, dtypes and devices, never modifies its inputs, computes in float32 (float64 if the inputs
are float64) and casts back.

    mutation(adapter, generator, **hp) -> adapter             MUTATIONS[name]
    crossover(fitter, other, generator, **hp) -> adapter      CROSSOVERS[name]
    apply_operator(name, kind, parents, generator, **hp) -> (adapter, info)   with the fail-safe
    replacement_step(members, adapters, cfg, generator, step, next_id) -> child records (design §7)
    ranked_roles(members, selection), n_culled(n, frac)   who is replaced (replacement_step's rule)

Every SVD-based operator uses the exact QR route (thin QR of the stacked factors, then a kr×kr SVD;
docs/evolve.md §4.1) and never forms a dense out×in ΔW; modules of one shape are stacked and
handled in one batched call (196 modules of a 7B adapter become 4 calls). Rank-r children are
re-factored with the balanced √S split, a gauge fix (A rows rescaled to the parents' RMS row norm,
ΔW unchanged) and dead-slot refill (a slot with σ ≈ 0 gets b_j = 0 and a fresh A row of norm 1/√3
orthogonal to the live rows, so it can train again). All randomness comes from the torch.Generator
passed in.

Not covered: DoRA / lora bias / rsLoRA scaling differences between parents (all members share one
config), factor-DARE, the ES form of weighted_multi, Fisher weights from optimizer state (pass them
as per-module weights instead).
"""
import inspect
import json
import math
import re
import time

import torch

import ratings

A_KEY, B_KEY = ".lora_A.weight", ".lora_B.weight"
# a child's ‖ΔW‖ must lie in [lo·min, hi·max] of its parents' ‖ΔW‖ (docs/evolve.md §6.1)
SAFE_BAND = (0.25, 4.0)
# PEFT's kaiming_uniform(a=√5) init gives A rows of norm ≈ 1/√3
REFILL_NORM = 3 ** -0.5


# ----------------------------------------------------------------------------- plumbing

def modules(adapter):
    """Module stems ("...layers.3.self_attn.q_proj") in key order; ValueError if the dict is not a
    LoRA adapter."""
    stems = [key[: -len(A_KEY)] for key in adapter if key.endswith(A_KEY)]
    if not stems or 2 * len(stems) != len(adapter):
        raise ValueError("adapter must hold only '<module>.lora_A.weight' / "
                         "'<module>.lora_B.weight' pairs")
    for stem in stems:
        A, B = adapter[stem + A_KEY], adapter.get(stem + B_KEY)
        if B is None or A.dim() != 2 or B.dim() != 2 or A.shape[0] != B.shape[1]:
            raise ValueError(f"module {stem}: need lora_A [r, in] and lora_B [out, r] "
                             "with the same r")
    return stems


def _check(parents):
    """Stems of parent 1, after checking every parent has the same keys and shapes."""
    stems = modules(parents[0])
    first = parents[0]
    for number, parent in enumerate(parents[1:], 2):
        if parent.keys() != first.keys():
            raise ValueError(f"parent {number} has different keys from parent 1")
        for key, value in parent.items():
            if value.shape != first[key].shape:
                raise ValueError(f"parent {number}: {key} has shape {tuple(value.shape)}, "
                                 f"parent 1 {tuple(first[key].shape)}")
    return stems


def layer_of(stem):
    """Decoder layer index from a stem like 'base_model.model.model.layers.12.mlp.down_proj'; None
    if absent."""
    match = re.search(r"(?:^|\.)layers\.(\d+)(?:\.|$)", stem)
    if match is None:
        return None
    return int(match.group(1))


def _apply(parents, fn):
    """Run fn(As, Bs, stems) on every group of same-shape modules and assemble the child.

    As / Bs are lists (one per parent) of stacked factors [M, r, in] / [M, out, r] in the compute
    dtype; fn returns the child's (A, B) stacks. The child is cast back per tensor to parent 1's
    dtype and device."""
    first = parents[0]
    stems = _check(parents)
    groups = {}
    for stem in stems:
        A, B = first[stem + A_KEY], first[stem + B_KEY]
        shape_key = (A.shape, B.shape, A.dtype, B.dtype, A.device, B.device)
        groups.setdefault(shape_key, []).append(stem)
    child = dict.fromkeys(first)
    for group in groups.values():
        compute_dtype = _compute_dtype(first[group[0] + A_KEY].dtype)
        device = first[group[0] + A_KEY].device
        As = []
        Bs = []
        for parent in parents:
            A = torch.stack([parent[stem + A_KEY] for stem in group])
            As.append(A.to(device, compute_dtype))
        # B stacks are column-major views, the layout LAPACK's QR wants: saves a transposing copy
        # per call
            B = torch.stack([parent[stem + B_KEY].mT for stem in group])
            Bs.append(B.to(device, compute_dtype).mT)
        A, B = fn(As, Bs, group)
        for i, stem in enumerate(group):
            # contiguous copies (safetensors needs that)
            for key, value in ((stem + A_KEY, A[i]), (stem + B_KEY, B[i])):
                child[key] = value.to(first[key].device, first[key].dtype, copy=True,
                                      memory_format=torch.contiguous_format)
    return child


def _compute_dtype(dtype):
    """float64 for float64 adapters, float32 for every other dtype."""
    if dtype == torch.float64:
        return torch.float64
    return torch.float32


# Random draws happen on the generator's device and move to `like`'s: a CPU generator also serves
# CUDA tensors.
def _draw_device(generator, like):
    if generator is None:
        return like.device
    return generator.device


def _randn(shape, generator, like):
    device = _draw_device(generator, like)
    draws = torch.randn(shape, generator=generator, device=device, dtype=like.dtype)
    return draws.to(like.device)


def _rand(shape, generator, like):
    device = _draw_device(generator, like)
    draws = torch.rand(shape, generator=generator, device=device, dtype=like.dtype)
    return draws.to(like.device)


def _randint(low, high, shape, generator, like):
    device = _draw_device(generator, like)
    draws = torch.randint(low, high, shape, generator=generator, device=device)
    return draws.to(like.device)


# --------------------------------------------------------------------------- exact low-rank algebra

def fro(B, A):
    """‖B·A‖_F per module without forming B·A: tr((BᵀB)(AAᵀ)). B [..., out, r], A [..., r, in] ->
    [...]."""
    return ((B.mT @ B) * (A @ A.mT)).sum((-2, -1)).clamp_min(0).sqrt()


def delta_norms(adapter):
    """{stem: ‖B·A‖_F} for every module by the trace trick, in float32 (float64 for float64
    adapters). A non-finite entry anywhere in a module makes its norm nan or inf (its square enters
    the diagonal of AAᵀ/BᵀB)."""
    norms = {}
    for stem in modules(adapter):
        A, B = adapter[stem + A_KEY], adapter[stem + B_KEY]
        compute_dtype = _compute_dtype(A.dtype)
        norms[stem] = float(fro(B.to(compute_dtype), A.to(compute_dtype)))
    return norms


def delta_norm(adapter):
    """‖ΔW‖ of the whole adapter (modules as one long vector), without the raw scaling s."""
    return math.sqrt(sum(v * v for v in delta_norms(adapter).values()))


def qr_svd(Bs, As, weights):
    """Top-r thin SVD of Σ_i w_i·B_i·A_i by the exact QR route (docs/evolve.md §4.1), batched
    over modules.

    Bs [M, out, r] and As [M, r, in] per parent; weights scalars or [M] tensors (any sign). Returns
    U [M, out, r], S [M, r] (descending), V [M, in, r], U and V orthonormal; by Eckart–Young
    U·diag(S)·Vᵀ is the best rank-r approximation. Cost O((out + in)·(kr)²), never O(out·in)."""
    M, r = As[0].shape[:2]
    # [B_1 … B_k] = Qb Rb, Qb [M, out, kr]
    Qb, Rb = torch.linalg.qr(torch.cat([B.mT for B in Bs], -2).mT)
    # [A_1; …; A_k]ᵀ = Qa Ra
    Qa, Ra = torch.linalg.qr(torch.cat(As, dim=-2).mT)
    columns = []
    for weight in weights:
        columns.append(torch.as_tensor(weight, dtype=Rb.dtype, device=Rb.device).expand(M))
    w = torch.stack(columns, -1)                                           # [M, k]
    # [w_i B_i] = Qb (Rb·diag(w)): cheaper than weighting the B_i
    Rb = Rb * w.repeat_interleave(r, -1)[:, None, :]
    # ΔW = Qb (Rb Raᵀ) Qaᵀ
    return _lift(Qb, Rb @ Ra.mT, Qa, r)


def _lift(Qb, core, Qa, r):
    """Top-r components of Qb·core·Qaᵀ from the SVD of the small core; zero components pad a rank
    below r."""
    U, S, Vh = torch.linalg.svd(core, full_matrices=False)
    U, S, V = U[..., :r], S[..., :r], Vh[..., :r, :].mT
    # pad > 0 only when min(out, in, kr) < r
    pad = r - S.shape[-1]
    U = torch.nn.functional.pad(U, (0, pad))
    S = torch.nn.functional.pad(S, (0, pad))
    V = torch.nn.functional.pad(V, (0, pad))
    return Qb @ U, S, Qa @ V


def _a_rms(As):
    """Mean over parents of the RMS A-row norm ‖A‖_F/√r, per module [M]: the target of the gauge
    fix."""
    r = As[0].shape[-2]
    return torch.stack([A.square().sum((-2, -1)).div(r).sqrt() for A in As]).mean(0)


def _target(norm, Bs, As, weights=None):
    """Per-module ‖ΔW‖ the child is rescaled to, or None for norm='keep'."""
    if norm == "keep":
        return None
    norms = torch.stack([fro(B, A) for B, A in zip(Bs, As)])              # [k, M]
    if norm == "match_mean":
        return norms.mean(0)
    if norm == "match_weighted":
        rows = []
        for weight in weights:
            weight = torch.as_tensor(weight, dtype=norms.dtype, device=norms.device)
            rows.append(weight.expand(norms.shape[1]).abs())
        w = torch.stack(rows)                                              # [k, M]
        return (w * norms).sum(0) / w.sum(0).clamp_min(1e-30)
    raise ValueError(f"norm must be 'keep', 'match_mean' or 'match_weighted', got {norm!r}")


def _refactor(U, S, V, a_rms, gen, target=None):
    """Rank-r factors B = U·diag(√S/c), A = diag(c·√S)·Vᵀ from components U [M,out,r], S [M,r], V
    [M,in,r] (docs/evolve.md §6.1), fused into one scale per slot:
    - balanced split: √S on both sides;
    - norm match (optional): S scaled so ‖ΔW_child‖ = target; ‖Σ s_j u_j v_jᵀ‖² = sᵀ(UᵀU ⊙ VᵀV)s,
      since U, V need not be orthonormal (component_splice);
    - gauge fix: c makes the live A rows' RMS norm equal the parents' (a_rms) — LoRA's effective
      per-factor learning rates depend on that scale (∂L/∂B ∝ A, ∂L/∂A ∝ B); ΔW is unchanged;
    - dead-slot refill: a slot with σ_j at rounding level gets b_j = 0 and a random A row of norm
      1/√3 orthogonal to the live rows, so it trains again (∂L/∂b_j ∝ a_j); ΔW is unchanged."""
    live = S > S.abs().amax(-1, keepdim=True) * (1e3 * torch.finfo(S.dtype).eps)
    S = S.clamp_min(0) * live
    if target is not None:
        gram = (U.mT @ U) * (V.mT @ V) * S[..., :, None] * S[..., None, :]
        current = gram.sum((-2, -1)).clamp_min(0).sqrt()
        ones = torch.ones_like(current)
        ratio = torch.where(current > 0, target / current.clamp_min(1e-300), ones)
        S = S * ratio[:, None]
    n_live = live.sum(-1)
    # ‖A row j‖² = S_j·‖v_j‖²
    rms = ((S * V.square().sum(-2)).sum(-1) / n_live.clamp_min(1)).sqrt()
    ok = (n_live > 0) & (rms > 0) & (a_rms > 0)
    c = torch.where(ok, a_rms / rms.clamp_min(1e-300), torch.ones_like(rms))[:, None]
    B = U * (S.sqrt() / c)[..., None, :]
    A = (S.sqrt() * c)[..., :, None] * V.mT
    if not live.all():
        G = _randn(A.shape, gen, A)                                        # [M, r, in]
        # with room to be orthogonal to all rows, remove the span of the live rows
        if A.shape[-1] > A.shape[-2]:
            Q = torch.linalg.qr(A.mT).Q                                    # [M, in, r]
            G = G - (G @ Q) @ Q.mT
        G = G * (REFILL_NORM / G.norm(dim=-1, keepdim=True).clamp_min(1e-30))
        A = torch.where(live[..., :, None], A, G)
    return A, B


def random_orthogonal(M, r, theta, generator, like):
    """[M, r, r] orthogonal matrices: Haar (QR of a Gaussian with the sign fix) if theta is None,
    else exp(θ·skew(G)) (a rotation of size ~θ). Drawn in like's dtype, on like's device."""
    G = _randn((M, r, r), generator, like)
    if theta is None:
        Q, R = torch.linalg.qr(G)
        signs = torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))
        signs = torch.where(signs == 0, torch.ones_like(signs), signs)
        return Q * signs[..., None, :]
    return torch.linalg.matrix_exp(theta * (G - G.mT) / 2)


# ------------------------------------------------------------------ mutations (one parent -> child)

def copy_parent(adapter, generator=None):
    """M0 control (PBT exploit): an exact copy; the parent's optimizer state stays valid."""
    return {k: v.clone() for k, v in adapter.items()}


def spectral_jitter(adapter, generator, tau=0.1, theta=0.0):
    """M1: σ_j ← σ_j·exp(τ·z_j); with θ > 0 also rotate U and V (independently) inside their spans
    by exp(θ·skew). Row and column spaces of ΔW are kept; ‖ΔW'‖/‖ΔW‖ lies between exp(τ·min z) and
    exp(τ·max z)."""
    def fn(As, Bs, _):
        M, r = As[0].shape[:2]
        U, S, V = qr_svd(Bs, As, [1.0])
        S = S * torch.exp(tau * _randn(S.shape, generator, S))
        if theta:
            U = U @ random_orthogonal(M, r, theta, generator, S)
            V = V @ random_orthogonal(M, r, theta, generator, S)
        return _refactor(U, S, V, _a_rms(As), generator)
    return _apply([adapter], fn)


def gauss_rel(adapter, generator, sigma=0.02, module_frac=1.0):
    """M2: B += σ·rms(B)·ε and A += σ·rms(A)·ε on a random `module_frac` of the modules (rms per
    module). E[ΔW'] = ΔW, relative ΔW change ≈ √2·σ; a zero B stays zero."""
    def fn(As, Bs, _):
        A, B = As[0], Bs[0]
        pick = (_rand((len(A),), generator, A) < module_frac).to(A.dtype)[:, None, None]
        rms_b = B.square().mean((-2, -1), keepdim=True).sqrt()
        rms_a = A.square().mean((-2, -1), keepdim=True).sqrt()
        B = B + sigma * pick * rms_b * _randn(B.shape, generator, B)
        return A + sigma * pick * rms_a * _randn(A.shape, generator, A), B
    return _apply([adapter], fn)


def component_resample(adapter, generator, rho=0.125, mode="random"):
    """M3: drop k = ⌈ρ·r⌉ SVD components of ΔW (random ones, or the smallest) and refill their slots
    (b_j = 0, fresh A row orthogonal to the kept ones). Removes exactly Σ σ_dropped² of energy."""
    if not 0 < rho <= 1 or mode not in ("random", "smallest"):
        raise ValueError(f"component_resample: need 0 < rho <= 1 and mode 'random'|'smallest', "
                         f"got {rho}, {mode!r}")

    def fn(As, Bs, _):
        M, r = As[0].shape[:2]
        k = math.ceil(rho * r)
        U, S, V = qr_svd(Bs, As, [1.0])
        if mode == "random":
            # k distinct slots per module
            drop = _rand((M, r), generator, S).argsort(-1)[:, :k]
        else:
            drop = torch.arange(r - k, r, device=S.device).expand(M, k)
        return _refactor(U, S.scatter(-1, drop, 0.0), V, _a_rms(As), generator)
    return _apply([adapter], fn)


def scale_jitter(adapter, generator, sigma_s=0.1, c_min=0.7, c_max=1.4, per_adapter=True):
    """M4: ΔW ← c·ΔW with c = clip(exp(σ_s·z), c_min, c_max), √c on each factor; one c for the whole
    adapter (default) or one per module. Direction unchanged; alpha untouched."""
    z_adapter = None
    if per_adapter:
        z_adapter = _randn((1,), generator, torch.empty(0))

    def fn(As, Bs, _):
        if per_adapter:
            z = z_adapter.to(As[0])
        else:
            z = _randn((len(As[0]),), generator, As[0])
        c = torch.exp(sigma_s * z).clamp(c_min, c_max).sqrt().view(-1, 1, 1)
        return As[0] * c, Bs[0] * c
    return _apply([adapter], fn)


def rank_rotation(adapter, generator, theta=None):
    """M5 (neutral): A ← R·A, B ← B·Rᵀ with R orthogonal per module (Haar, or exp(θ·skew) if θ is
    given). ΔW, ‖A‖ and ‖B‖ are unchanged; only the coordinates (and so Adam's dynamics) change."""
    def fn(As, Bs, _):
        R = random_orthogonal(len(As[0]), As[0].shape[-2], theta, generator, As[0])
        return R @ As[0], Bs[0] @ R.mT
    return _apply([adapter], fn)


def input_noise(adapter, generator, sigma_a=0.05):
    """M6 (NEFTune-style, relative): A += σ_A·rms(A)·ε only; B (the output map) is untouched bit for
    bit."""
    def fn(As, Bs, _):
        A = As[0]
        rms_a = A.square().mean((-2, -1), keepdim=True).sqrt()
        return A + sigma_a * rms_a * _randn(A.shape, generator, A), Bs[0]
    return _apply([adapter], fn)


# ------------------------------------------------------------------------ crossovers (fitter first)

def copy_fitter(fitter, other, generator=None):
    """X0 (control): an exact copy of the fitter parent."""
    return copy_parent(fitter)


def linear_0_5(fitter, other, generator=None, w=0.5):
    """XL (control): factor average A = w·A₁ + (1−w)·A₂, B likewise. NOT ΔW-exact (cross terms B₁A₂,
    B₂A₁) and gauge-dependent; kept because PopuLoRA reports it as a control."""
    def fn(As, Bs, _):
        return w * As[0] + (1 - w) * As[1], w * Bs[0] + (1 - w) * Bs[1]
    return _apply([fitter, other], fn)


def _pick(fitter, other, from_fitter):
    """Child whose module s is cloned bit for bit from the fitter if from_fitter[s], else from the
    other."""
    child = {}
    for stem, take_fitter in from_fitter.items():
        donor = other
        if take_fitter:
            donor = fitter
        for key in (stem + A_KEY, stem + B_KEY):
            child[key] = donor[key].clone()
    return {key: child[key] for key in fitter}


def module_swap(fitter, other, generator, p_swap=0.5):
    """X1: every module (A and B together) copied whole from the fitter with probability p_swap,
    else from the other parent. Exact per module; the donor's optimizer state stays valid for that
    module."""
    stems = _check([fitter, other])
    take = _rand((len(stems),), generator, torch.empty(0)) < p_swap
    return _pick(fitter, other, {stem: bool(t) for stem, t in zip(stems, take)})


def layer_block_swap(fitter, other, generator, k=1):
    """X2: k-point crossover over the decoder layer index. Layers before the first cut come from the
    fitter, then the parents alternate; all modules of a layer share a parent (attention and MLP
    stay co-adapted). Cuts are distinct, uniform over the gaps between layers. Modules without a
    layer index, and adapters with a single layer, come from the fitter."""
    stems = _check([fitter, other])
    layers = sorted({layer_of(s) for s in stems} - {None})
    k = max(0, min(int(k), len(layers) - 1))
    cuts = []
    if k:
        gaps = _rand((len(layers) - 1,), generator, torch.empty(0))
        cuts = (gaps.argsort()[:k] + 1).tolist()
    position = {layer: i for i, layer in enumerate(layers)}
    from_fitter = {}
    for stem in stems:
        # segment 0 (the fitter's) for modules without a layer index
        segment = 0
        if layer_of(stem) is not None:
            segment = sum(position[layer_of(stem)] >= cut for cut in cuts)
        from_fitter[stem] = segment % 2 == 0
    return _pick(fitter, other, from_fitter)


def _lincomb(parents, weights, norm, generator, normalize):
    """Best rank-r approximation of Σ_i w_i·ΔW_i (QR route), norm match, refactor. weights: per
    parent a float or a {stem: float} dict; normalize=True makes them sum to 1 per module."""
    def fn(As, Bs, group):
        rows = []
        for weight in weights:
            if isinstance(weight, dict):
                rows.append([weight[stem] for stem in group])
            else:
                rows.append([weight] * len(group))
        W = torch.tensor(rows, dtype=As[0].dtype, device=As[0].device)    # [k, M]
        if normalize:
            total = W.sum(0)
            if (total.abs() < 1e-12).any():
                raise ValueError("weighted_multi: the weights of a module sum to zero")
            W = W / total
        U, S, V = qr_svd(Bs, As, list(W))
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As, list(W)))
    return _apply(parents, fn)


def delta_lincomb_svd(fitter, other, generator, w=0.5, norm="match_mean"):
    """X3: best rank-r approximation (Eckart–Young) of w·ΔW₁ + (1−w)·ΔW₂ via the exact QR route; w
    in [1, 1.5] extrapolates toward the fitter. norm='match_mean' rescales each module to the mean
    parent ‖ΔW‖ (averaging near-orthogonal parents shrinks it to ~0.7×, compounding over
    generations); 'keep' leaves it."""
    return _lincomb([fitter, other], [w, 1 - w], norm, generator, normalize=False)


def component_splice(fitter, other, generator, k=None, variant="top", norm="match_mean"):
    """X4: SVD components 0..k−1 of the fitter plus the top r−k components (variant 'top') or
    components k..r−1 (variant 'tail', lucidrains X3) of the other; k ~ U{1..r−1} per module unless
    given (0 ≤ k ≤ r). Before norm matching ΔW_child is exactly the sum of the chosen rank-1 terms
    (~1.37× norm if unrelated)."""
    if variant not in ("top", "tail"):
        raise ValueError(f"component_splice: variant must be 'top' or 'tail', got {variant!r}")

    def fn(As, Bs, _):
        M, r = As[0].shape[:2]
        U1, S1, V1 = qr_svd(Bs[:1], As[:1], [1.0])
        U2, S2, V2 = qr_svd(Bs[1:], As[1:], [1.0])
        if k is None:
            kk = _randint(1, max(r - 1, 1) + 1, (M,), generator, S1)
        elif 0 <= k <= r:
            kk = torch.full((M,), int(k), device=S1.device)
        else:
            raise ValueError(f"component_splice: k must be in 0..{r}, got {k}")
        j = torch.arange(r, device=S1.device).expand(M, r)
        # slot j from the fitter
        mine = j < kk[:, None]
        # the other parent's component that fills slot j
        if variant == "top":
            j_other = (j - kk[:, None]).clamp(0, r - 1)
        else:
            j_other = j.clamp(0, r - 1)
        S = torch.where(mine, S1, S2.gather(-1, j_other))
        U = torch.where(mine[:, None], U1, U2.gather(-1, j_other[:, None].expand_as(U2)))
        V = torch.where(mine[:, None], V1, V2.gather(-1, j_other[:, None].expand_as(V2)))
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As))
    return _apply([fitter, other], fn)


def procrustes(A1, B1, A2, B2):
    """Orthogonal R [M, r, r] minimising ‖R·A₂ − A₁‖² + ‖B₂·Rᵀ − B₁‖²: R = V·Uᵀ for A₂A₁ᵀ + B₂ᵀB₁ =
    U·S·Vᵀ."""
    U, _, Vh = torch.linalg.svd(A2 @ A1.mT + B2.mT @ B1)
    return Vh.mT @ U.mT


def aligned_factor_avg(fitter, other, generator=None, w=0.5):
    """X5: rotate the other parent's gauge onto the fitter's (Procrustes; its ΔW is unchanged), then
    average the factors. Exact when the parents differ only by a rotation; the cheapest ΔW-aware
    average."""
    def fn(As, Bs, _):
        R = procrustes(As[0], Bs[0], As[1], Bs[1])
        return w * As[0] + (1 - w) * (R @ As[1]), w * Bs[0] + (1 - w) * (Bs[1] @ R.mT)
    return _apply([fitter, other], fn)


def core_space(Bs, As):
    """Shared orthonormal bases of the stacked factors and the parents' cores (docs/evolve.md
    §2.1): B_i·A_i = Qb·C_i·Qaᵀ exactly, C_i = Rb[:, block i]·Ra[:, block i]ᵀ. Returns Qb [M,out,p],
    cores, Qa [M,in,q]."""
    r = As[0].shape[-2]
    Qb, Rb = torch.linalg.qr(torch.cat(Bs, -1))
    Qa, Ra = torch.linalg.qr(torch.cat(As, -2).mT)
    cores = []
    for i in range(len(As)):
        block = slice(i * r, (i + 1) * r)
        cores.append(Rb[..., block] @ Ra[..., block].mT)
    return Qb, cores, Qa


def _core_merge(parents, generator, norm, weights, merge):
    """merge(C [k, M, p, q], w [k, 1, 1, 1]) -> merged core [M, p, q]; then SVD → top r → norm match
    → refactor."""
    def fn(As, Bs, _):
        Qb, cores, Qa = core_space(Bs, As)
        w = torch.tensor(weights, dtype=As[0].dtype, device=As[0].device).view(-1, 1, 1, 1)
        U, S, V = _lift(Qb, merge(torch.stack(cores), w), Qa, As[0].shape[-2])
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As, list(weights)))
    return _apply(parents, fn)


def core_ties(fitter, other, generator=None, density=0.8, weights=(1.0, 1.0), norm="match_mean",
              sign="total"):
    """X6 (TIES in core space): trim each core to its top `density` entries by magnitude, weight,
    elect a sign per entry (sign of the sum, 'total', or of the sign count, 'frequency'), disjoint
    mean of the agreeing entries; SVD of the merged core → rank r. Gauge-free, but basis-dependent
    by construction."""
    if not 0 < density <= 1 or sign not in ("total", "frequency"):
        raise ValueError(f"core_ties: need 0 < density <= 1 and sign 'total'|'frequency', "
                         f"got {density}, {sign!r}")

    def merge(C, w):
        mag = C.abs().flatten(-2)                                             # [k, M, p·q]
        kth = mag.topk(max(1, int(density * mag.shape[-1])), dim=-1).values[..., -1:]
        T = C * (mag >= kth).view_as(C) * w
        if sign == "total":
            votes = T.sum(0)
        else:
            votes = T.sign().sum(0)
        # zeros never agree
        agree = T.sign() == torch.where(votes >= 0, 1.0, -1.0).to(T)
        return (T * agree).sum(0) / agree.sum(0).clamp_min(1)
    return _core_merge([fitter, other], generator, norm, weights, merge)


def core_dare(fitter, other, generator, p=0.1, weights=(0.5, 0.5), norm="match_mean"):
    """X7 (DARE in core space): drop each core entry with probability p, rescale by 1/(1−p),
    weighted sum. Keep p low: in a kr×kr core the drop noise is not diluted (p = 0.5 moved a child
    ~100 %). Weights (0.5, 0.5) [ours; the note's (1, 1) gives the same child under the default norm
    match]: p = 0 is X3."""
    if not 0 <= p < 1:
        raise ValueError(f"core_dare: need 0 <= p < 1, got {p}")
    def merge(C, w):
        keep = _rand(C.shape, generator, C) >= p
        return (C * keep / (1 - p) * w).sum(0)
    return _core_merge([fitter, other], generator, norm, weights, merge)


def weighted_multi(fitter, other=None, generator=None, weights=None, fitness=None, temperature=1.0,
                   norm="match_weighted"):
    """X8: best rank-r approximation of Σ_i w_i·ΔW_i over k ≥ 2 parents (QR route). `fitter` may be
    a list of all parents (other=None) and `other` a list of further parents. Weights per parent
    (floats, or {stem: w} dicts for per-module weights such as a Fisher proxy), else softmax(fitness
    / temperature), else equal; normalised to sum 1 per module. norm='match_weighted' rescales to
    the weighted mean parent ‖ΔW‖, so one-hot weights reproduce that parent."""
    parents = _as_list(fitter) + _as_list(other)
    if weights is None:
        if fitness is None:
            fitness = [0.0] * len(parents)
        fitness = torch.as_tensor(fitness, dtype=torch.float64)
        weights = torch.softmax(fitness / temperature, 0).tolist()
    if len(parents) < 2 or len(weights) != len(parents):
        raise ValueError(f"weighted_multi: need >= 2 parents and one weight each, "
                         f"got {len(parents)}, {len(weights)}")
    return _lincomb(parents, list(weights), norm, generator, normalize=True)


def _as_list(parents):
    """One adapter, a list or tuple of them, or None -> a list."""
    if isinstance(parents, (list, tuple)):
        return list(parents)
    if parents is None:
        return []
    return [parents]


def delta_slerp(fitter, other, generator, t=None, t_range=(0.0, 1.0)):
    """X9 (SLERP on ΔW): per module, the point at fraction t of
    the great-circle arc from ΔW₁'s direction to ΔW₂'s, at the linearly interpolated norm (1−t)‖ΔW₁‖
    + t‖ΔW₂‖; then the best rank-r approximation (QR route), rescaled to that norm (the lerp
    fallback: to the lerp's norm). Why this one: SLERP is the most used two-model merge of the
    merging literature (mergekit's `slerp`), and it is what neither existing interpolation does.
    X3's lerp shrinks near-orthogonal parents (~0.7× at the midpoint, so it needs its norm match),
    X5 averages factors; on the arc the norm is interpolated by construction and the direction turns
    at a constant rate in t. Done on ΔW, never on the factors: SLERP of A and B separately would
    inherit linear_0_5's cross terms and gauge dependence. With cos θ = ⟨ΔW₁, ΔW₂⟩ / (‖ΔW₁‖‖ΔW₂‖) by
    the trace trick, ΔW_t = n_t·(sin((1−t)θ)·ΔW₁/‖ΔW₁‖ + sin(tθ)·ΔW₂/‖ΔW₂‖) / sin θ, n_t the
    interpolated norm, a weighted sum of the two ΔW, so the QR route computes it without a dense
    out×in matrix. t None (default) draws t ~ U(t_range) per module: a blend crossover along the
    arc, not a fixed midpoint (at t = 0.5 and equal norms SLERP points where X3 does).
    Near-parallel, antiparallel or zero parents (sin θ < 1e-6) fall back to the lerp (1−t)·ΔW₁ +
    t·ΔW₂ (mergekit does the same); exactly antiparallel parents of equal norm then meet at zero,
    which the fail-safe rejects."""
    lo, hi = t_range
    if not 0 <= lo <= hi <= 1 or (t is not None and not 0 <= t <= 1):
        raise ValueError(f"delta_slerp: need 0 <= t <= 1 and 0 <= lo <= hi <= 1, "
                         f"got {t}, {t_range}")

    def fn(As, Bs, _):
        A1, A2, B1, B2 = As[0], As[1], Bs[0], Bs[1]
        M = len(A1)
        if t is None:
            tt = lo + (hi - lo) * _rand((M,), generator, A1)
        else:
            tt = torch.full((M,), float(t), dtype=A1.dtype, device=A1.device)
        tiny = torch.finfo(A1.dtype).tiny
        n1, n2 = fro(B1, A1), fro(B2, A2)                                    # [M]
        # ⟨B₁A₁, B₂A₂⟩_F by the trace trick
        inner = ((B1.mT @ B2) * (A1 @ A2.mT)).sum((-2, -1))                  # [M]
        cos = (inner / (n1 * n2).clamp_min(tiny)).clamp(-1.0, 1.0)
        theta = torch.arccos(cos)
        sin = torch.sin(theta)
        # else: the lerp
        arc = (sin > 1e-6) & (n1 > 0) & (n2 > 0)
        scale = ((1 - tt) * n1 + tt * n2) / sin.clamp_min(tiny)
        w1 = torch.where(arc, scale * torch.sin((1 - tt) * theta) / n1.clamp_min(tiny), 1 - tt)
        w2 = torch.where(arc, scale * torch.sin(tt * theta) / n2.clamp_min(tiny), tt)
        # the norm of w1·ΔW₁ + w2·ΔW₂ before truncation: (1−t)‖ΔW₁‖ + t‖ΔW₂‖ on the arc
        square = (w1 * n1).square() + (w2 * n2).square() + 2 * w1 * w2 * inner
        U, S, V = qr_svd(Bs, As, [w1, w2])
        return _refactor(U, S, V, _a_rms(As), generator, square.clamp_min(0).sqrt())
    return _apply([fitter, other], fn)


MUTATIONS = {
    "copy_parent": copy_parent,
    "spectral_jitter": spectral_jitter,
    "gauss_rel": gauss_rel,
    "component_resample": component_resample,
    "scale_jitter": scale_jitter,
    "rank_rotation": rank_rotation,
    "input_noise": input_noise,
}
CROSSOVERS = {
    "copy_parent": copy_fitter,
    "linear_0_5": linear_0_5,
    "module_swap": module_swap,
    "layer_block_swap": layer_block_swap,
    "delta_lincomb_svd": delta_lincomb_svd,
    "component_splice": component_splice,
    "aligned_factor_avg": aligned_factor_avg,
    "core_ties": core_ties,
    "core_dare": core_dare,
    "weighted_multi": weighted_multi,
    "delta_slerp": delta_slerp,
}
# coordinates unchanged per module: the donor's optimizer state stays valid
SWAPS = ("module_swap", "layer_block_swap")
# operators whose child does not depend on the generator; every other one draws from it (the
# tests check both ways, so a new random operator needs no entry here)
DETERMINISTIC = ("copy_parent", "linear_0_5", "delta_lincomb_svd", "aligned_factor_avg",
                 "core_ties", "weighted_multi")
# Our labels, the one numbering of this repository (bench/retention.py and results/retention/,
# README), each the first word of its operator's docstring: the controls first (M0 / X0
# copy_parent, XL linear_0_5), then M1-M6 and X1-X9, in design §7's order. The paper's figures
# number six mutations and nine crossovers the same way but its text does not define them: every
# operator here but the controls is our reconstruction, and which of the paper's each one matches
# is unknown.
MUTATION_LABELS = {name: re.match(r"[MX][0-9L]+", fn.__doc__).group()
                   for name, fn in MUTATIONS.items()}
CROSSOVER_LABELS = {name: re.match(r"[MX][0-9L]+", fn.__doc__).group()
                    for name, fn in CROSSOVERS.items()}
# parameters an operator takes that are not hyperparameters: its parents, its generator, and
# weighted_multi's fitness (replacement_step computes it from the ratings)
NOT_HYPERPARAMETERS = ("adapter", "fitter", "other", "generator", "fitness")


def hyperparameters(fn):
    """{name: default} of an operator's hyperparameters (what --evolve_hp may set)."""
    found = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        if name not in NOT_HYPERPARAMETERS:
            found[name] = parameter.default
    return found


def operator_hp(text):
    """--evolve_hp: a JSON object {operator: {hyperparameter: value}} (e.g. '{"gauss_rel":
    {"sigma": 0.01}}'; "" = every operator at its defaults) -> that dict, checked against the
    operators' signatures: ValueError naming an unknown operator or hyperparameter, and the valid
    ones. A name of both tables (copy_parent) sets both."""
    try:
        hp = json.loads(text or "{}")
    except ValueError as e:
        example = json.dumps({"gauss_rel": {"sigma": 0.01}})
        raise ValueError(f"not JSON ({e}); expected e.g. '{example}'")
    if not isinstance(hp, dict):
        raise ValueError("expected a JSON object {operator: {hyperparameter: value}}")
    operators = sorted(set(MUTATIONS) | set(CROSSOVERS))
    for name, values in hp.items():
        if name not in operators:
            raise ValueError(f"unknown operator {name!r}; operators: {operators}")
        allowed = {}
        for table in (MUTATIONS, CROSSOVERS):
            if name in table:
                allowed.update(hyperparameters(table[name]))
        if not isinstance(values, dict):
            raise ValueError(f"{name}: expected an object {{hyperparameter: value}}")
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise ValueError(f"{name}: unknown hyperparameter(s) {unknown}; {name} takes "
                             f"{sorted(allowed)}")
    return hp


# ------------------------------------------------------------------- fail-safe and replacement step

def apply_operator(name, kind, parents, generator, band=SAFE_BAND, **hp):
    """MUTATIONS[name] (kind 'mutation', one parent) or CROSSOVERS[name] (kind 'crossover', fitter
    first; weighted_multi takes >= 2) behind the fail-safe of docs/evolve.md §6.1: a child with
    non-finite values, ‖ΔW‖ outside [band[0]·min, band[1]·max] of the parents' ‖ΔW‖, or a failed SVD
    is replaced by a copy of parent 1. Returns (child, info); info = {"operator", "kind",
    "fallback": bool, "reason": str, "delta_norm", "parent_delta_norms", "seconds"} plus, for swaps,
    "donors" {stem: parent index}."""
    table = {"mutation": MUTATIONS, "crossover": CROSSOVERS}.get(kind)
    if table is None or name not in table:
        raise ValueError(f"unknown operator {kind!r}/{name!r}; mutations {list(MUTATIONS)}, "
                         f"crossovers {list(CROSSOVERS)}")
    need = 1 if kind == "mutation" else 2
    if len(parents) < need or (len(parents) > need and name != "weighted_multi"):
        raise ValueError(f"{kind} {name!r} takes {need} parent(s), got {len(parents)}")
    stems = _check(parents)
    t0 = time.perf_counter()
    norms = [delta_norm(p) for p in parents]
    child, reason = None, ""
    # weighted_multi takes its further parents as a list
    if len(parents) == 2:
        others = parents[1]
    else:
        others = list(parents[1:])
    try:
        if kind == "mutation":
            child = table[name](parents[0], generator, **hp)
        else:
            child = table[name](parents[0], others, generator, **hp)
    # SVD/QR failed to converge on pathological input
    except torch.linalg.LinAlgError as e:
        reason = f"linalg error: {e}"
    # nan/inf iff a non-finite entry
    norm = float("nan")
    if child is not None:
        norm = delta_norm(child)
    lo, hi = band[0] * min(norms), band[1] * max(norms)
    if child is not None and not math.isfinite(norm):
        reason = "non-finite values"
    elif child is not None and not lo * (1 - 1e-6) <= norm <= hi * (1 + 1e-6):
        reason = f"delta norm {norm:.4g} outside the safe band [{lo:.4g}, {hi:.4g}]"
    if reason:
        child = copy_parent(parents[0])
    info = {
        "operator": name,
        "kind": kind,
        "fallback": bool(reason),
        "reason": reason,
        "delta_norm": norm,
        "parent_delta_norms": norms,
        "seconds": time.perf_counter() - t0,
    }
    if name in SWAPS and not reason:
        info["donors"] = _donors(child, parents[0], stems)
    return child, info


def _donors(child, fitter, stems):
    """{stem: 0 if the child's module is the fitter's bit for bit, else 1} for a swap's child."""
    donors = {}
    for stem in stems:
        donors[stem] = 1
        same_a = torch.equal(child[stem + A_KEY], fitter[stem + A_KEY])
        if same_a and torch.equal(child[stem + B_KEY], fitter[stem + B_KEY]):
            donors[stem] = 0
    return donors


def _names(text, table, key):
    """Comma-separated operator names -> [name]; a name not in the table is an error."""
    names = []
    for name in (text or "").split(","):
        if name.strip():
            names.append(name.strip())
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"cfg[{key!r}]: unknown operator(s) {unknown}; known: {list(table)}")
    return names


def replacement_step(members, adapters, cfg, generator, step, next_id):
    """One evolution event (design §7). Within each role of size >= 2, rank by cfg["selection"]
    (ratings.score, through ranked_roles) and replace the bottom ⌈evolve_frac·n⌉ (never
    the best; n_culled). Each child: with probability crossover_prob a crossover of two distinct
    parents from the top ⌈n/2⌉ (fitter first), else a mutation of one; the operator is drawn
    uniformly from the enabled list (both lists empty: copy_parent). Parents are read from
    `adapters` (name -> adapter) as they were before this step; nothing in `members` or `adapters`
    is modified.

    cfg: selection ("inherit"), evolve_frac (0.25), crossover_prob (0.5), mutations /
    crossovers (comma-separated names), evolve_hp (operator_hp's JSON; "": every operator runs
    with its defaults, docs/evolve.md §6).
    Ranking and the child's rating go through ratings.py. Returns one record per child: {"name"
    (slot replaced), "id", "parents" [ids], "parent_names", "operator", "kind", "step", "adapter",
    "copy_optimizer_from" (name or None), "optimizer_donors" ({stem: parent name} for swaps, else
    None: the caller copies the per-module optimizer state from these), "rating" (ratings.child
    of the parents' ratings under the selection rule), "fallback", "info"}."""
    frac = float(cfg.get("evolve_frac", 0.25))
    p_cross = float(cfg.get("crossover_prob", 0.5))
    if not 0 < frac <= 1 or not 0 <= p_cross <= 1:
        raise ValueError(f"need 0 < evolve_frac <= 1 and 0 <= crossover_prob <= 1, "
                         f"got {frac}, {p_cross}")
    mutations = _names(cfg.get("mutations", ",".join(MUTATIONS)), MUTATIONS, "mutations")
    crossovers = _names(cfg.get("crossovers", ",".join(CROSSOVERS)), CROSSOVERS, "crossovers")
    selection = cfg.get("selection", "inherit")
    operator_settings = operator_hp(cfg.get("evolve_hp", ""))
    by_role = ranked_roles(members, selection)
    children = []
    for ranked in by_role.values():
        n = len(ranked)
        if n < 2:
            continue
        top = ranked[:math.ceil(n / 2)]
        for loser in ranked[n - n_culled(n, frac):]:
            parents, op, kind = _choose(top, mutations, crossovers, p_cross, generator)
            hp = dict(operator_settings.get(op, {}))
            if op == "weighted_multi":
                # [ours] fitness in units of a new member's rating uncertainty: T = 1 then tilts
                # mildly, not a copy
                hp["fitness"] = [ratings.fitness(p["rating"], selection) for p in parents]
            parent_adapters = [adapters[p["name"]] for p in parents]
            child, info = apply_operator(op, kind, parent_adapters, generator, **hp)
            rating = ratings.child([p["rating"] for p in parents], selection)
            children.append(_child_record(loser, next_id, parents, op, kind, step, child, info,
                                          rating))
            next_id += 1
    return children


def ranked_roles(members, selection):
    """{role: that role's members, best first by ratings.score}; roles in the order they
    first appear. sorted is stable, so ties keep the members' order."""
    if selection not in ratings.SELECTIONS:
        raise ValueError(f"selection {selection!r}: expected one of {list(ratings.SELECTIONS)}")
    ranked = {}
    for role in dict.fromkeys(m["role"] for m in members):
        same_role = [m for m in members if m["role"] == role]
        ranked[role] = sorted(same_role, key=lambda m: -ratings.score(m["rating"], selection))
    return ranked


def n_culled(n, frac):
    """Members replaced per event in a role of n: ⌈frac·n⌉, but never the best one."""
    return min(math.ceil(frac * n), n - 1)


def _child_record(loser, child_id, parents, op, kind, step, child, info, rating):
    """The record of one child (its keys are listed in replacement_step's docstring)."""
    names = [p["name"] for p in parents]
    donors = None
    if "donors" in info:
        donors = {stem: names[d] for stem, d in info["donors"].items()}
    copy_optimizer_from = None
    if op == "copy_parent" or op in SWAPS or info["fallback"]:
        copy_optimizer_from = names[0]
    return {
        "name": loser["name"],
        "id": child_id,
        "parents": [p["id"] for p in parents],
        "parent_names": names,
        "operator": op,
        "kind": kind,
        "step": step,
        "adapter": child,
        "copy_optimizer_from": copy_optimizer_from,
        "optimizer_donors": donors,
        "rating": rating,
        "fallback": info["fallback"],
        "info": info,
    }


def _choose(top, mutations, crossovers, p_cross, generator):
    """The parents (member records), operator name and kind of one child. A crossover needs an
    enabled crossover and two parents in `top`; with mutations enabled too it is drawn with
    probability p_cross. The draws happen in this order: crossover or not, parents, operator."""
    crossing = bool(crossovers) and len(top) >= 2
    if crossing and mutations:
        crossing = float(_rand((1,), generator, torch.empty(0))) < p_cross
    if crossing:
        order = _rand((len(top),), generator, torch.empty(0)).argsort()
        i, j = sorted(order[:2].tolist())
        op = crossovers[_draw_index(len(crossovers), generator)]
        return [top[i], top[j]], op, "crossover"
    parents = [top[_draw_index(len(top), generator)]]
    op = "copy_parent"
    if mutations:
        op = mutations[_draw_index(len(mutations), generator)]
    return parents, op, "mutation"


def _draw_index(n, generator):
    """A uniform index in 0..n-1."""
    return int(_randint(0, n, (1,), generator, torch.empty(0)))
