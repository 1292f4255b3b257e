# bench/nccl_peer's logic that needs no GPU: nccl-tests' sizes and bus
# bandwidth per op, the sweep, argument parsing, table and CSV.
add_executable(nccl_peer_unit_tests ${CMAKE_CURRENT_LIST_DIR}/nccl_peer_test.cc)
target_link_libraries(nccl_peer_unit_tests PRIVATE nccl_peer_core
  GTest::gtest_main)
ccl_target_defaults(nccl_peer_unit_tests)
add_test(NAME nccl_peer_unit_tests COMMAND nccl_peer_unit_tests)
set_tests_properties(nccl_peer_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
