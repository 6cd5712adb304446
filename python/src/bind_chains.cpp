#include <nanobind/stl/vector.h>

#include <vector>

#include "bindings.hpp"
#include "seqmix/chains.hpp"
#include "seqmix/error.hpp"

namespace seqmix::python {
namespace {

// Segments arrive as three parallel lists (widths, activation names, taus).
std::vector<ProjectionSegment> segments(const std::vector<int64_t>& widths, const std::vector<std::string>& activations,
                                        const std::vector<double>& taus) {
  if (activations.size() != widths.size() || taus.size() != widths.size())
    throw Error("seqmix.projection_chain: argument 'segments': expected as many activations and taus as widths, got " +
                std::to_string(widths.size()) + " widths, " + std::to_string(activations.size()) + " activations, " +
                std::to_string(taus.size()) + " taus");
  std::vector<ProjectionSegment> result;
  for (size_t s = 0; s < widths.size(); ++s) result.push_back({widths[s], parse_activation(activations[s]), taus[s]});
  return result;
}

template <class Array>
std::vector<Tensor> views(const std::vector<Array>& arrays, const char* arg) {
  std::vector<Tensor> result;
  for (const Array& a : arrays) result.push_back(view(a, arg));
  return result;
}

OutputChainOptions output_options(double eps, const std::string& impl, uintptr_t stream) {
  auto o = options<OutputChainOptions>(impl, stream);
  o.eps = eps;
  return o;
}

}  // namespace

void bind_chains(nb::module_& m) {
  m.def(
      "projection_chain_forward",
      [](In x, In weight, OptIn bias, std::vector<int64_t> widths, std::vector<std::string> activations,
         std::vector<double> taus, std::vector<Out> outputs, const std::string& impl, uintptr_t stream) {
        const auto segs = segments(widths, activations, taus);
        const Tensor xv = view(x, "x"), wv = view(weight, "weight");
        const auto bv = view(bias, "bias");
        const auto outs = views(outputs, "outputs");
        const auto o = options<ProjectionChainOptions>(impl, stream);
        nb::gil_scoped_release release;
        projection_chain_forward(xv, wv, bv, segs, outs, o);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(), nb::arg("widths"), nb::arg("activations"),
      nb::arg("taus"), nb::arg("outputs"), nb::arg("impl"), nb::arg("stream"),
      "Projection chain forward into preallocated outputs, one [tokens, width] array per segment.");
  m.def(
      "projection_chain_with_gate_forward",
      [](In x, In weight, OptIn bias, std::vector<int64_t> widths, std::vector<std::string> activations,
         std::vector<double> taus, std::vector<Out> outputs, size_t code_segment, In gate_weight, OptIn gate_bias,
         double tau, Out gate_out, const std::string& impl, uintptr_t stream) {
        const auto segs = segments(widths, activations, taus);
        const Tensor xv = view(x, "x"), wv = view(weight, "weight");
        const auto bv = view(bias, "bias");
        const auto outs = views(outputs, "outputs");
        const LowRankGate gate{code_segment, view(gate_weight, "gate.weight"), view(gate_bias, "gate.bias"), tau};
        const Tensor gv = view(gate_out, "gate_out");
        const auto o = options<ProjectionChainOptions>(impl, stream);
        nb::gil_scoped_release release;
        projection_chain_with_gate_forward(xv, wv, bv, segs, gate, outs, gv, o);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(), nb::arg("widths"), nb::arg("activations"),
      nb::arg("taus"), nb::arg("outputs"), nb::arg("code_segment"), nb::arg("gate_weight"),
      nb::arg("gate_bias").none(), nb::arg("tau"), nb::arg("gate_out"), nb::arg("impl"), nb::arg("stream"),
      "Projection chain and its low-rank gate forward into preallocated outputs and gate_out.");
  m.def(
      "projection_chain_backward",
      [](In x, In weight, OptIn bias, std::vector<int64_t> widths, std::vector<std::string> activations,
         std::vector<double> taus, std::vector<In> d_outputs, Out dx, Out dweight, OptOut dbias,
         const std::string& impl, uintptr_t stream) {
        const auto segs = segments(widths, activations, taus);
        const Tensor xv = view(x, "x"), wv = view(weight, "weight");
        const auto bv = view(bias, "bias");
        const auto dys = views(d_outputs, "d_outputs");
        const ProjectionChainGrads grads{view(dx, "dx"), view(dweight, "dweight"), view(dbias, "dbias")};
        const auto o = options<ProjectionChainOptions>(impl, stream);
        nb::gil_scoped_release release;
        projection_chain_backward(xv, wv, bv, segs, dys, grads, o);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias").none(), nb::arg("widths"), nb::arg("activations"),
      nb::arg("taus"), nb::arg("d_outputs"), nb::arg("dx"), nb::arg("dweight"), nb::arg("dbias").none(),
      nb::arg("impl"), nb::arg("stream"), "Projection chain backward into preallocated dx, dweight and dbias.");
  m.def(
      "output_chain_forward",
      [](In o, In g, In norm_weight, In out_weight, Out y, double eps, const std::string& impl, uintptr_t stream) {
        const OutputChainInputs in{view(o, "o"), view(g, "g"), view(norm_weight, "norm_weight"),
                                   view(out_weight, "out_weight")};
        const Tensor yv = view(y, "y");
        const auto opts = output_options(eps, impl, stream);
        nb::gil_scoped_release release;
        output_chain_forward(in, yv, opts);
      },
      nb::arg("o"), nb::arg("g"), nb::arg("norm_weight"), nb::arg("out_weight"), nb::arg("y"), nb::arg("eps"),
      nb::arg("impl"), nb::arg("stream"), "Output chain forward into a preallocated y [tokens, d_out].");
  m.def(
      "output_chain_backward",
      [](In o, In g, In norm_weight, In out_weight, In dy, Out d_o, Out dg, Out dnorm_weight, Out dout_weight,
         double eps, const std::string& impl, uintptr_t stream) {
        const OutputChainInputs in{view(o, "o"), view(g, "g"), view(norm_weight, "norm_weight"),
                                   view(out_weight, "out_weight")};
        const Tensor dyv = view(dy, "dy");
        const OutputChainGrads grads{view(d_o, "d_o"), view(dg, "dg"), view(dnorm_weight, "dnorm_weight"),
                                     view(dout_weight, "dout_weight")};
        const auto opts = output_options(eps, impl, stream);
        nb::gil_scoped_release release;
        output_chain_backward(in, dyv, grads, opts);
      },
      nb::arg("o"), nb::arg("g"), nb::arg("norm_weight"), nb::arg("out_weight"), nb::arg("dy"), nb::arg("d_o"),
      nb::arg("dg"), nb::arg("dnorm_weight"), nb::arg("dout_weight"), nb::arg("eps"), nb::arg("impl"),
      nb::arg("stream"), "Output chain backward into preallocated gradients.");
}

}  // namespace seqmix::python
