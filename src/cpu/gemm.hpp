// A small blocked, threaded GEMM for the CPU backend, C = A·B, that hands each finished
// output tile to an epilogue instead of writing C: the epilogue adds a bias, applies an
// activation and stores into whatever layout and dtype the consumer wants, which is how
// the GPU kernels finish their tiles. Templated on the scalar (float for the fast paths,
// double where another op wants it).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "seqmix/tensor.hpp"

namespace seqmix::cpu {

// A read-only matrix over a dense buffer: element (i, j) at data[i·row_stride + j·col_stride].
template <class T>
struct MatrixView {
  const T* data;
  int64_t rows, cols, row_stride, col_stride;

  static MatrixView row_major(const std::vector<T>& buffer, int64_t rows, int64_t cols) {
    return {buffer.data(), rows, cols, cols, 1};
  }
  MatrixView transposed() const { return {data, cols, rows, col_stride, row_stride}; }
  T operator()(int64_t i, int64_t j) const { return data[i * row_stride + j * col_stride]; }
};

// Tiles of C are at most this many columns wide (an epilogue may keep a row on the stack).
inline constexpr int64_t kGemmTileCols = 64;

// A finished block of C: values[i·stride + j] = C(row0 + i, col0 + j) for i < rows, j < cols.
template <class T>
struct Tile {
  int64_t row0, col0, rows, cols;
  const T* values;
  int64_t stride;
  T operator()(int64_t i, int64_t j) const { return values[i * stride + j]; }
};

template <class T>
using TileEpilogue = std::function<void(const Tile<T>&)>;

// C = A·B with A [M, K] and B [K, N] (a.cols == b.rows). Calls `epilogue` exactly once for
// each tile of a partition of C, from worker threads (tiles are disjoint, so an epilogue
// writing only its own tile needs no locking). K = 0 gives tiles of zeros.
template <class T>
void gemm(const MatrixView<T>& a, const MatrixView<T>& b, const TileEpilogue<T>& epilogue);

// C = A·B into a new row-major [M, N] buffer.
template <class T>
std::vector<T> gemm_dense(const MatrixView<T>& a, const MatrixView<T>& b);

// Epilogue helper: stores values[0, count) into row `row`, columns [col0, col0 + count) of
// `t` viewed as a matrix [numel / last dim, last dim] (any strides, any floating dtype),
// converting each value to t's dtype.
template <class T>
void store_row(const Tensor& t, int64_t row, int64_t col0, const T* values, int64_t count);

}  // namespace seqmix::cpu
