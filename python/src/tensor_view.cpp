#include <string>

#include "bindings.hpp"
#include "seqmix/error.hpp"

namespace seqmix::python {
namespace {

DType to_dtype(nb::dlpack::dtype dt, const char* arg) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    if (code == Code::Bfloat && dt.bits == 16) return DType::bf16;
    if (code == Code::Float && dt.bits == 16) return DType::f16;
    if (code == Code::Float && dt.bits == 32) return DType::f32;
    if (code == Code::Float && dt.bits == 64) return DType::f64;
    if (code == Code::Int && dt.bits == 32) return DType::i32;
    if (code == Code::Int && dt.bits == 64) return DType::i64;
  }
  throw Error(std::string("seqmix: argument '") + arg +
              "': expected dtype bf16, f16, f32, f64, int32 or int64, got DLPack code " +
              std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits");
}

template <class Array>
Tensor make_view(const Array& a, const char* arg) {
  Tensor t;
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(a.dtype(), arg);
  const int device_type = a.device_type();
  if (device_type == nb::device::cpu::value) {
    t.device = Device::cpu();
  } else if (device_type == nb::device::cuda::value) {
    t.device = Device::cuda(a.device_id());
  } else {
    throw Error(std::string("seqmix: argument '") + arg + "': expected a CPU or CUDA array, got DLPack device type " +
                std::to_string(device_type));
  }
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.shape.push_back(static_cast<int64_t>(a.shape(i)));
    t.strides.push_back(static_cast<int64_t>(a.stride(i)));
  }
  return t;
}

}  // namespace

Tensor view(const In& array, const char* arg) { return make_view(array, arg); }
Tensor view(const Out& array, const char* arg) { return make_view(array, arg); }
std::optional<Tensor> view(const OptIn& array, const char* arg) {
  return array ? std::optional<Tensor>(make_view(*array, arg)) : std::nullopt;
}
std::optional<Tensor> view(const OptOut& array, const char* arg) {
  return array ? std::optional<Tensor>(make_view(*array, arg)) : std::nullopt;
}

}  // namespace seqmix::python
