"""torch.distributed.send / recv, from the point-to-point tutorial.

torch: each process runs its half,

    if rank == 0:
        data = torch.tensor([1.0, 2.0, 3.0]); dist.send(data, dst=1)
    elif rank == 1:
        data = torch.empty(3); dist.recv(data, src=0)

ccl: one call moves the tensor from rank 0 to rank 1, posting the send on
rank 0 and the matching recv on rank 1 at the same sequence number.

Run against a cluster (`ccctl cluster up --workers 2`):
    /usr/bin/python3 examples/python/send_recv.py
"""

import numpy as np

import ccl as dist

dist.connect()
data = dist.zeros(3, dtype="float32", ranks=[0, 1])  # torch.empty(3) on both
data.write(np.array([1.0, 2.0, 3.0]), rank=0)
dist.send(data, dst=1, src=0)
print("Rank 0: Data sent")
print(f"Rank 1: Received data = {data.read(1)}")
dist.destroy_process_group()  # frees `data` on the workers

# Expected output (2 ranks):
# Rank 0: Data sent
# Rank 1: Received data = [1. 2. 3.]
