#include "cpu/gemm.hpp"

#include <algorithm>

#include "core/half.hpp"
#include "core/parallel.hpp"

namespace seqmix::cpu {
namespace {

// A tile of C is kTileRows × kTileCols accumulators (8 KiB in float: stays in L1), built
// from K in steps of kDepth so the slice of the B panel it reads (kDepth × kTileCols) stays
// cache resident while every row of the tile streams over it.
constexpr int64_t kTileRows = 32;
constexpr int64_t kTileCols = kGemmTileCols;
constexpr int64_t kDepth = 128;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A copied row-major [M, K], so the inner loop reads it contiguously whatever its strides.
template <class T>
std::vector<T> pack_rows(const MatrixView<T>& a) {
  std::vector<T> packed(a.rows * a.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k) packed[i * a.cols + k] = a(i, k);
  return packed;
}

// B copied into column panels [N / kTileCols][K][kTileCols], the last one zero padded, so a
// tile's inner loop is a fixed-width contiguous axpy the compiler vectorises.
template <class T>
std::vector<T> pack_panels(const MatrixView<T>& b) {
  const int64_t K = b.rows, N = b.cols, panels = ceil_div(N, kTileCols);
  std::vector<T> packed(panels * K * kTileCols, T(0));
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kTileCols && p * kTileCols + j < N; ++j)
        packed[(p * K + k) * kTileCols + j] = b(k, p * kTileCols + j);
  return packed;
}

// acc[i][·] += Σ_k a_rows[i][k] · panel[k][·] over the tile's rows.
template <class T>
void accumulate_tile(const T* a_rows, int64_t rows, int64_t K, const T* panel, T* acc) {
  for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
    const int64_t k1 = std::min(K, k0 + kDepth);
    for (int64_t i = 0; i < rows; ++i) {
      const T* a = a_rows + i * K;
      T* __restrict c = acc + i * kTileCols;
      for (int64_t k = k0; k < k1; ++k) {
        const T aik = a[k];
        const T* __restrict bk = panel + k * kTileCols;
        for (int64_t j = 0; j < kTileCols; ++j) c[j] += aik * bk[j];
      }
    }
  }
}

template <class Out>
void store_converted(char* base, int64_t step, const Out* values, int64_t count, DType dtype) {
  for (int64_t j = 0; j < count; ++j) {
    const float v = static_cast<float>(values[j]);
    switch (dtype) {
      case DType::bf16: reinterpret_cast<uint16_t*>(base)[j * step] = core::float_to_bf16(v); break;
      case DType::f16: reinterpret_cast<uint16_t*>(base)[j * step] = core::float_to_f16(v); break;
      case DType::f32: reinterpret_cast<float*>(base)[j * step] = v; break;
      case DType::f64: reinterpret_cast<double*>(base)[j * step] = static_cast<double>(values[j]); break;
      default: break;  // integer tensors never reach an epilogue (validated upstream)
    }
  }
}

}  // namespace

template <class T>
void gemm(const MatrixView<T>& a, const MatrixView<T>& b, const TileEpilogue<T>& epilogue) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  const std::vector<T> a_packed = pack_rows(a);
  const std::vector<T> b_panels = pack_panels(b);
  const int64_t row_blocks = ceil_div(M, kTileRows), panels = ceil_div(N, kTileCols);
  // Items run row block by row block, so a worker's consecutive tiles share their A rows.
  core::parallel_for(row_blocks * panels, [&](int64_t item) {
    const int64_t row0 = (item / panels) * kTileRows, panel = item % panels;
    const int64_t rows = std::min(kTileRows, M - row0), col0 = panel * kTileCols;
    std::vector<T> acc(kTileRows * kTileCols, T(0));
    accumulate_tile(a_packed.data() + row0 * K, rows, K, b_panels.data() + panel * K * kTileCols, acc.data());
    epilogue(Tile<T>{row0, col0, rows, std::min(kTileCols, N - col0), acc.data(), kTileCols});
  });
}

template <class T>
std::vector<T> gemm_dense(const MatrixView<T>& a, const MatrixView<T>& b) {
  std::vector<T> c(a.rows * b.cols);
  gemm<T>(a, b, [&](const Tile<T>& tile) {
    for (int64_t i = 0; i < tile.rows; ++i)
      std::copy_n(tile.values + i * tile.stride, tile.cols, c.begin() + (tile.row0 + i) * b.cols + tile.col0);
  });
  return c;
}

template <class T>
void store_row(const Tensor& t, int64_t row, int64_t col0, const T* values, int64_t count) {
  int64_t offset = col0 * t.strides.back();
  for (int dim = t.rank() - 2; dim >= 0; --dim) {  // unflatten `row` over the leading dims
    offset += (row % t.shape[dim]) * t.strides[dim];
    row /= t.shape[dim];
  }
  char* base = static_cast<char*>(t.data) + offset * dtype_size(t.dtype);
  store_converted(base, t.strides.back(), values, count, t.dtype);
}

template void gemm<float>(const MatrixView<float>&, const MatrixView<float>&, const TileEpilogue<float>&);
template void gemm<double>(const MatrixView<double>&, const MatrixView<double>&, const TileEpilogue<double>&);
template std::vector<float> gemm_dense<float>(const MatrixView<float>&, const MatrixView<float>&);
template std::vector<double> gemm_dense<double>(const MatrixView<double>&, const MatrixView<double>&);
template void store_row<float>(const Tensor&, int64_t, int64_t, const float*, int64_t);
template void store_row<double>(const Tensor&, int64_t, int64_t, const double*, int64_t);

}  // namespace seqmix::cpu
