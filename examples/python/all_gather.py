"""torch.distributed.all_gather(tensor_list, input), from the collectives
tutorial: every rank gathers every rank's [rank].

    input_tensor = torch.tensor([rank], dtype=torch.float32)
    tensor_list = [torch.empty(1) for _ in range(world_size)]
    dist.all_gather(tensor_list, input_tensor)

ccl: the list is one output tensor of world_size elements; rank r's part
is chunk r.
"""

import ccl as dist

dist.connect()
n = dist.get_world_size()
input_tensor = dist.from_numpy(lambda rank: [rank], dtype=dist.float32)
output = dist.zeros(n, dtype=dist.float32)
dist.all_gather(output, input_tensor)
for rank, values in output.read().items():
    print(f"Rank {rank} gathered: {[float(v) for v in values]}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 gathered: [0.0, 1.0]
# Rank 1 gathered: [0.0, 1.0]
