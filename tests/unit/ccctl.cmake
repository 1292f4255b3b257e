# ccctl's helpers that need no cluster: the temporary tensors' names and
# values as typed on the command line.
ccl_gtest(ccctl_unit_tests SOURCES ccctl_test.cc LIBS ccl_ccctl
  LABELS unit TIMEOUT 60)
