// Stateful libFuzzer target over the store engine (store/engine.h) and its wire protocol
// (store/wire.h), in both opcode families. The input decodes into a sequence of operations by up
// to 4 clients: set, get, add, compare_set, append, check, wait (and its timeout: cancel_wait),
// barrier, delete, num_keys, queue push/pop/len, multi_get/multi_set, list_keys and disconnects.
//
// Each request is framed by wire::AppendRequest, parsed back by wire::ParseRequest (first a cut
// prefix, which must need more bytes, then the whole frame), executed on one Engine as the wire
// server executes it, and its reply bytes parsed by wire::ParseReply. Every reply must equal the
// one a small reference model (maps, deques and a list of waits) predicts, and after every step
// each blocked client must hold exactly the STOP_WAITING bytes the model says it was woken with:
// no waiter lost or woken twice. A divergence aborts with both values on stderr.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "store/engine.h"
#include "store/wire.h"

namespace {

namespace wire = dgt::store::wire;
using dgt::store::Engine;

constexpr int kClients = 4;
constexpr int kKeys = 5;
constexpr int kMaxSteps = 64;

[[noreturn]] void Diverge(const char* what, const std::string& got, const std::string& want) {
  std::fprintf(stderr, "store_fuzzer divergence: %s: got '%s', model '%s'\n", what, got.c_str(),
               want.c_str());
  std::abort();
}

void Expect(bool ok, const char* what) {
  if (!ok) Diverge(what, "false", "true");
}

// ---- The reference model ----------------------------------------------------------------------

// A registered wait: the occurrences of keys it still misses, in request order.
struct ModelWait {
  uint64_t id = 0;
  int client = 0;
  std::vector<std::string> missing;
};

// torch TCPStore semantics written as plainly as possible: a wait counts one arrival per missing
// key occurrence, every mutation of a key is an arrival for every wait missing it, and a queue push
// is an arrival for the oldest waits up to and including the first one it completes.
class Model {
 public:
  std::map<std::string, std::string> values;
  std::map<std::string, std::deque<std::string>> queues;
  std::vector<ModelWait> waits;  // Oldest first.
  std::vector<int> woken;        // Clients whose wait completed during the current step.
  uint64_t next_id = 1;

  bool Present(const std::string& key) const {
    if (values.count(key) != 0) return true;
    auto q = queues.find(key);
    return q != queues.end() && !q->second.empty();
  }

  // A decimal i64 as the whole value, else nullopt.
  static std::optional<int64_t> ParseInt(const std::string& s) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  }

  // Every wait missing `key` counts it as arrived.
  void ArriveAll(const std::string& key) {
    std::vector<uint64_t> done;
    for (ModelWait& w : waits) {
      std::erase(w.missing, key);
      if (w.missing.empty()) done.push_back(w.id);
    }
    Fire(done);
  }

  // A queue push: walk the waits' occurrences of `key` oldest first; each walked occurrence
  // arrives; stop after the first whose wait missed only it when the walk began.
  void ArriveOne(const std::string& key) {
    std::vector<uint64_t> done;
    bool stop = false;
    for (ModelWait& w : waits) {
      const size_t before = w.missing.size();
      for (auto it = w.missing.begin(); it != w.missing.end() && !stop;) {
        if (*it != key) {
          ++it;
          continue;
        }
        stop = before == 1;
        it = w.missing.erase(it);
      }
      if (w.missing.empty()) done.push_back(w.id);
      if (stop) break;
    }
    Fire(done);
  }

  void Fire(const std::vector<uint64_t>& ids) {
    for (uint64_t id : ids) {
      for (auto it = waits.begin(); it != waits.end(); ++it) {
        if (it->id != id) continue;
        woken.push_back(it->client);
        waits.erase(it);
        break;
      }
    }
  }

  // Registers a wait for the keys missing now; false when none is (answered at once).
  bool Wait(int client, const std::vector<std::string>& keys) {
    ModelWait w;
    for (const std::string& k : keys) {
      if (!Present(k)) w.missing.push_back(k);
    }
    if (w.missing.empty()) return false;
    w.id = next_id++;
    w.client = client;
    waits.push_back(std::move(w));
    return true;
  }

