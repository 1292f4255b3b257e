# Host-side pieces of the NCCL backend: need nccl.h and the libraries, no GPU.
if(CCL_HAVE_CUDA)
  ccl_gtest(nccl_host_unit_tests SOURCES nccl_host_test.cc
    LIBS ccl_worker_core LABELS unit TIMEOUT 60)
endif()

# The unique-id plan is plain arithmetic: tested with or without CUDA.
ccl_gtest(nccl_id_plan_test SOURCES nccl_id_plan_test.cc
  LIBS absl::statusor absl::strings LABELS unit TIMEOUT 60)
