"""Run under ``mpiexec -n 2``: ranks whose models differ must all get the same clear error
from DistributedDataParallel and broadcast_parameters (not a hang).  argv: what differs
(shape | name | dtype | bucket).  Prints "ERROR rank r <kind>: <message>" per rank and call."""
import sys

import numpy as np

from fastnn import nn
from fastnn import distributed as dist
from _common import say

rank, world = dist.init()

what = sys.argv[1]
hidden = 5 if (what == "shape" and rank == 1) else 4
layers = [nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, 2)]
if what == "name" and rank == 1:
    layers.insert(1, nn.LayerNorm(hidden))
model = nn.Sequential(*layers)
if what == "dtype" and rank == 1:
    model.to(np.float64)
bucket = 1.0 if (what == "bucket" and rank == 1) else 25
for kind, call in (("ddp", lambda: dist.DistributedDataParallel(model, bucket_mb=bucket)),
                   ("broadcast", lambda: dist.broadcast_parameters(model))):
    if kind == "broadcast" and what == "bucket":
        continue
    try:
        call()
    except ValueError as e:
        say(f"ERROR rank {rank} {kind}: {' '.join(str(e).split())}")
    else:
        say(f"NO ERROR rank {rank} {kind}")
dist.get_comm().Barrier()     # both ranks are still alive and in step after the errors
