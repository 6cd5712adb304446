// The float32 path of both chains, in the form the GPU kernels take: every matrix product
// is the blocked threaded GEMM of cpu/gemm.hpp, and what follows it (bias, activation,
// dtype conversion, the scatter into each segment's tensor) happens in its per-tile
// epilogue, so no [tokens, W_total] intermediate is written in the forward.
#include <vector>

#include "core/dense.hpp"
#include "core/parallel.hpp"
#include "cpu/chains.hpp"
#include "cpu/chains_math.hpp"
#include "cpu/gemm.hpp"

namespace seqmix::cpu::fast {
namespace {

using core::from_dense;
using core::to_dense;
using Matrix = MatrixView<float>;

// Calls visit(s, begin, end) for each segment s overlapping the columns [col0, col1), with
// [begin, end) the overlap (absolute column indices).
template <class Visit>
void for_each_segment_in(const ProjectionProblem& p, int64_t col0, int64_t col1, Visit visit) {
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const int64_t begin = std::max(col0, p.offsets[s]), end = std::min(col1, p.offsets[s] + p.segments[s].width);
    if (begin < end) visit(s, begin, end);
  }
}

// The projection's inputs as dense float buffers, and the GEMM operands over them.
struct ProjectionOperands {
  std::vector<float> x, weight, bias;
  ProjectionOperands(const ProjectionProblem& p, const Tensor& x_view, const Tensor& weight_view,
                     const std::optional<Tensor>& bias_view)
      : x(to_dense<float>(x_view)),
        weight(to_dense<float>(weight_view)),
        bias(core::to_dense_or_zeros<float>(bias_view, p.columns)) {}
  Matrix x_matrix(const ProjectionProblem& p) const { return Matrix::row_major(x, p.tokens, p.d); }
  Matrix weight_matrix(const ProjectionProblem& p) const { return Matrix::row_major(weight, p.columns, p.d); }
};

// The normalised, gated heads u [tokens, heads·dv] (recomputed by the backward).
std::vector<float> gated_heads(const OutputChainProblem& p, const std::vector<float>& o, const std::vector<float>& g,
                               const std::vector<float>& w) {
  std::vector<float> u(o.size());
  const float eps = static_cast<float>(p.eps);
  core::parallel_for(p.tokens * p.heads, [&](int64_t row) {
    gated_rms_row(&o[row * p.dv], &g[row * p.dv], w.data(), p.dv, eps, &u[row * p.dv]);
  });
  return u;
}

// A GEMM epilogue that stores each tile unchanged into `t` (viewed as [M, N]).
TileEpilogue<float> store_into(const Tensor& t) {
  return [&t](const Tile<float>& tile) {
    for (int64_t i = 0; i < tile.rows; ++i)
      store_row(t, tile.row0 + i, tile.col0, tile.values + i * tile.stride, tile.cols);
  };
}

}  // namespace

void projection_chain_forward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                              const std::optional<Tensor>& bias, const std::vector<Tensor>& outputs) {
  const ProjectionOperands in(p, x, weight, bias);
  gemm<float>(in.x_matrix(p), in.weight_matrix(p).transposed(), [&](const Tile<float>& tile) {
    float activated[kGemmTileCols];  // one row of one segment's part of the tile
    for_each_segment_in(p, tile.col0, tile.col0 + tile.cols, [&](size_t s, int64_t begin, int64_t end) {
      const ProjectionSegment& seg = p.segments[s];
      const float tau = static_cast<float>(seg.tau);
      for (int64_t i = 0; i < tile.rows; ++i) {
        for (int64_t c = begin; c < end; ++c)
          activated[c - begin] = activate(seg.activation, tau, tile(i, c - tile.col0) + in.bias[c]);
        store_row(outputs[s], tile.row0 + i, begin - p.offsets[s], activated, end - begin);
      }
    });
  });
}

