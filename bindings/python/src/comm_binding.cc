#include "comm_binding.h"

#include <pybind11/stl.h>

#include "module_parts.h"

namespace zero_py {

void RegisterComm(py::module_& m) {
  py::class_<Comm>(m, "Comm")
      .def_static("create_self", &Comm::Self)
      .def_static("create_mpi", &Comm::Mpi)
      .def_static("create_threads", &Comm::Threads, py::arg("world_size"))
      .def_static("create_nccl", &Comm::Nccl, py::arg("device"))
      .def("rank", &Comm::Rank)
      .def("size", &Comm::Size)
      .def("barrier", &Comm::Barrier)
      .def("broadcast", &Comm::Broadcast, py::arg("address"), py::arg("bytes"), py::arg("root"))
      .def("abort", &Comm::Abort, py::arg("reason"))
      .def("allreduce_sum_f32", &Comm::AllreduceSumF32, py::arg("address"),
           py::arg("count"))
      .def("close", &Comm::Close)
      .def_property_readonly("closed", &Comm::closed);
}

}  // namespace zero_py
