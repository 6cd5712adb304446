#include "seqmix/linear_recurrence.hpp"

#include <iostream>
#include <numeric>

#include "cpu/linear_recurrence_methods.hpp"
#include "test_util.hpp"

namespace seqmix::test {
namespace {

namespace recurrence = cpu::recurrence;
using Method = LinearRecurrenceMethod;
const Method kMethods[] = {Method::sequential, Method::chunked, Method::scan, Method::cyclic_reduction};

struct Shape {
  int64_t G, T, n, m;
  bool with_state;
};

// Random transitions with spectral radius well below 1 (iid entries of standard
// deviation about 0.7/√n), so states neither vanish nor blow up over T = 100.
struct Data {
  HostTensor A, b, h0;
  Data(const Shape& s, DType dtype)
      : A(uniform({s.G, s.T, s.n, s.n}, dtype, -1.2 / std::sqrt(double(s.n)), 1.2 / std::sqrt(double(s.n)))),
        b(uniform({s.G, s.T, s.n, s.m}, dtype)),
        h0(uniform({s.G, s.n, s.m}, dtype)) {}
  LinearRecurrenceInputs inputs(const Shape& s) const {
    LinearRecurrenceInputs in{A, b};
    if (s.with_state) in.initial_state = h0.view;
    return in;
  }
};

LinearRecurrenceOptions options_for(Impl impl, Method method = Method::automatic) {
  LinearRecurrenceOptions o;
  o.impl = impl;
  o.method = method;
  return o;
}

struct Forward {
  HostTensor h, final_state;
};

Forward run_forward(const Shape& s, const LinearRecurrenceInputs& in, DType dtype, const LinearRecurrenceOptions& o) {
  Forward r{poisoned({s.G, s.T, s.n, s.m}, dtype), poisoned({s.G, s.n, s.m}, dtype)};
  linear_recurrence_forward(in, {r.h.view, r.final_state.view}, o);
  return r;
}

struct Backward {
  HostTensor dA, db, dh0;
};

Backward run_backward(const Shape& s, const LinearRecurrenceInputs& in, const HostTensor& dh,
                      const HostTensor& d_final, DType dtype, const LinearRecurrenceOptions& o) {
  Backward r{poisoned({s.G, s.T, s.n, s.n}, dtype), poisoned({s.G, s.T, s.n, s.m}, dtype),
             poisoned({s.G, s.n, s.m}, dtype)};
  LinearRecurrenceGrads grads{r.dA.view, r.db.view};
  if (s.with_state) grads.d_initial_state = r.dh0.view;
  linear_recurrence_backward(in, dh, d_final.view, grads, o);
  return r;
}

TEST(LinearRecurrence, OracleMatchesHandComputedValues) {
  // n = 2, m = 1, two steps from h0 = (1, 0):
  //   h1 = [[0, 1], [2, 0]]·(1, 0) + (1, 1) = (1, 3)
  //   h2 = [[1, 1], [0, 0.5]]·(1, 3) + (0, -1) = (4, 0.5)
  HostTensor A({1, 2, 2, 2}, DType::f64), b({1, 2, 2, 1}, DType::f64), h0({1, 2, 1}, DType::f64);
  A.set({0, 1, 2, 0, 1, 1, 0, 0.5});
  b.set({1, 1, 0, -1});
  h0.set({1, 0});
  const Shape s{1, 2, 2, 1, true};
  for (Method method : kMethods) {
    auto r = run_forward(s, {A, b, h0.view}, DType::f64, options_for(Impl::automatic, method));
    EXPECT_EQ(r.h.values(), (std::vector<double>{1, 3, 4, 0.5}));
    EXPECT_EQ(r.final_state.values(), (std::vector<double>{4, 0.5}));
  }
}

// The methods differ only in the order of the arithmetic, so in float64 they agree
// to rounding, for any chunk size (1, not dividing T, larger than T) and threading.
TEST(LinearRecurrence, MethodsAgreeInFloat64) {
  using recurrence::Chain;
  for (int64_t T : {1, 2, 7, 64, 100})
    for (int64_t n : {1, 4})
      for (int64_t m : {1, 3}) {
        const Shape s{1, T, n, m, true};
        Data d(s, DType::f64);
        const auto A = d.A.values(), b = d.b.values(), h0 = d.h0.values();
        const Chain<double> chain{A.data(), b.data(), h0.data(), T, n, m};
        std::vector<double> want(T * n * m);
        recurrence::solve_sequential(chain, want.data(), {});
        for (bool parallel : {false, true}) {
          const recurrence::Workers workers{parallel};
          std::vector<double> got(want.size());
          for (int64_t chunk : {int64_t(1), int64_t(3), T + 5}) {
            recurrence::solve_chunked(chain, got.data(), chunk, workers);
            EXPECT_LT(rel_err(got, want), 1e-13) << "chunked C=" << chunk << " T=" << T << " n=" << n << " m=" << m;
          }
          recurrence::solve_scan(chain, got.data(), workers);
          EXPECT_LT(rel_err(got, want), 1e-13) << "scan T=" << T << " n=" << n << " m=" << m;
          recurrence::solve_cyclic_reduction(chain, got.data(), workers);
          EXPECT_LT(rel_err(got, want), 1e-13) << "cyclic reduction T=" << T << " n=" << n << " m=" << m;
        }
      }
}

// d/dθ of L = Σ w_h·h + Σ w_f·final_state for θ = A, b, h0, against finite differences.
TEST(LinearRecurrence, OracleBackwardMatchesFiniteDifferences) {
  for (const Shape s : {Shape{2, 5, 3, 2, true}, Shape{1, 1, 2, 1, true}, Shape{1, 6, 4, 1, false}}) {
    Data d(s, DType::f64);
    HostTensor w_h = uniform({s.G, s.T, s.n, s.m}, DType::f64), w_f = uniform({s.G, s.n, s.m}, DType::f64);
    const auto reference = options_for(Impl::reference);
    auto loss = [&] {
      auto r = run_forward(s, d.inputs(s), DType::f64, reference);
      return dot(r.h.values(), w_h.values()) + dot(r.final_state.values(), w_f.values());
    };
    auto g = run_backward(s, d.inputs(s), w_h, w_f, DType::f64, reference);
    EXPECT_LT(rel_err(g.dA.values(), finite_difference(d.A, loss)), 1e-7);
    EXPECT_LT(rel_err(g.db.values(), finite_difference(d.b, loss)), 1e-7);
    if (s.with_state) EXPECT_LT(rel_err(g.dh0.values(), finite_difference(d.h0, loss)), 1e-7);
  }
}

struct MethodCase {
  Method method;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<MethodCase>& info) {
  return std::string(linear_recurrence_method_name(info.param.method)) + "_" + dtype_name(info.param.dtype);
}

class LinearRecurrenceMethods : public ::testing::TestWithParam<MethodCase> {};

// Every method, forward and backward, in float32 against the float64 oracle on the
// same stored inputs. The last shapes are large enough for the methods to run their
// pieces on several threads (G = 1); the small ones run whole groups per thread.
TEST_P(LinearRecurrenceMethods, FastMatchesOracle) {
  const auto [method, dtype] = GetParam();
  std::vector<Shape> shapes;
  for (int64_t T : {1, 2, 7, 64, 100})
    for (int64_t n : {1, 4})
      for (int64_t m : {1, 3})
        for (bool with_state : {false, true}) shapes.push_back({T % 2 ? 3 : 1, T, n, m, with_state});
  shapes.push_back({1, 100, 16, 8, true});
  shapes.push_back({1, 77, 12, 1, false});
  for (const Shape& s : shapes) {
    SCOPED_TRACE("G=" + std::to_string(s.G) + " T=" + std::to_string(s.T) + " n=" + std::to_string(s.n) +
                 " m=" + std::to_string(s.m) + (s.with_state ? " with h0" : ""));
    Data d(s, dtype);
    const auto fast = options_for(Impl::fast, method), reference = options_for(Impl::reference, method);
    auto got = run_forward(s, d.inputs(s), dtype, fast), want = run_forward(s, d.inputs(s), dtype, reference);
    EXPECT_LT(rel_err(got.h, want.h), tolerance(dtype));
    // A single short chain (n = m = 1) can end on a state much smaller than the ones
    // before it, so its last value alone carries a larger relative error (1.9e-5 in f32
    // was seen on a 16-core machine); the whole trajectory above keeps the tight bound.
    EXPECT_LT(rel_err(got.final_state, want.final_state), 10 * tolerance(dtype));

    HostTensor dh = uniform({s.G, s.T, s.n, s.m}, dtype), d_final = uniform({s.G, s.n, s.m}, dtype);
    auto g = run_backward(s, d.inputs(s), dh, d_final, dtype, fast);
    auto g_ref = run_backward(s, d.inputs(s), dh, d_final, dtype, reference);
    EXPECT_LT(rel_err(g.dA, g_ref.dA), tolerance(dtype));
    EXPECT_LT(rel_err(g.db, g_ref.db), tolerance(dtype));
    if (s.with_state) EXPECT_LT(rel_err(g.dh0, g_ref.dh0), tolerance(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LinearRecurrenceMethods,
                         ::testing::Values(MethodCase{Method::sequential, DType::f32},
                                           MethodCase{Method::chunked, DType::f32},
                                           MethodCase{Method::scan, DType::f32},
                                           MethodCase{Method::cyclic_reduction, DType::f32},
                                           MethodCase{Method::automatic, DType::f32},
                                           MethodCase{Method::sequential, DType::bf16},
                                           MethodCase{Method::chunked, DType::bf16},
                                           MethodCase{Method::scan, DType::bf16},
                                           MethodCase{Method::cyclic_reduction, DType::bf16},
                                           MethodCase{Method::chunked, DType::f16}),
                         case_name);

// Transitions 0.999·Q_t with Q_t orthogonal keep every state's norm for hundreds of
// steps, so rounding errors are not damped: the hardest case for the reordered
// arithmetic of the parallel methods. Prints the relative error of each method.
TEST(LinearRecurrence, SpectralRadiusNearOne) {
  const Shape s{1, 1000, 8, 2, true};
  Data d(s, DType::f32);
  std::vector<double> A = d.A.values();
  for (int64_t t = 0; t < s.T; ++t) {  // Gram–Schmidt on the rows, then scale
    double* Q = A.data() + t * s.n * s.n;
    for (int64_t i = 0; i < s.n; ++i) {
      for (int64_t k = 0; k < i; ++k) {
        const double proj = std::inner_product(Q + i * s.n, Q + (i + 1) * s.n, Q + k * s.n, 0.0);
        for (int64_t j = 0; j < s.n; ++j) Q[i * s.n + j] -= proj * Q[k * s.n + j];
      }
      const double norm = std::sqrt(std::inner_product(Q + i * s.n, Q + (i + 1) * s.n, Q + i * s.n, 0.0));
      for (int64_t j = 0; j < s.n; ++j) Q[i * s.n + j] *= 0.999 / norm;
    }
  }
  d.A.set(A);
  HostTensor dh = uniform({s.G, s.T, s.n, s.m}, DType::f32), d_final = uniform({s.G, s.n, s.m}, DType::f32);
  const auto reference = options_for(Impl::reference);
  auto want = run_forward(s, d.inputs(s), DType::f32, reference);
  auto g_want = run_backward(s, d.inputs(s), dh, d_final, DType::f32, reference);
  for (Method method : kMethods) {
    const auto fast = options_for(Impl::fast, method);
    auto got = run_forward(s, d.inputs(s), DType::f32, fast);
    auto g = run_backward(s, d.inputs(s), dh, d_final, DType::f32, fast);
    const double h_err = rel_err(got.h, want.h), dA_err = rel_err(g.dA, g_want.dA), db_err = rel_err(g.db, g_want.db);
    std::cout << "  radius 0.999, T=1000, n=8, m=2, f32: " << linear_recurrence_method_name(method)
              << " rel err h " << h_err << ", dA " << dA_err << ", db " << db_err << "\n";
    RecordProperty(std::string(linear_recurrence_method_name(method)) + "_h_rel_err", std::to_string(h_err));
    EXPECT_LT(h_err, 1e-4);
    EXPECT_LT(dA_err, 1e-4);
    EXPECT_LT(db_err, 1e-4);
  }
}

// Padded rows (last dimension contiguous, others not) in an input and an output give
// the same result as contiguous arrays, which the float32 path uses in place.
TEST(LinearRecurrence, StridedTensorsMatchContiguous) {
  const Shape s{2, 9, 3, 2, true};
  Data d(s, DType::f32);
  auto padded = [](HostTensor& storage, std::vector<int64_t> shape) {
    Tensor view = storage.view;
    view.shape = std::move(shape);
    return view;
  };
  HostTensor A_storage({s.G, s.T, s.n, s.n + 5}, DType::f32), h_storage({s.G, s.T, s.n, s.m + 3}, DType::f32);
  const Tensor A_strided = padded(A_storage, {s.G, s.T, s.n, s.n}), h_strided = padded(h_storage, {s.G, s.T, s.n, s.m});
  core::from_dense(d.A.values(), A_strided);
  h_storage.poison();
  linear_recurrence_forward({A_strided, d.b, d.h0.view}, {h_strided}, options_for(Impl::fast));
  auto want = run_forward(s, d.inputs(s), DType::f32, options_for(Impl::fast));
  EXPECT_EQ(core::to_dense<double>(h_strided), want.h.values());
}

// The float32 path flushes subnormals only on its own threads, for its own duration.
TEST(LinearRecurrence, LeavesTheCallersSubnormalsAlone) {
  const Shape s{1, 50, 4, 1, false};
  Data d(s, DType::f32);
  run_forward(s, d.inputs(s), DType::f32, options_for(Impl::fast, Method::scan));
  volatile float tiny = 1e-38f;
  EXPECT_GT(tiny * 0.5f, 0.0f);
}

TEST(LinearRecurrenceErrors, EveryBadInputNamesTheArgument) {
  const DType f32 = DType::f32;
  HostTensor A = uniform({2, 8, 4, 4}, f32), b = uniform({2, 8, 4, 3}, f32), h0 = uniform({2, 4, 3}, f32);
  HostTensor h({2, 8, 4, 3}, f32), final_state({2, 4, 3}, f32);
  const LinearRecurrenceOutputs out{h.view, final_state.view};
  auto forward = [&](const Tensor& A_, const Tensor& b_, std::optional<Tensor> h0_ = std::nullopt,
                     const LinearRecurrenceOutputs& out_ = {}) {
    linear_recurrence_forward({A_, b_, h0_}, out_.h.data ? out_ : LinearRecurrenceOutputs{h.view}, {});
  };
  HostTensor A_rank3 = uniform({2, 8, 16}, f32), A_rect = uniform({2, 8, 4, 3}, f32);
  HostTensor A_int({2, 8, 4, 4}, DType::i32), b_bf16 = uniform({2, 8, 4, 3}, DType::bf16);
  HostTensor b_n5 = uniform({2, 8, 5, 3}, f32), b_T7 = uniform({2, 7, 4, 3}, f32);
  HostTensor h0_m2 = uniform({2, 4, 2}, f32), h0_f64 = uniform({2, 4, 3}, DType::f64);
  EXPECT_SEQMIX_ERROR(forward(A_rank3, b),
                      "seqmix.linear_recurrence: argument 'A': expected 4 dimensions [G, T, n, n], got 3 dimensions "
                      "[2, 8, 16]");
  EXPECT_SEQMIX_ERROR(forward(A_rect, b),
                      "argument 'A': expected square transitions [G, T, n, n] (size 2 equal to size 3), got "
                      "[2, 8, 4, 3]");
  EXPECT_SEQMIX_ERROR(forward(A_int, b), "argument 'A': expected dtype bf16 or f16 or f32 or f64, got int32");
  EXPECT_SEQMIX_ERROR(forward(A, b_bf16), "argument 'b': expected dtype f32 (the dtype of A), got bf16");
  EXPECT_SEQMIX_ERROR(forward(A, b_n5), "argument 'b': expected shape [2, 8, 4, 3] [G, T, n, m], got [2, 8, 5, 3]");
  EXPECT_SEQMIX_ERROR(forward(A, b_T7), "argument 'b': expected shape [2, 8, 4, 3] [G, T, n, m], got [2, 7, 4, 3]");
  EXPECT_SEQMIX_ERROR(forward(A, b, h0_m2.view),
                      "argument 'initial_state': expected shape [2, 4, 3] [G, n, m], got [2, 4, 2]");
  EXPECT_SEQMIX_ERROR(forward(A, b, h0_f64.view),
                      "argument 'initial_state': expected dtype f32 (the dtype of A), got f64");

  Tensor strided = A.view;
  strided.strides = {256, 32, 8, 2};
  EXPECT_SEQMIX_ERROR(forward(strided, b),
                      "argument 'A': expected stride 1 in the last dimension, got strides [256, 32, 8, 2]");
  Tensor b_gpu = b.view, A_gpu = A.view;
  b_gpu.device = A_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(forward(A, b_gpu), "argument 'b': expected device cpu (the device of the first input), got cuda:0");
  Tensor h_gpu = h.view;
  h_gpu.device = Device::cuda(0);
#ifdef SEQMIX_CUDA_LINEAR_RECURRENCE  // the CUDA path checks what its kernels take (n = 4 is too small)
  EXPECT_SEQMIX_ERROR(forward(A_gpu, b_gpu, std::nullopt, {h_gpu}),
                      "argument 'A': expected a state size n that is a multiple of 8 and at most 128 on a CUDA device");
#else
  EXPECT_SEQMIX_ERROR(forward(A_gpu, b_gpu, std::nullopt, {h_gpu}),
                      "argument 'device': expected a CPU tensor (this op has no CUDA kernel in this build), got cuda:0");
#endif

  HostTensor A_T0({2, 0, 4, 4}, f32), b_T0({2, 0, 4, 3}, f32);
  EXPECT_SEQMIX_ERROR(forward(A_T0, b_T0), "argument 'A': expected sequence length T >= 1, got sequence length T = 0");
  HostTensor A_G0({0, 8, 4, 4}, f32), b_G0({0, 8, 4, 3}, f32);
  EXPECT_SEQMIX_ERROR(forward(A_G0, b_G0), "argument 'A': expected groups G >= 1, got groups G = 0");
  HostTensor A_n0({2, 8, 0, 0}, f32), b_n0({2, 8, 0, 3}, f32);
  EXPECT_SEQMIX_ERROR(forward(A_n0, b_n0), "argument 'A': expected state size n >= 1, got state size n = 0");
  HostTensor b_m0({2, 8, 4, 0}, f32);
  EXPECT_SEQMIX_ERROR(forward(A, b_m0), "argument 'b': expected state columns m >= 1, got state columns m = 0");

  HostTensor h_short({2, 7, 4, 3}, f32), final_bf16({2, 4, 3}, DType::bf16);
  EXPECT_SEQMIX_ERROR(forward(A, b, std::nullopt, {h_short.view}),
                      "argument 'h': expected shape [2, 8, 4, 3] [G, T, n, m], got [2, 7, 4, 3]");
  EXPECT_SEQMIX_ERROR(forward(A, b, std::nullopt, {h.view, final_bf16.view}),
                      "argument 'final_state': expected dtype f32 (the dtype of A), got bf16");

  LinearRecurrenceOptions negative_chunk;
  negative_chunk.chunk_size = -4;
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({A, b}, out, negative_chunk),
                      "argument 'chunk_size': expected chunk_size >= 0 (0 picks one), got chunk_size = -4");
  EXPECT_SEQMIX_ERROR(parse_linear_recurrence_method("fastest"),
                      "argument 'method': expected one of auto, sequential, chunked, scan, cyclic_reduction, got "
                      "'fastest'");
  EXPECT_EQ(parse_linear_recurrence_method("auto"), Method::automatic);
  EXPECT_EQ(parse_linear_recurrence_method("cyclic_reduction"), Method::cyclic_reduction);
}

TEST(LinearRecurrenceErrors, BackwardGradientsAreChecked) {
  const DType f32 = DType::f32;
  HostTensor A = uniform({2, 8, 4, 4}, f32), b = uniform({2, 8, 4, 3}, f32), h0 = uniform({2, 4, 3}, f32);
  HostTensor dh = uniform({2, 8, 4, 3}, f32), dA({2, 8, 4, 4}, f32), db({2, 8, 4, 3}, f32), dh0({2, 4, 3}, f32);
  HostTensor dh_short({2, 5, 4, 3}, f32), dA_rect({2, 8, 4, 3}, f32), d_final_bad({2, 3, 3}, f32);
  const char* op = "seqmix.linear_recurrence_backward: ";
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh_short, std::nullopt, {dA.view, db.view}),
                      std::string(op) + "argument 'dh': expected shape [2, 8, 4, 3] [G, T, n, m], got [2, 5, 4, 3]");
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh, std::nullopt, {dA_rect.view, db.view}),
                      "argument 'dA': expected shape [2, 8, 4, 4] [G, T, n, n], got [2, 8, 4, 3]");
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh, d_final_bad.view, {dA.view, db.view}),
                      "argument 'd_final_state': expected shape [2, 4, 3] [G, n, m], got [2, 3, 3]");
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b, h0.view}, dh, std::nullopt, {dA.view, db.view}),
                      "argument 'd_initial_state': expected a tensor (initial_state is given), got none");
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh, std::nullopt, {dA.view, db.view, dh0.view}),
                      "argument 'd_initial_state': expected none (initial_state is not given), got a tensor");
  // The forward's states, when given: the shape of h and the inputs' dtype.
  HostTensor states_short({2, 7, 4, 3}, f32), states_f64({2, 8, 4, 3}, DType::f64);
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh, std::nullopt, {dA.view, db.view}, {}, states_short.view),
                      "argument 'states': expected shape [2, 8, 4, 3] [G, T, n, m], got [2, 7, 4, 3]");
  EXPECT_SEQMIX_ERROR(linear_recurrence_backward({A, b}, dh, std::nullopt, {dA.view, db.view}, {}, states_f64.view),
                      "argument 'states': expected dtype f32 (the dtype of A), got f64");
}

}  // namespace
}  // namespace seqmix::test
