// The output chain on the device: the gated RMSNorm of each (token, head) row as a small
// kernel writing the bf16 operand u of the o_proj GEMM (and its backward), then the GEMMs
// (plain_gemm.cuh).
//
//   u = o·r·w·SiLU(g), r = 1/sqrt(mean(o²) + eps)    y = u·out_weightᵀ
//   backward: du = dy·out_weight, dout_weight = dyᵀ·u, then per row (chains_math.hpp):
//   dg = du·ô·w·SiLU'(g), dw += du·SiLU(g)·ô, do = r·(a − ô·mean(a·ô)) with a = du·SiLU(g)·w.
//   The forward keeps no u: the backward's 16-byte norm-gate kernel writes it again on its
//   one pass over o, g and du (du first), and dout_weight = dyᵀ·u runs after it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/chains/dependent_launch.cuh"
#include "cuda/chains/params.hpp"
#include "cuda/chains/scratch.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda::chains {
namespace {

constexpr int kThreads = 256;  // 8 warps, one (token, head) row each at a time

__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float sigmoid(float z) { return 1.f / (1.f + __expf(-z)); }

// Where one (token, head) row of o, g and the [tokens, heads·dv] buffers starts.
struct Row {
  int64_t o, g, dense;
};

struct NormGate {
  const bf16 *o, *g, *w;
  int64_t o_stride, g_stride, tokens;
  int heads, dv;
  float eps;

  __device__ int64_t rows() const { return tokens * heads; }
  __device__ Row row(int64_t index) const {
    const int64_t t = index / heads, h = index % heads;
    return {t * o_stride + h * dv, t * g_stride + h * dv, index * dv};
  }
  // 1/sqrt(mean(o²) + eps) of a row, in every lane.
  __device__ float inverse_rms(const Row& r, int lane) const {
    float squares = 0.f;
    for (int j = lane; j < dv; j += 32) {
      const float x = __bfloat162float(o[r.o + j]);
      squares += x * x;
    }
    return rsqrtf(warp_sum(squares) / dv + eps);
  }
};

// Warps over rows with a grid-stride loop.
#define FOR_EACH_ROW(ng, index)                                                                    \
  for (int64_t index = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; index < (ng).rows(); \
       index += int64_t(gridDim.x) * blockDim.x / 32)

// The norm-gate kernels let the GEMM that reads what they write launch early
// (allow_next_grid): its CTAs set up on the SMs these blocks leave and wait there
// (NOTES.md, "Programmatic dependent launch").
__global__ void norm_gate_forward(NormGate ng, bf16* u) {
  allow_next_grid();
  const int lane = threadIdx.x % 32;
  FOR_EACH_ROW(ng, index) {
    const Row r = ng.row(index);
    const float inv = ng.inverse_rms(r, lane);
    for (int j = lane; j < ng.dv; j += 32) {
      const float gate = __bfloat162float(ng.g[r.g + j]);
      const float value = __bfloat162float(ng.o[r.o + j]) * inv * __bfloat162float(ng.w[j]) * gate * sigmoid(gate);
      u[r.dense + j] = __float2bfloat16(value);
    }
  }
}

// Eight bf16 values (16 bytes) to f32 and back.
__device__ void load8(const bf16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ void store8(bf16* p, const float (&v)[8]) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// The same with 16-byte accesses and the row in registers (dv a multiple of 8 and at most
// 256·kVectors; the row strides and the bases multiples of 8 elements): every load of a
// row is issued before the sum of squares, so a row costs one memory round trip, not two.
// The scalar kernel's 2-byte loads and second pass over o left it at a fraction of the
// copy rate.
template <int kVectors>
__global__ void norm_gate_forward_vec8(NormGate ng, bf16* u) {
  allow_next_grid();
  const int lane = threadIdx.x % 32;
  FOR_EACH_ROW(ng, index) {
    const Row r = ng.row(index);
    float o[kVectors][8], gate[kVectors][8];
    float squares = 0.f;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int j = (k * 32 + lane) * 8;
      if (j < ng.dv) {
        load8(ng.o + r.o + j, o[k]);
        load8(ng.g + r.g + j, gate[k]);
#pragma unroll
        for (int i = 0; i < 8; ++i) squares += o[k][i] * o[k][i];
      }
    }
    const float inv = rsqrtf(warp_sum(squares) / ng.dv + ng.eps);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int j = (k * 32 + lane) * 8;
      if (j < ng.dv) {
        float w[8];
        load8(ng.w + j, w);
#pragma unroll
        for (int i = 0; i < 8; ++i) o[k][i] *= inv * w[i] * gate[k][i] * sigmoid(gate[k][i]);
        store8(u + r.dense + j, o[k]);
      }
    }
  }
}

