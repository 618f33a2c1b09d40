# fixformerModel.cmake - build-time code generation, in the manner of
# protobuf_generate:
#
#   fixformer_add_model(TARGET DESCRIPTION model.lua [WEIGHTS w.safetensors]
#                       [EMBED] [ISA native|<a row of kernels/isas.h>] [WITH_MAIN])
#
# runs `fixformer emit` at build time (again whenever the description, the
# weights or the fixformer executable change) and gives TARGET, a static
# library of the emitted NAME.c (+ NAME_weights.c with EMBED) whose include
# directory holds NAME.h and NAME_kernels.c (the kernels NAME.c includes); WITH_MAIN also gives the executable TARGET_main (the
# driver with the flags of `fixformer run`).  Without EMBED, WEIGHTS are packed
# into ${TARGET}.weights, whose path is the target property FIXFORMER_WEIGHTS.
# The description's `name` is never repeated: the build step copies the
# emitted files to names fixed by TARGET (see fixformerEmit.cmake).
#
# The executable is the target fixformer::fixformer_cli: imported from the
# installed package, or the in-tree `fixformer` (add_subdirectory/FetchContent).
# global: in-tree this file is included in fixformer's own directory scope
set_property(GLOBAL PROPERTY FIXFORMER_EMIT_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/fixformerEmit.cmake")
# the ISA table (ISA's flags): kernels/isas.h in-tree, installed beside this file
include("${CMAKE_CURRENT_LIST_DIR}/fixformerIsas.cmake")
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/isas.h")
  set_property(GLOBAL PROPERTY FIXFORMER_ISAS_H "${CMAKE_CURRENT_LIST_DIR}/isas.h")
else()
  set_property(GLOBAL PROPERTY FIXFORMER_ISAS_H "${CMAKE_CURRENT_LIST_DIR}/../kernels/isas.h")
endif()

function(fixformer_add_model TARGET)
  cmake_parse_arguments(PARSE_ARGV 1 FFM "EMBED;WITH_MAIN" "DESCRIPTION;WEIGHTS;ISA" "")
  if(FFM_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fixformer_add_model(${TARGET}): unknown arguments ${FFM_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT FFM_DESCRIPTION)
    message(FATAL_ERROR "fixformer_add_model(${TARGET}): DESCRIPTION model.lua is required")
  endif()
  if(FFM_EMBED AND NOT FFM_WEIGHTS)
    message(FATAL_ERROR "fixformer_add_model(${TARGET}): EMBED needs WEIGHTS")
  endif()
  get_property(isas_h GLOBAL PROPERTY FIXFORMER_ISAS_H)
  fixformer_read_isas("${isas_h}")
  if(FFM_ISA AND NOT FFM_ISA STREQUAL "native" AND NOT FFM_ISA IN_LIST FIXFORMER_ISAS)
    string(REPLACE ";" "|" known "native;${FIXFORMER_ISAS}")
    message(FATAL_ERROR "fixformer_add_model(${TARGET}): ISA ${FFM_ISA} is not one of ${known}")
  endif()
  if(NOT TARGET fixformer::fixformer_cli)
    message(FATAL_ERROR "fixformer_add_model: no fixformer::fixformer_cli (find_package(fixformer) or add_subdirectory first)")
  endif()
  get_property(_FIXFORMER_EMIT_SCRIPT GLOBAL PROPERTY FIXFORMER_EMIT_SCRIPT)
  get_filename_component(desc "${FFM_DESCRIPTION}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${TARGET}.fixformer")
  set(outputs "${dir}/${TARGET}_model.c")
  set(sources "${dir}/${TARGET}_model.c")
  set(deps "${desc}" "${_FIXFORMER_EMIT_SCRIPT}")
  set(defs -DFIXFORMER=$<TARGET_FILE:fixformer::fixformer_cli> "-DDESCRIPTION=${desc}" "-DDIR=${dir}" "-DTARGET=${TARGET}")
  if(FFM_WEIGHTS)
    get_filename_component(weights "${FFM_WEIGHTS}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND deps "${weights}")
    list(APPEND defs "-DWEIGHTS=${weights}")
    if(FFM_EMBED)
      list(APPEND defs -DEMBED=ON)
      list(APPEND outputs "${dir}/${TARGET}_weights.c")
      list(APPEND sources "${dir}/${TARGET}_weights.c")
    else()
      list(APPEND outputs "${dir}/${TARGET}.weights")
    endif()
  endif()
  if(FFM_ISA)
    list(APPEND defs "-DISA=${FFM_ISA}")
  endif()
  if(FFM_WITH_MAIN)
    list(APPEND defs -DWITH_MAIN=ON)
    list(APPEND outputs "${dir}/${TARGET}_main.c")
  endif()
  # in-tree, depend on the real target (a rebuilt fixformer re-emits); installed, on its file
  get_target_property(cli fixformer::fixformer_cli ALIASED_TARGET)
  if(cli)
    list(APPEND deps ${cli})
  else()
    list(APPEND deps $<TARGET_FILE:fixformer::fixformer_cli>)
  endif()
  # the stamp is the output and the emitted files byproducts: copied only when
  # they change, an unchanged emission recompiles nothing
  add_custom_command(
    OUTPUT "${dir}/${TARGET}.name"
    BYPRODUCTS ${outputs}
    COMMAND ${CMAKE_COMMAND} ${defs} -P "${_FIXFORMER_EMIT_SCRIPT}"
    DEPENDS ${deps}
    COMMENT "fixformer emit ${FFM_DESCRIPTION} (${TARGET})"
    VERBATIM)
  # one target runs the step; the library and driver wait for it (listed in
  # several targets, the command would otherwise run once per target, in parallel)
  add_custom_target(${TARGET}_emit DEPENDS "${dir}/${TARGET}.name")
  add_library(${TARGET} STATIC ${sources})
  add_dependencies(${TARGET} ${TARGET}_emit)
  target_include_directories(${TARGET} PUBLIC "${dir}/emit")
  set_target_properties(${TARGET} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
  if(FFM_WEIGHTS AND NOT FFM_EMBED)
    set_target_properties(${TARGET} PROPERTIES FIXFORMER_WEIGHTS "${dir}/${TARGET}.weights")
  endif()
  if(FFM_ISA STREQUAL "native")
    target_compile_options(${TARGET} PRIVATE -march=native)
  elseif(FFM_ISA)
    target_compile_options(${TARGET} PRIVATE ${FIXFORMER_ISA_OPTS_${FFM_ISA}})
  endif()
  find_package(Threads REQUIRED)
  target_link_libraries(${TARGET} PUBLIC Threads::Threads m)
  if(FFM_WITH_MAIN)
    add_executable(${TARGET}_main "${dir}/${TARGET}_main.c")
    target_link_libraries(${TARGET}_main PRIVATE ${TARGET})
    set_target_properties(${TARGET}_main PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
    add_dependencies(${TARGET}_main ${TARGET}_emit)
  endif()
endfunction()
