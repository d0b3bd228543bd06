"""Build the compiled CPU kernels (csrc/*.pyx -> fastnn._cpu.*).

Every ``csrc/<family>.pyx`` becomes the extension ``fastnn._cpu.<variant>.<family>``.
Cython directives are set here once for all modules.

Variants: on x86-64 each family is compiled three times, ``base`` (the x86-64 baseline,
SSE2, runs anywhere), ``avx2`` (x86-64-v3: AVX2 + FMA) and ``avx512`` (x86-64-v4:
AVX-512F/BW/DQ/VL, with ``-mprefer-vector-width=512`` -- without it GCC keeps
auto-vectorised loops at 256 bits on v4 and the build would only add masks); ``fastnn.cpu``
picks the best one the running CPU and OS support (``FASTNN_VARIANT`` forces one).  That
keeps wheels portable while the loops get 256- or 512-bit vectors -- PyTorch and NumPy
dispatch at run time for the same reason.  Elsewhere only ``base`` is built.

Cythonizing and the OpenMP probe happen in ``build_ext`` only, so ``sdist`` and the
metadata steps of a PEP 517 build are quick and never compile anything.  Release builds
carry no debug info (-g0: the 30 modules shrink about 10x) and compile in parallel.

Environment switches:
  FASTNN_DEBUG=1        bounds checks, wraparound and initialisation checks on, -O0 -g;
                        the kernels' data pointers checked (csrc/fnn_span.pxi)
  FASTNN_NO_OPENMP=1    build without OpenMP even when the compiler has it
  FASTNN_EXT=a,b        build only these families (development: parallel builds of
                        different families do not touch each other's files)
  FASTNN_VARIANTS=v,..  build only these variants (base, avx2, avx512); development speed-up
  FASTNN_BUILD_JOBS=n   parallel compile jobs (default: the number of CPUs)
  CFLAGS/CPPFLAGS/LDFLAGS are honoured, also by the OpenMP probe (macOS: point them at
  Homebrew's libomp, see README.md)
"""
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
DEBUG = os.environ.get("FASTNN_DEBUG", "") not in ("", "0")

_OMP_TEST = ("#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\n"
             "n+=1;\nreturn n>0?0:1;}\n")


def _env_flags(*names):
    return [f for n in names for f in os.environ.get(n, "").split()]


def _openmp_flags():
    """(compile flags, link flags) that give OpenMP with this compiler, or None.

    gcc and LLVM clang take -fopenmp.  Apple clang has no -fopenmp driver flag but compiles
    OpenMP with ``-Xpreprocessor -fopenmp`` against libomp (Homebrew's ``brew install
    libomp``, found at its usual prefixes or through CPPFLAGS/LDFLAGS)."""
    if os.environ.get("FASTNN_NO_OPENMP", "") not in ("", "0"):
        return None
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return None
    candidates = [(["-fopenmp"], ["-fopenmp"])]
    if sys.platform == "darwin":
        for prefix in [os.environ.get("FASTNN_LIBOMP_PREFIX", ""), "/opt/homebrew/opt/libomp",
                       "/usr/local/opt/libomp"]:
            if prefix and os.path.exists(os.path.join(prefix, "include", "omp.h")):
                lib = os.path.join(prefix, "lib")
                candidates.append((["-Xpreprocessor", "-fopenmp", "-I" + os.path.join(prefix, "include")],
                                   ["-L" + lib, "-Wl,-rpath," + lib, "-lomp"]))
        candidates.append((["-Xpreprocessor", "-fopenmp"], ["-lomp"]))   # paths from the env
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "t.c")
        with open(c, "w") as f:
            f.write(_OMP_TEST)
        for cflags, ldflags in candidates:
            cmd = ([cc] + _env_flags("CPPFLAGS", "CFLAGS") + cflags + [c, "-o", os.path.join(d, "t")]
                   + _env_flags("LDFLAGS") + ldflags)
            try:
                r = subprocess.run(cmd, capture_output=True, timeout=120)
            except Exception:
                continue
            if r.returncode == 0:
                return cflags, ldflags
    return None


def _variants():
    out = {"base": []}
    if platform.machine().lower() in ("x86_64", "amd64"):
        out["avx2"] = ["-march=x86-64-v3"]
        out["avx512"] = ["-march=x86-64-v4", "-mprefer-vector-width=512"]
    wanted = [s.strip() for s in os.environ.get("FASTNN_VARIANTS", "").split(",") if s.strip()]
    if wanted:
        out = {k: v for k, v in out.items() if k in wanted}
    return out


