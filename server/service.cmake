# The worker's gRPC adapter and the ccworker binary.
# Request validation: the limits every request is checked against.
add_library(ccl_request_limits STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/request_limits.cc)
target_link_libraries(ccl_request_limits PUBLIC ccl_common_grpc)
ccl_target_defaults(ccl_request_limits)

add_library(ccl_worker_service STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_service.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/coordinator_kv_store.cc)
target_link_libraries(ccl_worker_service PUBLIC ccl_worker_core ccl_common_grpc
  ccl_request_limits ccl_client)
ccl_target_defaults(ccl_worker_service)

add_executable(ccworker ${CMAKE_CURRENT_SOURCE_DIR}/main.cc)
target_link_libraries(ccworker PRIVATE ccl_worker_service ccl_credentials CLI11::CLI11
  spdlog::spdlog)
ccl_target_defaults(ccworker)
