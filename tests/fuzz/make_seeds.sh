#!/usr/bin/env bash
# Regenerates the seed corpus of worker_request_fuzzer from text protos:
# one file per request kind, its first byte the fuzzer's selector (see
# worker_request_fuzzer.cc). Run from anywhere; needs protoc.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root/tests/fuzz/worker_request_fuzzer
mkdir -p "$out"
seed() {  # seed NAME SELECTOR MESSAGE TEXT
  local name=$1 selector=$2 message=$3 text=$4
  {
    printf "\\x$(printf %02x "$selector")"
    printf '%s' "$text" | protoc --encode="ccl.v1.$message" -I "$root/proto" \
      "$root/proto/ccl/v1/worker.proto"
  } >"$out/$name"
}
tensor='name: "x" dtype: DTYPE_FLOAT32 shape: 4 shape: 2 device { kind: DEVICE_KIND_CPU }'
seed alloc 0 AllocTensorRequest "spec { $tensor } fill { kind: FILL_KIND_ARANGE }"
seed alloc_int 0 AllocTensorRequest 'spec { name: "y" dtype: DTYPE_INT32 shape: 8 device { kind: DEVICE_KIND_CPU } } fill { kind: FILL_KIND_RANK_PLUS_ONE }'
seed free 1 FreeTensorRequest 'name: "x"'
seed write 2 WriteTensorChunk 'name: "x" offset_bytes: 4 data: "abcdefgh"'
seed read 3 ReadTensorRequest 'name: "x" offset: 1 count: 3 chunk_bytes: 8'
seed summarize 4 SummarizeTensorRequest 'name: "x" head: 3'
seed all_reduce 5 OpRequest 'seq: 0 kind: OP_KIND_ALL_REDUCE input: "x" reduce_op: REDUCE_OP_SUM'
seed broadcast_async 5 OpRequest 'seq: 1 kind: OP_KIND_BROADCAST input: "x" async: true'
seed all_gather 5 OpRequest 'seq: 2 kind: OP_KIND_ALL_GATHER input: "y" output: "x"'
seed bench 6 BenchRequest 'op { seq: 3 kind: OP_KIND_ALL_REDUCE input: "x" reduce_op: REDUCE_OP_MAX } iters: 2 warmup_iters: 1 check: true'
seed wait 7 WaitRequest 'work_id: 1 timeout_ms: 50'
seed test 8 TestRequest 'work_id: 1'
seed create_group 9 CreateGroupRequest 'name: "g" ranks: 0 seq: 4'
seed op_log 10 GetOpLogRequest 'group: "world" limit: 5'
