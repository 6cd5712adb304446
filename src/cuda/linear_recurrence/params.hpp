// Host-side description of a dense linear recurrence launch: plain pointers, sizes and
// the resolved method, no CUDA types, so src/core can fill it in without CUDA headers.
#pragma once

#include <cstdint>

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

// The chunked method runs on tensor cores (chunk_transfer.cuh: each chunk's transfer
// matrix by mma.sync, a pass over chunk summaries, then every chunk re-walked from its
// true start state) for padded state sizes up to 64 and at most 8 state columns; other
// shapes, or all of them with this switch off, take the float-copy composition path.
inline constexpr bool kChunkedOnTensorCores = true;
inline constexpr bool chunked_on_tensor_cores(int64_t n, int64_t m) {
  return kChunkedOnTensorCores && n <= 64 && m <= 8;
}

// Floats of workspace one call uses (0: none). The parallel methods keep float copies of
// the maps they compose ([G, T, n, n] transitions, [G, T, n, m] offsets that become the
// states in place); the backward also keeps the recomputed forward states. The chunked
// method on tensor cores keeps only each chunk's summary (transfer matrix, offset) and
// start state per chain, plus the two state arrays of the backward.
inline constexpr int64_t linear_recurrence_workspace_floats(int64_t G, int64_t T, int64_t n, int64_t m,
                                                            RecurrenceMethod method, int64_t chunk_size,
                                                            bool backward) {
  const int64_t maps = G * T * n * n, states = G * T * n * m, start = G * n * m;
  const int64_t outputs = (backward ? 2 : 1) * states;
  switch (method) {
    case RecurrenceMethod::sequential: return backward ? 2 * states : 0;
    case RecurrenceMethod::chunked: {
      const int64_t C = chunk_size > 0 ? chunk_size : default_chunk_size(G, T);
      const int64_t chunks = (T + C - 1) / C;
      const int64_t summaries = G * chunks * (n * n + 2 * n * m);  // per chain
      if (chunked_on_tensor_cores(n, m)) return backward ? 2 * (summaries + states) : summaries;
      return maps + outputs + start + G * chunks * n * m;
    }
    case RecurrenceMethod::scan: return 2 * maps + outputs + states + start;
    case RecurrenceMethod::cyclic_reduction: return maps + outputs + start;
  }
  return 0;
}

// The method "automatic" runs on a CUDA device (NOTES.md has the measurements behind it).
// The sequential method reads every transition once but walks T dependent steps, one
// block per group (× slice of 8 state columns): its time hardly depends on G until the
// blocks fill the GPU. The chunked method on tensor cores spreads each sequence over
// many SMs and reads the transitions twice, so its time grows with G: it is predicted to
// win up to about 16 groups (NOTES.md, version 3). Without tensor cores (n > 64 or more
// than 8 columns) the chunked method wins only when few blocks would run.
inline constexpr RecurrenceMethod choose_cuda_method(int64_t G, int64_t T, int64_t n, int64_t m) {
  if (T < 256) return RecurrenceMethod::sequential;
  if (chunked_on_tensor_cores(n, m)) return G <= 16 ? RecurrenceMethod::chunked : RecurrenceMethod::sequential;
  const int64_t blocks = G * (m == 1 ? 1 : (m + 7) / 8);
  return blocks >= 16 ? RecurrenceMethod::sequential : RecurrenceMethod::chunked;
}

template <RecurrenceDtype dtype>
void linear_recurrence_forward(const LinearRecurrenceParams& p);
template <RecurrenceDtype dtype>
void linear_recurrence_backward(const LinearRecurrenceParams& p);

}  // namespace seqmix::cuda
