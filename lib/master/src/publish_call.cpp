#include "mc/master/publish_call.hpp"

#include <cstring>
#include <limits>

namespace mc::master {
namespace {

void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

void put(std::vector<std::byte>& out, const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), p, p + s.size());
}

/// A bounds-checked little-endian reader: every take fails (and stays
/// failed) once the input would be overrun.
class reader {
 public:
  explicit reader(std::span<const std::byte> in) : in_(in) {}
  bool ok() const noexcept { return ok_; }
  bool at_end() const noexcept { return ok_ && at_ == in_.size(); }
  std::uint64_t take(int bytes) noexcept {
    if (!ok_ || in_.size() - at_ < static_cast<std::size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(in_[at_ + i])) << (8 * i);
    at_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string take_text(std::size_t n) {
    if (!ok_ || in_.size() - at_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    return s;
  }

 private:
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

constexpr std::size_t header_bytes = 1 + 1 + 2 + 4 + 8;
constexpr std::size_t item_fixed_bytes = 2 + 8 + 8 + 8;

}  // namespace

result<std::vector<std::byte>> encode_publish_call(const std::string& client_id, std::uint64_t epoch, publish_kind kind,
                                                   std::span<const publish_item> items) {
  if (client_id.empty() || client_id.size() > max_publish_call_client_id || items.empty() ||
      items.size() > max_publish_call_items)
    return fail(errc::invalid_params);
  std::size_t bytes = header_bytes + client_id.size();
  for (const auto& it : items) {
    if (it.key.empty() || it.key.size() > std::numeric_limits<std::uint16_t>::max()) return fail(errc::invalid_params);
    bytes += item_fixed_bytes + it.key.size();
  }
  std::vector<std::byte> out;
  out.reserve(bytes);
  put(out, publish_call_kind, 1);
  put(out, kind == publish_kind::republish ? 1 : 0, 1);
  put(out, client_id.size(), 2);
  put(out, items.size(), 4);
  put(out, epoch, 8);
  put(out, client_id);
  for (const auto& it : items) {
    put(out, it.key.size(), 2);
    put(out, it.size, 8);
    put(out, it.version, 8);
    put(out, it.replication, 8);
    put(out, it.key);
  }
  return out;
}

result<publish_call> decode_publish_call(std::span<const std::byte> in) {
  reader r(in);
  if (r.take(1) != publish_call_kind) return fail(errc::invalid_params);
  const auto flags = r.take(1);
  const auto id_len = static_cast<std::size_t>(r.take(2));
  const auto count = static_cast<std::size_t>(r.take(4));
  publish_call c;
  c.epoch = r.take(8);
  if (!r.ok() || (flags & ~std::uint64_t{1}) != 0 || id_len == 0 || id_len > max_publish_call_client_id || count == 0 ||
      count > max_publish_call_items)
    return fail(errc::invalid_params);
  // Every item takes at least item_fixed_bytes + 1: a count the bytes
  // cannot hold is refused before anything is reserved for it.
  if ((in.size() - header_bytes) / (item_fixed_bytes + 1) < count) return fail(errc::invalid_params);
  c.kind = (flags & 1) ? publish_kind::republish : publish_kind::put;
  c.client_id = r.take_text(id_len);
  c.items.reserve(count);
  for (std::size_t i = 0; i < count && r.ok(); ++i) {
    publish_item it;
    const auto key_len = static_cast<std::size_t>(r.take(2));
    it.size = r.take(8);
    it.version = r.take(8);
    it.replication = r.take(8);
    if (key_len == 0) return fail(errc::invalid_params);
    it.key = r.take_text(key_len);
    c.items.push_back(std::move(it));
  }
  if (!r.at_end()) return fail(errc::invalid_params);
  return c;
}

std::vector<std::byte> encode_publish_answer(std::span<const result<void>> outcomes) {
  std::vector<std::byte> out;
  out.reserve(publish_answer_size(outcomes.size()));
  put(out, outcomes.size(), 4);
  for (const auto& o : outcomes) {
    const std::uint32_t code = o ? 0u : static_cast<std::uint32_t>(static_cast<int>(mc::to_errc(o.error())));
    put(out, code, 4);
  }
  return out;
}

result<std::vector<result<void>>> decode_publish_answer(std::span<const std::byte> in, std::size_t items) {
  if (in.size() != publish_answer_size(items)) return fail(errc::rpc_fail);
  reader r(in);
  if (r.take(4) != items) return fail(errc::rpc_fail);
  std::vector<result<void>> out;
  out.reserve(items);
  for (std::size_t i = 0; i < items; ++i) {
    const auto code = static_cast<std::int32_t>(static_cast<std::uint32_t>(r.take(4)));
    if (code == 0) {
      out.emplace_back();
      continue;
    }
    auto e = mc::errc_from_value(code);
    out.push_back(fail(e && *e != errc::ok ? *e : errc::rpc_fail));
  }
  return out;
}

}  // namespace mc::master
