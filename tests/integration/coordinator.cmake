add_executable(coordinator_integration_test
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_integration_test.cc)
target_link_libraries(coordinator_integration_test PRIVATE ccl_testing
  ccl_worker_service ccl_proto gRPC::grpc++ GTest::gmock GTest::gtest_main)
ccl_target_defaults(coordinator_integration_test)
add_test(NAME coordinator_integration_test COMMAND coordinator_integration_test)
set_tests_properties(coordinator_integration_test PROPERTIES
  LABELS integration TIMEOUT 120)
