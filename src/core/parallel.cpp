#include "core/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace seqmix::core {

int num_threads() {
  int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const char* env = std::getenv("SEQMIX_NUM_THREADS")) {
    int requested = std::atoi(env);
    if (requested > 0) n = std::min(n, requested);
  }
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  const int64_t threads = std::min<int64_t>(num_threads(), n);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      try {
        for (int64_t i = w * n / threads; i < (w + 1) * n / threads; ++i) body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace seqmix::core
