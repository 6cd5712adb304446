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

// Lifts a scalar functor to the epilogue's fragments (cutlass::Array), element by element.
template <class Scalar>
struct Elementwise {
  template <class T, int N, class... Rest>
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& first,
                                                     Rest const&... rest) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = Scalar{}(first[i], rest[i]...);
    return out;
  }
};

// Forward node: (z, code, scale) -> activate(z, code)·scale.
struct ActivateScalar {
  CUTLASS_HOST_DEVICE float operator()(float z, float code, float scale) const {
    return activate(z, static_cast<int>(code)) * scale;
  }
};
// Backward node: (dy, z, code, scale) -> dy·activate'(z, code)·scale.
struct DerivativeScalar {
  CUTLASS_HOST_DEVICE float operator()(float dy, float z, float code, float scale) const {
    return dy * activation_derivative(z, static_cast<int>(code)) * scale;
  }
};

// Sm90Compute takes a template of one type parameter.
template <class>
struct SegmentActivation : Elementwise<ActivateScalar> {};
template <class>
struct SegmentDerivative : Elementwise<DerivativeScalar> {};

}  // namespace seqmix::cuda::proj