void projection_chain_backward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                               const std::optional<Tensor>& bias, const std::vector<Tensor>& d_outputs,
                               const ProjectionChainGrads& grads) {
  const ProjectionOperands in(p, x, weight, bias);
  std::vector<std::vector<float>> dy;
  for (const Tensor& t : d_outputs) dy.push_back(to_dense<float>(t));
  // Recompute z tile by tile; the epilogue turns it into dz = dy ⊙ act'(z) [tokens, columns].
  std::vector<float> dz(p.tokens * p.columns);
  gemm<float>(in.x_matrix(p), in.weight_matrix(p).transposed(), [&](const Tile<float>& tile) {
    for_each_segment_in(p, tile.col0, tile.col0 + tile.cols, [&](size_t s, int64_t begin, int64_t end) {
      const ProjectionSegment& seg = p.segments[s];
      const float tau = static_cast<float>(seg.tau);
      for (int64_t i = 0; i < tile.rows; ++i) {
        const int64_t t = tile.row0 + i;
        for (int64_t c = begin; c < end; ++c) {
          const float z = tile(i, c - tile.col0) + in.bias[c];
          const float dy_tc = dy[s][t * seg.width + (c - p.offsets[s])];
          dz[t * p.columns + c] = dy_tc * activation_derivative(seg.activation, tau, z);
        }
      }
    });
  });
  const Matrix dz_matrix = Matrix::row_major(dz, p.tokens, p.columns);
  gemm<float>(dz_matrix, in.weight_matrix(p), store_into(grads.dx));                  // [tokens, d]
  gemm<float>(dz_matrix.transposed(), in.x_matrix(p), store_into(grads.dweight));     // [columns, d]
  if (grads.dbias) {
    std::vector<float> dbias(p.columns, 0.0f);
    for (int64_t t = 0; t < p.tokens; ++t)
      for (int64_t c = 0; c < p.columns; ++c) dbias[c] += dz[t * p.columns + c];
    from_dense(dbias, grads.dbias);
  }
}

void output_chain_forward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& y) {
  const auto u = gated_heads(p, to_dense<float>(in.o), to_dense<float>(in.g), to_dense<float>(in.norm_weight));
  const auto out_weight = to_dense<float>(in.out_weight);
  const int64_t width = p.heads * p.dv;
  gemm<float>(Matrix::row_major(u, p.tokens, width), Matrix::row_major(out_weight, p.d_out, width).transposed(),
              store_into(y));
}

void output_chain_backward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& dy_view,
                           const OutputChainGrads& grads) {
  const auto o = to_dense<float>(in.o), g = to_dense<float>(in.g), w = to_dense<float>(in.norm_weight);
  const auto out_weight = to_dense<float>(in.out_weight), dy = to_dense<float>(dy_view);
  const auto u = gated_heads(p, o, g, w);
  const int64_t width = p.heads * p.dv;
  const Matrix dy_matrix = Matrix::row_major(dy, p.tokens, p.d_out);
  const auto du = gemm_dense<float>(dy_matrix, Matrix::row_major(out_weight, p.d_out, width));  // [tokens, width]
  gemm<float>(dy_matrix.transposed(), Matrix::row_major(u, p.tokens, width), store_into(grads.dout_weight));
  // Tokens run in parallel; each accumulates its heads' share of dnorm_weight in its own
  // row, summed over tokens afterwards (no shared accumulator between threads).
  std::vector<float> d_o(o.size()), dg(g.size()), dw_per_token(p.tokens * p.dv, 0.0f);
  const float eps = static_cast<float>(p.eps);
  core::parallel_for(p.tokens, [&](int64_t t) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t i = (t * p.heads + h) * p.dv;
      gated_rms_row_backward(&o[i], &g[i], w.data(), &du[i], p.dv, eps, &d_o[i], &dg[i], &dw_per_token[t * p.dv]);
    }
  });
  std::vector<float> dw(p.dv, 0.0f);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t j = 0; j < p.dv; ++j) dw[j] += dw_per_token[t * p.dv + j];
  from_dense(d_o, grads.d_o);
  from_dense(dg, grads.dg);
  from_dense(dw, grads.dnorm_weight);
}

}  // namespace seqmix::cpu::fast
