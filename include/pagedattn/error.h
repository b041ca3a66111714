// pagedattn — the library's one exception type and its argument checks.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace pagedattn {

enum class ErrorCode {
  kInvalidArgument,  // the caller passed something that breaks the op's contract
  kUnsupported,      // valid in principle, but not built or not implemented for this case
  kOutOfBlocks,      // the KV cache manager has no free page left
  kCuda,             // the CUDA runtime reported an error
  kInternal,         // a broken invariant inside the library
};

std::string_view to_string(ErrorCode code);

// Every error the library raises is an Error; what() names the argument, what was
// expected and what was received, and the source location that raised it.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message,
        std::source_location where = std::source_location::current());
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Throws Error(kInvalidArgument, message) unless `condition` holds.
inline void check_arg(bool condition, const std::string& message,
                      std::source_location where = std::source_location::current()) {
  if (!condition) throw Error(ErrorCode::kInvalidArgument, message, where);
}

// The same with the message built only when the check fails. Checks that run on every call
// take this form: building their messages eagerly cost tens of microseconds per decode call
// (strings, shapes, dtype lists), more than some of the launches they guard.
template <class MakeMessage>
  requires std::is_invocable_r_v<std::string, MakeMessage>
inline void check_arg(bool condition, MakeMessage&& message,
                      std::source_location where = std::source_location::current()) {
  if (!condition) throw Error(ErrorCode::kInvalidArgument, message(), where);
}

// Throws Error(kUnsupported, message) unless `condition` holds.
inline void check_supported(bool condition, const std::string& message,
                            std::source_location where = std::source_location::current()) {
  if (!condition) throw Error(ErrorCode::kUnsupported, message, where);
}

// The same with the message built only when the check fails.
template <class MakeMessage>
  requires std::is_invocable_r_v<std::string, MakeMessage>
inline void check_supported(bool condition, MakeMessage&& message,
                            std::source_location where = std::source_location::current()) {
  if (!condition) throw Error(ErrorCode::kUnsupported, message(), where);
}

}  // namespace pagedattn
