# CUTLASS/CuTe 4.2 headers for the Hopper kernels, from PyPI's nvidia-cutlass==4.2.0.0
# (headers under cutlass_library/source/include and .../source/tools/util/include) or
# from SEQMIX_CUTLASS_DIR: a CUTLASS checkout, or that package's cutlass_library folder.
# No copy of CUTLASS lives in this tree.
set(SEQMIX_CUTLASS_DIR "" CACHE PATH "CUTLASS checkout or the nvidia-cutlass package's cutlass_library folder")

function(seqmix_find_cutlass)
  set(roots)
  if(SEQMIX_CUTLASS_DIR)
    list(APPEND roots "${SEQMIX_CUTLASS_DIR}" "${SEQMIX_CUTLASS_DIR}/source")
  endif()
  find_package(Python COMPONENTS Interpreter QUIET)
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
              "import importlib.util as u; s = u.find_spec('cutlass_library'); print(s.submodule_search_locations[0] if s else '')"
      OUTPUT_VARIABLE package_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(package_dir)
      list(APPEND roots "${package_dir}/source")
    endif()
  endif()
  foreach(root IN LISTS roots)
    if(EXISTS "${root}/include/cute/tensor.hpp" AND EXISTS "${root}/include/cutlass/cutlass.h")
      set(SEQMIX_CUTLASS_INCLUDE_DIRS "${root}/include" "${root}/tools/util/include" PARENT_SCOPE)
      message(STATUS "seqmix: CUTLASS headers in ${root}/include")
      return()
    endif()
  endforeach()
  message(STATUS "seqmix: CUTLASS headers not found (pip install nvidia-cutlass==4.2.0.0 or set SEQMIX_CUTLASS_DIR); "
                 "kernels that need them are not built")
endfunction()
