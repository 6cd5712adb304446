#include "bindings.hpp"
#include "seqmix/gla.hpp"

namespace seqmix::python {

namespace {
GlaInputs gla_inputs(const In& q, const In& k, const In& v, const In& g, const OptIn& initial_state,
                     const OptIn& cu_seqlens) {
  return {view(q, "q"), view(k, "k"), view(v, "v"), view(g, "g"), view(initial_state, "initial_state"),
          view(cu_seqlens, "cu_seqlens")};
}

GlaOptions gla_options(double scale, const std::string& impl, uintptr_t stream) {
  auto o = options<GlaOptions>(impl, stream);
  o.scale = scale;
  return o;
}
}  // namespace

void bind_gla(nb::module_& m) {
  m.def(
      "gla_forward",
      [](In q, In k, In v, In g, OptIn initial_state, OptIn cu_seqlens, Out o, OptOut final_state,
         OptOut chunk_states, OptOut chunk_scores, double scale, const std::string& impl, uintptr_t stream) {
        const GlaInputs in = gla_inputs(q, k, v, g, initial_state, cu_seqlens);
        const GlaOutputs out{view(o, "o"), view(final_state, "final_state"), view(chunk_states, "chunk_states"),
                             view(chunk_scores, "chunk_scores")};
        const GlaOptions opts = gla_options(scale, impl, stream);
        nb::gil_scoped_release release;
        gla_forward(in, out, opts);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("o"), nb::arg("final_state").none(), nb::arg("chunk_states").none(),
      nb::arg("chunk_scores").none(), nb::arg("scale"), nb::arg("impl"), nb::arg("stream"),
      "Gated linear attention forward into preallocated o [B, T, H, V], final_state [N, H, K, V], "
      "chunk_states [N, H, C, K, V] and chunk_scores [N, H, C, 64, 64] (CUDA only: the state entering "
      "every chunk and every chunk's scores, for the backward).");
  m.def(
      "gla_backward",
      [](In q, In k, In v, In g, OptIn initial_state, OptIn cu_seqlens, In d_o, OptIn d_final_state, Out dq, Out dk,
         Out dv, Out dg, OptOut d_initial_state, OptIn chunk_states, OptIn chunk_scores, double scale,
         const std::string& impl, uintptr_t stream) {
        GlaInputs in = gla_inputs(q, k, v, g, initial_state, cu_seqlens);
        in.chunk_states = view(chunk_states, "chunk_states");
        in.chunk_scores = view(chunk_scores, "chunk_scores");
        const GlaGrads grads{view(dq, "dq"), view(dk, "dk"), view(dv, "dv"), view(dg, "dg"),
                             view(d_initial_state, "d_initial_state")};
        const Tensor d_o_view = view(d_o, "do");
        const auto dhT = view(d_final_state, "d_final_state");
        const GlaOptions opts = gla_options(scale, impl, stream);
        nb::gil_scoped_release release;
        gla_backward(in, d_o_view, dhT, grads, opts);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("do"), nb::arg("d_final_state").none(), nb::arg("dq"), nb::arg("dk"),
      nb::arg("dv"), nb::arg("dg"), nb::arg("d_initial_state").none(), nb::arg("chunk_states").none(),
      nb::arg("chunk_scores").none(), nb::arg("scale"), nb::arg("impl"), nb::arg("stream"),
      "Gated linear attention backward into preallocated gradients; chunk_states, chunk_scores: the "
      "forward's, or None.");
}

}  // namespace seqmix::python
