// The sequential kernel's launcher: the padded state size N and the column slice MC
// from the shape, the shared-memory opt-in, the grid.
#pragma once

#include <cstdlib>
#include <cstring>

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/methods.hpp"
#include "cuda/linear_recurrence/sequential.cuh"

namespace seqmix::cuda::linrec {

// Two blocks per SM for many short sub-chains (the chunked method's re-walk) when they
// outnumber the SMs, for a vector state (m = 1) with N ≤ 64: those kernels use 64–92
// registers (`-Xptxas -v`), while slices of 8 columns (134–240) would spill at the 128
// that two blocks of 256 threads allow;
// SEQMIX_LINREC_REWALK_BLOCKS=1|2 overrides, read at every call so that one process can
// time both (NOTES.md, version 6).
inline int sequential_blocks_per_sm(const SeqParams& p, int64_t blocks) {
  if (p.n > 64 || p.chains[0].sub_chains <= 1) return 1;
  if (const char* value = std::getenv("SEQMIX_LINREC_REWALK_BLOCKS")) return std::strcmp(value, "2") == 0 ? 2 : 1;
  return blocks > multiprocessor_count() ? 2 : 1;
}

// bf16 walks holding the prefetched b as raw 16 bits until their step (HeldB in
// sequential.cuh): the default, measured 34–42% faster (NOTES.md, version 12);
// SEQMIX_LINREC_SEQUENTIAL_RAW_B=0 holds floats. Read at every call so that one process
// can time both.
inline bool sequential_raw_b() { return flag_from_environment("SEQMIX_LINREC_SEQUENTIAL_RAW_B", true); }

// Slices of 8 columns reading their state rows with 16-byte loads (state_index in
// sequential.cuh): by default at n > 64, where they remove the scalar reads' spills
// (measured −27% bf16, −9% f32 at n = 128), not below (+7–15% at n = 64; NOTES.md,
// version 12). SEQMIX_LINREC_SEQUENTIAL_ROW_READS=1 or 0 forces them on or off.
inline bool sequential_row_reads(int64_t n) {
  return flag_from_environment("SEQMIX_LINREC_SEQUENTIAL_ROW_READS", n > 64);
}

template <class T, int N, int MC, int kBlocks, bool kHeldRaw, bool kRowReads = false>
void launch_sequential_config(const SeqParams& p, int64_t G, cudaStream_t stream) {
  using Cfg = SeqConfig<T, N, MC, kBlocks, kRowReads>;
  const auto kernel = sequential_kernel<T, N, MC, kBlocks, kHeldRaw, kRowReads>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes()),
        "cudaFuncSetAttribute (sequential)");
  const unsigned chains = p.chains[1].steps > 0 ? 2u : 1u;
  const dim3 grid(static_cast<unsigned>(G * p.col_blocks), chains);
  kernel<<<grid, kThreads, Cfg::smem_bytes(), stream>>>(p);
  check_launch("linear_recurrence sequential");
}

template <class T, int MC, bool kHeldRaw, bool kRowReads = false>
void launch_sequential_columns(const SeqParams& p, int64_t G, cudaStream_t stream) {
  if constexpr (MC == 1) {  // 64–92 registers: two blocks fit; slices of 8 columns would spill
    if (sequential_blocks_per_sm(p, G) == 2) {
      if (p.n <= 32) return launch_sequential_config<T, 32, 1, 2, kHeldRaw>(p, G, stream);
      if (p.n <= 64) return launch_sequential_config<T, 64, 1, 2, kHeldRaw>(p, G, stream);
    }
  }
  if (p.n <= 32) launch_sequential_config<T, 32, MC, 1, kHeldRaw, kRowReads>(p, G, stream);
  else if (p.n <= 64) launch_sequential_config<T, 64, MC, 1, kHeldRaw, kRowReads>(p, G, stream);
  else launch_sequential_config<T, 128, MC, 1, kHeldRaw, kRowReads>(p, G, stream);
}

// The switches' kernel: f32 holds b as loaded either way, so only bf16 compiles the
// raw-held kernels; row reads exist for slices of 8 columns only.
template <class T, int MC, bool kHeldRaw>
void launch_sequential_reads(const SeqParams& p, int64_t G, cudaStream_t stream) {
  if constexpr (MC == 8)
    if (sequential_row_reads(p.n)) return launch_sequential_columns<T, MC, kHeldRaw, true>(p, G, stream);
  launch_sequential_columns<T, MC, kHeldRaw>(p, G, stream);
}

template <class T, int MC>
void launch_sequential_held(const SeqParams& p, int64_t G, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2)
    if (sequential_raw_b()) return launch_sequential_reads<T, MC, true>(p, G, stream);
  launch_sequential_reads<T, MC, false>(p, G, stream);
}

template <class T>
void launch_sequential(const SeqParams& params, int64_t G, void* stream) {
  SeqParams p = params;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.m == 1) {
    p.col_blocks = 1;
    launch_sequential_held<T, 1>(p, G, s);
  } else {
    if (launch_walk_on_tensor_cores<T>(params, G, stream)) return;
    p.col_blocks = static_cast<int>((p.m + 7) / 8);
    launch_sequential_held<T, 8>(p, G, s);
  }
}

}  // namespace seqmix::cuda::linrec
