# Integration tests of the worker and ccctl: real processes on 127.0.0.1.
add_library(ccl_local_cluster STATIC ${CMAKE_CURRENT_LIST_DIR}/../testing/local_cluster.cc)
target_link_libraries(ccl_local_cluster PUBLIC ccl_testing ccl_client)
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
