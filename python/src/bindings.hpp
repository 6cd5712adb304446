// Shared pieces of the bindings: DLPack arrays in, seqmix::Tensor views out.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix::python {

namespace nb = nanobind;

// A tensor argument: any DLPack array (numpy, jax, ...; inputs may be read-only, outputs
// must be writable), or the tuple (data_ptr, dtype code, device type, device index,
// shape, strides, owner) that seqmix's torch surface passes instead: DLPack export of a
// CUDA tensor synchronises streams on every call, which cost ~10 µs per tensor. The
// dtype code is seqmix::DType's value; device type 1 is the CPU, 2 CUDA; `owner` keeps
// the tensor alive for the call.
using In = std::variant<nb::tuple, nb::ndarray<nb::ro>>;
using Out = std::variant<nb::tuple, nb::ndarray<>>;
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

// The Tensor view of a DLPack array. `arg` names it in the error for an unsupported dtype.
Tensor view(const In& array, const char* arg);
Tensor view(const Out& array, const char* arg);
std::optional<Tensor> view(const OptIn& array, const char* arg);
std::optional<Tensor> view(const OptOut& array, const char* arg);

// impl ("automatic" | "reference" | "fast") and a cudaStream_t given as an integer.
template <class Options>
Options options(const std::string& impl, uintptr_t stream) {
  Options o;
  o.impl = parse_impl(impl);
  o.stream = reinterpret_cast<void*>(stream);
  return o;
}

// One function per op family, each in its own bind_<op>.cpp.
void bind_gated_scan(nb::module_& m);
void bind_gla(nb::module_& m);
void bind_delta_rule(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_linear_recurrence(nb::module_& m);
void bind_chains(nb::module_& m);

}  // namespace seqmix::python
