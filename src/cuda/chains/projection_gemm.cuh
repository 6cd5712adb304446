// The projection chain's fused GEMM: a CUTLASS 4.2 sm90 kernel (TMA loads, wgmma,
// warp-specialized cooperative persistent schedule) whose epilogue visitor tree applies,
// in registers, out = act(acc + bias) · scale with the activation chosen per column from
// three f32 column vectors (bias, activation code, scale). One launch writes every
// segment of the chain, already activated, into the consumer's [tokens, W_total] buffer.
//
// STATUS: compiles; not yet run on a GPU, so src/core/chains.cpp does not dispatch to it
// and its tests (tests/cpp/test_chains_cuda.cpp) call it directly. See NOTES.md.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>

#include <string>

#include "cuda/chains/params.hpp"
#include "cuda/common/runtime.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::proj {

// seqmix::Activation in the order of its enum: identity, silu, sigmoid, logsigmoid,
// softplus. The same overflow-free forms as the CPU path (src/cpu/chains_math.hpp).
CUTLASS_HOST_DEVICE float activate(float z, int code) {
  switch (code) {
    case 1: return z / (1.f + expf(-z));
    case 2: return 1.f / (1.f + expf(-z));
    case 3: return fminf(z, 0.f) - log1pf(expf(-fabsf(z)));  // log(1 + e^{−|z|}) ∈ (0, log 2]
    case 4: return fmaxf(z, 0.f) + log1pf(expf(-fabsf(z)));
    default: return z;
  }
}

// The epilogue's node: (z, code, scale) -> activate(z, code) · scale, element by element.
template <class T>
struct SegmentActivation {
  CUTLASS_HOST_DEVICE T operator()(T z, T code, T scale) const {
    return activate(z, static_cast<int>(code)) * scale;
  }
};
template <class T, int N>
struct SegmentActivation<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& z, cutlass::Array<T, N> const& code,
                                                     cutlass::Array<T, N> const& scale) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = SegmentActivation<T>{}(z[i], code[i], scale[i]);
    return out;
  }
};

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// 128 × 256 × 64 tiles on clusters of 2 (the shape that matched cuBLAS at 8192³ on the
// H100: ANCHORS.md); cooperative: both consumer warpgroups share each tile.
using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_2, _1, _1>;
using ColumnVector = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;

template <class Element>
using ProjectionEpilogue =
    fusion::Sm90EVT<fusion::Sm90Compute<SegmentActivation, Element, float, kRound>,          // act(z)·scale
                    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,  // z = acc + bias
                                    fusion::Sm90AccFetch, ColumnVector>,
                    ColumnVector,   // code
                    ColumnVector>;  // scale

template <class Element>
struct ProjectionGemm {
  static constexpr int kAlign = 16 / sizeof(Element);
  using RowMajor = cutlass::layout::RowMajor;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, kAlign, Element, RowMajor,
      kAlign, cutlass::epilogue::TmaWarpSpecializedCooperative, ProjectionEpilogue<Element>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, RowMajor, kAlign, Element,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const ProjectionGemmParams& p) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    const StrideA stride_x = make_stride(p.x_stride, _1{}, int64_t{0});
    const StrideB stride_w = make_stride(p.weight_stride, _1{}, int64_t{0});
    const StrideD stride_out = make_stride(p.out_stride, _1{}, int64_t{0});
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(p.M), static_cast<int>(p.N), static_cast<int>(p.K), 1},
        {static_cast<const Element*>(p.x), stride_x, static_cast<const Element*>(p.weight), stride_w},
        {{}, nullptr, StrideC{}, static_cast<Element*>(p.out), stride_out}};
    // Each node's arguments: its children's, then its own.
    args.epilogue.thread = {
        {{}, {p.column_bias, 0.f, {}}, {}},  // z = acc + bias (no bias: 0)
        {p.column_code, 0.f, {}},           // code
        {p.column_scale, 1.f, {}},          // scale
        {}};
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(device);
    return args;
  }

  static size_t workspace_bytes(const ProjectionGemmParams& p) { return Gemm::get_workspace_size(arguments(p)); }

  static void run(const ProjectionGemmParams& p) {
    Gemm gemm;
    const auto args = arguments(p);
    const auto stream = static_cast<cudaStream_t>(p.stream);
    cutlass::Status status = gemm.can_implement(args);
    if (status == cutlass::Status::kSuccess) status = gemm.initialize(args, p.workspace, stream);
    if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
    if (status != cutlass::Status::kSuccess)
      throw Error(std::string("seqmix: projection chain GEMM: CUTLASS ") + cutlassGetStatusString(status));
    check_launch("projection chain GEMM");
  }
};

}  // namespace seqmix::cuda::proj
