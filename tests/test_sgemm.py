"""fastnn's own float32 GEMM (csrc/fnn_sgemm.h, avx512 and avx2 builds) against BLAS and float64.

Every family that includes fnn_gemm.pxi routes float32 GEMMs of at least 24 x 32 x 16
through it; these tests drive the dispatcher directly (``_gemm_hook``) over the shapes
that cross each blocking edge: the 12-row tile, the 32-column panel, the 144-row packed
block of a transposed A, the 384-long k block and the 512- or 768-column block (avx512
build; both widths are tested, whichever the machine's L2 picks); the
6-row tile, 16-column panel, 504-row packed block of a transposed A, 256-long k block and
256-column block (avx2 build); all four
transpositions; alpha and beta (beta = 0 must not read C: NaN there stays out); row
strides longer than the rows.  Variants without the kernel run BLAS through the same hook.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import variant_modules

MODS = variant_modules("dense")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _op(x, t):
    return x.T if t else x


def _operands(rng, M, N, K, ta, tb, pad):
    """a, b, c with row strides `pad` floats longer than their rows (views)."""
    def view(rows, cols):
        base = rng.standard_normal((rows, cols + pad)).astype(np.float32)
        return base[:, :cols]
    a = view(K, M) if ta else view(M, K)
    b = view(N, K) if tb else view(K, N)
    c = view(M, N)
    return a, b, c


def _check(mod, M, N, K, ta, tb, alpha, beta, pad=0, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = _operands(rng, M, N, K, ta, tb, pad)
    if beta == 0:
        c[...] = np.nan           # BLAS semantics: beta == 0 means C is not read
    c0 = c.astype(np.float64)
    want = alpha * (_op(a, ta).astype(np.float64) @ _op(b, tb).astype(np.float64))
    if beta != 0:
        want += beta * c0
    mod._gemm_hook(ta, tb, alpha, a, b, beta, c)
    # error bound of a float32 dot product of length K (plus the alpha / beta roundings)
    mag = abs(alpha) * (np.abs(_op(a, ta)).astype(np.float64) @ np.abs(_op(b, tb)).astype(np.float64))
    mag += abs(beta) * np.abs(np.nan_to_num(c0))
    tol = (K + 4) * np.finfo(np.float32).eps * mag + 1e-30
    assert np.all(np.isfinite(c)), "NaN/inf in the result"
    err = np.abs(c.astype(np.float64) - want)
    assert np.all(err <= tol), f"max err/tol {np.max(err / tol):.3g}"
    return c


SHAPES = [  # (M, N, K): each crosses a tile or block edge of fnn_sgemm.h
    (24, 32, 16), (25, 33, 17), (35, 31, 100), (36, 64, 384), (37, 65, 385),
    (143, 96, 40), (145, 47, 769), (300, 513, 20), (49, 1030, 33), (24, 545, 1000),
    (509, 40, 300), (1010, 35, 20),   # the avx2 build's 504-row packed blocks of a transposed A
]


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sgemm_against_float64(mod, ta, tb, shape):
    M, N, K = shape
    _check(mod, M, N, K, ta, tb, 1.0, 0.0)


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (-0.5, 0.0), (2.0, -1.5), (0.25, 0.5)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_sgemm_alpha_beta_and_strides(mod, alpha, beta, ta, tb):
    _check(mod, 61, 77, 400, ta, tb, alpha, beta, pad=5)
    _check(mod, 26, 40, 800, ta, tb, alpha, beta, pad=16)


@pytest.mark.parametrize("mod", MODS)
def test_sgemm_own_kernel_agrees_with_blas(mod):
    """The same products through the own kernel and through BLAS: both within the float32
    bound of the float64 product, and close to each other."""
    if not mod._use_own_sgemm(True):
        pytest.skip("this variant has no own float32 GEMM (the base build: BLAS only)")
    try:
        for (M, N, K) in [(200, 300, 500), (48, 64, 1024)]:
            for ta in (False, True):
                for tb in (False, True):
                    own = _check(mod, M, N, K, ta, tb, 1.0, 0.0, seed=3)
                    mod._use_own_sgemm(False)
                    blas = _check(mod, M, N, K, ta, tb, 1.0, 0.0, seed=3)
                    mod._use_own_sgemm(True)
                    np.testing.assert_allclose(own, blas, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    finally:
        mod._use_own_sgemm(mod._own_sgemm_default())


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("ta", [False, True], ids=["a_in_place", "a_packed"])
def test_sgemm_output_does_not_depend_on_its_tile(mod, ta):
    """Rows computed in a full 12-row tile (its k loop in assembly where the build has
    it, fnn_sgemm_asm.h) and the same rows in a tail tile (the C loop), and columns in a
    full panel, a masked tail or a last panel's half tile (<= 16 live columns: the
    AVX-512 build runs only its first 16), are the same sums in the same order: equal
    bits (a promise of the own kernel; BLAS makes none).  Both layouts of A: read in
    place, and packed (a transposed A); k odd (the assembly's single last step)."""
    if not mod._use_own_sgemm(True):
        pytest.skip("this variant has no own float32 GEMM (the base build: BLAS only)")
    if ta and not mod._own_sgemm_takes_transposed_a():
        mod._use_own_sgemm(mod._own_sgemm_default())
        pytest.skip("this variant's own GEMM leaves a transposed A to BLAS (the avx2 "
                    "build: OpenBLAS's is faster there), which promises no such bits")
    mod._use_own_sgemm(mod._own_sgemm_default())
    rng = np.random.default_rng(5)
    a = rng.standard_normal((50, 301)).astype(np.float32)
    b = rng.standard_normal((301, 70)).astype(np.float32)
    at = np.ascontiguousarray(a.T)
    full = np.zeros((50, 70), np.float32)
    mod._gemm_hook(ta, False, 1.0, at if ta else a, b, 0.0, full)
    part = np.zeros((25, 40), np.float32)        # rows 25..49: a tail tile of 1; cols: 8 masked
    mod._gemm_hook(ta, False, 1.0, np.ascontiguousarray(at[:, 25:]) if ta else a[25:],
                   np.ascontiguousarray(b[:, :40]), 0.0, part)
    np.testing.assert_array_equal(part, full[25:, :40])
    # columns 64..69 came from a half tile above; here they sit in a full 32-column panel
    cols = np.zeros((50, 32), np.float32)
    mod._gemm_hook(ta, False, 1.0, at if ta else a, np.ascontiguousarray(b[:, 38:]), 0.0, cols)
    np.testing.assert_array_equal(cols, full[:, 38:])


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("ta", [False, True], ids=["a_in_place", "a_transposed"])
def test_sgemm_column_blocks_do_not_change_bits(mod, ta):
    """The own kernel's column blocks (512 columns, or 768 where the L2 holds the packed
    block: fnn_sgemm.h) split N into near-equal blocks on whole 32-column panels.  Every
    width gives the same bits (each output sums the same k blocks in the same order) and
    stays within the float32 bound, on widths N that leave ragged last panels, a single
    block, and several; the width setting is restored after."""
    default = mod._own_sgemm_block_cols()
    if not mod._use_own_sgemm(True) or default == 0:
        mod._use_own_sgemm(mod._own_sgemm_default())
        pytest.skip("this variant has no own float32 GEMM (the base build: BLAS only)")
    if ta and not mod._own_sgemm_takes_transposed_a():
        mod._use_own_sgemm(mod._own_sgemm_default())
        pytest.skip("this variant's own GEMM leaves a transposed A to BLAS (the avx2 build)")
    assert default in (256, 512, 768)
    rng = np.random.default_rng(11)
    try:
        for (M, N, K) in [(37, 768, 400), (30, 1030, 100), (26, 2311, 390), (25, 545, 50)]:
            a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
            b = rng.standard_normal((K, N)).astype(np.float32)
            outs = []
            for width in (512, 768, 96, 32, 0):
                mod._own_sgemm_block_cols(width)
                widest = 256 if default == 256 else 768      # the avx2 build: 256 always
                assert mod._own_sgemm_block_cols() == (min(width, widest) if width else default)
                c = np.full((M, N), np.nan, np.float32)
                mod._gemm_hook(ta, False, 1.0, a, b, 0.0, c)
                outs.append(c)
            want = _op(a, ta).astype(np.float64) @ b.astype(np.float64)
            tol = (K + 4) * np.finfo(np.float32).eps * (np.abs(_op(a, ta)).astype(np.float64)
                                                        @ np.abs(b).astype(np.float64))
            assert np.all(np.abs(outs[0] - want) <= tol)
            for c in outs[1:]:
                np.testing.assert_array_equal(c, outs[0])
    finally:
        mod._own_sgemm_block_cols(0)
        mod._use_own_sgemm(mod._own_sgemm_default())
    assert mod._own_sgemm_block_cols() == default


@pytest.mark.parametrize("mod", MODS)
def test_sgemm_routes_deep_products(mod):
    """Which products the own kernel takes: every depth from rows whose stride is not a
    multiple of 4 KiB (deep ones too); the avx2 build leaves depths past 512 read from
    rows a multiple of 4 KiB apart, and a transposed A, to BLAS (fnn_sgemm.h); the
    avx512 build takes them all.  The deep products it takes match float64 (K = 1000 and
    a padded 1024: four k blocks, C read back after the first)."""
    if not mod._use_own_sgemm(True):
        pytest.skip("this variant has no own float32 GEMM (the base build: BLAS only)")
    try:
        avx2 = mod.__name__.split(".")[-2] == "avx2"
        assert mod._own_sgemm_takes(False, 512, 512)
        assert mod._own_sgemm_takes(False, 1000, 1000)
        assert mod._own_sgemm_takes(False, 1024, 1040)
        assert mod._own_sgemm_takes(False, 3072, 3072) is not avx2
        assert mod._own_sgemm_takes(False, 1024, 2048) is not avx2
        assert mod._own_sgemm_takes(True, 1024, 128) is mod._own_sgemm_takes_transposed_a()
        for M, N, K, pad in ((50, 70, 1000, 0), (31, 47, 1024, 16), (13, 300, 700, 3)):
            _check(mod, M, N, K, False, False, 1.0, 0.0, pad=pad, seed=11)
            _check(mod, M, N, K, False, True, 0.5, 1.0, pad=pad, seed=12)
    finally:
        mod._use_own_sgemm(mod._own_sgemm_default())
    mod._use_own_sgemm(False)
    try:
        assert not mod._own_sgemm_takes(False, 512, 512)
    finally:
        mod._use_own_sgemm(mod._own_sgemm_default())


def test_sgemm_asm_header_is_generated():
    """csrc/fnn_sgemm_asm.h is tools/gen_sgemm_asm.py's output, unedited."""
    if not os.path.exists(os.path.join(ROOT, "tools", "gen_sgemm_asm.py")):
        pytest.skip("tools/ and csrc/ are not beside these tests (an installed copy)")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_sgemm_asm.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("mod", MODS)
def test_linear_bias_in_the_own_kernel_equals_a_bias_filled_c(mod):
    """linear() hands its bias to the own kernel, added with the first stores: the same
    bits as the kernel on a C filled with the bias and beta = 1 (both weight layouts, two
    row blocks, a column tail)."""
    if not mod._use_own_sgemm(True):
        pytest.skip("this variant has no own float32 GEMM (the base build: BLAS only)")
    mod._use_own_sgemm(mod._own_sgemm_default())
    rng = np.random.default_rng(8)
    x = rng.standard_normal((300, 200)).astype(np.float32)
    w = rng.standard_normal((130, 200)).astype(np.float32)
    b = rng.standard_normal(130).astype(np.float32)
    wc = np.ascontiguousarray(w.T)
    for weight, ta_b, bm in ((w, True, w), (wc.T, False, wc)):
        y = mod.linear(x, weight, b)[0]
        c = np.broadcast_to(b, (300, 130)).copy()
        mod._gemm_hook(False, ta_b, 1.0, x, bm, 1.0, c)
        np.testing.assert_array_equal(y, c)


def _chunked_col_sum(a, chunk=256):
    """Column sums as linear_backward's d_bias takes them: float64 partials over chunks of
    `chunk` rows (rows in order), the partials added in chunk order, then float32."""
    tot = np.zeros(a.shape[1])
    for r0 in range(0, a.shape[0], chunk):
        acc = np.zeros(a.shape[1])
        for r in range(r0, min(r0 + chunk, a.shape[0])):
            acc += a[r]
        tot += acc
    return tot.astype(a.dtype)


@pytest.mark.parametrize("mod", MODS)
def test_linear_backward_bias_grad_bits(mod):
    """d_bias is summed in column strips inside the GEMMs' parallel region: the same bits
    as the chunked float64 column sum (rows past a 256-row chunk, a partial 64-column
    strip), float32 and float64, both weight layouts, on 1 and 2 threads."""
    import fastnn
    rng = np.random.default_rng(9)
    n = fastnn.get_num_threads()
    try:
        for dt in (np.float32, np.float64):
            x = rng.standard_normal((600, 96)).astype(dt)
            w = rng.standard_normal((150, 96)).astype(dt)
            dy = rng.standard_normal((600, 150)).astype(dt)
            b = np.zeros(150, dt)
            want = _chunked_col_sum(dy)
            for t in (1, 2):
                fastnn.set_num_threads(t)
                for weight in (w, np.ascontiguousarray(w.T).T):
                    db = mod.linear_backward(dy, mod.linear(x, weight, b)[1])[2]
                    np.testing.assert_array_equal(db, want)
    finally:
        fastnn.set_num_threads(n)


@pytest.mark.parametrize("mod", MODS)
def test_sgemm_hook_rejects_bad_operands(mod):
    a = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match="chain"):
        mod._gemm_hook(False, False, 1.0, a, np.zeros((4, 3), np.float32), 0.0,
                       np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="contiguous rows"):
        mod._gemm_hook(False, False, 1.0, a[:, ::2], np.zeros((3, 3), np.float32), 0.0,
                       np.zeros((4, 3), np.float32))


