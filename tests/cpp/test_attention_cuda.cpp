// The CUDA attention forward against the float64 oracle (the CPU reference on the same
// stored inputs), outputs poisoned first, under each of the three forward schedules. Cases
// named Small* are the ones the GPU check runs under compute-sanitizer. The backward likewise,
// the Hopper backward under both of its schedules (D = 256: its one schedule). Last, timings
// side by side at the D = 128 shapes: the pingpong and persistent forward schedules,
// both backward schedules.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/attention/params.hpp"
#include "cuda_util.hpp"
#include "seqmix/attention.hpp"

namespace seqmix::cuda {
// Test names and messages say which schedule ran.
void PrintTo(AttentionForwardSchedule schedule, std::ostream* os) {
  *os << (schedule == AttentionForwardSchedule::by_shape     ? "by_shape"
          : schedule == AttentionForwardSchedule::persistent ? "persistent"
          : schedule == AttentionForwardSchedule::pingpong   ? "pingpong"
                                                              : "standard");
}
void PrintTo(AttentionBackwardSchedule schedule, std::ostream* os) {
  *os << (schedule == AttentionBackwardSchedule::pingpong ? "pingpong" : "standard");
}
}  // namespace seqmix::cuda

namespace seqmix::test {
namespace {

struct GpuAttnCase {
  const char* name;
  int64_t B, Sq, Sk, Hq, Hkv, D;
  DType dtype;
  bool causal;
  std::vector<int64_t> cu_q, cu_k;  // non-empty: variable length (B = 1)
  int64_t pad = 0;                  // q, k, v, out read through views of rows D + pad wide
  DType cu_dtype = DType::i32;
  double scale = 0.0;  // softmax scale; 0: 1/sqrt(D)
};

void PrintTo(const GpuAttnCase& c, std::ostream* os) { *os << c.name; }

bool varlen(const GpuAttnCase& c) { return !c.cu_q.empty(); }

std::vector<int64_t> rows_shape(const GpuAttnCase& c, int64_t S, const std::vector<int64_t>& cu, int64_t H,
                                int64_t width) {
  if (varlen(c)) return {cu.back(), H, width};
  return {c.B, S, H, width};
}

// A host tensor `width` wide in its last dim, and the view of its first `dim` columns.
struct Operand {
  HostTensor storage;
  Tensor view;
  Operand(std::vector<int64_t> shape, int64_t dim, DType dtype, bool poison)
      : storage(poison ? poisoned(shape, dtype) : uniform(shape, dtype, -2, 2)) {
    view = storage.view;
    view.shape.back() = dim;
  }
};

// The view `host` describes, over the device copy's bytes.
Tensor on_device(const DeviceTensor& dev, const Tensor& host_view, const HostTensor& host) {
  Tensor t = host_view;
  t.data = static_cast<char*>(dev.ptr) + (static_cast<const char*>(host_view.data) -
                                          reinterpret_cast<const char*>(host.storage.data()));
  t.device = Device::cuda(0);
  return t;
}

// LSE rows that see no key must be −inf in both; the rest compare by relative norm.
double lse_error(const std::vector<double>& got, const std::vector<double>& want) {
  std::vector<double> g, w;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && want[i] < 0) {
      if (!(std::isinf(got[i]) && got[i] < 0)) return INFINITY;
      continue;
    }
    g.push_back(got[i]);
    w.push_back(want[i]);
  }
  return g.empty() ? 0.0 : rel_err(g, w);
}

using cuda::AttentionForwardSchedule;

const char* schedule_name(AttentionForwardSchedule schedule) {
  return schedule == AttentionForwardSchedule::by_shape     ? "by_shape"
         : schedule == AttentionForwardSchedule::persistent ? "persistent"
         : schedule == AttentionForwardSchedule::pingpong   ? "pingpong"
                                                             : "standard";
}

// Sets a process-wide kernel choice (the getter's and setter's) while in scope, then puts
// the value before it back.
template <class Value, Value (*kGet)(), void (*kSet)(Value)>
struct ChoiceScope {
  Value before = kGet();
  explicit ChoiceScope(Value value) { kSet(value); }
  ~ChoiceScope() { kSet(before); }
  ChoiceScope(const ChoiceScope&) = delete;
  ChoiceScope& operator=(const ChoiceScope&) = delete;
};

// The forward's schedule.
using ForwardSchedule = ChoiceScope<AttentionForwardSchedule, cuda::attention_forward_schedule,
                                    cuda::attention_set_forward_schedule>;
// The D = 64 forward's consumer warpgroups (0: by shape).
using ForwardWarpgroups =
    ChoiceScope<int, cuda::attention_forward_warpgroups, cuda::attention_set_forward_warpgroups>;
// The D = 128 forward's first key block narrow (or not).
using ForwardNarrowFirst =
    ChoiceScope<bool, cuda::attention_forward_narrow_first, cuda::attention_set_forward_narrow_first>;
// The forward's lazy rescale on (or off).
using ForwardLazyRescale =
    ChoiceScope<bool, cuda::attention_forward_lazy_rescale, cuda::attention_set_forward_lazy_rescale>;
// The non-persistent forward's output through shared memory (or direct stores).
using ForwardStagedOutput =
    ChoiceScope<bool, cuda::attention_forward_staged_output, cuda::attention_set_forward_staged_output>;
// The non-persistent causal forward's tiles in the sectioned list order (or the 3-D grid's).
using ForwardSections = ChoiceScope<bool, cuda::attention_forward_sections, cuda::attention_set_forward_sections>;

using cuda::AttentionBackwardSchedule;

const char* schedule_name(AttentionBackwardSchedule schedule) {
  return schedule == AttentionBackwardSchedule::pingpong ? "pingpong" : "standard";
}

// The Hopper backward's schedule.
using BackwardSchedule = ChoiceScope<AttentionBackwardSchedule, cuda::attention_backward_schedule,
                                     cuda::attention_set_backward_schedule>;
using cuda::AttentionDeterministicBackward;

const char* deterministic_name(AttentionDeterministicBackward form) {
  return form == AttentionDeterministicBackward::ordered ? "ordered" : "two_kernel";
}

// A form of the backward: the Hopper kernel's schedule and key-block pairs (D = 256 under
// pingpong), or deterministic in one of its forms.
struct BackwardForm {
  AttentionBackwardSchedule schedule;
  bool pairs = false;
  bool deterministic = false;
  AttentionDeterministicBackward deterministic_form = AttentionDeterministicBackward::ordered;
  bool staged_store = true;  // dK and dV by tensor copies where they can be
  bool sections = false;     // causal key blocks in the sectioned 1-D grid
};

const char* form_name(BackwardForm form) {
  if (form.deterministic) return deterministic_name(form.deterministic_form);
  if (!form.staged_store) return "stores";
  if (form.sections) return "pingpong_sections";
  return form.pairs ? "pingpong_pairs" : schedule_name(form.schedule);
}

void PrintTo(BackwardForm form, std::ostream* os) { *os << form_name(form); }

// Runs the backward in `form` while in scope (the caller passes form.deterministic in the
// options), then puts the process's choices back.
// The Hopper backward's dK and dV by tensor copies (or stores).
using BackwardStagedStore =
    ChoiceScope<bool, cuda::attention_backward_staged_store, cuda::attention_set_backward_staged_store>;
// The Hopper backward's causal key blocks in the sectioned 1-D grid (or the 3-D grid).
using BackwardSections = ChoiceScope<bool, cuda::attention_backward_sections, cuda::attention_set_backward_sections>;

struct BackwardFormScope {
  BackwardSchedule schedule;
  BackwardStagedStore staged_store;
  BackwardSections sections;
  bool pairs_before = cuda::attention_backward_key_pairs();
  AttentionDeterministicBackward deterministic_before = cuda::attention_deterministic_backward();
  explicit BackwardFormScope(BackwardForm form)
      : schedule(form.schedule), staged_store(form.staged_store), sections(form.sections) {
    cuda::attention_set_backward_key_pairs(form.pairs);
    cuda::attention_set_deterministic_backward(form.deterministic_form);
  }
  ~BackwardFormScope() {
    cuda::attention_set_backward_key_pairs(pairs_before);
    cuda::attention_set_deterministic_backward(deterministic_before);
  }
};

