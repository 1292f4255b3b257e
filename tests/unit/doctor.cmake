# ccctl doctor's finder on planted faults (no cluster).
ccl_gtest(doctor_judge_test SOURCES doctor_judge_test.cc LIBS ccl_ccctl
  LABELS unit TIMEOUT 60)
