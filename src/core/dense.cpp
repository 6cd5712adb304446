#include "core/dense.hpp"

#include <cstring>

#include "core/half.hpp"

namespace seqmix::core {
namespace {

double load(const char* p, DType dtype) {
  switch (dtype) {
    case DType::bf16: return bf16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DType::f16: return f16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DType::f32: return *reinterpret_cast<const float*>(p);
    case DType::f64: return *reinterpret_cast<const double*>(p);
    case DType::i32: return *reinterpret_cast<const int32_t*>(p);
    case DType::i64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
  }
  return 0;
}

void store(char* p, DType dtype, double v) {
  switch (dtype) {
    case DType::bf16: *reinterpret_cast<uint16_t*>(p) = float_to_bf16(static_cast<float>(v)); break;
    case DType::f16: *reinterpret_cast<uint16_t*>(p) = float_to_f16(static_cast<float>(v)); break;
    case DType::f32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case DType::f64: *reinterpret_cast<double*>(p) = v; break;
    case DType::i32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case DType::i64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
  }
}

// Calls visit(linear_index, byte_offset) for every element in row-major order.
template <class Visit>
void for_each_element(const Tensor& t, Visit visit) {
  const int rank = t.rank();
  const int64_t n = t.numel();
  const int64_t item = dtype_size(t.dtype);
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t linear = 0; linear < n; ++linear) {
    visit(linear, offset * item);
    for (int d = rank - 1; d >= 0; --d) {  // odometer increment
      offset += t.strides[d];
      if (++index[d] < t.shape[d]) break;
      offset -= t.strides[d] * t.shape[d];
      index[d] = 0;
    }
  }
}

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::f32 : DType::f64;
}

}  // namespace

// Contiguous tensors of T's own dtype are copied whole; other contiguous tensors skip the
// stride walk. Converting element by element through the walk cost milliseconds per call.
template <class T>
std::vector<T> to_dense(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  const char* base = static_cast<const char*>(t.data);
  if (t.is_contiguous()) {
    if (t.dtype == dtype_of<T>()) {
      if (!out.empty()) std::memcpy(out.data(), base, out.size() * sizeof(T));
      return out;
    }
    const int64_t item = dtype_size(t.dtype);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(load(base + i * item, t.dtype));
    return out;
  }
  for_each_element(t, [&](int64_t i, int64_t byte) { out[i] = static_cast<T>(load(base + byte, t.dtype)); });
  return out;
}

template <class T>
void from_dense(const std::vector<T>& values, const Tensor& t) {
  char* base = static_cast<char*>(t.data);
  if (t.is_contiguous()) {
    if (t.dtype == dtype_of<T>()) {
      if (!values.empty()) std::memcpy(base, values.data(), values.size() * sizeof(T));
      return;
    }
    const int64_t item = dtype_size(t.dtype);
    for (size_t i = 0; i < values.size(); ++i) store(base + i * item, t.dtype, values[i]);
    return;
  }
  for_each_element(t, [&](int64_t i, int64_t byte) { store(base + byte, t.dtype, values[i]); });
}

template <class T>
void round_to(std::vector<T>& values, DType dtype) {
  if (dtype == DType::f64 || (dtype == DType::f32 && sizeof(T) == 4)) return;
  char buffer[8];
  for (T& v : values) {
    store(buffer, dtype, v);
    v = static_cast<T>(load(buffer, dtype));
  }
}

template std::vector<float> to_dense<float>(const Tensor&);
template std::vector<double> to_dense<double>(const Tensor&);
template void from_dense<float>(const std::vector<float>&, const Tensor&);
template void from_dense<double>(const std::vector<double>&, const Tensor&);
template void round_to<float>(std::vector<float>&, DType);
template void round_to<double>(std::vector<double>&, DType);

}  // namespace seqmix::core
