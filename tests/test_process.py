"""Process hygiene of the compiled kernels: fork, thread control the ecosystem's way, and
memory pressure (issue #13, RELIABILITY.md "Process hygiene").

Every check that could hang (a forked child waiting for the parent's OpenMP pool, a
library looping on a failed mmap) runs in a subprocess of its own session under a time
limit; on timeout the whole process group is killed and the test fails.
"""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastnn

pytest.importorskip("threadpoolctl")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))

try:
    from fastnn.cpu import compiled_modules
    compiled_modules()
except ImportError:  # pragma: no cover - CI builds the kernels
    pytest.skip("the compiled cpu kernels are not built", allow_module_level=True)

# fork and GNU OpenMP, RLIMIT_AS and /proc: what these tests exercise is Linux's
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="Linux process behaviour (fork + libgomp, RLIMIT_AS, /proc)")

# big enough that the kernels split the work over 2 threads
_SETUP = textwrap.dedent("""
    import os, sys
    import numpy as np
    import fastnn, fastnn.functional as F
    from fastnn.cpu import compiled_modules
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    xc = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    wc = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)

    def work():
        y, ctx = F.layer_norm_fwd(x, (1024,), w, b)
        yc, ctxc = F.conv2d_fwd(xc, wc, None, padding=1)
        return (y,) + tuple(F.layer_norm_bwd(ctx, y)) + (yc,) + tuple(
            g for g in F.conv2d_bwd(ctxc, yc) if g is not None)

    def same(a, b):
        return len(a) == len(b) and all(np.array_equal(p, q) for p, q in zip(a, b))
""")


def _run(code, timeout=60, env=None):
    """Run ``code`` in a fresh interpreter (its own session); kill the whole process group
    -- forked children included -- and fail if it does not finish in ``timeout`` s."""
    envs = dict(os.environ if env is None else env)
    envs["PYTHONPATH"] = os.pathsep.join([ROOT, TESTS, envs.get("PYTHONPATH", "")])
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=envs, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"hung (killed after {timeout} s)\nstdout:\n{out}\nstderr:\n{err[-3000:]}")
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
    return out


# ------------------------------------------------------------------ fork
@linux_only
def test_os_fork_child_after_two_threads():
    """After the kernels ran on 2 threads, an os.fork() child gets the parent's results
    (it hung forever in its first parallel region: libgomp's pool does not survive fork),
    on 2 threads of its own; the parent goes on working too."""
    out = _run(_SETUP + textwrap.dedent("""
        fastnn.set_num_threads(2)
        ref = work()
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = same(work(), ref) and same(work(), ref)
            os.write(wfd, b"%d %d" % (ok, compiled_modules()[0]._threads_used(1 << 30, 1)))
            os._exit(0)
        os.close(wfd)
        msg = os.read(r, 100).decode()
        os.waitpid(pid, 0)
        assert same(work(), ref)
        print(msg)
    """))
    ok, team = out.split()
    assert ok == "1", "the forked child's results differ from the parent's"
    assert team == "2", f"the forked child runs {team} threads, expected the parent's 2"


@linux_only
def test_fork_pool_after_two_threads():
    """multiprocessing.Pool with the fork start method (Linux's default before 3.14)."""
    out = _run(_SETUP + textwrap.dedent("""
        import multiprocessing as mp
        fastnn.set_num_threads(2)
        ref = work()

        def task(i):
            return same(work(), ref)

        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(task, range(4)))
    """))
    assert out.strip() == "[True, True, True, True]", out


@linux_only
def test_fork_child_serial_where_the_pool_cannot_be_released():
    """Where the OpenMP runtime cannot drop its pool before fork (libgomp older than
    GCC 10), the child runs every kernel on its calling thread: same results, no hang."""
    out = _run(_SETUP + textwrap.dedent("""
        from fastnn import _threads
        _threads._release_openmp_pool = lambda: False
        fastnn.set_num_threads(2)
        ref = work()
        pid = os.fork()
        if pid == 0:
            mod = compiled_modules()[0]
            code = 0 if same(work(), ref) and mod._threads_used(1 << 30, 1) == 1 else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """))
    assert out.strip() == "0", "the serial child failed"


