#pragma once
/// Publishes as TransferEngine calls: the bytes a holder sends to the
/// master's call port instead of the addReplicas RPC (one round trip without
/// Cap'n Proto's framing, promise and Finish messages), and the answer.
///
/// Request (little-endian): u8 kind (publish_call_kind), u8 flags (bit 0:
/// republish; others 0), u16 client id length, u32 item count, u64 epoch,
/// the client id, then per item u16 key length, u64 size, u64 version, u64
/// replication, the key. Nothing may follow the last item.
/// Answer: u32 item count (the request's), then one i32 per item: 0 or an
/// mc::errc value (metadata::add_replica's outcome).
///
/// Everything here is a pure function of its arguments: thread-safe, no I/O.
#include "mc/master/metadata.hpp"
#include "mc/runtime/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mc::master {

/// First byte of a publish call (the store's own calls use 1 and 2).
inline constexpr std::uint8_t publish_call_kind = 3;
/// Items one publish call carries at most.
inline constexpr std::size_t max_publish_call_items = 4096;
/// Longest client id a publish call carries.
inline constexpr std::size_t max_publish_call_client_id = 256;

/// A decoded publish call.
struct publish_call {
  std::string client_id;
  std::uint64_t epoch = 0;
  publish_kind kind = publish_kind::put;
  std::vector<publish_item> items;
};

/// Bytes of a publish call. Errors: invalid_params when the client id is
/// empty or longer than max_publish_call_client_id, when there are no items
/// or more than max_publish_call_items, or a key is empty or longer than
/// 65535 bytes.
result<std::vector<std::byte>> encode_publish_call(const std::string& client_id, std::uint64_t epoch, publish_kind kind,
                                                   std::span<const publish_item> items);

/// Parses a publish call; every length, count and flag is checked against
/// the bounds above and the bytes present. Errors: invalid_params (any
/// malformed input; nothing is partly returned).
result<publish_call> decode_publish_call(std::span<const std::byte> in);

/// Bytes of the answer to a call of outcomes.size() items.
std::vector<std::byte> encode_publish_answer(std::span<const result<void>> outcomes);

/// Parses the answer to a call of `items` items: one result per item (an
/// unknown code reads as rpc_fail). Errors: rpc_fail when the answer is not
/// exactly 4 + 4 x items bytes or names another count.
result<std::vector<result<void>>> decode_publish_answer(std::span<const std::byte> in, std::size_t items);

/// Bytes of an answer of `items` items, for reply buffers.
inline constexpr std::size_t publish_answer_size(std::size_t items) noexcept { return 4 + 4 * items; }

}  // namespace mc::master
