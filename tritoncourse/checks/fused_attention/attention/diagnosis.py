"""Phase 6, attention: the likely cause of a wrong O or LSE, found by replaying known mistakes on the same inputs
(the rescale missing, the scale wrong, a causal mask off by one or tile-local, masked scores 0 instead of -inf, the
key pointers not advanced, keys past one tile never seen, a tensor addressed with another's strides, ...).
"""
from __future__ import annotations

import math

import torch

from ....checking import OUTPUT_SENTINEL, shown
from .inputs import LAYOUT_WORDS, ROW_LETTER, TENSORS, Placed, attention_ref
from ..layer_norm import UNWRITTEN

# ------------------------------------------------------------------------------------------ replays
def _tiled(q, k, v, causal, sm_scale, block_n, *, rescale_acc=True, rescale_l=True, drop_last=False,
           scale_after=False, diag=0, block_m=None, compute=torch.float64, p_dtype=None, masked_value=float("-inf"),
           tail_scores=False, local_causal=False, skip_diagonal=False, k_stuck=None, v_stuck=None, normalize=True,
           max_keys=None, rescale_after=(False, False), alpha_base=1.0):
    """Replay a tiled online-softmax forward in ``compute`` (fp64), with one mistake switched on; returns O.

    ``block_m``: with ``causal``, each query tile visits only the key tiles up to its own end, as the kernels do
    (``skip_diagonal``: up to its start). Mistakes: ``rescale_acc``/``rescale_l`` off, ``scale_after`` the softmax,
    ``diag`` (the causal boundary moved by that much), ``local_causal`` (the mask compares positions inside the
    tiles), ``masked_value`` (masked scores set to it, not -inf), ``tail_scores`` (the scores of keys past seq_len
    left unmasked; their K and V load as 0), ``k_stuck``/``v_stuck`` ("first": the pointers never advance; "loop":
    they advance only between the unmasked and the masked loop, as in the reference's two loops), ``normalize``
    off, ``drop_last`` (the ragged last key tile skipped), ``max_keys`` (keys from there on never seen),
    ``rescale_after`` (acc, l: rescaled after the new tile is added, (acc + P @ V) · alpha), ``alpha_base`` (alpha =
    exp((m_old - m_new) · alpha_base): ln 2 is exp2 on natural-unit scores, log2(e) exp on log2-unit ones).
    ``p_dtype``: round P to it before P @ V, as a kernel does (fp32 ``compute`` then replays a correct kernel)."""
    q, k, v = q.to(compute).cpu(), k.to(compute).cpu(), v.to(compute).cpu()
    S, D = q.shape[-2], q.shape[-1]
    n_tiles = -(-S // block_n)
    kp = torch.zeros(*k.shape[:-2], n_tiles * block_n, D, dtype=compute)
    vp = torch.zeros_like(kp)
    kp[..., :S, :], vp[..., :S, :] = k, v
    bm = block_m or block_n
    scale = 1.0 if scale_after else sm_scale
    rows = torch.arange(S)[:, None]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=compute)
    l = torch.zeros(q.shape[:-1], dtype=compute)
    acc = torch.zeros(q.shape, dtype=compute)
    if causal and block_m:
        hi = torch.clamp((rows[:, 0] // bm + (0 if skip_diagonal else 1)) * bm, max=S)
        split = (rows[:, 0] // bm) * bm  # where the reference's masked loop starts
    else:
        hi = torch.full((S,), S)
        split = torch.full((S,), S // block_n * block_n)
    for t in range(n_tiles):
        start = t * block_n
        if (drop_last and start + block_n > S) or (max_keys is not None and start >= max_keys):
            break
        cols = torch.arange(start, start + block_n)[None, :]
        in_seq = cols[0] < S  # the loads' mask: the tile the kernel should be at

        def tile(src, stuck):
            if stuck is None:
                return src[..., start:start + block_n, :]
            first = torch.zeros(S, dtype=torch.long) if stuck == "first" else torch.where(
                torch.full((S,), start) < split, 0, split)
            # per query row, the tile its pointer still points at (masked like the tile it should be)
            out = torch.stack([src[..., f:f + block_n, :] for f in first.tolist()], -3)  # (..., S, BN, D)
            return out * in_seq[:, None].to(compute)

        kt, vt = tile(kp, k_stuck), tile(vp, v_stuck)
        if kt.dim() == q.dim():
            s = (q @ kt.transpose(-2, -1)) * scale
        else:
            s = torch.einsum("...sd,...snd->...sn", q, kt) * scale
        valid = torch.ones(S, block_n, dtype=torch.bool) if tail_scores else (cols < S).expand(S, block_n)
        if causal:
            if local_causal:
                valid = valid & ((cols - start) <= (rows % bm))
            else:
                valid = valid & (cols <= rows + diag)
        s = torch.where(valid, s, torch.tensor(masked_value, dtype=compute))
        visit = (start < hi)[:, None]  # (S, 1): does this query row's program visit this key tile?
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        alpha = torch.exp((m - m_new) * alpha_base)
        l_new = (l + p.sum(-1)) * alpha if rescale_after[1] else (l * alpha if rescale_l else l) + p.sum(-1)
        p = p if p_dtype is None else p.to(p_dtype).to(compute)
        pv = p @ vt if vt.dim() == q.dim() else torch.einsum("...sn,...snd->...sd", p, vt)
        acc_new = (acc + pv) * alpha[..., None] if rescale_after[0] else (
            acc * alpha[..., None] if rescale_acc else acc) + pv
        m = torch.where(visit[:, 0], m_new, m)
        l = torch.where(visit[:, 0], l_new, l)
        acc = torch.where(visit, acc_new, acc)
    o = acc / l[..., None] if normalize else acc
    return o * sm_scale if scale_after else o


def _replays(S, D, causal, sm_scale, block_m, block_n):
    """(keyword arguments of :func:`_tiled`, cause) for the known mistakes of the loop, the first that matches wins."""
    tail = S % block_n != 0
    out = [
        (dict(rescale_acc=False), "the accumulator is not rescaled when the running maximum grows: before adding "
                                  "P @ V, multiply acc by alpha = exp(m_old - m_new), as the sum l is."),
        (dict(rescale_acc=False, rescale_l=False), "neither the accumulator nor the running sum is rescaled when "
                                                   "the running maximum grows: multiply both by exp(m_old - m_new)."),
        (dict(rescale_l=False), "the running sum l is not rescaled when the running maximum grows: l = l * alpha + "
                                "sum(p), with alpha = exp(m_old - m_new), as acc is."),
        (dict(rescale_after=(True, False)), "the accumulator is rescaled after the new tile is added ((acc + P @ V) "
                                            "* alpha): the new tile's P is already relative to m_new, so only the old "
                                            "acc is multiplied: acc = acc * alpha[:, None] + tl.dot(p, v)."),
        (dict(rescale_after=(True, True)), "acc and l are rescaled after the new tile is added ((acc + P @ V) * "
                                           "alpha, (l + sum(p)) * alpha): the new terms are already relative to m_new, "
                                           "so only the old ones are multiplied: l = l * alpha + sum(p), acc = acc * "
                                           "alpha + P @ V."),
        (dict(alpha_base=math.log(2)), "alpha and p use different exponentials: p = exp(s - m_new) but alpha = "
                                       "exp2(m_old - m_new). Use the same one for both (exp, or exp2 with the scores "
                                       "multiplied by log2(e))."),
        (dict(alpha_base=1 / math.log(2)), "alpha and p use different exponentials: the scores are in log2 units "
                                           "(multiplied by log2(e)) and p = exp2(s - m_new), but alpha = exp(m_old - "
                                           "m_new). Use exp2 for both."),
        (dict(scale_after=True), "sm_scale is applied after the softmax: multiply the scores Q·Kᵀ by sm_scale before "
                                 "the maximum and the exponential (softmax(s)·c is not softmax(s·c))."),
        (dict(normalize=False), "O is not divided by the sum l of the probabilities: O = acc / l[:, None] at the end."),
    ]
    if tail:
        out.append((dict(drop_last=True), f"the last key tile is dropped: seq_len{shown(f' = {S}', '')} is not a "
                                          f"multiple of BLOCK_N{shown(f' = {block_n}', '')}, "
                                          f"so loop over tl.cdiv(seq_len, BLOCK_N) tiles and mask the "
                                          "last one."))
    for stuck, words in (("first", "are never advanced"), ("loop", "are not advanced inside the key loop")):
        for which, kw in (("K's", dict(k_stuck=stuck)), ("V's", dict(v_stuck=stuck)),
                          ("K's and V's", dict(k_stuck=stuck, v_stuck=stuck))):
            first_tile = (" (If there is no loop over the key tiles yet, only the first tile is seen: that is "
                          "step 2.)" if stuck == "first" and which == "K's and V's" else "")
            out.append((kw, f"{which} pointers {words}: every step of the loop must move them on by BLOCK_N rows "
                            "(k_ptrs += BLOCK_N * stride_kn, v_ptrs += BLOCK_N * stride_vn), or be computed from "
                            "the tile's start." + first_tile))
    for n_keys in sorted({block_n, block_m, 64, 128, 256} | set(range(block_n, S, block_n))):
        if n_keys < S and not (tail and n_keys == S // block_n * block_n):
            out.append((dict(max_keys=n_keys), shown(f"the keys from {n_keys} on are never seen (seq_len = {S} here)",
                                                     "the keys past the first tiles are never seen") + ": loop "
                                               f"over every key tile, for start in range(0, seq_len, BLOCK_N) "
                                               "(up to the query tile's end when causal), not one tile of fixed size."))
    zero = ("masked scores are set to 0 instead of -inf: exp(0 - m) is not 0, so the masked keys (past seq_len"
            + (", or after the query when causal" if causal else "") + ") still get weight. Use tl.where(mask, s, "
            "float('-inf')).")
    if tail:
        out.append((dict(tail_scores=True), f"the scores of the keys past seq_len{shown(f' = {S}', '')} "
                                            f"are not set to -inf (left "
                                            "unmasked, or masked with 0): their K and V load as 0, but exp(0 - m) "
                                            "still adds to the sum l. Use tl.where(cols < seq_len, s, float('-inf')) "
                                            "before the maximum and the exponential."))
    if causal or tail:
        out.append((dict(masked_value=0.0), zero))
    if causal:
        off = "the causal mask is off by one: query i must see keys j <= i "
        out += [
            (dict(diag=1), off + "and not j = i + 1; keep offs_m[:, None] >= cols[None, :]."),
            (dict(diag=-1), off + "including j = i (the diagonal); keep offs_m[:, None] >= cols[None, :], not >: "
                                  "with > row 0 sees no key at all and is NaN."),
            (dict(local_causal=True), "the causal mask compares positions inside the tiles (tl.arange(0, BLOCK_M) "
                                      "against tl.arange(0, BLOCK_N)): compare the sequence positions, offs_m = "
                                      "pid_m * BLOCK_M + tl.arange(0, BLOCK_M) and cols = start_n + "
                                      "tl.arange(0, BLOCK_N), as offs_m[:, None] >= cols[None, :]."),
            (dict(skip_diagonal=True), "the key loop stops before the query tile's own (diagonal) key tile: the "
                                       "first query tile then sees no key at all (0 / 0 = NaN) and the others miss "
                                       "their nearest keys. Loop up to min((pid_m + 1) * BLOCK_M, seq_len) and mask "
                                       "the diagonal tile with offs_m[:, None] >= cols[None, :]."),
        ]
    return out


def _scale_candidates(D, sm_scale):
    out = [(1.0, "sm_scale is not applied: multiply the scores Q·Kᵀ by sm_scale (1/sqrt(HEAD_DIM) by default)."),
           (1.0 / D, "the scores are scaled by 1/HEAD_DIM: the scale is the sm_scale argument (1/sqrt(HEAD_DIM) by "
                     "default)."),
           (sm_scale * math.log(2), "exp2 is used on scores not scaled by log2(e): exp(x) = exp2(x * log2(e)), so "
                                    "multiply sm_scale by 1.4426950408889634 when you use exp2."),
           (sm_scale * math.log2(math.e), "the scores are scaled by log2(e) but then exp (not exp2) is used: "
                                          "either exp2 with sm_scale * log2(e), or exp with sm_scale alone."),
           (sm_scale**2, "sm_scale is applied twice: multiply the scores by it once.")]
    if not math.isclose(sm_scale, D**-0.5, rel_tol=1e-6):
        out.insert(0, (D**-0.5, f"the kernel uses 1/sqrt(HEAD_DIM) instead of the sm_scale argument"
                                f"{shown(f' (here {sm_scale:g})', '')}"
                                ": multiply the scores by the sm_scale the wrapper passes."))
    return out


def _addressing(t) -> tuple:
    """The strides that matter: those of dimensions longer than 1."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)


def _stride_message(x, y, lays):
    xl, yl = x.lower(), y.lower()
    return (f"{x} is addressed with {y}'s strides (stride_{yl}b, stride_{yl}h, ...): in this test {x} is "
            f"{LAYOUT_WORDS[lays[TENSORS.index(x)]]} and {y} {LAYOUT_WORDS[lays[TENSORS.index(y)]]}, each with strides "
            f"of its own. Address {x}[b, h, {ROW_LETTER[x]}, d] as {xl}_ptr + b*stride_{xl}b + h*stride_{xl}h + "
            f"{ROW_LETTER[x]}*stride_{xl}{ROW_LETTER[x]} + d*stride_{xl}d.")


def _input_stride_replays(placed, lays):
    """(Q, K, V as a kernel confusing strides reads them, cause) for each tensor addressed with another's strides;
    ``placed``: Q, K, V and O."""
    views = [p.view for p in placed[:3]]
    out = []
    for i, x in enumerate(TENSORS[:3]):
        for j, y in enumerate(TENSORS):
            if i != j and _addressing(placed[j].view) != _addressing(placed[i].view):
                got = [v.detach().cpu() for v in views]
                got[i] = placed[i].read_as(placed[j].view.stride())
                out.append((got, (x, y, _stride_message(x, y, lays))))
    return out


def _output_stride_cause(go: Placed, placed, ref_o, tol, lays):
    """The cause when O's buffer holds the reference stored with another tensor's strides, else None."""
    if lays[3] == "contiguous" and all(lay == "contiguous" for lay in lays):
        return None
    flat = go.flat.detach().cpu().double()
    for j, y in enumerate(TENSORS[:3]):
        strides = placed[j].view.stride()
        if _addressing(placed[j].view) == _addressing(go.view):
            continue
        want = torch.full_like(flat, OUTPUT_SENTINEL)
        want[go.inside] = UNWRITTEN
        want.as_strided(go.view.shape, strides, go.view.storage_offset()).copy_(ref_o.to(go.view.dtype).double())
        if torch.allclose(flat, want, atol=tol[0], rtol=tol[1]):
            return _stride_message("O", y, lays)
    return None


def _lse_diagnose(got, ref_lse, s_max, l_atol, l_rtol) -> str:
    """The likely cause of a wrong LSE whose O is right; ``s_max`` is each row's largest scaled score."""
    ln2 = math.log(2)
    ln_l = ref_lse - s_max
    close = lambda cand: torch.allclose(got, cand, atol=10 * l_atol, rtol=10 * l_rtol)
    if (got == UNWRITTEN).any():
        return ("some LSE[row] were never written: store m + log(l) for every row < seq_len at lse_ptr + "
                "(batch * n_heads + head) * seq_len + row.")
    if close(ref_lse / ln2):
        return ("LSE is in base 2: with exp2 and scores scaled by log2(e), the natural log-sum-exp is "
                "(m + log2(l)) · ln(2).")
    if close(s_max / ln2 + ln_l):
        return ("LSE mixes bases: the running maximum m is in log2 units (scores scaled by log2(e) for exp2) and "
                "log(l) is natural: the natural log-sum-exp is (m + log2(l)) · ln(2).")
    if close(s_max + ln_l / ln2):
        return "LSE adds log2(l) to a natural m: with exp, LSE = m + log(l); with exp2, (m + log2(l)) · ln(2)."
    if close(s_max) or close(s_max / ln2):
        return "LSE is the running maximum m alone: add log(l), the log of the row's sum of probabilities."
    if close(ln_l) or close(ln_l / ln2):
        return "LSE is log(l) alone: add the running maximum m (the sum l is relative to it)."
    return ("LSE[row] must be the natural log of the sum over keys of exp(scaled score), i.e. m + log(l) with the "
            "running maximum m and sum l of the scaled scores (fp32, stored at lse_ptr + (batch * n_heads + head) * "
            "seq_len + row, masked with rows < seq_len).")


def _attention_diagnose(o, lse, q, k, v, causal, sm_scale, block_m, block_n, tol, ref_lse, data, placed=None,
                        lays=None) -> str:
    oc = o.detach().double().cpu()
    if (oc == UNWRITTEN).all():
        return "nothing was written to O: is there a tl.store to o_ptr with this program's rows?"
    if (oc == UNWRITTEN).any():
        b, h, r, d = (oc == UNWRITTEN).nonzero()[0].tolist()
        return (f"{shown(f'O[{b}, {h}, {r}, {d}] was', 'Some of O was')} never written: "
                f"does every program store all BLOCK_M rows of its query "
                f"tile (mask rows < seq_len) for its (batch, head) = (pid_1 // n_heads, pid_1 % n_heads)?")
    atol, rtol = tol
    close = lambda cand: bool(torch.allclose(oc, cand.to(o.dtype).double(), atol=atol, rtol=rtol, equal_nan=True))
    S, D = q.shape[-2], q.shape[-1]
    if placed is not None:
        found = [(x, y, words) for (q2, k2, v2), (x, y, words) in _input_stride_replays(placed, lays)
                 if close(attention_ref(q2, k2, v2, causal, sm_scale)[0])]
        if len(found) == 1:
            return found[0][2]
        if found and len({x for x, _, _ in found}) == 1:  # NaN everywhere either way: one tensor, two suspects
            x = found[0][0]
            return (
                f"{x} is addressed with another tensor's strides ("
                + " or ".join(f"{y}'s" for _, y, _ in found) + ", each reading NaN from the guards here): in this "
                "test "
                + ", ".join(f"{n} is {LAYOUT_WORDS[lay]}" for n, lay in zip(TENSORS, lays)) + f". Address "
                f"{x}[b, h, {ROW_LETTER[x]}, d] as {x.lower()}_ptr + b*stride_{x.lower()}b + h*stride_{x.lower()}h + "
                f"{ROW_LETTER[x]}*stride_{x.lower()}{ROW_LETTER[x]} + d*stride_{x.lower()}d.")
        if found:  # every replay gives NaN everywhere: name the candidates
            pairs = " or ".join(f"{x} with {y}'s strides" for x, y, _ in found)
            return (f"a tensor is addressed with another's strides ({pairs}: each reads NaN from the guards here). In "
                    "this test " + ", ".join(f"{n} is {LAYOUT_WORDS[lay]}" for n, lay in zip(TENSORS, lays)) + ": "
                    "address Q[b, h, m, d] as q_ptr + b*stride_qb + h*stride_qh + m*stride_qm + d*stride_qd, and K, "
                    "V, O each with their own strides.")
    bad = torch.isnan(oc) | torch.isinf(oc)
    if bad.any():
        if data == "large":
            return ("O holds NaN or inf with scores of several hundred: exp overflows unless the running maximum "
                    "is subtracted first (p = exp2(s - m_new), and alpha = exp2(m_old - m_new) for the rescale).")
        if data == "negative":
            return ("O holds NaN or inf where every score of a row is far below 0 (about -2000 here): exp(s - m) "
                    "underflows to 0 for every key unless m is the row's own maximum, and then l = 0 and O = 0 / 0. "
                    "Start the running maximum at -inf, not 0 (m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)), "
                    "so that the first tile sets it, and subtract m_new from the scores before the exponential.")
        if data == "huge_v":
            return ("O holds inf or NaN with V's values past fp16's range (|V| up to "
                    f"{shown(f'{float(v.abs().max()):.3g}', 'far past it')}, "
                    f"fp16 ends at 65504): the accumulator or P @ V is held in fp16. In an "
                    "fp32 run keep everything fp32: acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32), and "
                    "convert P only to V's own dtype (p.to(v.dtype)) for the tl.dot.")
    for kwargs, words in _replays(S, D, causal, sm_scale, block_m, block_n):
        try:
            if close(_tiled(q, k, v, causal, sm_scale, block_n, block_m=block_m, **kwargs)):
                return words
        except RuntimeError:
            continue
    if bad.any():
        b, h, r, d = bad.nonzero()[0].tolist()
        tail = shown(f" (seq_len = {S} is not a multiple of BLOCK_N = {block_n})",
                     " (seq_len is not a multiple of BLOCK_N here)") if S % block_n else ""
        no_key = (" Or a row of O saw no key at all (its sum l is 0: 0 / 0 = NaN): with CAUSAL every query must see "
                  "its own key." if causal else "")
        return (f"{shown(f'O[{b}, {h}, {r}, {d}] is', 'Some of O is')} NaN: "
                f"the kernel read outside Q, K or V (the memory around them holds NaN "
                f"in this test){tail}. Mask the loads of rows >= seq_len (other=0.0) and give the scores of keys "
                f"past seq_len the value -inf before the maximum and the exponential.{no_key}")
    if close(attention_ref(q, k, v, not causal, sm_scale)[0]):
        return ("the result is that of " + ("non-causal" if causal else "causal") + " attention: "
                + ("with CAUSAL, query i may only see keys j <= i (mask the scores with -inf where j > i)."
                   if causal else "without CAUSAL every query sees every key."))
    for scale, words in _scale_candidates(D, sm_scale):
        if close(attention_ref(q, k, v, causal, scale)[0]):
            return words
    ref = attention_ref(q, k, v, causal, sm_scale)[0]
    err = (oc - ref).abs().max().item()
    if err < 64 * atol:
        return ("the values are close but not within the rounding of an fp32 computation: keep the accumulator, "
                "the running maximum and the sum in fp32 (acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)), "
                "convert P to V's dtype only for the tl.dot, and O to its dtype only at the store.")
    if lays is not None and any(lay != "contiguous" for lay in lays):
        return ("the kernel does not follow the stride arguments: in this test "
                + ", ".join(f"{n} is {LAYOUT_WORDS[lay]}" for n, lay in zip(TENSORS, lays)) + ". Address "
                "Q[b, h, m, d] as q_ptr + b*stride_qb + h*stride_qh + m*stride_qm + d*stride_qd, and K, V, O likewise "
                "with their own strides.")
    return ("compare with the online softmax of phase 2, tile by tile: s = (q · kᵀ) · scale, m_new = max(m, "
            "max(s)), p = exp(s - m_new), alpha = exp(m - m_new), l = l·alpha + sum(p), acc = acc·alpha + p @ v, "
            "and O = acc / l at the end.")
