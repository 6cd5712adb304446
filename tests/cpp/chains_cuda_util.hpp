// Helpers shared by the chains' CUDA tests: float64 copies for the oracle, a chain's total
// width, one buffer's per-segment column views, and the per-segment oracle comparison; for
// the timing tests, random device buffers, issue 6's layers, cuBLAS loaded at run time and
// the graph-replay timing, and the timing tables' helpers.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "cuda/chains/gemm_tiles.hpp"
#include "cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {

// A float64 copy of a bf16 host tensor: the oracle sees exactly the stored values.
inline HostTensor as_f64(const HostTensor& t) {
  HostTensor copy(t.view.shape, DType::f64);
  copy.set(t.values());
  return copy;
}

inline int64_t width_of(const std::vector<ProjectionSegment>& segments) {
  int64_t n = 0;
  for (const auto& s : segments) n += s.width;
  return n;
}

// Column views [rows, width_s] of one [rows, N] buffer, one per segment.
inline std::vector<Tensor> column_views(const Tensor& buffer, const std::vector<ProjectionSegment>& segments) {
  std::vector<Tensor> views;
  int64_t first = 0;
  for (const auto& s : segments) {
    Tensor v = buffer;
    v.data = static_cast<char*>(buffer.data) + first * dtype_size(buffer.dtype);
    v.shape = {buffer.shape[0], s.width};
    views.push_back(v);
    first += s.width;
  }
  return views;
}

// Each segment's columns of the [M, N] output `got` against the oracle's segment, by relative norm.
inline void expect_segments_match(const std::vector<double>& got, const std::vector<HostTensor>& want,
                                  const std::vector<ProjectionSegment>& segments, int64_t M, double tol) {
  const int64_t N = width_of(segments);
  int64_t first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    std::vector<double> columns;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < segments[s].width; ++j) columns.push_back(got[i * N + first + j]);
    EXPECT_LT(rel_err(columns, want[s].values()), tol)
        << "segment " << s << " (" << activation_name(segments[s].activation) << ")";
    first += segments[s].width;
  }
}

inline std::optional<Tensor> maybe(bool present, const Tensor& t) {
  return present ? std::optional<Tensor>(t) : std::nullopt;
}

// An output chain's operands: o, g [T, H, Dv], a norm weight [Dv] near 1, out_weight
// [d_out, H·Dv] and a gradient dy [T, d_out], random bf16, on the host and on the device.
struct OutputChainData {
  const int64_t T, H, Dv, d_out;
  HostTensor o = uniform({T, H, Dv}, DType::bf16), g = uniform({T, H, Dv}, DType::bf16, -3.0, 3.0);
  HostTensor nw = uniform({Dv}, DType::bf16, 0.5, 1.5), ow = uniform({d_out, H * Dv}, DType::bf16, -0.2, 0.2);
  HostTensor dy = uniform({T, d_out}, DType::bf16);
  DeviceTensor d_o{o}, d_g{g}, d_nw{nw}, d_ow{ow}, d_dy{dy};
  OutputChainData(int64_t tokens, int64_t heads, int64_t dv, int64_t outputs)
      : T(tokens), H(heads), Dv(dv), d_out(outputs) {}
  OutputChainInputs inputs() const { return {d_o, d_g, d_nw, d_ow}; }
};

// ---- the timing tests' helpers ----