// d_o, dg (token rows d_stride apart) from du; dw_sums [dv] f32 accumulates over rows
// (per block in shared memory, then one atomic per column and block).
__global__ void norm_gate_backward(NormGate ng, const bf16* du, bf16* d_o, int64_t d_o_stride, bf16* dg,
                                   int64_t dg_stride, float* dw_sums) {
  wait_for_previous_grid();  // du comes from the GEMM before (launched as its dependent)
  allow_next_grid();
  extern __shared__ float dw_block[];
  for (int j = threadIdx.x; j < ng.dv; j += blockDim.x) dw_block[j] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  FOR_EACH_ROW(ng, index) {
    const Row r = ng.row(index);
    const int64_t t = index / ng.heads, h = index % ng.heads;
    const int64_t at_do = t * d_o_stride + h * ng.dv, at_dg = t * dg_stride + h * ng.dv;
    const float inv = ng.inverse_rms(r, lane);
    float a_dot_normed = 0.f;
    for (int j = lane; j < ng.dv; j += 32) {
      const float normed = __bfloat162float(ng.o[r.o + j]) * inv, w = __bfloat162float(ng.w[j]);
      const float gate_in = __bfloat162float(ng.g[r.g + j]), s = sigmoid(gate_in), gate = gate_in * s;
      const float d = __bfloat162float(du[r.dense + j]);
      dg[at_dg + j] = __float2bfloat16(d * normed * w * s * (1.f + gate_in * (1.f - s)));
      atomicAdd(&dw_block[j], d * gate * normed);
      a_dot_normed += d * gate * w * normed;
    }
    const float mean = warp_sum(a_dot_normed) / ng.dv;
    for (int j = lane; j < ng.dv; j += 32) {
      const float normed = __bfloat162float(ng.o[r.o + j]) * inv, w = __bfloat162float(ng.w[j]);
      const float gate_in = __bfloat162float(ng.g[r.g + j]);
      const float a = __bfloat162float(du[r.dense + j]) * gate_in * sigmoid(gate_in) * w;
      d_o[at_do + j] = __float2bfloat16(inv * (a - normed * mean));
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < ng.dv; j += blockDim.x) atomicAdd(&dw_sums[j], dw_block[j]);
}

// norm_gate_backward with 16-byte accesses and each row's o, g and du in registers (the same
// conditions as norm_gate_forward_vec8, plus d_o, dg and du): one read of every input and one
// write of every gradient per row. A lane's columns are the same in every row, so its share
// of dw stays in registers over all its rows and meets the other warps' in shared memory
// once per block. The scalar kernel read o three times and g, du and w twice, 2 bytes a
// lane, with a shared-memory atomic per element. With `u` (else nullptr) it also writes the
// forward's u [tokens, heads·dv] (bit for bit norm_gate_forward_vec8's), so that the
// backward needs no separate pass over o and g to recompute it.
template <int kVectors>
__global__ void norm_gate_backward_vec8(NormGate ng, const bf16* du, bf16* d_o, int64_t d_o_stride, bf16* dg,
                                        int64_t dg_stride, float* dw_sums, bf16* u) {
  wait_for_previous_grid();  // du comes from the GEMM before (launched as its dependent)
  allow_next_grid();
  extern __shared__ float dw_block[];
  for (int j = threadIdx.x; j < ng.dv; j += blockDim.x) dw_block[j] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  float w[kVectors][8], dw[kVectors][8] = {};
#pragma unroll
  for (int k = 0; k < kVectors; ++k)
    if ((k * 32 + lane) * 8 < ng.dv) load8(ng.w + (k * 32 + lane) * 8, w[k]);
  FOR_EACH_ROW(ng, index) {
    const Row r = ng.row(index);
    const int64_t t = index / ng.heads, h = index % ng.heads;
    const int64_t at_do = t * d_o_stride + h * ng.dv, at_dg = t * dg_stride + h * ng.dv;
    float o[kVectors][8], gate[kVectors][8], d[kVectors][8];
    float squares = 0.f;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int j = (k * 32 + lane) * 8;
      if (j < ng.dv) {
        load8(ng.o + r.o + j, o[k]);
        load8(ng.g + r.g + j, gate[k]);
        load8(du + r.dense + j, d[k]);
#pragma unroll
        for (int i = 0; i < 8; ++i) squares += o[k][i] * o[k][i];
      }
    }
    const float inv = rsqrtf(warp_sum(squares) / ng.dv + ng.eps);
    // o becomes ô = o·r, d becomes a = du·SiLU(g)·w; gate becomes dg.
    float a_dot_normed = 0.f;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if ((k * 32 + lane) * 8 >= ng.dv) continue;
      float u_row[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float normed = o[k][i] * inv, g_in = gate[k][i], s = sigmoid(g_in), silu = g_in * s;
        u_row[i] = o[k][i] * (inv * w[k][i] * g_in * s);  // the forward's product, in its order
        dw[k][i] += d[k][i] * silu * normed;
        gate[k][i] = d[k][i] * normed * w[k][i] * s * (1.f + g_in * (1.f - s));
        d[k][i] *= silu * w[k][i];
        o[k][i] = normed;
        a_dot_normed += d[k][i] * normed;
      }
      if (u) store8(u + r.dense + (k * 32 + lane) * 8, u_row);
    }
    const float mean = warp_sum(a_dot_normed) / ng.dv;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int j = (k * 32 + lane) * 8;
      if (j >= ng.dv) continue;
#pragma unroll
      for (int i = 0; i < 8; ++i) d[k][i] = inv * (d[k][i] - o[k][i] * mean);
      store8(dg + at_dg + j, gate[k]);
      store8(d_o + at_do + j, d[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kVectors; ++k)
    if ((k * 32 + lane) * 8 < ng.dv)
#pragma unroll
      for (int i = 0; i < 8; ++i) atomicAdd(&dw_block[(k * 32 + lane) * 8 + i], dw[k][i]);
  __syncthreads();
  for (int j = threadIdx.x; j < ng.dv; j += blockDim.x) atomicAdd(&dw_sums[j], dw_block[j]);
}

NormGate norm_gate(const OutputChainProblem& p) {
  return {static_cast<const bf16*>(p.o.data), static_cast<const bf16*>(p.g.data),
          static_cast<const bf16*>(p.norm_weight), p.o.stride, p.g.stride, p.tokens, static_cast<int>(p.heads),
          static_cast<int>(p.dv), p.eps};
}

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Whether the 16-byte norm-gate kernels take o, g, the norm weight and u [tokens, heads·dv].
bool vector_rows(const OutputChainProblem& p, const bf16* u) {
  return p.dv % 8 == 0 && p.dv <= 512 && p.o.stride % 8 == 0 && p.g.stride % 8 == 0 && aligned(p.o.data) &&
         aligned(p.g.data) && aligned(p.norm_weight) && aligned(u);
}

// Blocks of a norm-gate kernel over the problem's rows (one warp a row at a time): `cap` at
// most, or with `one_wave` a single wave at the kernel's resident count, whose warps then
// walk several rows each. The backward, whose blocks each end in dv atomics on the same dv
// addresses, took 0.77 / 0.92 of its time in one wave at GLA / Gated DeltaNet widths and
// 2048 tokens (H100, ChainsCudaTiming.OutputBackwardBlocks; NOTES.md). SEQMIX_CHAINS_NORM_
// GATE_BLOCKS=<k> (2, 4 or 8) forces k blocks a SM, for that test.
template <class Kernel>
unsigned norm_gate_blocks(const OutputChainProblem& p, Kernel kernel, size_t shared, unsigned cap, bool one_wave) {
  const unsigned needed = grid_for(p.tokens * p.heads * 32, kThreads);
  int per_sm = choice_from_environment<int>("SEQMIX_CHAINS_NORM_GATE_BLOCKS", {{"2", 2}, {"4", 4}, {"8", 8}}, 0);
  if (per_sm == 0 && !one_wave) return std::min(needed, cap);
  if (per_sm == 0) {
    static std::mutex mutex;
    static std::map<const void*, int> resident;  // per kernel: the occupancy query costs host time
    const std::lock_guard<std::mutex> lock(mutex);
    auto [it, fresh] = resident.try_emplace(reinterpret_cast<const void*>(kernel), 0);
    if (fresh)
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, kThreads, shared),
            "output chain: norm-gate occupancy");
    per_sm = std::max(it->second, 1);
  }
  return std::min(needed, static_cast<unsigned>(per_sm * multiprocessor_count()));
}

