// The one dense kernel every linear-recurrence method is built from: the affine step
// out = A·x + b on small row-major matrices, and the helpers that use it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace seqmix::cpu::recurrence {

// One column of out = A·x (+ b): a dot product per row, split over eight partial
// sums so it vectorizes without relying on reassociation flags. x, b and out are
// read and written with row stride `ld`.
template <class S>
inline void affine_column(S* out, const S* A, const S* x, const S* b, int64_t n, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) {
    const S* row = A + i * n;
    S partial[8] = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
      for (int u = 0; u < 8; ++u) partial[u] += row[k + u] * x[(k + u) * ld];
    S sum = b ? b[i * ld] : S(0);
    for (; k < n; ++k) sum += row[k] * x[k * ld];
    for (int u = 0; u < 8; ++u) sum += partial[u];
    out[i * ld] = sum;
  }
}

// out = A·x (+ b when b is not null), A n×n, x/b/out n×cols with row stride `ld`.
// out may be b (an in-place update) but never x. Wide states stream rows of x so the
// column loop vectorizes; narrow ones (a vector state, a few columns) are dot
// products per column, since a short column loop would not.
template <class S>
inline void affine(S* out, const S* A, const S* x, const S* b, int64_t n, int64_t cols, int64_t ld) {
  constexpr int64_t kMinStreamedColumns = 8;
  if (cols < kMinStreamedColumns) {
    for (int64_t j = 0; j < cols; ++j) affine_column(out + j, A, x + j, b ? b + j : nullptr, n, ld);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    S* out_row = out + i * ld;
    if (!b) std::fill(out_row, out_row + cols, S(0));
    else if (b != out) std::copy(b + i * ld, b + i * ld + cols, out_row);
    for (int64_t k = 0; k < n; ++k) {
      const S a = A[i * n + k];
      const S* x_row = x + k * ld;
      for (int64_t j = 0; j < cols; ++j) out_row[j] += a * x_row[j];
    }
  }
}

// out = A·x + b for contiguous n×m blocks.
template <class S>
inline void affine(S* out, const S* A, const S* x, const S* b, int64_t n, int64_t m) {
  affine(out, A, x, b, n, m, m);
}

// out = A2·A1, the transition of two steps (A1 first). out is neither input.
template <class S>
inline void compose_transitions(S* out, const S* A2, const S* A1, int64_t n) {
  affine<S>(out, A2, A1, nullptr, n, n);
}

}  // namespace seqmix::cpu::recurrence
