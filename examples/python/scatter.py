"""torch.distributed.scatter(tensor, scatter_list, src=0), from the
collectives tutorial: rank r receives chunk r of the source's list.

    scatter_list = None if rank != 0 else [torch.tensor([i, i+1]) for i in range(0, 4, 2)]
    output = torch.empty(2, dtype=torch.int64)
    dist.scatter(output, scatter_list, src=0)

ccl: the list is one tensor of world_size x 2 elements, needed on the
source only.
"""

import numpy as np

import ccl as dist

dist.connect()
n = dist.get_world_size()
scatter_list = dist.from_numpy(np.arange(2 * n, dtype=np.int64), ranks=[0])
output = dist.zeros(2, dtype=dist.int64)
dist.scatter(output, scatter_list, src=0)
for rank, values in output.read().items():
    print(f"Rank {rank} received: {values}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 received: [0 1]
# Rank 1 received: [2 3]
