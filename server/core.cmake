# The worker's logic: tensor store, communicators (Gloo), ordered executors.
# No gRPC here; the adapter (service.cmake) links this.
add_library(ccl_worker_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/tensor_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/fill.cc
  ${CMAKE_CURRENT_LIST_DIR}/executor.cc
  ${CMAKE_CURRENT_LIST_DIR}/op_fingerprint.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_core.cc
  ${CMAKE_CURRENT_LIST_DIR}/gloo/gloo_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/gloo/gloo_communicator.cc)
target_link_libraries(ccl_worker_core PUBLIC ccl_common gloo absl::status
  absl::statusor absl::strings Threads::Threads)
ccl_target_defaults(ccl_worker_core)

# The NCCL backend and CUDA tensors, only when the root found CUDA and NCCL
# (CCL_HAVE_CUDA); without them a cuda device stays UNIMPLEMENTED.
if(CCL_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures" FORCE)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  enable_language(CUDA)
  # Host-side pieces (mapping, errors, id encoding): no device needed.
  add_library(ccl_nccl_host STATIC ${CMAKE_CURRENT_LIST_DIR}/nccl/nccl_host.cc)
  target_include_directories(ccl_nccl_host PUBLIC ${NCCL_INCLUDE_DIR})
  target_link_libraries(ccl_nccl_host PUBLIC ccl_common ${NCCL_LIBRARY}
    CUDA::cudart absl::status absl::statusor absl::strings)
  ccl_target_defaults(ccl_nccl_host)

  # Device kernels on their own: the host warning flags are not nvcc's.
  add_library(ccl_cuda_kernels STATIC
    ${CMAKE_CURRENT_LIST_DIR}/cuda/fill_kernels.cu
    ${CMAKE_CURRENT_LIST_DIR}/cuda/check_kernels.cu)
  target_include_directories(ccl_cuda_kernels PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(ccl_cuda_kernels PUBLIC CUDA::cudart)
  set_target_properties(ccl_cuda_kernels PROPERTIES CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)

  target_sources(ccl_worker_core PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/nccl/nccl_communicator.cc
    ${CMAKE_CURRENT_LIST_DIR}/cuda/device_memory.cc)
  target_link_libraries(ccl_worker_core PUBLIC ccl_nccl_host ccl_cuda_kernels)
  target_compile_definitions(ccl_worker_core PUBLIC CCL_HAVE_CUDA=1)
endif()
