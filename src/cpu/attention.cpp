// Attention on the CPU: gathers the strided inputs into dense buffers of the compute
// scalar, runs the oracle (T = double) or the flash path (T = float), and scatters the
// results into the caller's views.
#include "cpu/attention.hpp"

#include <type_traits>

#include "core/dense.hpp"

namespace seqmix::cpu {
namespace {

template <class T>
void forward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& out) {
  const AttentionBuffers<T> x{core::to_dense<T>(in.q), core::to_dense<T>(in.k), core::to_dense<T>(in.v)};
  std::vector<T> o, lse;
  if constexpr (std::is_same_v<T, double>) reference_forward(p, x, o, lse);
  else flash_forward(p, x, o, lse);
  core::from_dense(o, out.out);
  core::from_dense(lse, out.lse);
}

template <class T>
void backward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& forward,
              const Tensor& dout, const std::optional<Tensor>& d_lse, const AttentionGrads& grads) {
  const AttentionBuffers<T> x{core::to_dense<T>(in.q), core::to_dense<T>(in.k), core::to_dense<T>(in.v)};
  const std::vector<T> dO = core::to_dense<T>(dout);
  const std::vector<T> dL = core::to_dense_or_zeros<T>(d_lse, static_cast<size_t>(p.Hq * p.rows_q));
  std::vector<T> dq, dk, dv;
  if constexpr (std::is_same_v<T, double>) {
    reference_backward(p, x, dO, dL, dq, dk, dv);
  } else {
    flash_backward(p, x, core::to_dense<T>(forward.out), core::to_dense<T>(forward.lse), dO, dL, dq, dk, dv);
  }
  core::from_dense(dq, grads.dq);
  core::from_dense(dk, grads.dk);
  core::from_dense(dv, grads.dv);
}

}  // namespace

void attention_forward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       Impl impl) {
  if (impl == Impl::reference) forward<double>(p, in, out);
  else forward<float>(p, in, out);
}

void attention_backward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& forward,
                        const Tensor& dout, const std::optional<Tensor>& d_lse, const AttentionGrads& grads,
                        Impl impl) {
  if (impl == Impl::reference) backward<double>(p, in, forward, dout, d_lse, grads);
  else backward<float>(p, in, forward, dout, d_lse, grads);
}

}  // namespace seqmix::cpu
