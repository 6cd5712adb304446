// Entry points shared between the .cu files of the linear recurrence: the sequential
// kernel's launcher per input type, and the parallel methods on float copies.
#pragma once

#include <cstdint>

#include "cuda/linear_recurrence/params.hpp"

namespace seqmix::cuda::linrec {

struct SeqParams;
struct SeqChain;

// Launches the sequential kernel over G groups for the chains in p (one or two).
template <class T>
void launch_sequential(const SeqParams& p, int64_t G, void* stream);

// The sequential kernel's chains for a matrix state (m > 1, n ≤ 64) on tensor cores
// (walk_wgmma.cuh): launches them and returns true, or returns false where that walk does
// not apply (built without CUTLASS, vector states, n > 64, or switched off).
template <class T>
bool launch_walk_on_tensor_cores(const SeqParams& p, int64_t G, void* stream);

// A chain of float copies in the workspace, solved in place: maps [G, T, n, n] (clobbered),
// states [G, T, n, m] (the offsets b_t in, the states h_t out), start [G, n, m].
struct FloatChain {
  float* maps;
  float* states;
  const float* start;
  float* extra;  // the method's scratch (params.hpp sizes it)
  int64_t G, T, n, m;
};

void solve_chunked(const FloatChain& c, int64_t chunk, void* stream);

// The chunked method on tensor cores (chunk_transfer.cuh) for one or two chains over the
// caller's tensors (SeqChain of the sequential kernel: inputs, start, outputs, last
// state), side by side: summaries of chunks of `chunk` steps, the pass over them, then
// every chunk re-walked from its start. Scratch: count·G·chunks·(n² + 2nm) floats.
template <class T>
void solve_chunked_on_tensor_cores(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t m,
                                   int64_t chunk, float* scratch, void* stream);

// The chunked method of a matrix state (8 < m ≤ 64, m a multiple of 8, n ≤ 64) with each
// block walking all of a chunk's columns (chunked_wide.cuh; built with the CUTLASS headers
// only): the same three launches and scratch as solve_chunked_on_tensor_cores.
template <class T>
void solve_chunked_wide(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t m,
                        int64_t chunk, float* scratch, void* stream);

// The chunked method of a vector state (m = 1, n ≤ 64) in one pass (fused_chunked.cuh)
// for one or two chains side by side: chunks of `chunk` steps, each summarized, handed
// its start state by its predecessor and re-walked by one block. Scratch:
// count·fused_chunk_scratch_floats(G, T, n, chunk). `backward`: the backward's kernel
// (float states; a transposed chain), also for its reverse chain alone.
template <class T>
void solve_fused_chunked(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t chunk,
                         float* scratch, void* stream, bool backward);

void solve_scan(const FloatChain& c, void* stream);
void solve_cyclic_reduction(const FloatChain& c, void* stream);

}  // namespace seqmix::cuda::linrec
