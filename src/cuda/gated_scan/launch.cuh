// Launchers: the grid, the split decision, and the launches in order.
#pragma once

#include <atomic>
#include <utility>

#include "cuda/common/runtime.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/gated_scan/backward.cuh"
#include "cuda/gated_scan/staged_backward.cuh"
#include "cuda/gated_scan/staged_forward.cuh"

namespace seqmix::cuda::scan {

inline constexpr int kMaxDevices = 64;

// Splits per sequence so that (sequences × slabs × splits) reach `target_blocks`; 1 when
// the problem already does, or when there is no workspace for split maps. Splitting is
// not free: the split maps cost a pass over a and b (z and dy backwards) first.
inline int64_t choose_splits(const GatedScanParams& p, int64_t slabs, int64_t target_blocks) {
  if (!p.workspace) return 1;
  const int64_t blocks = p.seq.num_sequences * slabs;
  const int64_t tiles = scan_tiles(p.seq.T);
  if (blocks >= target_blocks || tiles <= 1) return 1;
  return std::min(max_splits(p.seq.num_sequences, tiles), (target_blocks + blocks - 1) / blocks);
}

inline int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

// The device's multiprocessor count, asked once per device.
inline int64_t multiprocessors(int device) {
  static std::atomic<int> counts[kMaxDevices] = {};
  int sms = device < kMaxDevices ? counts[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    if (device < kMaxDevices) counts[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// The grid for `slabs` channel slabs, with p.split_tiles set for the chosen number of
// splits. The register kernels want two blocks per SM to hide their load latency; a
// staged block keeps two tiles of every operand in flight, so one block per SM already
// streams, and splitting (an extra pass) pays only below that.
inline dim3 plan(GatedScanParams& p, int64_t slabs, bool staged, int64_t sms) {
  const int64_t tiles = scan_tiles(p.seq.T);
  int64_t splits = choose_splits(p, slabs, (staged ? 1 : 2) * sms);
  p.split_tiles = splits > 1 ? (tiles + splits - 1) / splits : 0;
  if (splits > 1) splits = (tiles + p.split_tiles - 1) / p.split_tiles;
  return dim3(static_cast<unsigned>(slabs), static_cast<unsigned>(p.seq.num_sequences), static_cast<unsigned>(splits));
}

template <class T>
constexpr CUtensorMapDataType tensor_map_dtype() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else if constexpr (std::is_same_v<T, __half>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

// The tensor map of one [B, T, D] operand in boxes of one slab × one tile.
template <class T, class Layout>
TensorMapShape tensor_map_shape(const GatedScanParams& p, const BtdView& v) {
  const int64_t plane = p.tensor_batches > 1 ? v.stride_batch : v.stride_time * p.tensor_rows;
  return {tensor_map_dtype<T>(),
          static_cast<int>(sizeof(T)),
          {p.D, p.tensor_rows, p.tensor_batches},
          v.stride_time,
          plane,
          {static_cast<uint32_t>(Layout::kSlabChannels), static_cast<uint32_t>(kScanTileSteps), 1}};
}

// Tensor maps for the given operands (a, b, z, dy order in StagedMaps), or false when
// the copy engine cannot read one of them (the register kernels run instead).
template <class T, class Layout>
bool make_staged_maps(const GatedScanParams& p, StagedMaps& maps) {
  if (!p.vector_aligned || p.tensor_rows >= (int64_t{1} << 31) - kScanTileSteps) return false;
  const std::pair<const BtdView*, CUtensorMap*> operands[] = {{&p.a, &maps.a}, {&p.b, &maps.b}, {&p.z, &maps.z},
                                                               {&p.dy, &maps.dy}};
  for (const auto& [view, map] : operands) {
    if (!view->data) continue;
    const TensorMapShape shape = tensor_map_shape<T, Layout>(p, *view);
    if (!tensor_map_supported(view->data, shape)) return false;
    *map = make_tensor_map(view->data, shape);
  }
  return true;
}

// Launches a staged kernel with its shared-memory stages (over the 48 KB default). The
// limit is raised once per kernel and device (the kernel is a template argument, so each
// kernel has its own record).
template <class Layout, auto kKernel>
void launch_staged(const dim3& grid, const GatedScanParams& p, const StagedMaps& maps, int device,
                   cudaStream_t stream, const char* what) {
  static std::atomic<uint64_t> raised{0};  // bit d: done on device d
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (!bit || !(raised.load(std::memory_order_relaxed) & bit)) {
    check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout::kSharedBytes), what);
    raised.fetch_or(bit, std::memory_order_relaxed);
  }
  kKernel<<<grid, kThreads + 32, Layout::kSharedBytes, stream>>>(p, maps);
  check_launch(what);
}

template <class L>
int64_t staged_slabs(const GatedScanParams& p) {
  return (p.D + L::kSlabChannels - 1) / L::kSlabChannels;
}

// The staged layout to use: the wide one when its blocks alone give every SM one, or
// when the narrow one (more, thinner slabs) would not either, so that the sequences are
// split anyway: narrow blocks stream less per block, worth it only to avoid a split.
// Measured (H100, B=1, D=4096, T=2048 forward): wide and split 63.5 µs, narrow 41.5 µs;
// (B=16, D=64, T=8192): wide and split 56 µs, narrow and split 73 µs.
template <class Wide, class Narrow>
bool prefer_wide(const GatedScanParams& p, int64_t sms) {
  const int64_t N = p.seq.num_sequences;
  return N * staged_slabs<Wide>(p) >= sms || N * staged_slabs<Narrow>(p) < sms;
}

// How a direction runs: which main kernel, its grid (p.split_tiles set), the register
// kernels' grid over the same splits (the split-map passes), and the staged tensor maps.
struct LaunchPlan {
  enum class Path { wide, narrow, registers } path;
  StagedMaps maps;
  dim3 grid, registers;
  int device;
};

// `staged_allowed`: the direction can run staged at all (the backward needs tile states).
template <class T, class Wide, class Narrow>
LaunchPlan make_plan(GatedScanParams& p, bool staged_allowed) {
  LaunchPlan lp{LaunchPlan::Path::registers, {}, {}, {}, current_device()};
  const int64_t sms = multiprocessors(lp.device);
  const bool wide = prefer_wide<Wide, Narrow>(p, sms);
  if (staged_allowed && (wide ? make_staged_maps<T, Wide>(p, lp.maps) : make_staged_maps<T, Narrow>(p, lp.maps)))
    lp.path = wide ? LaunchPlan::Path::wide : LaunchPlan::Path::narrow;
  const int64_t slabs = lp.path == LaunchPlan::Path::wide     ? staged_slabs<Wide>(p)
                        : lp.path == LaunchPlan::Path::narrow ? staged_slabs<Narrow>(p)
                                                              : num_slabs<T>(p.D);
  lp.grid = plan(p, slabs, lp.path != LaunchPlan::Path::registers, sms);
  lp.registers = dim3(static_cast<unsigned>(num_slabs<T>(p.D)), lp.grid.y, lp.grid.z);
  return lp;
}

// The main kernel of a direction, on the path the plan chose.
template <class Wide, class Narrow, auto kWideKernel, auto kNarrowKernel, auto kRegisterKernel>
void launch_main(const LaunchPlan& lp, const GatedScanParams& p, cudaStream_t stream, const char* what) {
  switch (lp.path) {
    case LaunchPlan::Path::wide: launch_staged<Wide, kWideKernel>(lp.grid, p, lp.maps, lp.device, stream, what); break;
    case LaunchPlan::Path::narrow:
      launch_staged<Narrow, kNarrowKernel>(lp.grid, p, lp.maps, lp.device, stream, what);
      break;
    case LaunchPlan::Path::registers:
      kRegisterKernel<<<lp.grid, kThreads, 0, stream>>>(p);
      check_launch(what);
      break;
  }
}

// Forward: the wide or narrow staged kernel where the copy engine can read the operands,
// else the register kernel; the split-map pass first when the sequences are split.
template <class T>
void launch_forward(GatedScanParams p) {
  using Wide = WideForward<T>;
  using Narrow = NarrowForward<T>;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const LaunchPlan lp = make_plan<T, Wide, Narrow>(p, true);
  if (p.split_tiles > 0) {
    summary_kernel<T, false><<<lp.registers, kThreads, 0, stream>>>(p);
    check_launch("gated_scan forward split maps");
  }
  launch_main<Wide, Narrow, staged_forward_kernel<T, Wide>, staged_forward_kernel<T, Narrow>, forward_kernel<T>>(
      lp, p, stream, "gated_scan forward");
}

// Backward: staged only with the forward's tile states; the split-map passes first.
template <class T>
void launch_backward(GatedScanParams p) {
  using Wide = WideBackward<T>;
  using Narrow = NarrowBackward<T>;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const LaunchPlan lp = make_plan<T, Wide, Narrow>(p, p.tile_states != nullptr);
  if (p.split_tiles > 0) {
    if (!p.tile_states) {  // the entering states are recomputed from the forward split maps
      summary_kernel<T, false><<<lp.registers, kThreads, 0, stream>>>(p);
      check_launch("gated_scan backward forward split maps");
    }
    summary_kernel<T, true><<<lp.registers, kThreads, 0, stream>>>(p);
    check_launch("gated_scan backward reverse split maps");
  }
  launch_main<Wide, Narrow, staged_backward_kernel<T, Wide>, staged_backward_kernel<T, Narrow>, backward_kernel<T>>(
      lp, p, stream, "gated_scan backward");
}

}  // namespace seqmix::cuda::scan
