// The process-wide choices of the forward's and the backward's diagonal, the backward's token
// walk and tail, and the forward's pass 1 in pieces (params.hpp).
#include <cstdlib>
#include <cstring>

#include "cuda/gla/params.hpp"

namespace seqmix::cuda {
namespace {

GlaForwardDiagonal diagonal_from_environment() {
  const char* value = std::getenv("SEQMIX_GLA_FORWARD_DIAGONAL");
  if (value && std::strcmp(value, "tensor_cores") == 0) return GlaForwardDiagonal::tensor_cores;
  if (value && std::strcmp(value, "cuda_cores") == 0) return GlaForwardDiagonal::cuda_cores;
  return kDefaultForwardDiagonal;
}

GlaForwardDiagonal& current_diagonal() {
  static GlaForwardDiagonal diagonal = diagonal_from_environment();
  return diagonal;
}

GlaBackwardDiagonal backward_diagonal_from_environment() {
  const char* value = std::getenv("SEQMIX_GLA_BACKWARD_DIAGONAL");
  if (value && std::strcmp(value, "tensor_cores") == 0) return GlaBackwardDiagonal::tensor_cores;
  if (value && std::strcmp(value, "cuda_cores") == 0) return GlaBackwardDiagonal::cuda_cores;
  return kDefaultBackwardDiagonal;
}

GlaBackwardDiagonal& current_backward_diagonal() {
  static GlaBackwardDiagonal diagonal = backward_diagonal_from_environment();
  return diagonal;
}

GlaBackwardWalk& current_backward_walk() {
  static GlaBackwardWalk walk = [] {
    const char* value = std::getenv("SEQMIX_GLA_BACKWARD_WALK");
    if (value && std::strcmp(value, "rows") == 0) return GlaBackwardWalk::rows;
    if (value && std::strcmp(value, "quads") == 0) return GlaBackwardWalk::quads;
    return kDefaultBackwardWalk;
  }();
  return walk;
}

GlaBackwardTail& current_backward_tail() {
  static GlaBackwardTail tail = [] {
    const char* value = std::getenv("SEQMIX_GLA_BACKWARD_TAIL");
    if (value && std::strcmp(value, "narrow") == 0) return GlaBackwardTail::narrow;
    if (value && std::strcmp(value, "wide") == 0) return GlaBackwardTail::wide;
    return kDefaultBackwardTail;
  }();
  return tail;
}

bool& current_pieces() {
  static bool on = [] {
    const char* value = std::getenv("SEQMIX_GLA_FORWARD_PIECES");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return on;
}

}  // namespace

bool gla_forward_pieces() { return current_pieces(); }
void gla_set_forward_pieces(bool on) { current_pieces() = on; }

GlaForwardDiagonal gla_forward_diagonal() { return current_diagonal(); }
void gla_set_forward_diagonal(GlaForwardDiagonal diagonal) { current_diagonal() = diagonal; }

GlaBackwardDiagonal gla_backward_diagonal() { return current_backward_diagonal(); }
void gla_set_backward_diagonal(GlaBackwardDiagonal diagonal) { current_backward_diagonal() = diagonal; }

GlaBackwardWalk gla_backward_walk() { return current_backward_walk(); }
void gla_set_backward_walk(GlaBackwardWalk walk) { current_backward_walk() = walk; }

GlaBackwardTail gla_backward_tail() { return current_backward_tail(); }
void gla_set_backward_tail(GlaBackwardTail tail) { current_backward_tail() = tail; }

}  // namespace seqmix::cuda
