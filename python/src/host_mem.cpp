// MooncakeHostMemAllocator: page-aligned host memory for engines' KV pools
// (SGLang allocates its host pool with it in standalone mode). Mooncake maps
// shared memory so that its real client can map the pool; here the attached
// node reaches the caller's memory through the same-host transport, so plain
// anonymous mappings suffice.
#include "prepared.hpp"

#include <sys/mman.h>

#include <map>
#include <mutex>

namespace mc::python {

namespace {

class host_mem_allocator {
 public:
  /// A zeroed, page-aligned mapping of `size` bytes; 0 when size is 0 or the
  /// mapping fails.
  std::uintptr_t alloc(std::size_t size) {
    if (size == 0) return 0;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    std::lock_guard lk(mu());
    live()[reinterpret_cast<std::uintptr_t>(p)] = size;
    return reinterpret_cast<std::uintptr_t>(p);
  }
  /// 0, or invalid_params for an address alloc() did not return (or freed).
  int free(std::uintptr_t ptr) {
    std::size_t size = 0;
    {
      std::lock_guard lk(mu());
      auto it = live().find(ptr);
      if (it == live().end()) return static_cast<int>(errc::invalid_params);
      size = it->second;
      live().erase(it);
    }
    ::munmap(reinterpret_cast<void*>(ptr), size);
    return 0;
  }

 private:
  // Process-wide: memory outlives the allocator object that made it.
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<std::uintptr_t, std::size_t>& live() {
    static std::map<std::uintptr_t, std::size_t> m;
    return m;
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
