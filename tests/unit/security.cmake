# The token policy, the credentials factory's rules and the request limits.
add_executable(security_unit_tests ${CMAKE_CURRENT_LIST_DIR}/security_test.cc)
target_link_libraries(security_unit_tests PRIVATE ccl_credentials
  ccl_request_limits GTest::gtest_main)
ccl_target_defaults(security_unit_tests)
add_test(NAME security_unit_tests COMMAND security_unit_tests)
set_tests_properties(security_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
