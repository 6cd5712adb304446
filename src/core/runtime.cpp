#include "seqmix/runtime.hpp"

#include <string_view>

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

std::vector<std::string> cuda_kernel_ops() {
  std::vector<std::string> ops;
#ifdef SEQMIX_CUDA_FOLDER_LIST
  std::string_view list = SEQMIX_CUDA_FOLDER_LIST;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    ops.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
#endif
  return ops;
}

}  // namespace seqmix
