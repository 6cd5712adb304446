// Gated linear attention on the CPU: dense buffers in, one (sequence, head) per work
// item across threads, dense buffers out. The per-head algorithms live in
// gla_reference.cpp (float64 oracle) and gla_chunked.cpp (float32 chunkwise).
#include "cpu/gla.hpp"

#include "core/dense.hpp"
#include "core/parallel.hpp"
#include "cpu/gla_head.hpp"

namespace seqmix::cpu {
namespace {

// Where one (sequence, head) lives in the dense [B·T, H, D] and [N, H, K, V] buffers.
struct HeadIndex {
  const GlaProblem& p;
  int64_t n, h;
  gla::HeadShape shape() const { return {p.sequences[n].length, p.K, p.V, p.scale}; }
  int64_t first_row(int64_t D) const { return (p.sequences[n].row0(p.T) * p.H + h) * D; }
  template <class T>
  gla::Rows<T> rows(std::vector<T>& buffer, int64_t D) const { return {buffer.data() + first_row(D), p.H * D}; }
  template <class T>
  gla::Rows<const T> rows(const std::vector<T>& buffer, int64_t D) const {
    return {buffer.data() + first_row(D), p.H * D};
  }
  int64_t state_offset() const { return (n * p.H + h) * p.K * p.V; }
};

template <class T>
struct Buffers {
  std::vector<T> q, k, v, g, h0;
  Buffers(const GlaProblem& p, const GlaInputs& in)
      : q(core::to_dense<T>(in.q)),
        k(core::to_dense<T>(in.k)),
        v(core::to_dense<T>(in.v)),
        g(core::to_dense<T>(in.g)),
        h0(core::to_dense_or_zeros<T>(in.initial_state, p.sequences.size() * p.H * p.K * p.V)) {}
  gla::HeadInputs<T> head(const HeadIndex& at) const {
    const int64_t K = at.p.K, V = at.p.V;
    return {at.rows(q, K), at.rows(k, K), at.rows(v, V), at.rows(g, K), h0.data() + at.state_offset()};
  }
};

// Runs head(index) for every (sequence, head), in parallel.
template <class Body>
void for_each_head(const GlaProblem& p, const Body& body) {
  const int64_t H = p.H;
  core::parallel_for(static_cast<int64_t>(p.sequences.size()) * H,
                     [&](int64_t item) { body(HeadIndex{p, item / H, item % H}); });
}

template <class T, class HeadForwardFn>
void forward(const GlaProblem& p, const GlaInputs& in, const GlaOutputs& out, HeadForwardFn head_forward) {
  const Buffers<T> x(p, in);
  std::vector<T> o(p.B * p.T * p.H * p.V), hT(x.h0.size());
  for_each_head(p, [&](const HeadIndex& at) {
    head_forward(at.shape(), x.head(at), gla::HeadForward<T>{at.rows(o, p.V), hT.data() + at.state_offset()});
  });
  core::from_dense(o, out.o);
  core::from_dense(hT, out.final_state);
}

template <class T, class HeadBackwardFn>
void backward(const GlaProblem& p, const GlaInputs& in, const Tensor& d_o_view,
              const std::optional<Tensor>& d_final_state, const GlaGrads& grads, HeadBackwardFn head_backward) {
  const Buffers<T> x(p, in);
  const std::vector<T> d_o = core::to_dense<T>(d_o_view);
  const std::vector<T> dhT = core::to_dense_or_zeros<T>(d_final_state, x.h0.size());
  std::vector<T> dq(x.q.size()), dk(x.k.size()), dv(x.v.size()), dg(x.g.size()), dh0(x.h0.size());
  for_each_head(p, [&](const HeadIndex& at) {
    const int64_t K = p.K, V = p.V, state = at.state_offset();
    head_backward(at.shape(), x.head(at),
                  gla::HeadBackward<T>{at.rows(d_o, V), dhT.data() + state, at.rows(dq, K), at.rows(dk, K),
                                       at.rows(dv, V), at.rows(dg, K), dh0.data() + state});
  });
  core::from_dense(dq, grads.dq);
  core::from_dense(dk, grads.dk);
  core::from_dense(dv, grads.dv);
  core::from_dense(dg, grads.dg);
  core::from_dense(dh0, grads.d_initial_state);
}

}  // namespace

void gla_forward(const GlaProblem& p, const GlaInputs& in, const GlaOutputs& out, Impl impl) {
  if (impl == Impl::reference) forward<double>(p, in, out, gla::reference_forward);
  else forward<float>(p, in, out, gla::chunked_forward);
}

void gla_backward(const GlaProblem& p, const GlaInputs& in, const Tensor& d_o,
                  const std::optional<Tensor>& d_final_state, const GlaGrads& grads, Impl impl) {
  if (impl == Impl::reference) backward<double>(p, in, d_o, d_final_state, grads, gla::reference_backward);
  else backward<float>(p, in, d_o, d_final_state, grads, gla::chunked_backward);
}

}  // namespace seqmix::cpu
