"""A plain mpi4py script run by `python -m hpcbsp`: rank 0 fails while the others block."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    raise KeyError("missing key on rank 0")
comm.Barrier()  # never completes: rank 0 is gone
