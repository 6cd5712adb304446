#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "cuda/gated_scan/params.hpp"  // the tile length (plain C++)
#include "seqmix/gated_scan.hpp"
#include "seqmix/gated_scan_layer.hpp"

namespace seqmix::python {

void bind_gated_scan(nb::module_& m) {
  m.def(
      "gated_scan_forward",
      [](In a, In b, OptIn z, OptIn initial_state, OptIn cu_seqlens, Out y, OptOut final_state, OptOut workspace,
         OptOut tile_states, const std::string& decay, const std::string& impl, uintptr_t stream) {
        GatedScanInputs in{view(a, "a"), view(b, "b"), view(z, "z"), view(initial_state, "initial_state"),
                           view(cu_seqlens, "cu_seqlens")};
        GatedScanOutputs out{view(y, "y"), view(final_state, "final_state"), view(workspace, "workspace"),
                             view(tile_states, "tile_states")};
        auto o = options<GatedScanOptions>(impl, stream);
        o.decay = parse_decay(decay);
        nb::gil_scoped_release release;
        gated_scan_forward(in, out, o);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("z").none(), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("y"), nb::arg("final_state").none(), nb::arg("workspace").none(),
      nb::arg("tile_states").none(), nb::arg("decay"),
      nb::arg("impl"), nb::arg("stream"), "Gated scan forward into preallocated y [B, T, D] and final_state [N, D].");
  m.def(
      "gated_scan_backward",
      [](In a, In b, OptIn z, OptIn initial_state, OptIn cu_seqlens, In dy, OptIn d_final_state, Out da, Out db,
         OptOut dz, OptOut d_initial_state, OptOut workspace, OptIn tile_states, const std::string& decay, const std::string& impl,
         uintptr_t stream) {
        GatedScanInputs in{view(a, "a"), view(b, "b"), view(z, "z"), view(initial_state, "initial_state"),
                           view(cu_seqlens, "cu_seqlens")};
        GatedScanGrads grads{view(da, "da"), view(db, "db"), view(dz, "dz"), view(d_initial_state, "d_initial_state"),
                             view(workspace, "workspace"), view(tile_states, "tile_states")};
        auto o = options<GatedScanOptions>(impl, stream);
        o.decay = parse_decay(decay);
        const Tensor dy_view = view(dy, "dy");
        const auto dhT = view(d_final_state, "d_final_state");
        nb::gil_scoped_release release;
        gated_scan_backward(in, dy_view, dhT, grads, o);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("z").none(), nb::arg("initial_state").none(),
      nb::arg("cu_seqlens").none(), nb::arg("dy"), nb::arg("d_final_state").none(), nb::arg("da"), nb::arg("db"),
      nb::arg("dz").none(), nb::arg("d_initial_state").none(), nb::arg("workspace").none(), nb::arg("tile_states").none(),
      nb::arg("decay"), nb::arg("impl"), nb::arg("stream"),
      "Gated scan backward into preallocated gradients (workspace: f32 scratch, CUDA only).");
  m.def(
      "gated_scan_layer_forward",
      [](In x, In weight, Out y, Out workspace, const std::string& decay, const std::string& impl, uintptr_t stream) {
        auto o = options<GatedScanLayerOptions>(impl, stream);
        o.decay = parse_decay(decay);
        const Tensor x_view = view(x, "x"), weight_view = view(weight, "weight");
        const Tensor y_view = view(y, "y"), workspace_view = view(workspace, "workspace");
        nb::gil_scoped_release release;
        gated_scan_layer_forward(x_view, weight_view, y_view, workspace_view, o);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("y"), nb::arg("workspace"), nb::arg("decay"), nb::arg("impl"),
      nb::arg("stream"), "The gated-scan layer kernel (projection, scan, gate) into preallocated y [B, T, D].");
  m.def("gated_scan_layer_workspace_size", &gated_scan_layer_workspace_size, nb::arg("B"), nb::arg("T"),
        nb::arg("D"), "Elements of the f32 workspace of the layer kernel.");
  m.def(
      "gated_scan_layer_fits",
      [](int64_t B, int64_t T, int64_t D, int dtype) { return gated_scan_layer_fits(B, T, D, static_cast<DType>(dtype)); },
      nb::arg("B"), nb::arg("T"), nb::arg("D"), nb::arg("dtype_code"),
      "Whether the layer kernel's grid fits on the current CUDA device (dtype_code: seqmix::DType's value).");
  m.attr("GATED_SCAN_TILE_STEPS") = cuda::kScanTileSteps;
  m.def("gated_scan_tile_states_shape", &gated_scan_tile_states_shape, nb::arg("B"), nb::arg("T"), nb::arg("N"),
        nb::arg("D"), "Shape [rows, D] of the tile states a CUDA forward keeps for the backward.");
  m.def("gated_scan_workspace_size", &gated_scan_workspace_size, nb::arg("B"), nb::arg("T"), nb::arg("N"),
        nb::arg("D"), "Elements of the f32 workspace a CUDA call may use.");
}

}  // namespace seqmix::python
