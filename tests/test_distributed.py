"""fastnn.distributed: MPI data-parallel training (run under mpiexec in subprocesses) and
Dask batch inference.  Skipped only where mpi4py / mpiexec / dask are not installed (CI
installs mpi4py, mpich, dask and distributed)."""
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import fastnn
from fastnn import nn
from fastnn import distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastnn.__file__)))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_scripts")


def _mpiexec():
    pytest.importorskip("mpi4py.MPI", reason="mpi4py (with an MPI library) is not installed")
    exe = shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec on PATH (pip install mpich)")
    return exe


def run_mpi(script, *args, n=2, timeout=60):
    """``mpiexec -n n python script args`` (``script``: a file of tests/mpi_scripts, or a
    list of python arguments) with this checkout on the path; the whole process group is
    killed after ``timeout`` seconds (a hang fails the test instead of CI)."""
    pyargs = script if isinstance(script, list) else [os.path.join(SCRIPTS, script)]
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([_mpiexec(), "-n", str(n), sys.executable, *pyargs,
                             *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpiexec {script} hung for {timeout}s\n{out}\n{err}")
    return proc.returncode, out, err


# ---------------------------------------------------------------------- MPI training
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_ranks_train_like_one_process_on_the_whole_batch(dtype, tmp_path):
    rc, out, err = run_mpi("train_equivalence.py", dtype, tmp_path)
    assert rc == 0, out + err
    lines = sorted(line for line in out.splitlines() if line.startswith("OK rank"))
    assert [line.split()[2] for line in lines] == ["0/2", "1/2"], out + err


def test_a_failing_rank_aborts_the_job_instead_of_hanging():
    rc, out, err = run_mpi("abort.py", timeout=30)
    assert rc != 0
    assert "rank 1 fails on purpose" in err
    assert "should never have finished" not in out


@pytest.mark.parametrize("what", ["shape", "name", "dtype", "bucket"])
def test_ranks_with_different_models_all_get_the_error(what):
    rc, out, err = run_mpi("mismatch.py", what, timeout=30)
    assert rc == 0, out + err
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    kinds = ["ddp"] if what == "bucket" else ["ddp", "broadcast"]
    assert sorted(e.split(":")[0] for e in errors) == sorted(
        f"ERROR rank {r} {k}" for r in (0, 1) for k in kinds), out + err
    assert "NO ERROR" not in out
    assert all("the ranks disagree" in e and "rank 1 vs rank 0" in e for e in errors)
    if what == "name":
        assert "only rank 1 has '1.weight'" in errors[0]
    elif what == "bucket":
        assert "'bucket_mb' is 25.0 on rank 0 but 1.0 on rank 1" in errors[0]


def test_mpiexec_demo_trains_data_parallel(tmp_path):
    """``mpiexec -n 2 fastnn demo``: one progress bar and one report (rank 0), one checkpoint."""
    ckpt = tmp_path / "demo.npz"
    rc, out, err = run_mpi(["-m", "fastnn"], "demo", "--steps", "3",
                           "--batch-size", "4", "--block-size", "8", "--n-layer", "1",
                           "--n-head", "2", "--d-model", "16", "--sample-chars", "5",
                           "--eval-batches", "1", "--save-every", "0",
                           "--checkpoint", ckpt, timeout=120)
    assert rc == 0, out + err
    assert out.count("fastnn demo: char-level GPT") == 1, out
    assert "2 ranks" in out, out
    assert out.count("trained 3 steps") == 1, out
    assert (err.count("step     3/3") == 1), err
    assert ckpt.exists()


# ---------------------------------------------------------------------- in-process pieces
class _FakeComm:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("n,world", [(0, 2), (1, 3), (10, 3), (17, 4)])
def test_shard_is_disjoint_covering_and_the_same_permutation_everywhere(n, world):
    parts = [dist.shard(n, epoch=1, seed=7, comm=_FakeComm(r, world)) for r in range(world)]
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    again = dist.shard(n, epoch=1, seed=7, comm=_FakeComm(0, world))
    np.testing.assert_array_equal(again, parts[0])
    if n > 5:   # a new epoch is a new order
        assert not np.array_equal(dist.shard(n, epoch=2, seed=7, comm=_FakeComm(0, world)),
                                  parts[0])


def test_shard_bad_arguments():
    with pytest.raises(ValueError, match="n must be >= 0"):
        dist.shard(-1, comm=_FakeComm(0, 1))
    with pytest.raises(TypeError, match="epoch must be an int"):
        dist.shard(4, epoch=1.5, comm=_FakeComm(0, 1))


def test_without_mpi4py_init_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r"pip install 'fastnn\[mpi\]'"):
        dist.init()


def test_import_fastnn_imports_neither_mpi4py_nor_dask():
    code = ("import sys, fastnn, fastnn.distributed\n"
            "bad = [m for m in ('mpi4py', 'dask', 'distributed') if m in sys.modules]\n"
            "assert not bad, bad\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def _mlp(dtype=np.float64, seed=0):
    fastnn.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3)).to(dtype)


