// The process-wide choice of the Hopper backward's schedule (params.hpp).
#include <cstdlib>
#include <cstring>

#include "cuda/attention/params.hpp"

namespace seqmix::cuda {
namespace {

AttentionBackwardSchedule from_environment() {
  const char* value = std::getenv("SEQMIX_ATTENTION_BACKWARD");
  // Pingpong is the default: on the H100 it measured 1.27-1.44x the standard schedule at
  // every timed shape (AttentionCudaTiming.BackwardSchedulesSideBySide, NOTES.md).
  if (value && std::strcmp(value, "standard") == 0) return AttentionBackwardSchedule::standard;
  return AttentionBackwardSchedule::pingpong;
}

AttentionBackwardSchedule& current_schedule() {
  static AttentionBackwardSchedule schedule = from_environment();
  return schedule;
}

}  // namespace

AttentionBackwardSchedule attention_backward_schedule() { return current_schedule(); }
void attention_set_backward_schedule(AttentionBackwardSchedule schedule) { current_schedule() = schedule; }

}  // namespace seqmix::cuda
