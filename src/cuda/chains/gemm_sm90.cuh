// The CUTLASS 4.2 sm90 GEMM every chain kernel is built from: TMA loads, wgmma, a
// warp-specialized persistent schedule. The tile, schedule and cluster come from a GemmTile
// (gemm_tiles.hpp; the default 128 × 256 × 64 cooperative on clusters of 2 along M), the
// operand layouts and the epilogue (a fusion: visitor tree or linear combination) from the
// chain's GEMM.
//
//   D [M, N] row-major = epilogue(A·B, C),  A [M, K], B [K, N], fp32 accumulation.
//   LayoutA RowMajor: A's rows hold K (K-major); ColumnMajor: A is stored [K, M] row-major.
//   LayoutB ColumnMajor: B is stored [N, K] row-major (K-major, a weight in nn.Linear
//   form); RowMajor: B is stored [K, N] row-major.
#pragma once

// CUTLASS's grid dependency control: the producer warp waits for the previous grid before
// its first load (griddepcontrol.wait, a no-op unless the GEMM was launched as a
// programmatic dependent) and every CTA lets the next grid launch when it reaches its last
// tile. Must precede every CUTLASS include of the translation unit.
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif
// wgmma's N in steps of 8 (CuTe's selector otherwise takes only 256, 192, 128, 96, 64, ...):
// the 256 × 160 tile then runs m64n160 products, not five m64n32 ones that each read A again.
// The tiles whose width is one of the short list get the same product either way.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#endif

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>

#include <array>
#include <mutex>
#include <string>

#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/chains/pieces_mainloop.cuh"
#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::gemm {

using namespace cute;

// The CUTLASS types of each GemmTile.
template <class Tile, class Cluster, bool kPingpong>
struct TileTypes {
  using TileShape = Tile;
  using ClusterShape = Cluster;
  using MainloopSchedule = cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                               cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
};
template <GemmTile>
struct TileConfig;
// 128 × 256 × 64 matched cuBLAS at 8192³ on the H100 (ANCHORS.md).
template <>
struct TileConfig<GemmTile::cooperative_128x256_cluster2x1>
    : TileTypes<Shape<_128, _256, _64>, Shape<_2, _1, _1>, false> {};
template <>
struct TileConfig<GemmTile::cooperative_128x256_cluster1x2>
    : TileTypes<Shape<_128, _256, _64>, Shape<_1, _2, _1>, false> {};
template <>
struct TileConfig<GemmTile::cooperative_256x128_cluster2x1>
    : TileTypes<Shape<_256, _128, _64>, Shape<_2, _1, _1>, false> {};
template <>
struct TileConfig<GemmTile::cooperative_256x128_cluster1x2>
    : TileTypes<Shape<_256, _128, _64>, Shape<_1, _2, _1>, false> {};
template <>
struct TileConfig<GemmTile::pingpong_128x128_cluster2x1>
    : TileTypes<Shape<_128, _128, _64>, Shape<_2, _1, _1>, true> {};
template <>
struct TileConfig<GemmTile::pingpong_128x128_cluster1x1>
    : TileTypes<Shape<_128, _128, _64>, Shape<_1, _1, _1>, true> {};
template <>
struct TileConfig<GemmTile::cooperative_256x192_cluster2x1>
    : TileTypes<Shape<_256, _192, _64>, Shape<_2, _1, _1>, false> {};
template <>
struct TileConfig<GemmTile::cooperative_256x160_cluster2x1>
    : TileTypes<Shape<_256, _160, _64>, Shape<_2, _1, _1>, false> {};

constexpr GemmTile kDefaultTile = GemmTile::cooperative_128x256_cluster2x1;

// The mainloop CUTLASS's builder makes, used as it is (every GEMM but the pieces ones).
template <class Built>
using AsBuilt = Built;

// Element: A and B (16-bit); ElementD: the output (Element, or float for an f32 segment).
// MainloopOf: the builder's mainloop as used (AsBuilt), or wrapped (PiecesMainloop);
// EpilogueOf the same for the epilogue (GateEpilogue). SchedulerTag: CUTLASS's persistent
// tile order, or another (CodeTilesLastTag).
template <GemmTile kTile, class Element, class LayoutA, class LayoutB, class ElementC, class Fusion,
          class ElementD = Element, template <class> class MainloopOf = AsBuilt,
          template <class> class EpilogueOf = AsBuilt, class SchedulerTag = cutlass::gemm::PersistentScheduler>
struct Sm90Gemm {
  using TileShape = typename TileConfig<kTile>::TileShape;
  using ClusterShape = typename TileConfig<kTile>::ClusterShape;
  static constexpr TileGeometry kGeometry = tile_geometry(kTile);
  static_assert(kGeometry.rows == size<0>(TileShape{}) && kGeometry.columns == size<1>(TileShape{}) &&
                    kGeometry.cluster_m == size<0>(ClusterShape{}) && kGeometry.cluster_n == size<1>(ClusterShape{}),
                "the host's tile geometry (gemm_tiles.hpp) matches the CUTLASS tile");
  static constexpr int kAlign = 16 / sizeof(Element);  // TMA: 16-byte rows and bases
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using RowMajor = cutlass::layout::RowMajor;
  using Epilogue = EpilogueOf<typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, RowMajor, kAlign, ElementD, RowMajor,
      kAlignD, typename TileConfig<kTile>::EpilogueSchedule, Fusion>::CollectiveOp>;
  using Mainloop = MainloopOf<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlign, Element, LayoutB, kAlign, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename TileConfig<kTile>::MainloopSchedule>::CollectiveOp>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, SchedulerTag>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arguments = typename Gemm::Arguments;
  using FusionArguments = typename Epilogue::FusionCallbacks::Arguments;

