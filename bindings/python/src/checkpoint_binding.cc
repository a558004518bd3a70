// The checkpoint tools of _zero_c that need no engine: a saved checkpoint
// exported as one safetensors file, and resharded for another world size.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "call_support.h"
#include "module_parts.h"
#include "zero_c.h"

namespace zero_py {

void RegisterCheckpointTools(py::module_& m) {
  m.def(
      "export_safetensors",
      [](const std::string& dir, const std::optional<std::string>& tag,
         const std::string& out_path, int dtype, py::object progress) {
        zero_progress_fn fn = progress.is_none() ? nullptr : &PyProgress;
        void* user = progress.ptr();
        CheckNoGil([&] {
          return zero_checkpoint_export_safetensors_progress(
              dir.c_str(), tag ? tag->c_str() : nullptr, out_path.c_str(),
              static_cast<zero_dtype>(dtype), fn, user);
        });
      },
      py::arg("dir"), py::arg("tag"), py::arg("out_path"), py::arg("dtype"),
      py::arg("progress") = py::none(),
      "Writes every param of DIR/TAG (None: latest) as one safetensors file.");

  m.def(
      "reshard",
      [](const std::string& dir, const std::optional<std::string>& tag,
         const std::string& out_dir, int32_t world, py::object progress) {
        zero_progress_fn fn = progress.is_none() ? nullptr : &PyProgress;
        void* user = progress.ptr();
        CheckNoGil([&] {
          return zero_checkpoint_reshard(dir.c_str(), tag ? tag->c_str() : nullptr,
                                         out_dir.c_str(), world, fn, user);
        });
      },
      py::arg("dir"), py::arg("tag"), py::arg("out_dir"), py::arg("world"),
      py::arg("progress") = py::none(),
      "Rewrites DIR/TAG (None: latest) as OUT_DIR/TAG for WORLD ranks.");
}

}  // namespace zero_py
