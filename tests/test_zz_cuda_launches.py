"""Every kernel of the cuda backend is compiled and launched, for float32 and float64.

The file is named to sort after tests/test_ops.py: in a full run the shared harness has
already launched nearly every kernel on the cuda backend, and this test only runs what is
left (the cases of families whose kernels were not reached yet).  Run alone, it drives
those cases itself.
"""
import os
import sys

import numpy as np
import pytest

import fastnn

if "cuda" not in fastnn.available_backends():  # pragma: no cover - numba-cuda not installed
    pytest.skip("the cuda backend (numba-cuda or its simulator) is not available here",
                allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cuda as tc  # noqa: E402
from fastnn.cuda import _kit  # noqa: E402

DT = tc.DT


def test_every_kernel_is_compiled_and_launched():
    """Build every kernel for float32 and float64 and run op cases on the cuda backend
    until each has been launched (kernels launched by earlier tests count too)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cases import all_cases, all_module_cases
    from harness import random_like, run_case
    from test_ops import _run_module
    for f in _kit.FACTORIES:
        for dt in DT:
            f(dt)
    # pieces that only specific inputs reach
    for dt in DT:
        tc.test_gemm_bias_epilogue_kernel(dt)
        tc.test_colsum_over_many_chunks(dt)
        tc.test_optimizer_kernels_match_reference("sgd_step", dt)
        tc.test_optimizer_kernels_match_reference("adam_step", dt)
        tc.test_sequential_training_steps_on_device_match_reference(dt, "RMSprop")
        tc.test_sequential_training_steps_on_device_match_reference(dt, "Adagrad")
        tc.test_accumulate_on_device(dt)
    for nd in (1, 2, 3, 4):
        tc.test_noncontiguous_device_inputs_are_copied(nd)
    for dt in DT:
        tc.test_gemm_matches_numpy(((5, 7), (7, 3)), False, False, dt)
        from fastnn.cuda import _gemm
        _gemm.SIM_TILED[0] = True   # the tiled kernel (real GPUs) is launched here
        try:
            tc.test_gemm_matches_numpy(((9, 13), (13, 7)), False, False, dt)
        finally:
            _gemm.SIM_TILED[0] = False
        _kit.rowsum(_kit.dev(np.ones((2, 3), dt)))
    tc.test_philox_known_answer_on_device()
    for dt in DT:
        tc.test_transpose2d_and_conv1d_on_device(dt)
        tc.test_cross_entropy_nd_logits_on_device(dt)

    def missing():
        return sorted(_kit.KERNELS - _kit.LAUNCHED)

    def run(fn):
        try:
            fn()
        except BaseException as e:   # cases of ops without a kernel skip; the rest must pass
            if type(e).__name__ != "Skipped":
                raise

    kernel_family = {"stdnorm": "norm", "dense": "_gemm"}

    def family(case):
        f = getattr(case.fwd, "__module__", "").rsplit(".", 1)[-1]
        return kernel_family.get(f, f)

    for case in all_cases():
        if not missing():
            break
        fam = family(case)
        if "cuda" not in case.backends or not any(n.startswith(fam + ".") for n in missing()):
            continue   # nothing of this family left to launch
        for dt in DT:
            def one(case=case, dt=dt):
                args, kwargs = case.make(np.random.default_rng(0), dt)
                out, _ = run_case(case, "cuda", list(args), dict(kwargs), None)
                d = random_like(np.random.default_rng(1), out) if case.bwd is not None else None
                run_case(case, "cuda", list(args), dict(kwargs), d)
            run(one)
    for case in all_module_cases():
        if not missing():
            break
        if "cuda" not in case.backends:
            continue
        for dt in DT:
            def one(case=case, dt=dt):
                inputs = list(case.make(np.random.default_rng(0), dt))
                out, _, _ = _run_module(case, "cuda", dt, inputs, None)
                d = case.d_out(np.random.default_rng(9), out) if case.d_out else \
                    random_like(np.random.default_rng(9), out)
                _run_module(case, "cuda", dt, inputs, d)
            run(one)
    assert not missing(), f"kernels never launched: {missing()}"
