ccl_gtest(diagnose_unit_tests SOURCES diagnose_test.cc LIBS ccl_ccctl
  LABELS unit TIMEOUT 60)
