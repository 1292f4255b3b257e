# Operations helpers: metrics registry and endpoint, logging, hostname rank.
add_executable(ops_unit_tests ${CMAKE_CURRENT_LIST_DIR}/ops_test.cc)
target_link_libraries(ops_unit_tests PRIVATE ccl_ops ccl_worker_metrics
  ccl_coordinator_metrics nlohmann_json::nlohmann_json GTest::gtest_main)
ccl_target_defaults(ops_unit_tests)
add_test(NAME ops_unit_tests COMMAND ops_unit_tests)
set_tests_properties(ops_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
