// Attention backward on Hopper, parallel over key blocks: one CTA per (128 keys, kv head,
// sequence) walks every query block of every query head of its GQA group, so dK and dV
// are whole sums kept in registers; dQ is accumulated in fp32 with atomics.
//   warpgroup 0  producer: warp 0 issues TMA copies of the K and V block once and of the
//                Q and dO blocks (64 rows) into a 2-stage ring; warp 1 copies the rows'
//                lse·log2(e) and delta (from the preprocess kernel) beside them.
//   warpgroups 1, 2  consumers: 64 keys each. Per query block, all by wgmma:
//                Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (shared memory operands), Pᵀ = exp2(scale·log2e·Sᵀ − lse2),
//                dSᵀ = Pᵀ ⊙ (dPᵀ − delta), dV += Pᵀ·dO and dK += dSᵀ·Q (A from registers),
//                dSᵀ to shared memory, dQ = dS·K (both operands MN-major), dQ atomically
//                added into a float workspace.
// Three small kernels around it: preprocess (delta = rowsum(dO ⊙ O) − d_lse, lse·log2(e)),
// postprocess (dQ = scale · workspace, to the dtype). Not deterministic: the order of the
// dQ atomics varies; `deterministic` takes the kernels of backward.cuh instead.
// Two schedules (AttentionBackwardSchedule, params.hpp): `standard` as above, the two
// consumer warpgroups meeting at one barrier per query block; `pingpong` makes them take
// turns on the tensor cores (dV, dK of block i with dQ of block i − 1 in one turn, Sᵀ, dPᵀ
// of block i + 1 after it) and sends dQ through shared memory to bulk reduce-adds issued
// by producer warps 2 and 3 (tensor reduce-adds of 64 × 32 boxes) instead of the atomics.
// D = 256 (standard schedule only) splits the head dim instead of the keys, since dK and dV
// of 64 keys × 256 columns do not fit one warpgroup's registers: a CTA takes 64 keys;
// warpgroup 0 computes Sᵀ and Pᵀ, warpgroup 1 dPᵀ and then dSᵀ from the Pᵀ rows warpgroup 0
// left in shared memory; both take Pᵀ and dSᵀ from shared memory (wgmma SS) for dV, dK and
// dQ of their own 128 head-dim columns. Key-block pairs (D = 256 pingpong, off by default):
// clusters of two CTAs over neighbouring key blocks share each Q and dO tile, each CTA's
// producer copying half of it into both by TMA multicast.
#pragma once

#include <cuda.h>

#include <algorithm>

#include "cuda/attention/backward_sm90_parts.cuh"

