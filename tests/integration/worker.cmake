# Integration tests of the worker and ccctl: real processes on 127.0.0.1.
add_library(ccl_local_cluster STATIC ${CMAKE_CURRENT_LIST_DIR}/../testing/local_cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/../testing/client_wire.cc)
# client_wire reaches the client's internals (stubs, the coordinator), so
# the tests that use it see gRPC and the protos; the library's users do not.
target_link_libraries(ccl_local_cluster PUBLIC ccl_testing ccl_client
  ccl_coordinator_client ccl_common_grpc ccl_credentials)
ccl_target_defaults(ccl_local_cluster)

ccl_gtest(conformance_gloo_test SOURCES conformance_test.cc
  LIBS ccl_local_cluster DEFINES CCL_CONFORMANCE_DEVICE="cpu"
  LABELS integration TIMEOUT 600)
ccl_gtest(ccctl_integration_test SOURCES ccctl_test.cc
  LIBS ccl_local_cluster nlohmann_json::nlohmann_json
  DEFINES CCL_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples" DEPENDS ccctl
  LABELS integration TIMEOUT 600 ARGS --gtest_filter=-*Doctor*)
# The doctor's verdict on a throttled rank is a timing verdict: label
# `faults`, as doctor_faults_test and the seeded chaos run, which
# scripts/test.sh runs and the ASan preset leaves out (under ASan's slower
# daemons on a loaded machine a peer of the throttled rank was once named
# before it; docs/doctor.md).
add_test(NAME ccctl_doctor_test
  COMMAND ccctl_integration_test --gtest_filter=*Doctor*)
set_tests_properties(ccctl_doctor_test PROPERTIES
  LABELS "integration;faults" TIMEOUT 300)
ccl_gtest(worker_lifecycle_test SOURCES worker_lifecycle_test.cc
  LIBS ccl_local_cluster LABELS integration TIMEOUT 300)
ccl_gtest(groups_test SOURCES groups_test.cc LIBS ccl_local_cluster
  DEPENDS ccctl LABELS integration TIMEOUT 300)
ccl_gtest(failure_test SOURCES failure_test.cc refusal_test.cc
  LIBS ccl_local_cluster LABELS integration TIMEOUT 900)
ccl_gtest(fresh_world_test SOURCES fresh_world_test.cc
  LIBS ccl_local_cluster LABELS integration TIMEOUT 300)

# The same tests on NCCL (ncclCommSplit): workers on cuda:0..3; label gpu,
# skips visibly with fewer than four GPUs.
if(CCL_HAVE_CUDA)
  ccl_gtest(groups_nccl_test SOURCES groups_test.cc
    LIBS ccl_local_cluster CUDA::cudart
    DEFINES CCL_CONFORMANCE_DEVICE="cuda" CCL_CONFORMANCE_CUDA=1
    DEPENDS ccctl LABELS gpu TIMEOUT 600)
  # Kills, stops and restarts under NCCL: the abort path on real GPUs.
  ccl_gtest(failure_nccl_test SOURCES failure_test.cc refusal_test.cc
    LIBS ccl_local_cluster DEFINES CCL_CONFORMANCE_DEVICE="cuda"
    LABELS gpu TIMEOUT 900)
  # A fresh world's first fill and all_reduce, repeated
  # (CCL_FRESH_WORLD_REPEATS, CCL_FRESH_WORLD_WORKERS).
  ccl_gtest(fresh_world_nccl_test SOURCES fresh_world_test.cc
    LIBS ccl_local_cluster CUDA::cudart
    DEFINES CCL_CONFORMANCE_DEVICE="cuda" CCL_CONFORMANCE_CUDA=1
    LABELS gpu TIMEOUT 900)
endif()

# The client library's plans and reserved sequence numbers, end to end.
ccl_gtest(client_integration_test SOURCES client_test.cc
  LIBS ccl_local_cluster LABELS integration TIMEOUT 300)
