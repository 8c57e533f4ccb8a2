# SPDX-License-Identifier: Apache-2.0
# Installs the build tree into a scratch prefix, builds examples/consumer against it with
# find_package(zeroshard), and runs it under mpirun. Used by the install_consumer test.
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "FAIL: ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK}/consumer-build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/consumer-build)
run(${MPIEXEC} -n 2 --oversubscribe ${WORK}/consumer-build/consumer)
# The README's training program, a few steps on part of the data: it must learn.
run(${MPIEXEC} -n 2 --oversubscribe ${WORK}/consumer-build/fashion_mlp --set train.steps=30 --set train.batch_size=64
    --set data.limit_eval_samples=1000 --set logging.progress=LINES --check-loss-decreases)
message("PASS: installed zeroshard consumed with find_package, the consumer and the README's training program run on 2 ranks")
