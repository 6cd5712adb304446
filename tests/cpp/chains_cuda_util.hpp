// Helpers shared by the chains' CUDA tests: float64 copies for the oracle, a chain's total
// width, one buffer's per-segment column views, and the per-segment oracle comparison.
#pragma once

#include <optional>
#include <vector>

#include "cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {

// A float64 copy of a bf16 host tensor: the oracle sees exactly the stored values.
inline HostTensor as_f64(const HostTensor& t) {
  HostTensor copy(t.view.shape, DType::f64);
  copy.set(t.values());
  return copy;
}

inline int64_t width_of(const std::vector<ProjectionSegment>& segments) {
  int64_t n = 0;
  for (const auto& s : segments) n += s.width;
  return n;
}

// Column views [rows, width_s] of one [rows, N] buffer, one per segment.
inline std::vector<Tensor> column_views(const Tensor& buffer, const std::vector<ProjectionSegment>& segments) {
  std::vector<Tensor> views;
  int64_t first = 0;
  for (const auto& s : segments) {
    Tensor v = buffer;
    v.data = static_cast<char*>(buffer.data) + first * dtype_size(buffer.dtype);
    v.shape = {buffer.shape[0], s.width};
    views.push_back(v);
    first += s.width;
  }
  return views;
}

// Each segment's columns of the [M, N] output `got` against the oracle's segment, by relative norm.
inline void expect_segments_match(const std::vector<double>& got, const std::vector<HostTensor>& want,
                                  const std::vector<ProjectionSegment>& segments, int64_t M, double tol) {
  const int64_t N = width_of(segments);
  int64_t first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    std::vector<double> columns;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < segments[s].width; ++j) columns.push_back(got[i * N + first + j]);
    EXPECT_LT(rel_err(columns, want[s].values()), tol)
        << "segment " << s << " (" << activation_name(segments[s].activation) << ")";
    first += segments[s].width;
  }
}

inline std::optional<Tensor> maybe(bool present, const Tensor& t) {
  return present ? std::optional<Tensor>(t) : std::nullopt;
}

}  // namespace seqmix::test
