// Bindings of the Python API's value types.
#include "types.hpp"

#include <pybind11/stl.h>

namespace mc::python {

void bind_types(py::module_& m) {
  py::enum_<soft_pin_action>(m, "SoftPinAction")
      .value("PRESERVE", soft_pin_action::preserve)
      .value("ENABLE", soft_pin_action::enable)
      .value("DISABLE", soft_pin_action::disable);
  py::enum_<object_data_type>(m, "ObjectDataType")
      .value("UNKNOWN", object_data_type::unknown)
      .value("KVCACHE", object_data_type::kvcache)
      .value("TENSOR", object_data_type::tensor)
      .value("WEIGHT", object_data_type::weight)
      .value("SAMPLE", object_data_type::sample)
      .value("ACTIVATION", object_data_type::activation)
      .value("GRADIENT", object_data_type::gradient)
      .value("OPTIMIZER_STATE", object_data_type::optimizer_state)
      .value("METADATA", object_data_type::metadata)
      .value("GENERAL", object_data_type::general);
  py::class_<replicate_config>(m, "ReplicateConfig")
      .def(py::init<>())
      .def_readwrite("replica_num", &replicate_config::replica_num)
      .def_readwrite("nof_replica_num", &replicate_config::nof_replica_num)
      .def_readwrite("dfs_replica_num", &replicate_config::dfs_replica_num)
      .def_readwrite("soft_pin_action", &replicate_config::soft_pin)
      .def_readwrite("soft_pin_ttl_ms", &replicate_config::soft_pin_ttl_ms)
      .def_readwrite("with_hard_pin", &replicate_config::with_hard_pin)
      .def_readwrite("preferred_segments", &replicate_config::preferred_segments)
      .def_readwrite("preferred_nof_segments", &replicate_config::preferred_nof_segments)
      .def_readwrite("preferred_segment", &replicate_config::preferred_segment)
      .def_readwrite("prefer_alloc_in_same_node", &replicate_config::prefer_alloc_in_same_node)
      .def_readwrite("data_type", &replicate_config::data_type)
      .def_readwrite("group_ids", &replicate_config::group_ids)
      .def("__str__", [](const replicate_config& c) {
        return "ReplicateConfig(replica_num=" + std::to_string(c.replica_num) +
               ", with_hard_pin=" + (c.with_hard_pin ? std::string("True") : std::string("False")) + ")";
      });
  py::class_<buffer_handle>(m, "BufferHandle", py::buffer_protocol())
      .def("ptr", &buffer_handle::ptr)
      .def("size", &buffer_handle::size)
      .def("__len__", &buffer_handle::size)
      .def_buffer([](buffer_handle& b) -> py::buffer_info {
        return py::buffer_info(b.buf.data.get(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.buf.size)}, {py::ssize_t{1}});
      });
}

}  // namespace mc::python
