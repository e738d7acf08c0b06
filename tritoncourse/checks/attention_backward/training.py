"""Phase 7: a whole training step through the learner's kernels, as the notebook's section 8 builds it.

The autograd function, the custom op and the model are the course's own code (the notebook shows the same code in
locked cells); only the kernels are the learner's. Under the grader they stay in the sandboxed runner: every launch
sends the judge's tensors there and brings the outputs back (grading/channel), so the judge holds tensors only and
never imports, calls or unpickles a learner's class, op or model.

- :func:`check_attention_function`: ``AttentionFunction`` (forward kernel, then the three backward kernels) on Q, K, V
  sliced from one projection and a loss whose dO is a transposed view; O, dQ, dK, dV against fp64 autograd.
- :func:`check_compiled_attention`: the same pair registered with ``torch.library.custom_op`` (and ``register_fake``,
  ``register_autograd``); ``torch.compile(fullgraph=True)`` traces a one-layer attention block through it (a graph
  break fails); its loss and parameter gradients against the same block on PyTorch's SDPA.
- :func:`check_training_step`: a few optimizer steps of that block on the kernels and on SDPA, from the same weights:
  the losses step for step within tolerances.TRAINING_LOSS, and each step's parameter gradients within the gradients'
  tolerance (on a GPU, tf32 rounding moves the losses as much as a wrong gradient does in three steps: measured on an
  H200, the gradients tell them apart by 11x or more).
"""
from __future__ import annotations

import itertools

import torch
import triton

from ...checking import Case, KernelCheckError, compare, fresh_seed, generator, shown, stage
from ...device import infer_device
from ...tolerances import TRAINING_LOSS, TRAINING_LOSS_TF32
from ..common.launch import launch, require_triton_kernel
from .inputs import backward_ref, check_guard, gradient_tolerance, guarded, max_score
from .kernels import DKDV, DQ, PREPROCESS, SIGNATURES

FORWARD = "triton_attention_kernel"
FORWARD_SIGNATURE = ("triton_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, <4 strides each of q, k, v, o>, "
                     "n_heads, seq_len, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL)")
# (BLOCK_M, BLOCK_N) of each launch: the notebook's CPU wrappers' tiles, on every device, so that the checks' sequences
# of 24 to 48 span several tiles each way. With the notebook's GPU tiles (128 keys a dK/dV program, 128 queries a dQ
# program) they were one tile on an H200 (2026-11-28), and a dQ stored instead of atomically added, or a softmax per key
# tile, passed the whole-op checks there.
SMALL_TILES = {"forward": (32, 16), "preprocess": (16, None), "dkdv": (16, 32), "dq": (32, 16)}
TILES = {"cuda": SMALL_TILES, "cpu": SMALL_TILES}


class Kernels:
    """The learner's four kernels, how dQ is made ("kernel" or "atomic"), and a label for messages."""

    def __init__(self, forward, preprocess, dkdv, dq, dq_mode: str = "kernel"):
        for kernel, name in ((forward, FORWARD), (preprocess, PREPROCESS), (dkdv, DKDV), (dq, DQ)):
            require_triton_kernel(kernel, name)
        if dq_mode not in ("kernel", "atomic"):
            raise ValueError(f"dq_mode must be 'kernel' or 'atomic', got {dq_mode!r}")
        self.forward, self.preprocess, self.dkdv, self.dq, self.dq_mode = forward, preprocess, dkdv, dq, dq_mode
        self.context = "a hidden case"

    def _launch(self, kernel, name, grid, args, kwargs):
        launch(kernel, grid, args, kwargs, name=name, signature=SIGNATURES.get(name, FORWARD_SIGNATURE),
               context=str(self.context), device=infer_device())