def test_ddp_world_size_one_matches_the_plain_model():
    """One process (mpi4py's singleton world): DDP is the plain model, no_sync included."""
    pytest.importorskip("mpi4py.MPI", reason="mpi4py (with an MPI library) is not installed")
    rank, world = dist.init()
    assert (rank, world) == (0, 1)
    model, plain = _mlp(), _mlp()
    ddp = dist.DistributedDataParallel(model, bucket_mb=1e-4)
    x = np.random.default_rng(0).standard_normal((6, 5))
    for m in (ddp, plain):
        with (ddp.no_sync() if m is ddp else _null()):
            m.backward(np.ones((6, 3)) + 0 * m(x))
        m.backward(np.ones((6, 3)) + 0 * m(x[:3].repeat(2, axis=0)))
    for p, q in zip(model.parameters(), plain.parameters()):
        np.testing.assert_allclose(p.grad, q.grad, rtol=1e-12, atol=1e-14)
    assert ddp.stats["reductions"] == 1 and ddp.stats["early"] >= 1
    assert "DistributedDataParallel(world_size=1" in repr(ddp)
    # the model's hooks do not keep a discarded wrapper alive (it would go on reducing)
    import weakref
    gone = weakref.ref(ddp)
    del ddp
    assert gone() is None
    ddp2 = dist.DistributedDataParallel(model)
    ddp2.backward(np.ones((6, 3)) + 0 * ddp2(x))
    assert ddp2.stats["reductions"] == 1
    ddp2.remove_hooks()
    model.backward(np.ones((6, 3)) + 0 * model(x))
    assert ddp2.stats["reductions"] == 1