// The deterministic backward in `form`.
BackwardForm deterministic_form(AttentionDeterministicBackward form) {
  return {AttentionBackwardSchedule::pingpong, false, true, form};
}

// The forward of case `c` on the device against the float64 oracle (outputs poisoned first).
void check_forward_against_oracle(const GpuAttnCase& c) {
  const int64_t width = c.D + c.pad;
  Operand q(rows_shape(c, c.Sq, c.cu_q, c.Hq, width), c.D, c.dtype, false);
  Operand k(rows_shape(c, c.Sk, c.cu_k, c.Hkv, width), c.D, c.dtype, false);
  Operand v(rows_shape(c, c.Sk, c.cu_k, c.Hkv, width), c.D, c.dtype, false);
  Operand out(rows_shape(c, c.Sq, c.cu_q, c.Hq, width), c.D, c.dtype, true);
  HostTensor lse = poisoned(varlen(c) ? std::vector<int64_t>{c.Hq, c.cu_q.back()}
                                      : std::vector<int64_t>{c.B, c.Hq, c.Sq},
                            DType::f32);
  HostTensor cu_q = offsets(varlen(c) ? c.cu_q : std::vector<int64_t>{0, 1}, c.cu_dtype);
  HostTensor cu_k = offsets(varlen(c) ? c.cu_k : std::vector<int64_t>{0, 1}, c.cu_dtype);

  AttentionOptions options;
  options.causal = c.causal;
  options.scale = c.scale;
  AttentionInputs host_in{q.view, k.view, v.view};
  if (varlen(c)) {
    host_in.cu_seqlens_q = cu_q.view;
    host_in.cu_seqlens_k = cu_k.view;
    for (size_t i = 1; i < c.cu_q.size(); ++i) {
      host_in.max_seqlen_q = std::max(host_in.max_seqlen_q, c.cu_q[i] - c.cu_q[i - 1]);
      host_in.max_seqlen_k = std::max(host_in.max_seqlen_k, c.cu_k[i] - c.cu_k[i - 1]);
    }
  }

  DeviceTensor dq(q.storage), dk(k.storage), dv(v.storage), dout(out.storage), dlse(lse), dcu_q(cu_q), dcu_k(cu_k);
  AttentionInputs dev_in = host_in;
  dev_in.q = on_device(dq, q.view, q.storage);
  dev_in.k = on_device(dk, k.view, k.storage);
  dev_in.v = on_device(dv, v.view, v.storage);
  if (varlen(c)) {
    dev_in.cu_seqlens_q = dcu_q.view;
    dev_in.cu_seqlens_k = dcu_k.view;
  }
  attention_forward(dev_in, {on_device(dout, out.view, out.storage), dlse.view}, options);
  cuda_ok(cudaDeviceSynchronize());

  // The oracle on the host, into the host buffers (after the device results are read back).
  HostTensor got_lse(lse.view.shape, DType::f32);
  dlse.values(got_lse);
  HostTensor got_out_storage(out.storage.view.shape, c.dtype);
  dout.values(got_out_storage);
  Tensor got_out = got_out_storage.view;
  got_out.shape.back() = c.D;
  options.impl = Impl::reference;
  attention_forward(host_in, {out.view, lse.view}, options);

  const std::vector<double> got = core::to_dense<double>(got_out), want = core::to_dense<double>(out.view);
  for (double x : got) ASSERT_TRUE(std::isfinite(x)) << "an output element is not finite (unwritten?)";
  EXPECT_LT(rel_err(got, want), tolerance(c.dtype));
  EXPECT_LT(lse_error(got_lse.values(), lse.values()), 1e-4);
  if (c.pad > 0) {  // the columns past D of out stay poisoned: nothing wrote past a row
    const std::vector<double> all = got_out_storage.values();
    for (size_t i = 0; i < all.size(); ++i)
      if (static_cast<int64_t>(i % width) >= c.D) ASSERT_TRUE(std::isnan(all[i])) << "write past the head dim";
  }
}

// The name of a (case, schedule) test instance: the case's name, then the schedule's.
struct CaseAndSchedule {
  template <class Param>
  std::string operator()(const ::testing::TestParamInfo<Param>& info) const {
    return std::string(std::get<0>(info.param).name) + "_" + schedule_name(std::get<1>(info.param));
  }
};

class AttentionCuda : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionForwardSchedule>> {};

TEST_P(AttentionCuda, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(std::get<1>(GetParam()));
  const ForwardWarpgroups warpgroups(2);  // D = 64's one and three are the tests below
  check_forward_against_oracle(std::get<0>(GetParam()));
}

// D = 64 cases for the forward's other consumer warpgroup counts.
std::vector<GpuAttnCase> d64_forward_cases() {
  return {
    GpuAttnCase{"Small_bf16_d64_causal", 2, 130, 130, 2, 2, 64, DType::bf16, true, {}, {}},
    // 400 rows: two tiles of 192 and one of 16; keys in blocks of 128 (four, the last of 16).
    GpuAttnCase{"Small_bf16_d64_S400", 2, 400, 400, 2, 1, 64, DType::bf16, false, {}, {}},
    // Bottom-right causal with Sq < Sk: the tile's last rows see more key blocks.
    GpuAttnCase{"Small_f16_d64_causal_Sq200_Sk500", 1, 200, 500, 4, 2, 64, DType::f16, true, {}, {}},
    GpuAttnCase{"Small_f16_d64_varlen_i64", 1, 0, 0, 2, 2, 64, DType::f16, false, {0, 63, 64, 300},
                {0, 129, 130, 200}, 0, DType::i64},
    GpuAttnCase{"Small_bf16_d64_large_scale", 2, 70, 90, 2, 1, 64, DType::bf16, false, {}, {}, 0, DType::i32,
                0.6},
    GpuAttnCase{"Small_bf16_d64_S1", 3, 1, 1, 2, 2, 64, DType::bf16, true, {}, {}},
    GpuAttnCase{"bf16_d64_S777_causal", 1, 777, 900, 4, 4, 64, DType::bf16, true, {}, {}},
    GpuAttnCase{"bf16_d64_varlen_causal", 1, 0, 0, 4, 2, 64, DType::bf16, true, {0, 1, 190, 600, 601},
                {0, 5, 300, 700, 900}},
    // More tiles than SMs: persistent CTAs walk several tiles (more than one wave at one
      // warpgroup).
    GpuAttnCase{"f16_d64_causal_gqa8_tiles240", 2, 600, 600, 24, 3, 64, DType::f16, true, {}, {}},
    GpuAttnCase{"bf16_d64_strided_tiles192", 2, 1100, 1100, 16, 4, 64, DType::bf16, false, {}, {}, 64}};
}

// The D = 64 forward with three consumer warpgroups (192 query rows a CTA, turns in a ring)
// under both schedules that take turns.
class AttentionCudaThreeWarpgroups
    : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionForwardSchedule>> {};

