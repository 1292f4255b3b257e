# ccctl's helpers that need no cluster: the temporary tensors' names and
# values as typed on the command line.
add_executable(ccctl_unit_tests ccctl_test.cc)
target_link_libraries(ccctl_unit_tests PRIVATE ccl_ccctl GTest::gmock
  GTest::gtest_main)
ccl_target_defaults(ccctl_unit_tests)
add_test(NAME ccctl_unit_tests COMMAND ccctl_unit_tests)
set_tests_properties(ccctl_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
