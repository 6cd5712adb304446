// Chunk pieces of the chunkwise gated linear attention (see gla_chunk.hpp).
#include "cpu/gla_chunk.hpp"

#include <algorithm>
#include <cmath>

namespace seqmix::cpu::gla {

void gemm_acc(Mat& out, const Mat& a, bool transpose_a, const Mat& b, bool transpose_b, float alpha) {
  const int64_t inner = transpose_a ? a.rows : a.cols;
  auto at = [&](int64_t i, int64_t l) { return transpose_a ? a[l][i] : a[i][l]; };
  auto bt = [&](int64_t l, int64_t j) { return transpose_b ? b[j][l] : b[l][j]; };
  for (int64_t i = 0; i < out.rows; ++i)
    for (int64_t l = 0; l < inner; ++l) {
      const float ail = alpha * at(i, l);
      for (int64_t j = 0; j < out.cols; ++j) out[i][j] += ail * bt(l, j);
    }
}

Mat slice(const Mat& m, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Mat out(r1 - r0, c1 - c0);
  for (int64_t r = r0; r < r1; ++r) std::copy(m[r] + c0, m[r] + c1, out[r - r0]);
  return out;
}

Mat slice_rows(const Mat& m, int64_t r0, int64_t r1) { return slice(m, r0, r1, 0, m.cols); }

Mat hadamard(const Mat& a, const Mat& b) {
  Mat out(a.rows, a.cols);
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = a.data[i] * b.data[i];
  return out;
}

void add_rows(Mat& out, int64_t r0, const Mat& m) {
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) out[r0 + r][c] += m[r][c];
}

Mat Chunk::decay_from_start() const {
  Mat out(b.rows, b.cols);
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = std::exp(b.data[i]);
  return out;
}

Mat Chunk::decay_to_end() const {
  Mat out(g.rows, g.cols);
  for (int64_t ch = 0; ch < g.cols; ++ch) {
    float after = 0;  // g_{j+1} + … + g_last
    for (int64_t j = g.rows - 1; j >= 0; --j) {
      out[j][ch] = std::exp(after);
      after += g[j][ch];
    }
  }
  return out;
}

Chunk load_chunk(const HeadShape& s, const HeadInputs<float>& in, int64_t start, int64_t length) {
  Chunk c{Mat(length, s.K), Mat(length, s.K), Mat(length, s.V), Mat(length, s.K), Mat(length, s.K)};
  for (int64_t i = 0; i < length; ++i) {
    const int64_t t = start + i;
    std::copy(in.q[t], in.q[t] + s.K, c.q[i]);
    std::copy(in.k[t], in.k[t] + s.K, c.k[i]);
    std::copy(in.v[t], in.v[t] + s.V, c.v[i]);
    std::copy(in.g[t], in.g[t] + s.K, c.g[i]);
    for (int64_t ch = 0; ch < s.K; ++ch) c.b[i][ch] = c.g[i][ch] + (i > 0 ? c.b[i - 1][ch] : 0.0f);
  }
  return c;
}

namespace {

// Sub-chunks I (rows) and J (columns), J entirely before I. Every pair factors through
// r, the last token of J, with both exponents ≤ 0:
//   e^{b_i − b_j} = e^{b_i − b_r} · e^{b_r − b_j},
// which turns the block into a product of two decayed operands (an MMA on the GPU).
// A factor that underflows to 0 only does so when the pair's true weight is smaller still.
struct SubChunkPair {
  int64_t i0, i1, j0, j1;
  Mat down;  // [i1 − i0, K]  e^{b_i − b_r}
  Mat up;    // [j1 − j0, K]  e^{b_r − b_j}
};

SubChunkPair make_pair(const Chunk& c, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t K = c.g.cols, r = j1 - 1;
  SubChunkPair p{i0, i1, j0, j1, Mat(i1 - i0, K), Mat(j1 - j0, K)};
  for (int64_t ch = 0; ch < K; ++ch) {
    float down = 0;  // g_{r+1} + … + g_i
    for (int64_t i = r + 1; i < i1; ++i) {
      down += c.g[i][ch];
      if (i >= i0) p.down[i - i0][ch] = std::exp(down);
    }
    float up = 0;  // g_{j+1} + … + g_r
    for (int64_t j = r; j >= j0; --j) {
      p.up[j - j0][ch] = std::exp(up);
      up += c.g[j][ch];
    }
  }
  return p;
}

// A sub-chunk [i0, i1) against itself: e^{b_i − b_j} for each pair j ≤ i, exactly (a
// shared reference point would need a positive exponent for some pairs).
struct DiagonalBlock {
  int64_t i0, i1, K;
  std::vector<float> weights;  // [n, n, K], n = i1 − i0
  float decay(int64_t i, int64_t j, int64_t ch) const {
    return weights[((i - i0) * (i1 - i0) + (j - i0)) * K + ch];
  }
};

DiagonalBlock make_diagonal(const Chunk& c, int64_t i0, int64_t i1) {
  const int64_t n = i1 - i0, K = c.g.cols;
  DiagonalBlock d{i0, i1, K, std::vector<float>(static_cast<size_t>(n * n * K), 0.0f)};
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t ch = 0; ch < K; ++ch) {
      float between = 0;  // g_{j+1} + … + g_i
      for (int64_t j = i; j >= i0; --j) {
        d.weights[((i - i0) * n + (j - i0)) * K + ch] = std::exp(between);
        between += c.g[j][ch];
      }
    }
  return d;
}

