// libFuzzer target over the TCPStore frame parser (store/wire.h): the first input byte picks how
// the stream is cut into reads, the rest is a connection's bytes. The parser must never read out
// of bounds, never consume more than it was given, make progress on every kOk, and agree with
// itself whether the bytes arrive at once or in pieces. The same stream is also read as the
// replies a client parses (wire::ParseReply).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "store/wire.h"

namespace {

using dgt::store::wire::DetectFamily;
using dgt::store::wire::Family;
using dgt::store::wire::Limits;
using dgt::store::wire::ParseReply;
using dgt::store::wire::ParseRequest;
using dgt::store::wire::ParseResult;
using dgt::store::wire::ParseStatus;
using dgt::store::wire::Reply;
using dgt::store::wire::ReplyShape;
using dgt::store::wire::Request;

// Feeds `stream` in reads of `step` bytes as the server does; returns how many requests parsed
// and whether the stream was rejected.
std::pair<int, bool> Drive(absl::string_view stream, size_t step, const Limits& limits) {
  std::string buffer;
  Family family = Family::kUnknown;
  int parsed = 0;
  size_t fed = 0;
  while (fed < stream.size()) {
    size_t n = std::min(step, stream.size() - fed);
    buffer.append(stream.data() + fed, n);
    fed += n;
    while (!buffer.empty()) {
      if (family == Family::kUnknown) {
        family = DetectFamily(buffer);
        if (family == Family::kUnknown) break;
      }
      Request r;
      ParseResult p = ParseRequest(buffer, family, limits, &r);
      if (p.status == ParseStatus::kNeedMore) break;
      if (p.status == ParseStatus::kError) {
        if (p.error.empty()) std::abort();
        return {parsed, true};
      }
      if (p.consumed == 0 || p.consumed > buffer.size()) std::abort();
      ++parsed;
      buffer.erase(0, p.consumed);
    }
  }
  return {parsed, false};
}

// The client's side: replies of shapes cycling with `shape_seed`, fed in reads of `step` bytes as
// store::AsyncClient does. Returns how many parsed and whether the stream was rejected.
std::pair<int, bool> DriveReplies(absl::string_view stream, size_t step, uint8_t shape_seed,
                                  const Limits& limits) {
  constexpr ReplyShape kShapes[] = {ReplyShape::kU8, ReplyShape::kU32, ReplyShape::kI64,
                                    ReplyShape::kBytes};
  std::string buffer;
  int parsed = 0;
  size_t fed = 0;
  while (fed < stream.size()) {
    size_t n = std::min(step, stream.size() - fed);
    buffer.append(stream.data() + fed, n);
    fed += n;
    while (!buffer.empty()) {
      Reply r;
      ParseResult p = ParseReply(buffer, kShapes[(shape_seed + parsed) % 4], limits, &r);
      if (p.status == ParseStatus::kNeedMore) break;
      if (p.status == ParseStatus::kError) {
        if (p.error.empty()) std::abort();
        return {parsed, true};
      }
      if (p.consumed == 0 || p.consumed > buffer.size()) std::abort();
      ++parsed;
      buffer.erase(0, p.consumed);
    }
  }
  return {parsed, false};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Limits limits;
  limits.max_key_bytes = 4096;
  limits.max_value_bytes = 1 << 20;
  limits.max_keys_per_request = 64;
  size_t step = 1 + data[0] % 16;
  absl::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto whole = Drive(stream, stream.size() + 1, limits);
  auto pieces = Drive(stream, step, limits);
  if (whole != pieces) std::abort();
  if (DriveReplies(stream, stream.size() + 1, data[0], limits) !=
      DriveReplies(stream, step, data[0], limits)) {
    std::abort();
  }
  return 0;
}
