# ccctl run: the experiment parser, validator and expression evaluator.
add_executable(experiment_unit_tests experiment_test.cc)
target_link_libraries(experiment_unit_tests PRIVATE ccl_ccctl GTest::gtest_main)
target_compile_definitions(experiment_unit_tests PRIVATE
  CCL_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
ccl_target_defaults(experiment_unit_tests)
add_test(NAME experiment_unit_tests COMMAND experiment_unit_tests)
set_tests_properties(experiment_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
