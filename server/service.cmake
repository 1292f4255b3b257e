# The worker's gRPC adapter and the ccworker binary.
add_library(ccl_worker_service STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_service.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/coordinator_kv_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/world_agent.cc)
target_link_libraries(ccl_worker_service PUBLIC ccl_worker_core ccl_common_grpc
  ccl_client)
ccl_target_defaults(ccl_worker_service)

add_executable(ccworker ${CMAKE_CURRENT_SOURCE_DIR}/main.cc)
target_link_libraries(ccworker PRIVATE ccl_worker_service CLI11::CLI11
  spdlog::spdlog)
ccl_target_defaults(ccworker)
