#include "store/wire.h"

#include <array>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dgt::store::wire {
namespace {

struct OpcodeEntry {
  Op op;
  uint8_t v1;  // 0xFF: not in 1.x.
  uint8_t v2;  // 0xFF: not in 2.x.
};

constexpr uint8_t kNone = 0xFF;

// Opcode numbers: torch 1.13 `QueryType` (c10d TCPStore.cpp) and torch 2.x `QueryType`
// (c10d TCPStoreBackend.hpp), as listed in REFERENCE.md §4. LIST_KEYS 17 and BARRIER 18 are in
// torch 2.13; their layouts are checked against recorded 2.13 traffic
// (tests/store/fixtures/torch-2.13-tcpstore).
constexpr std::array<OpcodeEntry, 20> kOpcodes = {{
    {Op::kValidate, kNone, 0},  {Op::kSet, 0, 1},
    {Op::kCompareSet, 1, 2},    {Op::kGet, 2, 3},
    {Op::kAdd, 3, 4},           {Op::kCheck, 4, 5},
    {Op::kWait, 5, 6},          {Op::kGetNumKeys, 6, 7},
    {Op::kWatchKey, 7, kNone},  {Op::kDeleteKey, 8, 8},
    {Op::kAppend, kNone, 9},    {Op::kMultiGet, kNone, 10},
    {Op::kMultiSet, kNone, 11}, {Op::kCancelWait, kNone, 12},
    {Op::kPing, kNone, 13},     {Op::kQueuePush, kNone, 14},
    {Op::kQueuePop, kNone, 15}, {Op::kQueueLen, kNone, 16},
    {Op::kListKeys, kNone, 17}, {Op::kBarrier, kNone, 18},
}};

std::optional<Op> OpFor(Family family, uint8_t opcode) {
  for (const OpcodeEntry& e : kOpcodes) {
    uint8_t code = family == Family::kV1 ? e.v1 : e.v2;
    if (code != kNone && code == opcode) return e.op;
  }
  return std::nullopt;
}

// Reads fields from the front of a buffer. Every read returns false when the buffer is too
// short (need more bytes); `error` is set when the stream must be rejected.
class Reader {
 public:
  Reader(absl::string_view data, const Limits& limits) : data_(data), limits_(limits) {}

  template <typename T>
  bool ReadPod(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool ReadString(uint64_t max, absl::string_view what, std::string* out) {
    uint64_t len = 0;
    if (!ReadPod(&len)) return false;
    if (len > max) {
      error = absl::StrCat(what, " length ", len, " exceeds the limit of ", max, " bytes");
      return false;
    }
    if (data_.size() - pos_ < len) return false;
    out->assign(data_.data() + pos_, len);
    pos_ += len;
    return true;
  }

  bool ReadKey(std::string* out) { return ReadString(limits_.max_key_bytes, "key", out); }
  bool ReadValue(std::string* out) { return ReadString(limits_.max_value_bytes, "value", out); }

  bool ReadCount(uint64_t* n) {
    if (!ReadPod(n)) return false;
    if (*n > limits_.max_keys_per_request) {
      error =
          absl::StrCat("key count ", *n, " exceeds the limit of ", limits_.max_keys_per_request);
      return false;
    }
    return true;
  }

  size_t pos() const { return pos_; }
  std::string error;

 private:
  absl::string_view data_;
  const Limits& limits_;
  size_t pos_ = 0;
};

// Strings of at most this capacity go back to Request::spare for the next request to reuse.
constexpr size_t kSpareCapacity = 1024;
constexpr size_t kMaxSpare = 16;

// Makes `v` hold exactly `n` strings, moving the ones it drops into `spare` (up to kMaxSpare,
// small ones only) and taking the ones it adds from there first.
void Resize(std::vector<std::string>& v, std::vector<std::string>& spare, size_t n) {
  while (v.size() > n) {
    if (spare.size() < kMaxSpare && v.back().capacity() <= kSpareCapacity) {
      spare.push_back(std::move(v.back()));
    }
    v.pop_back();
  }
  while (v.size() < n) {
    if (spare.empty()) {
      v.emplace_back();
    } else {
      v.push_back(std::move(spare.back()));
      spare.pop_back();
    }
  }
}

// Appends one string to `v` (from `spare` when it has one) and returns it.
std::string* Next(std::vector<std::string>& v, std::vector<std::string>& spare) {
  Resize(v, spare, v.size() + 1);
  return &v.back();
}

// Parses the fields after the opcode. Returns false when more bytes are needed or on error.
bool ParseFields(Reader& r, Request* out) {
  std::vector<std::string>& spare = out->spare;
  switch (out->op) {
    case Op::kValidate:
    case Op::kPing:
      return r.ReadPod(&out->u32);
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return true;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      Resize(out->keys, spare, 1);
      return r.ReadKey(&out->keys[0]);
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      Resize(out->keys, spare, 1);
      Resize(out->values, spare, 1);
      return r.ReadKey(&out->keys[0]) && r.ReadValue(&out->values[0]);
    case Op::kCompareSet:
      Resize(out->keys, spare, 1);
      Resize(out->values, spare, 2);
      return r.ReadKey(&out->keys[0]) && r.ReadValue(&out->values[0]) &&
             r.ReadValue(&out->values[1]);
    case Op::kAdd:
    case Op::kBarrier:
      Resize(out->keys, spare, 1);
      return r.ReadKey(&out->keys[0]) && r.ReadPod(&out->integer);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet: {
      uint64_t n = 0;
      if (!r.ReadCount(&n)) return false;
      // Grow with the bytes actually received, never with the claimed count.
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.ReadKey(Next(out->keys, spare))) return false;
      }
      return true;
    }
    case Op::kMultiSet: {
      uint64_t n = 0;
      if (!r.ReadCount(&n)) return false;
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.ReadKey(Next(out->keys, spare)) || !r.ReadValue(Next(out->values, spare))) {
          return false;
        }
      }
      return true;
    }
  }
  return false;
}

}  // namespace

