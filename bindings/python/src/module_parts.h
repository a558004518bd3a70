// The parts of _zero_c registered from files of their own; the module
// (zero_c_module.cc) calls them in this order.
#ifndef ZERO_BINDINGS_PYTHON_SRC_MODULE_PARTS_H_
#define ZERO_BINDINGS_PYTHON_SRC_MODULE_PARTS_H_

#include <pybind11/pybind11.h>

namespace zero_py {

// export_safetensors, reshard (checkpoint_binding.cc).
void RegisterCheckpointTools(pybind11::module_& m);

// convert, dlpack_capsule (conversions_binding.cc).
void RegisterConversions(pybind11::module_& m);

// Comm (comm_binding.cc).
void RegisterComm(pybind11::module_& m);

}  // namespace zero_py

#endif  // ZERO_BINDINGS_PYTHON_SRC_MODULE_PARTS_H_
