"""Weight-space evolution of a same-rank LoRA population (PopuLoRA §7, SPEC §7, reference/evolve.md §6).

An adapter is a plain dict[str, Tensor] in PEFT state-dict naming: "<module>.lora_A.weight" [r, in] and
"<module>.lora_B.weight" [out, r], with ΔW = s·B·A. All members share r, alpha and target modules, so the
scaling s cancels: operators work on the raw B·A and never see (or change) the LoraConfig, which the caller
keeps per slot. Every operator returns a new dict with the same keys, shapes, dtypes and devices, never
modifies its inputs, computes in float32 (float64 if the inputs are float64) and casts back.

    mutation(adapter, generator, **hp) -> adapter             MUTATIONS[name]
    crossover(fitter, other, generator, **hp) -> adapter      CROSSOVERS[name]
    apply_operator(name, kind, parents, generator, **hp) -> (adapter, info)   with the fail-safe
    replacement_step(members, adapters, cfg, generator, step, next_id) -> child records (SPEC §7)

Every SVD-based operator uses the exact QR route (thin QR of the stacked factors, then a kr×kr SVD;
reference/evolve.md §4.1) and never forms a dense out×in ΔW; modules of one shape are stacked and handled in
one batched call (196 modules of a 7B adapter become 4 calls). Rank-r children are re-factored with the
balanced √S split, a gauge fix (A rows rescaled to the parents' RMS row norm, ΔW unchanged) and dead-slot
refill (a slot with σ ≈ 0 gets b_j = 0 and a fresh A row of norm 1/√3 orthogonal to the live rows, so it can
train again). All randomness comes from the torch.Generator passed in.

Not covered: DoRA / lora bias / rsLoRA scaling differences between parents (all members share one config),
factor-DARE, the ES form of weighted_multi, Fisher weights from optimizer state (pass them as per-module
weights instead).
"""
import math
import re
import time

import torch

import ratings

A_KEY, B_KEY = ".lora_A.weight", ".lora_B.weight"
SAFE_BAND = (0.25, 4.0)  # child ‖ΔW‖ must lie in [lo·min, hi·max] of its parents' ‖ΔW‖ (reference §6.1)
REFILL_NORM = 3 ** -0.5  # PEFT's kaiming_uniform(a=√5) init gives A rows of norm ≈ 1/√3


# ----------------------------------------------------------------------------- plumbing

def modules(adapter):
    """Module stems ("...layers.3.self_attn.q_proj") in key order; ValueError if the dict is not a LoRA adapter."""
    stems = [k[: -len(A_KEY)] for k in adapter if k.endswith(A_KEY)]
    if not stems or 2 * len(stems) != len(adapter):
        raise ValueError("adapter must hold only '<module>.lora_A.weight' / '<module>.lora_B.weight' pairs")
    for s in stems:
        A, B = adapter[s + A_KEY], adapter.get(s + B_KEY)
        if B is None or A.dim() != 2 or B.dim() != 2 or A.shape[0] != B.shape[1]:
            raise ValueError(f"module {s}: need lora_A [r, in] and lora_B [out, r] with the same r")
    return stems


def _check(parents):
    """Stems of parent 1, after checking every parent has the same keys and shapes."""
    stems = modules(parents[0])
    for i, p in enumerate(parents[1:], 2):
        if p.keys() != parents[0].keys():
            raise ValueError(f"parent {i} has different keys from parent 1")
        for k, v in p.items():
            if v.shape != parents[0][k].shape:
                raise ValueError(f"parent {i}: {k} has shape {tuple(v.shape)}, parent 1 {tuple(parents[0][k].shape)}")
    return stems


def layer_of(stem):
    """Decoder layer index from a stem like 'base_model.model.model.layers.12.mlp.down_proj'; None if absent."""
    m = re.search(r"(?:^|\.)layers\.(\d+)(?:\.|$)", stem)
    return int(m.group(1)) if m else None


def _apply(parents, fn):
    """Run fn(As, Bs, stems) on every group of same-shape modules and assemble the child.

    As / Bs are lists (one per parent) of stacked factors [M, r, in] / [M, out, r] in the compute dtype; fn
    returns the child's (A, B) stacks. The child is cast back per tensor to parent 1's dtype and device."""
    first = parents[0]
    stems = _check(parents)
    groups = {}
    for s in stems:
        A, B = first[s + A_KEY], first[s + B_KEY]
        groups.setdefault((A.shape, B.shape, A.dtype, B.dtype, A.device, B.device), []).append(s)
    child = dict.fromkeys(first)
    for group in groups.values():
        dtype = first[group[0] + A_KEY].dtype
        cdt = torch.float64 if dtype == torch.float64 else torch.float32
        dev = first[group[0] + A_KEY].device
        As = [torch.stack([p[s + A_KEY] for s in group]).to(dev, cdt) for p in parents]
        # B stacks are column-major views, the layout LAPACK's QR wants: saves a transposing copy per call
        Bs = [torch.stack([p[s + B_KEY].mT for s in group]).to(dev, cdt).mT for p in parents]
        A, B = fn(As, Bs, group)
        for i, s in enumerate(group):
            for key, val in ((s + A_KEY, A[i]), (s + B_KEY, B[i])):  # contiguous copies (safetensors needs that)
                child[key] = val.to(first[key].device, first[key].dtype, copy=True,
                                    memory_format=torch.contiguous_format)
    return child


