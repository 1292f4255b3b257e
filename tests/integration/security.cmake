# TLS, mTLS, token roles and the join token against real processes, with
# certificates made by openssl at test time.
add_executable(security_integration_test
  ${CMAKE_CURRENT_LIST_DIR}/security_test.cc)
target_link_libraries(security_integration_test PRIVATE ccl_local_cluster
  ccl_credentials GTest::gtest_main)
ccl_target_defaults(security_integration_test)
add_test(NAME security_integration_test COMMAND security_integration_test)
set_tests_properties(security_integration_test PROPERTIES
  LABELS integration TIMEOUT 300)
