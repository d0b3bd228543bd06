"""Concurrency: GIL release, thread safety, determinism across thread counts, no
oversubscription.  Every op / module of tests/reliability_registry.py takes part (the
only thread-count determinism tests of the ops: a configuration a family needs checked is
one more seed in its ``Op(threads=...)``).

* 8 Python threads run forward+backward of different modules at once and get exactly
  the serial results (bit for bit).
* The compiled kernels release the GIL: with the interpreter's switch interval raised
  to 1 s (so a thread holding the GIL is practically never preempted), a pure-Python
  thread still makes progress while another thread is inside the kernels.
* Results are bit-identical for 1, 2 and 3 OpenMP threads (large inputs, so the
  kernels actually split the work).
* fastnn.set_num_threads sets the OpenMP loops and the BLAS pool together (checked
  with threadpoolctl), and the default makes them agree too.
"""
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import fastnn
from harness import as_tuple
from reliability_registry import FUZZ, MODULES, RngDraw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def restore_threads():
    old = fastnn.get_num_threads()
    yield
    fastnn.set_num_threads(old)


def _fwd_bwd(op, args, kwargs, seed=0):
    if op.random:
        fastnn.manual_seed(seed)
    out, ctx = op.fwd(*args, **kwargs)
    if op.bwd is None:
        return as_tuple(out)
    g = tuple(np.full(np.shape(o), 0.5, np.asarray(o).dtype) + np.linspace(
        -1, 1, np.size(o)).reshape(np.shape(o)).astype(np.asarray(o).dtype) for o in as_tuple(out))
    grads = op.bwd(ctx, g if isinstance(out, tuple) else g[0])
    return as_tuple(out) + tuple(x for x in as_tuple(grads) if x is not None)


def _big(op, dtype=np.float32, seed=None):
    """The large inputs of ``op`` (its first ``threads`` seed unless given)."""
    args, kwargs = op.draw(RngDraw(op.threads[0] if seed is None else seed, big=True), dtype)
    return list(args), dict(kwargs)


# (op, seed) for every large configuration; the first seed of an op keeps its plain id
BIG = [pytest.param(op, seed, id=op.name if k == 0 else f"{op.name}-seed{seed}")
       for op in FUZZ for k, seed in enumerate(op.threads)]


# ------------------------------------------------------------------ determinism
def _compare_thread_counts(op, seed, dtype, set_threads):
    args, kwargs = _big(op, dtype, seed)
    results = {}
    for n in (1, 2, 3):
        set_threads(n)
        results[n] = _fwd_bwd(op, args, kwargs)
    for n in (2, 3):
        assert len(results[n]) == len(results[1])
        for i, (a, b) in enumerate(zip(results[n], results[1])):
            np.testing.assert_array_equal(
                np.asarray(a), np.asarray(b),
                err_msg=f"{op.name}: result {i} with {n} threads differs from 1 thread")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op,seed", BIG)
def test_same_result_for_any_openmp_thread_count(op, seed, dtype, restore_threads):
    """fastnn's own OpenMP loops (BLAS pool held at one thread): bit-identical for 1, 2, 3."""
    from fastnn import _threads
    from fastnn.cpu import compiled_modules
    _threads.set_blas_threads(1)

    def set_omp(n):
        for m in compiled_modules():
            m._set_num_threads(n)

    _compare_thread_counts(op, seed, dtype, set_omp)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op,seed", BIG)
def test_same_result_for_any_set_num_threads(op, seed, dtype, restore_threads):
    """fastnn.set_num_threads(n) (OpenMP and BLAS together): bit-identical for 1, 2, 3."""
    _compare_thread_counts(op, seed, dtype, fastnn.set_num_threads)


@pytest.mark.parametrize("shape", [(1024, 512, 128), (1024, 128, 384), (300, 200, 96),
                                   (64, 4096, 1000), (2100, 96, 40), (200, 64, 700)], ids=str)
