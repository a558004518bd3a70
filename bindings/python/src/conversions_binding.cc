// The memory conversions of _zero_c: dtype conversion with the engine's
// rounding (1.8), and DLPack capsules over engine memory.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "call_support.h"
#include "module_parts.h"
#include "zero_c.h"

namespace zero_py {
namespace {

// DLPack's DLManagedTensor, ABI version 0 (the layout every DLPack consumer
// reads: numpy.from_dlpack, torch.from_dlpack), for the device arrays of
// zero/engine.py. The tensor aliases engine memory; manager_ctx holds a
// reference to the Python owner (the DeviceArray) until the consumer's
// tensor dies.
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

struct DlpackHolder {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  PyObject* owner = nullptr;
};

void DeleteDlpack(DLManagedTensor* t) {
  auto* h = static_cast<DlpackHolder*>(t->manager_ctx);
  {
    py::gil_scoped_acquire gil;  // consumers may free the tensor on any thread
    Py_XDECREF(h->owner);
  }
  delete h;
}

// A "dltensor" capsule over `address` (dtype code/bits, device type/id),
// keeping `owner` alive; an unconsumed capsule frees itself.
py::capsule DlpackCapsule(uintptr_t address, const std::vector<int64_t>& shape, int code,
                          int bits, int device_type, int device_id, py::object owner) {
  auto* h = new DlpackHolder();
  h->shape = shape;
  h->owner = owner.release().ptr();
  DLTensor& t = h->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(address);
  t.device = DLDevice{device_type, device_id};
  t.ndim = static_cast<int32_t>(h->shape.size());
  t.dtype = DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  t.shape = h->shape.empty() ? nullptr : h->shape.data();
  t.strides = nullptr;  // row-major, compact
  t.byte_offset = 0;
  h->managed.manager_ctx = h;
  h->managed.deleter = &DeleteDlpack;
  PyObject* cap = PyCapsule_New(&h->managed, "dltensor", [](PyObject* c) {
    // Renamed to "used_dltensor" by a consumer, which then owns the tensor.
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  });
  if (cap == nullptr) {
    DeleteDlpack(&h->managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace

void RegisterConversions(py::module_& m) {
  m.def(
      "convert",
      [](int dst_dtype, uintptr_t dst, int src_dtype, uintptr_t src, size_t count) {
        CheckNoGil([&] {
          return zero_convert(static_cast<zero_dtype>(dst_dtype), reinterpret_cast<void*>(dst),
                              static_cast<zero_dtype>(src_dtype),
                              reinterpret_cast<const void*>(src), count);
        });
      },
      py::arg("dst_dtype"), py::arg("dst"), py::arg("src_dtype"), py::arg("src"),
      py::arg("count"),
      "1.8: COUNT elements at SRC converted into DST with the engine's rounding.");

  m.def("dlpack_capsule", &DlpackCapsule, py::arg("address"), py::arg("shape"),
        py::arg("code"), py::arg("bits"), py::arg("device_type"), py::arg("device_id"),
        py::arg("owner"),
        "A DLPack 'dltensor' capsule aliasing engine memory (owner kept alive).");
}

}  // namespace zero_py