# ------------------------------------------------------------------ thread control
@pytest.fixture
def restore_threads():
    old = fastnn.get_num_threads()
    yield
    fastnn.set_num_threads(old)


@pytest.mark.parametrize("user_api", [None, "openmp"])
def test_threadpool_limits_govern_the_kernels(user_api, restore_threads):
    """Inside threadpoolctl.threadpool_limits(1) every family's parallel regions get one
    thread (they ran on 2 before), and the count comes back afterwards."""
    from threadpoolctl import threadpool_limits
    fastnn.set_num_threads(2)
    mods = compiled_modules()
    assert {m._threads_used(1 << 30, 1) for m in mods} == {2}
    with threadpool_limits(1, user_api=user_api):
        assert fastnn.get_num_threads() == 1
        assert {m._threads_used(1 << 30, 1) for m in mods} == {1}
    assert fastnn.get_num_threads() == 2
    assert {m._threads_used(1 << 30, 1) for m in mods} == {2}


def test_threadpool_limits_before_the_first_kernel_call():
    """A fresh process that enters threadpool_limits(1) before any kernel ran: the kernels
    (loaded by the first call, inside the block) still get one thread.  threadpoolctl only
    sees the OpenMP runtime if it is loaded when the block starts: import fastnn loads it."""
    out = _run(textwrap.dedent("""
        import numpy as np, fastnn, fastnn.functional as F
        from threadpoolctl import threadpool_limits
        with threadpool_limits(1):
            n = fastnn.get_num_threads()
            F.layer_norm(np.ones((512, 1024), np.float32), (1024,))
            from fastnn.cpu import compiled_modules
            used = {m._threads_used(1 << 30, 1) for m in compiled_modules()}
        print(n, sorted(used))
    """))
    assert out.strip() == "1 [1]", out


def test_threadpool_limits_blas_governs_the_gemms(restore_threads):
    """user_api="blas": the BLAS every kernel GEMM runs on is held at the limit (the shell's
    big GEMMs) and fastnn does not put it back up inside the block."""
    from threadpoolctl import threadpool_limits, threadpool_info
    import fastnn.functional as F
    fastnn.set_num_threads(2)
    x = np.ones((256, 256), np.float32)
    with threadpool_limits(1, user_api="blas"):
        F.linear(x, x)
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == {1}
    assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == {2}


def _kernels_openmp_path():
    """Real path of the OpenMP runtime fastnn's kernels are bound to (other packages may
    load their own copies -- scikit-learn vendors a libgomp -- which fastnn leaves alone)."""
    import ctypes
    from fastnn.cpu import openmp_module
    ext = ctypes.CDLL(openmp_module().__file__)
    addr = ctypes.cast(ext.omp_get_max_threads, ctypes.c_void_p).value

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    info = DlInfo()
    assert ctypes.CDLL(None).dladdr(ctypes.c_void_p(addr), ctypes.byref(info))
    return os.path.realpath(info.dli_fname.decode())


def test_set_num_threads_shows_in_threadpool_info(restore_threads):
    from threadpoolctl import threadpool_info
    ours = _kernels_openmp_path()
    for n in (1, 3, 2):
        fastnn.set_num_threads(n)
        omp = {i["num_threads"] for i in threadpool_info()
               if i["user_api"] == "openmp" and os.path.realpath(i["filepath"]) == ours}
        assert omp == {n}, f"set_num_threads({n}) but threadpool_info says {omp} for {ours}"


def test_set_num_threads_is_process_wide(restore_threads):
    """Set from one thread, applied in every thread at its next kernel call."""
    import threading
    mod = compiled_modules()[0]
    for n in (1, 2):
        fastnn.set_num_threads(n)
        out = []
        t = threading.Thread(target=lambda: out.append(mod._threads_used(1 << 30, 1)))
        t.start()
        t.join()
        assert out == [n]