# Random draws happen on the generator's device and move to `like`'s: a CPU generator also serves CUDA tensors.
def _randn(shape, gen, like):
    dev = gen.device if gen is not None else like.device
    return torch.randn(shape, generator=gen, device=dev, dtype=like.dtype).to(like.device)


def _rand(shape, gen, like):
    dev = gen.device if gen is not None else like.device
    return torch.rand(shape, generator=gen, device=dev, dtype=like.dtype).to(like.device)


def _randint(lo, hi, shape, gen, like):
    dev = gen.device if gen is not None else like.device
    return torch.randint(lo, hi, shape, generator=gen, device=dev).to(like.device)


# ----------------------------------------------------------------------------- exact low-rank algebra

def fro(B, A):
    """‖B·A‖_F per module without forming B·A: tr((BᵀB)(AAᵀ)). B [..., out, r], A [..., r, in] -> [...]."""
    return ((B.mT @ B) * (A @ A.mT)).sum((-2, -1)).clamp_min(0).sqrt()


def delta_norms(adapter):
    """{stem: ‖B·A‖_F} for every module by the trace trick, in float32 (float64 for float64 adapters). A
    non-finite entry anywhere in a module makes its norm nan or inf (its square enters the diagonal of AAᵀ/BᵀB)."""
    out = {}
    for s in modules(adapter):
        A, B = adapter[s + A_KEY], adapter[s + B_KEY]
        cdt = torch.float64 if A.dtype == torch.float64 else torch.float32
        out[s] = float(fro(B.to(cdt), A.to(cdt)))
    return out


def delta_norm(adapter):
    """‖ΔW‖ of the whole adapter (modules as one long vector), without the raw scaling s."""
    return math.sqrt(sum(v * v for v in delta_norms(adapter).values()))


def qr_svd(Bs, As, weights):
    """Top-r thin SVD of Σ_i w_i·B_i·A_i by the exact QR route (reference/evolve.md §4.1), batched over modules.

    Bs [M, out, r] and As [M, r, in] per parent; weights scalars or [M] tensors (any sign). Returns
    U [M, out, r], S [M, r] (descending), V [M, in, r], U and V orthonormal; by Eckart–Young U·diag(S)·Vᵀ is the
    best rank-r approximation. Cost O((out + in)·(kr)²), never O(out·in)."""
    M, r = As[0].shape[:2]
    Qb, Rb = torch.linalg.qr(torch.cat([B.mT for B in Bs], -2).mT)         # [B_1 … B_k] = Qb Rb, [M, out, kr]
    Qa, Ra = torch.linalg.qr(torch.cat(As, dim=-2).mT)                     # [A_1; …; A_k]ᵀ = Qa Ra
    w = torch.stack([torch.as_tensor(x, dtype=Rb.dtype, device=Rb.device).expand(M) for x in weights], -1)
    Rb = Rb * w.repeat_interleave(r, -1)[:, None, :]                       # [w_i B_i] = Qb (Rb·diag(w)), cheaper
    return _lift(Qb, Rb @ Ra.mT, Qa, r)                                    # ΔW = Qb (Rb Raᵀ) Qaᵀ


def _lift(Qb, core, Qa, r):
    """Top-r components of Qb·core·Qaᵀ from the SVD of the small core; zero components pad a rank below r."""
    U, S, Vh = torch.linalg.svd(core, full_matrices=False)
    U, S, V = U[..., :r], S[..., :r], Vh[..., :r, :].mT
    pad = r - S.shape[-1]                                                  # only when min(out, in, kr) < r
    U, S, V = (torch.nn.functional.pad(x, (0, pad)) for x in (U, S, V))
    return Qb @ U, S, Qa @ V


def _a_rms(As):
    """Mean over parents of the RMS A-row norm ‖A‖_F/√r, per module [M]: the target of the gauge fix."""
    r = As[0].shape[-2]
    return torch.stack([A.square().sum((-2, -1)).div(r).sqrt() for A in As]).mean(0)


