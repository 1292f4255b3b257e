"""torch.distributed.gather(t, gather_list, dst=0), from the collectives
tutorial: every rank's [rank, rank+1, rank+2] collected on rank 0.

ccl: gather_list is one tensor of world_size x 3 elements, on dst only.
"""

import ccl as dist

dist.connect()
n = dist.get_world_size()
t = dist.from_numpy(lambda rank: [rank, rank + 1, rank + 2],
                    dtype=dist.int64)
gather_list = dist.zeros(3 * n, dtype=dist.int64, ranks=[0])
dist.gather(t, gather_list, dst=0)
print(f"After op, Rank 0 has: {list(gather_list.read(0).reshape(n, 3))}")
dist.destroy_process_group()

# Expected output (2 ranks):
# After op, Rank 0 has: [array([0, 1, 2]), array([1, 2, 3])]
