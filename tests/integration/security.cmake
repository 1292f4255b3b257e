# TLS, mTLS, token roles and the join token against real processes, with
# certificates made by openssl at test time.
ccl_gtest(security_integration_test SOURCES security_test.cc
  LIBS ccl_local_cluster ccl_credentials LABELS integration TIMEOUT 300)
