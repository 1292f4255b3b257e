# The Python client's pytest suites (client/python/tests), each file its own
# ctest test so that the summary names them. The cluster ones start real
# cccoord and ccworker processes on 127.0.0.1 with ephemeral ports.
#
# The interpreter is Debian's (/usr/bin/python3, where python3-grpcio,
# python3-protobuf, python3-numpy and python3-pytest install): the python3
# first on PATH may be another one without them.
if(EXISTS /usr/bin/python3)
  set(_ccl_python_default /usr/bin/python3)
else()
  set(_ccl_python_default python3)
endif()
set(CCL_PYTHON ${_ccl_python_default} CACHE FILEPATH
  "Python with grpcio, protobuf, numpy and pytest, for the ccl client tests")

set(_ccl_pytest_env
  "PYTHONPATH=${CCL_PYTHON_DIR}"
  "PYTHONDONTWRITEBYTECODE=1"
  "CCL_BINARY_CCCOORD=$<TARGET_FILE:cccoord>"
  "CCL_BINARY_CCWORKER=$<TARGET_FILE:ccworker>"
  "CCL_BINARY_CCCTL=$<TARGET_FILE:ccctl>"
  "CCL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# suite:label
foreach(_suite dtypes:unit world_view:unit seq_windows:unit ops:integration groups:integration
    errors:integration trace:integration bench:integration
    examples:integration security:integration install:integration
    cluster:integration)
  string(REPLACE ":" ";" _parts ${_suite})
  list(GET _parts 0 _name)
  list(GET _parts 1 _label)
  # A test still running after 240 s (a whole file takes ~10 s) prints every
  # thread's stack before ctest's 300 s kill: a hang says where it is. One
  # python_errors_test run timed out under load and left nothing to go on.
  add_test(NAME python_${_name}_test
    COMMAND ${CCL_PYTHON} -m pytest -q -p no:cacheprovider -rs
      -o faulthandler_timeout=240
      ${PROJECT_SOURCE_DIR}/client/python/tests/test_${_name}.py)
  set_tests_properties(python_${_name}_test PROPERTIES
    LABELS "${_label};python" TIMEOUT 300
    ENVIRONMENT "${_ccl_pytest_env}")
endforeach()