namespace seqmix::cuda::attn::sm90 {

template <class T, int D, AttentionBackwardSchedule kSchedule, bool kPairs = false>
struct BackwardSm90Config {
  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128 and 256");
  // D = 256: dK and dV of 64 keys × 256 columns would take 256 registers per consumer thread,
  // so the warpgroups split the head dim instead of the keys (the kernel's header says how).
  static constexpr bool kSplitHeadDim = D == 256;
  static constexpr int kBlockM = 64;                      // query rows per pipeline stage
  static constexpr int kBlockN = kSplitHeadDim ? 64 : 128;  // keys per CTA (64 per consumer warpgroup, or shared)
  static constexpr int kStages = 2;
  static constexpr int kChunks = D / 64;  // 128-byte swizzle atoms across the head dim
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;
  // Rows and columns of dK, dV a consumer warpgroup holds: its 64 keys × all columns, or
  // (split) all 64 keys × its half of the columns.
  static constexpr int kAccCols = kSplitHeadDim ? D / 2 : D;
  // dQ of a query block: each consumer warpgroup computes kDqCols of its columns over kDqKeys
  // keys. D = 128: columns 64·wg over all 128 keys; D = 64: all columns over the warpgroup's
  // own keys; D = 256: columns 128·wg over all 64 keys.
  static constexpr int kDqKeys = D == 64 ? 64 : kBlockN;
  static constexpr int kDqCols = kSplitHeadDim ? 128 : 64;
  static constexpr uint32_t kKVBytes = kBlockN * D * sizeof(T);
  static constexpr uint32_t kQBytes = kBlockM * D * sizeof(T);
  static constexpr uint32_t kDsBytes = kBlockN * kBlockM * sizeof(T);  // dSᵀ: kBlockN key rows × 64 queries (128 B)
  static constexpr bool kPingpong = kSchedule == AttentionBackwardSchedule::pingpong;
  // The turns need each warpgroup to own its keys, so D = 256 takes none; there `pingpong`
  // keeps the schedule's other half: dQ leaves through shared memory (the block's own Q/dO
  // stage, free once the block's products are done) as tensor reduce-adds by producer warps.
  static constexpr bool kTurns = kPingpong && !kSplitHeadDim;
  static constexpr bool kReduceDq = kPingpong;
  // dSᵀ buffers. pingpong: block j's dSᵀ is read by both warpgroups' dQ products one turn
  // after it is written; with two buffers warpgroup 0 would rewrite one that warpgroup 1's
  // dQ product still reads. Three suffice by the turn order (a protocol model of the
  // schedule finds no conflict); four leave one block of slack, and shared memory has room.
  static constexpr int kDsBuffers = kTurns ? 4 : 2;
  // pingpong: each consumer warpgroup's dQ share of a block (64 rows × 64 floats) as two
  // boxes of 32 columns (rows of 128 bytes, 128-byte swizzle: the layout the tensor reduce
  // reads, and conflict-free for the consumers' 8-byte stores), one reduce-add each.
  static constexpr uint32_t kDqBoxBytes = kBlockM * 32 * sizeof(float);
  static constexpr uint32_t kDqStagingBytes = kTurns ? 2 * 2 * kDqBoxBytes : 0;
  // split + reduce: each stage's Q and dO tiles take a block's dQ (64 rows × 256 floats) once
  // read: warpgroup w's 128 columns (4 boxes) in its own halves of Q (boxes 0, 1) and dO (2, 3).
  static_assert(!kSplitHeadDim || kQBytes == 2 * 2 * kDqBoxBytes, "a warpgroup's dQ share fills its Q and dO halves");
  // Arrivals that free a stage: every consumer thread (the stats rows read), and with dQ
  // staged in the stage (split + reduce) both reduce warps (their reduce-adds have read it).
  // Key-block pairs (NOTES.md "Key-block pairs"): clusters of two CTAs over neighbouring key
  // blocks, each copying half of every Q and dO tile into both; a stage is then free once the
  // reduce warps of both CTAs are done with it, so the peer's two arrive here too.
  static_assert(!kPairs || (kSplitHeadDim && kReduceDq), "key-block pairs: the split kernel with dQ reduces");
  static constexpr int kStageReleases = kConsumerThreads + (kSplitHeadDim && kReduceDq ? 2 : 0) + (kPairs ? 2 : 0);
  static constexpr uint32_t kKOffset = 0;
  static constexpr uint32_t kVOffset = kKOffset + kKVBytes;
  static constexpr uint32_t kQOffset = kVOffset + kKVBytes;
  static constexpr uint32_t kDoOffset = kQOffset + kStages * kQBytes;
  static constexpr uint32_t kDsOffset = kDoOffset + kStages * kQBytes;
  // split: Pᵀ rows, double-buffered like dSᵀ (formed by one warpgroup, read by both).
  static constexpr uint32_t kPOffset = kDsOffset + kDsBuffers * kDsBytes;
  static constexpr uint32_t kPBytes = kSplitHeadDim ? kDsBuffers * kDsBytes : 0;
  static constexpr uint32_t kDqStagingOffset = kPOffset + kPBytes;
  static constexpr uint32_t kStatsOffset = kDqStagingOffset + kDqStagingBytes;  // lse2[kBlockM], delta[kBlockM] per stage
  static constexpr uint32_t kBarrierOffset = kStatsOffset + kStages * 2 * kBlockM * sizeof(float);
  // kv_full, q_full[], do_full[], stats_full[], stage_empty[], dq_full[2], dq_empty[2]
  // (split + reduce: dq_full[stage][warpgroup] in the last four)
  static constexpr uint32_t kBarriers = 1 + 4 * kStages + 4;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

// The float workspace: dQ accumulators [batch][Hq][rows_q][D], then lse2 and delta
// [batch][Hq][rows_q] each.

// --- the main kernel -------------------------------------------------------------------

// kOrdered: the deterministic backward (ws.locks), a kernel of its own so that the ordering's
// arithmetic costs the other kernels no registers.
template <class T, int D, AttentionBackwardSchedule kSchedule, bool kPairs, bool kOrdered>
__global__ void __launch_bounds__(384, 1) dkdv_dq_kernel(const __grid_constant__ BackwardSm90Args args) {
  using Cfg = BackwardSm90Config<T, D, kSchedule, kPairs>;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr bool kTurns = Cfg::kTurns, kSplit = Cfg::kSplitHeadDim;
  const AttentionBackwardParams& bp = args.bp;
  const AttentionParams& p = bp.fwd;

  const KeyTile tile = key_tile(args, static_cast<int>((p.max_seqlen_k + kBlockN - 1) / kBlockN));
  const Sequence seq = sequence_of(p, tile.sequence);
  const int kv_head = tile.kv_head;
  // Deterministic (kOrdered): a query block's dQ adds go in a fixed order, from the last
  // key block that meets it down to key block 0 (the order in which causal walks reach it;
  // rotated walks below). The key blocks are dealt in reverse, the last first, so that
  // unrotated a CTA only ever waits on CTAs of lower index, launched before it: no wait on a
  // CTA that cannot be resident.
  static_assert(!kOrdered || (Cfg::kReduceDq && !kPairs), "ordered adds: the reduce-adds, no pairs");
  const int key_blocks = (seq.len_k + kBlockN - 1) / kBlockN;
  const int n_block = kOrdered ? key_blocks - 1 - tile.n_block : tile.n_block;
  const int n0 = n_block * kBlockN;
  if (n_block < 0 || n0 >= seq.len_k) return;
  const int group = static_cast<int>(p.Hq / p.Hkv);
  // Pairs walk the same query blocks (causal: the earlier key block's, one masked block more
  // for the later); the launcher pairs only key blocks inside the sequence, so none returns above.
  const QueryRange range = query_blocks<kBlockM>(seq, kPairs ? (n_block & ~1) * kBlockN : n0, p.causal);
  const int blocks_per_head = max(0, range.end - range.begin);
  const int iterations = group * blocks_per_head;
  // Rotated walks (deterministic without a mask, ws.rotated): every key block would start at
  // query block 0, so its adds there would chain through all N key blocks before the last
  // could go on. Instead key block n starts at query block n·M/N of the M and wraps around:
  // the key blocks reach each query block one after another, a block or two apart, in the
  // order of its adds, as causal walks do by themselves.
  const int first_block =
      kOrdered && args.ws.rotated ? static_cast<int>(static_cast<int64_t>(n_block) * blocks_per_head / key_blocks) : 0;
  // Query block `it` of this CTA: its query head and first row.
  auto head_of = [&](int it) { return kv_head * group + it / blocks_per_head; };
  auto row0_of = [&](int it) {
    if constexpr (!kOrdered) return (range.begin + it % blocks_per_head) * kBlockM;
    const int block = it % blocks_per_head + first_block;
    return (range.begin + (block < blocks_per_head ? block : block - blocks_per_head)) * kBlockM;
  };
  // Ordered adds: block `it`'s lock, and the adds it must count before warpgroup w's: two a
  // key block (one a warpgroup, into columns of its own), from the last key block meeting it
  // down to this one's; rotated: down from the last key block whose walk starts at or before
  // the block, then on from key block N − 1.
  auto lock_of = [&](int it) {
    return args.ws.locks + (static_cast<int64_t>(tile.sequence) * p.Hq + head_of(it)) * args.ws.lock_blocks +
           row0_of(it) / kBlockM;
  };
  auto adds_before = [&](int it) {
    if (args.ws.rotated) {
      const int64_t block = row0_of(it) / kBlockM;
      const int first = static_cast<int>(((block + 1) * key_blocks - 1) / blocks_per_head);
      return 2 * ((first - n_block + key_blocks) % key_blocks);
    }
    const int last_query = row0_of(it) + kBlockM - 1;  // the block's last row sees the most keys
    const int last = p.causal ? min(key_blocks - 1, (last_query + seq.len_k - seq.len_q) / kBlockN) : key_blocks - 1;
    return 2 * (last - n_block);
  };

  extern __shared__ uint8_t smem_raw[];
  // Aligned by pointer arithmetic on smem_raw (not through an integer), so the compiler
  // still knows every pointer below is shared memory and emits LDS/STS, not generic LD/ST.
  uint8_t* smem = smem_raw + ((1024u - (tma::shared_address(smem_raw) & 1023u)) & 1023u);
  uint8_t* k_tile = smem + Cfg::kKOffset;
  uint8_t* v_tile = smem + Cfg::kVOffset;
  uint8_t* q_tiles = smem + Cfg::kQOffset;
  uint8_t* do_tiles = smem + Cfg::kDoOffset;
  uint8_t* ds_tiles = smem + Cfg::kDsOffset;
  uint8_t* p_tiles = smem + Cfg::kPOffset;  // split: Pᵀ rows
  uint8_t* dq_staging = smem + Cfg::kDqStagingOffset;               // [consumer warpgroup][2 boxes][kBlockM rows][32 floats]
  float* stats = reinterpret_cast<float*>(smem + Cfg::kStatsOffset);  // [stage][lse2 | delta][kBlockM]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
  uint64_t* q_full = kv_full + 1;
  uint64_t* do_full = q_full + kStages;
  uint64_t* stats_full = do_full + kStages;
  uint64_t* stage_empty = stats_full + kStages;
  uint64_t* dq_full = stage_empty + kStages;  // pingpong: a warpgroup's dQ share is staged
  uint64_t* dq_empty = dq_full + 2;           // pingpong: its bulk reduces have read it
  // split + reduce: box `box` of warpgroup w's dQ share of the block in `stage`.
  auto dq_box = [&](int stage, int w, int box) {
    uint8_t* tiles = box < 2 ? q_tiles : do_tiles;
    return tiles + stage * Cfg::kQBytes + 2 * w * kBlockM * 128 + (box % 2) * Cfg::kDqBoxBytes;
  };

  if (threadIdx.x == 0) {
    tma::barrier_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(&q_full[s], 1);
      tma::barrier_init(&do_full[s], 1);
      tma::barrier_init(&stats_full[s], 32);
      tma::barrier_init(&stage_empty[s], Cfg::kStageReleases);
    }
    for (int w = 0; w < 2; ++w) {
      tma::barrier_init(&dq_full[w], 128);
      tma::barrier_init(&dq_empty[w], kSplit ? 128 : 1);  // split: dq_full of stage 1
    }
    tma::barrier_init_fence();
  }
  // Pairs: the peer's copies and arrivals reach this CTA's barriers, initialised before them
  // (the init fence releases them); and neither CTA exits while the other may still arrive on
  // its barriers: at both returns, released by the producer's threads (the reduce lanes'
  // arrivals on the peer), relaxed for the consumers (none, and their dK/dV stores need no wait).
  if constexpr (kPairs)
    cluster_sync<false>();
  else
    __syncthreads();
  const uint32_t rank = kPairs ? cluster_rank() : 0;

