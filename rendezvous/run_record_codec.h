// The etcd values of a run (record version 2): the run key's JSON (the RunRecord without its
// nodes) and the node buckets' JSON, and how nodes are spread over the buckets. Pure: no etcd, no
// I/O; EtcdRunStateBackend (rendezvous/etcd_run_state_backend.h) writes and reads these values.
//
// Run key value: {"version": 2, "writer": "<replica id>:<write>", "buckets": B, "run": {...}}
// (times as Unix nanoseconds, durations as nanoseconds, infinite ones as "inf"/"-inf").
// Bucket key value: {"version": 2, "nodes": [[node_id, session, address, nproc, store_port,
// node_rank, succeeded, failed, last_contact], ...]}.
//
// Thread-safety: the functions are thread-safe (no shared state).
#ifndef DGT_RENDEZVOUS_RUN_RECORD_CODEC_H_
#define DGT_RENDEZVOUS_RUN_RECORD_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rendezvous/run_state_backend.h"

namespace dgt::rendezvous {

// The record version this dgt writes and reads.
inline constexpr int kRunRecordVersion = 2;
// Separates a run's key from its node buckets' keys: `<prefix><run id>\x1f<bucket>`. A run id
// with this byte is refused (InvalidArgument).
inline constexpr char kNodeBucketSeparator = '\x1f';
// The most node buckets a run has: a commit that changes every node stays one Txn within etcd's
// default --max-txn-ops (128).
inline constexpr int kMaxNodeBuckets = 100;

// etcd's default --max-request-bytes: 1.5 MiB.
inline constexpr int64_t kEtcdDefaultMaxRequestBytes = int64_t{3} << 19;
// Bytes of one etcd write a run needs besides its nodes' own, at most: the run key's value (its
// failures' messages included, as RunRecord keeps them) and the keys and framing of 100 buckets.
inline constexpr int64_t kRunWriteReserveBytes = int64_t{256} << 10;

// The most bytes `node`'s entry takes in its bucket's value, whatever its session, ranks, flags
// and last contact become: the JSON of its id and address (escaped) plus 94 bytes for the rest
// (numbers at their widest, the separators). A round start rewrites every node, so a run of N
// such nodes needs about N times this in one etcd Txn.
int64_t NodeEntryBytesBound(absl::string_view node_id, absl::string_view address);

// Whether a run of `nodes` nodes like this one fits one etcd write of at most
// `max_request_bytes`: `nodes` entries of NodeEntryBytesBound and kRunWriteReserveBytes.
// Errors: InvalidArgument, "--nnodes MAX with --spare-nodes: N nodes need up to B bytes in one
// etcd write; this dgt-rendezvous allows L (--etcd-max-request-bytes, as etcd's
// --max-request-bytes), enough for M nodes like this one".
absl::Status CheckRunFitsRequest(int64_t nodes, absl::string_view node_id,
                                 absl::string_view address, int64_t max_request_bytes);

// How many node buckets a run of at most `max_nodes` nodes gets: one per 32 nodes, 1..100.
int NodeBuckets(int32_t max_nodes);
// The bucket of a node: FNV-1a (64 bits) of its id, modulo `buckets` (< 1 counts as 1).
int NodeBucket(absl::string_view node_id, int buckets);

// The JSON value of a run's key: the run without its nodes. `writer` identifies the write;
// `buckets` is the run's number of node buckets.
std::string EncodeRunRecord(const RunRecord& run, absl::string_view writer, int buckets = 1);
// The record in a run key's value (no nodes), its writer and its number of node buckets.
// Errors: InvalidArgument for a value that is not JSON of this shape, naming what is wrong;
// Unimplemented for another "version".
absl::StatusOr<RunRecord> DecodeRunRecord(absl::string_view value, std::string* writer = nullptr,
                                          int* buckets = nullptr);
// The JSON value of a node bucket's key.
std::string EncodeNodeBucket(const std::vector<const NodeRecord*>& nodes);
// The nodes in a bucket's value. Errors: InvalidArgument for a value that is not JSON of this
// shape ("node bucket: a node is not an array of 9"); Unimplemented for another "version".
absl::StatusOr<std::vector<NodeRecord>> DecodeNodeBucket(absl::string_view value);

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_RUN_RECORD_CODEC_H_
