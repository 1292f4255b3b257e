# Operations helpers: metrics registry and endpoint, logging, hostname rank.
ccl_gtest(ops_unit_tests SOURCES ops_test.cc
  LIBS ccl_ops ccl_worker_metrics ccl_coordinator_metrics
    nlohmann_json::nlohmann_json
  LABELS unit TIMEOUT 60)
