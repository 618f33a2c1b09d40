# fixformerEmit.cmake - the build step of fixformer_add_model: runs
# `fixformer emit` into a fresh folder, then copies NAME.c, NAME_main.c,
# NAME_weights.c and NAME.weights to names fixed by the CMake target
# (TARGET_model.c, ...), so CMake never needs the description's `name`.
# NAME.h stays as it is: the user includes it by the model's name; so does
# NAME_kernels.c, which NAME.c includes (found in emit/, the include directory).
# emit's other arguments are DIR/TARGET.args, one a line (fixformer_add_model
# writes it when they change).
# Run as: cmake -DFIXFORMER=... -DDESCRIPTION=... -DDIR=... -DTARGET=... -P fixformerEmit.cmake
cmake_minimum_required(VERSION 3.18) # -P scripts start with no policies: IN_LIST
file(STRINGS "${DIR}/${TARGET}.args" more)
set(args emit "${DESCRIPTION}" -o "${DIR}/new" ${more})
file(REMOVE_RECURSE "${DIR}/new")
file(MAKE_DIRECTORY "${DIR}/new" "${DIR}/emit")
execute_process(COMMAND "${FIXFORMER}" ${args} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  string(REPLACE ";" " " shown "${more}")
  message(FATAL_ERROR "fixformer_add_model(${TARGET}): fixformer emit ${DESCRIPTION} ${shown} failed (${rc})")
endif()
# into emit/ (the include directory): unchanged files keep their time, so
# nothing including them is rebuilt; a renamed model leaves no stale header
file(GLOB old RELATIVE "${DIR}/emit" "${DIR}/emit/*")
file(GLOB new RELATIVE "${DIR}/new" "${DIR}/new/*")
foreach(f IN LISTS old)
  if(NOT f IN_LIST new)
    file(REMOVE "${DIR}/emit/${f}")
  endif()
endforeach()
foreach(f IN LISTS new)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${DIR}/new/${f}" "${DIR}/emit/${f}")
endforeach()
file(REMOVE_RECURSE "${DIR}/new")
file(GLOB headers RELATIVE "${DIR}/emit" "${DIR}/emit/*.h")
list(LENGTH headers n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "fixformer_add_model(${TARGET}): expected one header from fixformer emit, got '${headers}'")
endif()
string(REGEX REPLACE "\\.h$" "" name "${headers}")
foreach(pair "${name}.c;${TARGET}_model.c" "${name}_main.c;${TARGET}_main.c"
             "${name}_weights.c;${TARGET}_weights.c" "${name}.weights;${TARGET}.weights")
  list(GET pair 0 from)
  list(GET pair 1 to)
  if(EXISTS "${DIR}/emit/${from}")
    execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${DIR}/emit/${from}" "${DIR}/${to}")
  else()
    file(REMOVE "${DIR}/${to}")
  endif()
endforeach()
file(WRITE "${DIR}/${TARGET}.name" "${name}\n")
