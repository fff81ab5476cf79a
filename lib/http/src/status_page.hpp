#pragma once
// The status page's HTML (internal): status_page.html, embedded at build time
// by embed_html.py into status_page_html.cpp (build directory).
#include <string_view>

namespace mc::http::detail {

/// The whole page (inline CSS and JS, no external assets). Thread-safe.
std::string_view status_page_html() noexcept;

}  // namespace mc::http::detail
