"""fastnn beyond one machine: data-parallel training over MPI, batch inference over Dask.

fastnn has no scheduler of its own; it plugs into the engines NumPy users already run::

    from fastnn import distributed as dist
    rank, world = dist.init()                        # MPI.COMM_WORLD unless a comm is given
    model = dist.DistributedDataParallel(model)      # same forward; backward averages grads
    dist.broadcast_parameters(model, root=0)         # identical start on every rank
    idx = dist.shard(len(dataset), epoch=e, seed=0)  # this rank's part of a shuffled epoch

    y = dist.predict_dask(model, x, batch_size=256)  # x a dask array (rows = samples)

Training needs mpi4py and an MPI (``pip install 'fastnn[mpi]'``: mpi4py and the mpich
wheel, which brings ``mpiexec``); inference needs dask (and ``distributed`` for a
cluster).  Neither is imported by ``import fastnn`` nor by importing this module: each is
imported on first use.
"""
from ._mpi import (DistributedDataParallel, broadcast_parameters, get_comm, init,  # noqa: F401
                   launcher_world_size, shard)
from ._dask import predict_dask  # noqa: F401

__all__ = ["init", "get_comm", "launcher_world_size", "DistributedDataParallel",
           "broadcast_parameters", "shard", "predict_dask"]
