"""README.md works as written.

Every ```python block runs on its own (a fresh namespace, a scratch working folder), as a
reader copying it would run it.  Every command in a ```bash block, and every inline
`fastnn ...` command of the prose, must be real: fastnn subcommands and options parse,
pip targets name extras that exist, files named exist.  CI runs the README's test command
exactly (asserted against .ci/run here).
"""
import os
import re
import shlex
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
if not os.path.exists(os.path.join(ROOT, ".ci", "run")):
    pytest.skip("README.md and the repository are not beside these tests (an installed copy)",
                allow_module_level=True)
TEST_COMMAND = "pip install -e '.[test]' && python -m pytest tests -q"
# packages a README block may need that a plain install lacks: the block is skipped
# (with the reason) where one is missing; CI installs them all
OPTIONAL = {"torch", "matplotlib", "tokenizers", "transformers", "sentence_transformers",
            "onnxruntime", "onnx", "mpi4py", "dask", "distributed", "numba", "cupy"}


def _blocks(lang):
    """(line number, code) of every fenced block of ``lang`` in README.md."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in re.finditer(r"^```" + lang + r"\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_readme_has_blocks():
    assert len(_blocks("python")) >= 4 and len(_blocks("bash")) >= 3


@pytest.mark.parametrize("line,code", _blocks("python"), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_python_block_runs(line, code, tmp_path, monkeypatch):
    import fastnn
    monkeypatch.chdir(tmp_path)
    backend, threads = fastnn.get_backend(), fastnn.get_num_threads()
    try:
        exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in OPTIONAL:
            pytest.skip(f"README block at line {line} needs {e.name}")
        raise
    finally:
        fastnn.set_backend(backend)
        fastnn.set_num_threads(threads)


# ---------------------------------------------------------------------- bash blocks
def _commands(code):
    """Each simple command of a bash block: comments dropped, split on && ; |."""
    for raw in code.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|;|\|\|", line):
            part = part.strip()
            if part:
                words = shlex.split(part)
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):   # VAR=value prefix
                    words = words[1:]
                if words:
                    yield words


def _check_fastnn(words):
    from fastnn.cli import make_parser
    parser = make_parser()
    try:
        parser.parse_args(words[1:])
    except SystemExit as e:
        if e.code == 0:       # --version, --help: parsed, printed, exited
            return
        pytest.fail(f"README command does not parse: {' '.join(words)} (exit {e.code})")


def _check_pip(words):
    assert words[1] in ("install", "wheel", "download"), words
    extras = set(_project()["optional-dependencies"])
    targets = [w for w in words[2:] if not w.startswith("-")]
    assert targets, f"pip command without a target: {words}"
    for t in targets:
        m = re.fullmatch(r"(\.|fastnn)(\[([a-z,]+)\])?", t)
        if m:
            for extra in filter(None, (m.group(3) or "").split(",")):
                assert extra in extras, f"README names the extra {extra!r}, pyproject has {sorted(extras)}"
        elif re.match(r"(dist|wheelhouse)/|fastnn-\*", t):
            pass          # a built artifact, named by pattern
        else:
            assert t in ("torch", "build", "cibuildwheel"), f"unexpected pip target {t!r}"


def _check_python(words):
    if words[1:3] == ["-m", "pytest"]:
        for w in words[3:]:
            if not w.startswith("-"):
                assert os.path.exists(os.path.join(ROOT, w)), f"python -m pytest {w}: no such path"
    elif words[1:3] == ["-m", "build"]:
        pass
    elif words[1] == "-c":
        compile(words[2], "<README python -c>", "exec")
    else:
        assert os.path.exists(os.path.join(ROOT, words[1])), f"python {words[1]}: no such file"


CHECKS = {"fastnn": _check_fastnn, "pip": _check_pip, "python": _check_python,
          "git": lambda w: None, "cd": lambda w: None, "brew": lambda w: None}


@pytest.mark.parametrize("line,code", _blocks("bash"), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_bash_block_commands_are_real(line, code):
    for words in _commands(code):
        assert words[0] in CHECKS, f"README.md:{line}: unknown command {words[0]!r}"
        CHECKS[words[0]](words)


def test_inline_fastnn_commands_parse():
    with open(README, encoding="utf-8") as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    spans = re.findall(r"`(fastnn(?: [^`]*)?)`", text)
    cmds = [s for s in spans if re.fullmatch(r"fastnn( -{0,2}[a-z][-a-z0-9 .=_:\"]*)?", s)]
    assert any(c.startswith("fastnn demo") for c in cmds)
    for c in cmds:
        _check_fastnn(shlex.split(c))


def test_ci_runs_the_readme_test_command_exactly():
    assert any(TEST_COMMAND in code for _, code in _blocks("bash")), "README lost its test command"
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        lines = [ln.strip() for ln in f]
    assert TEST_COMMAND in lines, ".ci/run must run the README's test command exactly"


def test_bash_checker_catches_mistakes():
    """The checks above can fail: a wrong subcommand, option or extra is caught."""
    for bad in ("fastnn bnech", "fastnn demo --stepz 3", "pip install '.[nosuchextra]'",
                "python -m pytest no_such_dir"):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            words = next(_commands(bad))
            CHECKS[words[0]](words)