def test_fastnn_sgemm_blas_env_routes_to_blas():
    """FASTNN_SGEMM=blas, read at import, keeps every GEMM on BLAS."""
    code = ("import fastnn, importlib; from fastnn.cpu import load_order; "
            "m = importlib.import_module(f'fastnn._cpu.{load_order()[0]}.dense'); "
            "print(m._own_sgemm_default(), m._use_own_sgemm(m._own_sgemm_default()))")
    env = dict(os.environ, FASTNN_SGEMM="blas")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the RSS from /proc")
def test_sgemm_buffer_is_freed_when_its_thread_ends():
    """Each thread's packing buffer (~0.8 MiB) goes with the thread: 150 short-lived
    threads, each running one float32 GEMM, leave the resident size where it was (a
    buffer kept per ended thread would add ~125 MiB).  Variants without the own kernel
    allocate no buffer and pass trivially."""
    import importlib
    import threading
    from fastnn.cpu import load_order
    mod = importlib.import_module(f"fastnn._cpu.{load_order()[0]}.dense")
    a = np.ones((48, 384), np.float32)
    b = np.ones((384, 512), np.float32)      # one whole 384 x 512 block: every buffer page

    def work():
        c = np.zeros((48, 512), np.float32)
        mod._gemm_hook(False, False, 1.0, a, b, 0.0, c)
        assert c[0, 0] == 384.0

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    for _ in range(5):        # warm up the allocator's arenas
        t = threading.Thread(target=work)
        t.start()
        t.join()
    before = rss()
    for _ in range(150):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    grown = rss() - before
    assert grown < 40 << 20, f"resident size grew {grown / 2**20:.0f} MiB over 150 threads"


