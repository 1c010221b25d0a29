// The cost of one progress report from a C++ trainer (dgt::worker::Progress(), an atomic add
// to a shared-memory slot), in ns per call: bench/recovery/hang/run.py --micro runs it.
// Usage: progress_bench [calls]
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "dgt/worker/progress.h"

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 100000000L;
  char path[] = "/tmp/dgt-progress-bench-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0 || ::ftruncate(fd, 64) != 0) {
    std::perror("progress_bench: temporary file");
    return 1;
  }
  ::close(fd);
  ::setenv("DGT_PROGRESS_FILE", path, 1);
  ::setenv("DGT_PROGRESS_SLOT", "0", 1);
  if (!dgt::worker::ProgressEnabled()) {
    std::fprintf(stderr, "progress_bench: no slot mapped\n");
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) dgt::worker::Progress();
  const auto end = std::chrono::steady_clock::now();
  ::unlink(path);
  const double ns = std::chrono::duration<double, std::nano>(end - start).count();
  std::printf("dgt::worker::Progress(): %.2f ns per call (%ld calls)\n", ns / calls, calls);
  return 0;
}
