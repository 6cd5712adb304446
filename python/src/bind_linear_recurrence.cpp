#include "bindings.hpp"
#include "seqmix/error.hpp"
#include "seqmix/linear_recurrence.hpp"

namespace seqmix::python {
namespace {

LinearRecurrenceOptions recurrence_options(const std::string& method, const std::string& impl, uintptr_t stream) {
  auto o = options<LinearRecurrenceOptions>(impl, stream);
  o.method = parse_linear_recurrence_method(method);
  return o;
}

// The input dtype named as dtype_name writes it ("bf16", "f32", ...).
DType dtype_named(const std::string& name) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32, DType::f64})
    if (name == dtype_name(dtype)) return dtype;
  throw Error("seqmix.linear_recurrence: unknown dtype name '" + name + "'");
}

}  // namespace

void bind_linear_recurrence(nb::module_& m) {
  m.def(
      "linear_recurrence_forward",
      [](In A, In b, OptIn initial_state, Out h, OptOut final_state, OptOut workspace, const std::string& method,
         const std::string& impl, uintptr_t stream) {
        LinearRecurrenceInputs in{view(A, "A"), view(b, "b"), view(initial_state, "initial_state")};
        LinearRecurrenceOutputs out{view(h, "h"), view(final_state, "final_state"), view(workspace, "workspace")};
        const auto o = recurrence_options(method, impl, stream);
        nb::gil_scoped_release release;
        linear_recurrence_forward(in, out, o);
      },
      nb::arg("A"), nb::arg("b"), nb::arg("initial_state").none(), nb::arg("h"), nb::arg("final_state").none(),
      nb::arg("workspace").none(), nb::arg("method"), nb::arg("impl"), nb::arg("stream"),
      "Dense linear recurrence forward into preallocated h [G, T, n, m] and final_state [G, n, m]; CUDA "
      "scratch in workspace (f32, linear_recurrence_workspace_size elements).");
  m.def(
      "linear_recurrence_backward",
      [](In A, In b, OptIn initial_state, In dh, OptIn d_final_state, Out dA, Out db, OptOut d_initial_state,
         OptOut workspace, OptIn states, const std::string& method, const std::string& impl, uintptr_t stream) {
        LinearRecurrenceInputs in{view(A, "A"), view(b, "b"), view(initial_state, "initial_state")};
        LinearRecurrenceGrads grads{view(dA, "dA"), view(db, "db"), view(d_initial_state, "d_initial_state"),
                                    view(workspace, "workspace")};
        const Tensor dh_view = view(dh, "dh");
        const auto d_final = view(d_final_state, "d_final_state");
        const auto forward_states = view(states, "states");
        const auto o = recurrence_options(method, impl, stream);
        nb::gil_scoped_release release;
        linear_recurrence_backward(in, dh_view, d_final, grads, o, forward_states);
      },
      nb::arg("A"), nb::arg("b"), nb::arg("initial_state").none(), nb::arg("dh"), nb::arg("d_final_state").none(),
      nb::arg("dA"), nb::arg("db"), nb::arg("d_initial_state").none(), nb::arg("workspace").none(), nb::arg("states").none(),
      nb::arg("method"), nb::arg("impl"), nb::arg("stream"),
      "Dense linear recurrence backward into preallocated gradients; states (optional) is the h the forward "
      "wrote for these inputs, which the CUDA chunked backward reads instead of recomputing it.");
  m.def(
      "linear_recurrence_workspace_size",
      [](int64_t G, int64_t T, int64_t n, int64_t m, const std::string& dtype, bool backward, const std::string& method) {
        return linear_recurrence_workspace_size(G, T, n, m, dtype_named(dtype), backward,
                                                recurrence_options(method, "automatic", 0));
      },
      nb::arg("G"), nb::arg("T"), nb::arg("n"), nb::arg("m"), nb::arg("dtype"), nb::arg("backward"), nb::arg("method"),
      "f32 elements of scratch a CUDA call with these sizes, input dtype (\"bf16\", \"f32\") and method may use "
      "(at least 1).");
}

}  // namespace seqmix::python
