// Example: a C++ trainer using dgt's store as torch workers do, through the installed package.
//   store_client HOST PORT RANK WORLD_SIZE
// Each rank publishes its address under a per-job prefix, counts itself in, and waits for every
// other rank; rank 0 prints what it gathered.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dgt/store/client.h"
#include "dgt/store/prefix_store.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: store_client HOST PORT RANK WORLD_SIZE\n");
    return 2;
  }
  dgt::store::ClientOptions options;
  options.host = argv[1];
  options.port = static_cast<uint16_t>(std::atoi(argv[2]));
  options.timeout = absl::Seconds(10);
  const int rank = std::atoi(argv[3]);
  const int world = std::atoi(argv[4]);

  auto client = dgt::store::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  dgt::store::PrefixStore job("example", **client);
  if (auto s = job.Set("addr/" + std::to_string(rank), "10.0.0." + std::to_string(rank + 1));
      !s.ok()) {
    std::fprintf(stderr, "set: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto joined = job.Add("joined", 1);
  if (!joined.ok()) return 1;
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("addr/" + std::to_string(r));
  if (auto s = job.Wait(keys, absl::Seconds(10)); !s.ok()) {
    std::fprintf(stderr, "wait: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto addrs = job.MultiGet(keys);
  if (!addrs.ok()) return 1;
  if (rank == 0) {
    for (int r = 0; r < world; ++r) std::printf("rank %d at %s\n", r, (*addrs)[r].c_str());
  }
  return 0;
}
