"""Compile every cuda kernel to PTX for real GPUs, without a GPU, and check ptxas's report.

    pip install "numba-cuda[cu12]"          # NVVM and ptxas from the PyPI CUDA packages
    python tools/ptx_gate.py                 # sm_80 and sm_90; exit 1 on any problem
    python tools/ptx_gate.py --cc 90 --keep ptx/   # one target, keep the .ptx files

Two steps, each in its own process:

1. record: under numba's CUDA simulator, every kernel is built for float32 and float64
   and launched (tests/cuda_launch_all.py, the driver of tests/test_cuda_launches.py);
   the numba type of every argument of every launch is recorded.  These are exactly the
   argument-type combinations the backend launches.
2. compile (one process per compute capability, simulator off): every recorded
   (kernel, signature) is compiled with numba-cuda's real compiler (``cuda.compile_ptx``
   with an explicit ``cc``) and assembled by ``ptxas -v -arch=sm_XX``.  The gate fails on
   a compile error, a spill (spill stores/loads), local memory (a stack frame), or a
   float64 instruction in a float32 kernel (numba's silent promotion of a float literal).
   It also counts the 64-bit integer divisions (``div``/``rem`` ``.s64``/``.u64``) in the
   PTX: the kernels index in 32 bits (fastnn/cuda/_kit.py), so the count should stay
   near zero; the summary reports it per target.

Compiling a kernel that calls a ``cuda.jit(device=True)`` function needs a target compute
capability: ``compile_ptx`` takes ``cc`` for the kernel, but numba-cuda (0.2x-0.3x)
compiles the device functions it calls through ``DeviceDispatcher.compile_device``, which
asks the current device for its compute capability -- and there is no device.  Neither
``NUMBA_FORCE_CUDA_CC`` nor ``NUMBA_CUDA_DEFAULT_PTX_CC`` reaches that call.  So, in the
compile process only, the name ``get_current_device`` in numba's dispatcher module is
bound to a stand-in whose ``compute_capability`` is the target's: one documented name,
no change to numba's code.  The device functions' IR is linked into the kernel and
lowered to PTX for the kernel's ``cc``.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ step 1: record
def _type_spec(a):
    """A JSON spec of the numba type a real GPU launch gives argument ``a``."""
    import numba
    import numpy as np
    if hasattr(a, "copy_to_host") or hasattr(a, "__cuda_array_interface__"):
        host = getattr(a, "_ary", None)          # the simulator's device array
        if host is None:
            host = np.empty(tuple(a.shape), a.dtype)
        flags = host.flags
        layout = "C" if flags.c_contiguous else ("F" if flags.f_contiguous else "A")
        return ["array", np.dtype(a.dtype).name, int(host.ndim), layout]
    if isinstance(a, np.ndarray):
        raise TypeError("a host array passed to a kernel launch")
    return ["scalar", str(numba.typeof(a))]


def record(out_path):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import conftest  # noqa: F401  (the tests' settings: simulator, hypothesis profile)
    from fastnn.cuda import _kit
    seen = {}
    getitem = _kit._Kernel.__getitem__

    def recording_getitem(self, config):
        launch = getitem(self, config)

        if not self.jitted.py_func.__module__.startswith("fastnn."):
            return launch       # kernels the tests define for themselves
        name = self.name

        def rec(*args):
            # the types the launch passes on: integers become int32 (_kit._index_args)
            key = json.dumps([_type_spec(a) for a in _kit._index_args(name, args)])
            seen.setdefault(name, set()).add(key)
            return launch(*args)
        return rec

    _kit._Kernel.__getitem__ = recording_getitem
    from cuda_launch_all import launch_every_kernel
    missing = launch_every_kernel()
    if missing:
        raise SystemExit(f"kernels never launched, cannot record their signatures: {missing}")
    built = sorted(k.name for k in _kit.all_kernels()
                   if k.jitted.py_func.__module__.startswith("fastnn."))
    data = {name: sorted(json.loads(k) for k in keys) for name, keys in sorted(seen.items())}
    with open(out_path, "w") as f:
        json.dump({"kernels": built, "launches": data}, f, indent=1)
    n = sum(len(v) for v in data.values())
    print(f"recorded {n} signatures of {len(data)} kernels ({len(built)} built)")


# ------------------------------------------------------------------ step 2: compile
def _numba_type(spec):
    from numba import types
    if spec[0] == "array":
        _, dt, ndim, layout = spec
        return types.Array(getattr(types, dt), ndim, layout)
    return eval(spec[1], {k: getattr(types, k) for k in dir(types)})   # e.g. UniTuple(int64, 2)


def find_ptxas():
    """ptxas of the PyPI CUDA compiler packages that numba-cuda[cu12] installs (the same
    toolkit as its NVVM), or None.  A ptxas elsewhere on PATH is not used: without the
    matching NVVM/NVRTC packages numba cannot compile in the first place."""
    try:
        import nvidia.cuda_nvcc as nv
    except ImportError:
        return None
    for base in nv.__path__:
        cand = os.path.join(base, "bin", "ptxas")
        if os.path.exists(cand):
            return cand
    return None


_F64 = re.compile(r"^\s*(?:@%p\d+\s+)?[a-z][a-z0-9_.]*\.f64\b", re.M)
_DIV64 = re.compile(r"^\s*(?:@%p\d+\s+)?(?:div|rem)\.(?:s|u)64\b", re.M)
_PTXAS_FN = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def check_ptx(label, ptx, ptxas, cc, tmpdir, float32):
    """Assemble one kernel's PTX with ``ptxas -v``; returns (row, problems) where row is
    (label, registers, stack frame bytes, spill bytes, f64 instructions counted against a
    float32 kernel, f64 instructions in all, 64-bit integer div/rem instructions) or None
    when ptxas failed."""
    fn = os.path.join(tmpdir, re.sub(r"[^A-Za-z0-9_.]+", "_", f"{label}_sm{cc}") + ".ptx")
    with open(fn, "w") as f:
        f.write(ptx)
    r = subprocess.run([ptxas, "-v", f"-arch=sm_{cc}", fn, "-o", os.devnull],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, [f"{label}: ptxas failed: {r.stderr.strip()[:300]}"]
    report = r.stderr + r.stdout
    regs = max((int(m) for m in _PTXAS_REGS.findall(report)), default=0)
    stack = [tuple(map(int, m)) for m in _PTXAS_STACK.findall(report)]
    frame = max((s[0] for s in stack), default=0)
    spill = max((s[1] + s[2] for s in stack), default=0)
    n64 = len(_F64.findall(ptx))
    f64 = n64 if float32 else 0
    problems = []
    if spill:
        problems.append(f"{label}: {spill} bytes of register spills")
    if frame:
        problems.append(f"{label}: {frame} bytes of local memory (stack frame)")
    if f64:
        problems.append(f"{label}: {f64} float64 instructions in a float32 kernel")
    return (label, regs, frame, spill, f64, n64, len(_DIV64.findall(ptx))), problems


def compile_all(sigs_path, cc, keep=None):
    """Compile every recorded signature for ``cc`` (e.g. 90); return (rows, problems)."""
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import types as pytypes

    from numba import cuda
    import numba.cuda.dispatcher as nd
    target = (cc // 10, cc % 10)
    # See the module docstring: the device functions a kernel calls take the target's
    # compute capability from here instead of from a (missing) device.
    nd.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=target)

    from fastnn.cuda import _kit
    from cuda_launch_all import import_every_family
    import numpy as np
    import_every_family()
    for f in list(_kit.FACTORIES):
        for dt in (np.float32, np.float64):
            f(dt)
    by_name = {k.name: k for k in _kit.all_kernels()}
    with open(sigs_path) as f:
        rec = json.load(f)
    missing = sorted(set(rec["kernels"]) - set(by_name))
    ptxas = find_ptxas()
    if ptxas is None:
        raise SystemExit("ptxas not found: pip install 'numba-cuda[cu12]'")
    rows, problems, f64_all = [], [], []
    problems += [f"{n}: recorded under the simulator but not built here" for n in missing]
    tmp = keep or tempfile.mkdtemp(prefix="fastnn-ptx-")
    os.makedirs(tmp, exist_ok=True)
    for name, sigs in sorted(rec["launches"].items()):
        if name not in by_name:
            continue
        py_func = by_name[name].jitted.py_func
        for i, spec in enumerate(sigs):
            argtypes = tuple(_numba_type(s) for s in spec)
            label = f"{name} sig{i}"
            try:
                ptx, _ = cuda.compile_ptx(py_func, argtypes, cc=target)
            except Exception as e:   # a compile error fails the gate
                problems.append(f"{label}: compile error: {type(e).__name__}: {str(e)[:300]}")
                continue
            row, found = check_ptx(label, ptx, ptxas, cc, tmp, float32=name.endswith("[float32]"))
            problems += found
            if row is not None:
                rows.append(row)
                f64_all.append(row[5] if name.endswith("[float64]") else 0)
    if not any(f64_all):
        # the detector must see the float64 arithmetic of the float64 kernels, or it is broken
        problems.append("no float64 instruction found in any float64 kernel: the f64 check is broken")
    if keep is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows, problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", type=int, nargs="+", default=[80, 90],
                    help="compute capabilities, e.g. 80 90 (default)")
    ap.add_argument("--keep", metavar="DIR", help="keep the PTX files in DIR")
    ap.add_argument("--step", choices=["record", "compile"], help=argparse.SUPPRESS)
    ap.add_argument("--sigs", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.step == "record":
        record(args.sigs)
        return 0
    if args.step == "compile":
        cc = args.cc[0]
        rows, problems = compile_all(args.sigs, cc, args.keep and os.path.join(args.keep, f"sm_{cc}"))
        regs = max((r[1] for r in rows), default=0)
        print(f"sm_{cc}: {len(rows)} kernel signatures compiled and assembled; "
              f"max {regs} registers; spills {sum(r[3] for r in rows)} B; "
              f"local memory {sum(r[2] for r in rows)} B; "
              f"f64 instructions in float32 kernels {sum(r[4] for r in rows)}; "
              f"64-bit integer div/rem {sum(r[6] for r in rows)} "
              f"(in {sum(1 for r in rows if r[6])} signatures)")
        for r in rows:
            if r[6]:
                print(f"  {r[6]:3d} 64-bit div/rem: {r[0]}")
        for p in problems:
            print(f"  FAIL {p}")
        return 1 if problems else 0

    if find_ptxas() is None:
        print("ptx_gate: ptxas not found; install the CUDA compiler packages: "
              "pip install 'numba-cuda[cu12]'", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    with tempfile.TemporaryDirectory() as d:
        sigs = os.path.join(d, "sigs.json")
        r = subprocess.run([sys.executable, __file__, "--step", "record", "--sigs", sigs],
                           env=dict(env, NUMBA_ENABLE_CUDASIM="1"))
        if r.returncode != 0:
            print("ptx_gate: recording the launches under the simulator failed", file=sys.stderr)
            return 1
        status = 0
        for cc in args.cc:
            cmd = [sys.executable, __file__, "--step", "compile", "--sigs", sigs, "--cc", str(cc)]
            if args.keep:
                cmd += ["--keep", args.keep]
            status |= subprocess.run(cmd, env=env).returncode
    print("ptx_gate:", "FAILED" if status else "passed")
    return status


if __name__ == "__main__":
    sys.exit(main())