  const int warpgroup = threadIdx.x / 128;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int lane = threadIdx.x % 32;

  if (warpgroup == 0) {  // producer
    // setmaxnreg moves registers inside the CTA's launch allocation (168 per thread at
    // 384 threads): the consumers' increase waits for registers the producer gave back, so
    // 24·128 + 240·256 must not exceed 168·384 (a producer at 32 hangs the consumers).
    static_assert(24 * 128 + 240 * Cfg::kConsumerThreads <= 168 * Cfg::kThreads, "register reallocation");
    release_registers<24>();
    if (iterations == 0) {
      if constexpr (kPairs) cluster_sync<true>();
      return;
    }
    if (warp_in_group == 0 && lane == 0) {
      prefetch_tensor_map(&args.q_map);
      prefetch_tensor_map(&args.do_map);
      const int k_row = static_cast<int>(seq.k_start) + n0;
      tma::arrive_expect_bytes(kv_full, 2 * Cfg::kKVBytes);
      for (int c = 0; c < Cfg::kChunks; ++c) {
        tma::load_box(k_tile + c * kBlockN * 128, args.k_map, 64 * c, k_row, kv_head, seq.batch, kv_full);
        tma::load_box(v_tile + c * kBlockN * 128, args.v_map, 64 * c, k_row, kv_head, seq.batch, kv_full);
      }
      for (int it = 0; it < iterations; ++it) {
        const int head = head_of(it);
        const int q_row = static_cast<int>(seq.q_start) + row0_of(it);
        const int stage = it % kStages;
        tma::wait(&stage_empty[stage], ((it / kStages) & 1) ^ 1);
        uint8_t* q_dst = q_tiles + stage * Cfg::kQBytes;
        uint8_t* do_dst = do_tiles + stage * Cfg::kQBytes;
        // A tile's head-dim chunks; pairs: this CTA's half of them, into both CTAs (each
        // full barrier still counts the whole tile, half of it from the peer's copies).
        auto load_tile = [&](uint8_t* dst, const CUtensorMap& map, uint64_t* full) {
          tma::arrive_expect_bytes(full, Cfg::kQBytes);
          constexpr int kOwnChunks = kPairs ? Cfg::kChunks / 2 : Cfg::kChunks;
          for (int c = kOwnChunks * rank; c < kOwnChunks * (rank + 1); ++c) {
            if constexpr (kPairs)
              load_box_multicast(dst + c * kBlockM * 128, map, 64 * c, q_row, head, seq.batch, full, 0b11);
            else
              tma::load_box(dst + c * kBlockM * 128, map, 64 * c, q_row, head, seq.batch, full);
          }
        };
        load_tile(q_dst, args.q_map, &q_full[stage]);
        load_tile(do_dst, args.do_map, &do_full[stage]);
      }
    } else if (warp_in_group == 1) {  // the rows' lse2 and delta; rows past the sequence see nothing
      for (int it = 0; it < iterations; ++it) {
        const int head = head_of(it);
        const int m0 = row0_of(it);
        const int stage = it % kStages;
        tma::wait(&stage_empty[stage], ((it / kStages) & 1) ^ 1);
        float* lse2 = stats + stage * 2 * kBlockM;
        for (int r = lane; r < kBlockM; r += 32) {
          const bool valid = m0 + r < seq.len_q;
          const int64_t index = row_index(p, seq.batch, head, seq.q_start + m0 + r);
          lse2[r] = valid ? args.ws.lse2[index] : INFINITY;
          lse2[kBlockM + r] = valid ? args.ws.delta[index] : 0.f;
        }
        tma::arrive(&stats_full[stage]);
      }
    } else if (kSplit && Cfg::kReduceDq && warp_in_group >= 2 && lane == 0) {
      // warp 2 + w, one lane: consumer warpgroup w's dQ share of each block (128 columns,
      // staged in the block's stage), added by four tensor reduce-adds; then the stage is free.
      const int w = warp_in_group - 2;
      prefetch_tensor_map(&args.dq_map);
      for (int it = 0; it < iterations; ++it) {
        const int stage = it % kStages;
        tma::wait(&dq_full[2 * stage + w], (it / kStages) & 1);
        if constexpr (kOrdered) wait_for_adds(lock_of(it), adds_before(it));
        for (int box = 0; box < 4; ++box)
          tensor_reduce_add(args.dq_map, dq_box(stage, w, box), Cfg::kDqCols * w + 32 * box,
                            static_cast<int>(seq.q_start) + row0_of(it), head_of(it), seq.batch);
        tma::bulk_commit();
        tma::bulk_wait_read();
        tma::arrive(&stage_empty[stage]);
        if constexpr (kPairs) arrive_in_cta(&stage_empty[stage], rank ^ 1);  // the peer copies into this stage too
        if constexpr (kOrdered) {
          tma::bulk_wait_all();
          count_add(lock_of(it));
        }
      }
      tma::bulk_wait_all();
    } else if (kTurns && warp_in_group >= 2 && lane == 0) {
      // warp 2 + w, one lane: consumer warpgroup w's dQ share of each block, added into the
      // workspace by two tensor reduce-adds (64 rows × 32 columns each). Rows past the tensor
      // are dropped by the copy engine; rows past a varlen sequence (the next sequence's)
      // get exact zeros (dSᵀ is zero there). D = 64 deterministic: each warpgroup its own half.
      const int w = warp_in_group - 2;
      const int dq_col0 = D == 128 || kOrdered ? 64 * w : 0;
      const uint8_t* staged = dq_staging + w * 2 * Cfg::kDqBoxBytes;
      prefetch_tensor_map(&args.dq_map);
      for (int it = 0; it < iterations; ++it) {
        const int q_row = static_cast<int>(seq.q_start) + row0_of(it);
        tma::wait(&dq_full[w], it & 1);
        if constexpr (kOrdered) wait_for_adds(lock_of(it), adds_before(it));
        for (int box = 0; box < 2; ++box)
          tensor_reduce_add(args.dq_map, staged + box * Cfg::kDqBoxBytes, dq_col0 + 32 * box, q_row, head_of(it),
                            seq.batch);
        tma::bulk_commit();
        tma::bulk_wait_read();
        tma::arrive(&dq_empty[w]);
        if constexpr (kOrdered) {
          tma::bulk_wait_all();
          count_add(lock_of(it));
        }
      }
      tma::bulk_wait_all();
    }
    if constexpr (kPairs) cluster_sync<true>();
    return;
  }

