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

[[noreturn]] void bad_tuple(const char* arg, const std::string& what) {
  throw Error(std::string("seqmix: argument '") + arg + "': expected a DLPack array or a tensor tuple, got " + what);
}

// (data_ptr, dtype code, device type, device index, shape, strides, owner).
Tensor tuple_view(const nb::tuple& t, const char* arg) {
  if (t.size() != 7) bad_tuple(arg, "a tuple of " + std::to_string(t.size()) + " items");
  Tensor v;
  v.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(t[0]));
  const int code = nb::cast<int>(t[1]);
  if (code < 0 || code > static_cast<int>(DType::i64)) bad_tuple(arg, "dtype code " + std::to_string(code));
  v.dtype = static_cast<DType>(code);
  const int device_type = nb::cast<int>(t[2]);
  if (device_type != 1 && device_type != 2) bad_tuple(arg, "device type " + std::to_string(device_type));
  v.device = device_type == 1 ? Device::cpu() : Device::cuda(nb::cast<int>(t[3]));
  for (nb::handle s : nb::borrow<nb::tuple>(t[4])) v.shape.push_back(nb::cast<int64_t>(s));
  for (nb::handle s : nb::borrow<nb::tuple>(t[5])) v.strides.push_back(nb::cast<int64_t>(s));
  return v;
}

template <class Variant>
Tensor variant_view(const Variant& array, const char* arg) {
  return std::visit(
      [&](const auto& a) {
        if constexpr (std::is_same_v<std::decay_t<decltype(a)>, nb::tuple>) return tuple_view(a, arg);
        else return make_view(a, arg);
      },
      array);
}

}  // namespace

Tensor view(const In& array, const char* arg) { return variant_view(array, arg); }
Tensor view(const Out& array, const char* arg) { return variant_view(array, arg); }
std::optional<Tensor> view(const OptIn& array, const char* arg) {
  return array ? std::optional<Tensor>(view(*array, arg)) : std::nullopt;
}
std::optional<Tensor> view(const OptOut& array, const char* arg) {
  return array ? std::optional<Tensor>(view(*array, arg)) : std::nullopt;
}

}  // namespace seqmix::python