def _target(norm, Bs, As, weights=None):
    """Per-module ‖ΔW‖ the child is rescaled to, or None for norm='keep'."""
    if norm == "keep":
        return None
    n = torch.stack([fro(B, A) for B, A in zip(Bs, As)])                  # [k, M]
    if norm == "match_mean":
        return n.mean(0)
    if norm == "match_weighted":
        w = torch.stack([torch.as_tensor(x, dtype=n.dtype, device=n.device).expand(n.shape[1]).abs()
                         for x in weights])
        return (w * n).sum(0) / w.sum(0).clamp_min(1e-30)
    raise ValueError(f"norm must be 'keep', 'match_mean' or 'match_weighted', got {norm!r}")


def _refactor(U, S, V, a_rms, gen, target=None):
    """Rank-r factors B = U·diag(√S/c), A = diag(c·√S)·Vᵀ from components U [M,out,r], S [M,r], V [M,in,r]
    (reference/evolve.md §6.1), fused into one scale per slot:
    - balanced split: √S on both sides;
    - norm match (optional): S scaled so ‖ΔW_child‖ = target; ‖Σ s_j u_j v_jᵀ‖² = sᵀ(UᵀU ⊙ VᵀV)s, since U, V
      need not be orthonormal (component_splice);
    - gauge fix: c makes the live A rows' RMS norm equal the parents' (a_rms) — LoRA's effective per-factor
      learning rates depend on that scale (∂L/∂B ∝ A, ∂L/∂A ∝ B); ΔW is unchanged;
    - dead-slot refill: a slot with σ_j at rounding level gets b_j = 0 and a random A row of norm 1/√3
      orthogonal to the live rows, so it trains again (∂L/∂b_j ∝ a_j); ΔW is unchanged."""
    live = S > S.abs().amax(-1, keepdim=True) * (1e3 * torch.finfo(S.dtype).eps)
    S = S.clamp_min(0) * live
    if target is not None:
        cur = ((U.mT @ U) * (V.mT @ V) * S[..., :, None] * S[..., None, :]).sum((-2, -1)).clamp_min(0).sqrt()
        S = S * torch.where(cur > 0, target / cur.clamp_min(1e-300), torch.ones_like(cur))[:, None]
    n_live = live.sum(-1)
    rms = ((S * V.square().sum(-2)).sum(-1) / n_live.clamp_min(1)).sqrt()  # ‖A row j‖² = S_j·‖v_j‖²
    ok = (n_live > 0) & (rms > 0) & (a_rms > 0)
    c = torch.where(ok, a_rms / rms.clamp_min(1e-300), torch.ones_like(rms))[:, None]
    B, A = U * (S.sqrt() / c)[..., None, :], (S.sqrt() * c)[..., :, None] * V.mT
    if not live.all():
        G = _randn(A.shape, gen, A)                                        # [M, r, in]
        if A.shape[-1] > A.shape[-2]:                                      # room to be orthogonal to all rows
            Q = torch.linalg.qr(A.mT).Q                                    # [M, in, r] spans the live rows
            G = G - (G @ Q) @ Q.mT
        G = G * (REFILL_NORM / G.norm(dim=-1, keepdim=True).clamp_min(1e-30))
        A = torch.where(live[..., :, None], A, G)
    return A, B


def _orthogonal(M, r, theta, gen, like):
    """[M, r, r] orthogonal matrices: Haar (QR of a Gaussian with the sign fix) if theta is None, else
    exp(θ·skew(G)) (a rotation of size ~θ)."""
    G = _randn((M, r, r), gen, like)
    if theta is None:
        Q, R = torch.linalg.qr(G)
        d = torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))
        return Q * torch.where(d == 0, torch.ones_like(d), d)[..., None, :]
    return torch.linalg.matrix_exp(theta * (G - G.mT) / 2)


# ----------------------------------------------------------------------------- mutations (one parent -> child)

def copy_parent(adapter, generator=None):
    """M0 control (PBT exploit): an exact copy; the parent's optimizer state stays valid."""
    return {k: v.clone() for k, v in adapter.items()}


def spectral_jitter(adapter, generator, tau=0.1, theta=0.0):
    """M1: σ_j ← σ_j·exp(τ·z_j); with θ > 0 also rotate U and V (independently) inside their spans by
    exp(θ·skew). Row and column spaces of ΔW are kept; ‖ΔW'‖/‖ΔW‖ lies between exp(τ·min z) and exp(τ·max z)."""
    def fn(As, Bs, _):
        M, r = As[0].shape[:2]
        U, S, V = qr_svd(Bs, As, [1.0])
        S = S * torch.exp(tau * _randn(S.shape, generator, S))
        if theta:
            U = U @ _orthogonal(M, r, theta, generator, S)
            V = V @ _orthogonal(M, r, theta, generator, S)
        return _refactor(U, S, V, _a_rms(As), generator)
    return _apply([adapter], fn)


