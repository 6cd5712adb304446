#include "core/check.hpp"

#include <algorithm>

#include "seqmix/error.hpp"

#ifdef SEQMIX_WITH_CUDA
#include "cuda/common/device.hpp"
#endif

namespace seqmix::core {

void Checker::fail(const std::string& arg, const std::string& expected, const std::string& got) const {
  throw Error(op_ + ": argument '" + arg + "': expected " + expected + ", got " + got);
}

void Checker::dtype_in(const Tensor& t, const char* arg, std::initializer_list<DType> allowed) const {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return;
  std::string expected = "dtype ";
  bool first = true;
  for (DType d : allowed) {
    expected += (first ? "" : " or ") + std::string(dtype_name(d));
    first = false;
  }
  fail(arg, expected, dtype_name(t.dtype));
}

void Checker::same_dtype(const Tensor& t, const char* arg, DType dtype, const char* like) const {
  if (t.dtype != dtype)
    fail(arg, std::string("dtype ") + dtype_name(dtype) + " (the dtype of " + like + ")",
         dtype_name(t.dtype));
}

void Checker::rank(const Tensor& t, const char* arg, int rank, const char* layout) const {
  if (t.rank() != rank)
    fail(arg, std::to_string(rank) + " dimensions " + layout,
         std::to_string(t.rank()) + " dimensions " + shape_str(t.shape));
  if (t.strides.size() != t.shape.size())
    fail(arg, "one stride per dimension", std::to_string(t.strides.size()) + " strides");
}

void Checker::shape(const Tensor& t, const char* arg, const std::vector<int64_t>& expected,
                    const char* layout) const {
  if (t.shape != expected) fail(arg, "shape " + shape_str(expected) + " " + layout, shape_str(t.shape));
}

void Checker::same_device(const Tensor& t, const char* arg, const Device& device, const char* like) const {
  if (!(t.device == device))
    fail(arg, "device " + device.str() + " (the device of " + like + ")", t.device.str());
}

void Checker::last_dim_contiguous(const Tensor& t, const char* arg) const {
  if (!t.is_last_dim_contiguous())
    fail(arg, "stride 1 in the last dimension", "strides " + shape_str(t.strides));
  for (int i = 0; i < t.rank(); ++i)
    if (t.strides[i] < 0) fail(arg, "non-negative strides", "strides " + shape_str(t.strides));
}

void Checker::not_null(const Tensor& t, const char* arg) const {
  if (t.data == nullptr && t.numel() > 0) fail(arg, "a non-null data pointer", "nullptr");
}

void Checker::positive(int64_t value, const char* arg, const char* what) const {
  if (value <= 0) fail(arg, std::string(what) + " >= 1", std::string(what) + " = " + std::to_string(value));
}

void Checker::view(const Tensor& t, const char* arg, int r, const char* layout, const Device& device) const {
  rank(t, arg, r, layout);
  not_null(t, arg);
  last_dim_contiguous(t, arg);
  if (!(t.device == device)) fail(arg, "device " + device.str() + " (the device of the first input)", t.device.str());
}

namespace {
int64_t read_offset(const Tensor& cu, int64_t i) {
  const auto* base = static_cast<const char*>(cu.data);
  int64_t offset = i * cu.strides[0] * dtype_size(cu.dtype);
  return cu.dtype == DType::i32 ? *reinterpret_cast<const int32_t*>(base + offset)
                                : *reinterpret_cast<const int64_t*>(base + offset);
}
}  // namespace

// cu_seqlens as a host view: itself, or a host copy (in `storage`) of a device tensor.
static Tensor host_offsets(const Checker& check, const Tensor& cu, std::vector<int64_t>& storage, void* stream) {
  if (cu.device.is_cpu()) return cu;
#ifdef SEQMIX_WITH_CUDA
  storage.resize(static_cast<size_t>(cu.shape[0]));
  Tensor host = Tensor::contiguous(storage.data(), cu.dtype, cu.shape);
  if (cu.strides[0] != 1) check.fail("cu_seqlens", "a contiguous tensor", "stride " + std::to_string(cu.strides[0]));
  const cuda::DeviceGuard guard(cu.device.index);
  cuda::copy_to_host(storage.data(), cu.data, static_cast<size_t>(cu.shape[0]) * dtype_size(cu.dtype), stream);
  return host;
#else
  (void)storage;
  (void)stream;
  check.fail("cu_seqlens", "a CPU tensor (this build has no CUDA backend)", cu.device.str());
#endif
}

std::vector<Sequence> make_sequences(const Checker& check, int64_t B, int64_t T,
                                     const std::optional<Tensor>& cu_seqlens, void* stream) {
  check.positive(B, "B", "batch size B");
  check.positive(T, "T", "sequence length T");
  std::vector<Sequence> seqs;
  if (!cu_seqlens) {
    for (int64_t b = 0; b < B; ++b) seqs.push_back({b, 0, T});
    return seqs;
  }
  const char* arg = "cu_seqlens";
  check.rank(*cu_seqlens, arg, 1, "[N + 1]");
  check.dtype_in(*cu_seqlens, arg, {DType::i32, DType::i64});
  if (cu_seqlens->shape[0] < 2) check.fail(arg, "at least 2 offsets (one sequence)", std::to_string(cu_seqlens->shape[0]));
  check.not_null(*cu_seqlens, arg);
  std::vector<int64_t> storage;
  const Tensor cu = host_offsets(check, *cu_seqlens, storage, stream);
  if (B != 1) check.fail("q/x", "batch size 1 when cu_seqlens is given", "batch size " + std::to_string(B));
  if (read_offset(cu, 0) != 0) check.fail(arg, "cu_seqlens[0] == 0", std::to_string(read_offset(cu, 0)));
  for (int64_t i = 0; i + 1 < cu.shape[0]; ++i) {
    int64_t begin = read_offset(cu, i), end = read_offset(cu, i + 1);
    if (end < begin)
      check.fail(arg, "non-decreasing offsets", "cu_seqlens[" + std::to_string(i + 1) + "] = " +
                                                    std::to_string(end) + " < " + std::to_string(begin));
    if (end == begin)
      check.fail(arg, "no empty sequence", "sequence " + std::to_string(i) + " of length 0");
    seqs.push_back({0, begin, end - begin});
  }
  int64_t last = read_offset(cu, cu.shape[0] - 1);
  if (last != T) check.fail(arg, "last offset equal to the total length " + std::to_string(T), std::to_string(last));
  return seqs;
}

Impl resolve_cpu_impl(const Checker& check, Impl impl, const Tensor& sample) {
  if (sample.device.is_cuda())
    check.fail("device", "a CPU tensor (this op has no CUDA kernel in this build)", sample.device.str());
  if (impl == Impl::automatic) return sample.dtype == DType::f64 ? Impl::reference : Impl::fast;
  return impl;
}

}  // namespace seqmix::core
