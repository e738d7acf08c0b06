"""Phase 6, LayerNorm: the kernels' names and signatures, fresh inputs, the fp64 references and y's tolerance."""
from __future__ import annotations

import math

import torch

from ....checking import generator
from ....tolerances import LAYER_NORM as LN_TOLERANCES

UNWRITTEN = -54272.0  # what every output element holds before the kernel runs: exact in fp32, fp16 and bf16
LAYER_NORM = "triton_layer_norm_kernel"
LN_BACKWARD = "triton_layer_norm_backward_kernel"
SIGNATURES = {
    LAYER_NORM: "triton_layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride_x_row, "
                "stride_y_row, n_cols, eps, BLOCK_SIZE: tl.constexpr)",
    LN_BACKWARD: "triton_layer_norm_backward_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, "
                 "dw_partial_ptr, db_partial_ptr, stride_row, n_rows, n_cols, ROWS_PER_PROGRAM: tl.constexpr, "
                 "BLOCK_SIZE: tl.constexpr)",
}



def make_ln_inputs(n_rows: int, n_cols: int, dtype: torch.dtype, data: str, seed: int):
    """Fresh (x, w, b). "randn": even rows of std 2 whose means lie between 2 and 3 in size (either sign), so that
    a variance that counts the masked-off lanes (each adds mean²) is off by at least a few percent; odd rows around
    0 with a std of 1e-3 to 1e-2, a variance of the order of eps, so that eps's place in rstd = 1/sqrt(var + eps)
    matters. "offset": rows around +1000, where mean(x²) - mean(x)² cancels in fp32."""
    g = generator(seed)
    x = torch.randn(n_rows, n_cols, generator=g) * 2
    if data == "offset":
        x = x + 1000.0
    elif data == "randn":
        sign = torch.where(torch.rand(n_rows, 1, generator=g) < 0.5, -1.0, 1.0)
        x = x + sign * (2 + torch.rand(n_rows, 1, generator=g))
        small = 10 ** (-3 + torch.rand(n_rows, 1, generator=g))  # std 1e-3 .. 1e-2
        odd = (torch.arange(n_rows) % 2 == 1)[:, None]
        x = torch.where(odd, torch.randn(n_rows, n_cols, generator=g) * small, x)
    else:
        raise ValueError(f"data must be randn or offset, got {data!r}")
    w = (torch.rand(n_cols, generator=g) + 0.5).to(dtype)
    b = torch.randn(n_cols, generator=g).to(dtype)
    return x.to(dtype), w, b


def layer_norm_tolerance(dtype, mean_ref, rstd_ref, w) -> tuple[float, float, float]:
    """(atol, rtol, the error of an fp32 mean) for y: :data:`LN_TOLERANCES` plus what an fp32 mean costs. The
    fp32 mean of n values around |mean| is off by up to about 2·log2(n) fp32 roundoffs of |mean| (a tree sum), and
    y inherits that error times the row's rstd·|w|: it matters only for rows far from 0 ("offset")."""
    atol, rtol, _ = LN_TOLERANCES[dtype]
    per_row = 2 * math.log2(max(w.numel(), 2)) * 2.0**-24 * mean_ref.abs()
    mean_err = float(per_row.max())
    return atol + float((per_row * rstd_ref).max()) * float(w.abs().max()), rtol, mean_err


def layer_norm_ref(x, w, b, eps):
    """(y, mean, rstd) in fp64 on the CPU: y = (x - mean) / sqrt(var + eps) * w + b, var the biased variance."""
    x64 = x.double().cpu()
    mean = x64.mean(-1)
    var = x64.var(-1, unbiased=False)
    rstd = 1.0 / torch.sqrt(var + eps)
    y = (x64 - mean[:, None]) * rstd[:, None] * w.double().cpu() + b.double().cpu()
    return y, mean, rstd


def layer_norm_backward_ref(x, w, b, dy, eps):
    """(dx, dw, db) in fp64 by torch.autograd through the fp64 reference."""
    x64 = x.double().cpu().requires_grad_()
    w64 = w.double().cpu().requires_grad_()
    b64 = b.double().cpu().requires_grad_()
    y = torch.nn.functional.layer_norm(x64, (x.shape[1],), w64, b64, eps)
    y.backward(dy.double().cpu())
    return x64.grad, w64.grad, b64.grad


def make_ln_backward_inputs(n_rows: int, n_cols: int, dtype: torch.dtype, seed: int):
    """(x, w, b, dy): rows of x with means from -3 to 3 and stds from 0.5 to 4, so that every row has a mean and
    an rstd of its own (a kernel reading row 0's statistics for every row is off)."""
    g = generator(seed)
    scale = 0.5 + 3.5 * torch.rand(n_rows, 1, generator=g)
    shift = 6 * torch.rand(n_rows, 1, generator=g) - 3
    x = (torch.randn(n_rows, n_cols, generator=g) * scale + shift).to(dtype)
    w = (torch.rand(n_cols, generator=g) + 0.5).to(dtype)
    b = torch.randn(n_cols, generator=g).to(dtype)
    dy = torch.randn(n_rows, n_cols, generator=g).to(dtype)
    return x, w, b, dy
