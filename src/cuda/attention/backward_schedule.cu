// The process-wide choice of the Hopper backward's schedule and key-block pairs, and of the
// deterministic backward's form (params.hpp).
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

// Key-block pairs at D = 256: off until measured faster on the H100 (NOTES.md "Key-block pairs").
bool& current_key_pairs() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_BACKWARD_PAIRS", false);
  return on;
}

// ordered is the default: see NOTES.md "The deterministic backward in order".
AttentionDeterministicBackward& current_deterministic() {
  static AttentionDeterministicBackward form =
      choice_from_environment("SEQMIX_ATTENTION_DETERMINISTIC", {{"ordered", AttentionDeterministicBackward::ordered},
                               {"two_kernel", AttentionDeterministicBackward::two_kernel}},
                              AttentionDeterministicBackward::ordered);
  return form;
}

bool& current_staged_store() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_BACKWARD_STAGED_STORE", true);
  return on;
}

bool& current_sections() {
  static bool on = flag_from_environment("SEQMIX_ATTENTION_BACKWARD_SECTIONS", true);
  return on;
}

}  // namespace

AttentionDeterministicBackward attention_deterministic_backward() { return current_deterministic(); }
void attention_set_deterministic_backward(AttentionDeterministicBackward form) { current_deterministic() = form; }
AttentionBackwardSchedule attention_backward_schedule() { return current_schedule(); }
void attention_set_backward_schedule(AttentionBackwardSchedule schedule) { current_schedule() = schedule; }
bool attention_backward_key_pairs() { return current_key_pairs(); }
void attention_set_backward_key_pairs(bool on) { current_key_pairs() = on; }
bool attention_backward_staged_store() { return current_staged_store(); }
void attention_set_backward_staged_store(bool on) { current_staged_store() = on; }
bool attention_backward_sections() { return current_sections(); }
void attention_set_backward_sections(bool on) { current_sections() = on; }

}  // namespace seqmix::cuda
