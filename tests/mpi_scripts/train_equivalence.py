"""Run under ``mpiexec -n 2``: data-parallel AdamW steps on a batch split over the ranks give
the parameters of one process training on the whole batch, and every rank ends with the
same bits.  Also: no_sync gradient accumulation, and a checkpoint that rank 0 saves and
every rank loads.  argv: dtype (float32 | float64), checkpoint directory.  Prints one
"OK rank ..." line per rank; any failure raises (and aborts the job)."""
import os
import sys

import numpy as np

import fastnn
from fastnn import nn, optim
from fastnn import distributed as dist
from _common import say

rank, world = dist.init()

dtype = np.dtype(sys.argv[1])
ckpt_dir = sys.argv[2]
tol = 1e-10 if dtype == np.float64 else 1e-5
comm = dist.get_comm()


def build(seed):
    fastnn.manual_seed(seed)
    # a module used twice (shared weights) and parameters in several buckets
    shared = nn.Linear(16, 16)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), shared, nn.Tanh(), shared,
                         nn.LayerNorm(16), nn.Linear(16, 3)).to(dtype)


def mse_grad(out, target, scale=1.0):
    return (2.0 * scale / out.size) * (out - target)


def step_pair(ddp, ref, opt, opt_ref, x, t, micro=1):
    """One optimizer step: the DDP model on this rank's rows, the reference on all rows.
    ``micro`` > 1: gradient accumulation over micro-batches (no_sync for all but the last)."""
    n = x.shape[0]
    rows = np.array_split(np.arange(n), world)[rank]
    xs, ts = x[rows], t[rows]
    ddp.zero_grad()
    parts = np.array_split(np.arange(len(rows)), micro)
    for i, part in enumerate(parts):
        ctx = ddp.no_sync() if i < micro - 1 else _nullctx()
        with ctx:
            out = ddp(xs[part])
            ddp.backward(mse_grad(out, ts[part], len(part) / len(rows)))
    opt.step()
    ref.zero_grad()
    out = ref(x)
    ref.backward(mse_grad(out, t))
    opt_ref.step()


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def max_diff(a, b):
    return max(float(np.max(np.abs(p.data - q.data))) for p, q in
               zip(a.parameters(), b.parameters()))


def same_on_all_ranks(model):
    flat = np.concatenate([p.data.ravel() for p in model.parameters()])
    allv = comm.allgather(flat.tobytes())
    return all(v == allv[0] for v in allv)


# shard: the ranks' parts of an epoch are disjoint and cover it
parts = comm.allgather(dist.shard(11, epoch=2, seed=5))
assert sorted(np.concatenate(parts).tolist()) == list(range(11)), parts

model = build(seed=100 + rank)               # different on purpose: broadcast must fix it
ddp = dist.DistributedDataParallel(model, bucket_mb=1e-3)    # ~1 KB: several buckets
assert len(ddp._buckets) > 2, len(ddp._buckets)
dist.broadcast_parameters(ddp, root=0)
ref = build(seed=0)
ref.load_state_dict(model.state_dict())
opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
opt_ref = optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01)
rng = np.random.default_rng(0)
batches = [(rng.standard_normal((8, 6)).astype(dtype), rng.standard_normal((8, 3)).astype(dtype))
           for _ in range(6)]

for x, t in batches[:3]:
    step_pair(ddp, ref, opt, opt_ref, x, t)
assert ddp.stats["reductions"] == 3, ddp.stats
# the buckets of the last layers started while backward still ran through the first ones
assert ddp.stats["early"] >= 3 * (len(ddp._buckets) - 1), ddp.stats
assert all(b.dtype == dtype for b in ddp._buckets)
d_plain = max_diff(model, ref)
assert d_plain <= tol, f"after 3 steps: {d_plain} > {tol}"
assert same_on_all_ranks(model), "ranks differ after 3 steps"

# gradient accumulation: two micro-batches per step, the first under no_sync
step_pair(ddp, ref, opt, opt_ref, *batches[3], micro=2)
assert ddp.stats["reductions"] == 4, ddp.stats
d_acc = max_diff(model, ref)
assert d_acc <= tol, f"no_sync accumulation: {d_acc} > {tol}"

# checkpoint: rank 0 saves model + optimizer, every rank loads into fresh objects
path = os.path.join(ckpt_dir, "ckpt.npz")
if rank == 0:
    sd = {"model." + k: v for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            sd[f"optim.{i}.{k}"] = np.asarray(v)
    fastnn.save(sd, path)
comm.Barrier()
loaded = fastnn.load(path)
model2 = build(seed=7)
model2.load_state_dict({k[6:]: v for k, v in loaded.items() if k.startswith("model.")})
opt2 = optim.AdamW(model2.parameters(), lr=1e-2, weight_decay=0.01)
state = {}
for k, v in loaded.items():
    if k.startswith("optim."):
        _, i, name = k.split(".", 2)
        state.setdefault(int(i), {})[name] = v if name != "step" else float(v)
groups = opt.state_dict()["param_groups"]
opt2.load_state_dict({"state": state, "param_groups": groups})
ddp2 = dist.DistributedDataParallel(model2, bucket_mb=1e-3)
for x, t in batches[4:]:
    step_pair(ddp2, ref, opt2, opt_ref, x, t)
d_ckpt = max_diff(model2, ref)
assert d_ckpt <= tol, f"after the checkpoint: {d_ckpt} > {tol}"
assert same_on_all_ranks(model2), "ranks differ after loading the checkpoint"
say(f"OK rank {rank}/{world} {dtype} diff {d_plain:.1e} {d_acc:.1e} {d_ckpt:.1e} "
    f"buckets {len(ddp._buckets)}")
