// Attention in the FlashAttention form, float32, as the GPU kernels compute it:
//   forward:  per (sequence, query head, tile of 64 queries), walk the keys in tiles of
//             64 keeping a running row max m and sum l; on a new max the accumulator and
//             l are rescaled by exp(m_old − m_new). O = acc / l, LSE = m + log l.
//   backward: per (sequence, kv head), walk the key tiles; for every query tile of the
//             group's query heads recompute P = exp(S − LSE), then
//             dV += Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − Δ),  dQ += scale·dS K,  dK += scale·dSᵀ Q,
//             with Δ_i = rowsum(dO ⊙ O)_i − dLSE_i computed once per row first.
// A backward work item owns its kv head's dk, dv and its query heads' dq, so GQA
// groups never race and the result does not depend on the thread count.
#include <cmath>
#include <limits>

#include "core/parallel.hpp"
#include "cpu/attention.hpp"

namespace seqmix::cpu {
namespace {

constexpr int64_t kTile = 64;  // queries per query tile and keys per key tile
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

using Buffer = std::vector<float>;

float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// A tile of `rows` queries from i0 (query head h) against `cols` keys from j0.
struct Tile {
  const AttentionSequence& s;
  int64_t h, i0, rows, j0, cols;
};

int64_t tile_rows(int64_t start, int64_t length) { return std::min(kTile, length - start); }

// S[r·kTile + c] = scale·q_{i0+r}·k_{j0+c}, or −inf where the causal mask hides the key.
void scores(const AttentionProblem& p, const AttentionBuffers<float>& x, const Tile& t, Buffer& S) {
  const float scale = static_cast<float>(p.scale);
  const int64_t g = p.kv_head(t.h);
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t visible = p.visible_keys(t.s, t.i0 + r);
    const float* q = &x.q[p.q_at(t.s, t.i0 + r, t.h)];
    for (int64_t c = 0; c < t.cols; ++c)
      S[r * kTile + c] = t.j0 + c < visible ? scale * dot(q, &x.k[p.k_at(t.s, t.j0 + c, g)], p.D) : kMinusInf;
  }
}

// The keys a query tile sees at all: those of its last (most-seeing) row.
int64_t tile_key_end(const AttentionProblem& p, const AttentionSequence& s, int64_t i0, int64_t rows) {
  return p.visible_keys(s, i0 + rows - 1);
}

struct QueryTile {
  int64_t sequence, h, i0;
};

void forward_tile(const AttentionProblem& p, const AttentionBuffers<float>& x, const QueryTile& item, Buffer& out,
                  Buffer& lse) {
  const AttentionSequence& s = p.sequences[item.sequence];
  const int64_t h = item.h, g = p.kv_head(h), i0 = item.i0, rows = tile_rows(i0, s.q_len);
  Buffer S(kTile * kTile), acc(rows * p.Dv, 0.0f), m(rows, kMinusInf), l(rows, 0.0f);
  const int64_t key_end = tile_key_end(p, s, i0, rows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    const Tile t{s, h, i0, rows, j0, tile_rows(j0, key_end)};
    scores(p, x, t, S);
    for (int64_t r = 0; r < rows; ++r) {
      float m_new = m[r];
      for (int64_t c = 0; c < t.cols; ++c) m_new = std::max(m_new, S[r * kTile + c]);
      if (m_new == kMinusInf) continue;  // no key seen yet: nothing to add, and −inf − −inf is NaN
      const float rescale = std::exp(m[r] - m_new);  // 0 on the first keys (m = −inf)
      float* a = &acc[r * p.Dv];
      for (int64_t e = 0; e < p.Dv; ++e) a[e] *= rescale;
      l[r] *= rescale;
      for (int64_t c = 0; c < t.cols; ++c) {
        const float prob = std::exp(S[r * kTile + c] - m_new);
        l[r] += prob;
        const float* v = &x.v[p.v_at(s, j0 + c, g)];
        for (int64_t e = 0; e < p.Dv; ++e) a[e] += prob * v[e];
      }
      m[r] = m_new;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = l[r] == 0.0f;  // the row saw no key
    float* o = &out[p.o_at(s, i0 + r, h)];
    for (int64_t e = 0; e < p.Dv; ++e) o[e] = empty ? 0.0f : acc[r * p.Dv + e] / l[r];
    lse[p.lse_index(s, h, i0 + r)] = empty ? kMinusInf : m[r] + std::log(l[r]);
  }
}

// Every key tile × (query head of the group, query tile) pair of one (sequence, kv head).
void backward_kv_head(const AttentionProblem& p, const AttentionBuffers<float>& x, const Buffer& out,
                      const Buffer& lse, const Buffer& dout, const Buffer& d_lse, const AttentionSequence& s,
                      int64_t g, Buffer& dq, Buffer& dk, Buffer& dv) {
  const float scale = static_cast<float>(p.scale);
  const int64_t h_first = g * p.group(), group = p.group();
  // Δ_i = rowsum(dO ⊙ O)_i − dLSE_i for each query head of the group.
  Buffer delta(group * s.q_len);
  for (int64_t hh = 0; hh < group; ++hh)
    for (int64_t i = 0; i < s.q_len; ++i) {
      const int64_t h = h_first + hh;
      delta[hh * s.q_len + i] = dot(&dout[p.o_at(s, i, h)], &out[p.o_at(s, i, h)], p.Dv) - d_lse[p.lse_index(s, h, i)];
    }
  Buffer S(kTile * kTile), dk_tile(kTile * p.D), dv_tile(kTile * p.Dv);
  for (int64_t j0 = 0; j0 < s.k_len; j0 += kTile) {
    const int64_t cols = tile_rows(j0, s.k_len);
    std::fill(dk_tile.begin(), dk_tile.end(), 0.0f);
    std::fill(dv_tile.begin(), dv_tile.end(), 0.0f);
    for (int64_t hh = 0; hh < group; ++hh) {
      const int64_t h = h_first + hh;
      for (int64_t i0 = 0; i0 < s.q_len; i0 += kTile) {
        const Tile t{s, h, i0, tile_rows(i0, s.q_len), j0, cols};
        if (tile_key_end(p, s, i0, t.rows) <= j0) continue;  // the causal mask hides this key tile
        scores(p, x, t, S);
        for (int64_t r = 0; r < t.rows; ++r) {
          const float row_lse = lse[p.lse_index(s, h, i0 + r)];
          if (row_lse == kMinusInf) continue;  // a row that sees no key has P = 0
          const float* dO = &dout[p.o_at(s, i0 + r, h)];
          const float* q = &x.q[p.q_at(s, i0 + r, h)];
          float* dq_row = &dq[p.q_at(s, i0 + r, h)];
          for (int64_t c = 0; c < cols; ++c) {
            const float prob = std::exp(S[r * kTile + c] - row_lse);  // masked keys: exp(−inf) = 0
            const float dP = dot(dO, &x.v[p.v_at(s, j0 + c, g)], p.Dv);
            const float dS = prob * (dP - delta[hh * s.q_len + i0 + r]);
            for (int64_t e = 0; e < p.Dv; ++e) dv_tile[c * p.Dv + e] += prob * dO[e];
            const float* k = &x.k[p.k_at(s, j0 + c, g)];
            for (int64_t d = 0; d < p.D; ++d) {
              dq_row[d] += scale * dS * k[d];
              dk_tile[c * p.D + d] += scale * dS * q[d];
            }
          }
        }
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      std::copy_n(&dk_tile[c * p.D], p.D, &dk[p.k_at(s, j0 + c, g)]);
      std::copy_n(&dv_tile[c * p.Dv], p.Dv, &dv[p.v_at(s, j0 + c, g)]);
    }
  }
}

}  // namespace

void flash_forward(const AttentionProblem& p, const AttentionBuffers<float>& x, Buffer& out, Buffer& lse) {
  out.assign(p.rows_q * p.Hq * p.Dv, 0.0f);
  lse.assign(p.rows_q * p.Hq, 0.0f);
  std::vector<QueryTile> items;
  for (int64_t n = 0; n < static_cast<int64_t>(p.sequences.size()); ++n)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i0 = 0; i0 < p.sequences[n].q_len; i0 += kTile) items.push_back({n, h, i0});
  core::parallel_for(static_cast<int64_t>(items.size()),
                     [&](int64_t i) { forward_tile(p, x, items[i], out, lse); });
}

void flash_backward(const AttentionProblem& p, const AttentionBuffers<float>& x, const Buffer& out,
                    const Buffer& lse, const Buffer& dout, const Buffer& d_lse, Buffer& dq, Buffer& dk,
                    Buffer& dv) {
  dq.assign(x.q.size(), 0.0f);  // accumulated over key tiles, in float32
  dk.assign(x.k.size(), 0.0f);
  dv.assign(x.v.size(), 0.0f);
  core::parallel_for(static_cast<int64_t>(p.sequences.size()) * p.Hkv, [&](int64_t item) {
    backward_kv_head(p, x, out, lse, dout, d_lse, p.sequences[item / p.Hkv], item % p.Hkv, dq, dk, dv);
  });
}

}  // namespace seqmix::cpu