_COUNT_THREADS = textwrap.dedent("""
    import os
    def os_threads():
        return len(os.listdir("/proc/self/task"))
    import numpy as np, fastnn, fastnn.functional as F
    from fastnn.cpu import compiled_modules
    compiled_modules()
    from test_threads import _big, _fwd_bwd
    from reliability_registry import FUZZ
    cases = [(op, _big(op)) for op in FUZZ]

    def call(op, args, kwargs):   # fresh copies: batch_norm updates its running statistics
        return _fwd_bwd(op, [a.copy() if isinstance(a, np.ndarray) else a for a in args],
                        kwargs)

    def run_all():
        for op, (args, kwargs) in cases:
            call(op, args, kwargs)

    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize"):
                return int(line.split()[1]) * 1024
""")


@linux_only
def test_threads_actually_used_under_limits():
    """Measured, not asked: under threadpool_limits(1) (and with OMP_NUM_THREADS=1) every
    op's forward and backward on large inputs starts no OpenMP worker thread at all."""
    out = _run(_COUNT_THREADS + textwrap.dedent("""
        from threadpoolctl import threadpool_limits
        before = os_threads()
        with threadpool_limits(1):
            run_all()
        print(before, os_threads())
    """), timeout=300)
    before, after = out.split()
    assert before == after, f"OpenMP started {int(after) - int(before)} threads under limits(1)"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = _run(_COUNT_THREADS + "before = os_threads(); run_all(); print(before, os_threads())",
               timeout=300, env=env)
    before, after = out.split()
    assert before == after, f"OpenMP started {int(after) - int(before)} threads with OMP_NUM_THREADS=1"


# ------------------------------------------------------------------ memory pressure
@linux_only
def test_first_kernel_call_under_address_space_limit_raises():
    """A fresh process, RLIMIT_AS a few tens of MB above current use: the first F.conv2d
    (which loads the kernels) raised nothing and hung forever; now MemoryError, and the
    kernels load and run once the limit is lifted."""
    out = _run(textwrap.dedent("""
        import resource, numpy as np, fastnn, fastnn.functional as F
        def vm():
            for line in open("/proc/self/status"):
                if line.startswith("VmSize"):
                    return int(line.split()[1]) * 1024
        x = np.ones((2, 3, 8, 8), np.float32); w = np.ones((4, 3, 3, 3), np.float32)
        resource.setrlimit(resource.RLIMIT_AS, (vm() + (40 << 20), resource.RLIM_INFINITY))
        try:
            F.conv2d(x, w)
            print("ran")
        except MemoryError:
            print("MemoryError")
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        y = F.conv2d(x, w)
        print(fastnn.get_backend(), float(y[0, 0, 0, 0]))
    """), timeout=90)
    first, second = out.strip().splitlines()
    assert first in ("MemoryError", "ran")
    assert second == "cpu 27.0", f"after the limit: {second} (the backend must not fall back)"


# every registry op (cases, call) at each budget (MiB of RLIMIT_AS above current use):
# each call must give ``ref``'s bits or MemoryError -> (results, MemoryErrors)
_UNDER_LIMITS = textwrap.dedent("""
    import resource

    def under_limits(ref, budgets):
        results = errors = 0
        for budget_mib in budgets:
            for (op, (a, k)), want in zip(cases, ref):
                resource.setrlimit(resource.RLIMIT_AS,
                                   (vm() + (budget_mib << 20), resource.RLIM_INFINITY))
                try:
                    got = call(op, a, k)
                except MemoryError:
                    errors += 1
                    continue
                finally:
                    resource.setrlimit(resource.RLIMIT_AS,
                                       (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                results += 1
                assert len(got) == len(want), op.name
                for g, w_ in zip(got, want):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w_), err_msg=op.name)
        return results, errors
""")


