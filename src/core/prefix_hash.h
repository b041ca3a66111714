// pagedattn — the chained hash that keys full pages in the KV cache manager's prefix cache.
//
// h_i = hash_page(h_{i-1}, salt, tokens of page i), with h_{-1} = kPrefixHashRoot. Equal hashes
// are only a hint: the manager also compares the page's tokens, salt and parent page before it
// reuses a page, so a collision costs a miss, never wrong K/V.
#pragma once

#include <cstdint>
#include <span>

#include "pagedattn/kv_cache_manager.h"

namespace pagedattn::detail {

inline constexpr std::uint64_t kPrefixHashRoot = 0x6a09e667f3bcc908ull;  // frac(sqrt(2))

// The splitmix64 finaliser: a bijection on 64-bit words whose every output bit depends on
// every input bit, so absorbing one word per round spreads it over the whole state.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Absorbs the parent hash, the salt, the tokens two per 64-bit word, and the token count
// (so a page of tokens {a} and one of {a, 0} differ).
inline std::uint64_t hash_page(std::uint64_t parent, std::uint64_t salt, std::span<const TokenId> tokens) {
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  std::uint64_t h = mix64(parent + kGolden);
  h = mix64(h ^ mix64(salt ^ 0x243f6a8885a308d3ull));
  std::size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const std::uint64_t word = static_cast<std::uint32_t>(tokens[i]) |
                               static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i + 1])) << 32;
    h = mix64((h ^ word) + kGolden);
  }
  if (i < tokens.size()) h = mix64((h ^ static_cast<std::uint32_t>(tokens[i])) + kGolden);
  return mix64(h ^ static_cast<std::uint64_t>(tokens.size()));
}

}  // namespace pagedattn::detail
