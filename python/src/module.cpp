// seqmix._C: the low-level surface. Every op takes its inputs and preallocated outputs
// as DLPack arrays, plus impl and a CUDA stream handle; the Python package allocates.
#include "bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include "seqmix/error.hpp"
#include "seqmix/runtime.hpp"

namespace nb = nanobind;

NB_MODULE(_C, m) {
  m.doc() = "seqmix low-level ops over DLPack arrays (use the seqmix package, not this module)";
  nb::exception<seqmix::Error>(m, "SeqmixError", PyExc_ValueError);
  m.def("built_with_cuda", &seqmix::built_with_cuda, "True when the CUDA backend was compiled in.");
  m.def("cuda_device_count", &seqmix::cuda_device_count, "Number of visible CUDA devices (0 without one).");
  m.def("cuda_kernel_ops", &seqmix::cuda_kernel_ops, "The ops whose CUDA kernels this build compiled.");
  seqmix::python::bind_gated_scan(m);
  seqmix::python::bind_gla(m);
  seqmix::python::bind_delta_rule(m);
  seqmix::python::bind_attention(m);
  seqmix::python::bind_linear_recurrence(m);
  seqmix::python::bind_chains(m);
}