// A device buffer of `count` bf16 values drawn from U(-scale, scale): a random host block
// copied over and over (generating hundreds of millions of values on the host would take
// longer than the whole measurement). Never zeros: they run faster than real data.
struct DeviceBf16 {
  __nv_bfloat16* ptr = nullptr;
  int64_t count = 0;
  DeviceBf16(int64_t n, float scale) : count(n) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(__nv_bfloat16)));
    const int64_t block = std::min<int64_t>(n, int64_t(1) << 22);
    std::vector<__nv_bfloat16> host(block);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (auto& v : host) v = __float2bfloat16(dist(rng));
    for (int64_t at = 0; at < n; at += block)
      cuda_ok(cudaMemcpy(ptr + at, host.data(), std::min(block, n - at) * sizeof(__nv_bfloat16),
                         cudaMemcpyHostToDevice));
  }
  ~DeviceBf16() { cudaFree(ptr); }
  DeviceBf16(const DeviceBf16&) = delete;
  DeviceBf16& operator=(const DeviceBf16&) = delete;
  Tensor view(std::vector<int64_t> shape) const {
    return Tensor::contiguous(ptr, DType::bf16, std::move(shape), Device::cuda(0));
  }
  // Every value finite (a sample of the first rows is enough to catch an unwritten buffer).
  bool finite_prefix(int64_t n) const {
    std::vector<__nv_bfloat16> host(std::min(n, count));
    if (cudaMemcpy(host.data(), ptr, host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost) != cudaSuccess)
      return false;
    return std::all_of(host.begin(), host.end(), [](auto v) { return std::isfinite(__bfloat162float(v)); });
  }
  void poison() { cuda_ok(cudaMemset(ptr, 0xff, count * sizeof(__nv_bfloat16))); }  // bf16 NaN
};

struct Layer {
  const char* name;
  std::vector<ProjectionSegment> segments;
  int64_t width() const { return width_of(segments); }
};

inline const Layer kGla{"gla",
                        {{1024, Activation::identity, 1.0}, {1024, Activation::identity, 1.0},
                         {2048, Activation::identity, 1.0}, {2048, Activation::identity, 1.0},
                         {16, Activation::identity, 1.0}}};
inline const Layer kGatedDeltaNet{"gated_deltanet",
                                  {{2048, Activation::identity, 1.0}, {2048, Activation::identity, 1.0},
                                   {4096, Activation::identity, 1.0}, {4096, Activation::identity, 1.0},
                                   {16, Activation::softplus, 1.0}, {16, Activation::sigmoid, 1.0}}};
inline constexpr int64_t kD = 2048;

