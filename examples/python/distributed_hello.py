"""The NCCL tutorial's distributed_hello.py, without torchrun: the cluster
is already running, so there is no process group to start and no
LOCAL_RANK to read; the client makes one tensor per rank on each worker's
own device (cuda:N on a CUDA worker) and all-reduces them.

    tensor = torch.tensor([rank + 1], dtype=torch.float32).cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
"""

import ccl as dist

dist.connect()
tensor = dist.from_numpy(lambda rank: [rank + 1], dtype=dist.float32)
for rank, values in tensor.read().items():
    print(f"[Rank {rank}] Before all_reduce: {values.tolist()}")
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
for rank, values in tensor.read().items():
    print(f"[Rank {rank}] After all_reduce: {values.tolist()}")
dist.destroy_process_group()

# Expected output (2 ranks):
# [Rank 0] Before all_reduce: [1.0]
# [Rank 1] Before all_reduce: [2.0]
# [Rank 0] After all_reduce: [3.0]
# [Rank 1] After all_reduce: [3.0]
