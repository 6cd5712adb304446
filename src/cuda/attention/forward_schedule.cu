// The process-wide choice of the forward's schedule (params.hpp).
#include <cstdlib>
#include <cstring>

#include "cuda/attention/params.hpp"

namespace seqmix::cuda {
namespace {

AttentionForwardSchedule from_environment() {
  const char* value = std::getenv("SEQMIX_ATTENTION_FORWARD");
  // by_shape is the default. On the H100 pingpong measured 1.23-1.64x the standard schedule,
  // and persistent 0.97-1.07x pingpong for causal attention and D = 256 where the tiles take
  // more than one wave (AttentionCudaTiming.ForwardSchedulesSideBySide, NOTES.md).
  if (value && std::strcmp(value, "standard") == 0) return AttentionForwardSchedule::standard;
  if (value && std::strcmp(value, "pingpong") == 0) return AttentionForwardSchedule::pingpong;
  if (value && std::strcmp(value, "persistent") == 0) return AttentionForwardSchedule::persistent;
  return AttentionForwardSchedule::by_shape;
}

AttentionForwardSchedule& current_schedule() {
  static AttentionForwardSchedule schedule = from_environment();
  return schedule;
}

}  // namespace

AttentionForwardSchedule attention_forward_schedule() { return current_schedule(); }
void attention_set_forward_schedule(AttentionForwardSchedule schedule) { current_schedule() = schedule; }

}  // namespace seqmix::cuda
