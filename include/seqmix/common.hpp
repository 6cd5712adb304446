// Options shared by every op.
#pragma once

#include "seqmix/tensor.hpp"

namespace seqmix {

// Which implementation runs an op.
//   automatic: the fastest one for the inputs' device and dtype. On the CPU that is
//              `fast` for bf16/f16/f32 inputs and `reference` for f64 inputs.
//   reference: the float64 oracle written straight from the op's definition
//              (token by token, naive softmax); CPU only, any input dtype.
//   fast:      the float32 path in the form the GPU kernels use (chunkwise, threaded).
enum class Impl { automatic, reference, fast };

// "automatic", "reference", "fast"; parse_impl throws seqmix::Error on anything else.
const char* impl_name(Impl impl);
Impl parse_impl(const std::string& name);

struct CommonOptions {
  Impl impl = Impl::automatic;
  // cudaStream_t of the caller, or nullptr for the default stream. Ignored on the CPU.
  void* stream = nullptr;
};

}  // namespace seqmix
