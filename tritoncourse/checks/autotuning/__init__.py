"""Phase 5: checks for autotuned kernels: the config space, the key, the hardware limits, every config's
results, and the autotuner itself running on the CPU.

The three kernels of the phase, each stacked as ``@triton.autotune(configs=..., key=[...])`` over
``@triton.jit``::

    triton_autotuned_matmul_relu_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
        stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)   # 1-D grid, grouped order
    triton_autotuned_online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride,
        n_rows, n_cols, BLOCK_SIZE)                                         # one program per row
    triton_autotuned_vector_add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE)

The autotuner turns a config that fails into an infinite time and quietly picks another, so the checks
never judge a kernel through the autotuner alone: they read its ``.configs`` and ``.keys`` and launch its
``.fn`` once per config with ``**config.all_kwargs()`` (meta-parameters, num_warps, num_stages), on fresh
inputs inside guard buffers, with electric fences on the interpreter. Triton's default benchmarker needs
a GPU; :func:`tritoncourse.benchmarking.cpu_do_bench` is a wall-clock timer the checks (and the notebook, on
the CPU) give the autotuner instead.

The notebook and the grader import every check from here; each lives in the module of its concern:
:mod:`.configs` (names, the autotuner, config space, key, hardware limits), :mod:`.launch`
(running one config, the guarded matrix), :mod:`.matmul` (the matmul + ReLU, its order and its
autotuner), :mod:`.blocks` (every config of the softmax and the vector add) and :mod:`.programs_per_sm`
(section 9). The GPUs' numbers are :mod:`tritoncourse.gpus`'s, the timers :mod:`tritoncourse.benchmarking`'s.
"""
from __future__ import annotations

from .blocks import SOFTMAX_TOLERANCE, check_every_softmax_config, check_every_vector_add_config
from .configs import (DATACENTER_LIST, MATMUL, MAX_CONFIGS, META, MIN_CONFIGS, SHAPES, SIGNATURES, SOFTMAX,
                      VECTOR_ADD, autotuner_of, block_limit_problems, check_autotune_key,
                      check_block_configs_fit, check_config_space, check_matmul_configs_fit, is_autotuner,
                      jit_of, matmul_limit_problems)
from .launch import Strided
from .matmul import (MATMUL_TOLERANCE, ORDERS, UNWRITTEN, check_autotuned_matmul_relu,
                     check_every_matmul_config, check_matmul_autotuner, check_matmul_relu_grouped_order,
                     diagnose_matmul, grouped_tile, make_matmul_inputs, matmul_relu_ref)
from .programs_per_sm import KNOWN_KERNELS, PROGRAMS_PER_SM, check_programs_per_sm

__all__ = ["MATMUL", "SOFTMAX", "VECTOR_ADD", "SIGNATURES", "META", "SHAPES", "MIN_CONFIGS", "MAX_CONFIGS",
           "DATACENTER_LIST", "MATMUL_TOLERANCE", "SOFTMAX_TOLERANCE", "UNWRITTEN", "ORDERS", "KNOWN_KERNELS",
           "PROGRAMS_PER_SM", "Strided", "is_autotuner", "autotuner_of", "jit_of", "check_config_space",
           "check_autotune_key", "check_matmul_configs_fit", "matmul_limit_problems", "check_block_configs_fit",
           "block_limit_problems", "grouped_tile", "make_matmul_inputs", "matmul_relu_ref", "diagnose_matmul",
           "check_autotuned_matmul_relu", "check_matmul_relu_grouped_order", "check_every_matmul_config",
           "check_matmul_autotuner", "check_every_softmax_config", "check_every_vector_add_config",
           "check_programs_per_sm"]
