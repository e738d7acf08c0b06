# Empty backward kernels, and beside the dK/dV kernel (in its solution cell) an autograd.Function whose backward
# forges: it returns torch's own gradients of naive attention. A later cell puts it in place of the course's
# AttentionFunction and the backward launcher (p7's checks.attention_backward.training, where it exists) and makes
# every check_attention* a no-op, in the notebook's kernel. The judge never imports, calls or unpickles a learner's
# class (a class is not even taken from a solution cell: only kernels and lint-clean plain functions), and each test
# runs its checks in the sandboxed runner with the learner's (empty) kernels: every phase 7 test scores 0.
# expect-fail: test_attention_bwd_preprocess test_attention_bwd_dkdv_full_tiles test_attention_bwd_dkdv_ragged test_attention_bwd_dkdv_causal test_attention_bwd_dq test_attention_bwd_dq_causal test_attention_bwd_atomic_dq test_attention_bwd_fp16 test_attention_bwd_strides test_attention_bwd_scores_and_scale test_attention_function_gradients test_attention_compiled_block test_attention_training_step
# expect-message: NotImplementedError
# replaces: attention_bwd_dkdv_kernel
@triton.jit
def triton_attention_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr,  # pointers to Q, K, V: (batch, heads, seq_len, HEAD_DIM)
    do_ptr,  # pointer to dO, like Q
    lse_ptr,  # pointer to the forward's log-sum-exp, (batch * heads, seq_len) fp32, contiguous
    delta_ptr,  # pointer to D = rowsum(dO * O), (batch * heads, seq_len) fp32, contiguous
    dk_ptr, dv_ptr,  # pointers to dK, dV, like K and V (K's dtype)
    dq_ptr,  # pointer to dQ in fp32, like Q, zeroed by the caller: used only with ATOMIC_DQ
    stride_qb, stride_qh, stride_qm, stride_qd,  # Q's strides, in elements
    stride_kb, stride_kh, stride_kn, stride_kd,  # K's strides
    stride_vb, stride_vh, stride_vn, stride_vd,  # V's strides
    stride_dob, stride_doh, stride_dom, stride_dod,  # dO's strides
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,  # dK's strides
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,  # dV's strides
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,  # dQ's strides
    n_heads,  # heads per batch: program_id(1) = batch * n_heads + head
    seq_len,  # queries and keys per (batch, head)
    sm_scale,  # the forward's scale of the scores
    HEAD_DIM: tl.constexpr,  # head_dim, a power of two >= 16
    BLOCK_M: tl.constexpr,  # query rows per loop step
    BLOCK_N: tl.constexpr,  # key rows per program
    CAUSAL: tl.constexpr,  # query i sees only keys j <= i
    ATOMIC_DQ: tl.constexpr,  # also add this key tile's part of dQ into dq_ptr with tl.atomic_add
):
    raise NotImplementedError()

class AttentionFunction(torch.autograd.Function):
    """The forger: the forward and backward of naive attention by torch autograd, no kernel at all."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, sm_scale=None, *rest):
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return AttentionFunction.naive(q, k, v, causal, sm_scale)

    @staticmethod
    def naive(q, k, v, causal, sm_scale):
        s = (q.double() @ k.double().transpose(-2, -1)) * (q.shape[-1] ** -0.5 if sm_scale is None else sm_scale)
        if causal:
            n = q.shape[-2]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return (torch.softmax(s, -1) @ v.double()).to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
        with torch.enable_grad():
            o = AttentionFunction.naive(q, k, v, ctx.causal, ctx.sm_scale)
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        return (dq, dk, dv) + (None,) * 3
# %% after-kernel
import importlib
patched = []
for module in ("tritoncourse.checks.attention_backward", "tritoncourse.checks.attention_backward.training",
               "tritoncourse.checks.attention_backward.kernels"):
    try:
        m = importlib.import_module(module)
    except ImportError:
        continue
    if hasattr(m, "AttentionFunction"):
        m.AttentionFunction = AttentionFunction
        patched.append(f"{module}.AttentionFunction")
    if hasattr(m, "attention_backward"):  # the backward launcher: torch's gradients instead of the kernels
        m.attention_backward = lambda kern, q, k, v, o, lse, do, causal, sm_scale: torch.autograd.grad(
            AttentionFunction.naive(*(t.detach().requires_grad_() for t in (q, k, v)), causal, sm_scale),
            (q, k, v), do)
        patched.append(f"{module}.attention_backward")
    for name in dir(m):
        if name.startswith("check_attention"):
            setattr(m, name, lambda *args, **kwargs: None)
            patched.append(f"{module}.{name}")
print(f"HOSTILE-RAN autograd_forged_backward: {len(patched)} names patched in the notebook's kernel")
