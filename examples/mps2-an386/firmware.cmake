# firmware.cmake - what the bare-metal examples' builds share
# (mps2-an386/CMakeLists.txt, riscv32-virt/CMakeLists.txt): the model of
# -DMODEL=..lua -DWEIGHTS=..safetensors [-DDTYPE=f32|bf16|int8], emitted at
# build time by fixformer_add_model for the toolchain's core with its weights
# compiled in, and main.c (beside this file) over it and the -DINPUTS=folder's
# inputs.h:
#   board_firmware(SCRIPT linker.ld HZ core-clock SOURCES startup.S board.c ... RUN qemu ...)
# makes NAME.elf (the model's name), prints its size, and the target `run`
# runs it (RUN, then -kernel NAME.elf); without a toolchain file it makes
# NAME_host instead: main.c on this machine (host.c), to compare outputs and
# count instructions.
find_package(fixformer 0.1 CONFIG REQUIRED)
set(MODEL "" CACHE FILEPATH "the model description (.lua)")
set(WEIGHTS "" CACHE FILEPATH "its weights (.safetensors), compiled into the firmware")
set(DTYPE "" CACHE STRING "the weight type: f32, bf16 or int8 (default: the description's)")
set(INPUTS "" CACHE PATH "the folder of inputs.h (main.c says what it defines)")
set(MAX_NEW "" CACHE STRING "an encoder-decoder decodes at most this many ids (default: until EOS or max_seq)")
option(FF_WERROR "warnings are errors" OFF)
foreach(var MODEL WEIGHTS INPUTS)
  if(NOT ${var})
    message(FATAL_ERROR "-D${var}=... is needed (see the head of CMakeLists.txt)")
  endif()
endforeach()
if(NOT EXISTS "${INPUTS}/inputs.h")
  message(FATAL_ERROR "INPUTS ${INPUTS}: no inputs.h there")
endif()

# the model's name (tiny: tiny.h, tiny_run, TINY_STATE_BYTES) for main.c, from
# the description, again when it changes
get_target_property(fixformer fixformer::fixformer_cli IMPORTED_LOCATION)
execute_process(COMMAND "${fixformer}" info "${MODEL}" RESULT_VARIABLE rc OUTPUT_VARIABLE info ERROR_VARIABLE error)
if(NOT rc EQUAL 0 OR NOT info MATCHES "\n  name = \"([A-Za-z_][A-Za-z0-9_]*)\"")
  message(FATAL_ERROR "fixformer info ${MODEL}: ${error}")
endif()
set(BOARD_MODEL "${CMAKE_MATCH_1}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${MODEL}")

set(CMAKE_C_STANDARD 99)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
add_compile_options(-O2 -Wall -Wextra -fdata-sections -ffunction-sections)
if(FF_WERROR)
  add_compile_options(-Werror)
endif()
set(dtype "")
if(DTYPE)
  set(dtype DTYPE ${DTYPE})
endif()
fixformer_add_model(model DESCRIPTION "${MODEL}" WEIGHTS "${WEIGHTS}" EMBED ${dtype})

set(BOARD_COMMON "${CMAKE_CURRENT_LIST_DIR}") # main.c, board.h, board_common.c, host.c

# the start-up code is the board's (SOURCES); of the C library (the toolchain
# file's) only memcpy, memset and expf are linked
function(_board_link target sources)
  add_executable(${target} ${ARGN} ${sources} ${BOARD_COMMON}/board_common.c)
  set_target_properties(${target} PROPERTIES SUFFIX .elf)
  target_compile_definitions(${target} PRIVATE BOARD_HZ=${FW_HZ})
  target_include_directories(${target} PRIVATE ${BOARD_COMMON})
  get_filename_component(script "${FW_SCRIPT}" ABSOLUTE)
  get_filename_component(dir "${script}" DIRECTORY)
  target_link_options(${target} PRIVATE -nostartfiles -L${dir} -T ${script} -Wl,--gc-sections
                      -Wl,-Map=$<TARGET_FILE_DIR:${target}>/${target}.map)
  file(GLOB scripts "${dir}/*.ld")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${scripts})
endfunction()

function(board_firmware)
  cmake_parse_arguments(PARSE_ARGV 0 FW "" "SCRIPT;HZ" "SOURCES;RUN")
  set(name ${BOARD_MODEL})
  string(TOUPPER "${name}" name_up)
  if(CMAKE_CROSSCOMPILING)
    _board_link(${name} "${FW_SOURCES}" ${BOARD_COMMON}/main.c)
  else()
    set(name ${name}_host)
    add_executable(${name} ${BOARD_COMMON}/host.c ${BOARD_COMMON}/main.c)
  endif()
  target_compile_definitions(${name} PRIVATE MODEL=${BOARD_MODEL} MODEL_UP=${name_up} MODEL_H="${BOARD_MODEL}.h")
  if(MAX_NEW)
    target_compile_definitions(${name} PRIVATE INPUT_MAX_NEW=${MAX_NEW})
  endif()
  target_include_directories(${name} PRIVATE "${INPUTS}" ${BOARD_COMMON})
  target_link_libraries(${name} PRIVATE model)
  if(NOT CMAKE_CROSSCOMPILING)
    return()
  endif()
  string(REGEX REPLACE "gcc(-[0-9.]+)?$" "size" size "${CMAKE_C_COMPILER}")
  if(EXISTS "${size}")
    add_custom_command(TARGET ${name} POST_BUILD COMMAND ${size} $<TARGET_FILE:${name}> VERBATIM)
  endif()
  add_custom_target(run COMMAND ${FW_RUN} -kernel $<TARGET_FILE:${name}> DEPENDS ${name} USES_TERMINAL VERBATIM)
  # expf_probe.elf, built on demand: the start-up code with a main that calls
  # expf alone, linked the same way; the model may link no more of the C
  # library than it does, but memcpy and memset (tests/board.py)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/expf_probe.c"
       "#include <math.h>\nvolatile float x = 1.5f;\nint main(void) { x = expf(x); return 0; }\n")
  _board_link(expf_probe "${FW_SOURCES}" "${CMAKE_CURRENT_BINARY_DIR}/expf_probe.c")
  set_target_properties(expf_probe PROPERTIES EXCLUDE_FROM_ALL ON)
  target_link_libraries(expf_probe PRIVATE m)
endfunction()