Family DetectFamily(absl::string_view first_bytes) {
  if (first_bytes.empty()) return Family::kUnknown;
  if (first_bytes[0] != 0) return Family::kV1;
  static constexpr char kValidate[] = {0x00, static_cast<char>(0xCE), static_cast<char>(0xF7),
                                       static_cast<char>(0x85), 0x3C};
  size_t n = std::min<size_t>(first_bytes.size(), sizeof kValidate);
  if (std::memcmp(first_bytes.data(), kValidate, n) != 0) return Family::kV1;
  return n == sizeof kValidate ? Family::kV2 : Family::kUnknown;
}

ParseResult ParseRequest(absl::string_view data, Family family, const Limits& limits,
                         Request* out) {
  ParseResult result;
  if (data.empty()) return result;
  uint8_t opcode = static_cast<uint8_t>(data[0]);
  std::optional<Op> op = OpFor(family, opcode);
  if (!op) {
    result.status = ParseStatus::kError;
    result.error = absl::StrCat("unknown opcode ", opcode, " for the torch ",
                                family == Family::kV1 ? "1.x" : "2.x", " protocol");
    return result;
  }
  // Emptied into `spare`, not replaced: a request parsed into a reused Request takes its strings
  // from there, so small requests allocate nothing.
  out->op = *op;
  Resize(out->keys, out->spare, 0);
  Resize(out->values, out->spare, 0);
  out->integer = 0;
  out->u32 = 0;
  Reader r(data.substr(1), limits);
  if (!ParseFields(r, out)) {
    if (!r.error.empty()) {
      result.status = ParseStatus::kError;
      result.error = std::move(r.error);
    }
    return result;
  }
  result.status = ParseStatus::kOk;
  result.consumed = 1 + r.pos();
  return result;
}

void AppendU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }

void AppendU32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void AppendI64(std::string* out, int64_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void AppendU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void AppendBytes(std::string* out, absl::string_view bytes) {
  AppendU64(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

bool AppendRequest(std::string* out, Family family, const Request& request) {
  uint8_t code = kNone;
  for (const OpcodeEntry& e : kOpcodes) {
    if (e.op == request.op) code = family == Family::kV1 ? e.v1 : e.v2;
  }
  if (code == kNone) return false;
  AppendU8(out, code);
  auto key = [&](size_t i) -> absl::string_view {
    return i < request.keys.size() ? absl::string_view(request.keys[i]) : absl::string_view();
  };
  auto value = [&](size_t i) -> absl::string_view {
    return i < request.values.size() ? absl::string_view(request.values[i]) : absl::string_view();
  };
  switch (request.op) {
    case Op::kValidate:
    case Op::kPing:
      AppendU32(out, request.u32);
      break;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      break;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kWatchKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      AppendBytes(out, key(0));
      break;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      AppendBytes(out, key(0));
      AppendBytes(out, value(0));
      break;
    case Op::kCompareSet:
      AppendBytes(out, key(0));
      AppendBytes(out, value(0));
      AppendBytes(out, value(1));
      break;
    case Op::kAdd:
    case Op::kBarrier:
      AppendBytes(out, key(0));
      AppendI64(out, request.integer);
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      AppendU64(out, request.keys.size());
      for (const std::string& k : request.keys) AppendBytes(out, k);
      break;
    case Op::kMultiSet:
      AppendU64(out, request.keys.size());
      for (size_t i = 0; i < request.keys.size(); ++i) {
        AppendBytes(out, request.keys[i]);
        AppendBytes(out, value(i));
      }
      break;
  }
  return true;
}

bool ReplyShapeOf(Op op, ReplyShape* shape) {
  switch (op) {
    case Op::kCheck:
    case Op::kWait:
    case Op::kCancelWait:
    case Op::kBarrier:
      *shape = ReplyShape::kU8;
      return true;
    case Op::kPing:
      *shape = ReplyShape::kU32;
      return true;
    case Op::kAdd:
    case Op::kGetNumKeys:
    case Op::kDeleteKey:
    case Op::kQueueLen:
      *shape = ReplyShape::kI64;
      return true;
    case Op::kGet:
    case Op::kCompareSet:
      *shape = ReplyShape::kBytes;
      return true;
    default:
      return false;
  }
}

ParseResult ParseReply(absl::string_view data, ReplyShape shape, const Limits& limits, Reply* out) {
  ParseResult result;
  *out = Reply{};
  Reader r(data, limits);
  bool ok = false;
  switch (shape) {
    case ReplyShape::kU8:
      ok = r.ReadPod(&out->u8);
      break;
    case ReplyShape::kU32:
      ok = r.ReadPod(&out->u32);
      break;
    case ReplyShape::kI64:
      ok = r.ReadPod(&out->integer);
      break;
    case ReplyShape::kBytes:
      ok = r.ReadValue(&out->bytes);
      break;
  }
  if (!ok) {
    if (!r.error.empty()) {
      result.status = ParseStatus::kError;
      result.error = std::move(r.error);
    }
    return result;
  }
  result.status = ParseStatus::kOk;
  result.consumed = r.pos();
  return result;
}

void AppendOpcode(std::string* out, Family family, Op op) {
  for (const OpcodeEntry& e : kOpcodes) {
    if (e.op == op) {
      AppendU8(out, family == Family::kV1 ? e.v1 : e.v2);
      return;
    }
  }
}

}  // namespace dgt::store::wire