// One wave for the norm-gate forward too (SEQMIX_CHAINS_NORM_GATE_WAVE_FORWARD=1; under
// measurement, off by default) and the backward (SEQMIX_CHAINS_NORM_GATE_WAVE=0 restores its
// grid of at most 1024 blocks).
bool forward_one_wave() { return flag_from_environment("SEQMIX_CHAINS_NORM_GATE_WAVE_FORWARD", false); }
bool backward_one_wave() { return flag_from_environment("SEQMIX_CHAINS_NORM_GATE_WAVE", true); }

// u [tokens, heads·dv] in scratch.
void normalise_and_gate(const OutputChainProblem& p, bf16* u, cudaStream_t stream) {
  const bool vec8 = vector_rows(p, u);
  const auto kernel = vec8 && p.dv <= 256 ? norm_gate_forward_vec8<1> : vec8 ? norm_gate_forward_vec8<2> : norm_gate_forward;
  const unsigned blocks = norm_gate_blocks(p, kernel, 0, 4096u, forward_one_wave());
  kernel<<<blocks, kThreads, 0, stream>>>(norm_gate(p), u);
  check_launch("output chain: norm_gate_forward");
}

// The most tokens for which the forward's GEMM is launched as a programmatic dependent of
// the norm-gate pass: measured on the H100 (ChainsCudaTiming.OutputPdl, graph replays) 0.980
// / 0.988 of the plain launch's time at 2048 tokens (GLA / Gated DeltaNet widths), 0.992 /
// 1.001 at 8192, but 1.025 / 1.015 at 32768 (inside that size's clock drift, but not
// faster), so it stays off there.
constexpr int64_t kProgrammaticForwardMaxTokens = 8192;

