"""Phase 6's checks, as the notebook imports them: LayerNorm forward and backward (:mod:`.layer_norm`) and the
attention forward (:mod:`.attention`). See those modules for how each kernel is tested."""
from __future__ import annotations

from .attention import (ATTENTION, DTYPES, HALF, LAYOUT_WORDS, LAYOUTS, LSE_TOLERANCE, MIN_BLOCK, PRESETS, ROUNDOFF,
                        SIGNATURE, TF32_ROUNDOFF, Placed, _attention_diagnose, _lse_diagnose, _replays, _tiled,
                        attention_ref, attention_tolerance, attention_tolerances, check_attention, layouts_of,
                        make_qkv, place, place_fenced, place_inputs, place_output, run_attention)
from .layer_norm import (LAYER_NORM, LN_BACKWARD, LN_BACKWARD_TOLERANCES, LN_STATS_TOLERANCE, LN_TOLERANCES, UNWRITTEN,
                         _ln_candidates, _ln_diagnose, check_layer_norm, check_layer_norm_backward,
                         layer_norm_backward_ref, layer_norm_ref, layer_norm_tolerance, make_ln_backward_inputs,
                         make_ln_inputs)
from .layer_norm import SIGNATURES as _LN_SIGNATURES

SIGNATURES = {**_LN_SIGNATURES, ATTENTION: SIGNATURE}

__all__ = ["check_layer_norm", "check_layer_norm_backward", "check_attention", "attention_ref", "attention_tolerance",
           "attention_tolerances", "layer_norm_ref", "layer_norm_backward_ref", "layer_norm_tolerance", "make_qkv",
           "make_ln_inputs", "make_ln_backward_inputs", "SIGNATURES", "UNWRITTEN", "LAYOUTS", "PRESETS", "HALF",
           "DTYPES", "ROUNDOFF", "LN_TOLERANCES", "LN_BACKWARD_TOLERANCES", "LN_STATS_TOLERANCE", "LSE_TOLERANCE",
           "TF32_ROUNDOFF", "MIN_BLOCK", "LAYOUT_WORDS", "Placed", "place", "place_inputs", "place_output",
           "place_fenced", "layouts_of", "run_attention", "LAYER_NORM", "LN_BACKWARD", "ATTENTION", "SIGNATURE"]