# ---------------------------------------------------------------- few-row linear
# linear() with fewer than 24 rows (the own GEMM's lower bound) in float32 runs
# fnn_skinny.h's dot tiles on an (out, in) weight and its row-strip tiles on an (in, out)
# one (GPT-2's Conv1D layout) in the avx512 build; linear_backward takes d_input on the
# row-strip tiles (Linear's weight) or the dot tiles (GPT-2's), and d_weight below 16 rows
# on the outer-product tiles.  The other builds and FASTNN_SGEMM=blas keep BLAS.
# Shapes cross the tiles' edges: 4- and 8-row groups, 4-column dot tiles, 32/64-column
# strips and the aligning head chunk, 16-float k steps, the 8192-float k block.
FEW_ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 13, 23]
FEW_SHAPES = [(1, 1), (15, 5), (16, 17), (100, 33), (769, 130), (8200, 19)]   # (in, out)


def _few_check(mod, M, K, N, io, bias, seed=0, lead=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32) if bias else None
    weight = np.ascontiguousarray(w.T).T if io else w      # io: GPT-2's (in, out), as its .T
    xin = x.reshape(lead + (K,)) if lead else x
    y, saved = mod.linear(xin, weight, b)
    assert y.shape == xin.shape[:-1] + (N,) and y.dtype == np.float32
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    _within(y.reshape(M, N), x64 @ w64.T + (0 if b is None else b),
            np.abs(x64) @ np.abs(w64.T) + (0 if b is None else np.abs(b)), K,
            f"y M={M} K={K} N={N} io={io}")
    assert saved[0] is xin and saved[1] is weight
    dy = rng.standard_normal((M, N)).astype(np.float32)
    dx, dw, db = mod.linear_backward(dy.reshape(xin.shape[:-1] + (N,)), saved)
    d64 = dy.astype(np.float64)
    _within(dx.reshape(M, K), d64 @ w64, np.abs(d64) @ np.abs(w64), N, f"dx M={M} io={io}")
    assert dw.shape == weight.shape and (dw.T if io else dw).flags.c_contiguous
    _within(dw, d64.T @ x64, np.abs(d64.T) @ np.abs(x64), M, f"dw M={M} io={io}")
    if b is not None:
        _within(db, d64.sum(0), np.abs(d64).sum(0), M, f"db M={M}")
    else:
        assert db is None
    return y


