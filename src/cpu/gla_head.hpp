// One (sequence, head) of gated linear attention, the unit of work both CPU paths are
// written against. Tokens of one head are rows of a dense [tokens, H, D] buffer, so
// consecutive rows are H·D elements apart; states are dense [K, V] blocks.
#pragma once

#include <cstdint>

namespace seqmix::cpu::gla {

// Row t of one head: base + t·stride.
template <class T>
struct Rows {
  T* base;
  int64_t stride;
  T* operator[](int64_t t) const { return base + t * stride; }
};

struct HeadShape {
  int64_t length;  // tokens of this sequence
  int64_t K, V;
  double scale;
};

template <class T>
struct HeadInputs {
  Rows<const T> q, k, v, g;  // rows of K, K, V, K values
  const T* h0;               // [K, V] initial state (zeros when none was given)
};

template <class T>
struct HeadForward {
  Rows<T> o;  // rows of V values
  T* hT;      // [K, V] final state
};

template <class T>
struct HeadBackward {
  Rows<const T> d_o;
  const T* dhT;               // [K, V] gradient of the final state (zeros when none)
  Rows<T> dq, dk, dv, dg;
  T* dh0;                     // [K, V] gradient of the initial state
};

// The float64 oracle: token by token from the definition (gla_reference.cpp).
void reference_forward(const HeadShape& s, const HeadInputs<double>& in, const HeadForward<double>& out);
void reference_backward(const HeadShape& s, const HeadInputs<double>& in, const HeadBackward<double>& grads);

// The float32 chunkwise form the GPU kernels use (gla_chunked.cpp).
void chunked_forward(const HeadShape& s, const HeadInputs<float>& in, const HeadForward<float>& out);
void chunked_backward(const HeadShape& s, const HeadInputs<float>& in, const HeadBackward<float>& grads);

}  // namespace seqmix::cpu::gla
