"""torch.distributed.reduce_scatter(output, input_list, op=SUM), from the
collectives tutorial: input_list on rank r is [r + i for i in
range(world_size)]; rank r keeps the sum of element r over the ranks.

ccl: input_list is one tensor of world_size elements per rank.
"""

import ccl as dist

dist.connect()
n = dist.get_world_size()
input_list = dist.from_numpy(lambda rank: [rank + i for i in range(n)],
                             dtype=dist.float32)
output = dist.empty(1, dtype=dist.float32)
dist.reduce_scatter(output, input_list, op=dist.ReduceOp.SUM)
for rank, values in output.read().items():
    print(f"Rank {rank} received reduced value: {values.item()}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 received reduced value: 1.0
# Rank 1 received reduced value: 3.0
