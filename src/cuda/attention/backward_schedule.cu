// The process-wide choice of the Hopper backward's schedule (params.hpp).
#include "cuda/attention/params.hpp"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {
namespace {

// Pingpong is the default: on the H100 it measured 1.27-1.44x the standard schedule at every
// timed shape, D = 256 (its dQ reduce without turns) 1.34-1.44x (AttentionCudaTiming.
// BackwardSchedulesSideBySide, NOTES.md).
AttentionBackwardSchedule from_environment() {
  return choice_from_environment("SEQMIX_ATTENTION_BACKWARD", {{"standard", AttentionBackwardSchedule::standard}},
                                 AttentionBackwardSchedule::pingpong);
}

AttentionBackwardSchedule& current_schedule() {
  static AttentionBackwardSchedule schedule = from_environment();
  return schedule;
}

}  // namespace

AttentionBackwardSchedule attention_backward_schedule() { return current_schedule(); }
void attention_set_backward_schedule(AttentionBackwardSchedule schedule) { current_schedule() = schedule; }

}  // namespace seqmix::cuda