TEST_P(AttentionCudaThreeWarpgroups, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(std::get<1>(GetParam()));
  const ForwardWarpgroups warpgroups(3);
  check_forward_against_oracle(std::get<0>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaThreeWarpgroups,
    ::testing::Combine(::testing::ValuesIn(d64_forward_cases()),
                       ::testing::Values(AttentionForwardSchedule::pingpong, AttentionForwardSchedule::persistent)),
    CaseAndSchedule());

// The D = 64 forward with one consumer warpgroup (64 query rows a CTA, no turns; pingpong
// only).
class AttentionCudaOneWarpgroup : public ::testing::TestWithParam<GpuAttnCase> {};

TEST_P(AttentionCudaOneWarpgroup, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(AttentionForwardSchedule::pingpong);
  const ForwardWarpgroups warpgroups(1);
  check_forward_against_oracle(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionCudaOneWarpgroup, ::testing::ValuesIn(d64_forward_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCuda,
    ::testing::Combine(::testing::Values(
        GpuAttnCase{"Small_bf16_d128_S100", 2, 100, 100, 2, 2, 128, DType::bf16, false, {}, {}},
        // Key blocks of 128 and 176: five and four, so both K/V stages are reused.
        GpuAttnCase{"Small_bf16_d128_Sq64_Sk600", 1, 64, 600, 1, 1, 128, DType::bf16, false, {}, {}},
        GpuAttnCase{"Small_f16_d128_causal_Sq130_Sk700", 1, 130, 700, 2, 1, 128, DType::f16, true, {}, {}},
        GpuAttnCase{"Small_f16_d128_causal_gqa4_Sq77_Sk200", 2, 77, 200, 8, 2, 128, DType::f16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d128_causal_Sq150_Sk60", 1, 150, 60, 2, 1, 128, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d128_S1", 3, 1, 1, 2, 2, 128, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d64_causal", 2, 130, 130, 2, 2, 64, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_f16_d256_causal", 1, 200, 200, 2, 1, 256, DType::f16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d128_varlen_causal", 1, 0, 0, 4, 2, 128, DType::bf16, true,
                    {0, 1, 130, 400, 401}, {0, 5, 200, 330, 600}},
        GpuAttnCase{"Small_f16_d64_varlen_i64", 1, 0, 0, 2, 2, 64, DType::f16, false, {0, 63, 64, 300},
                    {0, 129, 130, 200}, 0, DType::i64},
        GpuAttnCase{"Small_bf16_d128_strided", 2, 90, 140, 4, 2, 128, DType::bf16, true, {}, {}, 64},
        // A negative scale: the row maximum of the scaled scores is the scale times the row
        // minimum of the raw ones, and masked scores must still vanish.
        GpuAttnCase{"Small_f16_d128_causal_negative_scale", 1, 150, 200, 2, 1, 128, DType::f16, true, {}, {}, 0,
                    DType::i32, -0.11},
        GpuAttnCase{"Small_bf16_d64_large_scale", 2, 70, 90, 2, 1, 64, DType::bf16, false, {}, {}, 0, DType::i32,
                    0.6},
        GpuAttnCase{"bf16_d128_S1000_causal", 1, 1000, 1000, 2, 2, 128, DType::bf16, true, {}, {}},
        GpuAttnCase{"bf16_d128_S1000_gqa8", 1, 1000, 1000, 8, 1, 128, DType::bf16, false, {}, {}},
        GpuAttnCase{"f16_d128_S700", 2, 700, 700, 2, 2, 128, DType::f16, false, {}, {}},
        GpuAttnCase{"bf16_d64_S777_causal", 1, 777, 900, 4, 4, 64, DType::bf16, true, {}, {}},
        GpuAttnCase{"bf16_d256_S600", 1, 600, 600, 2, 2, 256, DType::bf16, false, {}, {}},
        GpuAttnCase{"bf16_d256_S513_causal_strided", 1, 513, 513, 2, 1, 256, DType::bf16, true, {}, {}, 64},
        GpuAttnCase{"bf16_d128_varlen_long", 1, 0, 0, 4, 1, 128, DType::bf16, true, {0, 1000, 1001, 1700},
                    {0, 900, 1200, 2000}},
        // More tiles than an H100 has SMs, so persistent CTAs walk several tiles of 1 or 2
        // key blocks (stage phases carried from tile to tile, the Q tile reloaded).
        GpuAttnCase{"Small_bf16_d128_causal_gqa4_tiles144", 2, 260, 260, 24, 6, 128, DType::bf16, true, {}, {}},
        // Persistent CTAs whose walks mix tiles of no key (rows before the bottom-right
        // diagonal: O = 0, lse = -inf) with tiles of one and two key blocks, each tile's last
        // PV product issued beside the next tile's first QKᵀ product.
        GpuAttnCase{"Small_bf16_d128_causal_Sq300_Sk100_tiles216", 2, 300, 100, 36, 12, 128, DType::bf16, true, {},
                    {}},
        // 320 tiles of four key blocks (the first narrow): two or three a CTA.
        GpuAttnCase{"f16_d128_S600_tiles320", 4, 600, 600, 16, 16, 128, DType::f16, false, {}, {}},
        GpuAttnCase{"f16_d64_causal_gqa8_tiles240", 2, 600, 600, 24, 3, 64, DType::f16, true, {}, {}}),
                       ::testing::Values(AttentionForwardSchedule::standard, AttentionForwardSchedule::pingpong,
                                         AttentionForwardSchedule::persistent)),
    CaseAndSchedule());

// The D = 128 forward under the turn-taking schedules with the tile's first key block at
// the narrow widths (64 or 112 keys of 176) and at full width: first blocks of exactly 64 and
// 112 keys, of fewer (masked within the narrow width), causal tiles whose diagonal block is
// narrow, Sq != Sk, and varlen sequences whose first blocks take every width.
class AttentionCudaNarrowFirst
    : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionForwardSchedule, bool>> {};

TEST_P(AttentionCudaNarrowFirst, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(std::get<1>(GetParam()));
  const ForwardNarrowFirst narrow(std::get<2>(GetParam()));
  check_forward_against_oracle(std::get<0>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaNarrowFirst,
    ::testing::Combine(
        ::testing::Values(
            // 240 = 176 + 64 and 288 = 176 + 112 keys: first blocks of exactly 64 and 112.
            GpuAttnCase{"Small_bf16_d128_first64", 2, 240, 240, 2, 2, 128, DType::bf16, false, {}, {}},
            GpuAttnCase{"Small_f16_d128_first112", 1, 100, 288, 4, 2, 128, DType::f16, false, {}, {}},
            // 226 keys: a first block of 50 (masked within 64); causal tile 1 ends at 226.
            GpuAttnCase{"Small_bf16_d128_first50_causal", 2, 226, 226, 2, 1, 128, DType::bf16, true, {}, {}},
            // Bottom-right causal, Sq < Sk: tile ends at 538 and 600 keys (first blocks of 10
            // and 72).
            GpuAttnCase{"Small_f16_d128_causal_Sq190_Sk600", 1, 190, 600, 2, 2, 128, DType::f16, true, {}, {}},
            GpuAttnCase{"bf16_d128_varlen_narrow_causal", 1, 0, 0, 4, 2, 128, DType::bf16, true,
                        {0, 1, 60, 300, 700, 1000}, {0, 33, 200, 460, 1000, 1290}}),
        ::testing::Values(AttentionForwardSchedule::pingpong, AttentionForwardSchedule::persistent),
        ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + schedule_name(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_narrow" : "_full");
    });

// The forward with a row's maximum kept until a block's exceeds it by more than 2^8 (lazy)
// and moved whenever it grows, under the default schedules. Scales large enough that the
// scores spread over tens of powers of two, so rows do move their maxima past the threshold
// (and skip the rescale below it), of either sign.
class AttentionCudaLazyRescale : public ::testing::TestWithParam<std::tuple<GpuAttnCase, bool>> {};

TEST_P(AttentionCudaLazyRescale, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardLazyRescale lazy(std::get<1>(GetParam()));
  check_forward_against_oracle(std::get<0>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaLazyRescale,
    ::testing::Combine(
        ::testing::Values(
            GpuAttnCase{"Small_bf16_d128_S400_scale05", 2, 400, 400, 2, 2, 128, DType::bf16, false, {}, {}, 0,
                        DType::i32, 0.5},
            GpuAttnCase{"Small_f16_d256_causal_scale03", 1, 300, 300, 2, 1, 256, DType::f16, true, {}, {}, 0,
                        DType::i32, 0.3},
            GpuAttnCase{"Small_bf16_d64_S700_scale_negative", 1, 700, 700, 2, 2, 64, DType::bf16, false, {}, {}, 0,
                        DType::i32, -0.7},
            GpuAttnCase{"bf16_d128_varlen_causal_scale04", 1, 0, 0, 4, 2, 128, DType::bf16, true,
                        {0, 1, 300, 1000}, {0, 90, 500, 1300}, 0, DType::i32, 0.4}),
        ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_lazy" : "_every_block");
    });

// The non-persistent forward's out through shared memory and tensor copies, and by direct
// stores: rows past the tensor's end (clipped by the copy), padded rows (columns past D must
// stay untouched), varlen sequences whose warpgroups lie inside them (copied) or run past
// their end (stored), D = 256's four column chunks.
class AttentionCudaStagedOutput : public ::testing::TestWithParam<std::tuple<GpuAttnCase, bool>> {};

TEST_P(AttentionCudaStagedOutput, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(AttentionForwardSchedule::pingpong);
  const ForwardStagedOutput staged(std::get<1>(GetParam()));
  check_forward_against_oracle(std::get<0>(GetParam()));
}

// Causal cases long enough for the sectioned 1-D grids (the forward's from 16 query tiles a
// sequence, the backward's from 16 key blocks, 32 at D = 64): several (head, sequence) pairs,
// GQA, a bottom-right diagonal (Sq < Sk), varlen with a one-token sequence, each head dim.
std::vector<GpuAttnCase> sectioned_grid_cases() {
  return {GpuAttnCase{"bf16_d128_causal_B2_H3_S2000", 2, 2000, 2000, 3, 3, 128, DType::bf16, true, {}, {}},
          GpuAttnCase{"f16_d64_causal_gqa_S4000", 1, 4000, 4000, 2, 1, 64, DType::f16, true, {}, {}},
          GpuAttnCase{"bf16_d256_causal_Sq1950_Sk2100", 1, 1950, 2100, 2, 2, 256, DType::bf16, true, {}, {}},
          GpuAttnCase{"bf16_d128_varlen_causal_gqa", 1, 0, 0, 4, 2, 128, DType::bf16, true, {0, 1, 2001, 2300},
                      {0, 1, 2001, 2400}}};
}

// The non-persistent causal forward launched as the sectioned 1-D grid.
class AttentionCudaSections : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionForwardSchedule>> {};

TEST_P(AttentionCudaSections, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardSchedule schedule(std::get<1>(GetParam()));
  const ForwardSections sections(true);
  check_forward_against_oracle(std::get<0>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaSections,
    ::testing::Combine(::testing::ValuesIn(sectioned_grid_cases()),
                       ::testing::Values(AttentionForwardSchedule::standard, AttentionForwardSchedule::pingpong)),
    CaseAndSchedule());

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaStagedOutput,
    ::testing::Combine(
        ::testing::Values(
            GpuAttnCase{"Small_bf16_d128_S200_padded", 2, 200, 200, 4, 2, 128, DType::bf16, false, {}, {}, 64},
            GpuAttnCase{"Small_f16_d256_S130_causal", 1, 130, 130, 2, 1, 256, DType::f16, true, {}, {}},
            GpuAttnCase{"Small_bf16_d128_varlen", 1, 0, 0, 2, 2, 128, DType::bf16, false, {0, 64, 65, 300, 428},
                        {0, 100, 101, 400, 500}},
            GpuAttnCase{"Small_bf16_d64_varlen_causal", 1, 0, 0, 4, 2, 64, DType::bf16, true, {0, 128, 130, 400},
                        {0, 128, 200, 500}}),
        ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_staged" : "_direct");
    });

// Backward: dq, dk, dv of the CUDA kernels against the oracle's backward, from the same
// inputs, out and lse (the oracle's own, stored in the dtype), with a d_lse; then a second
// run. deterministic: the second run must repeat all three gradients bitwise. Otherwise
// the Hopper kernel: dk and dv (no atomics) repeat bitwise, dq (float atomics in any order)
// within a small fraction of the tolerance.
void check_backward(const GpuAttnCase& c, bool deterministic) {
  const int64_t width = c.D + c.pad;
  auto rows = [&](int64_t S, const std::vector<int64_t>& cu, int64_t H) { return rows_shape(c, S, cu, H, width); };
  Operand q(rows(c.Sq, c.cu_q, c.Hq), c.D, c.dtype, false), k(rows(c.Sk, c.cu_k, c.Hkv), c.D, c.dtype, false),
      v(rows(c.Sk, c.cu_k, c.Hkv), c.D, c.dtype, false), dout(rows(c.Sq, c.cu_q, c.Hq), c.D, c.dtype, false);
  Operand out(rows(c.Sq, c.cu_q, c.Hq), c.D, c.dtype, true);
  Operand dq(rows(c.Sq, c.cu_q, c.Hq), c.D, c.dtype, true), dk(rows(c.Sk, c.cu_k, c.Hkv), c.D, c.dtype, true),
      dv(rows(c.Sk, c.cu_k, c.Hkv), c.D, c.dtype, true);
  const std::vector<int64_t> lse_shape =
      varlen(c) ? std::vector<int64_t>{c.Hq, c.cu_q.back()} : std::vector<int64_t>{c.B, c.Hq, c.Sq};
  HostTensor lse = poisoned(lse_shape, DType::f32), d_lse = uniform(lse_shape, DType::f32);
  HostTensor cu_q = offsets(varlen(c) ? c.cu_q : std::vector<int64_t>{0, 1}, c.cu_dtype);
  HostTensor cu_k = offsets(varlen(c) ? c.cu_k : std::vector<int64_t>{0, 1}, c.cu_dtype);

  AttentionOptions options;
  options.causal = c.causal;
  options.impl = Impl::reference;
  AttentionInputs host_in{q.view, k.view, v.view};
  if (varlen(c)) {
    host_in.cu_seqlens_q = cu_q.view;
    host_in.cu_seqlens_k = cu_k.view;
    for (size_t i = 1; i < c.cu_q.size(); ++i) {
      host_in.max_seqlen_q = std::max(host_in.max_seqlen_q, c.cu_q[i] - c.cu_q[i - 1]);
      host_in.max_seqlen_k = std::max(host_in.max_seqlen_k, c.cu_k[i] - c.cu_k[i - 1]);
    }
  }
  attention_forward(host_in, {out.view, lse.view}, options);  // the oracle's out (rounded) and lse

  DeviceTensor d_q(q.storage), d_k(k.storage), d_v(v.storage), d_out(out.storage), d_lse_fwd(lse), d_do(dout.storage),
      d_dlse(d_lse), d_dq(dq.storage), d_dk(dk.storage), d_dv(dv.storage), d_cu_q(cu_q), d_cu_k(cu_k);
  AttentionInputs dev_in = host_in;
  dev_in.q = on_device(d_q, q.view, q.storage);
  dev_in.k = on_device(d_k, k.view, k.storage);
  dev_in.v = on_device(d_v, v.view, v.storage);
  if (varlen(c)) {
    dev_in.cu_seqlens_q = d_cu_q.view;
    dev_in.cu_seqlens_k = d_cu_k.view;
  }
  const AttentionOutputs dev_fwd{on_device(d_out, out.view, out.storage), d_lse_fwd.view};
  const AttentionGrads dev_grads{on_device(d_dq, dq.view, dq.storage), on_device(d_dk, dk.view, dk.storage),
                                 on_device(d_dv, dv.view, dv.storage)};
  AttentionOptions cuda_options;
  cuda_options.causal = c.causal;
  cuda_options.deterministic = deterministic;
  auto run_cuda = [&] {
    attention_backward(dev_in, dev_fwd, on_device(d_do, dout.view, dout.storage), d_dlse.view, dev_grads,
                       cuda_options);
    cuda_ok(cudaDeviceSynchronize());
    std::vector<std::vector<double>> got;
    for (auto* pair : {&d_dq, &d_dk, &d_dv}) {
      const Operand& host = pair == &d_dq ? dq : pair == &d_dk ? dk : dv;
      HostTensor copy(host.storage.view.shape, c.dtype);
      pair->values(copy);
      Tensor view = copy.view;
      view.shape.back() = c.D;
      got.push_back(core::to_dense<double>(view));
      if (c.pad > 0) {  // nothing written past the head dim
        const std::vector<double> all = copy.values();
        for (size_t i = 0; i < all.size(); ++i)
          if (static_cast<int64_t>(i % width) >= c.D) EXPECT_TRUE(std::isnan(all[i])) << "write past the head dim";
      }
    }
    return got;
  };
  const auto first = run_cuda();
  const auto second = run_cuda();

  attention_backward(host_in, {out.view, lse.view}, dout.view, d_lse.view, {dq.view, dk.view, dv.view}, options);
  const char* names[] = {"dq", "dk", "dv"};
  const Tensor* want[] = {&dq.view, &dk.view, &dv.view};
  for (int i = 0; i < 3; ++i) {
    for (double x : first[i]) ASSERT_TRUE(std::isfinite(x)) << names[i] << " has a non-finite element (unwritten?)";
    // Two roundings to the dtype: the P / dS operands of the products and the result.
    EXPECT_LT(rel_err(first[i], core::to_dense<double>(*want[i])), 2 * tolerance(c.dtype)) << names[i];
    if (deterministic || i > 0)
      EXPECT_EQ(first[i], second[i]) << names[i] << " differs between two runs";
    else
      EXPECT_LT(rel_err(second[i], first[i]), 0.1 * tolerance(c.dtype)) << names[i] << " of two runs";
  }
}

// The deterministic backward in both forms: the Hopper kernel with its dQ adds in order
// (every head dim), and the two mma.sync kernels (D <= 128; at D = 256 the choice falls back
// to the ordered kernel, so those cases run it twice).
class AttentionCudaBackward
    : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionDeterministicBackward>> {};

TEST_P(AttentionCudaBackward, GradientsMatchOracleAndRepeatBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardFormScope form(deterministic_form(std::get<1>(GetParam())));
  check_backward(std::get<0>(GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaBackward,
    ::testing::Combine(
        ::testing::Values(
            GpuAttnCase{"Small_bf16_d128_S100", 2, 100, 100, 2, 2, 128, DType::bf16, false, {}, {}},
            GpuAttnCase{"Small_f16_d64_causal_gqa4_Sq77_Sk200", 1, 77, 200, 8, 2, 64, DType::f16, true, {}, {}},
            GpuAttnCase{"Small_bf16_d128_causal_Sq150_Sk60", 1, 150, 60, 2, 1, 128, DType::bf16, true, {}, {}},
            GpuAttnCase{"Small_bf16_d64_varlen_causal_strided", 1, 0, 0, 4, 2, 64, DType::bf16, true,
                        {0, 1, 130, 300}, {0, 5, 200, 330}, 64},
            GpuAttnCase{"Small_bf16_d256_causal_gqa4_Sq77_Sk200", 1, 77, 200, 8, 2, 256, DType::bf16, true, {}, {}},
            GpuAttnCase{"Small_f16_d256_varlen_strided", 1, 0, 0, 4, 2, 256, DType::f16, false, {0, 1, 130, 300},
                        {0, 5, 200, 330}, 64},
            GpuAttnCase{"f16_d128_S500_causal", 1, 500, 500, 2, 2, 128, DType::f16, true, {}, {}},
            GpuAttnCase{"bf16_d128_S600_gqa8", 1, 600, 700, 8, 1, 128, DType::bf16, false, {}, {}},
            GpuAttnCase{"bf16_d64_S700_causal_gqa4", 2, 700, 700, 4, 1, 64, DType::bf16, true, {}, {}},
            GpuAttnCase{"bf16_d256_S513_causal", 2, 513, 513, 2, 2, 256, DType::bf16, true, {}, {}},
            GpuAttnCase{"f16_d256_Sq300_Sk900_gqa2", 1, 300, 900, 4, 2, 256, DType::f16, false, {}, {}},
            // Rotated walks (no mask): 16 key blocks starting two query blocks apart.
            GpuAttnCase{"bf16_d64_S2000_gqa2", 1, 2000, 2000, 2, 1, 64, DType::bf16, false, {}, {}},
            // More key blocks of one head than an H100 has SMs, every one adding to the same
            // query blocks: the ordered adds must not wait on a CTA that is not resident.
            GpuAttnCase{"bf16_d256_Sq64_Sk19000_gqa2", 1, 64, 19000, 2, 1, 256, DType::bf16, false, {}, {}},
            GpuAttnCase{"bf16_d128_causal_Sq100_Sk20000", 1, 100, 20000, 1, 1, 128, DType::bf16, true, {}, {}}),
        ::testing::Values(AttentionDeterministicBackward::ordered, AttentionDeterministicBackward::two_kernel)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + deterministic_name(std::get<1>(info.param));
    });

// The Hopper backward (deterministic = false): TMA + wgmma over key blocks of 128, query
// blocks of 64, the pre/postprocess kernels, under both schedules (dq through float atomics,
// or staged in shared memory and added by bulk reduces).
class AttentionCudaBackwardSm90
    : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionBackwardSchedule>> {};

TEST_P(AttentionCudaBackwardSm90, GradientsMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardSchedule schedule(std::get<1>(GetParam()));
  check_backward(std::get<0>(GetParam()), false);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaBackwardSm90,
    ::testing::Combine(::testing::Values(
        GpuAttnCase{"Small_bf16_d128_S100", 2, 100, 100, 2, 2, 128, DType::bf16, false, {}, {}},
        GpuAttnCase{"Small_bf16_d64_S1_causal", 3, 1, 1, 2, 2, 64, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_f16_d64_causal_gqa4_Sq77_Sk200", 1, 77, 200, 8, 2, 64, DType::f16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d128_causal_Sq150_Sk60", 1, 150, 60, 2, 1, 128, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d64_varlen_causal_strided", 1, 0, 0, 4, 2, 64, DType::bf16, true,
                    {0, 1, 130, 300}, {0, 5, 200, 330}, 64},
        GpuAttnCase{"Small_f16_d128_varlen_gqa4_i64", 1, 0, 0, 8, 2, 128, DType::f16, false, {0, 1, 64, 300},
                    {0, 129, 130, 400}, 0, DType::i64},
        GpuAttnCase{"Small_bf16_d128_causal_strided_Sq130_Sk257", 2, 130, 257, 4, 2, 128, DType::bf16, true, {}, {},
                    64},
        GpuAttnCase{"bf16_d128_S1000_causal", 1, 1000, 1000, 2, 2, 128, DType::bf16, true, {}, {}},
        GpuAttnCase{"f16_d64_Sq700_Sk900_gqa4", 1, 700, 900, 4, 1, 64, DType::f16, false, {}, {}},
        GpuAttnCase{"bf16_d128_S600_gqa8", 1, 600, 700, 8, 1, 128, DType::bf16, false, {}, {}},
        GpuAttnCase{"f16_d128_S513_causal", 2, 513, 513, 2, 2, 128, DType::f16, true, {}, {}},
        GpuAttnCase{"bf16_d128_varlen_long_causal", 1, 0, 0, 4, 1, 128, DType::bf16, true, {0, 1000, 1001, 1700},
                    {0, 900, 1200, 2000}}),
                       ::testing::Values(AttentionBackwardSchedule::standard, AttentionBackwardSchedule::pingpong)),
    CaseAndSchedule());

// The Hopper backward with its causal key blocks in the sectioned 1-D grid.
class AttentionCudaBackwardSections
    : public ::testing::TestWithParam<std::tuple<GpuAttnCase, AttentionBackwardSchedule>> {};

TEST_P(AttentionCudaBackwardSections, GradientsMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardSchedule schedule(std::get<1>(GetParam()));
  const BackwardSections sections(true);
  check_backward(std::get<0>(GetParam()), false);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaBackwardSections,
    ::testing::Combine(::testing::ValuesIn(sectioned_grid_cases()),
                       ::testing::Values(AttentionBackwardSchedule::standard, AttentionBackwardSchedule::pingpong)),
    CaseAndSchedule());

// The Hopper backward at D = 256: the head dim split between the consumer warpgroups, key
// blocks of 64, Pᵀ and dSᵀ exchanged through shared memory; dq by atomics (standard) or
// staged in the block's Q/dO stage and added by tensor reduces (pingpong, without turns),
// and pingpong with key-block pairs (clusters of two CTAs sharing Q and dO by multicast; the
// cases with an odd number of key blocks or varlen check that it falls back).
class AttentionCudaBackwardSm90HeadDim256 : public ::testing::TestWithParam<std::tuple<GpuAttnCase, BackwardForm>> {};

TEST_P(AttentionCudaBackwardSm90HeadDim256, GradientsMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardFormScope form(std::get<1>(GetParam()));
  check_backward(std::get<0>(GetParam()), false);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionCudaBackwardSm90HeadDim256,
    ::testing::Combine(::testing::Values(
        GpuAttnCase{"Small_bf16_d256_S100", 2, 100, 100, 2, 2, 256, DType::bf16, false, {}, {}},
        GpuAttnCase{"Small_bf16_d256_S1_causal", 3, 1, 1, 2, 2, 256, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_f16_d256_causal_gqa4_Sq77_Sk200", 1, 77, 200, 8, 2, 256, DType::f16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d256_causal_Sq150_Sk60", 1, 150, 60, 2, 1, 256, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_bf16_d256_varlen_causal_strided", 1, 0, 0, 4, 2, 256, DType::bf16, true,
                    {0, 1, 130, 300}, {0, 5, 200, 330}, 64},
        GpuAttnCase{"Small_f16_d256_varlen_gqa4_i64", 1, 0, 0, 8, 2, 256, DType::f16, false, {0, 1, 64, 300},
                    {0, 129, 130, 400}, 0, DType::i64},
        GpuAttnCase{"Small_f16_d256_causal_strided_Sq130_Sk257", 2, 130, 257, 4, 2, 256, DType::f16, true, {}, {},
                    64},
        GpuAttnCase{"bf16_d256_S600_gqa8", 1, 600, 700, 8, 1, 256, DType::bf16, false, {}, {}},
        GpuAttnCase{"f16_d256_S513_causal", 2, 513, 513, 2, 2, 256, DType::f16, true, {}, {}},
        GpuAttnCase{"bf16_d256_varlen_long_causal", 1, 0, 0, 4, 1, 256, DType::bf16, true, {0, 1000, 1001, 1700},
                    {0, 900, 1200, 2000}},
        // Even numbers of key blocks (pairs taken): Sq = Sk causal, a partial last block, Sq > Sk.
        GpuAttnCase{"Small_bf16_d256_causal_S256", 2, 256, 256, 2, 2, 256, DType::bf16, true, {}, {}},
        GpuAttnCase{"Small_f16_d256_gqa4_Sq70_Sk250", 1, 70, 250, 8, 2, 256, DType::f16, false, {}, {}},
        GpuAttnCase{"Small_bf16_d256_causal_strided_Sq200_Sk120", 1, 200, 120, 2, 1, 256, DType::bf16, true, {}, {},
                    64},
        GpuAttnCase{"bf16_d256_S512_causal_gqa4", 1, 512, 512, 4, 1, 256, DType::bf16, true, {}, {}}),
                       ::testing::Values(BackwardForm{AttentionBackwardSchedule::standard},
                                         BackwardForm{AttentionBackwardSchedule::pingpong},
                                         BackwardForm{AttentionBackwardSchedule::pingpong, true})),
    [](const auto& info) { return std::string(std::get<0>(info.param).name) + "_" + form_name(std::get<1>(info.param)); });

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { cuda_ok(cudaMalloc(&ptr, bytes)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
};

// Fills `bytes` of device memory with one block of random values in [-2, 2), repeated.
void fill_random(void* dst, size_t bytes, DType dtype) {
  const HostTensor block = uniform({int64_t{1} << 20}, dtype, -2, 2);
  for (size_t at = 0; at < bytes; at += block.storage.size())
    cuda_ok(cudaMemcpy(static_cast<char*>(dst) + at, block.storage.data(), std::min(block.storage.size(), bytes - at),
                       cudaMemcpyHostToDevice));
}

double bf16_value(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &word, sizeof x);
  return x;
}

// ‖a − b‖ / ‖b‖ over bf16 words; infinity when an element is not finite.
double relative_difference_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_value(a[i]), y = bf16_value(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / norm);
}

// Median milliseconds of two variants of one launch, timed alternately run by run so that
// clock drift falls on both alike: `launch(which)` runs variant 0 or 1. Each timed launch
// follows kWarmupRuns untimed rounds and an overwrite of `flush` (the L2 cache emptied).
constexpr int kWarmupRuns = 3, kTimedRuns = 25;
constexpr size_t kFlushBytes = size_t{512} << 20;

template <class Launch>
std::array<float, 2> alternating_medians_ms(const Launch& launch, const DeviceBuffer& flush) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start));
  cuda_ok(cudaEventCreate(&stop));
  std::vector<float> times[2];
  for (int run = 0; run < kWarmupRuns + kTimedRuns; ++run) {
    for (int which = 0; which < 2; ++which) {
      cuda_ok(cudaMemsetAsync(flush.ptr, run, kFlushBytes));
      cuda_ok(cudaEventRecord(start));
      launch(which);
      cuda_ok(cudaEventRecord(stop));
      cuda_ok(cudaEventSynchronize(stop));
      float ms = 0;
      cuda_ok(cudaEventElapsedTime(&ms, start, stop));
      if (run >= kWarmupRuns) times[which].push_back(ms);
    }
  }
  cuda_ok(cudaEventDestroy(start));
  cuda_ok(cudaEventDestroy(stop));
  std::array<float, 2> medians{};
  for (int which = 0; which < 2; ++which) {
    std::sort(times[which].begin(), times[which].end());
    medians[which] = times[which][kTimedRuns / 2];
  }
  return medians;
}

// Prints one table row: TFLOP/s of two schedules for `flops` and the second's speed-up.
void print_schedule_row(int64_t S, bool causal, double flops, const std::array<float, 2>& ms) {
  const double first = flops / (ms[0] * 1e-3) / 1e12, second = flops / (ms[1] * 1e-3) / 1e12;
  std::printf("%8lld %7s %10.1f %10.1f %18.3f\n", static_cast<long long>(S), causal ? "yes" : "no", first, second,
              second / first);
}

// The two forward schedules the timing below compares: pingpong and persistent, or the pair
// SEQMIX_ATTENTION_TIMING_FORWARD=first,second names (standard|pingpong|persistent|by_shape), e.g. to
// time one schedule of two builds against the same partner: the runs alternate, and the
// partner's power draw can move the clock the other one runs at.
std::array<AttentionForwardSchedule, 2> timed_forward_schedules() {
  std::array<AttentionForwardSchedule, 2> pair{AttentionForwardSchedule::pingpong, AttentionForwardSchedule::persistent};
  const char* value = std::getenv("SEQMIX_ATTENTION_TIMING_FORWARD");
  if (!value) return pair;
  const std::string names(value);
  const size_t comma = names.find(',');
  for (int which = 0; which < 2; ++which) {
    const std::string name = which == 0 ? names.substr(0, comma) : names.substr(comma == std::string::npos ? names.size() : comma + 1);
    for (AttentionForwardSchedule schedule : {AttentionForwardSchedule::standard, AttentionForwardSchedule::pingpong,
                                              AttentionForwardSchedule::persistent, AttentionForwardSchedule::by_shape})
      if (name == schedule_name(schedule)) pair[which] = schedule;
  }
  return pair;
}

// A form of the forward: its schedule, at D = 64 its consumer warpgroups (0: by shape), at
// D = 128 whether the first key block runs narrow.
struct ForwardForm {
  AttentionForwardSchedule schedule;
  int warpgroups = 0;
  bool narrow_first = true;
  bool lazy_rescale = true;
  bool staged_output = true;
  bool sections = false;
};

std::string form_name(ForwardForm form) {
  return std::string(schedule_name(form.schedule)) + (form.warpgroups ? "_wg" + std::to_string(form.warpgroups) : "") +
         (form.narrow_first ? "" : "_full") + (form.lazy_rescale ? "" : "_rescale") +
         (form.staged_output ? "" : "_direct") + (form.sections ? "_sections" : "");
}

// Runs the forward in `form` while in scope, then puts the process's choices back.
struct ForwardFormScope {
  ForwardSchedule schedule;
  ForwardWarpgroups warpgroups;
  ForwardNarrowFirst narrow_first;
  ForwardLazyRescale lazy_rescale;
  ForwardStagedOutput staged_output;
  ForwardSections sections;
  explicit ForwardFormScope(ForwardForm form)
      : schedule(form.schedule),
        warpgroups(form.warpgroups),
        narrow_first(form.narrow_first),
        lazy_rescale(form.lazy_rescale),
        staged_output(form.staged_output),
        sections(form.sections) {}
};

// Forward TFLOP/s of two forms side by side (bf16, B·S = 16384, H·D = 2048, or B = `batch`
// and H = `heads` where given; shapes {D, S}, causal and not): CUDA events around each
// launch, L2 flushed before it, the forms alternating run by run, median of kTimedRuns.
// FLOPs 4·B·H·S²·D, half for causal. Asserts that both forms give the same out and lse (the
// oracle is out of reach at these sizes; the cases above compare each form with it).
void time_forward_forms(const std::array<ForwardForm, 2>& forms, const std::vector<std::array<int64_t, 2>>& shapes,
                        int64_t batch = 0, int64_t heads = 0) {
  constexpr int64_t kTokens = 16384, kWidth = 2048;  // B·S and H·D (at most, with batch and heads)
  const size_t operand_bytes = static_cast<size_t>(kTokens * kWidth) * 2;
  DeviceBuffer q(operand_bytes), k(operand_bytes), v(operand_bytes), out(operand_bytes),
      lse(static_cast<size_t>(kTokens * kWidth / 64) * sizeof(float)), flush(kFlushBytes);
  fill_random(q.ptr, operand_bytes, DType::bf16);
  fill_random(k.ptr, operand_bytes, DType::bf16);
  fill_random(v.ptr, operand_bytes, DType::bf16);
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0));

  if (batch)
    std::printf("attention forward on %s, bf16 B=%lld H=%lld: TFLOP/s, median of %d (CUDA events, L2 flushed)\n",
                prop.name, static_cast<long long>(batch), static_cast<long long>(heads), kTimedRuns);
  else
    std::printf("attention forward on %s, bf16 H*D=%lld B*S=%lld: TFLOP/s, median of %d (CUDA events, L2 flushed)\n",
                prop.name, static_cast<long long>(kWidth), static_cast<long long>(kTokens), kTimedRuns);
  const std::string ratio = form_name(forms[1]) + "/" + form_name(forms[0]);
  std::printf("%4s %8s %7s %10s %10s %18s\n", "D", "S", "causal", form_name(forms[0]).c_str(),
              form_name(forms[1]).c_str(), ratio.c_str());
  for (const auto& [D, S] : shapes) {
    for (bool causal : {false, true}) {
      const int64_t B = batch ? batch : kTokens / S, H = heads ? heads : kWidth / D;
      const Device gpu = Device::cuda(0);
      const AttentionInputs in{Tensor::contiguous(q.ptr, DType::bf16, {B, S, H, D}, gpu),
                               Tensor::contiguous(k.ptr, DType::bf16, {B, S, H, D}, gpu),
                               Tensor::contiguous(v.ptr, DType::bf16, {B, S, H, D}, gpu)};
      const AttentionOutputs outputs{Tensor::contiguous(out.ptr, DType::bf16, {B, S, H, D}, gpu),
                                     Tensor::contiguous(lse.ptr, DType::f32, {B, H, S}, gpu)};
      AttentionOptions options;
      options.causal = causal;

      const std::array<float, 2> ms = alternating_medians_ms(
          [&](int which) {
            const ForwardFormScope form(forms[which]);
            attention_forward(in, outputs, options);
          },
          flush);
      std::printf("%4lld", static_cast<long long>(D));
      print_schedule_row(S, causal, 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0), ms);

      // The same result from both forms.
      std::vector<uint16_t> got_out[2];
      std::vector<float> got_lse[2];
      for (int which = 0; which < 2; ++which) {
        const ForwardFormScope form(forms[which]);
        cuda_ok(cudaMemset(out.ptr, 0xFF, operand_bytes));  // NaN words
        attention_forward(in, outputs, options);
        got_out[which].resize(static_cast<size_t>(B * S * H * D));
        got_lse[which].resize(static_cast<size_t>(B * S * H));
        cuda_ok(cudaMemcpy(got_out[which].data(), out.ptr, got_out[which].size() * 2, cudaMemcpyDeviceToHost));
        cuda_ok(cudaMemcpy(got_lse[which].data(), lse.ptr, got_lse[which].size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
      }
      EXPECT_LT(relative_difference_bf16(got_out[1], got_out[0]), tolerance(DType::bf16)) << "D " << D << " S " << S;
      EXPECT_LT(rel_err(std::vector<double>(got_lse[1].begin(), got_lse[1].end()),
                        std::vector<double>(got_lse[0].begin(), got_lse[0].end())),
                1e-5)
          << "D " << D << " S " << S;
    }
  }
}

// The shapes {D, S} SEQMIX_ATTENTION_TIMING_SHAPES="D,S;D,S;..." names, or `fallback`.
std::vector<std::array<int64_t, 2>> timed_shapes(std::vector<std::array<int64_t, 2>> fallback) {
  const char* value = std::getenv("SEQMIX_ATTENTION_TIMING_SHAPES");
  if (!value) return fallback;
  std::vector<std::array<int64_t, 2>> shapes;
  std::stringstream list(value);
  std::string item;
  while (std::getline(list, item, ';')) {
    long long D = 0, S = 0;
    if (std::sscanf(item.c_str(), "%lld,%lld", &D, &S) == 2) shapes.push_back({D, S});
  }
  return shapes;
}

// The pingpong and persistent schedules (or the pair named above) at D = 128, S = 2048,
// 4096 and 16384, and D = 64 and 256 at S = 2048 and 16384 (or the shapes named above).
TEST(AttentionCudaTiming, ForwardSchedulesSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::array<AttentionForwardSchedule, 2> schedules = timed_forward_schedules();
  time_forward_forms({ForwardForm{schedules[0]}, ForwardForm{schedules[1]}},
                     timed_shapes({{128, 2048}, {128, 4096}, {128, 16384}, {64, 2048}, {64, 16384}, {256, 2048},
                                   {256, 16384}}));
}

// D = 64 with two and three consumer warpgroups, each under the default schedule, over the
// issue's sequence lengths; then one and two at the small configurations' B = 2, H = 8.
TEST(AttentionCudaTiming, ForwardWarpgroupsSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 2}, ForwardForm{AttentionForwardSchedule::by_shape, 3}},
                     {{64, 512}, {64, 1024}, {64, 2048}, {64, 4096}, {64, 8192}, {64, 16384}});
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 2}, ForwardForm{AttentionForwardSchedule::by_shape, 1}},
                     {{64, 128}, {64, 256}, {64, 512}, {64, 1024}}, 2, 8);
}

