#include "seqmix/tensor.hpp"


#include "seqmix/common.hpp"
#include "seqmix/error.hpp"

namespace seqmix {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16: case DType::f16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
  }
  return "?";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Tensor Tensor::contiguous(void* data, DType dtype, std::vector<int64_t> shape, Device device) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.strides.assign(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) t.strides[i] = t.strides[i + 1] * shape[i + 1];
  t.shape = std::move(shape);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool Tensor::is_last_dim_contiguous() const {
  return rank() == 0 || shape.back() == 1 || strides.back() == 1;
}

// Built with std::to_string, not iostreams: an ostream inside the Python extension
// crashed in a host process whose libstdc++ locale state did not match the one compiled in.
std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const char* impl_name(Impl impl) {
  switch (impl) {
    case Impl::automatic: return "automatic";
    case Impl::reference: return "reference";
    case Impl::fast: return "fast";
  }
  return "?";
}

Impl parse_impl(const std::string& name) {
  if (name == "automatic" || name == "auto") return Impl::automatic;
  if (name == "reference") return Impl::reference;
  if (name == "fast") return Impl::fast;
  throw Error("seqmix: argument 'impl': expected one of automatic, reference, fast, got '" + name + "'");
}

}  // namespace seqmix
