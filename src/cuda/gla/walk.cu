// The process-wide choices of the forward's walk and diagonal and the backward's diagonal
// (params.hpp).
#include <cstdlib>
#include <cstring>

#include "cuda/gla/params.hpp"

namespace seqmix::cuda {
namespace {

GlaForwardWalk from_environment() {
  const char* value = std::getenv("SEQMIX_GLA_FORWARD_WALK");
  if (value && std::strcmp(value, "pipelined") == 0) return GlaForwardWalk::pipelined;
  if (value && std::strcmp(value, "serial") == 0) return GlaForwardWalk::serial;
  return kDefaultForwardWalk;
}

GlaForwardWalk& current_walk() {
  static GlaForwardWalk walk = from_environment();
  return walk;
}

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

}  // namespace

GlaForwardWalk gla_forward_walk() { return current_walk(); }
void gla_set_forward_walk(GlaForwardWalk walk) { current_walk() = walk; }

GlaForwardDiagonal gla_forward_diagonal() { return current_diagonal(); }
void gla_set_forward_diagonal(GlaForwardDiagonal diagonal) { current_diagonal() = diagonal; }

GlaBackwardDiagonal gla_backward_diagonal() { return current_backward_diagonal(); }
void gla_set_backward_diagonal(GlaBackwardDiagonal diagonal) { current_backward_diagonal() = diagonal; }

}  // namespace seqmix::cuda
