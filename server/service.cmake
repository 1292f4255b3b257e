# The worker's gRPC adapter and the ccworker binary.
# Request validation: the limits every request is checked against.
add_library(ccl_request_limits STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/request_limits.cc)
target_link_libraries(ccl_request_limits PUBLIC ccl_common_grpc)
ccl_target_defaults(ccl_request_limits)

add_library(ccl_worker_service STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_service.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/coordinator_kv_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/world_agent.cc)
target_link_libraries(ccl_worker_service PUBLIC ccl_worker_core ccl_common_grpc
  ccl_request_limits ccl_client)
ccl_target_defaults(ccl_worker_service)

# Metrics of the worker's logic (no gRPC).
add_library(ccl_worker_metrics STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_metrics.cc)
target_link_libraries(ccl_worker_metrics PUBLIC ccl_worker_core ccl_ops)
ccl_target_defaults(ccl_worker_metrics)

add_executable(ccworker ${CMAKE_CURRENT_SOURCE_DIR}/main.cc)
target_link_libraries(ccworker PRIVATE ccl_worker_service ccl_worker_metrics
  ccl_grpc_ops ccl_credentials CLI11::CLI11 spdlog::spdlog)
ccl_target_defaults(ccworker)