// SEQMIX_CHAINS_OUTPUT_FUSED=0: the backward recomputes u in its own pass first, as before.
bool output_backward_fused() { return flag_from_environment("SEQMIX_CHAINS_OUTPUT_FUSED", true); }

}  // namespace
}  // namespace seqmix::cuda::chains

namespace seqmix::cuda {

void output_chain_forward(const OutputChainProblem& p, MutableRows y) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t width = p.heads * p.dv;
  const chains::Scratch<chains::bf16> u(p.tokens * width, stream);
  chains::normalise_and_gate(p, u.get(), stream);
  gemm_nt_bf16(p.tokens, p.d_out, width, Rows{u.get(), width}, p.out_weight, y, p.stream,
               /*programmatic=*/p.tokens <= chains::kProgrammaticForwardMaxTokens);
}

void output_chain_backward(const OutputChainProblem& p, const OutputChainGradients& g) {
  using chains::bf16;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t width = p.heads * p.dv;
  const chains::Scratch<bf16> u(p.tokens * width, stream), du(p.tokens * width, stream);
  const bool vec8 = chains::vector_rows(p, u.get()) && g.d_o.stride % 8 == 0 && g.dg.stride % 8 == 0 &&
                    chains::aligned(g.d_o.data) && chains::aligned(g.dg.data) && chains::aligned(du.get());
  // u (not kept by the forward) comes from the norm-gate backward itself when its 16-byte
  // kernel runs: one pass over o, g and du instead of a recompute pass over o and g first.
  const bool fused = vec8 && chains::output_backward_fused();
  const chains::Scratch<float> dw(p.dv, stream);
  // Zeroed first, so that nothing stands between du's GEMM and the norm-gate backward that
  // is launched as its programmatic dependent, nor between that and dout_weight's GEMM.
  check(cudaMemsetAsync(dw.get(), 0, p.dv * sizeof(float), stream), "output chain: dnorm_weight");
  if (!fused) chains::normalise_and_gate(p, u.get(), stream);
  gemm_nn_bf16(p.tokens, width, p.d_out, g.dy, p.out_weight, MutableRows{du.get(), width}, p.stream);
  if (!fused) gemm_tn_bf16(p.d_out, width, p.tokens, g.dy, Rows{u.get(), width}, g.dout_weight, p.stream);

  const auto args = std::make_tuple(chains::norm_gate(p), static_cast<const bf16*>(du.get()),
                                    static_cast<bf16*>(g.d_o.data), g.d_o.stride, static_cast<bf16*>(g.dg.data),
                                    g.dg.stride, dw.get());
  const size_t shared = p.dv * sizeof(float);
  // One wave (norm_gate_blocks); before, at most 1024 blocks, few enough that the per-block
  // dw atomics stayed cheap.
  const auto launch = [&](auto kernel, auto... extra) {
    const unsigned blocks = chains::norm_gate_blocks(p, kernel, shared, 1024u, chains::backward_one_wave());
    std::apply([&](auto... a) {
      launch_dependent(kernel, blocks, chains::kThreads, shared, stream, "output chain: norm_gate_backward", a...,
                       extra...);
    }, args);
  };
  bf16* const u_out = fused ? u.get() : nullptr;
  if (vec8) launch(p.dv <= 256 ? chains::norm_gate_backward_vec8<1> : chains::norm_gate_backward_vec8<2>, u_out);
  else launch(chains::norm_gate_backward);
  if (fused)
    gemm_tn_bf16(p.d_out, width, p.tokens, g.dy, Rows{u.get(), width}, g.dout_weight, p.stream, /*programmatic=*/true);
  chains::to_bf16<<<chains::grid_for(p.dv, 256), 256, 0, stream>>>(dw.get(), p.dv, static_cast<bf16*>(g.dnorm_weight));
  check_launch("output chain: dnorm_weight");
}

}  // namespace seqmix::cuda