@linux_only
def test_every_op_under_growing_address_space_limits():
    """Every op family, forward and backward, large inputs on 2 threads, at growing
    RLIMIT_AS budgets above current use: each call gives the unlimited run's bits or a
    MemoryError -- never a hang, a crash or a wrong result -- and the process goes on."""
    out = _run(_COUNT_THREADS + _UNDER_LIMITS + textwrap.dedent("""
        fastnn.set_num_threads(2)
        ref = [call(op, a, k) for op, (a, k) in cases]
        print(*under_limits(ref, (0, 1, 2, 4, 8, 16, 64)))
    """), timeout=240)
    results, errors = map(int, out.split())
    assert errors > 0, "no budget was tight enough to fail an allocation"
    assert results > 0, "no budget was loose enough to run"


@linux_only
@pytest.mark.parametrize("route", ["own", "blas"])
def test_a_workers_first_gemm_under_address_space_limits(route):
    """The worker thread of a 2-thread pool that has never run a GEMM (the unlimited run
    was on one thread) takes its first GEMMs under tight RLIMIT_AS budgets: the own
    kernel's packing buffer, or (route "blas": FASTNN_SGEMM=blas, every float32 product
    on BLAS) the BLAS library's per-thread buffer.  OpenBLAS ends the process when that
    buffer cannot be mapped ("Memory allocation still failed after 10 retries"), and the
    C library aborts when a module's thread-local block cannot be allocated: fastnn checks
    for room first and raises MemoryError.  Each call: the unlimited run's bits or
    MemoryError, and the process goes on.  In a full run the worker usually took its
    buffers during the 2-thread warm-up of the test above, and the crash came only when
    the scheduler gave it no GEMM there."""
    env = dict(os.environ)
    env.pop("FASTNN_SGEMM", None)
    if route == "blas":
        env["FASTNN_SGEMM"] = "blas"
    out = _run(_COUNT_THREADS + _UNDER_LIMITS + textwrap.dedent("""
        fastnn.set_num_threads(2)
        F.relu(np.ones(1 << 22, np.float32))     # the 2-thread pool exists, no GEMM run
        fastnn.set_num_threads(1)
        ref = [call(op, a, k) for op, (a, k) in cases]
        fastnn.set_num_threads(2)
        print(*under_limits(ref, (0, 1, 4, 16, 64, 256)))
    """), timeout=240, env=env)
    results, errors = map(int, out.split())
    assert results > 0 and errors > 0, (results, errors)


_FRESH_THREAD = textwrap.dedent("""
    import threading

    def in_fresh_thread(budget_mib, fn):
        # fn() as the first kernel call of a Python thread started before the limit
        # (its own stack is in place), under RLIMIT_AS at current use + budget_mib
        out, go = {}, threading.Event()

        def body():
            go.wait()
            try:
                out["got"] = fn()
            except MemoryError:
                out["got"] = MemoryError
        t = threading.Thread(target=body)
        t.start()
        resource.setrlimit(resource.RLIMIT_AS,
                           (vm() + (budget_mib << 20), resource.RLIM_INFINITY))
        try:
            go.set()
            t.join()
        finally:
            resource.setrlimit(resource.RLIMIT_AS,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return out["got"]
""")


@linux_only
def test_a_python_threads_first_kernel_call_under_address_space_limits():
    """A Python thread's first kernel call starts its own OpenMP pool: libgomp creates the
    workers then, one stack each (8 MiB by default), and ends the process when it cannot
    ("libgomp: Thread creation failed", exit 1) -- what a request handler's first call did
    under an RLIMIT_AS a few MiB above current use.  fastnn checks that the workers'
    stacks fit first (csrc/fnn_team.h) and runs the call on the calling thread when they
    do not.  Every op, each call from a new thread at 0-64 MiB above current use: the
    unlimited run's bits or MemoryError, the process goes on; with no room for a worker
    the memory-light ReLU still runs, on one thread (no worker started), and once the
    limit is lifted a new thread gets its 2-thread pool."""
    out = _run(_COUNT_THREADS + _UNDER_LIMITS + _FRESH_THREAD + textwrap.dedent("""
        fastnn.set_num_threads(2)
        x = np.linspace(-1, 1, 1 << 22, dtype=np.float32)
        want = F.relu(x)                           # the main thread's pool exists
        ref = [call(op, a, k) for op, (a, k) in cases]

        def relu_threads():
            y = F.relu(x)
            return y, os_threads()
        base = os_threads()                         # main + its worker
        got = in_fresh_thread(0, relu_threads)
        assert got is not MemoryError, "relu at budget 0 raised"
        np.testing.assert_array_equal(got[0], want)
        assert got[1] == base + 1, (got[1], base)   # the new thread alone, no worker
        got = in_fresh_thread(1 << 20, relu_threads)
        np.testing.assert_array_equal(got[0], want)
        assert got[1] == base + 2, (got[1], base)   # the new thread and its worker

        results = errors = 0
        for budget in (0, 2, 8, 16, 64):
            for (op, (a, k)), w in zip(cases, ref):
                got = in_fresh_thread(budget, lambda: call(op, a, k))
                if got is MemoryError:
                    errors += 1
                    continue
                results += 1
                for g, w_ in zip(got, w):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w_),
                                                  err_msg=op.name)
        print(results, errors)
    """), timeout=300)
    results, errors = map(int, out.split())
    assert results > 0, (results, errors)