def attention_forward(kern: Kernels, q, k, v, causal: bool, sm_scale: float):
    """(O, LSE) by the forward kernel; LSE (batch * heads, seq_len) fp32. Q, K, V go to the kernel as
    :func:`guarded` copies."""
    q, k, v = guarded(q), guarded(k), guarded(v)
    batch, heads, seq_len, head_dim = q.shape
    bm, bn = TILES[infer_device()]["forward"]
    o = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_len), device=q.device, dtype=torch.float32)
    kern._launch(kern.forward, FORWARD, (triton.cdiv(seq_len, bm), batch * heads),
                 (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), heads, seq_len, sm_scale),
                 {"HEAD_DIM": head_dim, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal})
    return o, lse


def attention_backward(kern: Kernels, q, k, v, o, lse, do, causal: bool, sm_scale: float):
    """(dQ, dK, dV) by the three backward kernels, as the notebook's attention_backward launches them; every input
    a :func:`guarded` copy."""
    q, k, v, o, lse, do = (guarded(t) for t in (q, k, v, o, lse, do))
    batch, heads, seq_len, head_dim = q.shape
    tiles = TILES[infer_device()]
    bh = batch * heads
    delta = guarded(torch.empty((bh, seq_len), device=q.device, dtype=torch.float32))
    bm = tiles["preprocess"][0]
    kern._launch(kern.preprocess, PREPROCESS, (triton.cdiv(seq_len, bm), bh),
                 (o, do, delta, *o.stride(), *do.stride(), heads, seq_len), {"HEAD_DIM": head_dim, "BLOCK_M": bm})
    atomic = kern.dq_mode == "atomic"
    # the outputs guarded too: a store past the last row is named (check_guard), not left to corrupt memory
    dk, dv = guarded(torch.empty_like(k)), guarded(torch.empty_like(v))
    dq = guarded(torch.zeros(q.shape, device=q.device, dtype=torch.float32) if atomic else torch.empty_like(q))
    bm, bn = tiles["dkdv"]
    kern._launch(kern.dkdv, DKDV, (triton.cdiv(seq_len, bn), bh),
                 (q, k, v, do, lse, delta, dk, dv, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(),
                  *dk.stride(), *dv.stride(), *dq.stride(), heads, seq_len, sm_scale),
                 {"HEAD_DIM": head_dim, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal, "ATOMIC_DQ": atomic})
    for out, name in ((dk, "dK"), (dv, "dV")) + (((dq, "dQ"),) if atomic else ()):
        check_guard(out, name, DKDV, kern.context)
    if atomic:
        return dq.to(q.dtype), dk, dv
    bm, bn = tiles["dq"]
    kern._launch(kern.dq, DQ, (triton.cdiv(seq_len, bm), bh),
                 (q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
                  heads, seq_len, sm_scale), {"HEAD_DIM": head_dim, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal})
    check_guard(dq, "dQ", DQ, kern.context)
    return dq, dk, dv


