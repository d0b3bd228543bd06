"""Launch every kernel of the cuda backend at least once, for float32 and float64.

Used by tests/test_cuda_launches.py (every kernel compiles and runs under the simulator)
and by tools/ptx_gate.py (which records the argument types of each launch so that every
kernel can be compiled to PTX for real GPUs without one).  Every ops module is imported
first, so the set of kernels to launch never depends on which tests ran before.
"""
import importlib
import os
import pkgutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def import_every_family():
    """Import fastnn.cuda._gemm and every fastnn.cuda.ops module (their kernel factories
    register themselves in _kit.FACTORIES on import)."""
    import fastnn.cuda.ops as pkg
    from fastnn.cuda import _gemm  # noqa: F401
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"fastnn.cuda.ops.{info.name}")


def launch_every_kernel():
    """Build every kernel for both dtypes and run op cases on the cuda backend until each
    has been launched (kernels launched earlier in the process count too).  Returns the
    names never launched (empty when all is well)."""
    import test_backends as tb
    import test_cuda as tc
    from cases import all_cases, all_module_cases
    from harness import random_like, run_case
    from test_ops import _run_module
    from fastnn.cuda import _gemm, _kit

    DT = tc.DT
    import_every_family()
    for f in list(_kit.FACTORIES):
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
        for name in ("NAdam", "RAdam", "Adamax"):
            tc.test_sequential_training_steps_on_device_match_reference(dt, name)
        tc.test_accumulate_on_device(dt)
    for nd in (1, 2, 3, 4):
        tc.test_noncontiguous_device_inputs_are_copied(nd)
    for dt in DT:
        tc.test_gemm_matches_numpy(((5, 7), (7, 3)), False, False, dt)
        _gemm.SIM_TILED[0] = True   # the tiled kernel (real GPUs) is launched here
        try:
            tc.test_gemm_matches_numpy(((9, 13), (13, 7)), False, False, dt)
        finally:
            _gemm.SIM_TILED[0] = False
        _kit.rowsum(_kit.dev(np.ones((2, 3), dt)))
    tc.test_philox_known_answer_on_device()
    for dt in DT:   # the inference-only ops (no F pair, so no harness case)
        tb.test_cuda_add_layer_norm_infer(dt)
        tb.test_cuda_linear_act_infer("gelu", dt)
        tb.test_cuda_skinny_linear(dt)
        tb.test_cuda_packed_linear_infer(dt)
        tb.test_cuda_varlen_attention(dt, False)
        tb.test_layout_ops("cuda", dt)
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
    return missing()
