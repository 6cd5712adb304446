// The process-wide choice of the forward's walk (params.hpp).
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

}  // namespace

GlaForwardWalk gla_forward_walk() { return current_walk(); }
void gla_set_forward_walk(GlaForwardWalk walk) { current_walk() = walk; }

}  // namespace seqmix::cuda
