"""Phase 7's checks, as the notebook imports them: the three kernels of the FlashAttention-2 backward
(:mod:`.kernels`: D = rowsum(dO ∘ O), dK and dV over query tiles with dQ added atomically or not, dQ over key tiles),
their inputs and fp64 reference (:mod:`.inputs`), the replayed mistakes that name a failure's cause
(:mod:`.diagnosis`), and a whole step through the kernels: autograd, a custom op under torch.compile, a few steps of
training (:mod:`.training`), and gradcheck of the backward against the forward's own finite differences
(:mod:`.gradcheck`)."""
from __future__ import annotations

from .diagnosis import GRADS, diagnose, one_key_tile, replay, scale_cause
from .inputs import (DATA, NAMES, PRESETS, backward_ref, gradient_tolerance, layouts_of, make_inputs)
from .kernels import (DKDV, DQ, PREPROCESS, SIGNATURES, check_attention_bwd_dkdv, check_attention_bwd_dq,
                      check_attention_bwd_preprocess)
from .gradcheck import check_attention_gradcheck
from .training import (FORWARD, AttentionFunction, check_attention_function,
                       check_compiled_attention, check_training_step)

__all__ = ["check_attention_bwd_preprocess", "check_attention_bwd_dkdv", "check_attention_bwd_dq",
           "check_attention_function", "check_attention_gradcheck", "check_compiled_attention", "check_training_step",
           "AttentionFunction", "FORWARD", "backward_ref",
           "gradient_tolerance", "make_inputs", "layouts_of", "replay", "one_key_tile", "diagnose", "scale_cause", "GRADS", "DATA",
           "NAMES", "PRESETS", "PREPROCESS", "DKDV", "DQ", "SIGNATURES"]