// cuBLAS, loaded at run time (the test binary does not link it): out [M, N] = x [M, K]·Wᵀ,
// all row-major bf16, f32 accumulation, as torch.matmul(x, W.t()) runs it. Absent (no
// library found): `ok` is false and the timing prints no cuBLAS column.
struct Cublas {
  void* library = nullptr;
  cublasHandle_t handle = nullptr;
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                    const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  bool ok = false;
  Cublas() {
    for (const char* name : {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"})
      if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!library) return;
    using Create = cublasStatus_t (*)(cublasHandle_t*);
    const auto create = reinterpret_cast<Create>(dlsym(library, "cublasCreate_v2"));
    gemm_ex = reinterpret_cast<GemmEx>(dlsym(library, "cublasGemmEx"));
    ok = create && gemm_ex && create(&handle) == CUBLAS_STATUS_SUCCESS;
  }
  // Column-major view: outᵀ [N, M] = W [N, K] · xᵀ, i.e. op(A) = Aᵀ with A = Wᵀ stored [K, N].
  void nt(int64_t M, int64_t N, int64_t K, const void* x, const void* w, void* out) const {
    const float one = 1.f, zero = 0.f;
    const auto status = gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                static_cast<int>(K), &one, w, CUDA_R_16BF, static_cast<int>(K), x, CUDA_R_16BF,
                                static_cast<int>(K), &zero, out, CUDA_R_16BF, static_cast<int>(N),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  }
  // out [M, N] = aᵀ·b, a stored [K, M], b [K, N] (the dW GEMM): outᵀ = bᵀ·a column-major.
  void tn(int64_t M, int64_t N, int64_t K, const void* a, const void* b, void* out) const {
    const float one = 1.f, zero = 0.f;
    const auto status = gemm_ex(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(N), static_cast<int>(M),
                                static_cast<int>(K), &one, b, CUDA_R_16BF, static_cast<int>(N), a, CUDA_R_16BF,
                                static_cast<int>(M), &zero, out, CUDA_R_16BF, static_cast<int>(N),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  }
};
inline const Cublas& cublas() {
  static const Cublas instance;
  return instance;
}

// Median of CUDA-graph replays of `run` captured once on `stream` (the bench's forward
// timing): one eager call first (fills what is kept across calls), then the replays timed as
// median_ms times a call (one untimed, 10 timed, the L2 flushed before each).
inline float graph_median_ms(cudaStream_t stream, const std::function<void()>& run) {
  run();
  cuda_ok(cudaStreamSynchronize(stream));
  const CapturedGraph graph(stream, run);
  return test::median_ms([&] { graph.launch(nullptr); }, {.reps = 10, .warmups = 1});
}

// The median event time of one graph replay of each of `runs` (each captured once on `stream`
// after one eager call), the replays taken in turn, A B C A B C ..., the L2 flushed before
// each: where the clock drifts over a long run of GEMMs (32768 tokens), every configuration
// meets the same drift, which blocks of one configuration's replays do not ensure.
inline std::vector<float> interleaved_graph_medians(cudaStream_t stream,
                                                    const std::vector<std::function<void()>>& runs, int reps = 21) {
  std::vector<std::unique_ptr<CapturedGraph>> graphs;
  for (const auto& run : runs) {
    run();
    cuda_ok(cudaStreamSynchronize(stream));
    graphs.push_back(std::make_unique<CapturedGraph>(stream, run));
  }
  const EventTimer timer;
  std::vector<std::vector<float>> times(runs.size());
  for (int rep = -1; rep < reps; ++rep)  // rep −1: one untimed replay of each
    for (size_t i = 0; i < graphs.size(); ++i) {
      flush_l2(rep);
      const float ms = timer.ms([&] { graphs[i]->launch(nullptr); });
      if (rep >= 0) times[i].push_back(ms);
    }
  std::vector<float> medians;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

// `issue` with the environment variable `name` set to `value` while it runs (a switch the
// chains read at each call, so also while a graph of it is captured).
inline std::function<void()> with_environment(const char* name, const char* value, std::function<void()> issue) {
  return [name, value, issue = std::move(issue)] {
    setenv(name, value, 1);
    issue();
    unsetenv(name);
  };
}

// The middle of three.
inline float middle(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The first rows of a bf16 device matrix [rows, width], on the host.
inline std::vector<float> first_rows(const DeviceBf16& m, int64_t rows, int64_t width) {
  std::vector<__nv_bfloat16> host(rows * width);
  cuda_ok(cudaMemcpy(host.data(), m.ptr, host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> values(host.size());
  for (size_t i = 0; i < host.size(); ++i) values[i] = __bfloat162float(host[i]);
  return values;
}

inline double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// A tile order's name, for the timing tables.
inline const char* raster_name(cuda::Raster r) {
  return r == cuda::Raster::along_m ? "along M" : r == cuda::Raster::along_n ? "along N" : "heuristic";
}

// A non-blocking stream with cuBLAS's handle bound to it for the test's lifetime (graph
// capture needs every timed launch on one stream).
struct TimingStream {
  cudaStream_t stream = nullptr;
  using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  static void bind(cudaStream_t s) {
    if (!cublas().ok) return;
    const auto set_stream = reinterpret_cast<SetStream>(dlsym(cublas().library, "cublasSetStream_v2"));
    EXPECT_TRUE(set_stream && set_stream(cublas().handle, s) == CUBLAS_STATUS_SUCCESS);
  }
  TimingStream() {
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    bind(stream);
  }
  ~TimingStream() {
    bind(nullptr);
    cudaStreamDestroy(stream);
  }
  TimingStream(const TimingStream&) = delete;
  TimingStream& operator=(const TimingStream&) = delete;
};

}  // namespace seqmix::test
