// Host-side description of a dense linear recurrence launch: plain pointers, sizes and
// the resolved method, no CUDA types, so src/core can fill it in without CUDA headers.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace seqmix::cuda {

enum class RecurrenceDtype { bf16, f32 };

// The four methods, resolved (never "automatic" here).
enum class RecurrenceMethod { sequential, chunked, scan, cyclic_reduction };

// Every tensor is contiguous in its documented layout; dtype is that of A (and of every
// input, output and gradient), accumulation is float32.
struct LinearRecurrenceParams {
  int64_t G = 0, T = 0, n = 0, m = 0;
  RecurrenceMethod method = RecurrenceMethod::sequential;
  int64_t chunk_size = 0;  // chunked only; 0 picks one
  const void* A = nullptr;            // [G, T, n, n]
  const void* b = nullptr;            // [G, T, n, m]
  const void* initial_state = nullptr;  // [G, n, m] or nullptr (zeros)
  // Forward.
  void* h = nullptr;                  // [G, T, n, m]
  void* final_state = nullptr;        // [G, n, m] or nullptr
  // Backward.
  const void* dh = nullptr;           // [G, T, n, m]
  const void* d_final_state = nullptr;  // [G, n, m] or nullptr
  void* dA = nullptr;                 // [G, T, n, n]
  void* db = nullptr;                 // [G, T, n, m]
  void* d_initial_state = nullptr;    // [G, n, m] or nullptr
  const void* states = nullptr;       // [G, T, n, m] the forward's h, or nullptr (recomputed)
  // Float scratch of linear_recurrence_workspace_floats(...) floats, or nullptr: then the
  // launcher takes it from the stream-ordered pool of the device for the call.
  float* workspace = nullptr;
  void* stream = nullptr;
};

// The largest state size the kernels take, and the granule n must be a multiple of
// (rows are copied in 16-byte pieces of bf16).
inline constexpr int64_t kMaxRecurrenceState = 128;
inline constexpr int64_t kRecurrenceStateGranule = 8;

// Steps per chunk of the chunked method when the caller leaves it at 0: enough chunks
// to give every SM a block at a few groups (up to 1024 in all), and chunks long enough
// that the pass over chunk summaries (depth T / chunk, one group per block) stays short:
// at least 32 steps, so that at G = 1 the three passes of the tensor-core path take
// similar times (NOTES.md, version 3).
inline constexpr int64_t default_chunk_size(int64_t G, int64_t T) {
  int64_t chunk = 32;
  while (chunk < 256 && G * ((T + chunk - 1) / chunk) > 1024) chunk *= 2;
  return chunk < T ? chunk : (T > 0 ? T : 1);
}

// The same for bf16 matrix states walked whole (chunked_wide below): chunks long enough
// that G·chunks is about one wave of blocks (two an SM), up to 256 steps. On the H100
// (NOTES.md, version 18) chunks of 256 at G16 T4096 n64 m64 read 1.087–1.091 ms against
// 1.16 for 64 (a shorter pass over summaries), and 64 at G16 T1024 n32 0.129 against 0.145
// for 32 and 0.172 for 128 (fewer blocks than SMs' seats).
inline constexpr int64_t default_wide_chunk_size(int64_t G, int64_t T) {
  int64_t chunk = 32;
  while (chunk < 256 && G * ((T + chunk - 1) / chunk) > 256) chunk *= 2;
  return chunk < T ? chunk : (T > 0 ? T : 1);
}

// The chunked method runs on tensor cores (chunk_transfer.cuh: each chunk's transfer
// matrix by wgmma (N = 64) or mma.sync (N = 32), a pass over chunk summaries, then every
// chunk re-walked from its true start state) for padded state sizes up to 64 and at most
// 8 state columns; other shapes, or all of them with this switch off, take the
// float-copy composition path.
inline constexpr bool kChunkedOnTensorCores = true;
inline constexpr bool chunked_on_tensor_cores(int64_t n, int64_t m) {
  return kChunkedOnTensorCores && n <= 64 && m <= 8;
}

