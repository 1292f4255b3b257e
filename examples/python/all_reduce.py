"""torch.distributed.all_reduce(tensor, op=ReduceOp.SUM), from both
tutorials: every rank ends with the sum over ranks.

    tensor = torch.tensor([rank + 1], dtype=torch.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)      # 2 ranks: [3]
    tensor = torch.tensor([rank+1, rank+2, rank+3], dtype=torch.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)      # 2 ranks: [3, 5, 7]
"""

import ccl as dist

dist.connect()
tensor = dist.from_numpy(lambda rank: [rank + 1], dtype=dist.float32)
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
for rank, values in tensor.read().items():
    print(f"Rank {rank} after all_reduce: {values}")

tensor = dist.from_numpy(lambda rank: [rank + 1, rank + 2, rank + 3],
                         dtype=dist.float32)
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
for rank, values in tensor.read().items():
    print(f"Rank {rank} after all_reduce: {values}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 after all_reduce: [3.]
# Rank 1 after all_reduce: [3.]
# Rank 0 after all_reduce: [3. 5. 7.]
# Rank 1 after all_reduce: [3. 5. 7.]
