// Argument checking shared by every op. Each op's entry point in src/core builds a
// Checker named after the public function and runs every check before any backend
// touches memory, so bad input never reaches a kernel.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix::core {

class Checker {
 public:
  explicit Checker(std::string op) : op_(std::move(op)) {}
  const std::string& op() const { return op_; }

  // Throws seqmix::Error "<op>: argument '<arg>': expected <expected>, got <got>".
  [[noreturn]] void fail(const std::string& arg, const std::string& expected,
                         const std::string& got) const;

  void dtype_in(const Tensor& t, const char* arg, std::initializer_list<DType> allowed) const;
  // t's dtype equals `dtype`, the dtype of `like` (named for the message).
  void same_dtype(const Tensor& t, const char* arg, DType dtype, const char* like) const;
  // Rank and one stride per dimension; `layout` names the dimensions for the message.
  void rank(const Tensor& t, const char* arg, int rank, const char* layout) const;
  // Exact shape; `layout` names the dimensions, e.g. "[B, T, H, K]".
  void shape(const Tensor& t, const char* arg, const std::vector<int64_t>& expected,
             const char* layout) const;
  void same_device(const Tensor& t, const char* arg, const Device& device, const char* like) const;
  // The innermost dimension must be contiguous (stride 1); other strides are free.
  void last_dim_contiguous(const Tensor& t, const char* arg) const;
  void not_null(const Tensor& t, const char* arg) const;
  // `value` > 0 for a named size such as "T" or "D".
  void positive(int64_t value, const char* arg, const char* what) const;

  // The common checks on an input or output: not null when it has elements, rank,
  // device, innermost stride. Used before shape and dtype checks.
  void view(const Tensor& t, const char* arg, int rank, const char* layout,
            const Device& device) const;

 private:
  std::string op_;
};

// The sequences of a [B, T, ...] batch: B sequences of length T, or with cu_seqlens
// (B must be 1) the N sequences [cu[i], cu[i+1]). `row0` is the index of a sequence's
// first token in the flattened B·T token axis.
struct Sequence {
  int64_t batch;   // index into B (0 with cu_seqlens)
  int64_t start;   // first token within that batch row
  int64_t length;  // tokens, ≥ 1
  int64_t row0(int64_t T) const { return batch * T + start; }
};

// Validates cu_seqlens (rank 1, int32/int64, at least 2 entries, starts at 0, strictly
// increasing — no empty sequence — and ends at T) or T ≥ 1 and B ≥ 1. cu_seqlens on a
// CUDA device is copied to the host on `stream` to be checked (a synchronisation).
std::vector<Sequence> make_sequences(const Checker& check, int64_t B, int64_t T,
                                     const std::optional<Tensor>& cu_seqlens, void* stream = nullptr);

// Which implementation runs: `automatic` picks `reference` for f64 inputs on the CPU
// and `fast` otherwise. CUDA inputs are refused until an op has a CUDA kernel.
Impl resolve_cpu_impl(const Checker& check, Impl impl, const Tensor& sample);

}  // namespace seqmix::core