def _within(got, want, mag, n, what):
    """|got - want| within the float32 bound of a length-n sum of terms of size mag."""
    tol = (n + 4) * np.finfo(np.float32).eps * mag + 1e-30
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= tol), f"{what}: max err/tol {np.max(err / tol):.3g}"


@pytest.mark.parametrize("mod", MODS)
@pytest.mark.parametrize("io", [False, True], ids=["out_in", "in_out"])
@pytest.mark.parametrize("shape", FEW_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_few_row_linear_against_float64(mod, io, shape):
    K, N = shape
    for M in FEW_ROWS:
        _few_check(mod, M, K, N, io, bias=M % 2 == 1, seed=M)


@pytest.mark.parametrize("mod", MODS)
def test_few_row_linear_route(mod):
    """Which kernel a few-row float32 linear forward runs: the avx512 build's few-row
    kernels up to 23 rows (two rows on an (out, in) weight excepted); the avx2 build's
    skinny kernels up to 23 rows on an (out, in) weight and 6 on an (in, out) one; the
    GEMM otherwise (and under _use_own_sgemm(False) / _use_few_rows_avx2(False), in the
    base build, and in float64)."""
    w = np.zeros((64, 32), np.float32)
    wio = np.zeros((32, 64), np.float32).T
    own_gemm = mod._use_own_sgemm(True)
    avx2 = mod._use_few_rows_avx2(True)      # True only where the avx512 kernels are not
    own = own_gemm and not avx2              # the avx512 build's few-row kernels
    try:
        for rows, weight, want, want2 in [
                (1, w, "few_rows", "few_rows"), (2, w, "gemm", "few_rows"),
                (3, w, "few_rows", "few_rows"), (8, w, "few_rows", "few_rows"),
                (9, w, "few_rows", "few_rows"), (23, w, "few_rows", "few_rows"),
                (24, w, "gemm", "gemm"),
                (2, wio, "few_rows", "few_rows"), (1, wio, "few_rows", "few_rows"),
                (6, wio, "few_rows", "few_rows"), (7, wio, "few_rows", "gemm"),
                (23, wio, "few_rows", "gemm"), (24, wio, "gemm", "gemm")]:
            x = np.zeros((rows, 32), np.float32)
            expect = want if own else want2 if avx2 else "gemm"
            assert mod._linear_route(x, weight) == expect, (rows, expect)
        x3 = np.zeros((2, 3, 32), np.float32)                       # 6 rows
        assert mod._linear_route(x3, w) == ("few_rows" if own or avx2 else "gemm")
        assert mod._linear_route(np.zeros((8, 32)), np.zeros((64, 32))) == "gemm"
        if own:
            mod._use_own_sgemm(False)
            assert mod._linear_route(np.zeros((8, 32), np.float32), w) == "gemm"
        if avx2:
            mod._use_few_rows_avx2(False)
            assert mod._linear_route(np.zeros((4, 32), np.float32), w) == "gemm"
    finally:
        mod._use_own_sgemm(mod._own_sgemm_default())
        mod._use_few_rows_avx2(mod._own_sgemm_default())


@pytest.mark.parametrize("mod", MODS)
def test_few_row_linear_leading_dims_and_blas_agree(mod):
    """(2, 3, in) input: 6 rows; the few-row kernels and BLAS within float32 of each
    other (both checked against float64)."""
    own = _few_check(mod, 6, 300, 70, False, True, seed=9, lead=(2, 3))
    if mod._use_own_sgemm(False) is False:
        try:
            blas = _few_check(mod, 6, 300, 70, False, True, seed=9, lead=(2, 3))
        finally:
            mod._use_own_sgemm(mod._own_sgemm_default())
        np.testing.assert_allclose(own, blas, rtol=1e-4, atol=1e-4 * np.sqrt(300))


def test_few_row_linear_bits_do_not_depend_on_threads():
    """Every output is one tile's sum in k order (then the k blocks in order): 1 and 2
    threads, and a column range alone, give the same bits."""
    import fastnn
    from fastnn.cpu import load_order
    import importlib
    mod = importlib.import_module(f"fastnn._cpu.{load_order()[0]}.dense")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 9000)).astype(np.float32)     # two k blocks
    w = rng.standard_normal((515, 9000)).astype(np.float32)
    b = rng.standard_normal(515).astype(np.float32)
    if mod._linear_route(x, w) != "few_rows":
        pytest.skip("this build has no few-row kernels (the base build: BLAS, which "
                    "promises no such bits)")
    wio = np.ascontiguousarray(w[:, :700].T).T        # GPT-2's layout: (in, out) as .T
    xio, dy = x[:, :700].copy(), rng.standard_normal((7, 515)).astype(np.float32)
    n = fastnn.get_num_threads()
    runs = []
    try:
        for t in (1, 2):
            fastnn.set_num_threads(t)
            y, sv = mod.linear(xio, wio, b)
            runs.append((mod.linear(x, w, b)[0], y) + tuple(mod.linear_backward(dy, sv)))
    finally:
        fastnn.set_num_threads(n)
    for a, c in zip(*runs):
        np.testing.assert_array_equal(a, c)
    one = runs[0][0]
    part = mod.linear(x, np.ascontiguousarray(w[101:300]), b[101:300])[0]
    np.testing.assert_array_equal(part, one[:, 101:300])


