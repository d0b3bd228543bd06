"""Run under ``mpiexec -n 2``: rank 1 raises while rank 0 waits in a collective (here, the
gradient allreduce of a training step).  The job must fail quickly, not hang."""
import numpy as np

from fastnn import nn
from fastnn import distributed as dist

rank, world = dist.init()
model = dist.DistributedDataParallel(nn.Linear(4, 2))
x = np.ones((3, 4), np.float32)
if rank == 1:
    raise RuntimeError("rank 1 fails on purpose")
y = model(x)
model.backward(np.ones_like(y))      # rank 0 waits here for rank 1's gradients
print("rank 0 finished a step it should never have finished", flush=True)
