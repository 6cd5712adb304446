#include "bindings.hpp"
#include "seqmix/attention.hpp"

namespace seqmix::python {
namespace {

AttentionInputs inputs(const In& q, const In& k, const In& v, const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_k,
                       int64_t max_seqlen_q, int64_t max_seqlen_k) {
  return {view(q, "q"), view(k, "k"), view(v, "v"), view(cu_seqlens_q, "cu_seqlens_q"),
          view(cu_seqlens_k, "cu_seqlens_k"), max_seqlen_q, max_seqlen_k};
}

AttentionOptions attention_options(double scale, bool causal, bool deterministic, const std::string& impl,
                                   uintptr_t stream) {
  auto o = options<AttentionOptions>(impl, stream);
  o.scale = scale;
  o.causal = causal;
  o.deterministic = deterministic;
  return o;
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def(
      "attention_forward",
      [](In q, In k, In v, OptIn cu_seqlens_q, OptIn cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, Out out,
         Out lse, double scale, bool causal, const std::string& impl, uintptr_t stream) {
        const AttentionInputs in = inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
        const AttentionOutputs outputs{view(out, "out"), view(lse, "lse")};
        const auto o = attention_options(scale, causal, false, impl, stream);
        nb::gil_scoped_release release;
        attention_forward(in, outputs, o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(),
      nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("out"), nb::arg("lse"), nb::arg("scale"),
      nb::arg("causal"), nb::arg("impl"), nb::arg("stream"),
      "Attention forward into preallocated out [.., Hq, Dv] and lse [B, Hq, Sq] or [Hq, total_q].");
  m.def(
      "attention_backward",
      [](In q, In k, In v, OptIn cu_seqlens_q, OptIn cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, In out,
         In lse, In dout, OptIn d_lse, Out dq, Out dk, Out dv, double scale, bool causal, bool deterministic,
         const std::string& impl, uintptr_t stream) {
        const AttentionInputs in = inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
        const AttentionOutputs forward{view(out, "out"), view(lse, "lse")};
        const Tensor dout_view = view(dout, "dout");
        const auto d_lse_view = view(d_lse, "d_lse");
        const AttentionGrads grads{view(dq, "dq"), view(dk, "dk"), view(dv, "dv")};
        const auto o = attention_options(scale, causal, deterministic, impl, stream);
        nb::gil_scoped_release release;
        attention_backward(in, forward, dout_view, d_lse_view, grads, o);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(),
      nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("out"), nb::arg("lse"), nb::arg("dout"),
      nb::arg("d_lse").none(), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("scale"), nb::arg("causal"),
      nb::arg("deterministic"), nb::arg("impl"), nb::arg("stream"),
      "Attention backward into preallocated dq, dk, dv.");
}

}  // namespace seqmix::python
