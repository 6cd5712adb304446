// Developer switches read from environment variables: the kernels' side-by-side timing tests
// and benches pick a schedule, walk or path by name without a rebuild. Plain C++ (no CUDA
// headers), so the CPU tests cover it.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace seqmix::cuda {

// The choice whose name the environment variable holds, or `fallback` when it is unset or
// names none of `choices`.
template <class T>
T choice_from_environment(const char* variable, std::initializer_list<std::pair<std::string_view, T>> choices,
                          T fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return fallback;
  for (const auto& [name, choice] : choices)
    if (name == value) return choice;
  return fallback;
}

// An on/off switch: "1" turns it on, "0" off; unset or anything else leaves `fallback`.
inline bool flag_from_environment(const char* variable, bool fallback) {
  return choice_from_environment<bool>(variable, {{"0", false}, {"1", true}}, fallback);
}

}  // namespace seqmix::cuda
