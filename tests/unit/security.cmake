# The token policy, the credentials factory's rules and the request limits.
ccl_gtest(security_unit_tests SOURCES security_test.cc
  LIBS ccl_credentials ccl_request_limits LABELS unit TIMEOUT 60)