def _extensions():
    """One Extension per (variant, family); sources are the csrc/*.pyx themselves so that
    sdist lists what it must ship.  build_ext below points each at its variant's copy."""
    only = [s.strip() for s in os.environ.get("FASTNN_EXT", "").split(",") if s.strip()]
    # the shared C headers and Cython includes: a change rebuilds every family
    depends = sorted(glob(os.path.join("csrc", "*.h")) + glob(os.path.join("csrc", "*.pxd"))
                     + glob(os.path.join("csrc", "*.pxi")))
    exts = []
    for variant, march in _variants().items():
        for src in sorted(glob(os.path.join("csrc", "*.pyx"))):
            name = os.path.splitext(os.path.basename(src))[0]
            if only and name not in only:
                continue
            ext = Extension(f"fastnn._cpu.{variant}.{name}", [src], depends=depends,
                            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION")],
                            extra_compile_args=list(march))
            ext.fastnn_variant = variant
            exts.append(ext)
    return exts


class BuildExt(build_ext):
    """Cythonize, probe OpenMP and set the flags at build time, then compile in parallel."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:      # `build_ext -j N` on the command line wins
            jobs = os.environ.get("FASTNN_BUILD_JOBS", "") or str(os.cpu_count() or 1)
            self.parallel = max(1, int(jobs))

    def run(self):
        import numpy as np
        from Cython.Build import cythonize

        omp = _openmp_flags()
        if omp is None:
            msg = ("\n" + "!" * 78 + "\n"
                   "fastnn: the C compiler has no OpenMP (-fopenmp failed). Building SERIAL kernels:\n"
                   "results are correct but use one core. Install a compiler with OpenMP (gcc, or\n"
                   "clang with libomp) and rebuild for multi-threaded kernels.\n" + "!" * 78)
            if os.environ.get("FASTNN_NO_OPENMP", "") not in ("", "0"):
                msg = "fastnn: FASTNN_NO_OPENMP is set: building serial kernels (one core)."
            warnings.warn(msg)
            print(msg, file=sys.stderr)
        cflags, ldflags = omp or ([], [])
        opt = ["-O0", "-g"] if DEBUG else ["-O3", "-g0", "-fno-math-errno", "-fno-trapping-math"]
        for ext in self.extensions:
            # Cython writes one .c per .pyx: each variant compiles its own copy of the source
            # so both can be cythonized under their own module name.
            src = ext.sources[0]
            if src.endswith(".pyx") and not os.path.isabs(src) and src.startswith("csrc"):
                vsrc = os.path.join("build", "csrc", ext.fastnn_variant, os.path.basename(src))
                os.makedirs(os.path.dirname(vsrc), exist_ok=True)
                with open(src) as f:
                    text = f.read()
                if not os.path.exists(vsrc) or open(vsrc).read() != text:
                    with open(vsrc, "w") as f:
                        f.write(text)
                ext.sources = [vsrc]
            ext.include_dirs = [np.get_include(), os.path.join(HERE, "csrc")]
            ext.define_macros = [m for m in ext.define_macros if m[0] != "FASTNN_HAVE_OPENMP"]
            ext.define_macros.append(("FASTNN_HAVE_OPENMP", "1" if omp else "0"))
            # fnn_span.pxi: the kernels' pointers are checked in the debug build only
            ext.define_macros = [m for m in ext.define_macros if m[0] != "FASTNN_DEBUG"]
            ext.define_macros.append(("FASTNN_DEBUG", "1" if DEBUG else "0"))
            ext.extra_compile_args = opt + cflags + [a for a in ext.extra_compile_args
                                                     if a.startswith(("-march", "-mprefer"))]
            ext.extra_link_args = list(ldflags)
        directives = {
            "language_level": 3,
            "boundscheck": DEBUG,
            "wraparound": DEBUG,
            "initializedcheck": DEBUG,
            # C division semantics in both builds: with Python semantics a division by zero
            # inside nogil code is silently swallowed, so the debug build would compute
            # something else
            "cdivision": True,
            "nonecheck": DEBUG,
            "embedsignature": True,
        }
        # cythonize returns plain distutils Extensions; keep setuptools' own (finalized)
        # objects and take only the generated C sources from them
        by_name = {ext.name: ext for ext in self.extensions}
        for done in cythonize(
            self.extensions,
            include_path=[os.path.join(HERE, "csrc")],
            compiler_directives=directives,
            compile_time_env={"FASTNN_OPENMP": omp is not None},
            nthreads=self.parallel if self.parallel > 1 else None,
            force=DEBUG,
            quiet=True,
        ):
            by_name[done.name].sources = done.sources
        super().run()


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
