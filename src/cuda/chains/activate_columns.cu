// The activation of a few columns applied after the plain GEMM wrote their pre-activations:
// out[:, 0:N) ← act(out + bias)·scale in place, 8 columns (one 16-byte load and store) per
// step. Gated DeltaNet's 32 gate columns of 12320 take this when the plain GEMM covers them
// (launch_projection.cu, gates_in_plain_gemm): at 2048 and 8192 tokens the extra 256 × 128
// column tile costs the GEMM no extra round of tiles, where a kernel of its own for the
// gates cost 12–22 µs after it (NOTES.md, "Where the forward's gap is"). The pre-activation
// is rounded to bf16 first, as an unfused nn.Linear followed by the activation rounds it.
#include "cuda/chains/narrow_projection.cuh"
#include "cuda/chains/scratch.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {
namespace {

// Launched as a programmatic dependent of the GEMM that wrote `out`.
__global__ void activate_columns(int64_t M, int64_t N, MutableRows out, ColumnEpilogue columns) {
  wait_for_previous_grid();
  constexpr int kLane = narrow::kColumnsPerLane;
  const int64_t groups = N / kLane;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / groups, first = i % groups * kLane;
    float bias[kLane], scale[kLane], z[kLane], v[kLane];
    int code[kLane];
#pragma unroll
    for (int j = 0; j < kLane; ++j) {
      bias[j] = columns.bias ? columns.bias[first + j] : 0.f;
      code[j] = columns.code ? static_cast<int>(columns.code[first + j]) : 0;
      scale[j] = columns.scale ? columns.scale[first + j] : 1.f;
    }
    int lane_code = code[0];
#pragma unroll
    for (int j = 1; j < kLane; ++j)
      if (code[j] != code[0]) lane_code = -1;
    auto* at = static_cast<narrow::bf16*>(out.data) + row * out.stride + first;
    narrow::load_row(at, z, kLane);
#pragma unroll
    for (int j = 0; j < kLane; ++j) z[j] += bias[j];
    narrow::finish<narrow::Mode::forward>(v, z, code, scale, lane_code);
    narrow::store_row(at, v, kLane);
  }
}

}  // namespace

void activate_columns_bf16(int64_t M, int64_t N, MutableRows out, ColumnEpilogue columns, void* stream) {
  if (N % narrow::kColumnsPerLane != 0 || reinterpret_cast<uintptr_t>(out.data) % 16 != 0 ||
      out.stride % narrow::kColumnsPerLane != 0)
    throw Error("seqmix: activate_columns: columns not in whole 16-byte groups");
  if (M == 0 || N == 0) return;
  constexpr int kThreads = 256;
  launch_dependent(activate_columns, chains::grid_for(M * (N / narrow::kColumnsPerLane), kThreads), kThreads, 0,
                   static_cast<cudaStream_t>(stream), "projection chain: activate_columns", M, N, out, columns);
}

bool gates_in_plain_gemm_enabled() { return flag_from_environment("SEQMIX_CHAINS_GATES_IN_GEMM", true); }

}  // namespace seqmix::cuda
