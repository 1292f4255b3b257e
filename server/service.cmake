# The worker's gRPC adapter and the ccworker binary.
add_library(ccl_worker_service STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_service.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/coordinator_kv_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/world_agent.cc)
target_link_libraries(ccl_worker_service PUBLIC ccl_worker_core ccl_common_grpc
  ccl_client)
ccl_target_defaults(ccl_worker_service)

# Metrics of the worker's logic (no gRPC).
add_library(ccl_worker_metrics STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_metrics.cc)
target_link_libraries(ccl_worker_metrics PUBLIC ccl_worker_core ccl_ops)
ccl_target_defaults(ccl_worker_metrics)

add_executable(ccworker ${CMAKE_CURRENT_SOURCE_DIR}/main.cc)
target_link_libraries(ccworker PRIVATE ccl_worker_service ccl_worker_metrics
  ccl_grpc_ops CLI11::CLI11 spdlog::spdlog)
ccl_target_defaults(ccworker)
