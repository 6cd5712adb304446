// CPU backend of the gated scan: the float64 oracle (Impl::reference) and the
// threaded float32 path (Impl::fast), both on dense buffers.
#pragma once

#include <vector>

#include "core/check.hpp"
#include "seqmix/gated_scan.hpp"

namespace seqmix::cpu {

struct GatedScanProblem {
  int64_t B, T, D;
  std::vector<core::Sequence> sequences;
  Decay decay;
};

void gated_scan_forward(const GatedScanProblem& p, const GatedScanInputs& in,
                        const GatedScanOutputs& out, Impl impl);
void gated_scan_backward(const GatedScanProblem& p, const GatedScanInputs& in, const Tensor& dy,
                         const std::optional<Tensor>& d_final_state, const GatedScanGrads& grads,
                         Impl impl);

}  // namespace seqmix::cpu