// D = 128 under the default schedule with the first key block at full width, then narrow,
// over the sequence lengths from 1024.
TEST(AttentionCudaTiming, ForwardNarrowFirstSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 0, false},
                      ForwardForm{AttentionForwardSchedule::by_shape, 0, true}},
                     timed_shapes({{128, 1024}, {128, 2048}, {128, 4096}, {128, 8192}, {128, 16384}}));
}

// The default forms with the output rescaled every block, then lazily, at every head dim.
TEST(AttentionCudaTiming, ForwardLazyRescaleSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 0, true, false},
                      ForwardForm{AttentionForwardSchedule::by_shape, 0, true, true}},
                     timed_shapes({{128, 2048}, {128, 4096}, {128, 16384}, {64, 2048}, {64, 16384}, {256, 2048},
                                   {256, 16384}}));
}

// The default forms with out stored from registers, then through shared memory.
TEST(AttentionCudaTiming, ForwardStagedOutputSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 0, true, true, false},
                      ForwardForm{AttentionForwardSchedule::by_shape, 0, true, true, true}},
                     timed_shapes({{128, 1024}, {128, 2048}, {128, 4096}, {128, 8192}, {128, 16384}, {64, 1024},
                                   {64, 2048}, {64, 16384}}));
}

// The default forms in the 3-D grid, then causal in the sectioned 1-D grid (the non-causal
// rows run the same kernel twice: their ratio is the measurement's spread).
TEST(AttentionCudaTiming, ForwardSectionsSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward_forms({ForwardForm{AttentionForwardSchedule::by_shape, 0, true, true, true, false},
                      ForwardForm{AttentionForwardSchedule::by_shape, 0, true, true, true, true}},
                     timed_shapes({{128, 1024}, {128, 2048}, {128, 4096}, {128, 8192}, {128, 16384}, {64, 2048},
                                   {64, 4096}, {256, 2048}}));
}

