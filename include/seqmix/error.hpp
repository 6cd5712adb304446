// seqmix::Error: the one exception type the library throws.
// Messages name the function and argument, what was expected and what was given,
// e.g. "seqmix.chunk_gla: argument 'k': expected shape [2, 64, 4, 32], got [2, 63, 4, 32]".
#pragma once

#include <stdexcept>
#include <string>

namespace seqmix {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace seqmix
