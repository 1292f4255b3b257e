"""torch.distributed.all_gather_into_tensor(output, input), from the
collectives tutorial: the same gather into one stacked tensor.
"""

import ccl as dist

dist.connect()
n = dist.get_world_size()
input_tensor = dist.from_numpy(lambda rank: [rank], dtype=dist.float32)
output_tensor = dist.empty(n, dtype=dist.float32)
dist.all_gather_into_tensor(output_tensor, input_tensor)
for rank, values in output_tensor.read().items():
    print(f"Rank {rank} gathered tensor: {values}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 gathered tensor: [0. 1.]
# Rank 1 gathered tensor: [0. 1.]