// Backward TFLOP/s of two forms of the Hopper backward side by side, same method as above
// (FLOPs 2.5× the forward's; bf16, H·D = 2048, B·S = 16384; shapes {D, S}, causal and not).
// Asserts that both give the same dq, dk, dv within the dtype's tolerance (dq's float sums
// are added in another order).
void time_backward_forms(const std::array<BackwardForm, 2>& forms, const std::vector<std::array<int64_t, 2>>& shapes) {
  constexpr int64_t kTokens = 16384, kWidth = 2048;
  const size_t operand_bytes = static_cast<size_t>(kTokens * kWidth) * 2;
  DeviceBuffer q(operand_bytes), k(operand_bytes), v(operand_bytes), out(operand_bytes), dout(operand_bytes),
      dq(operand_bytes), dk(operand_bytes), dv(operand_bytes),
      lse(static_cast<size_t>(kTokens * kWidth / 64) * sizeof(float)), flush(kFlushBytes);
  for (void* ptr : {q.ptr, k.ptr, v.ptr, dout.ptr}) fill_random(ptr, operand_bytes, DType::bf16);
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0));

  std::printf("attention backward on %s, bf16 H*D=%lld B*S=%lld: TFLOP/s, median of %d (CUDA events, L2 flushed)\n",
              prop.name, static_cast<long long>(kWidth), static_cast<long long>(kTokens), kTimedRuns);
  const std::string ratio = std::string(form_name(forms[1])) + "/" + form_name(forms[0]);
  std::printf("%4s %8s %7s %10s %10s %18s\n", "D", "S", "causal", form_name(forms[0]), form_name(forms[1]),
              ratio.c_str());
  for (const auto& [D, S] : shapes) {
    for (bool causal : {false, true}) {
      const int64_t B = kTokens / S, H = kWidth / D;
      const Device gpu = Device::cuda(0);
      auto rows = [&](void* ptr) { return Tensor::contiguous(ptr, DType::bf16, {B, S, H, D}, gpu); };
      const AttentionInputs in{rows(q.ptr), rows(k.ptr), rows(v.ptr)};
      const AttentionOutputs forward{rows(out.ptr), Tensor::contiguous(lse.ptr, DType::f32, {B, H, S}, gpu)};
      const AttentionGrads grads{rows(dq.ptr), rows(dk.ptr), rows(dv.ptr)};
      AttentionOptions options;
      options.causal = causal;
      attention_forward(in, forward, options);

      auto run = [&](int which) {
        const BackwardFormScope form(forms[which]);
        AttentionOptions form_options = options;
        form_options.deterministic = forms[which].deterministic;
        attention_backward(in, forward, rows(dout.ptr), std::nullopt, grads, form_options);
      };
      const std::array<float, 2> ms = alternating_medians_ms(run, flush);
      std::printf("%4lld", static_cast<long long>(D));
      print_schedule_row(S, causal, 2.5 * 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0), ms);

      // The same gradients from both forms.
      std::vector<uint16_t> got[2][3];
      for (int which = 0; which < 2; ++which) {
        for (void* ptr : {dq.ptr, dk.ptr, dv.ptr}) cuda_ok(cudaMemset(ptr, 0xFF, operand_bytes));  // NaN words
        run(which);
        void* ptrs[] = {dq.ptr, dk.ptr, dv.ptr};
        for (int g = 0; g < 3; ++g) {
          got[which][g].resize(operand_bytes / 2);
          cuda_ok(cudaMemcpy(got[which][g].data(), ptrs[g], operand_bytes, cudaMemcpyDeviceToHost));
        }
      }
      const char* names[] = {"dq", "dk", "dv"};
      for (int g = 0; g < 3; ++g)
        EXPECT_LT(relative_difference_bf16(got[1][g], got[0][g]), tolerance(DType::bf16))
            << names[g] << " D " << D << " S " << S;
    }
  }
}