  void CancelClientWait(int client) {
    std::erase_if(waits, [&](const ModelWait& w) { return w.client == client; });
  }
};

// ---- The server side: Engine behind the wire, as store/server.cc executes requests ----------

struct Connection {
  bool open = false;
  wire::Family family = wire::Family::kUnknown;  // The client's; the server detects its own.
  wire::Family detected = wire::Family::kUnknown;
  std::string server_in;  // Bytes the server has not parsed yet.
  std::string client_in;  // Reply bytes the client has not read yet.
  std::optional<Engine::WaitId> wait_id;
  int fired = 0;         // Wake-ups of the current wait (must end at most 1).
  bool blocked = false;  // The client sent WAIT or BARRIER and awaits STOP_WAITING.
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider* in) : in_(in) {
    limits_.max_key_bytes = 64;
    limits_.max_value_bytes = 256;
    limits_.max_keys_per_request = 16;
  }

  void Run() {
    for (int step = 0; step < kMaxSteps && in_->remaining_bytes() > 0; ++step) {
      const int c = in_->ConsumeIntegralInRange<int>(0, kClients - 1);
      Step(c);
      CheckWakeUps();
      CheckState();
    }
    for (int c = 0; c < kClients; ++c) Disconnect(c);
    Expect(engine_.PendingWaits() == 0, "no wait left after every client closed");
  }

 private:
  std::string Key() { return "k" + std::to_string(in_->ConsumeIntegralInRange<int>(0, kKeys - 1)); }

  std::string Value() {
    static constexpr char kAlphabet[] = "0123456789-a";
    const size_t n = in_->ConsumeIntegralInRange<size_t>(0, 6);
    std::string v;
    for (size_t i = 0; i < n; ++i) {
      v.push_back(kAlphabet[in_->ConsumeIntegralInRange<size_t>(0, sizeof kAlphabet - 2)]);
    }
    return v;
  }

  std::vector<std::string> Keys() {
    std::vector<std::string> keys(in_->ConsumeIntegralInRange<size_t>(1, 3));
    for (std::string& k : keys) k = Key();
    return keys;
  }

  void Connect(int c) {
    Connection& conn = conns_[c];
    conn = Connection{};
    conn.open = true;
    conn.family = in_->ConsumeBool() ? wire::Family::kV2 : wire::Family::kV1;
    if (conn.family == wire::Family::kV2) {
      wire::Request validate;
      validate.op = wire::Op::kValidate;
      validate.u32 = wire::kValidationMagic;
      Send(c, validate);
    }
  }

  void Disconnect(int c) {
    Connection& conn = conns_[c];
    if (!conn.open) return;
    Close(c);
    model_.CancelClientWait(c);
  }

  // The server's Close(): a pending wait is cancelled; nothing more reaches the client.
  void Close(int c) {
    Connection& conn = conns_[c];
    if (conn.wait_id) engine_.CancelWait(*conn.wait_id);
    conn = Connection{};
  }

  void Step(int c) {
    Connection& conn = conns_[c];
    if (!conn.open) {
      Connect(c);
      return;
    }
    const bool v2 = conn.family == wire::Family::kV2;
    if (conn.blocked) {
      // A blocked client either times out (2.x: CANCEL_WAIT) or goes away.
      if (v2 && in_->ConsumeBool()) {
        CancelWait(c);
      } else {
        Disconnect(c);
      }
      return;
    }
    const int op = in_->ConsumeIntegralInRange<int>(0, v2 ? 17 : 8);
    wire::Request r;
    switch (op) {
      case 0: {  // SET
        r.op = wire::Op::kSet;
        r.keys = {Key()};
        r.values = {Value()};
        Send(c, r);
        model_.values[r.keys[0]] = r.values[0];
        model_.ArriveAll(r.keys[0]);
        return;
      }
      case 1: {  // GET
        r.op = wire::Op::kGet;
        r.keys = {Key()};
        Send(c, r);
        auto it = model_.values.find(r.keys[0]);
        if (it == model_.values.end() && !v2) {
          ExpectClosed(c, "v1 GET of a missing key closes the connection");
          return;
        }
        ExpectBytes(c, it == model_.values.end() ? "" : it->second, "GET");
        return;
      }
      case 2: {  // ADD
        r.op = wire::Op::kAdd;
        r.keys = {Key()};
        r.integer = in_->ConsumeBool() ? in_->ConsumeIntegral<int64_t>()
                                       : in_->ConsumeIntegralInRange<int64_t>(-3, 3);
        Send(c, r);
        auto it = model_.values.find(r.keys[0]);
        std::optional<int64_t> current =
            it == model_.values.end() ? std::optional<int64_t>(0) : Model::ParseInt(it->second);
        if (!current) {
          ExpectClosed(c, "ADD on a value that is not a decimal integer closes the connection");
          model_.CancelClientWait(c);
          return;
        }
        const auto sum = static_cast<int64_t>(static_cast<uint64_t>(*current) +
                                              static_cast<uint64_t>(r.integer));
        model_.values[r.keys[0]] = std::to_string(sum);
        model_.ArriveAll(r.keys[0]);
        ExpectI64(c, sum, "ADD");
        return;
      }
      case 3: {  // COMPARE_SET
        r.op = wire::Op::kCompareSet;
        r.keys = {Key()};
        r.values = {in_->ConsumeBool() ? std::string() : Value(), Value()};
        Send(c, r);
        const std::string& key = r.keys[0];
        std::string want;
        auto it = model_.values.find(key);
        if (it == model_.values.end() && !r.values[0].empty()) {
          want = r.values[0];
        } else {
          if (it == model_.values.end() || it->second == r.values[0]) {
            model_.values[key] = r.values[1];
          }
          want = model_.values[key];
          model_.ArriveAll(key);
        }
        ExpectBytes(c, want, "COMPARE_SET");
        return;
      }
      case 4: {  // CHECK
        r.op = wire::Op::kCheck;
        r.keys = Keys();
        Send(c, r);
        bool all = true;
        for (const std::string& k : r.keys) all = all && model_.Present(k);
        ExpectU8(c, all ? wire::kCheckReady : wire::kCheckNotReady, "CHECK");
        return;
      }
      case 5: {  // WAIT
        r.op = wire::Op::kWait;
        r.keys = Keys();
        Send(c, r);
        if (model_.Wait(c, r.keys)) {
          Expect(conns_[c].blocked && conns_[c].client_in.empty(), "WAIT on missing keys blocks");
        } else {
          Expect(!conns_[c].blocked, "WAIT on present keys does not block");
          ExpectU8(c, wire::kStopWaiting, "WAIT on present keys");
        }
        return;
      }
      case 6: {  // GET_NUM_KEYS
        r.op = wire::Op::kGetNumKeys;
        Send(c, r);
        ExpectI64(c, static_cast<int64_t>(model_.values.size()), "GET_NUM_KEYS");
        return;
      }
      case 7: {  // DELETE_KEY
        r.op = wire::Op::kDeleteKey;
        r.keys = {Key()};
        Send(c, r);
        ExpectI64(c, model_.values.erase(r.keys[0]) == 1 ? 1 : 0, "DELETE_KEY");
        return;
      }
      case 8: {  // disconnect
        Disconnect(c);
        return;
      }
      case 9: {  // APPEND
        r.op = wire::Op::kAppend;
        r.keys = {Key()};
        r.values = {Value()};
        Send(c, r);
        model_.values[r.keys[0]] += r.values[0];
        model_.ArriveAll(r.keys[0]);
        return;
      }
      case 10: {  // MULTI_GET
        r.op = wire::Op::kMultiGet;
        r.keys = Keys();
        Send(c, r);
        for (const std::string& k : r.keys) {
          auto it = model_.values.find(k);
          ExpectBytes(c, it == model_.values.end() ? "" : it->second, "MULTI_GET");
        }
        return;
      }
      case 11: {  // MULTI_SET
        r.op = wire::Op::kMultiSet;
        r.keys = Keys();
        for (size_t i = 0; i < r.keys.size(); ++i) r.values.push_back(Value());
        Send(c, r);
        for (size_t i = 0; i < r.keys.size(); ++i) {
          model_.values[r.keys[i]] = r.values[i];
          model_.ArriveAll(r.keys[i]);
        }
        return;
      }
      case 12: {  // QUEUE_PUSH
        r.op = wire::Op::kQueuePush;
        r.keys = {Key()};
        r.values = {Value()};
        Send(c, r);
        model_.queues[r.keys[0]].push_back(r.values[0]);
        model_.ArriveOne(r.keys[0]);
        return;
      }
      case 13: {  // QUEUE_POP
        r.op = wire::Op::kQueuePop;
        r.keys = {Key()};
        Send(c, r);
        std::deque<std::string>& q = model_.queues[r.keys[0]];
        ExpectI64(c, static_cast<int64_t>(q.size()), "QUEUE_POP length");
        if (!q.empty()) {
          ExpectBytes(c, q.front(), "QUEUE_POP item");
          q.pop_front();
        }
        if (q.empty()) model_.queues.erase(r.keys[0]);
        return;
      }
      case 14: {  // QUEUE_LEN
        r.op = wire::Op::kQueueLen;
        r.keys = {Key()};
        Send(c, r);
        auto it = model_.queues.find(r.keys[0]);
        ExpectI64(c, it == model_.queues.end() ? 0 : static_cast<int64_t>(it->second.size()),
                  "QUEUE_LEN");
        return;
      }
      case 15: {  // LIST_KEYS
        r.op = wire::Op::kListKeys;
        Send(c, r);
        ExpectI64(c, static_cast<int64_t>(model_.values.size()), "LIST_KEYS count");
        for (const auto& [k, v] : model_.values) ExpectBytes(c, k, "LIST_KEYS key");
        return;
      }
      case 16: {  // BARRIER
        r.op = wire::Op::kBarrier;
        r.keys = {Key()};
        r.integer = in_->ConsumeIntegralInRange<int64_t>(0, 4);
        Send(c, r);
        Barrier(c, r);
        return;
      }
      default: {  // CANCEL_WAIT with nothing pending
        CancelWait(c);
        return;
      }
    }
  }

  void Barrier(int c, const wire::Request& r) {
    const std::string& key = r.keys[0];
    auto it = model_.values.find(key);
    std::optional<int64_t> count =
        it == model_.values.end() ? std::optional<int64_t>(0) : Model::ParseInt(it->second);
    if (!count) {
      ExpectClosed(c, "BARRIER on a value that is not a decimal integer closes the connection");
      return;
    }
    const auto now = static_cast<int64_t>(static_cast<uint64_t>(*count) + 1);
    model_.values[key] = std::to_string(now);
    if (now >= r.integer) {
      model_.ArriveAll(key);
      Expect(!conns_[c].blocked, "a BARRIER that completes does not block");
      ExpectU8(c, wire::kStopWaiting, "BARRIER reached");
      return;
    }
    ModelWait w;
    w.id = model_.next_id++;
    w.client = c;
    w.missing = {key};
    model_.waits.push_back(std::move(w));
    Expect(conns_[c].blocked && conns_[c].client_in.empty(), "a short BARRIER blocks");
  }

  // 2.x timeout: CANCEL_WAIT. A STOP_WAITING already sent stays ahead of WAIT_CANCELED.
  void CancelWait(int c) {
    wire::Request r;
    r.op = wire::Op::kCancelWait;
    Send(c, r);
    model_.CancelClientWait(c);
    conns_[c].blocked = false;
    ExpectU8(c, wire::kWaitCanceled, "CANCEL_WAIT");
  }

  // Frames `r` for the client's family and hands the server first a cut prefix, then the rest.
  void Send(int c, const wire::Request& r) {
    Connection& conn = conns_[c];
    std::string frame;
    Expect(wire::AppendRequest(&frame, conn.family, r), "AppendRequest frames the op");
    const size_t cut = in_->ConsumeIntegralInRange<size_t>(0, frame.size() - 1);
    conn.server_in.append(frame, 0, cut);
    Expect(Serve(c) == 0, "a cut frame yields no request");
    conn.server_in.append(frame, cut);
    Expect(Serve(c) == 1, "a whole frame yields one request");
    if (conns_[c].open) Expect(conns_[c].server_in.empty(), "the frame is consumed whole");
  }

  // Parses and executes what the server has; returns the number of requests executed.
  int Serve(int c) {
    int executed = 0;
    while (conns_[c].open && !conns_[c].server_in.empty()) {
      Connection& conn = conns_[c];
      if (conn.detected == wire::Family::kUnknown) {
        conn.detected = wire::DetectFamily(conn.server_in);
        if (conn.detected == wire::Family::kUnknown) break;
        Expect(conn.detected == conn.family, "the server detects the client's family");
      }
      wire::Request req;
      wire::ParseResult p = wire::ParseRequest(conn.server_in, conn.detected, limits_, &req);
      if (p.status == wire::ParseStatus::kNeedMore) break;
      if (p.status == wire::ParseStatus::kError) Diverge("ParseRequest", p.error, "a request");
      conn.server_in.erase(0, p.consumed);
      Execute(c, req);
      ++executed;
    }
    return executed;
  }

  void Execute(int c, const wire::Request& req) {
    Connection& conn = conns_[c];
    std::string& out = conn.client_in;
    const bool v1 = conn.detected == wire::Family::kV1;
    switch (req.op) {
      case wire::Op::kValidate:
        Expect(req.u32 == wire::kValidationMagic, "VALIDATE magic survives the wire");
        return;
      case wire::Op::kSet:
        engine_.Set(req.keys[0], req.values[0]);
        return;
      case wire::Op::kCompareSet:
        wire::AppendBytes(&out, engine_.CompareSet(req.keys[0], req.values[0], req.values[1]));
        return;
      case wire::Op::kGet: {
        const std::string* value = engine_.Get(req.keys[0]);
        if (value == nullptr && v1) {
          Close(c);
          return;
        }
        wire::AppendBytes(&out, value ? absl::string_view(*value) : absl::string_view());
        return;
      }
      case wire::Op::kAdd: {
        auto sum = engine_.Add(req.keys[0], req.integer);
        if (!sum.ok()) {
          Close(c);
          return;
        }
        wire::AppendI64(&out, *sum);
        return;
      }
      case wire::Op::kCheck:
        wire::AppendU8(&out, engine_.Check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
        return;
      case wire::Op::kWait: {
        Expect(!conn.wait_id, "one wait per connection");
        auto id = engine_.Wait(req.keys, [this, c] { OnWake(c); });
        if (id) {
          conn.wait_id = id;
          conn.blocked = true;
        } else {
          wire::AppendU8(&out, wire::kStopWaiting);
        }
        return;
      }
      case wire::Op::kGetNumKeys:
        wire::AppendI64(&out, engine_.NumKeys());
        return;
      case wire::Op::kDeleteKey:
        wire::AppendI64(&out, engine_.Delete(req.keys[0]) ? 1 : 0);
        return;
      case wire::Op::kAppend:
        engine_.Append(req.keys[0], req.values[0]);
        return;
      case wire::Op::kMultiGet:
        for (const std::string& key : req.keys) {
          const std::string* value = engine_.Get(key);
          wire::AppendBytes(&out, value ? absl::string_view(*value) : absl::string_view());
        }
        return;
      case wire::Op::kMultiSet:
        for (size_t i = 0; i < req.keys.size(); ++i) engine_.Set(req.keys[i], req.values[i]);
        return;
      case wire::Op::kCancelWait:
        if (conn.wait_id) {
          engine_.CancelWait(*conn.wait_id);
          conn.wait_id.reset();
        }
        wire::AppendU8(&out, wire::kWaitCanceled);
        return;
      case wire::Op::kQueuePush:
        engine_.QueuePush(req.keys[0], req.values[0]);
        return;
      case wire::Op::kQueuePop: {
        wire::AppendI64(&out, engine_.QueueLen(req.keys[0]));
        std::optional<std::string> item = engine_.QueuePop(req.keys[0]);
        if (item) wire::AppendBytes(&out, *item);
        return;
      }
      case wire::Op::kQueueLen:
        wire::AppendI64(&out, engine_.QueueLen(req.keys[0]));
        return;
      case wire::Op::kBarrier: {
        Expect(!conn.wait_id, "one wait per connection");
        auto id = engine_.Barrier(req.keys[0], req.integer, [this, c] { OnWake(c); });
        if (!id.ok()) {
          Close(c);
        } else if (*id) {
          conn.wait_id = **id;
          conn.blocked = true;
        } else {
          wire::AppendU8(&out, wire::kStopWaiting);
        }
        return;
      }
      case wire::Op::kListKeys: {
        std::vector<std::string> keys = engine_.ListKeys();
        wire::AppendI64(&out, static_cast<int64_t>(keys.size()));
        for (const std::string& k : keys) wire::AppendBytes(&out, k);
        return;
      }
      default:
        Diverge("Execute", "an op the harness never sends", "a sent op");
    }
  }

  void OnWake(int c) {
    Connection& conn = conns_[c];
    Expect(conn.open, "a wake-up reaches only an open connection");
    ++conn.fired;
    Expect(conn.fired == 1, "a wait fires once");
    conn.wait_id.reset();
    wire::AppendU8(&conn.client_in, wire::kStopWaiting);
  }

  // Each blocked client holds exactly the STOP_WAITING the model predicts for this step.
  void CheckWakeUps() {
    std::array<int, kClients> want{};
    for (int c : model_.woken) ++want[c];
    model_.woken.clear();
    for (int c = 0; c < kClients; ++c) {
      Connection& conn = conns_[c];
      if (!conn.open) {
        if (want[c] != 0) Diverge("wake-up of a closed client", "none", "one");
        continue;
      }
      if (!conn.blocked) {
        if (want[c] != 0) Diverge("wake-up of a client not waiting", "none", "one");
        continue;
      }
      if (want[c] == 0) {
        if (!conn.client_in.empty()) Diverge("wake-up", "STOP_WAITING", "still waiting");
        continue;
      }
      if (want[c] != 1) Diverge("wake-ups per wait", std::to_string(want[c]), "1");
      ExpectU8(c, wire::kStopWaiting, "STOP_WAITING of a completed wait");
      conn.blocked = false;
      conn.fired = 0;
    }
  }

  void CheckState() {
    if (engine_.NumKeys() != static_cast<int64_t>(model_.values.size())) {
      Diverge("NumKeys", std::to_string(engine_.NumKeys()), std::to_string(model_.values.size()));
    }
    if (engine_.PendingWaits() != model_.waits.size()) {
      Diverge("PendingWaits", std::to_string(engine_.PendingWaits()),
              std::to_string(model_.waits.size()));
    }
    for (int c = 0; c < kClients; ++c) {
      const Connection& conn = conns_[c];
      if (conn.open && !conn.blocked && !conn.client_in.empty()) {
        Diverge("unread reply bytes", std::to_string(conn.client_in.size()), "0");
      }
    }
  }

  // Reads one reply of `shape` from the client's bytes.
  wire::Reply Read(int c, wire::ReplyShape shape, const char* what) {
    Connection& conn = conns_[c];
    if (!conn.open) Diverge(what, "connection closed", "a reply");
    wire::Reply reply;
    wire::ParseResult p = wire::ParseReply(conn.client_in, shape, limits_, &reply);
    if (p.status != wire::ParseStatus::kOk) Diverge(what, "no whole reply", "a reply");
    conn.client_in.erase(0, p.consumed);
    return reply;
  }

  void ExpectBytes(int c, const std::string& want, const char* what) {
    wire::Reply r = Read(c, wire::ReplyShape::kBytes, what);
    if (r.bytes != want) Diverge(what, r.bytes, want);
  }

  void ExpectI64(int c, int64_t want, const char* what) {
    wire::Reply r = Read(c, wire::ReplyShape::kI64, what);
    if (r.integer != want) Diverge(what, std::to_string(r.integer), std::to_string(want));
  }

  void ExpectU8(int c, uint8_t want, const char* what) {
    wire::Reply r = Read(c, wire::ReplyShape::kU8, what);
    if (r.u8 != want) Diverge(what, std::to_string(r.u8), std::to_string(want));
  }

  void ExpectClosed(int c, const char* what) {
    if (conns_[c].open) Diverge(what, "open", "closed");
    model_.CancelClientWait(c);
  }

  FuzzedDataProvider* in_;
  wire::Limits limits_;
  Engine engine_;
  Model model_;
  std::array<Connection, kClients> conns_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Harness harness(&in);
  harness.Run();
  return 0;
}
