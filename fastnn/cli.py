"""The fastnn command line.

  fastnn bench      time the kernels vs the NumPy reference and PyTorch (the main job)
  fastnn demo       train a small character-level GPT on Shakespeare (CPU)
  fastnn generate   sample text from a `fastnn demo` checkpoint (no training)
  fastnn info       how this fastnn was built: kernels, OpenMP, backends, optional packages

Every subcommand checks its arguments, output paths and the optional packages it needs
before it starts any work, so a typo fails in a second, not after a ten-minute run.
"""
import argparse
import importlib
import os
import sys


# ---------------------------------------------------------------------- argument types
def _number(kind, name, ok):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n' if kind is int else ''} "
                                             f"{'integer' if kind is int else 'number'}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {name}, got {text}")
        return v
    parse.__name__ = kind.__name__     # argparse names the type in its messages
    return parse


positive_int = _number(int, "a positive integer", lambda v: v >= 1)
nonneg_int = _number(int, ">= 0", lambda v: v >= 0)
positive_float = _number(float, "> 0", lambda v: v > 0)
nonneg_float = _number(float, ">= 0", lambda v: v >= 0)
fraction = _number(float, "in [0, 1)", lambda v: 0 <= v < 1)
probability = _number(float, "in (0, 1]", lambda v: 0 < v <= 1)


# ---------------------------------------------------------------------- pre-flight checks
def missing(module, purpose, extra):
    """A message when ``module`` cannot be imported (None when it can)."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{purpose} needs {module} ({e}): pip install 'fastnn[{extra}]'"
    return None


def unwritable(path, what):
    """A message when ``path`` cannot be created (missing or read-only folder), else None."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{what} {path}: the folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"{what} {path}: the folder {folder} is not writable"
    if os.path.isdir(path):
        return f"{what} {path} is a folder"
    return None


def unreadable(path, what):
    if not os.path.exists(path):
        return f"{what} {path} does not exist"
    if os.path.isdir(path) or not os.access(path, os.R_OK):
        return f"{what} {path} is not a readable file"
    return None


# ---------------------------------------------------------------------- build report
def build_info():
    """How the installed fastnn was built: {'version', 'compiled', 'variants', 'openmp', ...}.

    ``openmp`` maps each compiled variant to its OpenMP version (0: serial build);
    ``variants`` are the loaded ones, ``cpu_runs`` those this CPU and OS can run (best
    first), ``forced`` the FASTNN_VARIANT setting (None: the best one is picked)."""
    import fastnn
    from ._backend import backend
    from . import cpu as _cpu
    info = {"version": fastnn.__version__, "compiled": False, "variants": [], "openmp": {},
            "fallbacks": None, "error": None, "cpu_runs": _cpu.cpu_variants(), "gemm": None,
            "forced": os.environ.get("FASTNN_VARIANT", "").strip().lower() or None}
    try:
        cpu = backend("cpu")
    except ImportError as e:
        info["error"] = str(e)
        return info
    info.update(compiled=True, variants=sorted(set(cpu.variant.values())),
                fallbacks=list(cpu.fallbacks))
    try:     # what the GEMM-bound kernels (linear, attention, conv, RNN) run on
        dense = importlib.import_module(cpu.linear.__module__)
        info["gemm"] = ("own" if dense._own_sgemm_on() else
                        "numpy-openblas" if dense.BLAS_PATH else "scipy-blas")
    except (AttributeError, ImportError):   # a build from before the own GEMM
        info["gemm"] = None
    for v in info["variants"]:
        try:
            info["openmp"][v] = importlib.import_module(f"fastnn._cpu.{v}._build").OPENMP
        except ImportError:      # a build from before the _build module existed
            info["openmp"][v] = None
    return info


def _kernels_line(info):
    if not info["compiled"]:
        return "cpu kernels NOT built: the NumPy reference runs (pip install . compiles them)"
    omp = set(info["openmp"].values())
    if omp == {0}:
        threads = "SERIAL (built without OpenMP)"
    elif None in omp:
        threads = "OpenMP unknown"
    else:
        threads = "OpenMP " + ", ".join(sorted(str(v) for v in omp))
    return f"cpu kernels compiled (variant {'+'.join(info['variants'])}), {threads}"


def variant_line(info):
    """Which kernel variant is loaded and why, and what this CPU could run."""
    return (f"kernel variant: {'+'.join(info['variants']) or '-'} "
            f"({'forced by FASTNN_VARIANT' if info['forced'] else 'the best this CPU runs'}); "
            f"this CPU runs {', '.join(info['cpu_runs'])}")


def gemm_line(info):
    """What the float32 matrix products run on."""
    own_build = "avx512" in info["variants"] or "avx2" in info["variants"]
    return "float32 GEMM: " + {
        "own": ("fastnn's own AVX-512 kernel" if "avx512" in info["variants"] else
                "fastnn's own AVX2 kernel, NumPy's OpenBLAS for A^T B and for depths past "
                "512 over rows a multiple of 4 KiB apart")
               + " (FASTNN_SGEMM=blas: NumPy's OpenBLAS)",
        "numpy-openblas": "NumPy's OpenBLAS" + (" (FASTNN_SGEMM=blas)" if own_build else ""),
        "scipy-blas": "SciPy's BLAS",
    }.get(info.get("gemm"), "-")


def version_line():
    info = build_info()
    return f"fastnn {info['version']}: {_kernels_line(info)}"


def info(args, out=None):
    import platform

    import numpy as np

    import fastnn
    out = sys.stdout if out is None else out
    b = build_info()
    print(f"fastnn {b['version']} ({os.path.dirname(fastnn.__file__)})", file=out)
    print(f"python {platform.python_version()} on {platform.machine()} {platform.system()}, "
          f"numpy {np.__version__}", file=out)
    print(_kernels_line(b), file=out)
    print(variant_line(b), file=out)
    if b["compiled"]:
        print(gemm_line(b), file=out)
    if b["compiled"] and b["fallbacks"]:
        print(f"ops served by the NumPy reference: {', '.join(b['fallbacks'])}", file=out)
    print(f"backends: {', '.join(fastnn.available_backends())}; default {fastnn.get_backend()}; "
          f"{fastnn.get_num_threads()} threads", file=out)
    opt = []
    for mod in ("torch", "matplotlib", "numba", "tokenizers", "onnxruntime", "mpi4py", "dask"):
        try:
            m = importlib.import_module(mod)
            opt.append(f"{mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            opt.append(f"{mod} -")
    print("optional packages: " + ", ".join(opt), file=out)
    return b


# ---------------------------------------------------------------------- the parser
class _Version(argparse.Action):
    """``--version``: the version and how the kernels were built (imports fastnn only
    when asked, so building the parser stays cheap)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def make_parser():
    parser = argparse.ArgumentParser(prog="fastnn", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version,
                        help="show the version and how the kernels were built, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import demo
    from .bench import cli as bench_cli
    bench_cli.add_parser(sub)
    demo.add_parser(sub)
    demo.add_generate_parser(sub)
    p = sub.add_parser("info", help="how this fastnn was built (kernels, OpenMP, backends)")
    p.set_defaults(func=info)
    return parser


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    check = getattr(args, "check", None)
    if check is not None:
        check(args)
    try:
        args.func(args)
        sys.stdout.flush()      # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        # the reader went away (`fastnn info | head -1`): stop quietly with the status a
        # Unix tool killed by SIGPIPE has; stdout goes to /dev/null so that the exit's
        # flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    return 0


if __name__ == "__main__":
    sys.exit(main())
