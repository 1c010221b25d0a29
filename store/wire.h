// PyTorch TCPStore wire protocol: request parsing and reply encoding for both opcode families
// (torch 1.x, e.g. Debian's 1.13, and torch 2.x, which opens each connection with VALIDATE).
//
// Framing (REFERENCE.md §4): one opcode byte, then the op's fields; strings and values are a u64
// length plus raw bytes; integers in host byte order. There is no frame length, so the parser
// works incrementally: given the bytes received so far it either needs more, yields one request,
// or rejects the stream. Lengths are checked against limits as soon as they are read, so a
// claimed length never makes us allocate.
//
// Pure functions; thread-compatible.
#ifndef DGT_STORE_WIRE_H_
#define DGT_STORE_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace dgt::store::wire {

enum class Family { kUnknown, kV1, kV2 };

// Operations, independent of their family's opcode numbers.
enum class Op {
  kValidate,    // 2.x only: u32 magic.
  kSet,         // key, value; no reply.
  kCompareSet,  // key, expected, desired; reply value.
  kGet,         // key; reply value.
  kAdd,         // key, i64; reply i64.
  kCheck,       // u64 n, n keys; reply u8 (READY 0, NOT_READY 1).
  kWait,        // u64 n, n keys; reply u8 STOP_WAITING 0 once all exist.
  kGetNumKeys,  // reply i64.
  kWatchKey,    // 1.x only: key.
  kDeleteKey,   // key; reply i64.
  kAppend,      // 2.x: key, value; no reply.
  kMultiGet,    // 2.x: u64 n, n keys; reply n values.
  kMultiSet,    // 2.x: u64 n, n (key, value); no reply.
  kCancelWait,  // 2.x: reply u8 WAIT_CANCELED 1.
  kPing,        // 2.x: u32 nonce; reply the nonce.
  kQueuePush,   // 2.x: key, value; no reply.
  kQueuePop,    // 2.x: key; reply i64 length, then the item when the length was non-zero.
  kQueueLen,    // 2.x: key; reply i64.
  kListKeys,    // 2.x (torch 2.13, opcode 17): no fields; reply i64 n, n keys.
  kBarrier,     // 2.x (torch 2.13, opcode 18): key, i64 world size; reply u8 STOP_WAITING 0.
};

// u32 magic of torch 2.x VALIDATE (bytes 00 CE F7 85 3C on the wire, opcode included).
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// Reply bytes.
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;

struct Limits {
  uint64_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 64ull * 1024 * 1024;
  uint64_t max_keys_per_request = 128 * 1024;
};

struct Request {
  Op op = Op::kGet;
  std::vector<std::string> keys;    // One key for single-key ops.
  std::vector<std::string> values;  // SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: expected, desired.
  int64_t integer = 0;              // ADD delta, BARRIER world size.
  uint32_t u32 = 0;                 // VALIDATE magic, PING nonce.
  // Not part of the request: strings of earlier requests that ParseRequest reuses, so that parsing
  // into the same Request again allocates nothing for keys and values of up to 1 KiB.
  std::vector<std::string> spare;
};

enum class ParseStatus { kNeedMore, kOk, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  size_t consumed = 0;  // Bytes of the request, when kOk.
  std::string error;    // Why the stream is rejected, when kError.
};

// Decides the family from a connection's first bytes: kUnknown while fewer than 5 bytes are
// there and they could still be a 2.x VALIDATE.
Family DetectFamily(absl::string_view first_bytes);

// Parses one request from the front of `data` for `family` (kV1 or kV2).
ParseResult ParseRequest(absl::string_view data, Family family, const Limits& limits, Request* out);

// Reply encoders, appending to `out`.
void AppendU8(std::string* out, uint8_t v);
void AppendU32(std::string* out, uint32_t v);
void AppendI64(std::string* out, int64_t v);
void AppendU64(std::string* out, uint64_t v);
void AppendBytes(std::string* out, absl::string_view bytes);  // u64 length + bytes.

// Request encoders used by the C++ clients and tests.
void AppendOpcode(std::string* out, Family family, Op op);
// Appends `request` framed for `family` (the inverse of ParseRequest): the op's opcode, then the
// fields ParseRequest reads for it, from request.keys / values / integer / u32. A field the op
// needs and `request` lacks is sent empty. An op the family does not have (e.g. APPEND in 1.x) is
// a programmer error: nothing is appended and false is returned.
bool AppendRequest(std::string* out, Family family, const Request& request);

// Reply shapes, as the server writes them for each op (REFERENCE.md §4).
enum class ReplyShape {
  kU8,     // CHECK, WAIT, CANCEL_WAIT, BARRIER: one byte.
  kU32,    // PING: the nonce echoed.
  kI64,    // ADD, GET_NUM_KEYS, DELETE_KEY, QUEUE_LEN: host-order i64.
  kBytes,  // GET, COMPARE_SET: u64 length + bytes.
};

// The reply shape of `op`, or false when the op has no reply (SET, APPEND, MULTI_SET,
// QUEUE_PUSH, VALIDATE) or a shape not listed above (MULTI_GET, QUEUE_POP, LIST_KEYS).
bool ReplyShapeOf(Op op, ReplyShape* shape);

struct Reply {
  uint8_t u8 = 0;
  uint32_t u32 = 0;
  int64_t integer = 0;
  std::string bytes;
};

// Parses one reply of `shape` from the front of `data`, as ParseRequest does requests: kNeedMore
// until the whole reply is there, kOk with `consumed`, or kError when a claimed length exceeds
// limits.max_value_bytes (checked before anything is allocated).
ParseResult ParseReply(absl::string_view data, ReplyShape shape, const Limits& limits, Reply* out);

}  // namespace dgt::store::wire

#endif  // DGT_STORE_WIRE_H_