def gauss_rel(adapter, generator, sigma=0.02, module_frac=1.0):
    """M2: B += σ·rms(B)·ε and A += σ·rms(A)·ε on a random `module_frac` of the modules (rms per module).
    E[ΔW'] = ΔW, relative ΔW change ≈ √2·σ; a zero B stays zero."""
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
        raise ValueError(f"component_resample: need 0 < rho <= 1 and mode 'random'|'smallest', got {rho}, {mode!r}")

    def fn(As, Bs, _):
        M, r = As[0].shape[:2]
        k = math.ceil(rho * r)
        U, S, V = qr_svd(Bs, As, [1.0])
        if mode == "random":
            drop = _rand((M, r), generator, S).argsort(-1)[:, :k]          # k distinct slots per module
        else:
            drop = torch.arange(r - k, r, device=S.device).expand(M, k)
        return _refactor(U, S.scatter(-1, drop, 0.0), V, _a_rms(As), generator)
    return _apply([adapter], fn)


def scale_jitter(adapter, generator, sigma_s=0.1, c_min=0.7, c_max=1.4, per_adapter=True):
    """M4: ΔW ← c·ΔW with c = clip(exp(σ_s·z), c_min, c_max), √c on each factor; one c for the whole adapter
    (default) or one per module. Direction unchanged; alpha untouched."""
    z = _randn((1,), generator, torch.empty(0)) if per_adapter else None

    def fn(As, Bs, _):
        zz = z.to(As[0]) if per_adapter else _randn((len(As[0]),), generator, As[0])
        c = torch.exp(sigma_s * zz).clamp(c_min, c_max).sqrt().view(-1, 1, 1)
        return As[0] * c, Bs[0] * c
    return _apply([adapter], fn)


def rank_rotation(adapter, generator, theta=None):
    """M5 (neutral): A ← R·A, B ← B·Rᵀ with R orthogonal per module (Haar, or exp(θ·skew) if θ is given).
    ΔW, ‖A‖ and ‖B‖ are unchanged; only the coordinates (and so Adam's dynamics) change."""
    def fn(As, Bs, _):
        R = _orthogonal(len(As[0]), As[0].shape[-2], theta, generator, As[0])
        return R @ As[0], Bs[0] @ R.mT
    return _apply([adapter], fn)


def input_noise(adapter, generator, sigma_a=0.05):
    """M6 (NEFTune-style, relative): A += σ_A·rms(A)·ε only; B (the output map) is untouched bit for bit."""
    def fn(As, Bs, _):
        A = As[0]
        return A + sigma_a * A.square().mean((-2, -1), keepdim=True).sqrt() * _randn(A.shape, generator, A), Bs[0]
    return _apply([adapter], fn)


# ----------------------------------------------------------------------------- crossovers (fitter first)

def copy_fitter(fitter, other, generator=None):
    """X1 control: an exact copy of the fitter parent."""
    return copy_parent(fitter)


def linear_0_5(fitter, other, generator=None, w=0.5):
    """X2 control: factor average A = w·A₁ + (1−w)·A₂, B likewise. NOT ΔW-exact (cross terms B₁A₂, B₂A₁) and
    gauge-dependent; kept because PopuLoRA reports it as a control."""
    return _apply([fitter, other], lambda As, Bs, _: (w * As[0] + (1 - w) * As[1], w * Bs[0] + (1 - w) * Bs[1]))


def _pick(fitter, other, from_fitter):
    """Child whose module s is cloned bit for bit from the fitter if from_fitter[s], else from the other."""
    child = {}
    for s, f in from_fitter.items():
        for key in (s + A_KEY, s + B_KEY):
            child[key] = (fitter if f else other)[key].clone()
    return {k: child[k] for k in fitter}


def module_swap(fitter, other, generator, p_swap=0.5):
    """X3: every module (A and B together) copied whole from the fitter with probability p_swap, else from
    the other parent. Exact per module; the donor's optimizer state stays valid for that module."""
    stems = _check([fitter, other])
    take = _rand((len(stems),), generator, torch.empty(0)) < p_swap
    return _pick(fitter, other, {s: bool(t) for s, t in zip(stems, take)})


def layer_block_swap(fitter, other, generator, k=1):
    """X4: k-point crossover over the decoder layer index. Layers before the first cut come from the fitter,
    then the parents alternate; all modules of a layer share a parent (attention and MLP stay co-adapted).
    Cuts are distinct, uniform over the gaps between layers. Modules without a layer index, and adapters with
    a single layer, come from the fitter."""
    stems = _check([fitter, other])
    layers = sorted({layer_of(s) for s in stems} - {None})
    k = max(0, min(int(k), len(layers) - 1))
    cuts = (_rand((len(layers) - 1,), generator, torch.empty(0)).argsort()[:k] + 1).tolist() if k else []
    position = {l: i for i, l in enumerate(layers)}
    segment = {s: 0 if layer_of(s) is None else sum(position[layer_of(s)] >= c for c in cuts) for s in stems}
    return _pick(fitter, other, {s: segment[s] % 2 == 0 for s in stems})


