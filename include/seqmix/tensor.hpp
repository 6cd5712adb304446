// Tensor: a non-owning view of memory the caller owns (pointer, dtype, device,
// shape, strides in elements). seqmix never allocates outputs behind the caller's
// back: every output is a Tensor the caller passes in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace seqmix {

// Floating types carry data; the integer types are for offsets (cu_seqlens).
enum class DType { bf16, f16, f32, f64, i32, i64 };

// Size in bytes of one element.
int dtype_size(DType dtype);
// "bf16", "f16", "f32", "f64", "int32", "int64".
const char* dtype_name(DType dtype);

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& other) const = default;
  // "cpu" or "cuda:N".
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, one per dimension

  // A view with row-major (contiguous) strides.
  static Tensor contiguous(void* data, DType dtype, std::vector<int64_t> shape,
                           Device device = Device::cpu());

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t size(int dim) const { return shape.at(dim < 0 ? dim + rank() : dim); }
  int64_t numel() const;
  bool is_contiguous() const;
  // The innermost dimension has stride 1 (or size 1): what every kernel needs.
  bool is_last_dim_contiguous() const;
};

// "[2, 64, 4, 32]".
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace seqmix
