ccl_gtest(common_unit_tests SOURCES common_test.cc LIBS ccl_common
  LABELS unit TIMEOUT 60)
