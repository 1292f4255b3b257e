# The integration conformance suite on NCCL: workers on cuda:0..N-1. Label
# gpu; only built with CUDA. Skips (visibly) without enough GPUs.
if(CCL_HAVE_CUDA)
  set(CCL_GPU_WORLD_SIZES "2,3,4" CACHE STRING
    "World sizes (comma-separated) of conformance_nccl_test; each <= GPUs unless CCL_TEST_SIMULATED_HOSTS is set")
  ccl_gtest(conformance_nccl_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/integration/conformance_test.cc
    LIBS ccl_local_cluster CUDA::cudart
    DEFINES CCL_CONFORMANCE_DEVICE="cuda" CCL_CONFORMANCE_CUDA=1
      "CCL_CONFORMANCE_WORLD_SIZES=${CCL_GPU_WORLD_SIZES}"
    LABELS gpu TIMEOUT 900)
endif()
