"""torch.distributed.isend / irecv and req.wait(), from the point-to-point
tutorial: the transfer starts at once and returns a request; wait()
completes it before the data is used.

    if rank == 0: req = dist.isend(torch.tensor([4.0, 5.0]), dst=1)
    else:         data = torch.empty(2); req = dist.irecv(data, src=0)
    req.wait()
"""

import numpy as np

import ccl as dist

dist.connect()
data = dist.zeros(2, dtype="float32", ranks=[0, 1])
data.write(np.array([4.0, 5.0]), rank=0)
req = dist.isend(data, dst=1, src=0)  # returns at once: a ccl.Work
# The client can do other work here.
req.wait()
print("Rank 0: Async send completed")
print(f"Rank 1: Async received data = {data.read(1)}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0: Async send completed
# Rank 1: Async received data = [4. 5.]