def _lincomb(parents, weights, norm, generator, normalize):
    """Best rank-r approximation of Σ_i w_i·ΔW_i (QR route), norm match, refactor. weights: per parent a float
    or a {stem: float} dict; normalize=True makes them sum to 1 per module."""
    def fn(As, Bs, group):
        W = torch.tensor([[w[s] if isinstance(w, dict) else w for s in group] for w in weights],
                         dtype=As[0].dtype, device=As[0].device)                         # [k, M]
        if normalize:
            total = W.sum(0)
            if (total.abs() < 1e-12).any():
                raise ValueError("weighted_multi: the weights of a module sum to zero")
            W = W / total
        U, S, V = qr_svd(Bs, As, list(W))
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As, list(W)))
    return _apply(parents, fn)


def delta_lincomb_svd(fitter, other, generator, w=0.5, norm="match_mean"):
    """X5: best rank-r approximation (Eckart–Young) of w·ΔW₁ + (1−w)·ΔW₂ via the exact QR route; w in [1, 1.5]
    extrapolates toward the fitter. norm='match_mean' rescales each module to the mean parent ‖ΔW‖ (averaging
    near-orthogonal parents shrinks it to ~0.7×, compounding over generations); 'keep' leaves it."""
    return _lincomb([fitter, other], [w, 1 - w], norm, generator, normalize=False)


def component_splice(fitter, other, generator, k=None, variant="top", norm="match_mean"):
    """X6: SVD components 0..k−1 of the fitter plus the top r−k components (variant 'top') or components
    k..r−1 (variant 'tail', lucidrains X3) of the other; k ~ U{1..r−1} per module unless given (0 ≤ k ≤ r).
    Before norm matching ΔW_child is exactly the sum of the chosen rank-1 terms (~1.37× norm if unrelated)."""
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
        mine = j < kk[:, None]                                                # slot j from the fitter
        j2 = (j - kk[:, None] if variant == "top" else j).clamp(0, r - 1)     # other parent's component
        S = torch.where(mine, S1, S2.gather(-1, j2))
        U = torch.where(mine[:, None], U1, U2.gather(-1, j2[:, None].expand_as(U2)))
        V = torch.where(mine[:, None], V1, V2.gather(-1, j2[:, None].expand_as(V2)))
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As))
    return _apply([fitter, other], fn)


def procrustes(A1, B1, A2, B2):
    """Orthogonal R [M, r, r] minimising ‖R·A₂ − A₁‖² + ‖B₂·Rᵀ − B₁‖²: R = V·Uᵀ for A₂A₁ᵀ + B₂ᵀB₁ = U·S·Vᵀ."""
    U, _, Vh = torch.linalg.svd(A2 @ A1.mT + B2.mT @ B1)
    return Vh.mT @ U.mT


def aligned_factor_avg(fitter, other, generator=None, w=0.5):
    """X7: rotate the other parent's gauge onto the fitter's (Procrustes; its ΔW is unchanged), then average
    the factors. Exact when the parents differ only by a rotation; the cheapest ΔW-aware average."""
    def fn(As, Bs, _):
        R = procrustes(As[0], Bs[0], As[1], Bs[1])
        return w * As[0] + (1 - w) * (R @ As[1]), w * Bs[0] + (1 - w) * (Bs[1] @ R.mT)
    return _apply([fitter, other], fn)


def core_space(Bs, As):
    """Shared orthonormal bases of the stacked factors and the parents' cores (reference/evolve.md §2.1):
    B_i·A_i = Qb·C_i·Qaᵀ exactly, C_i = Rb[:, block i]·Ra[:, block i]ᵀ. Returns Qb [M,out,p], cores, Qa [M,in,q]."""
    r = As[0].shape[-2]
    Qb, Rb = torch.linalg.qr(torch.cat(Bs, -1))
    Qa, Ra = torch.linalg.qr(torch.cat(As, -2).mT)
    return Qb, [Rb[..., i * r:(i + 1) * r] @ Ra[..., i * r:(i + 1) * r].mT for i in range(len(As))], Qa


def _core_merge(parents, generator, norm, weights, merge):
    """merge(C [k, M, p, q], w [k, 1, 1, 1]) -> merged core [M, p, q]; then SVD → top r → norm match → refactor."""
    def fn(As, Bs, _):
        Qb, cores, Qa = core_space(Bs, As)
        w = torch.tensor(weights, dtype=As[0].dtype, device=As[0].device).view(-1, 1, 1, 1)
        U, S, V = _lift(Qb, merge(torch.stack(cores), w), Qa, As[0].shape[-2])
        return _refactor(U, S, V, _a_rms(As), generator, _target(norm, Bs, As, list(weights)))
    return _apply(parents, fn)


