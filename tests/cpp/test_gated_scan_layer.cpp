// The gated-scan layer kernel's argument checks (no GPU needed: they fail before a launch).
#include "seqmix/gated_scan_layer.hpp"
#include "test_util.hpp"

namespace seqmix::test {
namespace {

Tensor on_cuda(const HostTensor& t) {
  Tensor v = t.view;
  v.device = Device::cuda(0);
  return v;
}

TEST(GatedScanLayerErrors, EveryBadInputNamesTheArgument) {
  HostTensor x = uniform({2, 8, 16}, DType::bf16), w = uniform({12, 16}, DType::bf16), y({2, 8, 4}, DType::bf16);
  HostTensor ws({gated_scan_layer_workspace_size(2, 8, 4)}, DType::f32), ws_short({1}, DType::f32);
  HostTensor x_f32 = uniform({2, 8, 16}, DType::f32), w_bad = uniform({10, 16}, DType::bf16);
  HostTensor y_bad({2, 8, 5}, DType::bf16), x_odd = uniform({2, 8, 12}, DType::bf16);
  HostTensor w_odd = uniform({12, 12}, DType::bf16), x_empty({2, 0, 16}, DType::bf16);
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(x, w, y, ws),
                      "seqmix.gated_scan_layer: argument 'x': expected a CUDA tensor (the layer kernel is CUDA "
                      "only), got cpu");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x_f32), on_cuda(w), on_cuda(y), on_cuda(ws)),
                      "argument 'x': expected dtype bf16 or f16, got f32");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x), on_cuda(w_bad), on_cuda(y), on_cuda(ws)),
                      "argument 'weight': expected shape [3·D, 16] (rows a | b | z), got [10, 16]");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x), on_cuda(w), on_cuda(y_bad), on_cuda(ws)),
                      "argument 'y': expected shape [2, 8, 4] [B, T, D], got [2, 8, 5]");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x), on_cuda(w), on_cuda(y), on_cuda(ws_short)),
                      "argument 'workspace': expected at least 16 elements, got 1");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x_odd), on_cuda(w_odd), on_cuda(y), on_cuda(ws)),
                      "argument 'x': expected 16-byte aligned rows");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x_empty), on_cuda(w), on_cuda(y), on_cuda(ws)),
                      "argument 'x': expected tokens T");
  EXPECT_SEQMIX_ERROR(gated_scan_layer_forward(on_cuda(x), w, on_cuda(y), on_cuda(ws)),
                      "argument 'weight': expected device cuda:0");
}

}  // namespace
}  // namespace seqmix::test