// diagonal(block) for each sub-chunk and off_diagonal(pair) for each pair of sub-chunks
// J before I.
template <class Diagonal, class OffDiagonal>
void for_each_block(const Chunk& c, const Diagonal& diagonal, const OffDiagonal& off_diagonal) {
  const int64_t L = c.length();
  for (int64_t i0 = 0; i0 < L; i0 += kSubChunk) {
    const int64_t i1 = std::min(i0 + kSubChunk, L);
    diagonal(make_diagonal(c, i0, i1));
    for (int64_t j0 = 0; j0 < i0; j0 += kSubChunk) off_diagonal(make_pair(c, i0, i1, j0, j0 + kSubChunk));
  }
}

}  // namespace

Mat causal_scores(const Chunk& c, const Mat& x, const Mat& y) {
  const int64_t L = c.length(), K = x.cols;
  Mat W(L, L);
  auto diagonal = [&](const DiagonalBlock& d) {
    for (int64_t i = d.i0; i < d.i1; ++i)
      for (int64_t j = d.i0; j <= i; ++j) {
        float sum = 0;
        for (int64_t ch = 0; ch < K; ++ch) sum += x[i][ch] * y[j][ch] * d.decay(i, j, ch);
        W[i][j] = sum;
      }
  };
  auto off_diagonal = [&](const SubChunkPair& p) {
    Mat block(p.i1 - p.i0, p.j1 - p.j0);  // (x_I ⊙ down)(y_J ⊙ up)ᵀ
    gemm_acc(block, hadamard(slice_rows(x, p.i0, p.i1), p.down), false, hadamard(slice_rows(y, p.j0, p.j1), p.up),
             true);
    for (int64_t i = p.i0; i < p.i1; ++i) std::copy(block[i - p.i0], block[i - p.i0] + block.cols, W[i] + p.j0);
  };
  for_each_block(c, diagonal, off_diagonal);
  return W;
}

Mat gather_past(const Chunk& c, const Mat& W, const Mat& y) {
  const int64_t L = c.length(), K = y.cols;
  Mat out(L, K);
  auto diagonal = [&](const DiagonalBlock& d) {
    for (int64_t i = d.i0; i < d.i1; ++i)
      for (int64_t j = d.i0; j <= i; ++j)
        for (int64_t ch = 0; ch < K; ++ch) out[i][ch] += W[i][j] * y[j][ch] * d.decay(i, j, ch);
  };
  auto off_diagonal = [&](const SubChunkPair& p) {
    Mat t(p.i1 - p.i0, K);  // down ⊙ (W_IJ · (y_J ⊙ up))
    gemm_acc(t, slice(W, p.i0, p.i1, p.j0, p.j1), false, hadamard(slice_rows(y, p.j0, p.j1), p.up), false);
    add_rows(out, p.i0, hadamard(t, p.down));
  };
  for_each_block(c, diagonal, off_diagonal);
  return out;
}

Mat gather_future(const Chunk& c, const Mat& W, const Mat& x) {
  const int64_t L = c.length(), K = x.cols;
  Mat out(L, K);
  auto diagonal = [&](const DiagonalBlock& d) {
    for (int64_t i = d.i0; i < d.i1; ++i)
      for (int64_t j = d.i0; j <= i; ++j)
        for (int64_t ch = 0; ch < K; ++ch) out[j][ch] += W[i][j] * x[i][ch] * d.decay(i, j, ch);
  };
  auto off_diagonal = [&](const SubChunkPair& p) {
    Mat t(p.j1 - p.j0, K);  // up ⊙ (W_IJᵀ · (x_I ⊙ down))
    gemm_acc(t, slice(W, p.i0, p.i1, p.j0, p.j1), true, hadamard(slice_rows(x, p.i0, p.i1), p.down), false);
    add_rows(out, p.j0, hadamard(t, p.up));
  };
  for_each_block(c, diagonal, off_diagonal);
  return out;
}

}  // namespace seqmix::cpu::gla
