"""Data-parallel training across processes and nodes: MPI everywhere, NCCL between NVIDIA GPUs.

Start the job with a launcher (``mpirun -np 2 python3 train.py``, ``srun``) and, in the script::

    import tinycore.distributed as dist
    dist.init()                                   # rank, world size, local rank from the launcher
    dist.broadcast_parameters(params)             # everyone starts from rank 0's weights
    sampler = dist.DistributedSampler(len(data))  # this rank's shard
    ...
    loss.backward(); dist.average_gradients(params); opt.step()   # inside TinyJit too

Collectives on Tensors of any device: `all_reduce` (sum/mean/max/min), `broadcast`, `all_gather`,
`reduce_scatter`, `barrier`. Each device's backend comes from its plugin (``tinycore_collective_backend``; the CUDA
plugin offers NCCL), else core's MPI backend moves host memory (zero-copy on CPU devices). Every collective first
checks, time-limited, that all ranks arrived with the same shape and dtype: a lost rank or a mismatch is an error
naming the ranks and the collective (`CollectiveTimeoutError`, `CollectiveMismatchError`), never a silent hang.
Guide: docs/distributed.md. Importing this module imports neither mpi4py nor any plugin (`init` does).
"""

from tinycore.distributed.backend import CollectiveBackend, LocalBackend, MPIBackend
from tinycore.distributed.collectives import (
    CollectiveRunner,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    get_group,
    init,
    is_initialized,
    local_rank,
    rank,
    reduce_scatter,
    shutdown,
    world_size,
)
from tinycore.distributed.data import DistributedSampler, average_gradients, broadcast_parameters
from tinycore.distributed.group import (
    CollectiveCall,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DistributedError,
    LaunchInfo,
    ProcessGroup,
    launch_info,
)

__all__ = [
    "CollectiveBackend",
    "CollectiveCall",
    "CollectiveMismatchError",
    "CollectiveRunner",
    "CollectiveTimeoutError",
    "DistributedError",
    "DistributedSampler",
    "LaunchInfo",
    "LocalBackend",
    "MPIBackend",
    "ProcessGroup",
    "all_gather",
    "all_reduce",
    "average_gradients",
    "barrier",
    "broadcast",
    "broadcast_parameters",
    "get_group",
    "init",
    "is_initialized",
    "launch_info",
    "local_rank",
    "rank",
    "reduce_scatter",
    "shutdown",
    "world_size",
]
