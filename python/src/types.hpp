#pragma once
// The value types of the Python API (ReplicateConfig, BufferHandle, the
// enums). Internal to the extension module.
#include "prepared.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mc::python {

enum class soft_pin_action : std::uint8_t { preserve, enable, disable };
enum class object_data_type : std::uint8_t {
  unknown,
  kvcache,
  tensor,
  weight,
  sample,
  activation,
  gradient,
  optimizer_state,
  metadata,
  general
};

/// Mooncake's ReplicateConfig: accepted everywhere Mooncake accepts it. This
/// store keeps one copy per put on the node that put it (or, for a pure
/// client, on a peer the master routes it to); no field changes placement
/// (see the README's "Python" section).
struct replicate_config {
  std::size_t replica_num = 1;
  std::size_t nof_replica_num = 0;
  std::size_t dfs_replica_num = 0;
  soft_pin_action soft_pin = soft_pin_action::preserve;
  std::optional<std::uint64_t> soft_pin_ttl_ms;
  bool with_hard_pin = false;
  std::vector<std::string> preferred_segments;
  std::string preferred_segment;
  std::vector<std::string> preferred_nof_segments;
  bool prefer_alloc_in_same_node = false;
  object_data_type data_type = object_data_type::unknown;
  std::optional<std::vector<std::string>> group_ids;
};

/// A value read by get_buffer / batch_get_buffer: memory of its own, valid
/// after close().
struct buffer_handle {
  owned_buffer buf;
  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(buf.data.get()); }
  std::size_t size() const { return buf.size; }
};

/// Registers SoftPinAction, ObjectDataType, ReplicateConfig and BufferHandle.
void bind_types(py::module_& m);

}  // namespace mc::python
