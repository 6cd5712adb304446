// The hardware base-2 exponential and logarithm and the reciprocal, one MUFU operation each,
// with denormals flushed. Without .ftz each takes a range fix-up of ~3 instructions on the
// path of its result (__expf: a compare against −126, a halving before and a squaring after),
// and __frcp_rn a Newton step with its rounding fix-up. Their ~2 ulp sit far below the bounds
// every caller holds its outputs to (bf16, and 2e-5 relative for f32). exp_fast(x) underflows
// to 0 below −87, where every use wants 0 anyway.
#pragma once

namespace seqmix::cuda {

constexpr float kLog2e = 1.44269504f, kLn2 = 0.69314718f;

__device__ __forceinline__ float ex2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_fast(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float exp_fast(float x) { return ex2_fast(x * kLog2e); }

}  // namespace seqmix::cuda