// The chunked method of matrix states with 8 < m ≤ 64 (a multiple of 8) and n ≤ 64: whole
// states a block on tensor cores (chunked_wide.cuh, NOTES.md version 18; f32 as three tf32
// products, version 19), with the scratch of the tensor-core path above; built with the
// CUTLASS headers only. SEQMIX_LINREC_CHUNKED_WIDE=0 sends these shapes to the float-copy
// path instead, =bf16 only bf16 ones (read at every call, so that one process can time
// both; the workspace size follows it).
inline bool chunked_wide(int64_t n, int64_t m, RecurrenceDtype dtype) {
#if defined(SEQMIX_HAS_CUTLASS)
  if (n > 64 || m <= 8 || m > 64 || m % 8 != 0) return false;
  const char* value = std::getenv("SEQMIX_LINREC_CHUNKED_WIDE");
  if (value && std::strcmp(value, "0") == 0) return false;
  return dtype == RecurrenceDtype::bf16 || !(value && std::strcmp(value, "bf16") == 0);
#else
  (void)n, (void)m, (void)dtype;
  return false;
#endif
}

// The one-pass chunked forward of a vector state (fused_chunked.cuh, NOTES.md version 7):
// its chunk length unless the caller gives one (at least kMinFusedChunk when chosen by
// the environment), and its scratch in 4-byte words: the state after every chunk as
// 8-byte (mark, value) words, and the ticket counter (one word spare to align the first
// to 8 bytes in a caller's workspace).
// The backward's two chains take chunks of kDefaultFusedChunkBackward: measured faster
// than 16 (NOTES.md, version 8), where the forward's one chain is slower with them.
inline constexpr int64_t kDefaultFusedChunk = 16;
inline constexpr int64_t kDefaultFusedChunkBackward = 32;
inline constexpr int64_t kMinFusedChunk = 8;
inline constexpr int64_t fused_chunk_scratch_floats(int64_t G, int64_t T, int64_t n, int64_t chunk) {
  const int64_t chunks = (T + chunk - 1) / chunk;
  return G * chunks * 2 * n + 2;
}

// Floats of workspace one call uses (0: none). The parallel methods keep float copies of
// the maps they compose ([G, T, n, n] transitions, [G, T, n, m] offsets that become the
// states in place); the backward also keeps the recomputed forward states. The chunked
// method on tensor cores keeps only each chunk's summary (transfer matrix, offset) and
// start state per chain, plus the two state arrays of the backward.
inline int64_t linear_recurrence_workspace_floats(int64_t G, int64_t T, int64_t n, int64_t m, RecurrenceDtype dtype,
                                                  RecurrenceMethod method, int64_t chunk_size, bool backward) {
  const int64_t maps = G * T * n * n, states = G * T * n * m, start = G * n * m;
  const int64_t outputs = (backward ? 2 : 1) * states;
  switch (method) {
    case RecurrenceMethod::sequential: return backward ? 2 * states : 0;
    case RecurrenceMethod::chunked: {
      const int64_t C = chunk_size > 0               ? chunk_size
                        : chunked_wide(n, m, dtype) ? default_wide_chunk_size(G, T)
                                                    : default_chunk_size(G, T);
      const int64_t chunks = (T + C - 1) / C;
      const int64_t summaries = G * chunks * (n * n + 2 * n * m);  // per chain
      if (chunked_on_tensor_cores(n, m) || chunked_wide(n, m, dtype)) {
        // m = 1 may take the one-pass chains, whose chunks are C or at least kMinFusedChunk.
        const int64_t fused = m == 1 ? fused_chunk_scratch_floats(G, T, n, C < kMinFusedChunk ? C : kMinFusedChunk) : 0;
        const int64_t per_chain = summaries > fused ? summaries : fused;
        return backward ? 2 * (per_chain + states) : per_chain;
      }
      return maps + outputs + start + G * chunks * n * m;
    }
    case RecurrenceMethod::scan: return 2 * maps + outputs + states + start;
    case RecurrenceMethod::cyclic_reduction: return maps + outputs + start;
  }
  return 0;
}

