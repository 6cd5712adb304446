// The pipelined GLA forward walk (outputs only): the same chunkwise algebra as forward.cuh,
// with the work of a chunk step split between two groups of 8 warps that run concurrently:
//   preparing warps (0–7), chunk c:  e^{g}; the diagonal sub-chunk sums of A (raw q, k);
//                                    the decayed operands (q ⊙ e^{b} and k ⊙ e^{b_last − b}
//                                    written over the raw q and k); the sub-chunk pairs of A;
//                                    then hand chunk c over and go on to chunk c + 1;
//   state warps (8–15), chunk c:     o = scale·(q_start·S_0 + A·v), S ← e^{b_last} ⊙ S + k_endᵀ v,
//                                    the state in their registers.
// So the chunk-serial chain is only the state warps' products; the CUDA-core work of chunk
// c + 1 runs beside them. q, k, v and e^{b_last} have two stages (what the state warps read
// of chunk c stays while chunk c + 1 is prepared); g, e^{g}, the sub-chunk operands and A
// have one: A is written only once the state warps are done with chunk c − 1.
// Copies: the state warps, done with chunk c, copy chunk c + 2's q, k, v into the stage they
// release and arrive on that stage's mbarrier when the copies land (cp.async.mbarrier); the
// preparing warps wait on it before chunk c + 2. g has one stage: the preparing warps read
// chunk c + 1's into registers at the start of chunk c and store it once their walkers
// have read chunk c's.
// Hand-over by named barriers: kFull (preparing warps arrive, state warps wait) and kFree
// (state warps arrive, preparing warps wait); each side's own steps by its own barrier.
#pragma once

#include "cuda/common/tma.cuh"
#include "cuda/gla/forward.cuh"

namespace seqmix::cuda::gla {

constexpr int kPipelinedThreads = 2 * kThreads;

enum NamedBarrier : int { kPrepBarrier = 1, kStateBarrier = 2, kFull = 3, kFree = 4 };

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers a thread: 128 at entry (512 threads, one block an SM); the state warps hold the
// state and the output accumulators, the preparing warps far less. Sums to 2 × 128.
constexpr int kPrepRegisters = 96, kStateRegisters = 160;
template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// One stage's view of PipelinedSmem in the member names decay_operands, diagonal_sums,
// pair_scores, chunk_output read (pointers; q_start aliases q and k_end aliases k: each
// walker thread reads its raw element before it writes the decayed one in its place).
template <class E, int KD, int VB>
struct StageView {
  using Element = E;
  static constexpr int kKeys = KD, kValues = VB;
  static constexpr int PK = KD + 8, PV = VB + 8, PA = kChunk + 8;
  E *q, *k, *g, *q_sub, *q_start, *k_end, *k_pair;
  __half* decay;
  E *state, *scores;
  float* decay_all;
};

template <class E, int KD, int VB>
struct PipelinedSmem {
  static constexpr int PK = KD + 8, PV = VB + 8, PA = kChunk + 8;
  E q[2][kChunk * PK];  // raw q, then q ⊙ e^{b} in place
  E k[2][kChunk * PK];  // raw k, then k ⊙ e^{b_last − b} in place
  E v[2][kChunk * PV];
  float decay_all[2][KD];  // e^{b_last}
  E g[kChunk * PK];
  __half decay[kChunk * PK];  // e^{g}, for the diagonal sums
  E q_sub[kChunk * PK];
  E k_pair[kPairRows * PK];
  E scores[kChunk * PA];
  E state[KD * PV];
  uint64_t landed[2];  // per stage: the state warps' copies of q, k, v have landed

