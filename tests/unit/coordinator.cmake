add_executable(coordinator_core_test
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_core_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_kv_test.cc)
target_link_libraries(coordinator_core_test PRIVATE ccl_coordinator_core
  GTest::gtest_main)
ccl_target_defaults(coordinator_core_test)
add_test(NAME coordinator_core_test COMMAND coordinator_core_test)
set_tests_properties(coordinator_core_test PROPERTIES LABELS unit TIMEOUT 60)

# The coordinator's scaling pieces (roster, heartbeat policy, KV values and
# generation collection); behaviour only, speed is bench/rendezvous_bench's.
add_executable(coordinator_scale_test
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_scale_test.cc)
target_link_libraries(coordinator_scale_test PRIVATE ccl_coordinator_core
  GTest::gtest_main)
ccl_target_defaults(coordinator_scale_test)
add_test(NAME coordinator_scale_test COMMAND coordinator_scale_test)
set_tests_properties(coordinator_scale_test PROPERTIES LABELS unit TIMEOUT 120)
