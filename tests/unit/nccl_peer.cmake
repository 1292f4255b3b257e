# bench/nccl_peer's logic that needs no GPU: nccl-tests' sizes and bus
# bandwidth per op, the sweep, argument parsing, table and CSV.
ccl_gtest(nccl_peer_unit_tests SOURCES nccl_peer_test.cc LIBS nccl_peer_core
  LABELS unit TIMEOUT 60)
