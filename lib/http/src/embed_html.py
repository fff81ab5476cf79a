#!/usr/bin/env python3
"""Embeds a text file as a C++ raw string: embed_html.py IN OUT FUNCTION.

Writes OUT defining `std::string_view mc::http::detail::FUNCTION() noexcept`
that returns IN's bytes. Fails when IN contains the raw-string delimiter."""
import sys

src, out, fn = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src, encoding="utf-8").read()
delim = "mcpage"
if ")" + delim + '"' in text:
    sys.exit(f"{src} contains the raw-string delimiter )" + delim + '"')
with open(out, "w", encoding="utf-8") as f:
    f.write(f"// Generated from {src.rsplit('/', 1)[-1]} by embed_html.py; do not edit.\n")
    f.write('#include "status_page.hpp"\n\nnamespace mc::http::detail {\n\n')
    f.write(f"std::string_view {fn}() noexcept {{\n")
    f.write(f'  static constexpr std::string_view page = R"{delim}({text}){delim}";\n')
    f.write("  return page;\n}\n\n}  // namespace mc::http::detail\n")
