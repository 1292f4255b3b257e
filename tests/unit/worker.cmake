# Worker logic: the tensor store and groups (the in-process conformance
# suite over every backend is in tests/conformance/).
add_executable(tensor_store_unit_tests ${CMAKE_CURRENT_LIST_DIR}/tensor_store_test.cc)
target_link_libraries(tensor_store_unit_tests PRIVATE ccl_worker_core GTest::gtest_main)
ccl_target_defaults(tensor_store_unit_tests)
add_test(NAME tensor_store_unit_tests COMMAND tensor_store_unit_tests)
set_tests_properties(tensor_store_unit_tests PROPERTIES LABELS unit TIMEOUT 60)

add_executable(groups_unit_tests ${CMAKE_CURRENT_LIST_DIR}/groups_unit_test.cc)
target_link_libraries(groups_unit_tests PRIVATE ccl_worker_core GTest::gtest_main)
target_include_directories(groups_unit_tests PRIVATE ${PROJECT_SOURCE_DIR})
ccl_target_defaults(groups_unit_tests)
add_test(NAME groups_unit_tests COMMAND groups_unit_tests)
set_tests_properties(groups_unit_tests PROPERTIES LABELS unit TIMEOUT 60)

add_executable(arrival_check_unit_tests ${CMAKE_CURRENT_LIST_DIR}/arrival_check_test.cc)
target_link_libraries(arrival_check_unit_tests PRIVATE ccl_worker_core GTest::gmock GTest::gtest_main)
target_include_directories(arrival_check_unit_tests PRIVATE ${PROJECT_SOURCE_DIR})
ccl_target_defaults(arrival_check_unit_tests)
add_test(NAME arrival_check_unit_tests COMMAND arrival_check_unit_tests)
set_tests_properties(arrival_check_unit_tests PROPERTIES LABELS unit TIMEOUT 60)

add_executable(plan_work_unit_tests ${CMAKE_CURRENT_LIST_DIR}/plan_work_test.cc)
target_link_libraries(plan_work_unit_tests PRIVATE ccl_worker_core GTest::gmock GTest::gtest_main)
target_include_directories(plan_work_unit_tests PRIVATE ${PROJECT_SOURCE_DIR})
ccl_target_defaults(plan_work_unit_tests)
add_test(NAME plan_work_unit_tests COMMAND plan_work_unit_tests)
set_tests_properties(plan_work_unit_tests PROPERTIES LABELS unit TIMEOUT 60)
