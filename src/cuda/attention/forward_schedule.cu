// The process-wide choice of the forward's schedule (params.hpp).
#include "cuda/attention/params.hpp"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {
namespace {

// by_shape is the default. On the H100 pingpong measured 1.23-1.64x the standard schedule;
// persistent against pingpong: launch.cuh's resolved_schedule
// (AttentionCudaTiming.ForwardSchedulesSideBySide, NOTES.md).
AttentionForwardSchedule from_environment() {
  return choice_from_environment("SEQMIX_ATTENTION_FORWARD",
                                 {{"standard", AttentionForwardSchedule::standard},
                                  {"pingpong", AttentionForwardSchedule::pingpong},
                                  {"persistent", AttentionForwardSchedule::persistent}},
                                 AttentionForwardSchedule::by_shape);
}

AttentionForwardSchedule& current_schedule() {
  static AttentionForwardSchedule schedule = from_environment();
  return schedule;
}

int& current_warpgroups() {
  static int warpgroups =
      choice_from_environment("SEQMIX_ATTENTION_FORWARD_WARPGROUPS", {{"1", 1}, {"2", 2}, {"3", 3}}, 0);
  return warpgroups;
}

bool& current_narrow_first() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_FORWARD_NARROW", true);
  return on;
}

bool& current_lazy_rescale() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_FORWARD_LAZY_RESCALE", true);
  return on;
}

bool& current_staged_output() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_FORWARD_STAGED_OUTPUT", true);
  return on;
}

bool& current_sections() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_FORWARD_SECTIONS", true);
  return on;
}

}  // namespace

AttentionForwardSchedule attention_forward_schedule() { return current_schedule(); }
void attention_set_forward_schedule(AttentionForwardSchedule schedule) { current_schedule() = schedule; }
int attention_forward_warpgroups() { return current_warpgroups(); }
void attention_set_forward_warpgroups(int warpgroups) {
  current_warpgroups() = warpgroups >= 1 && warpgroups <= 3 ? warpgroups : 0;
}

bool attention_forward_narrow_first() { return current_narrow_first(); }
void attention_set_forward_narrow_first(bool on) { current_narrow_first() = on; }
bool attention_forward_lazy_rescale() { return current_lazy_rescale(); }
void attention_set_forward_lazy_rescale(bool on) { current_lazy_rescale() = on; }
bool attention_forward_staged_output() { return current_staged_output(); }
void attention_set_forward_staged_output(bool on) { current_staged_output() = on; }
bool attention_forward_sections() { return current_sections(); }
void attention_set_forward_sections(bool on) { current_sections() = on; }

}  // namespace seqmix::cuda