  // consumers
  claim_registers<240>();
  // pingpong branches on the warpgroup (its turns): read through a shuffle so the compiler
  // knows it is warp-uniform and keeps the wgmmas after those branches pipelined.
  const int wg = kTurns ? __shfl_sync(0xffffffff, warpgroup - 1, 0) : warpgroup - 1;
  const int key0 = kSplit ? 0 : wg * 64;  // the block's keys of this warpgroup's Sᵀ, dPᵀ, dK and dV rows
  const int key_row0 = n0 + key0 + warp_in_group * 16 + lane / 4;  // and + 8 (key within the sequence)
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float dk[Cfg::kAccCols / 2], dv[Cfg::kAccCols / 2];
#pragma unroll
  for (int i = 0; i < Cfg::kAccCols / 2; ++i) dk[i] = dv[i] = 0.f;
  const int acc_col0 = kSplit ? Cfg::kAccCols * wg : 0;  // first head-dim column of dk, dv

  const uint8_t* k_rows = k_tile + key0 * 128;  // this warpgroup's keys in each chunk
  const uint8_t* v_rows = v_tile + key0 * 128;
  // dQ operands: keys [dq_key0, dq_key0 + kDqKeys) of the block, head-dim columns [dq_col0, dq_col0 + kDqCols).
  const int dq_key0 = D == 64 ? 64 * wg : 0;
  const int dq_col0 = D == 64 ? 0 : Cfg::kDqCols * wg;

