# fixformerIsas.cmake - reads the ISA table, kernels/isas.h (its one copy: the
# host build, fixformer_add_model and the installed package all read it here).
#
#   fixformer_read_isas(PATH)  sets, in the caller's scope,
#     FIXFORMER_ISAS               the ISA names, in the table's order
#     FIXFORMER_ISA_MR_<isa>       the register tile's rows
#     FIXFORMER_ISA_NR_<isa>       ... and columns (the weights' panel width)
#     FIXFORMER_ISA_FLAGS_<isa>    the compiler flags, a string
#     FIXFORMER_ISA_OPTS_<isa>     the same, a list
function(fixformer_read_isas path)
  file(STRINGS "${path}" rows REGEX "X\\([a-z0-9]+, *[0-9]+, *[0-9]+, *\"[^\"]*\"\\)")
  string(REPLACE "\\" "" rows "${rows}") # the X-macro's line continuations would escape the list's ;
  set(names "")
  foreach(row IN LISTS rows)
    string(REGEX MATCH "X\\(([a-z0-9]+), *([0-9]+), *([0-9]+), *\"([^\"]*)\"\\)" _ "${row}")
    set(isa "${CMAKE_MATCH_1}")
    list(APPEND names "${isa}")
    set(FIXFORMER_ISA_MR_${isa} "${CMAKE_MATCH_2}" PARENT_SCOPE)
    set(FIXFORMER_ISA_NR_${isa} "${CMAKE_MATCH_3}" PARENT_SCOPE)
    set(FIXFORMER_ISA_FLAGS_${isa} "${CMAKE_MATCH_4}" PARENT_SCOPE)
    separate_arguments(opts UNIX_COMMAND "${CMAKE_MATCH_4}")
    set(FIXFORMER_ISA_OPTS_${isa} "${opts}" PARENT_SCOPE)
  endforeach()
  if(NOT "generic" IN_LIST names OR NOT "avx2" IN_LIST names)
    message(FATAL_ERROR "${path}: could not read the ISA table")
  endif()
  set(FIXFORMER_ISAS "${names}" PARENT_SCOPE)
endfunction()
