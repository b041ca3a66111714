#include "pagedattn/error.h"

#include <filesystem>

namespace pagedattn {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kOutOfBlocks: return "OutOfBlocks";
    case ErrorCode::kCuda: return "Cuda";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

namespace {
std::string format_message(ErrorCode code, const std::string& message,
                           const std::source_location& where) {
  const std::string file = std::filesystem::path(where.file_name()).filename().string();
  return "pagedattn " + std::string(to_string(code)) + ": " + message + " [" + file + ":" +
         std::to_string(where.line()) + "]";
}
}  // namespace

Error::Error(ErrorCode code, const std::string& message, std::source_location where)
    : std::runtime_error(format_message(code, message, where)), code_(code) {}

}  // namespace pagedattn