@linux_only
def test_every_allocation_site_failing_raises_memory_error():
    """Fault injection (fnn_alloc.h's countdown): every scratch allocation of every op,
    forward and backward, both dtypes, 2 threads, fails in turn -- in the Python-facing
    code and inside parallel regions.  Each call raises MemoryError (a failure is never
    swallowed into a wrong result), nothing hangs or crashes, and once no failure is
    injected the result equals the undisturbed one.  The sites freed what they had taken:
    glibc's in-use heap does not grow over repeated failures."""
    out = _run(_COUNT_THREADS + textwrap.dedent("""
        import ctypes, gc
        fastnn.set_num_threads(2)
        mods = compiled_modules()

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]
        libc = ctypes.CDLL(None)
        mallinfo2 = getattr(libc, "mallinfo2", None)
        if mallinfo2 is not None:
            mallinfo2.restype = MallInfo2
        def in_use():
            gc.collect()
            m = mallinfo2()
            return m.uordblks + m.hblkhd

        sites = 0
        leak_checked = 0
        for dtype in (np.float32, np.float64):
            for op in FUZZ:
                args, kwargs = _big(op, dtype)
                want = call(op, args, kwargs)
                for k in range(400):
                    for m in mods:
                        m._fail_allocation(k)
                    raised = False
                    try:
                        got = call(op, args, kwargs)
                    except MemoryError:
                        raised = True
                    fired = [m._fail_allocation(-1) < 0 for m in mods]
                    if any(fired):
                        assert raised, f"{op.name}: allocation {k} failed and no MemoryError"
                        sites += 1
                        if mallinfo2 is not None and k <= 1 and dtype is np.float32:
                            def fail_20_times():
                                for _ in range(20):
                                    for m in mods:
                                        m._fail_allocation(k)
                                    try:
                                        call(op, args, kwargs)
                                    except MemoryError:
                                        pass
                                    for m in mods:
                                        m._fail_allocation(-1)
                            # a first round may hand a pool thread its first GEMM and so
                            # its per-thread packing buffer (1.3 MiB, kept until the
                            # thread ends: a cache, not a leak -- seen once in CI); the
                            # second round must not grow the heap
                            fail_20_times()
                            before = in_use()
                            fail_20_times()
                            grown = in_use() - before
                            assert grown < (1 << 20), f"{op.name}: {grown} bytes kept"
                            leak_checked += 1
                        continue
                    assert not raised, f"{op.name}: MemoryError without an injected failure"
                    for g, w_ in zip(got, want):
                        np.testing.assert_array_equal(np.asarray(g), np.asarray(w_),
                                                      err_msg=op.name)
                    break
                else:
                    raise AssertionError(f"{op.name}: more than 400 allocations")
        print(sites, leak_checked)
    """), timeout=300)
    sites, leak_checked = map(int, out.split())
    print(f"[process] {sites} injected allocation failures, {leak_checked} leak checks")
    assert sites >= 20, f"only {sites} injected failures: the hook does not reach the kernels"
