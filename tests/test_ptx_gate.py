"""tools/ptx_gate.py: the no-GPU compile gate of the cuda kernels (CI runs the tool itself).

Here: its report parsing, and -- where the CUDA compiler packages are installed
(``pip install "numba-cuda[cu12]"``) -- that it really flags what it promises to flag:
a float32 kernel with a float64 literal (numba's silent promotion) and a kernel that needs
local memory.  The compile runs in a subprocess with the simulator off (conftest turns it
on for this process).
"""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOL = os.path.join(ROOT, "tools", "ptx_gate.py")
if not os.path.exists(_TOOL):
    pytest.skip("tools/ptx_gate.py is not beside these tests (an installed copy)",
                allow_module_level=True)
_spec = importlib.util.spec_from_file_location("ptx_gate", _TOOL)
gate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gate)


def test_f64_instructions_are_recognised_and_declarations_are_not():
    ptx = textwrap.dedent("""\
        .reg .f64 	%fd<3>;
        	cvt.f64.f32 	%fd1, %f1;
        	mul.f64 	%fd2, %fd1, 0d3FB999999999999A;
        @%p1 	add.rn.f64 	%fd2, %fd2, %fd1;
        	add.f32 	%f2, %f1, %f1;
        	ld.global.f32 	%f1, [%rd4];
        """)
    assert len(gate._F64.findall(ptx)) == 3


def test_ptxas_report_is_parsed():
    report = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
              "ptxas info    : Function properties for k\n"
              "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
              "ptxas info    : Used 40 registers, 380 bytes cmem[0]\n")
    assert gate._PTXAS_STACK.findall(report) == [("16", "8", "8")]
    assert gate._PTXAS_REGS.findall(report) == ["40"]


_BAD = textwrap.dedent('''
    import json, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    import ptx_gate
    from numba import cuda, types
    def promoted(a):                 # 0.1 is a float64 literal: f32 -> f64 -> f32
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * 0.1
    def local_array(a):              # a per-thread array indexed at run time: local memory
        buf = cuda.local.array(64, types.float32)
        i = cuda.grid(1)
        for j in range(64):
            buf[j] = a[(i + j) % a.size]
        if i < a.size:
            a[i] = buf[int(a[i]) % 64]
    out = {}
    ptxas = ptx_gate.find_ptxas()
    d = tempfile.mkdtemp()
    for fn in (promoted, local_array):
        ptx, _ = cuda.compile_ptx(fn, (types.float32[::1],), cc=(9, 0))
        row, problems = ptx_gate.check_ptx(fn.__name__, ptx, ptxas, 90, d, float32=True)
        out[fn.__name__] = problems
    print(json.dumps(out))
''')


def test_gate_flags_promotion_and_local_memory():
    if gate.find_ptxas() is None:
        pytest.skip("needs the CUDA compiler packages (pip install 'numba-cuda[cu12]')")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", _BAD, os.path.join(ROOT, "tools")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert any("float64 instructions" in p for p in out["promoted"]), out
    assert any("local memory" in p for p in out["local_array"]), out


def test_div64_instructions_are_recognised():
    ptx = textwrap.dedent("""\
        	div.s64 	%rd5, %rd3, %rd4;
        @%p2 	rem.u64 	%rd7, %rd3, %rd4;
        	div.u32 	%r5, %r3, %r4;
        	// div.s64 in a comment
        """)
    assert len(gate._DIV64.findall(ptx)) == 2


_INDEX32 = textwrap.dedent('''
    import json, re, sys, types as pytypes
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    import numpy as np
    import ptx_gate
    from numba import cuda, types
    import numba.cuda.dispatcher as nd
    nd.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=(9, 0))
    from fastnn.cuda import _kit
    from fastnn.cuda.ops import attention, conv
    f32, i32 = types.float32, types.int32
    A = lambda nd_, layout="C": types.Array(f32, nd_, layout)
    kernels = {
        "_kit._copy4": (_kit._copy4, (A(4, "A"), A(1), i32)),
        "attention.split_heads": (attention._kernels(np.float32).split_heads,
                                  (A(3), A(3), i32, i32, i32, i32, i32, types.boolean)),
        "conv.col2im": (conv._kernels(np.float32).col2im, (A(3), A(4)) + (i32,) * 16),
    }
    out = {}
    for name, (k, sig) in kernels.items():
        ptx, _ = cuda.compile_ptx(k.jitted.py_func, sig, cc=(9, 0))
        out[name] = len(ptx_gate._DIV64.findall(ptx))
    print(json.dumps(out))
''')


def test_kernels_index_in_32_bits():
    """The index splits of the kernels (fastnn/cuda/_kit.py dm, gid/gsz loops) compile to
    32-bit divides: no div/rem .s64/.u64 left in kernels that had up to 16 (issue 17)."""
    if gate.find_ptxas() is None:
        pytest.skip("needs the CUDA compiler packages (pip install 'numba-cuda[cu12]')")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", _INDEX32, os.path.join(ROOT, "tools"), ROOT],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {k: 0 for k in out}, out
