// Programmatic dependent launch (PDL) between the chains' kernels: a kernel launched as a
// programmatic dependent of the stream's previous kernel may start its blocks while that
// kernel finishes (as its CTAs retire, or once each has let it), and waits on the device
// (griddepcontrol.wait) before it touches global memory, instead of the launch itself
// waiting for the previous kernel to complete and flush. The kernels' own side is
// dependent_launch.cuh; the CUTLASS GEMMs do it through GemmSchedule::programmatic.
#pragma once

namespace seqmix::cuda {

// Whether the chains launch their dependent kernels programmatically (SEQMIX_CHAINS_PDL=0:
// every launch waits for the previous kernel, as before).
bool programmatic_launch_enabled();

}  // namespace seqmix::cuda
