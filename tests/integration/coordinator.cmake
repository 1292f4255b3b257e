ccl_gtest(coordinator_integration_test SOURCES coordinator_integration_test.cc
  LIBS ccl_testing ccl_worker_service ccl_proto gRPC::grpc++
  LABELS integration TIMEOUT 120)
