#!/usr/bin/env bash
# Regenerates the seed corpora of the fuzz targets from text protos: one file
# per request kind, its first byte the fuzzer's selector (see
# worker_request_fuzzer.cc and coordinator_request_fuzzer.cc). Run from
# anywhere; needs protoc.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seed() {  # seed TARGET PROTO NAME SELECTOR MESSAGE TEXT
  local target=$1 proto=$2 name=$3 selector=$4 message=$5 text=$6
  local out=$root/tests/fuzz/$target
  mkdir -p "$out"
  {
    printf "\\x$(printf %02x "$selector")"
    printf '%s' "$text" | protoc --encode="ccl.v1.$message" -I "$root/proto" \
      "$root/proto/ccl/v1/$proto"
  } >"$out/$name"
}
worker() { seed worker_request_fuzzer worker.proto "$@"; }
tensor='name: "x" dtype: DTYPE_FLOAT32 shape: 4 shape: 2 device { kind: DEVICE_KIND_CPU }'
worker alloc 0 AllocTensorRequest "spec { $tensor } fill { kind: FILL_KIND_ARANGE }"
worker alloc_int 0 AllocTensorRequest 'spec { name: "y" dtype: DTYPE_INT32 shape: 8 device { kind: DEVICE_KIND_CPU } } fill { kind: FILL_KIND_RANK_PLUS_ONE }'
worker free 1 FreeTensorRequest 'name: "x"'
worker write 2 WriteTensorChunk 'name: "x" offset_bytes: 4 data: "abcdefgh"'
worker read 3 ReadTensorRequest 'name: "x" offset: 1 count: 3 chunk_bytes: 8'
worker summarize 4 SummarizeTensorRequest 'name: "x" head: 3'
worker all_reduce 5 OpRequest 'seq: 0 kind: OP_KIND_ALL_REDUCE input: "x" reduce_op: REDUCE_OP_SUM'
worker broadcast_async 5 OpRequest 'seq: 1 kind: OP_KIND_BROADCAST input: "x" async: true'
worker all_gather 5 OpRequest 'seq: 2 kind: OP_KIND_ALL_GATHER input: "y" output: "x"'
worker skip_agreement 5 OpRequest 'seq: 5 kind: OP_KIND_ALL_REDUCE input: "x" skip_agreement: true'
worker wrong_generation 5 OpRequest 'seq: 6 kind: OP_KIND_ALL_REDUCE input: "x" generation: 999'
worker far_ahead 5 OpRequest 'seq: 1000000 kind: OP_KIND_NOP'
worker bench 6 BenchRequest 'op { seq: 3 kind: OP_KIND_ALL_REDUCE input: "x" reduce_op: REDUCE_OP_MAX } iters: 2 warmup_iters: 1 check: true'
worker wait 7 WaitRequest 'work_id: 1 timeout_ms: 50'
worker test 8 TestRequest 'work_id: 1'
worker create_group 9 CreateGroupRequest 'name: "g" ranks: 0 seq: 4'
worker op_log 10 GetOpLogRequest 'group: "world" limit: 5'
worker plan 11 PlanRequest 'seq: 7 ops { kind: OP_KIND_ALL_REDUCE input: "x" } ops { kind: OP_KIND_BARRIER }'
worker release 12 ReleaseSequenceRequest 'begin: 9 end: 11'

coordinator() { seed coordinator_request_fuzzer coordinator.proto "$@"; }
secret='worker_secret: "0123456789abcdef0123456789abcdef"'
coordinator register 0 RegisterRequest "address: \"127.0.0.1:1\" host: \"h\" device { kind: DEVICE_KIND_CPU } worker_id: \"w0\" timeout_ms: 5 $secret"
coordinator register_rank 14 RegisterRequest "address: \"127.0.0.1:2\" requested_rank: 1 worker_id: \"w1\" resume_generation: 3 resume_next_seq { key: \"world\" value: 7 } $secret"
coordinator heartbeat 1 HeartbeatRequest "rank: 0 generation: 1 worker_id: \"w0\" tensor_count: 2 reform_reason: \"broken\" $secret"
coordinator deregister 2 DeregisterRequest "rank: 0 generation: 1 worker_id: \"w0\" $secret"
coordinator get_world 3 GetWorldRequest ''
coordinator kv_set 4 KvSetRequest 'key: "k" value: "v"'
coordinator kv_get 5 KvGetRequest 'key: "k"'
coordinator kv_wait 6 KvWaitRequest 'keys: "k" keys: "l" timeout_ms: 5 include_values: true'
coordinator kv_add 7 KvAddRequest 'key: "n" delta: 3'
coordinator kv_compare_set 8 KvCompareSetRequest 'key: "k" expected: "v" desired: "w"'
coordinator kv_delete 9 KvDeleteRequest 'key: "k"'
coordinator reserve 10 ReserveSequenceRequest 'group: "world" count: 4'
coordinator post_id 11 PostUniqueIdRequest 'group: "world" unique_id: "id"'
coordinator get_id 26 GetUniqueIdRequest 'group: "world" timeout_ms: 5'
coordinator sweep 13 GetWorldRequest ''
