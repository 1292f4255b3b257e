# The worker's logic: tensor store, communicators (Gloo), ordered executors.
# No gRPC here; the adapter (service.cmake) links this.
add_library(ccl_worker_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/tensor_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/fill.cc
  ${CMAKE_CURRENT_LIST_DIR}/executor.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_core.cc
  ${CMAKE_CURRENT_LIST_DIR}/gloo/gloo_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/gloo/gloo_communicator.cc)
target_link_libraries(ccl_worker_core PUBLIC ccl_common gloo absl::status
  absl::statusor absl::strings Threads::Threads)
ccl_target_defaults(ccl_worker_core)
