// Shared pieces of the bindings: torch tensors or DLPack arrays in, seqmix::Tensor views out.
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

// A torch.Tensor passed as itself. Its pointer, dtype, device, shape and strides are read
// here with a few C-API calls (~0.2 µs) rather than packed into a tuple in Python (~0.7 µs)
// or exported through DLPack, whose export of a CUDA tensor synchronises streams (~10 µs).
// A tensor whose last dimension is strided is replaced by its contiguous copy; `owner`
// keeps whichever tensor the view points into alive for the call. What cannot be read (a
// dtype seqmix does not know, a tensor without storage) is kept in `error` and raised by
// `view`, which knows the argument's name.
struct TorchTensor {
  nb::object owner;
  Tensor view;
  std::string error;
};

// A tensor argument: a torch.Tensor, or any DLPack array (numpy, jax, ...; inputs may be
// read-only, outputs must be writable). torch tensors never reach the DLPack alternative.
using In = std::variant<TorchTensor, nb::ndarray<nb::ro>>;
using Out = std::variant<TorchTensor, nb::ndarray<>>;
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

// Fills `out` from `src` when `src` is a torch.Tensor (false otherwise: then the next
// alternative of In / Out is tried). Never throws; see TorchTensor::error.
bool torch_tensor(nb::handle src, TorchTensor& out) noexcept;

// The Tensor view of an argument. `arg` names it in the error for an unsupported dtype.
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

namespace nanobind::detail {

template <>
struct type_caster<seqmix::python::TorchTensor> {
  NB_TYPE_CASTER(seqmix::python::TorchTensor, const_name("torch.Tensor"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept { return seqmix::python::torch_tensor(src, value); }
  static handle from_cpp(const seqmix::python::TorchTensor& t, rv_policy, cleanup_list*) noexcept {
    return t.owner.inc_ref();
  }
};

}  // namespace nanobind::detail
