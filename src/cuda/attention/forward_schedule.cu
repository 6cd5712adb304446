// The process-wide choice of the forward's schedule (params.hpp).
#include <cstdlib>
#include <cstring>

#include "cuda/attention/params.hpp"

namespace seqmix::cuda {
namespace {

AttentionForwardSchedule from_environment() {
  const char* value = std::getenv("SEQMIX_ATTENTION_FORWARD");
  // Pingpong is the default: on the H100 it measured 1.23-1.64x the standard schedule
  // (AttentionCudaTiming.ForwardSchedulesSideBySide, NOTES.md).
  if (value && std::strcmp(value, "standard") == 0) return AttentionForwardSchedule::standard;
  return AttentionForwardSchedule::pingpong;
}

AttentionForwardSchedule& current_schedule() {
  static AttentionForwardSchedule schedule = from_environment();
  return schedule;
}

}  // namespace

AttentionForwardSchedule attention_forward_schedule() { return current_schedule(); }
void attention_set_forward_schedule(AttentionForwardSchedule schedule) { current_schedule() = schedule; }

}  // namespace seqmix::cuda
