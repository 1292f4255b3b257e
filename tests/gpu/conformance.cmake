# The integration conformance suite on NCCL: workers on cuda:0..N-1. Label
# gpu; only built with CUDA. Skips (visibly) without enough GPUs.
if(CCL_HAVE_CUDA)
  set(CCL_GPU_WORLD_SIZES "2" CACHE STRING
    "World sizes (comma-separated) of conformance_nccl_test; <= GPUs")
  add_executable(conformance_nccl_test
    ${PROJECT_SOURCE_DIR}/tests/integration/conformance_test.cc)
  target_link_libraries(conformance_nccl_test PRIVATE ccl_local_cluster
    CUDA::cudart GTest::gtest_main)
  target_compile_definitions(conformance_nccl_test PRIVATE
    CCL_CONFORMANCE_DEVICE="cuda" CCL_CONFORMANCE_CUDA=1
    "CCL_CONFORMANCE_WORLD_SIZES=${CCL_GPU_WORLD_SIZES}")
  ccl_target_defaults(conformance_nccl_test)
  add_test(NAME conformance_nccl_test COMMAND conformance_nccl_test)
  set_tests_properties(conformance_nccl_test PROPERTIES LABELS gpu TIMEOUT 900)
endif()
