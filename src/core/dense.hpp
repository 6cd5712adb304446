// Gathering a strided Tensor of any floating dtype into a contiguous std::vector<T>
// (T = float or double) and scattering one back. The CPU backend computes on these
// dense buffers, so its code indexes plain row-major arrays.
#pragma once

#include <optional>
#include <vector>

#include "seqmix/tensor.hpp"

namespace seqmix::core {

template <class T>
std::vector<T> to_dense(const Tensor& t);

// Zeros of `count` elements when `t` is absent.
template <class T>
std::vector<T> to_dense_or_zeros(const std::optional<Tensor>& t, size_t count) {
  return t ? to_dense<T>(*t) : std::vector<T>(count, T(0));
}

// Writes `values` (row-major, t.numel() elements) into t, converting to t's dtype.
template <class T>
void from_dense(const std::vector<T>& values, const Tensor& t);

template <class T>
void from_dense(const std::vector<T>& values, const std::optional<Tensor>& t) {
  if (t) from_dense(values, *t);
}

// Rounds every value as a store to `dtype` and a load back would (bf16/f16 lose bits).
template <class T>
void round_to(std::vector<T>& values, DType dtype);

}  // namespace seqmix::core