  // acc (64 key rows × 64 queries) = rows · operandᵀ over the head dim: K or V rows against
  // the Q or dO tile, both K-major (no commit).
  auto issue_score_product = [&](const uint8_t* rows, const uint8_t* operand, float(&acc)[32]) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int chunk = kk / 4, offset = (kk % 4) * 32;
      gmma_ss<T, kBlockM>(smem_descriptor(rows + chunk * kBlockN * 128 + offset, 16),
                          smem_descriptor(operand + chunk * kBlockM * 128 + offset, 16), acc, kk > 0);
    }
  };

  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ of the block in `stage`, one commit group each.
  auto issue_scores = [&](int stage, uint32_t phase, float(&s)[32], float(&dp)[32]) {
    tma::wait(&q_full[stage], phase);
    wgmma_fence();
    issue_score_product(k_rows, q_tiles + stage * Cfg::kQBytes, s);
    wgmma_commit();
    tma::wait(&do_full[stage], phase);
    issue_score_product(v_rows, do_tiles + stage * Cfg::kQBytes, dp);
    wgmma_commit();
  };

  // Once Sᵀ and dPᵀ of block `it` are done: Pᵀ and dSᵀ as A operands, dSᵀ rows also stored
  // in `ds_tile` (rows = keys of the block, 64 queries = 128 bytes per row) for dQ.
  auto form_grads = [&](int it, int stage, uint32_t phase, float(&s)[32], float(&dp)[32],
                        uint32_t(&prob)[kBlockM / 16][4], uint32_t(&grad)[kBlockM / 16][4], uint8_t* ds_tile) {
    tma::wait(&stats_full[stage], phase);
    const float* lse2 = stats + stage * 2 * kBlockM;
    wgmma_wait<0>();
    fence_registers(s);
    fence_registers(dp);
    const int m0 = row0_of(it);
    const bool mask = m0 + kBlockM > seq.len_q || n0 + kBlockN > seq.len_k ||
                      (p.causal && n0 + kBlockN - 1 > m0 + seq.len_k - seq.len_q);
    if (mask)
      probabilities_and_grads<true>(s, dp, lse2, lse2 + kBlockM, scale_log2, seq, p.causal, m0, key_row0, lane);
    else
      probabilities_and_grads<false>(s, dp, lse2, lse2 + kBlockM, scale_log2, seq, p.causal, m0, key_row0, lane);
    probabilities_to_operand<T, kBlockM>(s, prob);
    probabilities_to_operand<T, kBlockM>(dp, grad);
    const int ds_row = wg * 64 + warp_in_group * 16 + lane / 4;
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // grad[kk][j]: row + 8·(j & 1), queries 16kk + 8·(j / 2) + 2·(lane % 4)
        const int row = ds_row + 8 * (j & 1), col = 16 * kk + 8 * (j / 2) + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(ds_tile + swizzled_offset(row, col * 2)) = grad[kk][j];
      }
    fence_async_shared();
  };

  // dV += Pᵀ·dO and dK += dSᵀ·Q of the block in `stage` (no commit).
  auto issue_dkdv = [&](int stage, const uint32_t(&prob)[kBlockM / 16][4], const uint32_t(&grad)[kBlockM / 16][4]) {
    const uint8_t* q_tile = q_tiles + stage * Cfg::kQBytes;
    const uint8_t* do_tile = do_tiles + stage * Cfg::kQBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      gmma_rs<T, Cfg::kAccCols>(prob[kk], smem_descriptor(do_tile + kk * 16 * 128, kBlockM * 128), dv);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      gmma_rs<T, Cfg::kAccCols>(grad[kk], smem_descriptor(q_tile + kk * 16 * 128, kBlockM * 128), dk);
  };

  // dQ (this warpgroup's 64 rows × kDqCols columns) = dS·K from the dSᵀ rows in `ds_tile` (no commit).
  auto issue_dq = [&](const uint8_t* ds_tile, float(&dq)[Cfg::kDqCols / 2]) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kDqKeys / 16; ++kk) {
      const int key = dq_key0 + 16 * kk;
      gmma_ss_mn<T, Cfg::kDqCols>(smem_descriptor(ds_tile + key * 128, kBlockN * 128),
                                  smem_descriptor(k_tile + (dq_col0 / 64) * kBlockN * 128 + key * 128, kBlockN * 128),
                                  dq, kk > 0);
    }
  };

  // dQ rows (queries) 16·warp + lane/4 (+8), columns dq_col0 + 8c + 2·(lane % 4), added into
  // the workspace by float atomics.
  auto add_dq = [&](int head, int m0, const float(&dq)[Cfg::kDqCols / 2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = m0 + warp_in_group * 16 + lane / 4 + 8 * r;
      if (q >= seq.len_q) continue;
      float* dst = args.ws.dq + row_index(p, seq.batch, head, seq.q_start + q) * D + dq_col0 + 2 * (lane % 4);
#pragma unroll
      for (int c = 0; c < Cfg::kDqCols / 8; ++c)
        atomicAdd(reinterpret_cast<float2*>(dst + 8 * c), make_float2(dq[4 * c + 2 * r], dq[4 * c + 2 * r + 1]));
    }
  };

  if constexpr (kSplit) {
    // Per query block: warpgroup 0 Sᵀ = K·Qᵀ, warpgroup 1 dPᵀ = V·dOᵀ (one product each, the
    // operands picked by warpgroup so that no wgmma sits under a branch); warpgroup 0 forms Pᵀ
    // and stores it; barrier; both issue dV += Pᵀ·dO on their columns while warpgroup 1 forms
    // dSᵀ from dPᵀ and the stored Pᵀ; barrier; both issue dK += dSᵀ·Q and dQ = dS·K on their
    // columns. Pᵀ and dSᵀ are double-buffered: a buffer is rewritten two blocks later, after
    // both warpgroups have passed a barrier that follows their waits on its readers.
    if (iterations > 0) tma::wait(kv_full, 0);
    const uint8_t* score_rows = wg == 0 ? k_tile : v_tile;
    // acc (64 keys × this warpgroup's 128 columns) += the Pᵀ / dSᵀ rows of `rows` times the
    // same columns of the dO / Q tile `operand`, over the block's 64 queries (no commit).
    auto issue_column_product = [&](const uint8_t* rows, const uint8_t* operand, float(&acc)[Cfg::kAccCols / 2]) {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        gmma_ss_k_mn<T, Cfg::kAccCols>(
            smem_descriptor(rows + kk * 32, 16),
            smem_descriptor(operand + (acc_col0 / 64) * kBlockM * 128 + kk * 16 * 128, kBlockM * 128), acc);
    };
    const int pair_row = warp_in_group * 16 + lane / 4;  // the fragment's key rows in the Pᵀ / dSᵀ tiles
    for (int it = 0; it < iterations; ++it) {
      const int m0 = row0_of(it);
      const int stage = it % kStages;
      const uint32_t phase = (it / kStages) & 1;
      uint8_t* p_tile = p_tiles + (it % 2) * Cfg::kDsBytes;
      uint8_t* ds_tile = ds_tiles + (it % 2) * Cfg::kDsBytes;
      const uint8_t* q_tile = q_tiles + stage * Cfg::kQBytes;
      const uint8_t* do_tile = do_tiles + stage * Cfg::kQBytes;
      const float* lse2 = stats + stage * 2 * kBlockM;
      const bool mask = m0 + kBlockM > seq.len_q || n0 + kBlockN > seq.len_k ||
                        (p.causal && n0 + kBlockN - 1 > m0 + seq.len_k - seq.len_q);

      float acc[32];  // warpgroup 0: Sᵀ, then Pᵀ; warpgroup 1: dPᵀ, then dSᵀ
      tma::wait(wg == 0 ? &q_full[stage] : &do_full[stage], phase);
      wgmma_fence();
      issue_score_product(score_rows, wg == 0 ? q_tile : do_tile, acc);
      wgmma_commit();
      tma::wait(&stats_full[stage], phase);
      if (wg == 1) tma::wait(&q_full[stage], phase);  // Q for dK (warpgroup 0 waited on it for Sᵀ)
      if (wg == 0) tma::wait(&do_full[stage], phase);  // dO for dV
      wgmma_wait<0>();
      fence_registers(acc);
      auto tile_pair = [&](uint8_t* tile, int i) {  // elements i, i + 1 of the fragment in a Pᵀ / dSᵀ tile
        return reinterpret_cast<uint32_t*>(tile + swizzled_offset(pair_row + fragment_row(i), fragment_column(i, lane) * 2));
      };
      if (wg == 0) {
        if (mask)
          probabilities<true>(acc, lse2, scale_log2, seq, p.causal, m0, key_row0, lane);
        else
          probabilities<false>(acc, lse2, scale_log2, seq, p.causal, m0, key_row0, lane);
#pragma unroll
        for (int i = 0; i < 32; i += 2) *tile_pair(p_tile, i) = pack2<T>(acc[i], acc[i + 1]);
        fence_async_shared();
      }
      consumer_barrier();  // Pᵀ in shared memory

      wgmma_fence();
      issue_column_product(p_tile, do_tile, dv);
      wgmma_commit();
      if (wg == 1) {
        uint32_t prob[16];
#pragma unroll
        for (int i = 0; i < 32; i += 2) prob[i / 2] = *tile_pair(p_tile, i);
        const float* delta = lse2 + kBlockM;
        if (mask)
          grads<T, true>(acc, prob, delta, lane);
        else
          grads<T, false>(acc, prob, delta, lane);
#pragma unroll
        for (int i = 0; i < 32; i += 2) *tile_pair(ds_tile, i) = pack2<T>(acc[i], acc[i + 1]);
        fence_async_shared();
      }
      consumer_barrier();  // dSᵀ in shared memory

      float dq[Cfg::kDqCols / 2];
      wgmma_fence();
      issue_column_product(ds_tile, q_tile, dk);
      issue_dq(ds_tile, dq);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
      fence_registers(dq);
      tma::arrive(&stage_empty[stage]);  // every consumer thread, after its last read of the stats
      if constexpr (Cfg::kReduceDq) {
        // Into this warpgroup's halves of the stage's Q and dO tiles, read by nobody else
        // after the dSᵀ barrier: rows 16·warp + lane/4 (+8), columns 8c + 2·(lane % 4) of
        // its 128, i.e. box c / 4, bytes 32·(c % 4) + 8·(lane % 4) of the row.
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int c = 0; c < Cfg::kDqCols / 8; ++c)
            *reinterpret_cast<float2*>(dq_box(stage, wg, c / 4) +
                                       swizzled_offset(pair_row + 8 * r, 32 * (c % 4) + 8 * (lane % 4))) =
                make_float2(dq[4 * c + 2 * r], dq[4 * c + 2 * r + 1]);
        fence_async_shared();  // the generic stores, before the async proxy's reads
        tma::arrive(&dq_full[2 * stage + wg]);
      } else {
        add_dq(head_of(it), m0, dq);
      }
    }
  } else if constexpr (!kTurns) {
    if (iterations > 0) tma::wait(kv_full, 0);
    for (int it = 0; it < iterations; ++it) {
      const int head = head_of(it);
      const int m0 = row0_of(it);
      const int stage = it % kStages;
      const uint32_t phase = (it / kStages) & 1;
      uint8_t* ds_tile = ds_tiles + (it % 2) * Cfg::kDsBytes;

      float s[32], dp[32];
      issue_scores(stage, phase, s, dp);
      uint32_t prob[kBlockM / 16][4], grad[kBlockM / 16][4];
      form_grads(it, stage, phase, s, dp, prob, grad, ds_tile);
      issue_dkdv(stage, prob, grad);
      wgmma_commit();

      consumer_barrier();  // every warp's dSᵀ rows are in shared memory
      float dq[32];
      issue_dq(ds_tile, dq);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
      fence_registers(dq);
      fence_registers(prob);
      fence_registers(grad);
      // Every consumer thread arrives: each has read the stage's lse2 and delta itself, and an
      // arrival by one lane after __syncwarp does not order the other lanes' reads before the
      // producer's next writes to the stage.
      tma::arrive(&stage_empty[stage]);
      add_dq(head, m0, dq);
    }
  } else if (iterations > 0) {
    // Turns: warpgroup w's turn k (k = 1 … n) issues dV, dK of block k − 1 and dQ of block
    // k − 2; turn n + 1 the last dQ. The turns alternate 0, 1, 0, 1, …, so the other
    // warpgroup's dSᵀ(k − 2) rows (written before its turn k − 1) are in shared memory
    // before this warpgroup's turn k reads them; Sᵀ, dPᵀ of block k are issued after turn
    // k's wait, outside the turns, and this warpgroup's exp/dSᵀ pass runs while the other
    // warpgroup's products occupy the tensor cores.
    const int turn = kBackwardTurnBarrier + wg, other_turn = kBackwardTurnBarrier + 1 - wg;
    const int n = iterations;
    // Stages this warpgroup's dQ share of block j for the producer's tensor reduce-adds:
    // rows 16·warp + lane/4 (+8), columns 8c + 2·(lane % 4) of its 64, i.e. box c / 4,
    // bytes 32·(c % 4) + 8·(lane % 4) of the row.
    // Two steps: the stores right after the turn's wait, the fence and arrival only after the
    // next Sᵀ/dPᵀ products are issued, so the fence's wait for the stores is off the chain.
    uint8_t* staged = dq_staging + wg * 2 * Cfg::kDqBoxBytes;
    auto store_dq = [&](int j, const float(&dq)[32]) {
      tma::wait(&dq_empty[wg], (j & 1) ^ 1);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = warp_in_group * 16 + lane / 4 + 8 * r;
#pragma unroll
        for (int c = 0; c < 8; ++c)
          *reinterpret_cast<float2*>(staged + (c / 4) * Cfg::kDqBoxBytes +
                                     swizzled_offset(row, 32 * (c % 4) + 8 * (lane % 4))) =
              make_float2(dq[4 * c + 2 * r], dq[4 * c + 2 * r + 1]);
      }
    };
    auto publish_dq = [&] {
      fence_async_shared();  // the generic stores, before the async proxy's reads
      tma::arrive(&dq_full[wg]);
    };

    tma::wait(kv_full, 0);
    if (wg == 1) named_barrier_arrive(turn - 1, 256);  // warpgroup 0 takes the first turn
