"""Every tolerance the course's checks compare with: one table, each entry with its reason.

An entry is a :class:`Tolerance` ``(atol, rtol, why)``: a result ``a`` passes against the reference ``e`` where
``|a - e| <= atol + rtol * |e|`` (torch.allclose's rule). A reason says where the numbers come from: the rounding
a correct kernel may do (the dtype's unit roundoff, sums in another order, tf32 on a GPU), what the reference is,
and, where the margin was set by hand rather than derived, that too. A verdict's tolerance must pass every correct
kernel and fail every realistic mistake; a diagnosis's (``DIAGNOSIS``...) only says which mistake an output that
already failed looks like.

The checks modules import their entries from here under their old names (``checks.softmax.TOLERANCES`` is
:data:`SOFTMAX`), and tests/units/test_tolerances.py checks that no tolerance is defined anywhere else.
"""
from __future__ import annotations

from typing import NamedTuple

import torch


class Tolerance(NamedTuple):
    atol: float
    rtol: float
    why: str


# ---- any kernel: tritoncourse.checking.compare's defaults, by the output's dtype
DEFAULT = {
    torch.float32: Tolerance(1e-6, 1e-5, "fp32 results may differ from torch's by rounding order only"),
    torch.float16: Tolerance(1e-3, 1e-2, "fp16 keeps about 3 decimal digits; arithmetic is done in fp32 and rounded "
                                         "once"),
}

# ---- phase 2: softmax rows (outputs in [0, 1]) against an fp64 reference, by output dtype
SOFTMAX = {
    torch.float32: Tolerance(1e-6, 1e-5, "fp32 results differ from an fp64 reference by rounding only "
                                         "(exp, one sum over at most a few thousand terms)"),
    torch.float16: Tolerance(2e-5, 2e-3, "computed in fp32 and rounded once to fp16 (half an ulp is 4.9e-4 "
                                         "relative); values below 6e-5 are fp16 subnormals"),
}

# ---- phases 3 and 5: C = relu(A @ B), fp16 out, against an fp32 reference (relu of the fp32 product of the fp16
# inputs). Phase 5's autotuned kernel computes the same C, so it is judged by the same entry.
MATMUL_RELU = Tolerance(
    1e-3,
    1e-3,
    "C is fp16: rounding the fp32 accumulator once, at the store, costs at most half an fp16 ulp, "
    "2**-11 = 4.9e-4 of |c| (rtol 1e-3 leaves twice that); summing in fp32 in another order than the "
    "reference differs by about 1e-6 * |c| for these K (atol 1e-3 covers results near 0 after "
    "cancellation, and GPU tensor-core rounding). With N(0, 1) inputs one dropped product a[m,k] * b[k,n] "
    "is typically 0.1 to 1, hundreds of times the tolerance, and an fp16 accumulator is off by "
    "several 1e-3 * |c|: both fail (tests/units/test_checks_matmul.py shows it).",
)

# ---- phase 6: fused LayerNorm, against an fp64 reference, by dtype (the check adds what an fp32 mean of a row far
# from 0 costs: checks.fused_attention.layer_norm.layer_norm_tolerance)
LAYER_NORM = {
    torch.float32: Tolerance(2e-5, 2e-5, "fp32 results differ from an fp64 reference by rounding only: the mean and "
                                         "the variance of up to a few thousand values, and one multiply-add"),
    torch.float16: Tolerance(2e-3, 2e-3, "computed in fp32 and rounded once to fp16 (half an ulp is 4.9e-4 "
                                         "relative; the outputs reach |y| ~ 4, where an ulp is 2e-3)"),
    torch.bfloat16: Tolerance(4e-3, 8e-3, "computed in fp32 and rounded once to bf16: half an ulp is 3.9e-3 relative "
                                          "(8 times fp16's), and nearly 0 for y near 0"),
}
LAYER_NORM_STATS = Tolerance(1e-5, 1e-5, "the mean and 1/std are fp32 in every dtype")
LAYER_NORM_BACKWARD = {
    torch.float32: Tolerance(1e-4, 1e-4, "dx sums n_cols products twice (c1, c2) in fp32; dw and db add up to a few "
                                         "hundred rows' terms in another order than the fp64 reference"),
    torch.float16: Tolerance(4e-3, 4e-3, "dx is rounded once to fp16 (4.9e-4 relative) after an fp32 computation; dw "
                                         "and db stay fp32"),
    torch.bfloat16: Tolerance(4e-3, 8e-3, "dx is rounded once to bf16 (3.9e-3 relative) after an fp32 computation; "
                                          "dw and db stay fp32"),
}

# ---- phase 6: attention. O's tolerance is derived per test from these unit roundoffs (half an ulp, relative) and
# the test's largest score and |V| (checks.fused_attention.attention.attention_tolerance); LSE's from ATTENTION_LSE
# plus the scores' rounding (8 unit roundoffs of the largest score).
ROUNDOFF = {
    torch.float32: (2.0**-24, "fp32 keeps 24 significant bits"),
    torch.float16: (2.0**-11, "fp16 keeps 11 significant bits: the output is rounded once to fp16, and so are the "
                              "probabilities P before the P @ V tl.dot (tensor cores multiply fp16)"),
    torch.bfloat16: (2.0**-8, "bf16 keeps 8 significant bits: the output is rounded once to bf16, and so are the "
                              "probabilities P before the P @ V tl.dot (tensor cores multiply bf16)"),
}
TF32_ROUNDOFF = 2.0**-11  # a GPU's tl.dot rounds fp32 inputs to tf32 (10 stored mantissa bits) by default
ATTENTION_LSE = {
    "cpu": Tolerance(2e-5, 1e-5, "LSE = m + log(l) is fp32 in every dtype; the interpreter's exp and log are "
                                 "numpy's fp32 ones, and l, a sum of a few hundred terms in another order than the "
                                 "fp64 reference, moves log(l) by about 1e-5 at most"),
    "cuda": Tolerance(2e-3, 1e-3, "as on the CPU, but a GPU's exp, exp2 and log are fast approximate instructions "
                                  "and a kernel may fold log2(e) into the scale for exp2: a margin set by hand, 100 "
                                  "times the CPU's, not derived from a measurement"),
}

