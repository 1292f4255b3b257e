"""The tutorial's gotcha: rank 1 receives from a rank 0 that never sends.

    if rank == 0: pass                                   # no send
    else:         torch.distributed.recv(t, src=0); print(t)   # hangs

In torch rank 1 hangs for good. Here the recv fails after its timeout with
DEADLINE_EXCEEDED and says what is missing; the world then re-forms by
itself (the timed-out connection is closed) and keeps its tensors. The next
op needs no wait and no retry: it waits for the new generation itself and
logs one line on stderr ("world re-forming after rank 1's communicator
broke: ...; waited 0.9 s (generation 2)").
"""

import ccl as dist

client = dist.connect()
generation = client.generation
t = dist.from_numpy(lambda rank: [1.0, 2.0, 3.0], dtype=dist.float32)
try:
    dist.recv(t, src=0, dst=1, timeout=2)
except dist.CclError as e:
    # The worker's message: which op and seq, then what is missing.
    print(f"Rank {e.rank}: recv failed: {e.code_name}")
    print(f"  {e.details.rsplit(': ', 1)[-1]}")
dist.all_reduce(t)
print(f"World re-formed at a later generation: {client.generation > generation}")
print(f"Rank 1 after all_reduce: {t.read(1)}")
dist.destroy_process_group()

# Expected output (2 ranks):
# Rank 1: recv failed: DEADLINE_EXCEEDED
#   rank 0 posted no matching send within 2000 ms (it may have run a different op at this seq, or none); the gloo communicator was aborted
# World re-formed at a later generation: True
# Rank 1 after all_reduce: [2. 4. 6.]