def test_linear_gemm_blocks_same_result_for_any_thread_count(shape, restore_threads):
    """The GEMM splits of linear (row blocks, short-C row blocks, column blocks of a
    narrow layer's weight gradient; uneven blocks (2100 rows in 4); the bias filled per
    block) depend on the shape only: bit-identical results."""
    import fastnn.functional as F
    rows, n_in, n_out = shape
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    dy = rng.standard_normal((rows, n_out)).astype(np.float32)
    res = {}
    for n in (1, 2, 3):
        fastnn.set_num_threads(n)
        y, ctx = F.linear_fwd(x, w, b)
        res[n] = (y,) + tuple(F.linear_bwd(ctx, dy))
    for n in (2, 3):
        for a, c in zip(res[n], res[1]):
            np.testing.assert_array_equal(a, c)
    y64 = x.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(res[1][0], y64, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(res[1][2], dy.T.astype(np.float64) @ x, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(res[1][1], dy.astype(np.float64) @ w, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(res[1][3], dy.astype(np.float64).sum(0), rtol=1e-5, atol=1e-3)


def test_linear_gemm_blocks_rule():
    """Blocks of >= 512 rows (each single-threaded BLAS call packs the shared operand again:
    256-row blocks cost 3-13% more than 1024-row ones), an even count, at most 16; a short
    C in halves, a shorter one in column blocks; small products in one call."""
    from fastnn.cpu import compiled_modules
    dense = next(m for m in compiled_modules() if m.__name__.endswith(".dense"))
    split = dense._gemm_split
    assert split(4096, 3072, 768) == (8, 1)      # the benchmark's linear (was 16 x 1)
    assert split(3072, 768, 4096) == (6, 1)      # its weight gradient
    assert split(1024, 384, 128) == (2, 1)       # the GPT demo's 1024 tokens (was 4 x 1)
    assert split(65536, 64, 64) == (16, 1)       # capped at 16
    assert split(2100, 96, 40) == (4, 1)
    assert split(768, 512, 1024) == (2, 1)       # a short C: halves, not 6 blocks of 128
    assert split(200, 700, 64) == (1, 2)         # shorter still: column blocks
    assert split(128, 4096, 1024) == (1, 8)
    assert split(64, 64, 32) == (1, 1)           # small: one BLAS call
    assert split(8, 768, 768) == (1, 8)          # skinny: narrow blocks (unpacked kernel)
    assert split(64, 3072, 768) == (1, 8)



def test_linear_backward_team_with_a_frozen_weight(restore_threads):
    """The backward's d_input and d_weight blocks share one parallel region; products that
    are each one block stay on the calling thread.  A frozen weight (no d_weight blocks)
    must not make d_input's two blocks look small: the GPT demo's 1024-token backward ran
    on one of two threads (637 us, 326 us on two)."""
    from fastnn.cpu import compiled_modules
    dense = next(m for m in compiled_modules() if m.__name__.endswith(".dense"))
    team = dense._linear_bwd_team
    fastnn.set_num_threads(2)
    assert team(1024, 128, 384, True, False) == 2      # frozen, GPT-2 Conv1D layout
    assert team(1024, 128, 384, False, False) == 2     # frozen, (out, in) weight
    assert team(1024, 128, 384, True, True) == 2       # 2 + 2 blocks
    assert team(64, 64, 32) == 1                       # small: one thread
    assert team(64, 64, 32, False, False) == 1
    fastnn.set_num_threads(1)
    assert team(1024, 128, 384, True, False) == 1

# ------------------------------------------------------------------ thread safety
def _build(spec, dtype, seed):
    """Built in the main thread: parameter init draws from fastnn's one global generator
    (like torch's), so modules are made before the threads start."""
    fastnn.manual_seed(seed)
    m = spec.build(dtype)
    m.train()
    return m


def _module_run(spec, dtype, iters, seed, m=None):
    m = _build(spec, dtype, seed) if m is None else m
    rng = np.random.default_rng(seed)
    inputs = list(spec.make(rng, dtype, big=True))
    res = []
    for _ in range(iters):
        m.zero_grad()
        out = m(*inputs)
        g = spec.grads(rng, out) if spec.grads else tuple(
            rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) for o in as_tuple(out))
        dx = m.backward(*g)
        res.append([np.array(o) for o in as_tuple(out)] + [np.array(d) for d in as_tuple(dx)
                                                            if d is not None]
                   + [np.array(p.grad) for p in m.parameters() if p.grad is not None])
    return res


def test_eight_threads_equal_serial():
    specs = [s for s in MODULES if not s.random]
    jobs = [(specs[i % len(specs)], (np.float32, np.float64)[(i // len(specs)) % 2], 100 + i)
            for i in range(max(8, len(specs)))]
    iters = 3
    serial = [_module_run(s, dt, iters, seed) for s, dt, seed in jobs]
    built = [_build(s, dt, seed) for s, dt, seed in jobs]
    results = [None] * len(jobs)
    errors = []
    barrier = threading.Barrier(8)

    def worker(k):
        try:
            barrier.wait()
            for j in range(k, len(jobs), 8):
                s, dt, seed = jobs[j]
                results[j] = _module_run(s, dt, iters, seed, built[j])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((k, repr(e)))
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (s, dt, _), a, b in zip(jobs, results, serial):
        for it, (ra, rb) in enumerate(zip(a, b)):
            assert len(ra) == len(rb)
            for i, (x, y) in enumerate(zip(ra, rb)):
                np.testing.assert_array_equal(
                    x, y, err_msg=f"{s.name} {np.dtype(dt)} iteration {it}: result {i} differs "
                                  f"when 8 threads run at once")


# ------------------------------------------------------------------ GIL release
def _progress_while(fn, seconds):
    """(B iterations, A calls): a Python thread B counts while this thread calls fn."""
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)   # gives the GIL back at once, so A is never kept waiting

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)   # a thread holding the GIL is not preempted for 1 s
    t = threading.Thread(target=spin)
    try:
        t.start()
        time.sleep(0.01)
        c0 = count[0]
        calls = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
            calls += 1
        c1 = count[0]
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    return c1 - c0, calls


@pytest.mark.parametrize("op", [o for o in FUZZ if o.gil], ids=str)
def test_kernels_release_the_gil(op, restore_threads):
    fastnn.set_num_threads(1)
    args, kwargs = _big(op)
    fn = lambda: _fwd_bwd(op, args, kwargs)  # noqa: E731
    fn()
    best = (0, 1)
    for _ in range(3):   # the machine is shared: a busy moment may starve thread B
        b, a = _progress_while(fn, 0.15)
        best = max(best, (b, a), key=lambda r: r[0] / max(r[1], 1))
        if b >= a:
            break
    b, a = best
    assert b >= a, (f"{op.name}: a Python thread advanced {b} times during {a} forward+backward "
                    f"calls; the kernels seem to hold the GIL")


def test_gil_check_detects_a_gil_holder():
    """The check above can fail: a loop that holds the GIL lets thread B advance ~never."""
    x = list(range(20000))
    b, a = _progress_while(lambda: sorted(x, key=lambda v: -v), 0.15)
    assert b < a, (b, a)


# ------------------------------------------------------------------ oversubscription
def _blas_threads():
    from threadpoolctl import threadpool_info
    return [(i["internal_api"], i["num_threads"]) for i in threadpool_info()
            if i["user_api"] == "blas"]


def test_set_num_threads_governs_openmp_and_blas(restore_threads):
    from fastnn.cpu import compiled_modules
    # make sure BLAS is loaded and used
    import fastnn.functional as F
    F.linear(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    assert _blas_threads(), "no BLAS library found by threadpoolctl"
    for n in (1, 2, 3):
        fastnn.set_num_threads(n)
        assert fastnn.get_num_threads() == n
        assert all(m._get_num_threads() == n for m in compiled_modules())
        assert all(t == n for _, t in _blas_threads()), \
            f"set_num_threads({n}) left BLAS at {_blas_threads()}"


@pytest.mark.parametrize("env", ["1", "2"])
def test_default_threads_agree(env):
    """Without set_num_threads, OMP_NUM_THREADS=n gives n OpenMP threads and n BLAS threads
    (BLAS is never left at its own default on top of fastnn's OpenMP threads)."""
    code = textwrap.dedent("""
        import numpy as np, fastnn, fastnn.functional as F
        from threadpoolctl import threadpool_info
        F.linear(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
        from fastnn.cpu import compiled_modules
        omp = {m._get_num_threads() for m in compiled_modules()}
        blas = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        print(fastnn.get_num_threads(), sorted(omp), sorted(blas))
    """)
    envs = dict(os.environ, OMP_NUM_THREADS=env)
    envs.pop("OPENBLAS_NUM_THREADS", None)
    envs.pop("MKL_NUM_THREADS", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=envs, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    n, omp, blas = r.stdout.strip().split(" ", 2)
    assert n == env and omp == f"[{env}]" and blas == f"[{env}]", r.stdout


def test_blas_pool_restored_after_concurrent_single_threaded_regions(restore_threads):
    """Kernels that run their GEMMs inside OpenMP regions hold BLAS at one thread for the
    call; overlapping calls from several Python threads must leave the pool at
    fastnn.get_num_threads() afterwards (not stuck at 1, not back at n mid-region)."""
    from fastnn import _threads
    fastnn.set_num_threads(2)
    seen_inside = []
    barrier = threading.Barrier(6)

    def worker(k):
        barrier.wait()
        for _ in range(50):
            with _threads.single_threaded_blas():
                seen_inside.append(_threads.blas_threads())
                time.sleep(0.0005 * (k % 3))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert set(seen_inside) == {1}, f"BLAS left multi-threaded inside a region: {set(seen_inside)}"
    assert _threads.blas_threads() == 2, f"BLAS pool stuck at {_threads.blas_threads()} threads"


@pytest.mark.parametrize("op", FUZZ, ids=str)
def test_worker_thread_equals_main_thread(op, restore_threads):
    """Large inputs, 2 threads: a call from a non-main Python thread gives the main thread's
    bits.  (threadpoolctl only lets the first thread that limited BLAS change the pool, so
    kernels that hold BLAS at one thread inside their OpenMP regions ran multi-threaded
    GEMMs when called from a worker thread -- different results and stacked threads.)"""
    fastnn.set_num_threads(2)
    args, kwargs = _big(op)
    main = _fwd_bwd(op, args, kwargs)
    out = []
    t = threading.Thread(target=lambda: out.append(_fwd_bwd(op, args, kwargs)))
    t.start()
    t.join()
    assert out, "the worker thread raised"
    for i, (a, b) in enumerate(zip(out[0], main)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b),
                                      err_msg=f"{op.name}: result {i} differs in a worker thread")
