# SPDX-License-Identifier: Apache-2.0
# Test helpers.
#
#   zs_add_gtest(NAME src... [NPROC n...] [ARGS a...] [LABELS l...] [TIMEOUT s])
#     A GoogleTest binary linked with the shared MPI-aware main. Without NPROC it runs as one
#     process (a world of size 1). With NPROC it is registered once per count as NAME.npN and run
#     under mpirun (oversubscribed: CI has 2 cores). Exit code 77 means every test skipped.
#
#   zs_add_job_test(NAME COMMAND cmd... [NPROC n | NO_MPIRUN] [EXPECT_FAIL | EXPECT_EXIT_CODE c]
#                   [EXPECT_OUTPUT regex] [REJECT_OUTPUT regex] [MAX_SECONDS s])
#     Runs a whole job under mpirun and checks its exit status, its output and its duration:
#     for behaviour a user sees end to end (e.g. a hung collective aborts the job with a message).
#     REJECT_OUTPUT fails the test when the output matches (e.g. an error must come before training).

# Every test's time limit is multiplied by this (scripts/sanitize.sh runs the suite under the
# sanitizers, several times slower, with 4): zs_scale_test_timeouts() at the end of each tests'
# CMakeLists.txt applies it to the TIMEOUT of every test of that folder, and job tests pass it on to
# their own limit.
set(ZS_TEST_TIME_SCALE 1 CACHE STRING "Factor on every test's time limit")
function(zs_scale_test_timeouts)
  if(ZS_TEST_TIME_SCALE EQUAL 1)
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} TIMEOUT limit)
    if(NOT limit)
      set(limit 1500)  # CTest's default
    endif()
    math(EXPR limit "${limit} * ${ZS_TEST_TIME_SCALE}")
    set_tests_properties(${t} PROPERTIES TIMEOUT ${limit})
  endforeach()
endfunction()

set(ZS_MPIEXEC ${MPIEXEC_EXECUTABLE})
if(NOT ZS_MPIEXEC)
  find_program(ZS_MPIEXEC NAMES mpirun mpiexec REQUIRED)
endif()
# Open MPI refuses to run as root without these; harmless otherwise.
set(ZS_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)

function(zs_mpi_command out nproc)
  set(${out} ${ZS_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${nproc} --oversubscribe ${MPIEXEC_PREFLAGS} PARENT_SCOPE)
endfunction()

function(zs_add_gtest name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "NPROC;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE zs_test_main)
  if(NOT ARG_NPROC)
    zs_add_gtest_run(${name} ${name} TIMEOUT ${ARG_TIMEOUT} LABELS ${ARG_LABELS} ARGS ${ARG_ARGS})
  else()
    foreach(n IN LISTS ARG_NPROC)
      zs_add_gtest_run(${name}.np${n} ${name} NPROC ${n} TIMEOUT ${ARG_TIMEOUT} LABELS ${ARG_LABELS} ARGS ${ARG_ARGS})
    endforeach()
  endif()
endfunction()

# One more CTest entry for an existing test binary (e.g. another gtest filter or rank count).
#   zs_add_gtest_run(TEST_NAME TARGET [NPROC n] [ARGS ...] [LABELS ...] [TIMEOUT s])
function(zs_add_gtest_run test target)
  cmake_parse_arguments(ARG "" "TIMEOUT;NPROC" "LABELS;ARGS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(ARG_NPROC)
    zs_mpi_command(cmd ${ARG_NPROC})
    add_test(NAME ${test} COMMAND ${cmd} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARG_ARGS})
    set_tests_properties(${test} PROPERTIES PROCESSORS ${ARG_NPROC})
  else()
    add_test(NAME ${test} COMMAND ${target} ${ARG_ARGS})
  endif()
  set_tests_properties(${test} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${ZS_MPI_TEST_ENV}")
  if(ARG_LABELS)
    set_tests_properties(${test} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

function(zs_add_job_test name)
  # PARSE_ARGV keeps a ";" inside a regex (with ${ARGN} it would split the regex in two and drop the rest).
  cmake_parse_arguments(PARSE_ARGV 1 ARG "EXPECT_FAIL;NO_MPIRUN"
    "NPROC;EXPECT_OUTPUT;REJECT_OUTPUT;MAX_SECONDS;EXPECT_EXIT_CODE" "COMMAND")
  if(NOT ARG_NPROC)
    set(ARG_NPROC 1)
  endif()
  if(NOT ARG_MAX_SECONDS)
    set(ARG_MAX_SECONDS 120)
  endif()
  math(EXPR scaled_max "${ARG_MAX_SECONDS} * ${ZS_TEST_TIME_SCALE}")  # its TIMEOUT: zs_scale_test_timeouts
  if(ARG_NO_MPIRUN)
    set(cmd)
  else()
    zs_mpi_command(cmd ${ARG_NPROC})
  endif()
  string(REPLACE ";" "\\;" regex "${ARG_EXPECT_OUTPUT}")
  string(REPLACE ";" "\\;" reject "${ARG_REJECT_OUTPUT}")
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND}
      -DEXPECT_FAIL=${ARG_EXPECT_FAIL} "-DEXPECT_EXIT_CODE=${ARG_EXPECT_EXIT_CODE}"
      "-DEXPECT_OUTPUT=${regex}" "-DREJECT_OUTPUT=${reject}"
      -DMAX_SECONDS=${scaled_max}
      "-DCMD=${cmd};${ARG_COMMAND}"
      -P ${PROJECT_SOURCE_DIR}/cmake/RunJobTest.cmake)
  math(EXPR timeout "${ARG_MAX_SECONDS} + 30")
  set_tests_properties(${name} PROPERTIES PROCESSORS ${ARG_NPROC} TIMEOUT ${timeout}
    ENVIRONMENT "${ZS_MPI_TEST_ENV}")
endfunction()
