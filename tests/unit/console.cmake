# ccctl console's rules without a browser: who may do what, which settings
# are refused, and the child runs it starts.
ccl_gtest(console_test SOURCES console_test.cc LIBS ccl_ccctl
  LABELS unit TIMEOUT 60)