class AttentionFunction(torch.autograd.Function):
    """softmax(Q Kᵀ · sm_scale) V whose forward and backward are the learner's kernels (the notebook's, verbatim but
    for the kernels passed in)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, kern):
        o, lse = attention_forward(kern, q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale, ctx.kern = causal, sm_scale, kern
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(ctx.kern, q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None


# ------------------------------------------------------------------------------------------- the custom op
_ACTIVE: list[Kernels] = []  # the kernels the registered op launches: set by the check around each use
_OPS: dict[str, object] = {}
_NAMES = itertools.count()


def _kernels() -> Kernels:
    if not _ACTIVE:
        raise RuntimeError("the attention op was called outside a check")
    return _ACTIVE[-1]


def attention_op():
    """The custom op ``tritoncourse_judge::attention`` (registered once per process): (q, k, v, causal, sm_scale)
    -> O, with a fake implementation for tracing and an autograd formula through the backward kernels."""
    if "op" in _OPS:
        return _OPS["op"]
    lib = f"tritoncourse_judge{next(_NAMES)}"

    @torch.library.custom_op(f"{lib}::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        return attention_forward(_kernels(), q.contiguous(), k.contiguous(), v.contiguous(), causal, sm_scale)

    @attention.register_fake
    def _(q, k, v, causal, sm_scale):
        b, h, s, _ = q.shape
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((b * h, s), dtype=torch.float32)

    @torch.library.custom_op(f"{lib}::attention_backward", mutates_args=())
    def backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                    do: torch.Tensor, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return attention_backward(_kernels(), q, k, v, o, lse, do, causal, sm_scale)

    @backward_op.register_fake
    def _(q, k, v, o, lse, do, causal, sm_scale):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, causal, sm_scale = inputs
        ctx.save_for_backward(q.contiguous(), k.contiguous(), v.contiguous(), *output)
        ctx.causal, ctx.sm_scale = causal, sm_scale

    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward_op(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None

    attention.register_autograd(backward, setup_context=setup_context)
    _OPS["op"] = attention
    return attention


# ------------------------------------------------------------------------------------------- the model
class AttentionBlock(torch.nn.Module):
    """x (batch, seq, embed) -> out(attention(qkv(x))): one projection to Q, K, V (so each is a strided view of it),
    heads of head_dim, an output projection. ``attend``: (q, k, v, causal) -> O. No residual: every change of the loss
    goes through attention, so that a wrong gradient shows in the losses within a few steps."""

    def __init__(self, embed: int, heads: int, attend, causal: bool):
        super().__init__()
        self.heads, self.attend, self.causal = heads, attend, causal
        self.qkv = torch.nn.Linear(embed, 3 * embed)
        self.out = torch.nn.Linear(embed, embed)

    def forward(self, x):
        b, s, e = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attend(qkv[0], qkv[1], qkv[2], self.causal)
        return self.out(o.transpose(1, 2).reshape(b, s, e))


def _sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _block_pair(kern, embed, heads, causal, seed, compiled=False):
    """(the block on the learner's kernels, the same weights on SDPA)."""
    torch.manual_seed(seed)  # the weights' initialisation (the check's own process; the learner's is elsewhere)
    if compiled:
        op = attention_op()
        attend = lambda q, k, v, c: op(q, k, v, c, (embed // heads) ** -0.5)[0]
    else:
        attend = lambda q, k, v, c: AttentionFunction.apply(q, k, v, c, (embed // heads) ** -0.5, kern)
    ours = AttentionBlock(embed, heads, attend, causal).to(infer_device())
    ref = AttentionBlock(embed, heads, _sdpa, causal).to(infer_device())
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _data(batch, seq_len, embed, seed):
    g = generator(seed)
    x, target = torch.randn(batch, seq_len, embed, generator=g), torch.randn(batch, seq_len, embed, generator=g)
    return x.to(infer_device()), target.to(infer_device())


def train_losses(model, x, target, steps: int, lr: float = 0.5) -> torch.Tensor:
    """The loss before each of ``steps`` SGD steps (momentum 0.9) of ``model`` on (x, target), fp64."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return torch.tensor(out, dtype=torch.float64)


def _loss_tolerance():
    return TRAINING_LOSS_TF32 if infer_device() == "cuda" else TRAINING_LOSS


def _cause(words: str) -> str:
    return (f"{words} The kernels' own tests above say which kernel is wrong; here the forward kernel, then the "
            "three backward kernels, run as the notebook's attention_forward and attention_backward launch them (with the "
            "CPU's small tiles on every device, so that each case spans several).")


# ------------------------------------------------------------------------------------------- the checks
def _judge(name: str, got, ref, tol, context, cause: str) -> None:
    ok, msg = compare(got, ref, atol=tol[0], rtol=tol[1], name=name)
    if not ok:
        raise KernelCheckError(f"Wrong {name} ({context}).\n{msg}\nLikely cause: {cause}")


def check_attention_function(forward, preprocess, dkdv, dq, *, batch: int, heads: int, seq_len: int, head_dim: int,
                             causal: bool = False, dtype: torch.dtype = torch.float32, dq_mode: str = "kernel",
                             seed: int | None = None) -> None:
    """O, dQ, dK and dV of ``AttentionFunction`` on the learner's kernels: Q, K, V sliced from one (batch, seq, 3,
    heads, dim) projection, the loss (O · W).sum() with W a (batch, seq, heads, dim) tensor seen transposed (so dO
    is W's view, not contiguous); against fp64 autograd through naive attention."""
    kern = Kernels(forward, preprocess, dkdv, dq, dq_mode)
    device, seed = infer_device(), fresh_seed() if seed is None else seed
    scale = head_dim**-0.5
    name = str(dtype).replace("torch.", "")
    kern.context = Case(f"AttentionFunction, batch={batch}, heads={heads}, seq_len={seq_len}, HEAD_DIM={head_dim}, "
                        f"{'causal' if causal else 'not causal'}, {name}, dQ by {dq_mode}, seed {seed}",
                        "AttentionFunction", "causal" if causal else "not causal", name, f"dQ by {dq_mode}")
    g = generator(seed)
    proj = torch.randn(batch, seq_len, 3, heads, head_dim, generator=g).to(device, dtype).requires_grad_()
    w = torch.randn(batch, seq_len, heads, head_dim, generator=g).to(device, dtype)
    q, k, v = (proj[:, :, i].transpose(1, 2) for i in range(3))
    stage(f"running AttentionFunction forward and backward ({kern.context})")
    o = AttentionFunction.apply(q, k, v, causal, scale, kern)
    (o.float() * w.transpose(1, 2).float()).sum().backward()
    ref_o, _, _, *ref_grads = backward_ref(q.detach(), k.detach(), v.detach(), w.transpose(1, 2), causal, scale)
    top = max_score(q.detach(), k.detach(), causal, scale)
    _judge("O", o.detach(), ref_o, gradient_tolerance(dtype, device, ref_o, top)[:2], kern.context,
           "the forward kernel (given) gives a wrong O: run its cell again as it was released.")
    grads = [proj.grad[:, :, i].transpose(1, 2) for i in range(3)]
    for gname, got, ref in zip(("dQ", "dK", "dV"), grads, ref_grads):
        _judge(gname, got, ref, gradient_tolerance(dtype, device, ref, top)[:2], kern.context,
               _cause(f"{gname} through autograd differs while O is right."))
    stage("done")


def _graph_break(err: Exception) -> KernelCheckError:
    text = (str(err).strip().splitlines() or [""])[0][:300]  # may quote shapes: not on a hidden case
    return KernelCheckError(f"torch.compile(fullgraph=True) could not trace the block: {type(err).__name__}"
                            f"{shown(': ' + text, '')}\nLikely cause: a graph break: the op must be "
                            "called only through the registered custom op (with its fake implementation), nothing "
                            "else of Python between the projections.")


def check_compiled_attention(forward, preprocess, dkdv, dq, *, batch: int = 2, seq_len: int, embed: int = 32,
                             heads: int = 2, causal: bool = False, dq_mode: str = "kernel",
                             seed: int | None = None) -> None:
    """A one-layer attention block calling the course's custom op on the learner's kernels, compiled with
    ``torch.compile(fullgraph=True)`` (backend aot_eager: traced, no graph break, no code generated); its loss and
    every parameter's gradient against the same block on SDPA."""
    kern = Kernels(forward, preprocess, dkdv, dq, dq_mode)
    seed = fresh_seed() if seed is None else seed
    kern.context = Case(f"a compiled attention block, batch={batch}, seq_len={seq_len}, embed={embed}, heads={heads}, "
                        f"{'causal' if causal else 'not causal'}, dQ by {dq_mode}, seed {seed}",
                        "a compiled attention block", "causal" if causal else "not causal", f"dQ by {dq_mode}")
    import torch._dynamo

    _ACTIVE.append(kern)
    try:
        ours, ref = _block_pair(kern, embed, heads, causal, seed, compiled=True)
        x, target = _data(batch, seq_len, embed, seed)
        torch._dynamo.reset()
        compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
        stage(f"tracing and running the compiled block ({kern.context})")
        try:
            loss = torch.nn.functional.mse_loss(compiled(x), target)
        except KernelCheckError:
            raise
        except Exception as err:  # dynamo's errors: a graph break, an op it cannot trace
            raise _graph_break(err) from None
        loss.backward()
    finally:
        _ACTIVE.pop()
    ref_loss = torch.nn.functional.mse_loss(ref(x), target)
    ref_loss.backward()
    tol = _loss_tolerance()
    _judge("loss", loss.detach().reshape(1), ref_loss.detach().reshape(1), tol[:2], kern.context,
           _cause("the compiled block's forward differs from SDPA's."))
    for (pname, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters()):
        tol = gradient_tolerance(torch.float32, infer_device(), r.grad)[:2]
        _judge(f"the gradient of {pname}", p.grad, r.grad, tol, kern.context,
               _cause("the compiled block's backward differs from SDPA's."))
    stage("done")


def train_side_by_side(ours, ref, x, target, steps: int, lr: float = 0.5):
    """``steps`` SGD steps (momentum 0.9) of both models in lockstep: yields (step, loss of ours, loss of ref, [(name,
    its gradient in ours, in ref)]) after each backward, before the step."""
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) for m in (ours, ref)]
    for step in range(steps):
        losses = []
        for model, opt in zip((ours, ref), opts):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            losses.append(loss.detach().double().reshape(1))
        grads = [(name, p.grad, r.grad) for (name, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters())]
        yield step, losses[0], losses[1], grads
        for opt in opts:
            opt.step()


def check_training_step(forward, preprocess, dkdv, dq, *, batch: int = 2, seq_len: int, embed: int = 32,
                        heads: int = 2, causal: bool = False, dq_mode: str = "kernel", steps: int = 3,
                        seed: int | None = None) -> None:
    """``steps`` SGD steps (lr 0.5, momentum 0.9) of the attention block on the learner's kernels and, from the same
    weights and data, on SDPA: at each step the loss within tolerances.TRAINING_LOSS and every parameter's gradient
    within the gradients' tolerance."""
    kern = Kernels(forward, preprocess, dkdv, dq, dq_mode)
    seed = fresh_seed() if seed is None else seed
    kern.context = Case(f"{steps} training steps, batch={batch}, seq_len={seq_len}, embed={embed}, heads={heads}, "
                        f"{'causal' if causal else 'not causal'}, dQ by {dq_mode}, seed {seed}",
                        "training steps", "causal" if causal else "not causal", f"dQ by {dq_mode}")
    ours, ref = _block_pair(kern, embed, heads, causal, seed)
    x, target = _data(batch, seq_len, embed, seed)
    stage(f"{steps} training steps on your kernels and on SDPA ({kern.context})")
    for step, loss, ref_loss, grads in train_side_by_side(ours, ref, x, target, steps):
        _judge(f"loss at step {step + 1}", loss, ref_loss, _loss_tolerance()[:2], kern.context,
               _cause("the losses part from SDPA's: at step 1 the forward, later the gradients of the steps before."))
        for pname, got, want in grads:
            _judge(f"gradient of {pname} at step {step + 1}", got, want,
                   gradient_tolerance(torch.float32, infer_device(), want)[:2], kern.context,
                   _cause("the block's backward through your kernels differs from SDPA's."))
    stage("done")


__all__ = ["FORWARD", "TILES", "Kernels", "AttentionFunction", "AttentionBlock", "attention_forward",
           "attention_backward", "attention_op", "guarded", "train_losses", "train_side_by_side", "check_attention_function",
           "check_compiled_attention", "check_training_step"]
