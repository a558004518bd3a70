// What every part of _zero_c shares: failed C calls raised as the registered
// exception (conventions 2 and 4 of zero_c_module.cc), C calls run without
// the GIL, and Python callables as zero_progress_fn.
#ifndef ZERO_BINDINGS_PYTHON_SRC_CALL_SUPPORT_H_
#define ZERO_BINDINGS_PYTHON_SRC_CALL_SUPPORT_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "zero_c.h"

namespace zero_py {

namespace py = pybind11;

// The factory set_error_factory registered (None before).
py::object& ErrorFactory();

// Raises the factory's exception for (status, message), or a RuntimeError
// before one is registered.
[[noreturn]] void Raise(int status, const std::string& message);

// Checks a status returned by a call made with the GIL released.
void Check(zero_status status);

// Runs a C call that may block (collectives, IO) without the GIL, so other
// Python threads (thread-communicator ranks) go on, then raises on failure.
template <typename F>
void CheckNoGil(F&& call) {
  zero_status s;
  {
    py::gil_scoped_release nogil;
    s = call();
  }
  Check(s);
}

// A Python callable as a zero_progress_fn (user: the callable, kept alive by
// whoever passed it): called as fn(what, done, total) on an engine thread,
// under the GIL; a falsy result or an exception cancels (zero.progress wraps
// callables so that their exception is re-raised after the call).
int32_t PyProgress(void* user, const char* what, int64_t done, int64_t total);

// FAILED_PRECONDITION: `what` used after close/destroy (convention 1).
[[noreturn]] void Closed(const char* what);

}  // namespace zero_py

#endif  // ZERO_BINDINGS_PYTHON_SRC_CALL_SUPPORT_H_
