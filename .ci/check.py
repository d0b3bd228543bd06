"""CI checks of the distribution artifacts (run by .ci/run).

  check.py sdist FILE.tar.gz          everything a wheel is built from is in the sdist
  check.py wheel FILE.whl             size, tag, LICENSE and metadata inside; no debug info
  check.py install (--openmp|--serial)  the installed fastnn (run from outside the source
                                      tree): compiled kernels, no reference fallbacks,
                                      OpenMP or serial as asked, metadata, a layer works
  check.py quick-tests ROOT           the cibuildwheel test-command of pyproject.toml,
                                      with {project} = ROOT, run from a scratch folder
"""
import glob
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import zipfile


def sdist(path):
    with tarfile.open(path) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    need = ["setup.py", "pyproject.toml", "LICENSE", "README.md", "MANIFEST.in",
            "tests/conftest.py", "fastnn/data/shakespeare.txt"]
    for pattern in ("csrc/*.pyx", "csrc/*.pxd", "csrc/*.pxi", "csrc/*.h", "tests/*.py"):
        found = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern)))
        assert found, pattern
        need += found
    missing = [n for n in need if n not in names]
    assert not missing, f"the sdist lacks {missing}"
    built = [n for n in names if n.endswith((".so", ".c", ".o")) or n.startswith("build/")]
    assert not built, f"the sdist carries build outputs {built[:5]}"
    print(f"sdist ok: {os.path.basename(path)}, {os.path.getsize(path) / 1e6:.2f} MB, "
          f"{len(names)} files")


def wheel(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        info = {i.filename: i for i in z.infolist()}
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        tags = [ln.split(": ", 1)[1] for ln in
                z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode().splitlines()
                if ln.startswith("Tag: ")]
    sos = [n for n in names if ".so" in os.path.basename(n)]
    kernels = [n for n in sos if n.startswith("fastnn/_cpu/")]
    assert kernels, "the wheel has no compiled kernels"
    # every variant carries every family: base everywhere, avx2 and avx512 on x86-64
    by_variant = {}
    for n in kernels:
        parts = n.split("/")
        by_variant.setdefault(parts[2], set()).add(parts[3].split(".")[0])
    want = ["base", "avx2", "avx512"] if any("x86_64" in t for t in tags) else ["base"]
    assert sorted(by_variant) == sorted(want), f"kernel variants {sorted(by_variant)}, want {want}"
    fams = by_variant["base"]
    for v, f in by_variant.items():
        assert f == fams, f"variant {v} lacks {sorted(fams - f)} / has extra {sorted(f - fams)}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "no LICENSE in the wheel"
    for field in ("License-Expression: BSD-3-Clause", "Requires-Python: >=3.10",
                  "Classifier: Programming Language :: Python :: 3.14", "Project-URL: "):
        assert field in meta, f"METADATA lacks {field!r}"
    unpacked = sum(info[n].file_size for n in kernels)
    # without -g0 the kernels carried ~27 MB of DWARF; stripped builds are ~100-250 kB each
    assert unpacked / len(kernels) < 600e3, f"kernels average {unpacked / len(kernels) / 1e3:.0f} kB: debug info?"
    libs = [os.path.basename(n) for n in sos if ".libs/" in n]
    print(f"wheel ok: {os.path.basename(path)}\n  tag {', '.join(tags)}; "
          f"{os.path.getsize(path) / 1e6:.2f} MB zipped; {len(kernels)} kernel modules "
          f"({len(fams)} families x variants {', '.join(sorted(by_variant))}), "
          f"{unpacked / 1e6:.2f} MB unpacked; vendored libraries: {', '.join(libs) or 'none'}")
    return tags, libs


def install(openmp):
    import fastnn
    import fastnn.functional as F
    import numpy as np
    from fastnn.cli import build_info, version_line
    from importlib.metadata import files, metadata

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert not os.path.abspath(fastnn.__file__).startswith(os.path.join(here, "fastnn") + os.sep), \
        f"fastnn was imported from the source tree ({fastnn.__file__}), not the installed wheel"
    b = build_info()
    assert b["compiled"], b["error"]
    assert b["fallbacks"] == [], f"cpu ops served by the NumPy reference: {b['fallbacks']}"
    if openmp:
        assert all(b["openmp"].values()), f"expected OpenMP kernels: {b['openmp']}"
    else:
        assert set(b["openmp"].values()) == {0}, f"expected serial kernels: {b['openmp']}"
        assert "SERIAL" in version_line()
    md = metadata("fastnn")
    assert md["License-Expression"] == "BSD-3-Clause" and md["Requires-Python"] == ">=3.10"
    assert any(f.name == "LICENSE" for f in files("fastnn"))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    y = F.layer_norm(x, 8)
    assert abs(float(y.mean())) < 1e-5
    print(f"install ok: {version_line()}\n  from {os.path.dirname(fastnn.__file__)}")


def quick_tests(root):
    import tomllib
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        cmd = tomllib.load(f)["tool"]["cibuildwheel"]["test-command"]
    argv = shlex.split(cmd.replace("{project}", root))
    assert argv[0] == "pytest"
    # python -m puts the cwd (a scratch folder) first on sys.path: the installed fastnn wins
    argv = [sys.executable, "-m", "pytest"] + argv[1:]
    print("quick tests:", " ".join(argv), flush=True)
    with tempfile.TemporaryDirectory() as d:   # outside the tree: the installed fastnn is tested
        sys.exit(subprocess.call(argv, cwd=d))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "sdist":
        sdist(sys.argv[2])
    elif what == "wheel":
        wheel(sys.argv[2])
    elif what == "install":
        install(openmp=sys.argv[2] == "--openmp")
    elif what == "quick-tests":
        quick_tests(os.path.abspath(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
