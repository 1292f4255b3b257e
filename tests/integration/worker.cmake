# Integration tests of the worker and ccctl: real processes on 127.0.0.1.
add_library(ccl_local_cluster STATIC ${CMAKE_CURRENT_LIST_DIR}/../testing/local_cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/../testing/client_wire.cc)
# client_wire reaches the client's internals (stubs, the coordinator), so
# the tests that use it see gRPC and the protos; the library's users do not.
target_link_libraries(ccl_local_cluster PUBLIC ccl_testing ccl_client
  ccl_coordinator_client ccl_common_grpc ccl_credentials)
ccl_target_defaults(ccl_local_cluster)

add_executable(conformance_gloo_test ${CMAKE_CURRENT_LIST_DIR}/conformance_test.cc)
target_link_libraries(conformance_gloo_test PRIVATE ccl_local_cluster GTest::gtest_main)
target_compile_definitions(conformance_gloo_test PRIVATE CCL_CONFORMANCE_DEVICE="cpu")
ccl_target_defaults(conformance_gloo_test)
add_test(NAME conformance_gloo_test COMMAND conformance_gloo_test)
set_tests_properties(conformance_gloo_test PROPERTIES LABELS integration TIMEOUT 600)

add_executable(ccctl_integration_test ${CMAKE_CURRENT_LIST_DIR}/ccctl_test.cc)
target_link_libraries(ccctl_integration_test PRIVATE ccl_local_cluster
  nlohmann_json::nlohmann_json GTest::gtest_main)
target_compile_definitions(ccctl_integration_test PRIVATE
  CCL_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
add_dependencies(ccctl_integration_test ccctl)
ccl_target_defaults(ccctl_integration_test)
add_test(NAME ccctl_integration_test COMMAND ccctl_integration_test)
set_tests_properties(ccctl_integration_test PROPERTIES LABELS integration TIMEOUT 600)

add_executable(worker_lifecycle_test ${CMAKE_CURRENT_LIST_DIR}/worker_lifecycle_test.cc)
target_link_libraries(worker_lifecycle_test PRIVATE ccl_local_cluster GTest::gtest_main)
ccl_target_defaults(worker_lifecycle_test)
add_test(NAME worker_lifecycle_test COMMAND worker_lifecycle_test)
set_tests_properties(worker_lifecycle_test PROPERTIES LABELS integration TIMEOUT 300)

add_executable(groups_test ${CMAKE_CURRENT_LIST_DIR}/groups_test.cc)
target_link_libraries(groups_test PRIVATE ccl_local_cluster GTest::gtest_main)
add_dependencies(groups_test ccctl)
ccl_target_defaults(groups_test)
add_test(NAME groups_test COMMAND groups_test)
set_tests_properties(groups_test PROPERTIES LABELS integration TIMEOUT 300)

add_executable(failure_test ${CMAKE_CURRENT_LIST_DIR}/failure_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/refusal_test.cc)
target_link_libraries(failure_test PRIVATE ccl_local_cluster GTest::gtest_main
  GTest::gmock)
ccl_target_defaults(failure_test)
add_test(NAME failure_test COMMAND failure_test)
set_tests_properties(failure_test PROPERTIES LABELS integration TIMEOUT 900)

# The same tests on NCCL (ncclCommSplit): workers on cuda:0..3; label gpu,
# skips visibly with fewer than four GPUs.
if(CCL_HAVE_CUDA)
  add_executable(groups_nccl_test ${CMAKE_CURRENT_LIST_DIR}/groups_test.cc)
  target_link_libraries(groups_nccl_test PRIVATE ccl_local_cluster
    CUDA::cudart GTest::gtest_main)
  target_compile_definitions(groups_nccl_test PRIVATE
    CCL_CONFORMANCE_DEVICE="cuda" CCL_CONFORMANCE_CUDA=1)
  add_dependencies(groups_nccl_test ccctl)
  ccl_target_defaults(groups_nccl_test)
  add_test(NAME groups_nccl_test COMMAND groups_nccl_test)
  set_tests_properties(groups_nccl_test PROPERTIES LABELS gpu TIMEOUT 600)

  # Kills, stops and restarts under NCCL: the abort path on real GPUs.
  add_executable(failure_nccl_test ${CMAKE_CURRENT_LIST_DIR}/failure_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/refusal_test.cc)
  target_link_libraries(failure_nccl_test PRIVATE ccl_local_cluster
    GTest::gtest_main GTest::gmock)
  target_compile_definitions(failure_nccl_test PRIVATE
    CCL_CONFORMANCE_DEVICE="cuda")
  ccl_target_defaults(failure_nccl_test)
  add_test(NAME failure_nccl_test COMMAND failure_nccl_test)
  set_tests_properties(failure_nccl_test PROPERTIES LABELS gpu TIMEOUT 900)
endif()

# The client library's plans and reserved sequence numbers, end to end.
add_executable(client_integration_test ${CMAKE_CURRENT_LIST_DIR}/client_test.cc)
target_link_libraries(client_integration_test PRIVATE ccl_local_cluster GTest::gtest_main)
ccl_target_defaults(client_integration_test)
add_test(NAME client_integration_test COMMAND client_integration_test)
set_tests_properties(client_integration_test PROPERTIES LABELS integration TIMEOUT 300)