// The method "automatic" runs on a CUDA device: the fastest forward measured on the H100
// over the grid (n 32/64/128, T 1024–8192, G 1/16/64, m 1/64, f32 and bf16;
// `python -m seqmix.bench.gpu.linear_recurrence grid`, NOTES.md). The winner is the same
// in f32 and bf16 everywhere but at 64 groups of n = 64 vector states, where the bf16
// chunked chains (half the bytes of A per product) run 2× faster than the sequential walk
// and the f32 ones 1.5× slower; where two methods were within 1% (one group, T = 8192,
// m = 64) the table keeps the one faster in both dtypes' runs. Why
// each wins: the sequential method reads A once but walks T steps, one block per group
// (× 8 state columns), so its time is flat in G until the blocks fill the chip; the
// chunked method spreads a sequence over the chip (tensor cores for n ≤ 64, m ≤ 8) and
// its time grows with G; cyclic reduction composes n×n maps in O(T) products and wins
// at one group where the chunked method has no tensor cores (n = 128 or m > 8).
struct MeasuredChoice {
  int64_t n;  // padded state size: 32, 64 or 128
  bool wide;  // more than 8 state columns (the grid's m = 64; m = 1 stands for m ≤ 8)
  RecurrenceMethod one_group, one_group_long, sixteen_groups;  // long: T > 4096
  RecurrenceMethod sixty_four_groups_f32, sixty_four_groups_bf16;
};
inline constexpr MeasuredChoice kMeasuredChoices[] = {
    // n, wide, one group, one group long, 16 groups, 64 groups f32, 64 groups bf16
    {32, false, RecurrenceMethod::chunked, RecurrenceMethod::chunked, RecurrenceMethod::chunked,
     RecurrenceMethod::chunked, RecurrenceMethod::chunked},
    {64, false, RecurrenceMethod::chunked, RecurrenceMethod::chunked, RecurrenceMethod::chunked,
     RecurrenceMethod::sequential, RecurrenceMethod::chunked},
    {128, false, RecurrenceMethod::cyclic_reduction, RecurrenceMethod::chunked, RecurrenceMethod::sequential,
     RecurrenceMethod::sequential, RecurrenceMethod::sequential},
    {32, true, RecurrenceMethod::cyclic_reduction, RecurrenceMethod::cyclic_reduction, RecurrenceMethod::sequential,
     RecurrenceMethod::sequential, RecurrenceMethod::sequential},
    {64, true, RecurrenceMethod::cyclic_reduction, RecurrenceMethod::chunked, RecurrenceMethod::sequential,
     RecurrenceMethod::sequential, RecurrenceMethod::sequential},
    {128, true, RecurrenceMethod::cyclic_reduction, RecurrenceMethod::chunked, RecurrenceMethod::sequential,
     RecurrenceMethod::sequential, RecurrenceMethod::sequential},
};

// Shapes between grid points take the nearest one (G and T on a log scale: G up to 4
// reads as 1, up to 32 as 16; T above 4096 as 8192). Crossovers inside those intervals
// are not measured: at n = 64, m = 1, T = 4096 the f32 chunked time grows about linearly
// in G (0.78 ms at G = 16, 3.0 at 64) against a flat 1.9–2.0 ms sequential walk, a
// crossover near G = 40; in bf16 (chunked 0.47 and 1.59 ms, sequential 3.2) there is none
// up to 64 groups.
// Matrix states that the chunked method walks whole on tensor cores (chunked_wide) take it
// at every grid point: bf16 2.8× the sequential walk at G16 T4096 n64 m64 and 12× at one
// group, f32 1.6× and 10× (NOTES.md, versions 18 and 19).
inline RecurrenceMethod choose_cuda_method(int64_t G, int64_t T, int64_t n, int64_t m, RecurrenceDtype dtype) {
  if (chunked_wide(n, m, dtype)) return RecurrenceMethod::chunked;
  const int64_t padded = n <= 32 ? 32 : (n <= 64 ? 64 : 128);
  for (const MeasuredChoice& c : kMeasuredChoices) {
    if (c.n != padded || c.wide != (m > 8)) continue;
    if (G <= 4) return T > 4096 ? c.one_group_long : c.one_group;
    if (G <= 32) return c.sixteen_groups;
    return dtype == RecurrenceDtype::bf16 ? c.sixty_four_groups_bf16 : c.sixty_four_groups_f32;
  }
  return RecurrenceMethod::sequential;
}

template <RecurrenceDtype dtype>
void linear_recurrence_forward(const LinearRecurrenceParams& p);
template <RecurrenceDtype dtype>
void linear_recurrence_backward(const LinearRecurrenceParams& p);

}  // namespace seqmix::cuda
