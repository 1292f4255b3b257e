# The client library without a cluster: sequence windows, and its public
# headers compiled alone (no gRPC or protobuf header may come with them).
ccl_gtest(client_unit_tests
  SOURCES sequence_windows_test.cc client_public_header_test.cc
  LIBS ccl_client nlohmann_json::nlohmann_json
  DEFINES CCL_SEQUENCE_WINDOWS_SPEC="${PROJECT_SOURCE_DIR}/tests/spec/sequence_windows.json"
  LABELS unit TIMEOUT 60)
