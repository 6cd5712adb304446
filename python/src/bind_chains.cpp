#include "bindings.hpp"

namespace seqmix::python {

void bind_chains(nb::module_&) {}  // filled in with the op's bindings

}  // namespace seqmix::python
