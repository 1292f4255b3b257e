# Host-side pieces of the NCCL backend: need nccl.h and the libraries, no GPU.
if(CCL_HAVE_CUDA)
  add_executable(nccl_host_unit_tests ${CMAKE_CURRENT_LIST_DIR}/nccl_host_test.cc)
  target_link_libraries(nccl_host_unit_tests PRIVATE ccl_worker_core
    GTest::gtest_main)
  ccl_target_defaults(nccl_host_unit_tests)
  add_test(NAME nccl_host_unit_tests COMMAND nccl_host_unit_tests)
  set_tests_properties(nccl_host_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
endif()

# The unique-id plan is plain arithmetic: tested with or without CUDA.
add_executable(nccl_id_plan_test ${CMAKE_CURRENT_LIST_DIR}/nccl_id_plan_test.cc)
target_link_libraries(nccl_id_plan_test PRIVATE absl::statusor absl::strings
  GTest::gtest_main)
ccl_target_defaults(nccl_id_plan_test)
add_test(NAME nccl_id_plan_test COMMAND nccl_id_plan_test)
set_tests_properties(nccl_id_plan_test PROPERTIES LABELS unit TIMEOUT 60)