#pragma unroll 1
    for (int k = 0; k < n; ++k) {
      uint32_t prob[kBlockM / 16][4], grad[kBlockM / 16][4];
      {
        float s[32], dp[32];
        issue_scores(k % kStages, (k / kStages) & 1, s, dp);
        if (k > 1) publish_dq();  // dQ of block k − 2, stored at the end of the previous pass
        form_grads(k, k % kStages, (k / kStages) & 1, s, dp, prob, grad,
                   ds_tiles + (k % Cfg::kDsBuffers) * Cfg::kDsBytes);
      }
      named_barrier_sync(turn, 256);  // turn k + 1: dV, dK of block k, dQ of block k − 1
      // At k = 0 the dQ product reads dSᵀ buffer kDsBuffers − 1, not written before block
      // kDsBuffers − 1, and its result is dropped: one product per CTA, so that no wgmma
      // sits under a condition (ptxas would serialize them).
      float dq[32];
      issue_dkdv(k % kStages, prob, grad);
      issue_dq(ds_tiles + ((k + Cfg::kDsBuffers - 1) % Cfg::kDsBuffers) * Cfg::kDsBytes, dq);
      wgmma_commit();
      named_barrier_arrive(other_turn, 256);
      wgmma_wait<0>();
      fence_registers(dv);
      fence_registers(dk);
      fence_registers(dq);
      fence_registers(prob);
      fence_registers(grad);
      tma::arrive(&stage_empty[k % kStages]);  // Q, dO, lse2 and delta of block k all read
      if (k > 0) store_dq(k - 1, dq);
    }
    if (n > 1) publish_dq();
    // Turn n + 1: dQ of the last block. Warpgroup 1 passes no turn after it (warpgroup 0
    // takes none), so both turn barriers end complete.
    named_barrier_sync(turn, 256);
    float dq[32];
    wgmma_fence();
    issue_dq(ds_tiles + ((n - 1) % Cfg::kDsBuffers) * Cfg::kDsBytes, dq);
    wgmma_commit();
    if (wg == 0) named_barrier_arrive(other_turn, 256);
    wgmma_wait<0>();
    fence_registers(dq);
    store_dq(n - 1, dq);
    publish_dq();
  }

  // dK = scale · dSᵀ·Q and dV, rows below the sequence end (zeros where no query saw the key),
  // through shared memory: the K and V tiles are free once both warpgroups' last products
  // are done. Each warp stages its 16 key rows (128-byte swizzle, as the tiles are laid out:
  // conflict-free 4-byte stores; split: its half of their columns) and reads whole rows back
  // as 16-byte pieces, so the global stores are 4x fewer and fill their sectors.
  consumer_barrier();
  const int tile_row0 = key0 + warp_in_group * 16;  // this warp's rows of the tiles
  auto stage_rows = [&](uint8_t* tile, const float(&acc)[Cfg::kAccCols / 2], float factor) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < Cfg::kAccCols / 8; ++c) {
        const int row = tile_row0 + lane / 4 + 8 * r, col = acc_col0 + 8 * c + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(tile + (col / 64) * kBlockN * 128 + swizzled_offset(row, (col % 64) * 2)) =
            pack2<T>(acc[4 * c + 2 * r] * factor, acc[4 * c + 2 * r + 1] * factor);
      }
  };
  stage_rows(k_tile, dk, p.scale);
  stage_rows(v_tile, dv, 1.f);
  // The staged tiles out by tensor copies, one thread, where the key block's rows all belong
  // to its sequence (or the tensor's end clips them).
  if (args.staged_store && (p.cu_seqlens_k == nullptr || n0 + kBlockN <= seq.len_k)) {
    fence_async_shared();
    consumer_barrier();
    if (threadIdx.x == 128) {
      const int k_row = static_cast<int>(seq.k_start) + n0;
#pragma unroll
      for (int c = 0; c < Cfg::kChunks; ++c) {
        tma::store_box(args.dk_map, k_tile + c * kBlockN * 128, 64 * c, k_row, kv_head, seq.batch);
        tma::store_box(args.dv_map, v_tile + c * kBlockN * 128, 64 * c, k_row, kv_head, seq.batch);
      }
      tma::bulk_commit();
      tma::bulk_wait_read();
    }
    if constexpr (kPairs) cluster_sync<false>();
    return;
  }
  if constexpr (kSplit)
    consumer_barrier();  // a row's two halves come from two warps
  else
    __syncwarp();  // the warp stores the rows it staged
  constexpr int kStoreRows = kBlockN / 8;     // rows each consumer warp stores
  constexpr int kPieces = D / 8;              // 16-byte pieces per row
  constexpr int kRowsPerPass = 32 / kPieces;  // rows one warp instruction covers
  const int store_row0 = kSplit ? (warpgroup - 1) * 4 * kStoreRows + warp_in_group * kStoreRows : tile_row0;
  const int piece = lane % kPieces;
  auto store_row = [&](const AttentionView& out, int64_t k_row, const uint8_t* tile, uint32_t offset) {
    T* dst = static_cast<T*>(out.data) + seq.batch * out.stride_batch + k_row * out.stride_row +
             kv_head * out.stride_head + 8 * piece;
    const uint4 v = *reinterpret_cast<const uint4*>(tile + offset);
    if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
      *reinterpret_cast<uint4*>(dst) = v;
    } else {  // strides that are not multiples of 8 elements: 4-byte stores, as the rows allow
      uint32_t* d = reinterpret_cast<uint32_t*>(dst);
      d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
    }
  };
