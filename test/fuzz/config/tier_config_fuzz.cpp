// Fuzz target `tier_config`: the tier configuration parsers (lib/tiered
// tier_config.hpp) on hostile text. The first byte picks the parser: JSON
// (always inline: the text is forced to start with '{', so the parser never
// opens a file named by the input), TOML, or a capacity string. A parse that
// succeeds must yield a list validate_tiers() accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mc/tiered/tier_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      const std::string json = "{" + std::string(text);
      auto r = mc::tiered::parse_tiers_json(json);
      if (r && !mc::tiered::validate_tiers(*r)) std::abort();
      if (!r && r.error().message.empty()) std::abort();  // every error names its problem
      break;
    }
    case 1: {
      auto r = mc::tiered::parse_tiers_toml(text);
      if (r && !mc::tiered::validate_tiers(*r)) std::abort();
      if (!r && r.error().message.empty()) std::abort();
      break;
    }
    default: {
      auto r = mc::tiered::parse_capacity(text);
      if (!r && r.error().message.empty()) std::abort();
      break;
    }
  }
  return 0;
}