  __device__ StageView<E, KD, VB> view(int stage) {
    return {q[stage], k[stage], g, q_sub, q[stage], k[stage], k_pair, decay, state, scores, decay_all[stage]};
  }
};

// e^{g} of a whole chunk into s.decay (fp16), all preparing threads.
template <class E, int KD, int VB>
__device__ __forceinline__ void chunk_decays(PipelinedSmem<E, KD, VB>& s, int tid) {
  constexpr int PK = PipelinedSmem<E, KD, VB>::PK;
#pragma unroll 8
  for (int i = tid; i < kChunk * KD; i += kThreads) {
    const int at = (i / KD) * PK + i % KD;
    s.decay[at] = __float2half_rn(__expf(to_float(s.g[at])));
  }
}

template <class E, int KD, int VB>
__global__ void __launch_bounds__(kPipelinedThreads, 1) pipelined_forward_kernel(const GlaParams p) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<PipelinedSmem<E, KD, VB>*>(smem_bytes);
  constexpr int PK = PipelinedSmem<E, KD, VB>::PK, PV = PipelinedSmem<E, KD, VB>::PV;
  const int lane = threadIdx.x % 32;
  const bool preparing = threadIdx.x < kThreads;
  const int tid = threadIdx.x % kThreads, warp = tid / 32;  // within the group
  const int vb0 = blockIdx.x * VB;
  const BlockPlan plan(p);
  if (plan.first_chunk >= plan.end_chunk) return;  // a segment past a short sequence's end
  const int64_t h = plan.h;
  auto row0 = [&](const GlaTokens& x, int64_t t, int col) {
    return static_cast<E*>(x.data) + plan.seq.batch * x.stride_batch + (plan.seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };
  // q, k, v of a chunk into a stage, by the calling group's 256 threads.
  auto issue_token_loads = [&](int64_t chunk, int stage) {
    const int64_t t = chunk * kChunk;
    load_chunk<KD, PK>(s.q[stage], row0(p.q, t, 0), p.q.stride_time, plan.valid(chunk), tid);
    load_chunk<KD, PK>(s.k[stage], row0(p.k, t, 0), p.k.stride_time, plan.valid(chunk), tid);
    load_chunk<VB, PV>(s.v[stage], row0(p.v, t, vb0), p.v.stride_time, plan.valid(chunk), tid);
  };
  if (threadIdx.x == 0) {
    tma::barrier_init(&s.landed[0], kThreads);  // one arrival per state thread
    tma::barrier_init(&s.landed[1], kThreads);
    tma::barrier_init_fence();
  }
  __syncthreads();

  if (preparing) {
    release_registers<kPrepRegisters>();
    // The next chunk's g: read into registers at the start of a step (16-byte loads; zeros
    // past the sequence's end) and stored into the one g tile once the walkers have read it,
    // so its latency hides behind the step.
    constexpr int kDecayVectors = kChunk * KD / 8 / kThreads;
    uint4 next_g[kDecayVectors];
    auto read_decays = [&](int64_t chunk) {
      const E* const src = row0(p.g, chunk * kChunk, 0);
      const int valid = plan.valid(chunk);
#pragma unroll
      for (int j = 0; j < kDecayVectors; ++j) {
        const int i = tid + j * kThreads, r = i / (KD / 8), c = (i % (KD / 8)) * 8;
        next_g[j] = r < valid ? *reinterpret_cast<const uint4*>(src + r * p.g.stride_time + c) : make_uint4(0, 0, 0, 0);
      }
    };
    auto store_decays = [&] {
#pragma unroll
      for (int j = 0; j < kDecayVectors; ++j) {
        const int i = tid + j * kThreads, r = i / (KD / 8), c = (i % (KD / 8)) * 8;
        *reinterpret_cast<uint4*>(s.g + r * PK + c) = next_g[j];
      }
    };
    // A above the diagonal blocks is never written: zero once.
    for (int i = tid; i < kChunk * PipelinedSmem<E, KD, VB>::PA; i += kThreads) s.scores[i] = from_float<E>(0.0f);
    load_chunk<KD, PK>(s.g, row0(p.g, plan.first_chunk * kChunk, 0), p.g.stride_time, plan.valid(plan.first_chunk),
                       tid);
    issue_token_loads(plan.first_chunk, 0);  // the first chunk's; the state warps copy the rest
    copy_async_commit();
    PhaseClock phases(p.phase_cycles, tid == 0);
    for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
      const int stage = static_cast<int>((chunk - plan.first_chunk) & 1);
      const bool more = chunk + 1 < plan.end_chunk;
      auto view = s.view(stage);
      copy_async_wait_all();  // the first chunk's g, q, k, v
      // The state warps' copies into this stage: its ((chunk − first − 1) / 2)-th landing.
      if (chunk > plan.first_chunk)
        tma::wait(&s.landed[stage], static_cast<uint32_t>(((chunk - plan.first_chunk - 1) / 2) & 1));
      named_sync(kPrepBarrier, kThreads);  // chunk c's inputs are in
      phases.mark(kGlaPhaseLoadWait);
      if (more) read_decays(chunk + 1);
      chunk_decays(s, tid);
      named_sync(kPrepBarrier, kThreads);
      const DiagonalSums diagonal = diagonal_sums(view, warp, lane);
      named_sync(kPrepBarrier, kThreads);  // raw q and k read: the walkers may overwrite them
      phases.mark(kGlaPhaseDiagonal);
      decay_operands<true>(view, tid);
      named_sync(kPrepBarrier, kThreads);  // g is free; q_sub and k_pair are written
      phases.mark(kGlaPhaseDecays);
      if (more) store_decays();  // seen by the next step's first barrier
      if (chunk > plan.first_chunk) named_sync(kFree, kPipelinedThreads);  // A of chunk c − 1 is read
      phases.mark(kGlaPhasePrepWait);
      store_diagonal(view, diagonal, warp, lane);
      pair_scores(view, warp, lane);
      named_arrive(kFull, kPipelinedThreads);  // chunk c's operands are in shared memory
      phases.mark(kGlaPhasePairs);
    }
    phases.finish(plan.end_chunk - plan.first_chunk, true);
  } else {
    claim_registers<kStateRegisters>();
    StateTile<E, KD, VB> S(warp, lane);
    float* const segment_state = p.workspace ? p.workspace + plan.state_slot * KD * p.V + vb0 : nullptr;
    const int64_t state_offset = (plan.n * p.H + h) * KD * p.V + vb0;
    if (plan.first_chunk + 1 < plan.end_chunk) {  // stage 1 is free from the start
      issue_token_loads(plan.first_chunk + 1, 1);
      copy_async_arrive(&s.landed[1]);
    }
    S.load(p.segments > 1 ? segment_state : p.initial_state ? p.initial_state + state_offset : nullptr, p.V);
    PhaseClock phases(p.phase_cycles, tid == 0);
    for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
      const int stage = static_cast<int>((chunk - plan.first_chunk) & 1);
      auto view = s.view(stage);
      named_sync(kFull, kPipelinedThreads);  // also: every state warp is done with chunk c − 1
      phases.mark(kGlaPhaseStateWait);
      S.store_operand(s.state);
      named_sync(kStateBarrier, kThreads);
      chunk_output(view, s.v[stage], warp, lane, row0(p.o, chunk * kChunk, vb0), p.o.stride_time, plan.valid(chunk),
                   p.scale);
      phases.mark(kGlaPhaseOutput);
      S.advance(s.k[stage], s.decay_all[stage], s.v[stage], lane);
      if (chunk + 1 < plan.end_chunk) named_arrive(kFree, kPipelinedThreads);
      if (chunk + 2 < plan.end_chunk) {
        named_sync(kStateBarrier, kThreads);  // every state warp is done with this stage
        issue_token_loads(chunk + 2, stage);
        copy_async_arrive(&s.landed[stage]);
      }
      phases.mark(kGlaPhaseAdvance);
    }
    phases.finish(plan.end_chunk - plan.first_chunk, false);
    if (p.final_state && plan.end_chunk == plan.chunks) S.store(p.final_state + state_offset, p.V);
  }
}

}  // namespace seqmix::cuda::gla