def core_ties(fitter, other, generator=None, density=0.8, weights=(1.0, 1.0), norm="match_mean", sign="total"):
    """X8 (TIES in core space): trim each core to its top `density` entries by magnitude, weight, elect a sign
    per entry (sign of the sum, 'total', or of the sign count, 'frequency'), disjoint mean of the agreeing
    entries; SVD of the merged core → rank r. Gauge-free, but basis-dependent by construction."""
    if not 0 < density <= 1 or sign not in ("total", "frequency"):
        raise ValueError(f"core_ties: need 0 < density <= 1 and sign 'total'|'frequency', got {density}, {sign!r}")

    def merge(C, w):
        mag = C.abs().flatten(-2)                                             # [k, M, p·q]
        kth = mag.topk(max(1, int(density * mag.shape[-1])), dim=-1).values[..., -1:]
        T = C * (mag >= kth).view_as(C) * w
        votes = T.sum(0) if sign == "total" else T.sign().sum(0)
        agree = T.sign() == torch.where(votes >= 0, 1.0, -1.0).to(T)       # zeros never agree
        return (T * agree).sum(0) / agree.sum(0).clamp_min(1)
    return _core_merge([fitter, other], generator, norm, weights, merge)


def core_dare(fitter, other, generator, p=0.1, weights=(0.5, 0.5), norm="match_mean"):
    """X8 variant (DARE in core space): drop each core entry with probability p, rescale by 1/(1−p), weighted
    sum. Keep p low: in a kr×kr core the drop noise is not diluted (p = 0.5 moved a child ~100 %). Weights
    (0.5, 0.5) [ours; the note's (1, 1) gives the same child under the default norm match]: p = 0 is X5."""
    if not 0 <= p < 1:
        raise ValueError(f"core_dare: need 0 <= p < 1, got {p}")
    return _core_merge([fitter, other], generator, norm, weights,
                       lambda C, w: (C * (_rand(C.shape, generator, C) >= p) / (1 - p) * w).sum(0))


def weighted_multi(fitter, other=None, generator=None, weights=None, fitness=None, temperature=1.0,
                   norm="match_weighted"):
    """X9: best rank-r approximation of Σ_i w_i·ΔW_i over k ≥ 2 parents (QR route). `fitter` may be a list of
    all parents (other=None) and `other` a list of further parents. Weights per parent (floats, or {stem: w}
    dicts for per-module weights such as a Fisher proxy), else softmax(fitness / temperature), else equal;
    normalised to sum 1 per module. norm='match_weighted' rescales to the weighted mean parent ‖ΔW‖, so one-hot
    weights reproduce that parent."""
    as_list = lambda x: list(x) if isinstance(x, (list, tuple)) else ([] if x is None else [x])  # noqa: E731
    parents = as_list(fitter) + as_list(other)
    if weights is None:
        f = torch.as_tensor(fitness if fitness is not None else [0.0] * len(parents), dtype=torch.float64)
        weights = torch.softmax(f / temperature, 0).tolist()
    if len(parents) < 2 or len(weights) != len(parents):
        raise ValueError(f"weighted_multi: need >= 2 parents and one weight each, got {len(parents)}, {len(weights)}")
    return _lincomb(parents, list(weights), norm, generator, normalize=True)


