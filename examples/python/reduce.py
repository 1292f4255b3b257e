"""torch.distributed.reduce(tensor, dst, op), from the collectives
tutorial: the sum of every rank's [rank+1, rank+2, rank+3] lands on dst
only (the tutorial's snippet calls all_reduce by mistake; its text means
reduce).
"""

import ccl as dist

dist.connect()
tensor = dist.from_numpy(lambda rank: [rank + 1, rank + 2, rank + 3],
                         dtype=dist.float32)
dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
print(f"Rank 0 after reduce: {tensor.read(0)}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 0 after reduce: [3. 5. 7.]
