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
