// Host-side description of an attention launch: plain pointers, sizes and strides, no
// CUDA types, so src/core can fill it in without CUDA headers.
#pragma once

#include <cstdint>

namespace seqmix::cuda {

// A [B, S, H, D] operand (or [total, H, D] with stride_batch = 0): element (b, s, h, d)
// lives at data + b*stride_batch + s*stride_row + h*stride_head + d (in elements).
struct AttentionView {
  void* data = nullptr;
  int64_t stride_batch = 0, stride_row = 0, stride_head = 0;
};

struct AttentionParams {
  AttentionView q, k, v, out;
  // Log-sum-exp, float: element (b, h, s) at lse + b*lse_stride_batch + h*lse_stride_head
  // + s*lse_stride_row, s counted from the start of q's rows (varlen: the packed row).
  float* lse = nullptr;
  int64_t lse_stride_batch = 0, lse_stride_head = 0, lse_stride_row = 0;
  int64_t num_sequences = 0;     // B, or N with cu_seqlens
  int64_t rows_q = 0, rows_k = 0;  // rows of the q / k tensors per batch entry (S, or total)
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  int64_t Hq = 0, Hkv = 0, D = 0;
  // Variable length: device offsets [N + 1] (both or neither), int32 or int64.
  const void* cu_seqlens_q = nullptr;
  const void* cu_seqlens_k = nullptr;
  bool cu_seqlens_q_int64 = false, cu_seqlens_k_int64 = false;
  float scale = 1.0f;
  bool causal = false;
  void* stream = nullptr;
};

// The backward's extra operands; `fwd` holds the inputs, out and lse of the forward.
struct AttentionBackwardParams {
  AttentionParams fwd;
  AttentionView dout, dq, dk, dv;
  // Optional gradient reaching lse (same indexing as lse, its own strides), or nullptr.
  const float* d_lse = nullptr;
  int64_t d_lse_stride_batch = 0, d_lse_stride_head = 0, d_lse_stride_row = 0;
  // true: bitwise reproducible gradients (attention_deterministic_backward() says how);
  // false: the Hopper backward of backward_sm90.cuh (dQ summed in float, out of order).
  bool deterministic = false;
};

enum class AttentionDtype { bf16, f16 };

// How the forward kernel orders its work (forward.cuh). standard: the two consumer
// warpgroups run in phase and a K/V stage is freed after its PV product. pingpong: K is
// freed after its QKᵀ product and the warpgroups take turns on the tensor cores, one
// warpgroup's softmax beside the other's products. persistent: pingpong in a grid of one
// CTA per SM that walks a list of tiles (causal: longest first, dealt so that every CTA gets
// about as many key blocks), the next tile's copies overlapping the current tile's end.
// by_shape: persistent for causal attention at D = 64 and for D = 256 from 4096 keys where the
// query tiles outnumber the SMs, else pingpong (launch.cuh, NOTES.md).
enum class AttentionForwardSchedule { standard, pingpong, persistent, by_shape };

// The schedule attention_forward launches:
// SEQMIX_ATTENTION_FORWARD=standard|pingpong|persistent|by_shape, read once on first use
// (unset or any other value: by_shape), until set below.
AttentionForwardSchedule attention_forward_schedule();
// Overrides the schedule for the rest of the process (tests, timing).
void attention_set_forward_schedule(AttentionForwardSchedule schedule);

// Consumer warpgroups of the D = 64 forward under pingpong and persistent: 1 (64 query rows
// a CTA, no turns; pingpong only, persistent takes 2), 2 (128 rows), 3 (192 rows, 160
// registers a consumer thread, turns taken in a ring), or 0: by shape, 1 where its 64-row
// tiles fit one wave of the SMs, else 3 except for causal attention over fewer than 2048
// queries and for grids of fewer 192-row tiles than SMs, where the taller tiles lost on the
// H100 (NOTES.md). SEQMIX_ATTENTION_FORWARD_WARPGROUPS=1|2|3, read once on first use (unset
// or any other value: 0), until set below. Other head dims and the standard schedule
// always run 2.
int attention_forward_warpgroups();
void attention_set_forward_warpgroups(int warpgroups);

// Whether the D = 128 forward under pingpong and persistent runs a tile's first key block
// (the ragged one) at a narrower width where its keys fit (64 or 112 instead of 176).
// SEQMIX_ATTENTION_FORWARD_NARROW=0|1, read once on first use (unset or any other value: on),
// until set below.
bool attention_forward_narrow_first();
void attention_set_forward_narrow_first(bool on);

// Whether the forward keeps a row's running maximum until a block's exceeds it by more than
// 2^8 (forward.cuh kLazyRescaleLog2), skipping the output's rescale meanwhile, or moves it
// (and rescales) whenever it grows. SEQMIX_ATTENTION_FORWARD_LAZY_RESCALE=0|1, read once on
// first use (unset or any other value: on), until set below.
bool attention_forward_lazy_rescale();
void attention_set_forward_lazy_rescale(bool on);

// Whether the non-persistent forward writes out through shared memory and tensor copies (one
// a warpgroup and 64 columns) instead of four-byte stores from registers; varlen rows past
// their sequence's end keep the stores. SEQMIX_ATTENTION_FORWARD_STAGED_OUTPUT=0|1, read once
// on first use (unset or any other value: on), until set below.
bool attention_forward_staged_output();
void attention_set_forward_staged_output(bool on);

// Whether the non-persistent causal forward launches its tiles as a 1-D grid in the
// persistent schedule's list order (forward.cuh ForwardTiles: sections of (head, sequence)
// pairs whose K and V take about 16 MB, query blocks from the last to the first, pairs
// fastest), which the hardware starts in that order: every section's longest tiles first. The
// 3-D grid (query blocks fastest) starts each pair's tiles longest first but the last pairs'
// longest tiles last, after the other SMs have run out of work. Taken where it measured
// faster (launch.cuh kSectionsMinQueryTiles..kSectionsMaxQueryTiles query tiles).
// SEQMIX_ATTENTION_FORWARD_SECTIONS=0|1, read once on first use (unset or any other value:
// on), until set below.
bool attention_forward_sections();
void attention_set_forward_sections(bool on);

// How the Hopper backward kernel (backward_sm90.cuh) orders its work. standard: the two
// consumer warpgroups meet at one barrier per query block (the dSᵀ exchange) and add dQ
// with float atomics. pingpong: they take turns on the tensor cores, each issuing the dQ
// product of its previous query block beside the dK/dV products of the current one, and
// dQ leaves through shared memory as bulk reduce-adds issued by producer warps. At D = 256
// (the head dim split between the warpgroups, no turns) pingpong keeps only the latter: dQ
// staged in the block's own Q/dO stage and added by tensor reduce-adds.
enum class AttentionBackwardSchedule { standard, pingpong };

// The schedule attention_backward launches (deterministic = false):
// SEQMIX_ATTENTION_BACKWARD=standard|pingpong, read once on first use (unset or any other
// value: pingpong), until set below.
AttentionBackwardSchedule attention_backward_schedule();
// Overrides the backward schedule for the rest of the process (tests, timing).
void attention_set_backward_schedule(AttentionBackwardSchedule schedule);

// Key-block pairs of the D = 256 backward under pingpong: clusters of two CTAs over
// neighbouring key blocks, Q and dO tiles copied once for both by TMA multicast (halves the
// copies' L2 reads). Taken where the key blocks pair up (no varlen, an even number of them).
// SEQMIX_ATTENTION_BACKWARD_PAIRS=1 turns it on, read once on first use (off otherwise),
// until set below.
bool attention_backward_key_pairs();
// Overrides the choice for the rest of the process (tests, timing).
void attention_set_backward_key_pairs(bool on);

// Whether the Hopper backward writes dK and dV from its staged K and V tiles with tensor
// copies (one thread) instead of every consumer thread's 16-byte stores, where the views'
// strides allow and the key block's rows lie in its sequence.
// SEQMIX_ATTENTION_BACKWARD_STAGED_STORE=0|1, read once on first use (unset or any other
// value: on), until set below.
bool attention_backward_staged_store();
void attention_set_backward_staged_store(bool on);

// Whether the Hopper backward (causal, not deterministic, without key-block pairs) launches
// its key blocks as a 1-D grid in a list order (backward_sm90_parts.cuh KeyTile: sections of
// (kv head, sequence) pairs whose Q and dO take about 16 MB, key blocks from the first, the
// longest causal walk, to the last, pairs fastest), which the hardware starts in that order,
// or as the 3-D grid (key blocks fastest); taken where it measured faster (backward_sm90.cuh
// launch_backward_schedule). SEQMIX_ATTENTION_BACKWARD_SECTIONS=0|1, read once on first use
// (unset or any other value: on), until set below.
bool attention_backward_sections();
void attention_set_backward_sections(bool on);

// Head dims with a compiled forward kernel.
inline constexpr bool attention_head_dim_supported(int64_t D) { return D == 64 || D == 128 || D == 256; }

// Head dims the Hopper backward takes (D = 256: the head dim split between its warpgroups).
inline constexpr bool attention_backward_head_dim_supported(int64_t D) { return D == 64 || D == 128 || D == 256; }
// How the deterministic backward (AttentionBackwardParams::deterministic) runs. ordered: the
// Hopper kernel under pingpong, each query block's dQ reduce-adds made in a fixed order
// (a CTA waits on the block's count of adds before its own); every head dim. two_kernel:
// the mma.sync kernels of backward.cuh, no atomics, S and dP computed twice; D in {64, 128}
// (D = 256 takes `ordered` whatever the choice). SEQMIX_ATTENTION_DETERMINISTIC=ordered|
// two_kernel, read once on first use (unset or any other value: ordered), until set below.
enum class AttentionDeterministicBackward { ordered, two_kernel };
AttentionDeterministicBackward attention_deterministic_backward();
// Overrides the choice for the rest of the process (tests, timing).
void attention_set_deterministic_backward(AttentionDeterministicBackward form);

template <AttentionDtype dtype, int D>
void attention_forward(const AttentionParams& p);
template <AttentionDtype dtype, int D>
void attention_backward(const AttentionBackwardParams& p);

}  // namespace seqmix::cuda
