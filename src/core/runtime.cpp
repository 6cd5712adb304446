#include "seqmix/runtime.hpp"

#ifdef SEQMIX_WITH_CUDA
namespace seqmix::cuda {
int device_count();
}
#endif

namespace seqmix {

bool built_with_cuda() {
#ifdef SEQMIX_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef SEQMIX_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace seqmix