// The two schedules at D = 128 and 256, S = 2048 and 16384.
TEST(AttentionCudaTiming, BackwardSchedulesSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_backward_forms({BackwardForm{AttentionBackwardSchedule::standard}, BackwardForm{AttentionBackwardSchedule::pingpong}},
                      timed_shapes({{128, 2048}, {128, 16384}, {256, 2048}, {256, 16384}}));
}

// The pingpong backward with dK and dV stored by every thread, then by tensor copies.
TEST(AttentionCudaTiming, BackwardStagedStoreSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  BackwardForm stores{AttentionBackwardSchedule::pingpong};
  stores.staged_store = false;
  time_backward_forms({stores, BackwardForm{AttentionBackwardSchedule::pingpong}},
                      timed_shapes({{128, 1024}, {128, 2048}, {128, 4096}, {128, 16384}, {64, 2048}, {256, 2048}}));
}

// The pingpong backward in the 3-D grid, then with its causal key blocks in the sectioned 1-D
// grid (the non-causal rows run the same kernel twice).
TEST(AttentionCudaTiming, BackwardSectionsSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  BackwardForm sections{AttentionBackwardSchedule::pingpong};
  sections.sections = true;
  time_backward_forms({BackwardForm{AttentionBackwardSchedule::pingpong}, sections},
                      timed_shapes({{128, 1024}, {128, 2048}, {128, 4096}, {128, 8192}, {128, 16384}, {64, 2048},
                                    {64, 8192}, {256, 2048}}));
}