  // D = epilogue(A·B, C); C may be nullptr when the fusion reads no source. `schedule`
  // gives the tile scheduler's raster order and swizzle (its tile is kTile's).
  static Arguments arguments(int64_t M, int64_t N, int64_t K, const void* a, int64_t lda, const void* b, int64_t ldb,
                             const void* c, int64_t ldc, void* d, int64_t ldd, const FusionArguments& fusion,
                             GemmSchedule schedule = {}) {
    using CElement = cute::conditional_t<cute::is_void_v<ElementC>, Element, ElementC>;
    // Member by member: a wrapped mainloop's or epilogue's Arguments extend the builder's.
    Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1};
    args.mainloop.ptr_A = static_cast<const Element*>(a);
    args.mainloop.dA = with_leading_dimension<typename Kernel::StrideA>(lda);
    args.mainloop.ptr_B = static_cast<const Element*>(b);
    args.mainloop.dB = with_leading_dimension<typename Kernel::StrideB>(ldb);
    args.epilogue.thread = fusion;
    args.epilogue.ptr_C = static_cast<const CElement*>(c);
    args.epilogue.dC = with_leading_dimension<typename Kernel::StrideC>(ldc);
    args.epilogue.ptr_D = static_cast<ElementD*>(d);
    args.epilogue.dD = with_leading_dimension<typename Kernel::StrideD>(ldd);
    args.hw_info = hardware();
    using Order = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = schedule.raster == Raster::along_m   ? Order::AlongM
                                  : schedule.raster == Raster::along_n ? Order::AlongN
                                                                       : Order::Heuristic;
    args.scheduler.max_swizzle_size = schedule.swizzle;
    return args;
  }

  // The SM count and the clusters that fit, asked once per device: the occupancy query
  // costs more host time than a small GEMM takes on the device.
  static cutlass::KernelHardwareInfo hardware() {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    static std::mutex mutex;
    static std::array<cutlass::KernelHardwareInfo, 64> known{};
    const std::lock_guard<std::mutex> lock(mutex);
    if (device >= static_cast<int>(known.size()))
      return cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(device);
    if (known[device].sm_count == 0)
      known[device] = cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(device);
    return known[device];
  }

  // The kernel's function attributes, set once per device: its dynamic shared memory
  // (over 48 KB) and clusters beyond the portable size. CUTLASS's initialize() and cluster
  // launcher set them again on every call, two driver calls of ~3 µs of host time each, which
  // is host time a small GEMM called through autograd does not have to spare.
  static void prepare_kernel(const char* what) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    static std::mutex mutex;
    static std::array<bool, 64> prepared{};
    const std::lock_guard<std::mutex> lock(mutex);
    if (device < static_cast<int>(prepared.size()) && prepared[device]) return;
    const void* kernel = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::SharedStorageSize), what);
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), what);
    if (device < static_cast<int>(prepared.size())) prepared[device] = true;
  }

  // Launches on `stream`, as a programmatic dependent of its previous kernel when asked: the
  // launch CUTLASS's adapter makes (the kernel's grid, block and shared memory, its cluster
  // shape, the programmatic-serialization attribute), with the attributes set once above.
  // The scratch CUTLASS asks for (none for this schedule without split-K, but asked) comes
  // from the stream-ordered allocator. SEQMIX_CHAINS_ADAPTER_LAUNCH=1 goes through the
  // adapter's initialize() and run() instead (read at every call, so that one process can
  // time both).
  static void run(const Arguments& args, cudaStream_t stream, const char* what, bool programmatic = false) {
    cutlass::Status status = Gemm::can_implement(args);
    if (status != cutlass::Status::kSuccess)
      throw Error(std::string("seqmix: ") + what + ": CUTLASS " + cutlassGetStatusString(status));
    const size_t bytes = Gemm::get_workspace_size(args);
    void* workspace = nullptr;
    if (bytes > 0) check(cudaMallocAsync(&workspace, bytes, stream), what);
    if (flag_from_environment("SEQMIX_CHAINS_ADAPTER_LAUNCH", false)) {  // CUTLASS's own path, to time against
      Gemm gemm;
      status = gemm.initialize(args, workspace, stream);
      if (status == cutlass::Status::kSuccess) status = gemm.run(stream, nullptr, programmatic);
    } else if ((status = Kernel::initialize_workspace(args, workspace, stream, nullptr)) == cutlass::Status::kSuccess) {
      prepare_kernel(what);
      typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
      const dim3 cluster(size<0>(ClusterShape{}), size<1>(ClusterShape{}), size<2>(ClusterShape{}));
      auto config = cutlass::ClusterLauncher::make_cluster_launch_config(
          Gemm::get_grid_shape(params), cluster, Kernel::get_block_shape(), Kernel::SharedStorageSize, stream,
          programmatic);
      void* kernel_params[] = {&params};
      check(cudaLaunchKernelExC(&config.launch_config, reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>),
                                kernel_params),
            what);
    }
    if (workspace) check(cudaFreeAsync(workspace, stream), what);
    if (status != cutlass::Status::kSuccess)
      throw Error(std::string("seqmix: ") + what + ": CUTLASS " + cutlassGetStatusString(status));
    check_launch(what);
  }
};

}  // namespace seqmix::cuda::gemm