# ---- diagnoses: which known mistake does an output that already failed look like? Not verdicts.
DIAGNOSIS = Tolerance(1e-3, 1e-3, "the mistakes replayed (x + x, a missing bias, a ReLU in the wrong place...) "
                                  "differ from the right result by about the inputs' size; 1e-3 absorbs an "
                                  "fp16 output's rounding (4.9e-4 relative) so that fp16 runs are named too")
MEAN_DIAGNOSIS = Tolerance(1e-3, 1e-5, "is a LayerNorm kernel's stored mean right? atol in units of the row's "
                                       "smallest std (the check multiplies). Set by hand: the mistakes told apart "
                                       "(masked lanes counted) are off by a few percent or more (make_ln_inputs)")
RSTD_DIAGNOSIS = Tolerance(0.0, 1e-3, "is the stored rstd right? relative only (rstd > 0). Set by hand: a variance "
                                      "counting masked lanes, or one lost to cancellation (E[x**2] - E[x]**2 on rows "
                                      "around 1000), is off by a few percent or more")
SOFTMAX_DIAGNOSIS = Tolerance(2e-5, 2e-3, "softmax's loosest verdict tolerance (fp16's), so that a replayed mistake "
                                          "is recognised in either dtype")

# ---- phase 7: the attention backward. dQ, dK and dV against an fp64 autograd reference: atol is in units of the
# gradient's own largest |value| (checks.attention_backward.inputs.gradient_tolerance multiplies), so that one entry
# serves every size of scores and dO; rtol covers the gradient's rounding at the store.
ATTENTION_BACKWARD = {
    torch.float32: Tolerance(64 * 2.0**-24, 8 * 2.0**-24,
                             "fp32 tl.dot is exact fp32 on the interpreter: P = exp(S - LSE), dS = P (dP - D) and the "
                             "sums over a few hundred queries or keys differ from fp64 by a few unit roundoffs of the "
                             "largest gradient (measured: 7 of 64); a missing D term, a wrong scale or a lost query "
                             "tile is off by percents or more"),
    torch.float16: Tolerance(8 * 2.0**-11, 4 * 2.0**-11,
                             "P and dS are rounded to fp16 for the tensor-core tl.dot (4.9e-4 relative each) and the "
                             "gradient once at the store: measured on the interpreter at 1 of the 8 unit roundoffs "
                             "of the largest gradient allowed"),
    torch.bfloat16: Tolerance(8 * 2.0**-8, 4 * 2.0**-8,
                              "as fp16 with bf16's 8 significant bits (3.9e-3 relative per rounding of P, dS and "
                              "the stored gradient); graded on a GPU only (the interpreter has no bf16)"),
}
ATTENTION_BACKWARD_TF32 = Tolerance(8 * 2.0**-11, 4 * 2.0**-11,
                                    "fp32 inputs on a GPU: tl.dot rounds them to tf32 (10 stored mantissa bits, as "
                                    "fp16's), in all five products of the backward, so fp32 is judged as fp16 is")
# the autograd, compile and training checks compare a whole step (forward and backward through the kernels) with torch
TRAINING_LOSS = Tolerance(2e-6, 1e-6, "fp32 losses (about 1) of a tiny attention block without residual: the kernels' "
                                      "forward and backward differ from torch's SDPA by fp32 rounding only on the "
                                      "interpreter, and three SGD steps kept the losses within one fp32 ulp (1.2e-7); "
                                      "a backward without D moved them by 6e-5 or more (tests/"
                                      "test_checks_attention_backward_training.py)")
TRAINING_LOSS_TF32 = Tolerance(1e-4, 1e-4, "as TRAINING_LOSS on a GPU, where fp32 tl.dot rounds to tf32 in the forward "
                                           "and the backward: the notebook's kernels' losses came within 3.0e-5 "
                                           "relative of SDPA's (H200, 2026-11-28, 16 cases of three steps), so a wrong "
                                           "gradient is told by the gradients the check compares at each step")
# torch.autograd.gradcheck of the whole op on the interpreter (checks.attention_backward.gradcheck): fast mode compares
# v·J·u of the backward with central differences of the forward along fixed random u, v (uniform, normalised); its
# atol is per Jacobian entry (gradcheck scales it by sum(u)·sum(v)).
GRADCHECK_EPS = 1e-2  # the finite-difference step: fp32 rounding of O costs ~1/eps, truncation ~eps**2
GRADCHECK = Tolerance(1e-7, 0.0, "fp32 inputs, step 1e-2, on the interpreter: the notebook's kernels needed at most "
                                 "1.7e-8 (24 cases: seeds, causal or not, dQ both ways; 2.6e-7 at a step of 1e-3); a "
                                 "backward without D needed 6.2e-6 or more (through dK), dQ without sm_scale 1.1e-4 "
                                 "(2026-11-29)")
