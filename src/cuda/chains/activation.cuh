// The segment activations and their derivatives on the device, by code (seqmix::Activation
// in the order of its enum: identity, silu, sigmoid, logsigmoid, softplus), and the two
// epilogue-visitor functors built from them. The same overflow-free forms as the CPU path
// (src/cpu/chains_math.hpp); tau enters as the column's scale (1/tau for logsigmoid).
#pragma once

#include <cutlass/array.h>
#include <cutlass/cutlass.h>

namespace seqmix::cuda::proj {

CUTLASS_HOST_DEVICE float sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

// log(1 + e^{z}) = max(z, 0) + log1p(e^{−|z|}): no overflow in either sign.
CUTLASS_HOST_DEVICE float softplus(float z) { return fmaxf(z, 0.f) + log1pf(expf(-fabsf(z))); }

CUTLASS_HOST_DEVICE float activate(float z, int code) {
  switch (code) {
    case 1: return z * sigmoid(z);
    case 2: return sigmoid(z);
    case 3: return -softplus(-z);  // log σ(z)
    case 4: return softplus(z);
    default: return z;
  }
}

// d activate / dz.
CUTLASS_HOST_DEVICE float activation_derivative(float z, int code) {
  switch (code) {
    case 1: {
      const float s = sigmoid(z);
      return s * (1.f + z * (1.f - s));
    }
    case 2: {
      const float s = sigmoid(z);
      return s * (1.f - s);
    }
    case 3: return sigmoid(-z);
    case 4: return sigmoid(z);
    default: return 1.f;
  }
}

// Lifts a scalar functor to the epilogue's fragments (cutlass::Array), element by element,
// after one look at the fragment's codes: a fragment none of whose columns has an
// activation (every fragment but those of a layer's narrow gate segments) takes `Plain`,
// one multiply. Evaluating the switch over expf/log1pf for every element, identity columns
// included, made the GEMM 2.7–3.3× slower than without the tree (NOTES.md, "Diagnosis").
template <class Scalar, class Plain>
struct Elementwise {
  template <int N, class... Rest>
  CUTLASS_HOST_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& first,
                                                         Rest const&... rest) const {
    // The code is the second-to-last input of both nodes: (z, code, scale), (dy, z, code, scale).
    cutlass::Array<float, N> const& code = nth<sizeof...(Rest) - 1>(first, rest...);
    bool any_activation = false;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) any_activation |= code[i] != 0.f;
    cutlass::Array<float, N> out;
    if (any_activation) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) out[i] = Scalar{}(first[i], rest[i]...);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) out[i] = Plain{}(first[i], rest[i]...);
    }
    return out;
  }

 private:
  template <int I, class First, class... Rest>
  CUTLASS_HOST_DEVICE static auto const& nth(First const& first, Rest const&... rest) {
    if constexpr (I == 0) return first;
    else return nth<I - 1>(rest...);
  }
};

// Forward node: (z, code, scale) -> activate(z, code)·scale.
struct ActivateScalar {
  CUTLASS_HOST_DEVICE float operator()(float z, float code, float scale) const {
    return activate(z, static_cast<int>(code)) * scale;
  }
};
struct ActivateIdentity {
  CUTLASS_HOST_DEVICE float operator()(float z, float, float scale) const { return z * scale; }
};
// Backward node: (dy, z, code, scale) -> dy·activate'(z, code)·scale.
struct DerivativeScalar {
  CUTLASS_HOST_DEVICE float operator()(float dy, float z, float code, float scale) const {
    return dy * activation_derivative(z, static_cast<int>(code)) * scale;
  }
};
struct DerivativeIdentity {
  CUTLASS_HOST_DEVICE float operator()(float dy, float, float, float scale) const { return dy * scale; }
};

// Sm90Compute takes a template of one type parameter.
template <class>
struct SegmentActivation : Elementwise<ActivateScalar, ActivateIdentity> {};
template <class>
struct SegmentDerivative : Elementwise<DerivativeScalar, DerivativeIdentity> {};

}  // namespace seqmix::cuda::proj
