"""torch.distributed.broadcast(tensor, src=0), from the collectives
tutorial: rank 0's int64 [1, 2, 3] ends up on every rank.

    if rank == 0: tensor = torch.tensor([1, 2, 3], dtype=torch.int64)
    else:         tensor = torch.empty(3, dtype=torch.int64)
    dist.broadcast(tensor, src=0)
"""

import ccl as dist

dist.connect()
tensor = dist.zeros(3, dtype=dist.int64)
tensor.write([1, 2, 3], rank=0)
dist.broadcast(tensor, src=0)
for rank, values in tensor.read().items():
    print(f"Rank {rank}: {values}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0: [1 2 3]
# Rank 1: [1 2 3]
