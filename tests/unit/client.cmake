# The client library without a cluster: sequence windows, and its public
# headers compiled alone (no gRPC or protobuf header may come with them).
add_executable(client_unit_tests ${CMAKE_CURRENT_LIST_DIR}/sequence_windows_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/client_public_header_test.cc)
target_link_libraries(client_unit_tests PRIVATE ccl_client GTest::gtest_main)
ccl_target_defaults(client_unit_tests)
add_test(NAME client_unit_tests COMMAND client_unit_tests)
set_tests_properties(client_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