def delta_slerp(fitter, other, generator, t=None, t_range=(0.0, 1.0)):
    """X10 (SLERP on ΔW, the ninth non-control crossover): per module, the point at fraction t of the
    great-circle arc from ΔW₁'s direction to ΔW₂'s, at the linearly interpolated norm
    (1−t)‖ΔW₁‖ + t‖ΔW₂‖; then the best rank-r approximation (QR route), rescaled to that norm
    (the lerp fallback: to the lerp's norm).
    Why this one: SLERP is the most used two-model merge of the merging literature (mergekit's
    `slerp`), and it is what neither existing interpolation does. X5's lerp shrinks near-orthogonal
    parents (~0.7× at the midpoint, so it needs its norm match), X7 averages factors; on the arc the
    norm is interpolated by construction and the direction turns at a constant rate in t. Done on
    ΔW, never on the factors: SLERP of A and B separately would inherit linear_0_5's cross terms and
    gauge dependence. With cos θ = ⟨ΔW₁, ΔW₂⟩ / (‖ΔW₁‖‖ΔW₂‖) by the trace trick,
    ΔW_t = n_t·(sin((1−t)θ)·ΔW₁/‖ΔW₁‖ + sin(tθ)·ΔW₂/‖ΔW₂‖) / sin θ, n_t the interpolated norm,
    a weighted sum of the two ΔW, so the QR route computes it without a dense out×in matrix.
    t None (default) draws t ~ U(t_range) per module: a blend crossover along the arc, not a fixed
    midpoint (at t = 0.5 and equal norms SLERP points where X5 does). Near-parallel, antiparallel or
    zero parents (sin θ < 1e-6) fall back to the lerp (1−t)·ΔW₁ + t·ΔW₂ (mergekit does the same);
    exactly antiparallel parents of equal norm then meet at zero, which the fail-safe rejects."""
    lo, hi = t_range
    if not 0 <= lo <= hi <= 1 or (t is not None and not 0 <= t <= 1):
        raise ValueError(f"delta_slerp: need 0 <= t <= 1 and 0 <= lo <= hi <= 1, got {t}, {t_range}")

    def fn(As, Bs, _):
        A1, A2, B1, B2 = As[0], As[1], Bs[0], Bs[1]
        M = len(A1)
        if t is None:
            tt = lo + (hi - lo) * _rand((M,), generator, A1)
        else:
            tt = torch.full((M,), float(t), dtype=A1.dtype, device=A1.device)
        tiny = torch.finfo(A1.dtype).tiny
        n1, n2 = fro(B1, A1), fro(B2, A2)                                    # [M]
        inner = ((B1.mT @ B2) * (A1 @ A2.mT)).sum((-2, -1))                  # ⟨B₁A₁, B₂A₂⟩_F
        cos = (inner / (n1 * n2).clamp_min(tiny)).clamp(-1.0, 1.0)
        theta = torch.arccos(cos)
        sin = torch.sin(theta)
        arc = (sin > 1e-6) & (n1 > 0) & (n2 > 0)                             # else: lerp
        scale = ((1 - tt) * n1 + tt * n2) / sin.clamp_min(tiny)
        w1 = torch.where(arc, scale * torch.sin((1 - tt) * theta) / n1.clamp_min(tiny), 1 - tt)
        w2 = torch.where(arc, scale * torch.sin(tt * theta) / n2.clamp_min(tiny), tt)
        # the norm of w1·ΔW₁ + w2·ΔW₂ before truncation: (1−t)‖ΔW₁‖ + t‖ΔW₂‖ on the arc
        square = (w1 * n1).square() + (w2 * n2).square() + 2 * w1 * w2 * inner
        U, S, V = qr_svd(Bs, As, [w1, w2])
        return _refactor(U, S, V, _a_rms(As), generator, square.clamp_min(0).sqrt())
    return _apply([fitter, other], fn)


MUTATIONS = {"copy_parent": copy_parent, "spectral_jitter": spectral_jitter, "gauss_rel": gauss_rel,
             "component_resample": component_resample, "scale_jitter": scale_jitter,
             "rank_rotation": rank_rotation, "input_noise": input_noise}
CROSSOVERS = {"copy_parent": copy_fitter, "linear_0_5": linear_0_5, "module_swap": module_swap,
              "layer_block_swap": layer_block_swap, "delta_lincomb_svd": delta_lincomb_svd,
              "component_splice": component_splice, "aligned_factor_avg": aligned_factor_avg,
              "core_ties": core_ties, "core_dare": core_dare, "weighted_multi": weighted_multi,
              "delta_slerp": delta_slerp}
SWAPS = ("module_swap", "layer_block_swap")  # coordinates unchanged per module: the donor's optimizer state is valid


# ----------------------------------------------------------------------------- fail-safe and replacement step

def apply_operator(name, kind, parents, generator, band=SAFE_BAND, **hp):
    """MUTATIONS[name] (kind 'mutation', one parent) or CROSSOVERS[name] (kind 'crossover', fitter first;
    weighted_multi takes >= 2) behind the fail-safe of reference/evolve.md §6.1: a child with non-finite
    values, ‖ΔW‖ outside [band[0]·min, band[1]·max] of the parents' ‖ΔW‖, or a failed SVD is replaced by a
    copy of parent 1. Returns (child, info); info = {"operator", "kind", "fallback": bool, "reason": str,
    "delta_norm", "parent_delta_norms", "seconds"} plus, for swaps, "donors" {stem: parent index}."""
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
    try:
        if kind == "mutation":
            child = table[name](parents[0], generator, **hp)
        else:
            child = table[name](parents[0], parents[1] if len(parents) == 2 else list(parents[1:]), generator, **hp)
    except torch.linalg.LinAlgError as e:                       # SVD/QR failed to converge on pathological input
        reason = f"linalg error: {e}"
    norm = delta_norm(child) if child is not None else float("nan")     # nan/inf iff a non-finite entry
    lo, hi = band[0] * min(norms), band[1] * max(norms)
    if child is not None and not math.isfinite(norm):
        reason = "non-finite values"
    elif child is not None and not lo * (1 - 1e-6) <= norm <= hi * (1 + 1e-6):
        reason = f"delta norm {norm:.4g} outside the safe band [{lo:.4g}, {hi:.4g}]"
    if reason:
        child = copy_parent(parents[0])
    info = {"operator": name, "kind": kind, "fallback": bool(reason), "reason": reason, "delta_norm": norm,
            "parent_delta_norms": norms, "seconds": time.perf_counter() - t0}
    if name in SWAPS and not reason:
        info["donors"] = {s: 0 if all(torch.equal(child[s + x], parents[0][s + x]) for x in (A_KEY, B_KEY)) else 1
                          for s in stems}
    return child, info


