#include "call_support.h"

#include <stdexcept>
#include <string>

namespace zero_py {

py::object& ErrorFactory() {
  static py::object* factory = new py::object();  // leaked: outlives modules
  return *factory;
}

[[noreturn]] void Raise(int status, const std::string& message) {
  py::object& factory = ErrorFactory();
  if (factory && !factory.is_none()) {
    py::object exc = factory(status, message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())),
                    exc.ptr());
    throw py::error_already_set();
  }
  throw std::runtime_error(std::string(zero_status_string(
                               static_cast<zero_status>(status))) +
                           ": " + message);
}

void Check(zero_status status) {
  if (status == ZERO_OK) return;
  // zero_last_error() is thread-local: read it on the calling thread, which
  // is this one (GIL re-acquisition does not switch threads).
  Raise(status, zero_last_error());
}

int32_t PyProgress(void* user, const char* what, int64_t done, int64_t total) {
  py::gil_scoped_acquire gil;
  try {
    py::handle fn(static_cast<PyObject*>(user));
    return py::bool_(fn(what, done, total)) ? 0 : 1;
  } catch (py::error_already_set&) {
    return 1;
  }
}

[[noreturn]] void Closed(const char* what) {
  Raise(ZERO_FAILED_PRECONDITION,
        std::string(what) + " is closed (used after close/destroy)");
}

}  // namespace zero_py
