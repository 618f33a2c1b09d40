# fixformerIsas.cmake - reads the ISA table, kernels/isas.h (its one copy: the
# host build, fixformer_add_model and the installed package all read it here).
#
#   fixformer_read_isas(PATH)  sets, in the caller's scope,
#     FIXFORMER_ISAS               the ISA names, in the table's order
#     FIXFORMER_ISA_MR_<isa>       the register tile's rows
#     FIXFORMER_ISA_NR_<isa>       ... and columns (the weights' panel width)
#     FIXFORMER_ISA_FLAGS_<isa>    the compiler flags, a string
#     FIXFORMER_ISA_OPTS_<isa>     the same, a list
#     FIXFORMER_ISA_CPU_<isa>      the CPU features it needs at run time, a list
#     FIXFORMER_ISA_TARGETS_<isa>  the architectures it runs on, a list (empty: all)
#   fixformer_arch(VAR NAME)           a processor or triple as the table names architectures
#   fixformer_isa_runs(VAR ISA ARCH)   whether code for ARCH can use ISA
#   fixformer_target_isa(VAR ARCH)     the ISA `fixformer emit --target` picks for ARCH
function(fixformer_read_isas path)
  file(READ "${path}" text)
  string(FIND "${text}" "#define FF_ISAS(X)" at)
  if(at LESS 0)
    message(FATAL_ERROR "${path}: no #define FF_ISAS(X), the ISA table")
  endif()
  string(SUBSTRING "${text}" ${at} -1 text) # the rows, not the comment above them
  string(REPLACE "\\\n" " " text "${text}") # one line per row: the X-macro's continuations joined
  set(head "X\\(([a-z0-9_]+), *([0-9]+), *([0-9]+), *\"([^\"]*)\", *\"([^\"]*)\", *\"([^\"]*)\", *[0-9]+")
  string(REGEX MATCHALL "${head}" rows "${text}")
  string(REGEX MATCHALL "[ (]X\\([a-z0-9_]+," starts "${text}")
  list(LENGTH rows n_rows)
  list(LENGTH starts n_starts)
  set(names "")
  foreach(row IN LISTS rows)
    string(REGEX MATCH "${head}" _ "${row}")
    set(isa "${CMAKE_MATCH_1}")
    list(APPEND names "${isa}")
    set(FIXFORMER_ISA_MR_${isa} "${CMAKE_MATCH_2}" PARENT_SCOPE)
    set(FIXFORMER_ISA_NR_${isa} "${CMAKE_MATCH_3}" PARENT_SCOPE)
    set(FIXFORMER_ISA_FLAGS_${isa} "${CMAKE_MATCH_4}" PARENT_SCOPE)
    separate_arguments(opts UNIX_COMMAND "${CMAKE_MATCH_4}")
    set(FIXFORMER_ISA_OPTS_${isa} "${opts}" PARENT_SCOPE)
    separate_arguments(cpu UNIX_COMMAND "${CMAKE_MATCH_5}")
    set(FIXFORMER_ISA_CPU_${isa} "${cpu}" PARENT_SCOPE)
    separate_arguments(targets UNIX_COMMAND "${CMAKE_MATCH_6}")
    set(FIXFORMER_ISA_TARGETS_${isa} "${targets}" PARENT_SCOPE)
  endforeach()
  if(NOT "generic" IN_LIST names OR NOT n_rows EQUAL n_starts)
    message(FATAL_ERROR "${path}: could not read the ISA table (${n_rows} of ${n_starts} rows read)")
  endif()
  set(FIXFORMER_ISAS "${names}" PARENT_SCOPE)
endfunction()

# fixformer_arch(VAR NAME): NAME, a CMAKE_SYSTEM_PROCESSOR or a target triple, as the
# architecture `fixformer emit --target` and the table's targets name it: x86_64, i686,
# aarch64, riscv32, riscv64, thumbv6m / thumbv7m / thumbv7em / thumbv8m.main (a Cortex-M
# core), arm; any other name lowercased
function(fixformer_arch var name)
  string(TOLOWER "${name}" p)
  string(REGEX REPLACE "-.*" "" p "${p}")
  if(name MATCHES "^[Cc]ortex-[Mm]") # a core, not a triple: cortex-m4 -> thumbv7em
    string(TOLOWER "${name}" p)
  endif()
  if(p MATCHES "^(amd64|x64|x86_64)$")
    set(p x86_64)
  elseif(p MATCHES "^(i[3-6]86|x86)$")
    set(p i686)
  elseif(p MATCHES "^(arm64|aarch64)")
    set(p aarch64)
  elseif(p MATCHES "^(rv|riscv)32")
    set(p riscv32)
  elseif(p MATCHES "^(rv|riscv)64")
    set(p riscv64)
  elseif(p MATCHES "^cortex-m(0|1)")
    set(p thumbv6m)
  elseif(p MATCHES "^cortex-m3$")
    set(p thumbv7m)
  elseif(p MATCHES "^cortex-m(4|7)")
    set(p thumbv7em)
  elseif(p MATCHES "^cortex-m(33|35p|52|55|85)")
    set(p thumbv8m.main)
  elseif(p MATCHES "^(arm|cortex)")
    set(p arm)
  endif()
  set(${var} "${p}" PARENT_SCOPE)
endfunction()

# After fixformer_read_isas: fixformer_isa_runs(VAR ISA ARCH), whether code for ARCH can use
# the ISA (its row names no architecture, or ARCH), and fixformer_target_isa(VAR ARCH), the
# best ISA every CPU of ARCH runs (its row needs no CPU feature): what `emit --target` picks
function(fixformer_isa_runs var isa arch)
  set(runs FALSE)
  if(NOT FIXFORMER_ISA_TARGETS_${isa} OR arch IN_LIST FIXFORMER_ISA_TARGETS_${isa})
    set(runs TRUE)
  endif()
  set(${var} ${runs} PARENT_SCOPE)
endfunction()
function(fixformer_target_isa var arch)
  set(best "")
  foreach(isa IN LISTS FIXFORMER_ISAS)
    fixformer_isa_runs(runs ${isa} "${arch}")
    if(runs AND NOT FIXFORMER_ISA_CPU_${isa})
      set(best ${isa})
    endif()
  endforeach()
  set(${var} ${best} PARENT_SCOPE)
endfunction()
