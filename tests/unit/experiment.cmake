# ccctl run: the experiment parser, validator and expression evaluator.
ccl_gtest(experiment_unit_tests SOURCES experiment_test.cc LIBS ccl_ccctl
  DEFINES CCL_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples"
  LABELS unit TIMEOUT 60)