#pragma unroll
  for (int pass = 0; pass < kStoreRows / kRowsPerPass; ++pass) {
    const int row = store_row0 + pass * kRowsPerPass + lane / kPieces;
    if (n0 + row >= seq.len_k) continue;
    const int64_t k_row = seq.k_start + n0 + row;
    const uint32_t offset = (piece / 8) * kBlockN * 128 + swizzled_offset(row, (piece % 8) * 16);
    store_row(bp.dk, k_row, k_tile, offset);
    store_row(bp.dv, k_row, v_tile, offset);
  }
  if constexpr (kPairs) cluster_sync<false>();
}

// --- launcher --------------------------------------------------------------------------

// The sectioned grid (attention_backward_sections) where it measured faster on the H100 (NOTES.md,
// "The causal forward's tiles launched longest first across pairs"): 16–64 key blocks a sequence,
// 32–64 at D = 64 (+1.0–3.7 %); it lost 1.5–2 % at 8 key blocks (D 128 S1024) and at D 64 S2048
// (16), and 0.2 % at 128 (D 128 S16384).
template <class T, int D, AttentionBackwardSchedule kSchedule, bool kPairs = false, bool kOrdered = false>
void launch_backward_schedule(const AttentionBackwardParams& bp) {
  using Cfg = BackwardSm90Config<T, D, kSchedule, kPairs>;
  const AttentionParams& p = bp.fwd;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  const int64_t rows = batch * p.Hq * p.rows_q;
  if (rows == 0) return;

  // Deterministic (kOrdered, which launch_backward takes for it): dQ's adds ordered by locks.
  // One lock per (sequence, query head, query block).
  const int lock_blocks = static_cast<int>((p.max_seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM);
  const int64_t locks = kOrdered ? p.num_sequences * p.Hq * lock_blocks : 0;
  const int dq_width = kOrdered && D == 64 ? 2 * D : D;

  // Stream-ordered scratch: freed on the same stream once the postprocess has read it.
  const size_t scratch_bytes = (workspace_floats(p, dq_width) + locks) * sizeof(float);
  void* scratch = stream_scratch(scratch_bytes, stream, "attention dQ workspace");
  Workspace ws;
  ws.dq = static_cast<float*>(scratch);
  ws.dq_width = dq_width;
  ws.lse2 = ws.dq + rows * dq_width;
  ws.delta = ws.lse2 + rows;
  if constexpr (kOrdered) {
    ws.locks = reinterpret_cast<int*>(ws.delta + rows);
    ws.lock_blocks = lock_blocks;
    check(cudaMemsetAsync(ws.locks, 0, locks * sizeof(int), stream), "cudaMemsetAsync(attention dQ locks)");
    // Rotated walks wait on CTAs of either side, so all key blocks of a sequence must be
    // resident at once: one CTA an SM.
    ws.rotated = !p.causal && (p.max_seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN <= multiprocessor_count();
  }

  constexpr int kPerBlock = 256 / (D / 8);  // query rows per 256-thread block
  const unsigned row_blocks = static_cast<unsigned>((rows + kPerBlock - 1) / kPerBlock);
  preprocess_kernel<T, D><<<row_blocks, 256, 0, stream>>>(bp, ws, rows);
  check_launch("attention backward preprocess");

  BackwardSm90Args args;
  args.q_map = tensor_map<T>(p.q, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.do_map = tensor_map<T>(bp.dout, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.k_map = tensor_map<T>(p.k, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.v_map = tensor_map<T>(p.v, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.bp = bp;
  args.ws = ws;
  if constexpr (Cfg::kReduceDq) args.dq_map = dq_workspace_map(ws.dq, dq_width, p, batch);
  args.staged_store = attention_backward_staged_store() && copy_aligned(bp.dk) && copy_aligned(bp.dv);
  if (args.staged_store) {
    args.dk_map = tensor_map<T>(bp.dk, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
    args.dv_map = tensor_map<T>(bp.dv, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  }
  const auto kernel = dkdv_dq_kernel<T, D, kSchedule, kPairs, kOrdered>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention backward sm90)");
  const int64_t key_blocks = (p.max_seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  dim3 grid(static_cast<unsigned>(key_blocks), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.num_sequences));
  if (!kOrdered && !kPairs && p.causal && attention_backward_sections() && key_blocks <= 64 &&
      key_blocks >= (D == 64 ? 32 : 16)) {
    // Sections whose Q and dO (every query head of the group) take about 16 MB.
    constexpr int64_t kSectionBytes = 16 << 20;
    const int64_t pairs = p.Hkv * p.num_sequences;
    const int64_t pair_bytes = std::max<int64_t>(2 * p.max_seqlen_q * D * (p.Hq / p.Hkv) * int64_t(sizeof(T)), 1);
    args.section_pairs = static_cast<int>(std::clamp<int64_t>(kSectionBytes / pair_bytes, 1, pairs));
    grid = dim3(static_cast<unsigned>(key_blocks * pairs), 1, 1);
  }
  if constexpr (kPairs) {  // clusters of two CTAs along the key blocks
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(Cfg::kThreads);
    config.dynamicSmemBytes = Cfg::kSmemBytes;
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    check(cudaLaunchKernelEx(&config, kernel, args), "cudaLaunchKernelEx(attention backward dK, dV, dQ, pairs)");
  } else {
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  }
  check_launch("attention backward dK, dV, dQ");

  postprocess_kernel<T, D><<<row_blocks, 256, 0, stream>>>(bp, ws, rows);
  check_launch("attention backward postprocess");
  check(cudaFreeAsync(scratch, stream), "cudaFreeAsync(attention dQ)");
}

// The schedule of attention_backward_schedule() (params.hpp); at D = 256 `pingpong` is the
// dQ reduce through the stage without turns (BackwardSm90Config::kTurns).
// Key-block pairs (attention_backward_key_pairs(), D = 256 only) where every pair has both
// its key blocks inside every sequence: no varlen, an even number of key blocks.
// Deterministic: pingpong without pairs, its reduce-adds in order.
template <class T, int D>
void launch_backward(const AttentionBackwardParams& bp) {
  if (bp.deterministic) return launch_backward_schedule<T, D, AttentionBackwardSchedule::pingpong, false, true>(bp);
  const AttentionParams& p = bp.fwd;
  const int64_t key_blocks = (p.max_seqlen_k + 63) / 64;
  const bool pairs = D == 256 && attention_backward_key_pairs() && !p.cu_seqlens_k && key_blocks > 0 &&
                     key_blocks % 2 == 0 && key_blocks == (p.rows_k + 63) / 64;
  if (attention_backward_schedule() == AttentionBackwardSchedule::pingpong) {
    if constexpr (D == 256)
      if (pairs) return launch_backward_schedule<T, D, AttentionBackwardSchedule::pingpong, true>(bp);
    launch_backward_schedule<T, D, AttentionBackwardSchedule::pingpong>(bp);
  } else
    launch_backward_schedule<T, D, AttentionBackwardSchedule::standard>(bp);
}

}  // namespace seqmix::cuda::attn::sm90

namespace seqmix::cuda::attn {

// What attention_backward launches: the Hopper kernel, or at D <= 128 for `deterministic`
// under AttentionDeterministicBackward::two_kernel the kernels of backward.cuh.
template <class T, int D>
void launch_attention_backward(const AttentionBackwardParams& bp) {
  if constexpr (D <= 128)
    if (bp.deterministic && attention_deterministic_backward() == AttentionDeterministicBackward::two_kernel)
      return launch_backward<T, D>(bp);
  sm90::launch_backward<T, D>(bp);
}

}  // namespace seqmix::cuda::attn
