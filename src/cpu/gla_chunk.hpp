// The pieces of the chunkwise form of gated linear attention: small dense matrices, one
// chunk of ≤ 64 tokens with its cumulative log decay, and the causal decay-weighted
// products inside a chunk. The GPU kernels compute the same blocks with tensor cores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/gla_head.hpp"

namespace seqmix::cpu::gla {

constexpr int64_t kChunk = 64;     // tokens per chunk: the state is carried chunk to chunk
constexpr int64_t kSubChunk = 16;  // tokens per sub-chunk: the unit of the intra-chunk blocks

// A dense row-major float matrix.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
  Mat() = default;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), data(static_cast<size_t>(r * c), 0.0f) {}
  float* operator[](int64_t r) { return data.data() + r * cols; }
  const float* operator[](int64_t r) const { return data.data() + r * cols; }
};

// out += alpha · op(a) · op(b), where op transposes when the flag is set.
void gemm_acc(Mat& out, const Mat& a, bool transpose_a, const Mat& b, bool transpose_b, float alpha = 1.0f);
// Rows [r0, r1) and columns [c0, c1) of m.
Mat slice(const Mat& m, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
Mat slice_rows(const Mat& m, int64_t r0, int64_t r1);
// Elementwise product.
Mat hadamard(const Mat& a, const Mat& b);
// out[r0 + i] += m[i] for every row i of m.
void add_rows(Mat& out, int64_t r0, const Mat& m);

// One chunk of one head, gathered into dense blocks. b is the cumulative log decay from
// the chunk's start, b[i] = g_0 + … + g_i: non-increasing and ≤ 0, so every exponent
// b[i] − b[j] with j ≤ i is ≤ 0. Differences are summed from g over the tokens between
// rather than subtracted from b: with decays near −20, b reaches −1000 in a chunk, where a
// float32 ulp (6e-5) would already be a visible error in e^{g} of neighbouring tokens.
struct Chunk {
  Mat q, k, v, g, b;  // [L, K], [L, K], [L, V], [L, K], [L, K]
  int64_t length() const { return q.rows; }
  // e^{b_i}: the decay from the chunk's start through token i.   [L, K]
  Mat decay_from_start() const;
  // e^{b_last − b_j}: the decay after token j to the chunk's end.   [L, K]
  Mat decay_to_end() const;
};

// Tokens [start, start + length) of one head.
Chunk load_chunk(const HeadShape& s, const HeadInputs<float>& in, int64_t start, int64_t length);

// The causal decay-weighted products of a chunk, for tokens j ≤ i and key channels c:
//   causal_scores:  W[i][j]  = Σ_c x[i][c]·y[j][c]·e^{b[i][c] − b[j][c]}        (0 for j > i)
//   gather_past:    out[i][c] = Σ_{j≤i} W[i][j]·y[j][c]·e^{b[i][c] − b[j][c]}
//   gather_future:  out[j][c] = Σ_{i≥j} W[i][j]·x[i][c]·e^{b[i][c] − b[j][c]}
// x, y are [L, K]; gather_* read only the causal part (j ≤ i) of W [L, L].
Mat causal_scores(const Chunk& c, const Mat& x, const Mat& y);
Mat gather_past(const Chunk& c, const Mat& W, const Mat& y);
Mat gather_future(const Chunk& c, const Mat& W, const Mat& x);

}  // namespace seqmix::cpu::gla