def _fails_then_recovers(mod, fn):
    """fn() raises MemoryError when the next allocation fails, and the next call (no
    failure injected) gives the undisturbed result."""
    want = fn()
    mod._fail_allocation(0)
    try:
        with pytest.raises(MemoryError):
            fn()
    finally:
        mod._fail_allocation(-1)
    for g, w_ in zip(fn(), want):
        np.testing.assert_array_equal(g, w_)


def test_few_row_linear_out_of_memory():
    """The few-row kernels' scratch failing to allocate is a MemoryError, and the next call
    (no failure injected) gives the undisturbed result."""
    from fastnn.cpu import load_order
    import importlib
    mod = importlib.import_module(f"fastnn._cpu.{load_order()[0]}.dense")
    x = np.ones((5, 64), np.float32)
    w = np.ones((40, 64), np.float32)
    wio = np.ones((64, 40), np.float32).T
    if mod._linear_route(x, w) != "few_rows":
        pytest.skip("this build has no few-row kernels (the base build)")
    if mod._use_few_rows_avx2(mod._own_sgemm_default()):
        # the avx2 build: its (out, in) dot rows allocate nothing; the (in, out) pass
        # takes its partial sums from the checked allocator
        _fails_then_recovers(mod, lambda: mod.linear(x, wio, None)[:1])
        return
    # the avx512 build: the packed input rows; linear_backward of GPT-2's (in, out)
    # weight, its d_input on the dot tiles
    _fails_then_recovers(mod, lambda: mod.linear(x, w, None)[:1])
    saved = mod.linear(x, wio, None)[1]
    dy = np.ones((5, 40), np.float32)
    _fails_then_recovers(mod, lambda: mod.linear_backward(dy, saved))
