# SPDX-License-Identifier: Apache-2.0
# Runs CMD (a list) and checks: exit status (EXPECT_EXIT_CODE when given, else non-zero when
# EXPECT_FAIL), output against the regex
# EXPECT_OUTPUT (must match) and REJECT_OUTPUT (must not), and wall time under MAX_SECONDS.
# Used by zs_add_job_test.
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}\n${err}")
message("---- job output (exit ${rc}, ${elapsed}s) ----\n${all}\n---- end of job output ----")
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "FAIL: the job did not finish within ${MAX_SECONDS}s (it hung)")
endif()
if(NOT "${EXPECT_EXIT_CODE}" STREQUAL "")
  if(NOT rc EQUAL EXPECT_EXIT_CODE)
    message(FATAL_ERROR "FAIL: the job exited with ${rc}, expected ${EXPECT_EXIT_CODE}")
  endif()
elseif(EXPECT_FAIL)
  if(rc EQUAL 0)
    message(FATAL_ERROR "FAIL: the job exited 0 but was expected to fail")
  endif()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "FAIL: the job exited with ${rc}")
endif()
if(EXPECT_OUTPUT AND NOT all MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "FAIL: output does not match the expected pattern: ${EXPECT_OUTPUT}")
endif()
if(REJECT_OUTPUT AND all MATCHES "${REJECT_OUTPUT}")
  message(FATAL_ERROR "FAIL: output matches the rejected pattern: ${REJECT_OUTPUT} (at '${CMAKE_MATCH_0}')")
endif()
message("PASS: exit ${rc} after ${elapsed}s")
