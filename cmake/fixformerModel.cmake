# fixformerModel.cmake - build-time code generation, in the manner of
# protobuf_generate:
#
#   fixformer_add_model(<target> DESCRIPTION model.lua [WEIGHTS w.safetensors] [EMBED]
#                       [DTYPE f32|bf16|int8] [TARGET triple] [ISA native|<a row of kernels/isas.h>]
#                       [WITH_MAIN] [EMIT_ARGS arg...])
#
# runs `fixformer emit` at build time (again whenever the description, the
# weights, the arguments or the fixformer executable change) and gives
# <target>, a static library of the emitted NAME.c (+ NAME_weights.c with
# EMBED) whose include directory holds NAME.h and NAME_kernels.c (the kernels
# NAME.c includes: a dependency, never a source); WITH_MAIN also gives the
# executable <target>_main (the driver with the flags of `fixformer run`).
# Without EMBED, WEIGHTS are packed into <target>.weights, whose path is the
# target property FIXFORMER_WEIGHTS.  The description's `name` (NAME) is never
# repeated: the build step copies the emitted files to names fixed by <target>
# (see fixformerEmit.cmake).
#
# TARGET is emit's --target; in a cross build (CMAKE_CROSSCOMPILING) it
# defaults to a triple from CMAKE_SYSTEM_PROCESSOR and the compiler
# (aarch64-linux-gnu, thumbv7em-none-eabi, riscv32-unknown-elf).  ISA defaults,
# with a TARGET, to the best row of the ISA table every CPU of its architecture
# runs (neon on aarch64, else generic), as `fixformer emit --target` picks; its
# compiler flags are the library's.  EMIT_ARGS go to `fixformer emit` as they
# are (--no-line, --allow-nonfinite).
#
# The executable is the target fixformer::fixformer_cli: imported from the
# installed package (in a cross build, one that runs on this machine), or the
# in-tree `fixformer` (add_subdirectory/FetchContent).
# global: in-tree this file is included in fixformer's own directory scope
set_property(GLOBAL PROPERTY FIXFORMER_EMIT_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/fixformerEmit.cmake")
# the ISA table (ISA's flags): kernels/isas.h in-tree, installed beside this file
include("${CMAKE_CURRENT_LIST_DIR}/fixformerIsas.cmake")
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/isas.h")
  set_property(GLOBAL PROPERTY FIXFORMER_ISAS_H "${CMAKE_CURRENT_LIST_DIR}/isas.h")
else()
  set_property(GLOBAL PROPERTY FIXFORMER_ISAS_H "${CMAKE_CURRENT_LIST_DIR}/../kernels/isas.h")
endif()

# The triple of a cross build: CMAKE_C_COMPILER_TARGET (clang's --target), else
# CMAKE_SYSTEM_PROCESSOR's architecture and the rest of the compiler's triple
# (the multiarch folder, or the compiler's name: arm-none-eabi-gcc), else
# unknown-<system>.
function(_fixformer_cross_triple var who)
  fixformer_arch(arch "${CMAKE_SYSTEM_PROCESSOR}")
  get_filename_component(cc "${CMAKE_C_COMPILER}" NAME)
  if(CMAKE_C_COMPILER_TARGET)
    set(triple "${CMAKE_C_COMPILER_TARGET}")
  elseif(NOT arch)
    message(FATAL_ERROR "${who}: a cross build without CMAKE_SYSTEM_PROCESSOR: give TARGET a triple")
  elseif(CMAKE_LIBRARY_ARCHITECTURE MATCHES "^[^-]+-(.+)$")
    set(triple "${arch}-${CMAKE_MATCH_1}")
  elseif(cc MATCHES "^[^-]+-(.+)-(gcc|cc|clang)(-[0-9.]+)?$")
    set(triple "${arch}-${CMAKE_MATCH_1}")
  else()
    set(triple "${arch}-unknown-${CMAKE_SYSTEM_NAME}")
  endif()
  string(TOLOWER "${triple}" triple)
  set(${var} "${triple}" PARENT_SCOPE)
endfunction()

# Writes FILE only when its text changes: what depends on it is rebuilt only then.
function(_fixformer_write_if_changed file text)
  if(EXISTS "${file}")
    file(READ "${file}" old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE "${file}" "${text}")
endfunction()

function(fixformer_add_model TARGET)
  set(who "fixformer_add_model(${TARGET})")
  cmake_parse_arguments(PARSE_ARGV 1 FFM "EMBED;WITH_MAIN" "DESCRIPTION;WEIGHTS;ISA;DTYPE;TARGET" "EMIT_ARGS")
  if(FFM_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${who}: unknown arguments ${FFM_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT FFM_DESCRIPTION)
    message(FATAL_ERROR "${who}: DESCRIPTION model.lua is required")
  endif()
  if(FFM_EMBED AND NOT FFM_WEIGHTS)
    message(FATAL_ERROR "${who}: EMBED needs WEIGHTS")
  endif()
  if(FFM_DTYPE AND NOT FFM_DTYPE MATCHES "^(f32|bf16|int8)$")
    message(FATAL_ERROR "${who}: DTYPE ${FFM_DTYPE} is not one of f32|bf16|int8")
  endif()
  # the keywords' flags and -o (the build step's) are not EMIT_ARGS
  foreach(arg IN LISTS FFM_EMIT_ARGS)
    string(REGEX REPLACE "=.*" "" flag "${arg}")
    if(flag MATCHES "^(-o|--output|--weights|--embed|--dtype|--target|--isa|--with-main)$")
      message(FATAL_ERROR "${who}: EMIT_ARGS ${arg}: give it as the keyword (WEIGHTS, EMBED, DTYPE, TARGET, ISA, "
                          "WITH_MAIN), or not at all (-o)")
    endif()
  endforeach()
  get_property(isas_h GLOBAL PROPERTY FIXFORMER_ISAS_H)
  fixformer_read_isas("${isas_h}")
  if(FFM_ISA AND NOT FFM_ISA STREQUAL "native" AND NOT FFM_ISA IN_LIST FIXFORMER_ISAS)
    string(REPLACE ";" "|" known "native;${FIXFORMER_ISAS}")
    message(FATAL_ERROR "${who}: ISA ${FFM_ISA} is not one of ${known}")
  endif()
  set(triple "${FFM_TARGET}")
  if(NOT triple AND CMAKE_CROSSCOMPILING)
    _fixformer_cross_triple(triple "${who}")
  endif()
  if(triple)
    fixformer_arch(arch "${triple}")
    if(FFM_ISA STREQUAL "native")
      message(FATAL_ERROR "${who}: ISA native is this machine's, not the target ${triple}'s")
    elseif(FFM_ISA)
      fixformer_isa_runs(runs ${FFM_ISA} "${arch}")
      if(NOT runs)
        set(ok "")
        foreach(isa IN LISTS FIXFORMER_ISAS)
          fixformer_isa_runs(runs ${isa} "${arch}")
          if(runs)
            list(APPEND ok ${isa})
          endif()
        endforeach()
        string(REPLACE ";" "|" ok "${ok}")
        message(FATAL_ERROR "${who}: ISA ${FFM_ISA} does not run on the target ${triple} (${ok})")
      endif()
    else()
      fixformer_target_isa(FFM_ISA "${arch}")
    endif()
  endif()
  if(NOT TARGET fixformer::fixformer_cli)
    message(FATAL_ERROR "fixformer_add_model: no fixformer::fixformer_cli (find_package(fixformer) or add_subdirectory first)")
  endif()
  get_property(_FIXFORMER_EMIT_SCRIPT GLOBAL PROPERTY FIXFORMER_EMIT_SCRIPT)
  get_filename_component(desc "${FFM_DESCRIPTION}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${TARGET}.fixformer")
  set(outputs "${dir}/${TARGET}_model.c")
  set(sources "${dir}/${TARGET}_model.c")
  # emit's arguments but the description and -o, one a line: a file the step depends on, so that
  # a changed argument emits again and an unchanged one nothing
  set(args "")
  set(deps "${desc}" "${_FIXFORMER_EMIT_SCRIPT}" "${dir}/${TARGET}.args")
  if(FFM_WEIGHTS)
    get_filename_component(weights "${FFM_WEIGHTS}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND deps "${weights}")
    list(APPEND args --weights "${weights}")
    if(FFM_EMBED)
      list(APPEND args --embed)
      list(APPEND outputs "${dir}/${TARGET}_weights.c")
      list(APPEND sources "${dir}/${TARGET}_weights.c")
    else()
      list(APPEND outputs "${dir}/${TARGET}.weights")
    endif()
  endif()
  if(triple)
    list(APPEND args --target "${triple}")
  endif()
  if(FFM_ISA)
    list(APPEND args --isa "${FFM_ISA}")
  endif()
  if(FFM_DTYPE)
    list(APPEND args --dtype "${FFM_DTYPE}")
  endif()
  if(FFM_WITH_MAIN)
    list(APPEND args --with-main)
    list(APPEND outputs "${dir}/${TARGET}_main.c")
  endif()
  list(APPEND args ${FFM_EMIT_ARGS})
  string(REPLACE ";" "\n" lines "${args}")
  _fixformer_write_if_changed("${dir}/${TARGET}.args" "${lines}\n")
  set(defs -DFIXFORMER=$<TARGET_FILE:fixformer::fixformer_cli> "-DDESCRIPTION=${desc}" "-DDIR=${dir}" "-DTARGET=${TARGET}")
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
  # the model needs libm (expf); threads only the driver, and only where there is an OS
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Generic")
    find_package(Threads REQUIRED)
    target_link_libraries(${TARGET} PUBLIC Threads::Threads)
  endif()
  target_link_libraries(${TARGET} PUBLIC m)
  if(FFM_WITH_MAIN)
    add_executable(${TARGET}_main "${dir}/${TARGET}_main.c")
    target_link_libraries(${TARGET}_main PRIVATE ${TARGET})
    set_target_properties(${TARGET}_main PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
    add_dependencies(${TARGET}_main ${TARGET}_emit)
  endif()
endfunction()
