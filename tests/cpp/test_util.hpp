// Helpers for the C++ tests: host tensors that own their memory, random fills, NaN
// poisoning, relative-norm errors and float64 finite differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dense.hpp"
#include "seqmix/error.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix::test {

// A contiguous CPU tensor that owns its storage. Copying is disabled so views stay valid.
struct HostTensor {
  std::vector<unsigned char> storage;
  Tensor view;

  HostTensor(std::vector<int64_t> shape, DType dtype) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    storage.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype), 0);
    view = Tensor::contiguous(storage.data(), dtype, std::move(shape));
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;

  operator const Tensor&() const { return view; }
  std::vector<double> values() const { return core::to_dense<double>(view); }
  void set(const std::vector<double>& v) { core::from_dense(v, view); }
  void poison() { set(std::vector<double>(view.numel(), std::nan(""))); }
};

inline std::mt19937_64& rng() {
  static std::mt19937_64 generator(20261121);
  return generator;
}

// Uniform values in [lo, hi), stored in `dtype`.
inline HostTensor uniform(std::vector<int64_t> shape, DType dtype, double lo = -1.0, double hi = 1.0) {
  HostTensor t(std::move(shape), dtype);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(t.view.numel());
  for (double& x : v) x = dist(rng());
  t.set(v);
  return t;
}

// An output tensor filled with NaN, so an element the op forgets to write fails.
inline HostTensor poisoned(std::vector<int64_t> shape, DType dtype) {
  HostTensor t(std::move(shape), dtype);
  t.poison();
  return t;
}

inline HostTensor offsets(const std::vector<int64_t>& values, DType dtype = DType::i32) {
  HostTensor t({static_cast<int64_t>(values.size())}, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i32) reinterpret_cast<int32_t*>(t.storage.data())[i] = static_cast<int32_t>(values[i]);
    else reinterpret_cast<int64_t*>(t.storage.data())[i] = values[i];
  }
  return t;
}

// ‖got − want‖ / ‖want‖ (NaN anywhere gives infinity).
inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

inline double rel_err(const HostTensor& got, const HostTensor& want) { return rel_err(got.values(), want.values()); }

// Bound on the relative error of the float32 path against the oracle when inputs are
// stored in `dtype` (the oracle sees the same stored values, so only compute differs,
// except the output's own rounding for bf16/f16).
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 1e-5;
    default: return 1e-12;
  }
}

// Central finite difference of `loss` with respect to every element of `input`,
// in float64: returns dLoss/dInput, row-major.
inline std::vector<double> finite_difference(HostTensor& input, const std::function<double()>& loss,
                                             double step = 1e-6) {
  std::vector<double> x = input.values(), grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + step;
    input.set(x);
    const double up = loss();
    x[i] = saved - step;
    input.set(x);
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * step);
  }
  input.set(x);
  return grad;
}

// Σ weight · value, the scalar a gradient check differentiates.
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace seqmix::test

// Asserts that `statement` throws seqmix::Error whose message contains `substring`.
#define EXPECT_SEQMIX_ERROR(statement, substring)                                      \
  do {                                                                                 \
    try {                                                                              \
      statement;                                                                       \
      ADD_FAILURE() << "expected seqmix::Error containing \"" << (substring) << "\""; \
    } catch (const seqmix::Error& e) {                                                 \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)              \
          << "message: " << e.what() << "\nexpected to contain: " << (substring);     \
    }                                                                                  \
  } while (0)
