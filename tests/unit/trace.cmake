ccl_gtest(trace_unit_tests SOURCES trace_test.cc LIBS ccl_ccctl
  LABELS unit TIMEOUT 60)