class _PartlyUsed(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(3, 2)
        self.unused = nn.Linear(3, 2)

    def forward(self, x):
        return self.used(x)

    def backward(self, d):
        return self.used.backward(d)


def test_ddp_leaves_parameters_no_rank_used_without_a_gradient():
    pytest.importorskip("mpi4py.MPI", reason="mpi4py (with an MPI library) is not installed")
    model = _PartlyUsed()
    ddp = dist.DistributedDataParallel(model, bucket_mb=25)     # one bucket with both layers
    x = np.ones((4, 3), np.float32)
    ddp.backward(np.ones((4, 2), np.float32) + 0 * ddp(x))
    assert model.used.weight.grad is not None and model.used.weight.grad.dtype == np.float32
    assert model.unused.weight.grad is None and model.unused.bias.grad is None
    np.testing.assert_allclose(model.used.bias.grad, [4, 4])


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_ddp_bad_arguments():
    pytest.importorskip("mpi4py.MPI", reason="mpi4py (with an MPI library) is not installed")
    with pytest.raises(TypeError, match="module must be a fastnn Module"):
        dist.DistributedDataParallel(object())
    with pytest.raises(ValueError, match="bucket_mb must be > 0"):
        dist.DistributedDataParallel(_mlp(), bucket_mb=0)
    with pytest.raises(TypeError, match="already wrapped"):
        dist.DistributedDataParallel(dist.DistributedDataParallel(_mlp()))
    with pytest.raises(ValueError, match="root must be < the world size"):
        dist.broadcast_parameters(_mlp(), root=3)


def test_broadcast_parameters_keeps_scalar_and_read_only_buffers_scalar():
    """Buffers that cannot be broadcast in place (read-only here) go through a host copy;
    a 0-d one must come back 0-d (np.ascontiguousarray made it 1-d, and loading it back
    then failed on the shape).  One process: the world is this rank."""
    pytest.importorskip("mpi4py.MPI", reason="mpi4py (with an MPI library) is not installed")
    model = _mlp()
    scale = np.array(2.5, np.float32)
    scale.flags.writeable = False
    model.register_buffer("scale", scale)
    model.temperature = nn.Parameter(np.array(0.5, np.float32))
    dist.broadcast_parameters(model)
    sd = model.state_dict()
    assert sd["scale"].shape == () and float(sd["scale"]) == 2.5
    assert sd["temperature"].shape == () and float(sd["temperature"]) == 0.5


# ---------------------------------------------------------------------- Dask inference
def test_predict_dask_threaded_matches_the_model_and_ships_it_once(monkeypatch):
    da = pytest.importorskip("dask.array")
    import dask
    import pickle
    model = _mlp(np.float32)
    x = np.random.default_rng(1).standard_normal((53, 5)).astype(np.float32)
    xd = da.from_array(x, chunks=(7, 2))          # the column split is merged
    seen = []
    orig = nn.Sequential.forward

    def spy(self, inp):
        seen.append((fastnn.get_num_threads(), self.training))
        return orig(self, inp)

    monkeypatch.setattr(nn.Sequential, "forward", spy)
    y = dist.predict_dask(model.train(), xd, batch_size=3)
    assert y.shape == (53, 3) and y.dtype == np.float32 and y.chunks[0] == xd.chunks[0]
    # the weights appear once in the graph, not once per block (8 blocks here)
    graph_bytes = len(pickle.dumps(dict(y.__dask_graph__())))
    weight_bytes = sum(p.data.nbytes for p in model.parameters())
    assert graph_bytes < 2 * weight_bytes + 20000
    threads_before = fastnn.get_num_threads()
    seen.clear()
    with dask.config.set(num_workers=2):
        got = y.compute(scheduler="threads")
    during = list(seen)
    model.eval()
    np.testing.assert_allclose(got, model(x), rtol=1e-6, atol=1e-6)
    assert len(during) == 8 * 3 - 1 and not any(training for _, training in during)
    cores = len(os.sched_getaffinity(0))
    assert {t for t, _ in during} == {max(1, cores // 2)}
    assert fastnn.get_num_threads() == threads_before
    # the user's model was left as it was (a snapshot went into the graph)
    assert dist.predict_dask(model, xd[:0], 4).compute().shape == (0, 3)


def test_predict_dask_bad_arguments():
    da = pytest.importorskip("dask.array")
    x = da.zeros((4, 5), chunks=2)
    with pytest.raises(TypeError, match="x must be a dask array"):
        dist.predict_dask(_mlp(), np.zeros((4, 5)), 2)
    with pytest.raises(TypeError, match="model must be a fastnn Module"):
        dist.predict_dask(lambda a: a, x, 2)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        dist.predict_dask(_mlp(), x, 0)
    with pytest.raises(ValueError):
        dist.predict_dask(_mlp(), da.zeros((4, 6), chunks=2), 2)   # wrong width: caught now


# the scheduler's HTTP server binds 127.0.0.1 (the cluster's host), on 8787 or, when
# another cluster has that port, on another one with this warning
@pytest.mark.filterwarnings("ignore:Port .* is already in use")
def test_predict_dask_on_a_local_cluster_of_two_processes():
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    from fastnn.models import BertEncoder
    fastnn.manual_seed(0)
    model = BertEncoder(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=12)
    ids = np.random.default_rng(2).integers(0, 50, size=(20, 12))
    # the scheduler's active memory manager (on by default) drops a replica no task waits
    # for any more every 2 s: on a slow machine the broadcast model was gone from one
    # worker by the time the test counted the copies ({worker 1: 1, worker 2: 0})
    import dask
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None, host="127.0.0.1",
                                     memory_limit="1GiB") as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2)          # the broadcast reaches the workers up by then
        y = dist.predict_dask(model, da.from_array(ids, chunks=(5, 12)), batch_size=4)
        assert not any("fastnn-model" in str(k) for k in y.__dask_graph__())  # scattered
        got = y.compute()
        # each of the two workers holds the model once (not a copy per block)
        held = client.run(lambda dask_worker: sum(
            type(v).__name__ == "BertEncoder" for v in dask_worker.data.values()))
        assert sorted(held.values()) == [1, 1], held
    model.eval()
    np.testing.assert_allclose(got, model(ids), rtol=1e-5, atol=1e-5)
