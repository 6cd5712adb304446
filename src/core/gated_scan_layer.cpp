// Validation and dispatch of the gated-scan layer kernel.
#include "seqmix/gated_scan_layer.hpp"

#include <algorithm>
#include <string>

#include "core/check.hpp"
#include "cuda/gated_scan/params.hpp"  // plain C++: the CTA tiling, also without CUDA

#ifdef SEQMIX_CUDA_GATED_SCAN
#include "cuda/common/device.hpp"
#endif

namespace seqmix {
namespace {

// Row starts 16-byte aligned: the kernel copies 8-element rows pieces with cp.async.
void check_rows_aligned(const core::Checker& check, const Tensor& t, const char* arg) {
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  bool aligned = address % 16 == 0;
  for (size_t i = 0; i + 1 < t.strides.size(); ++i) aligned = aligned && t.strides[i] % 8 == 0;
  if (!aligned || t.shape.back() % 8 != 0)
    check.fail(arg, "16-byte aligned rows (a data pointer and strides allowing 8-element pieces, last dim a "
                    "multiple of 8)",
               "shape " + shape_str(t.shape) + ", strides " + shape_str(t.strides));
}

#ifdef SEQMIX_CUDA_GATED_SCAN
template <class Run>
auto by_dtype(DType dtype, const Run& run) {
  return dtype == DType::bf16 ? run(std::integral_constant<cuda::ScanDtype, cuda::ScanDtype::bf16>{})
                              : run(std::integral_constant<cuda::ScanDtype, cuda::ScanDtype::f16>{});
}
#endif

}  // namespace

int64_t gated_scan_layer_workspace_size(int64_t B, int64_t T, int64_t D) {
  return std::max<int64_t>(1, cuda::layer_workspace_floats(B, T, D));
}

bool gated_scan_layer_fits(int64_t B, int64_t T, int64_t D, DType dtype) {
#ifdef SEQMIX_CUDA_GATED_SCAN
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  const int64_t capacity = by_dtype(dtype, [](auto t) { return cuda::gated_scan_layer_capacity<decltype(t)::value>(); });
  return cuda::layer_blocks(B, T, D) <= capacity;
#else
  (void)B, (void)T, (void)D, (void)dtype;
  return false;
#endif
}

void gated_scan_layer_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& workspace,
                              const GatedScanLayerOptions& options) {
  const core::Checker check("seqmix.gated_scan_layer");
  const Device device = x.device;
  check.view(x, "x", 3, "[B, T, d]", device);
  check.dtype_in(x, "x", {DType::bf16, DType::f16});
  if (!device.is_cuda()) check.fail("x", "a CUDA tensor (the layer kernel is CUDA only)", device.str());
  const int64_t B = x.shape[0], T = x.shape[1], d = x.shape[2];
  check.positive(T, "x", "tokens T");
  check.positive(d, "x", "features d");
  check.view(weight, "weight", 2, "[3·D, d]", device);
  check.same_dtype(weight, "weight", x.dtype, "x");
  if (weight.shape[0] % 3 != 0 || weight.shape[0] == 0 || weight.shape[1] != d)
    check.fail("weight", "shape [3·D, " + std::to_string(d) + "] (rows a | b | z)", shape_str(weight.shape));
  const int64_t D = weight.shape[0] / 3;
  check.view(y, "y", 3, "[B, T, D]", device);
  check.shape(y, "y", {B, T, D}, "[B, T, D]");
  check.same_dtype(y, "y", x.dtype, "x");
  check.view(workspace, "workspace", 1, "[elements]", device);
  check.dtype_in(workspace, "workspace", {DType::f32});
  const int64_t needed = gated_scan_layer_workspace_size(B, T, D);
  if (workspace.shape[0] < needed)
    check.fail("workspace", "at least " + std::to_string(needed) + " elements", std::to_string(workspace.shape[0]));
  check_rows_aligned(check, x, "x");
  check_rows_aligned(check, weight, "weight");
  if (options.impl == Impl::reference) check.fail("impl", "fast or automatic (a CUDA kernel)", "reference");
#ifdef SEQMIX_CUDA_GATED_SCAN
  const cuda::DeviceGuard guard(device.index);
  if (!gated_scan_layer_fits(B, T, D, x.dtype))
    check.fail("x", "a layer whose " + std::to_string(cuda::layer_blocks(B, T, D)) +
                        " CTAs fit on the GPU at once (see gated_scan_layer_fits)",
               "shape " + shape_str(x.shape) + " with D = " + std::to_string(D));
  cuda::GatedScanLayerParams p;
  p.x = x.data, p.x_stride_batch = x.strides[0], p.x_stride_time = x.strides[1];
  p.weight = weight.data, p.weight_stride = weight.strides[0];
  p.y = y.data, p.y_stride_batch = y.strides[0], p.y_stride_time = y.strides[1];
  p.B = B, p.T = T, p.d = d, p.D = D;
  p.decay = static_cast<int>(options.decay);
  p.workspace = static_cast<float*>(workspace.data);
  p.stream = options.stream;
  by_dtype(x.dtype, [&](auto t) {
    cuda::gated_scan_layer_forward<decltype(t)::value>(p);
    return 0;
  });
#else
  check.fail("x", "a build with the gated scan's CUDA kernels (see SEQMIX_CUDA_KERNELS)", device.str());
#endif
}

}  // namespace seqmix
