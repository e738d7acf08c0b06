"""Phase 7's whole-op checks (tritoncourse/checks/attention_backward/training.py): the notebook's kernels pass
through autograd, the compiled custom op and a few training steps; a kernel with one mistake fails each with the
gradient or the loss named; the training tolerance is far below what one wrong gradient does to the losses.

Launches on the interpreter, in-process (the grader's path, with the kernels in a sandboxed runner, is run by
`python -m tritoncourse check` on the source notebook and by the fixtures' tests).
"""
import pytest
import torch

from attention_backward_cases import kernels_module
from tritoncourse.checking import KernelCheckError
from tritoncourse.checks import attention_backward as ab
from tritoncourse.checks.attention_backward import training
from tritoncourse.tolerances import TRAINING_LOSS

NO_D = [("ds = p * (dp - delta[:, None])", "ds = p * dp"),
        ("ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * dp_t")]
DQ_UNSCALED = [("(dq * sm_scale)", "dq")]


def _kernels(module):
    return (module.triton_attention_kernel, module.triton_attention_bwd_preprocess_kernel,
            module.triton_attention_bwd_dkdv_kernel, module.triton_attention_bwd_dq_kernel)


@pytest.fixture(scope="module")
def right(tmp_path_factory):
    return _kernels(kernels_module(tmp_path_factory.mktemp("right")))


@pytest.mark.parametrize("dq_mode,dtype", [("kernel", torch.float32), ("atomic", torch.float16)])
def test_the_notebooks_kernels_pass_through_autograd(right, dq_mode, dtype):
    ab.check_attention_function(*right, batch=2, heads=2, seq_len=33, head_dim=16, causal=True, dtype=dtype,
                                dq_mode=dq_mode, seed=1)


def test_the_notebooks_kernels_train_as_sdpa_does_and_compile_with_no_graph_break(right):
    ab.check_training_step(*right, seq_len=21, causal=True, seed=2)
    ab.check_compiled_attention(*right, seq_len=19, dq_mode="atomic", seed=3)


@pytest.mark.parametrize("subs,mode,named", [(NO_D, "kernel", "dQ"), (DQ_UNSCALED, "kernel", "dQ"),
                                             (NO_D, "atomic", "dQ")], ids=["no-D", "dQ-unscaled", "no-D-atomic"])
def test_a_wrong_backward_fails_autograd_with_the_gradient_named(tmp_path, subs, mode, named):
    wrong = _kernels(kernels_module(tmp_path, subs))
    with pytest.raises(KernelCheckError) as err:
        ab.check_attention_function(*wrong, batch=1, heads=2, seq_len=40, head_dim=16, causal=True, dq_mode=mode,
                                    seed=4)
    text = str(err.value)
    assert f"Wrong {named} (AttentionFunction" in text and "The kernels' own tests above say which" in text, text


def test_a_wrong_backward_fails_the_training_steps_and_the_compiled_block(tmp_path):
    wrong = _kernels(kernels_module(tmp_path, DQ_UNSCALED))
    with pytest.raises(KernelCheckError, match="Wrong loss per step"):
        ab.check_training_step(*wrong, seq_len=24, causal=True, seed=5)
    with pytest.raises(KernelCheckError, match="Wrong the gradient of qkv.weight"):
        ab.check_compiled_attention(*wrong, seq_len=24, causal=True, seed=5)


@pytest.mark.parametrize("seed", [6, 7])
def test_one_wrong_gradient_moves_the_losses_far_past_the_tolerance(right, tmp_path, seed):
    """The losses of a backward without D part from SDPA's by ten times what TRAINING_LOSS allows or more (so the
    tolerance is not what lets a wrong kernel through), while the right kernels' stay within half of it."""
    def losses(kernels):
        ours, ref = training._block_pair(training.Kernels(*kernels), 32, 2, True, seed=seed)
        x, target = training._data(2, 24, 32, seed=seed)
        return training.train_losses(ours, x, target, 3), training.train_losses(ref, x, target, 3)

    ours, sdpa = losses(right)
    allowed = TRAINING_LOSS.atol + TRAINING_LOSS.rtol * sdpa.abs()
    assert bool(((ours - sdpa).abs() < allowed / 2).all()), (ours, sdpa)
    wrong, sdpa = losses(_kernels(kernels_module(tmp_path, NO_D)))
    assert float(((wrong - sdpa).abs() / allowed).max()) > 10, (wrong, sdpa)


def test_the_notebook_shows_the_same_autograd_op_and_block_the_checks_run():
    """The notebook's locked AttentionFunction, custom op and block are the checks' own code (the tests must judge
    what the learner reads): their bodies' key lines appear in both."""
    import inspect

    from attention_backward_cases import _cell

    shown = _cell("attention_function") + _cell("attention_custom_op")
    block = training.AttentionBlock.forward
    for fn in (training.AttentionFunction.forward, training.AttentionFunction.backward, block):
        for line in inspect.getsource(fn).splitlines()[1:]:
            line = line.strip()
            if line and not line.startswith(("\"\"\"", "def ", "@")) and "kern" not in line:
                assert line in shown, line
