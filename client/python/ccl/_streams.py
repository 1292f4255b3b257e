"""A tensor's bytes as the worker's ReadTensor and WriteTensor streams
carry them: chunks of at most WRITE_CHUNK_BYTES out, any chunks in.
"""

import itertools
import mmap

from ccl.v1 import worker_pb2

WRITE_CHUNK_BYTES = 1 << 20
# Reads at least this large land in memory advised for huge pages.
HUGE_READ_BYTES = 4 << 20


def write_chunks(name, payload):
    """WriteTensor's requests for `payload`: the name in the first only."""
    offset = 0
    while True:
        piece = payload[offset:offset + WRITE_CHUNK_BYTES]
        yield worker_pb2.WriteTensorChunk(
            name=name if offset == 0 else "", offset_bytes=offset, data=piece)
        offset += len(piece)
        if offset >= len(payload):
            return


def gather(chunks):
    """A tensor stream's bytes in one buffer. A large one is filled in place,
    in anonymous memory advised for huge pages: joined into fresh bytes, it
    paid a page fault per 4 KiB (on the development VM a 64 MiB read took
    ~200 ms of them; common/huge_pages.h). A stream that brings other than
    the size its first chunk announced is joined as it comes, and the
    caller's size check names the difference."""
    first = next(chunks, None)
    if first is None:
        return b""
    total = first.total_bytes
    if total < HUGE_READ_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return b"".join(itertools.chain([first.data],
                                        (c.data for c in chunks)))
    # Private: a shared anonymous mapping is shmem, which THP leaves alone.
    buffer = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE)
    buffer.madvise(mmap.MADV_HUGEPAGE)
    offset = 0
    for chunk in itertools.chain([first], chunks):
        data = chunk.data
        if offset + len(data) > total:
            return b"".join(itertools.chain(
                [buffer[:offset], data], (c.data for c in chunks)))
        buffer[offset:offset + len(data)] = data
        offset += len(data)
    return buffer if offset == total else buffer[:offset]