// D = 256: the default (pingpong) against pingpong with key-block pairs, over the issue's
// grid of S.
TEST(AttentionCudaTiming, BackwardKeyPairsSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_backward_forms(
      {BackwardForm{AttentionBackwardSchedule::pingpong}, BackwardForm{AttentionBackwardSchedule::pingpong, true}},
      {{256, 512}, {256, 1024}, {256, 2048}, {256, 4096}, {256, 8192}, {256, 16384}});
}

// The deterministic backward: the Hopper kernel with its dQ adds in order against the same
// kernel unordered (what determinism costs), then against the two mma.sync kernels (D <= 128).
TEST(AttentionCudaTiming, DeterministicBackwardSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardForm ordered = deterministic_form(AttentionDeterministicBackward::ordered);
  time_backward_forms({BackwardForm{AttentionBackwardSchedule::pingpong}, ordered},
                      {{64, 2048}, {128, 2048}, {128, 8192}, {256, 2048}, {256, 8192}});
  time_backward_forms({deterministic_form(AttentionDeterministicBackward::two_kernel), ordered},
                      {{64, 2048}, {128, 2048}, {128, 8192}});
}

// Bad input that only the CUDA path rejects.
TEST(AttentionCudaErrors, RejectsWhatTheKernelsCannotTake) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto fwd = [](int64_t D, int64_t Dv, DType dtype) {
    HostTensor q = uniform({1, 4, 1, D}, dtype), k = uniform({1, 4, 1, D}, dtype), v = uniform({1, 4, 1, Dv}, dtype);
    HostTensor out = poisoned({1, 4, 1, Dv}, dtype), lse = poisoned({1, 1, 4}, DType::f32);
    DeviceTensor dq(q), dk(k), dv(v), dout(out), dlse(lse);
    attention_forward({dq.view, dk.view, dv.view}, {dout.view, dlse.view});
  };
  EXPECT_SEQMIX_ERROR(fwd(32, 32, DType::bf16), "this op has no CUDA kernel for head dims D = 32, Dv = 32");
  EXPECT_SEQMIX_ERROR(fwd(128, 64, DType::bf16), "this op has no CUDA kernel for head dims D = 128, Dv = 64");
  EXPECT_SEQMIX_ERROR(fwd(64, 64, DType::f32), "this op has no CUDA kernel for dtype f32");
}

}  // namespace
}  // namespace seqmix::test
