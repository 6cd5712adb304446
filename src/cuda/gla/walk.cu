// The process-wide choices of the forward's and the backward's diagonal, the backward's token
// walk and tail, the stages of its dL/dS walk, the forward walks' tiling, the outputs pass's
// walkers and output path, the chunks factored whole (forward and backward), the forward's pass 1 in pieces, the
// backward's early start and its table copies (params.hpp).
#include "cuda/common/environment.hpp"
#include "cuda/gla/params.hpp"

namespace seqmix::cuda {
namespace {

GlaForwardDiagonal& current_diagonal() {
  static GlaForwardDiagonal diagonal = choice_from_environment(
      "SEQMIX_GLA_FORWARD_DIAGONAL",
      {{"tensor_cores", GlaForwardDiagonal::tensor_cores}, {"cuda_cores", GlaForwardDiagonal::cuda_cores}},
      kDefaultForwardDiagonal);
  return diagonal;
}

GlaBackwardDiagonal& current_backward_diagonal() {
  static GlaBackwardDiagonal diagonal = choice_from_environment(
      "SEQMIX_GLA_BACKWARD_DIAGONAL",
      {{"tensor_cores", GlaBackwardDiagonal::tensor_cores}, {"cuda_cores", GlaBackwardDiagonal::cuda_cores}},
      kDefaultBackwardDiagonal);
  return diagonal;
}

GlaBackwardWalk& current_backward_walk() {
  static GlaBackwardWalk walk = choice_from_environment(
      "SEQMIX_GLA_BACKWARD_WALK", {{"rows", GlaBackwardWalk::rows}, {"quads", GlaBackwardWalk::quads}},
      kDefaultBackwardWalk);
  return walk;
}

GlaBackwardTail& current_backward_tail() {
  static GlaBackwardTail tail = choice_from_environment(
      "SEQMIX_GLA_BACKWARD_TAIL", {{"narrow", GlaBackwardTail::narrow}, {"wide", GlaBackwardTail::wide}},
      kDefaultBackwardTail);
  return tail;
}

GlaForwardTiling& current_forward_tiling() {
  static GlaForwardTiling tiling = choice_from_environment(
      "SEQMIX_GLA_FORWARD_TILING", {{"wide", GlaForwardTiling::wide}, {"tall", GlaForwardTiling::tall}},
      kDefaultForwardTiling);
  return tiling;
}

GlaForwardWalkers& current_forward_walkers() {
  static GlaForwardWalkers walkers = choice_from_environment(
      "SEQMIX_GLA_FORWARD_WALKERS", {{"single", GlaForwardWalkers::single}, {"paired", GlaForwardWalkers::paired}},
      kDefaultForwardWalkers);
  return walkers;
}

GlaForwardOutput& current_forward_output() {
  static GlaForwardOutput output = choice_from_environment(
      "SEQMIX_GLA_FORWARD_OUTPUT", {{"direct", GlaForwardOutput::direct}, {"staged", GlaForwardOutput::staged}},
      kDefaultForwardOutput);
  return output;
}

int& current_state_stages() {
  static int stages =
      choice_from_environment("SEQMIX_GLA_BACKWARD_STATE_STAGES", {{"2", 2}, {"3", 3}}, kDefaultBackwardStateStages);
  return stages;
}

// On unless SEQMIX_GLA_FORWARD_PIECES=0.
bool& current_pieces() {
  static bool on = flag_from_environment("SEQMIX_GLA_FORWARD_PIECES", true);
  return on;
}

// On unless SEQMIX_GLA_FORWARD_FACTORED=0.
bool& current_factored() {
  static bool on = flag_from_environment("SEQMIX_GLA_FORWARD_FACTORED", true);
  return on;
}

// On unless SEQMIX_GLA_FORWARD_PIPELINED=0.
bool& current_pipelined() {
  static bool on = flag_from_environment("SEQMIX_GLA_FORWARD_PIPELINED", true);
  return on;
}

// On unless SEQMIX_GLA_BACKWARD_FACTORED=0.
bool& current_backward_factored() {
  static bool on = flag_from_environment("SEQMIX_GLA_BACKWARD_FACTORED", true);
  return on;
}

// On unless SEQMIX_GLA_BACKWARD_EARLY_START=0.
bool& current_early_start() {
  static bool on = flag_from_environment("SEQMIX_GLA_BACKWARD_EARLY_START", true);
  return on;
}

// On unless SEQMIX_GLA_BACKWARD_TABLE_COPIES=0.
bool& current_table_copies() {
  static bool on = flag_from_environment("SEQMIX_GLA_BACKWARD_TABLE_COPIES", true);
  return on;
}

// On unless SEQMIX_GLA_BACKWARD_HELD_OPERANDS=0.
bool& current_held_operands() {
  static bool on = flag_from_environment("SEQMIX_GLA_BACKWARD_HELD_OPERANDS", true);
  return on;
}

}  // namespace

bool gla_backward_held_operands() { return current_held_operands(); }
void gla_set_backward_held_operands(bool on) { current_held_operands() = on; }

bool gla_backward_table_copies() { return current_table_copies(); }
void gla_set_backward_table_copies(bool on) { current_table_copies() = on; }

bool gla_backward_early_start() { return current_early_start(); }
void gla_set_backward_early_start(bool on) { current_early_start() = on; }

bool gla_forward_factored() { return current_factored(); }
void gla_set_forward_factored(bool on) { current_factored() = on; }

bool gla_forward_pipelined() { return current_pipelined(); }
void gla_set_forward_pipelined(bool on) { current_pipelined() = on; }

bool gla_backward_factored() { return current_backward_factored(); }
void gla_set_backward_factored(bool on) { current_backward_factored() = on; }

bool gla_forward_pieces() { return current_pieces(); }
void gla_set_forward_pieces(bool on) { current_pieces() = on; }

int gla_backward_state_stages() { return current_state_stages(); }
void gla_set_backward_state_stages(int stages) { current_state_stages() = stages == 3 ? 3 : 2; }

GlaForwardTiling gla_forward_tiling() { return current_forward_tiling(); }
void gla_set_forward_tiling(GlaForwardTiling tiling) { current_forward_tiling() = tiling; }

GlaForwardWalkers gla_forward_walkers() { return current_forward_walkers(); }
void gla_set_forward_walkers(GlaForwardWalkers walkers) { current_forward_walkers() = walkers; }
GlaForwardOutput gla_forward_output() { return current_forward_output(); }
void gla_set_forward_output(GlaForwardOutput output) { current_forward_output() = output; }

GlaForwardDiagonal gla_forward_diagonal() { return current_diagonal(); }
void gla_set_forward_diagonal(GlaForwardDiagonal diagonal) { current_diagonal() = diagonal; }

GlaBackwardDiagonal gla_backward_diagonal() { return current_backward_diagonal(); }
void gla_set_backward_diagonal(GlaBackwardDiagonal diagonal) { current_backward_diagonal() = diagonal; }

GlaBackwardWalk gla_backward_walk() { return current_backward_walk(); }
void gla_set_backward_walk(GlaBackwardWalk walk) { current_backward_walk() = walk; }

GlaBackwardTail gla_backward_tail() { return current_backward_tail(); }
void gla_set_backward_tail(GlaBackwardTail tail) { current_backward_tail() = tail; }

}  // namespace seqmix::cuda
