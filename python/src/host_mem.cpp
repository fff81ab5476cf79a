// MooncakeHostMemAllocator: page-aligned host memory for engines' KV pools
// (SGLang allocates its host pool with it in standalone mode). Like
// Mooncake's, it is shared memory: a sealed memfd
// (mc::transfer::allocate_shared_memory), so that a node on this host that
// serves a get into / a put from a registration inside it maps the pool once
// and copies with memcpy instead of process_vm_readv/writev
// (lib/transfer/README.md "Shared-memory registrations").
#include "prepared.hpp"

#include "mc/transfer/engine.hpp"

namespace mc::python {

namespace {

class host_mem_allocator {
 public:
  /// A zeroed, page-aligned shared mapping of `size` bytes; 0 when size is 0
  /// or the allocation fails.
  std::uintptr_t alloc(std::size_t size) {
    auto m = mc::transfer::allocate_shared_memory(size);
    return m ? reinterpret_cast<std::uintptr_t>(m->data()) : 0;
  }
  /// 0, or invalid_params for an address alloc() did not return (or freed).
  /// A registration inside the memory keeps it mapped until it ends.
  int free(std::uintptr_t ptr) {
    auto r = mc::transfer::free_shared_memory(reinterpret_cast<void*>(ptr));
    return r ? 0 : static_cast<int>(errc::invalid_params);
  }
};

}  // namespace

void bind_host_mem(py::module_& m) {
  py::class_<host_mem_allocator>(m, "MooncakeHostMemAllocator")
      .def(py::init<>())
      .def(
          "alloc",
          [](host_mem_allocator& a, std::size_t size) {
            py::gil_scoped_release release;
            return a.alloc(size);
          },
          py::arg("size"))
      .def(
          "free",
          [](host_mem_allocator& a, std::uintptr_t ptr) {
            py::gil_scoped_release release;
            return a.free(ptr);
          },
          py::arg("ptr"));
}

}  // namespace mc::python
