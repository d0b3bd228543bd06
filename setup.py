"""Build the compiled CPU kernels (csrc/*.pyx -> fastnn._cpu.*).

Every ``csrc/<family>.pyx`` becomes the extension ``fastnn._cpu.<variant>.<family>``.
Cython directives are set here once for all modules.

Variants: on x86-64 each family is compiled twice, ``base`` (the x86-64 baseline, SSE2,
runs anywhere) and ``avx2`` (x86-64-v3: AVX2 + FMA); ``fastnn.cpu`` picks the best one the
running CPU supports.  That keeps wheels portable while the loops get 256-bit vectors --
PyTorch and NumPy dispatch at run time for the same reason.  Elsewhere only ``base`` is built.

Environment switches:
  FASTNN_DEBUG=1        bounds checks, wraparound and initialisation checks on, -O0 -g
  FASTNN_NO_OPENMP=1    build without OpenMP even when the compiler has it
  FASTNN_EXT=a,b        build only these families (development: parallel builds of
                        different families do not touch each other's files)
  FASTNN_VARIANTS=v,..  build only these variants (base, avx2); development speed-up
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from glob import glob

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
DEBUG = os.environ.get("FASTNN_DEBUG", "") not in ("", "0")


def _compiler_has_openmp():
    """Compile and link a tiny OpenMP program with the compiler Python was built with."""
    if os.environ.get("FASTNN_NO_OPENMP", "") not in ("", "0"):
        return False
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()[0]
    if shutil.which(cc) is None:
        return False
    src = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "t.c")
        with open(c, "w") as f:
            f.write(src)
        try:
            r = subprocess.run([cc, "-fopenmp", c, "-o", os.path.join(d, "t")],
                               capture_output=True, timeout=60)
        except Exception:
            return False
        return r.returncode == 0


HAVE_OPENMP = _compiler_has_openmp()
if not HAVE_OPENMP:
    msg = ("\n" + "!" * 78 + "\n"
           "fastnn: the C compiler has no OpenMP (-fopenmp failed). Building SERIAL kernels:\n"
           "results are correct but use one core. Install a compiler with OpenMP (gcc, or\n"
           "clang with libomp) and rebuild for multi-threaded kernels.\n" + "!" * 78)
    warnings.warn(msg)
    print(msg, file=sys.stderr)

compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-math-errno", "-fno-trapping-math"]
link_args = []
if HAVE_OPENMP:
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    # C division semantics in both builds: with Python semantics a division by zero inside
    # nogil code is silently swallowed, so the debug build would compute something else
    "cdivision": True,
    "nonecheck": DEBUG,
    "embedsignature": True,
}

import platform

VARIANTS = {"base": []}
if platform.machine().lower() in ("x86_64", "amd64"):
    VARIANTS["avx2"] = ["-march=x86-64-v3"]
wanted = [s.strip() for s in os.environ.get("FASTNN_VARIANTS", "").split(",") if s.strip()]
if wanted:
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in wanted}

only = [s.strip() for s in os.environ.get("FASTNN_EXT", "").split(",") if s.strip()]
sources = sorted(glob(os.path.join("csrc", "*.pyx")))
extensions = []
for variant, march in VARIANTS.items():
    for src in sources:
        name = os.path.splitext(os.path.basename(src))[0]
        if only and name not in only:
            continue
        # Cython writes one .c per .pyx; each variant gets its own copy of the source
        # so both can be cythonized under their own module name.
        vsrc = os.path.join("build", "csrc", variant, name + ".pyx")
        os.makedirs(os.path.dirname(vsrc), exist_ok=True)
        with open(src) as f:
            text = f.read()
        if not os.path.exists(vsrc) or open(vsrc).read() != text:
            with open(vsrc, "w") as f:
                f.write(text)
        extensions.append(Extension(
            f"fastnn._cpu.{variant}.{name}",
            [vsrc],
            include_dirs=[np.get_include(), os.path.join(HERE, "csrc")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION"),
                           ("FASTNN_HAVE_OPENMP", "1" if HAVE_OPENMP else "0")],
            extra_compile_args=compile_args + march,
            extra_link_args=link_args,
            # the shared C headers and Cython includes: a change rebuilds every family
            depends=sorted(glob(os.path.join("csrc", "*.h")) + glob(os.path.join("csrc", "*.pxd"))
                           + glob(os.path.join("csrc", "*.pxi"))),
        ))

setup(
    ext_modules=cythonize(
        extensions,
        include_path=[os.path.join(HERE, "csrc")],
        compiler_directives=directives,
        compile_time_env={"FASTNN_OPENMP": HAVE_OPENMP},
        nthreads=int(os.environ.get("FASTNN_BUILD_JOBS", "0")) or None,
        force=DEBUG,
    ),
)
