#include "bindings.hpp"
#include "seqmix/delta_rule.hpp"

namespace seqmix::python {
namespace {

DeltaRuleInputs inputs(const In& q, const In& k, const In& v, const In& g, const In& beta,
                       const OptIn& initial_state, const OptIn& cu_seqlens) {
  return {view(q, "q"), view(k, "k"), view(v, "v"), view(g, "g"), view(beta, "beta"),
          view(initial_state, "initial_state"), view(cu_seqlens, "cu_seqlens")};
}

DeltaRuleOptions delta_rule_options(double scale, bool use_qk_l2norm, const std::string& impl, uintptr_t stream) {
  auto o = options<DeltaRuleOptions>(impl, stream);
  o.scale = scale;
  o.use_qk_l2norm = use_qk_l2norm;
  return o;
}

}  // namespace

void bind_delta_rule(nb::module_& m) {
  m.def(
      "delta_rule_forward",
      [](In q, In k, In v, In g, In beta, OptIn initial_state, OptIn cu_seqlens, Out o, OptOut final_state,
         double scale, bool use_qk_l2norm, const std::string& impl, uintptr_t stream) {
        const DeltaRuleInputs in = inputs(q, k, v, g, beta, initial_state, cu_seqlens);
        const DeltaRuleOutputs out{view(o, "o"), view(final_state, "final_state")};
        const auto opts = delta_rule_options(scale, use_qk_l2norm, impl, stream);
        nb::gil_scoped_release release;
        delta_rule_forward(in, out, opts);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("o"), nb::arg("final_state").none(), nb::arg("scale"),
      nb::arg("use_qk_l2norm"), nb::arg("impl"), nb::arg("stream"),
      "Gated delta rule forward into preallocated o [B, T, H, V] and final_state [N, H, K, V].");
  m.def(
      "delta_rule_backward",
      [](In q, In k, In v, In g, In beta, OptIn initial_state, OptIn cu_seqlens, In d_o, OptIn d_final_state,
         Out dq, Out dk, Out dv, Out dg, Out dbeta, OptOut d_initial_state, double scale, bool use_qk_l2norm,
         const std::string& impl, uintptr_t stream) {
        const DeltaRuleInputs in = inputs(q, k, v, g, beta, initial_state, cu_seqlens);
        const DeltaRuleGrads grads{view(dq, "dq"),       view(dk, "dk"),       view(dv, "dv"),
                                   view(dg, "dg"),       view(dbeta, "dbeta"), view(d_initial_state, "d_initial_state")};
        const Tensor do_view = view(d_o, "do");
        const auto dhT = view(d_final_state, "d_final_state");
        const auto opts = delta_rule_options(scale, use_qk_l2norm, impl, stream);
        nb::gil_scoped_release release;
        delta_rule_backward(in, do_view, dhT, grads, opts);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("beta"), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("do"), nb::arg("d_final_state").none(), nb::arg("dq"), nb::arg("dk"),
      nb::arg("dv"), nb::arg("dg"), nb::arg("dbeta"), nb::arg("d_initial_state").none(), nb::arg("scale"),
      nb::arg("use_qk_l2norm"), nb::arg("impl"), nb::arg("stream"), "Gated delta rule backward into preallocated gradients.");
}

}  // namespace seqmix::python
