// fake_node_daemon: a stand-in for dgt-agent's side of the Jobs.Register stream, for
// tests/e2e/test_jobs.py (python has no gRPC here). It registers as --name with --label K=V and
// --running JOB, prints every ControlMessage the service sends as one JSON line on stdout
// (proto3 JSON, field names as in jobs.proto), and sends each line of stdin (a NodeMessage as
// JSON; an update's event as its word, "started" or "exited") on the stream. At stdin's end it
// closes its side; when the stream ends it prints
// {"status": <gRPC code>, "message": "..."} and exits 0 (1 when the stream could not be opened).
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "jobs/job_state.h"
#include "nlohmann/json.hpp"

namespace v1 = ::dgt::jobs::v1;

int main(int argc, char** argv) {
  std::string endpoint, name, token;
  v1::NodeMessage hello;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--endpoint") {
      endpoint = value;
    } else if (flag == "--name") {
      name = value;
    } else if (flag == "--token") {
      token = value;
    } else if (flag == "--label") {
      std::vector<std::string> kv = absl::StrSplit(value, absl::MaxSplits('=', 1));
      (*hello.mutable_hello()->mutable_labels())[kv[0]] = kv.size() > 1 ? kv[1] : "";
    } else if (flag == "--running") {
      hello.mutable_hello()->add_running_job_ids(value);
    } else {
      std::fprintf(stderr, "fake_node_daemon: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  hello.mutable_hello()->set_node_name(name);
  hello.mutable_hello()->set_hostname(name + ".test");
  hello.mutable_hello()->add_addresses("127.0.0.1");
  hello.mutable_hello()->set_gpu_count(0);
  hello.mutable_hello()->set_version("fake");
  auto channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  auto stub = v1::Jobs::NewStub(channel);
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub->Register(&ctx);
  if (!stream) return 1;
  stream->Write(hello);
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::thread reader([&] {
    v1::ControlMessage m;
    while (stream->Read(&m)) {
      std::string json;
      (void)google::protobuf::util::MessageToJsonString(m, &json, print);
      std::printf("%s\n", json.c_str());
      std::fflush(stdout);
    }
  });
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("update") && j["update"].is_object() &&
        j["update"].contains("event") && j["update"]["event"].is_string()) {
      auto event = dgt::jobs::ParseJobEvent(j["update"]["event"].get<std::string>());
      if (event.has_value()) j["update"]["event"] = v1::JobEvent_Name(*event);
    }
    v1::NodeMessage m;
    if (j.is_discarded() || !google::protobuf::util::JsonStringToMessage(j.dump(), &m).ok()) {
      std::fprintf(stderr, "fake_node_daemon: not a NodeMessage: %s\n", line.c_str());
      continue;
    }
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  reader.join();
  grpc::Status st = stream->Finish();
  nlohmann::json out = {{"status", static_cast<int>(st.error_code())},
                        {"message", st.error_message()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
