ccl_gtest(coordinator_integration_test SOURCES coordinator_integration_test.cc
  LIBS ccl_testing ccl_worker_service ccl_proto gRPC::grpc++
  LABELS integration TIMEOUT 120)

# Workers behind cchostagent (coordinator/host_agent/): real processes.
ccl_gtest(host_agent_test SOURCES host_agent_test.cc
  LIBS ccl_local_cluster LABELS integration TIMEOUT 300)