def _names(text, table, key):
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"cfg[{key!r}]: unknown operator(s) {unknown}; known: {list(table)}")
    return names


def replacement_step(members, adapters, cfg, generator, step, next_id):
    """One evolution event (SPEC §7). Within each role of size >= 2, rank by μ − 3σ and replace the bottom
    ⌈evolve_frac·n⌉ (never the best). Each child: with probability crossover_prob a crossover of two distinct
    parents from the top ⌈n/2⌉ (fitter first), else a mutation of one; the operator is drawn uniformly from the
    enabled list (both lists empty: copy_parent). Parents are read from `adapters` (name -> adapter) as they
    were before this step; nothing in `members` or `adapters` is modified.

    cfg: evolve_frac (0.25), crossover_prob (0.5), mutations / crossovers (comma-separated names); every
    operator runs with its defaults (reference §6). Ranking and the child's rating go through ratings.py.
    Returns one record per child: {"name" (slot replaced), "id",
    "parents" [ids], "parent_names", "operator", "kind", "step", "adapter", "copy_optimizer_from" (name or
    None), "optimizer_donors" ({stem: parent name} for swaps, else None: the caller copies the per-module
    optimizer state from these), "mu", "sigma" (ratings.child: the parents' mean μ, a fresh σ), "fallback",
    "info"}."""
    frac, p_cross = float(cfg.get("evolve_frac", 0.25)), float(cfg.get("crossover_prob", 0.5))
    if not 0 < frac <= 1 or not 0 <= p_cross <= 1:
        raise ValueError(f"need 0 < evolve_frac <= 1 and 0 <= crossover_prob <= 1, got {frac}, {p_cross}")
    mutations = _names(cfg.get("mutations", ",".join(MUTATIONS)), MUTATIONS, "mutations")
    crossovers = _names(cfg.get("crossovers", ",".join(CROSSOVERS)), CROSSOVERS, "crossovers")
    score = {m["name"]: ratings.conservative_score(m) for m in members}
    # a new member's rating uncertainty: weighted_multi's fitness unit
    unit = ratings.initial()["sigma"]
    draw = lambda n: int(_randint(0, n, (1,), generator, torch.empty(0)))  # noqa: E731
    children = []
    for role in dict.fromkeys(m["role"] for m in members):
        ranked = sorted((m for m in members if m["role"] == role), key=lambda m: -score[m["name"]])  # stable
        n = len(ranked)
        if n < 2:
            continue
        top = ranked[:math.ceil(n / 2)]
        for loser in ranked[n - min(math.ceil(frac * n), n - 1):]:
            crossing = bool(crossovers) and len(top) >= 2 and (
                not mutations or float(_rand((1,), generator, torch.empty(0))) < p_cross)
            if crossing:
                i, j = sorted(_rand((len(top),), generator, torch.empty(0)).argsort()[:2].tolist())
                parents, op, kind = [top[i], top[j]], crossovers[draw(len(crossovers))], "crossover"
            else:
                parents, kind = [top[draw(len(top))]], "mutation"
                op = mutations[draw(len(mutations))] if mutations else "copy_parent"
            hp = {}
            if op == "weighted_multi":
                # [ours] fitness in units of a new member's sigma: T = 1 then tilts mildly, not a copy
                hp["fitness"] = [score[p["name"]] / unit for p in parents]
            child, info = apply_operator(op, kind, [adapters[p["name"]] for p in parents], generator, **hp)
            names = [p["name"] for p in parents]
            donors = {s: names[d] for s, d in info["donors"].items()} if "donors" in info else None
            children.append({
                "name": loser["name"], "id": next_id, "parents": [p["id"] for p in parents], "parent_names": names,
                "operator": op, "kind": kind, "step": step, "adapter": child,
                "copy_optimizer_from": names[0] if (op == "copy_parent" or op in SWAPS or info["fallback"]) else None,
                "optimizer_donors": donors, **ratings.child(parents), "fallback": info["fallback"],
                "info": info})
            next_id += 1
    return children
