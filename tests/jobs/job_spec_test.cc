#include "jobs/job_spec.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dgt::jobs {
namespace {

v1::JobSpec Good() {
  v1::JobSpec spec;
  spec.set_command("python train.py");
  spec.set_instance_count(2);
  spec.mutable_distribution()->set_process_count_per_instance(2);
  return spec;
}

std::string Error(const absl::Status& s) { return std::string(s.message()); }

TEST(ParseJobSpecYaml, EveryKey) {
  auto spec = ParseJobSpecYaml(R"(
name: resnet
command: python train.py --epochs 3
code_dir: /srv/code
environment_variables: {NCCL_DEBUG: INFO, SEED: 7}
instance_count: 2
distribution:
  type: tensorflow
  process_count_per_instance: 2
  worker_count: 3
  parameter_server_count: 1
max_restarts: 3
restart_policy: rank
node_labels: {gpu: a100}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec want;
  want.set_name("resnet");
  want.set_command("python train.py --epochs 3");
  want.set_code_dir("/srv/code");
  (*want.mutable_environment_variables())["NCCL_DEBUG"] = "INFO";
  (*want.mutable_environment_variables())["SEED"] = "7";
  want.set_instance_count(2);
  want.mutable_distribution()->set_type("tensorflow");
  want.mutable_distribution()->set_process_count_per_instance(2);
  want.mutable_distribution()->set_worker_count(3);
  want.mutable_distribution()->set_parameter_server_count(1);
  want.set_max_restarts(3);
  want.set_restart_policy("rank");
  (*want.mutable_node_labels())["gpu"] = "a100";
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*spec, want))
      << spec->DebugString();
  EXPECT_TRUE(Validate(*spec).ok()) << Validate(*spec);
}

TEST(ParseJobSpecYaml, SpareInstances) {
  auto spec = ParseJobSpecYaml("command: python train.py\ninstance_count: 2\nspare_instances: 1\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->instance_count(), 2);
  EXPECT_EQ(spec->spare_instances(), 1);
  EXPECT_TRUE(Validate(*spec).ok()) << Validate(*spec);
  auto many = ParseJobSpecYaml("command: x\ninstance_count: 1\nspare_instances: 5000\n");
  ASSERT_TRUE(many.ok()) << many.status();  // An int32: Validate checks the range.
  EXPECT_EQ(Validate(*many).message(), "spare_instances: must be >= 0 and <= 1000, got 5000");
  auto bad = ParseJobSpecYaml("command: x\nspare_instances: 2147483648\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "spare_instances: must be >= 0 and <= 1000, got 2147483648");
}

TEST(ParseJobSpecYaml, ProcessCountDefaultsToOne) {
  auto spec = ParseJobSpecYaml("command: 'true'\ninstance_count: 1\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->distribution().process_count_per_instance(), 1);
  EXPECT_TRUE(Validate(*spec).ok());
  // Given as 0, it stays 0 and Validate refuses it.
  spec = ParseJobSpecYaml(
      "command: 'true'\ninstance_count: 1\ndistribution: {process_count_per_instance: 0}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Error(Validate(*spec)), "distribution.process_count_per_instance: must be >= 1, got 0");
}

TEST(ParseJobSpecYaml, Errors) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"command: x\ninstanc_count: 2\n",
            "instanc_count: unknown key (known: name, command, code_dir, environment_variables, "
            "instance_count, distribution, max_restarts, restart_policy, node_labels, "
            "spare_instances)"},
           {"command: x\ndistribution: {proces_count: 2}\n",
            "distribution.proces_count: unknown key (known: type, process_count_per_instance, "
            "worker_count, parameter_server_count)"},
           {"command: x\ninstance_count: 2\nname: a\ninstance_count: 3\n",
            "instance_count: duplicate key (lines 2 and 4)"},
           {"command: x\ndistribution:\n  type: pytorch\n  type: tensorflow\n",
            "distribution.type: duplicate key (lines 3 and 4)"},
           {"command: x\nnode_labels: {gpu: a100, gpu: h100}\n",
            "node_labels.gpu: duplicate key (line 2, columns 15 and 26)"},
           {"command: x\ninstance_count: two\n", "instance_count: must be an integer, got 'two'"},
           {"command: x\ninstance_count: 99999999999\n",
            "instance_count: must be >= 1 and <= 100000, got 99999999999"},
           {"command: x\nmax_restarts: -99999999999999999999999\n",
            "max_restarts: must be >= 0 and <= 100000, got -99999999999999999999999"},
           {"command: x\ninstance_count: [1]\n", "instance_count: must be an integer, got a list"},
           {"command: {a: b}\n", "command: must be a string, got a map"},
           {"command: x\ndistribution: 3\n", "distribution: must be a map, got '3'"},
           {"command: x\nenvironment_variables: [A]\n",
            "environment_variables: must be a map, got a list"},
           {"command: x\nenvironment_variables: {A: [1]}\n",
            "environment_variables.A: must be a string, got a list"},
           {"- command\n", "must be a map of job keys (command, instance_count, ...), got a list"},
           {"command: [x\n", "not valid YAML: line 2: end of sequence flow not found"},
       }) {
    auto spec = ParseJobSpecYaml(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Error(spec.status()), c.error) << c.yaml;
  }
}

// One past int32: the key's own range, as Validate words it, not int32's.
TEST(ParseJobSpecYaml, AnIntegerBeyondInt32NamesTheKeysRange) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"command: x\ninstance_count: 2147483648\n",
            "instance_count: must be >= 1 and <= 100000, got 2147483648"},
           {"command: x\ndistribution: {process_count_per_instance: 2147483648}\n",
            "distribution.process_count_per_instance: must be >= 1 and <= 4096, got 2147483648"},
           {"command: x\nmax_restarts: 2147483648\n",
            "max_restarts: must be >= 0 and <= 100000, got 2147483648"},
           {"command: x\ndistribution: {type: tensorflow, worker_count: -2147483649}\n",
            "distribution.worker_count: must be >= 1 and <= 2147483647, got -2147483649"},
       }) {
    auto spec = ParseJobSpecYaml(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Error(spec.status()), c.error) << c.yaml;
  }
}

// A job file saved as UTF-16 or UTF-32 (as some Windows editors do) is named as such.
TEST(ParseJobSpecYaml, AUtf16OrUtf32ByteOrderMarkIsRefusedByName) {
  struct Case {
    std::string text;
    const char* error;
  };
  // "command: x\n" in UTF-16 little-endian after its mark.
  std::string utf16le("\xFF\xFE", 2);
  for (char ch : std::string("command: x\n")) utf16le += std::string{ch, '\0'};
  std::string utf16be("\xFE\xFF", 2);
  for (char ch : std::string("command: x\n")) utf16be += std::string{'\0', ch};
  for (const Case& c : std::initializer_list<Case>{
           {utf16le,
            "not UTF-8: the file starts with a UTF-16 little-endian byte-order mark (FF FE); "
            "save it as UTF-8"},
           {utf16be,
            "not UTF-8: the file starts with a UTF-16 big-endian byte-order mark (FE FF); save "
            "it as UTF-8"},
           {std::string("\xFF\xFE\0\0c\0\0\0", 8),
            "not UTF-8: the file starts with a UTF-32 little-endian byte-order mark (FF FE 00 "
            "00); save it as UTF-8"},
           {std::string("\0\0\xFE\xFF\0\0\0c", 8),
            "not UTF-8: the file starts with a UTF-32 big-endian byte-order mark (00 00 FE FF); "
            "save it as UTF-8"},
       }) {
    auto spec = ParseJobSpecYaml(c.text);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Error(spec.status()), c.error);
  }
  // A UTF-8 byte-order mark is fine.
  auto utf8 = ParseJobSpecYaml(
      "\xEF\xBB\xBF"
      "command: x\ninstance_count: 1\n");
  ASSERT_TRUE(utf8.ok()) << utf8.status();
  EXPECT_EQ(utf8->command(), "x");
}

// "\0" in a double-quoted YAML string is a NUL byte: refused, naming the key, rather than run
// cut short at it (execve and setenv stop there).
TEST(Validate, ANulByteIsRefusedNamingTheKey) {
  auto spec = ParseJobSpecYaml("command: \"echo \\0 nul\"\ninstance_count: 1\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->command(), std::string("echo \0 nul", 10));
  absl::Status s = Validate(*spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Error(s), "command: must not contain a NUL byte (found at byte 5)");

  struct Case {
    std::function<void(v1::JobSpec&)> change;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {[](v1::JobSpec& s) {
              (*s.mutable_environment_variables())["SEED"] = std::string(
                  "7\0"
                  "8",
                  3);
            },
            "environment_variables.SEED: must not contain a NUL byte (found at byte 1)"},
           {[](v1::JobSpec& s) {
              (*s.mutable_environment_variables())[std::string("A\0B", 3)] = "v";
            },
            "environment_variables: a key must not contain a NUL byte, got 'A\\000B'"},
           {[](v1::JobSpec& s) { s.set_name(std::string("n\0", 2)); },
            "name: must not contain a NUL byte (found at byte 1)"},
           {[](v1::JobSpec& s) { s.set_code_dir(std::string("/srv\0x", 6)); },
            "code_dir: must not contain a NUL byte (found at byte 4)"},
           {[](v1::JobSpec& s) { (*s.mutable_node_labels())["gpu"] = std::string("\0", 1); },
            "node_labels.gpu: must not contain a NUL byte (found at byte 0)"},
       }) {
    v1::JobSpec spec = Good();
    c.change(spec);
    absl::Status s = Validate(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(Error(s), c.error);
  }
}

TEST(Validate, EveryRule) {
  EXPECT_TRUE(Validate(Good()).ok());
  struct Case {
    std::function<void(v1::JobSpec&)> change;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {[](v1::JobSpec& s) { s.clear_command(); },
            "command: required (the shell command every worker process runs)"},
           {[](v1::JobSpec& s) { s.set_name(std::string(129, 'n')); },
            "name: must be at most 128 bytes, got 129"},
           {[](v1::JobSpec& s) { s.set_code_dir("code"); },
            "code_dir: must be an absolute path, got 'code'"},
           {[](v1::JobSpec& s) { (*s.mutable_environment_variables())["1X"] = "v"; },
            "environment_variables.1X: name must match [A-Za-z_][A-Za-z0-9_]*"},
           {[](v1::JobSpec& s) { (*s.mutable_environment_variables())["A-B"] = "v"; },
            "environment_variables.A-B: name must match [A-Za-z_][A-Za-z0-9_]*"},
           {[](v1::JobSpec& s) { s.set_instance_count(0); }, "instance_count: must be >= 1, got 0"},
           {[](v1::JobSpec& s) { s.set_instance_count(100001); },
            "instance_count: must be >= 1 and <= 100000, got 100001"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_type("mpi"); },
            "distribution.type: 'mpi' is not supported by dgt-run (pytorch or tensorflow)"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_type("jax"); },
            "distribution.type: must be pytorch or tensorflow, got 'jax'"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_process_count_per_instance(0); },
            "distribution.process_count_per_instance: must be >= 1, got 0"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_process_count_per_instance(5000); },
            "distribution.process_count_per_instance: must be >= 1 and <= 4096, got 5000"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_type("tensorflow"); },
            "distribution.worker_count: must be >= 1 for tensorflow, got 0"},
           {[](v1::JobSpec& s) {
              s.mutable_distribution()->set_type("tensorflow");
              s.mutable_distribution()->set_worker_count(4);
              s.mutable_distribution()->set_parameter_server_count(-1);
            },
            "distribution.parameter_server_count: must be >= 0, got -1"},
           {[](v1::JobSpec& s) {
              s.mutable_distribution()->set_type("tensorflow");
              s.mutable_distribution()->set_worker_count(3);
              s.mutable_distribution()->set_parameter_server_count(2);
            },
            "distribution: worker_count (3) + parameter_server_count (2) must equal "
            "instance_count (2) x process_count_per_instance (2) = 4"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_worker_count(2); },
            "distribution.worker_count: only for distribution.type tensorflow"},
           {[](v1::JobSpec& s) { s.mutable_distribution()->set_parameter_server_count(1); },
            "distribution.parameter_server_count: only for distribution.type tensorflow"},
           {[](v1::JobSpec& s) { s.set_max_restarts(-1); },
            "max_restarts: must be >= 0 and <= 100000, got -1"},
           {[](v1::JobSpec& s) { s.set_restart_policy("node"); },
            "restart_policy: must be group or rank, got 'node'"},
           {[](v1::JobSpec& s) { (*s.mutable_node_labels())[""] = "x"; },
            "node_labels: a label key must not be empty"},
           {[](v1::JobSpec& s) { s.set_spare_instances(-1); },
            "spare_instances: must be >= 0 and <= 1000, got -1"},
           {[](v1::JobSpec& s) { s.set_spare_instances(1001); },
            "spare_instances: must be >= 0 and <= 1000, got 1001"},
           {[](v1::JobSpec& s) {
              s.mutable_distribution()->set_type("tensorflow");
              s.mutable_distribution()->set_worker_count(4);
              s.set_spare_instances(1);
            },
            "spare_instances: only for distribution.type pytorch (tensorflow has none)"},
       }) {
    v1::JobSpec spec = Good();
    c.change(spec);
    absl::Status s = Validate(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(Error(s), c.error);
  }
}

TEST(Validate, TensorflowCountsThatAddUp) {
  v1::JobSpec spec = Good();
  spec.mutable_distribution()->set_type("tensorflow");
  spec.mutable_distribution()->set_worker_count(3);
  spec.mutable_distribution()->set_parameter_server_count(1);
  EXPECT_TRUE(Validate(spec).ok()) << Validate(spec);
}

// A raw NUL byte in the file (not the "\0" escape): yaml-cpp would read "\x00n" as an escape and
// store a newline, so the shell would run what follows it. Refused before YAML, by line and column.
TEST(ParseJobSpecYaml, ARawNulByteIsRefusedByLineAndColumn) {
  struct Case {
    std::string yaml;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {std::string("command: echo raw\0nul\n", 22),
            "line 1, column 18 (byte 17): a NUL byte; a job file must not contain one"},
           {std::string("name: a\ncommand: 'x'\n# caf\xC3\xA9 \0\n", 31),
            "line 3, column 8 (byte 29): a NUL byte; a job file must not contain one"},
           // After a UTF-8 byte-order mark, columns count from the first character.
           {std::string("\xEF\xBB\xBF\0command: x\n", 15),
            "line 1, column 1 (byte 3): a NUL byte; a job file must not contain one"},
       }) {
    auto spec = ParseJobSpecYaml(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.error << " parsed as: " << spec->DebugString();
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(Error(spec.status()), c.error);
  }
}

// A job file is UTF-8: invalid UTF-8 is refused by line and column before it reaches protobuf
// (whose serializer refuses such a string field with no message of ours).
TEST(ParseJobSpecYaml, InvalidUtf8IsRefusedByLineAndColumn) {
  struct Case {
    std::string yaml;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           // Latin-1 "café".
           {"command: echo caf\xE9\n",
            "not UTF-8: byte 0xE9 at line 1, column 18 (byte 17); a job file must be UTF-8"},
           // Columns count characters: "é" before the bad byte is one.
           {"command: x\nname: \xC3\xA9\xFF\n",
            "not UTF-8: byte 0xFF at line 2, column 8 (byte 19); a job file must be UTF-8"},
           // A sequence cut short, at the end of the file.
           {"command: x\nname: \xE2\x82",
            "not UTF-8: byte 0xE2 at line 2, column 7 (byte 17); a job file must be UTF-8"},
           // An overlong "/", a UTF-16 surrogate, a code point above U+10FFFF.
           {"command: \xC0\xAF\n",
            "not UTF-8: byte 0xC0 at line 1, column 10 (byte 9); a job file must be UTF-8"},
           {"command: \xED\xA0\x80\n",
            "not UTF-8: byte 0xED at line 1, column 10 (byte 9); a job file must be UTF-8"},
           {"command: \xF4\x90\x80\x80\n",
            "not UTF-8: byte 0xF4 at line 1, column 10 (byte 9); a job file must be UTF-8"},
           // In a key or a comment too.
           {"command: x\nnode_labels: {g\xE9: a}\n",
            "not UTF-8: byte 0xE9 at line 2, column 16 (byte 26); a job file must be UTF-8"},
       }) {
    auto spec = ParseJobSpecYaml(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.error << " parsed as: " << spec->DebugString();
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(Error(spec.status()), c.error);
  }
  // Every valid width is kept as it is: 2, 3 and 4 bytes, the largest code point.
  auto spec = ParseJobSpecYaml(
      "command: echo caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80 \xF4\x8F\xBF\xBF\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->command(), "echo caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80 \xF4\x8F\xBF\xBF");
}

// A spec built in code can hold invalid UTF-8 (a YAML file cannot: ParseJobSpecYaml refuses it,
// and yaml-cpp refuses a "\ud800" escape): Validate refuses it by key, before protobuf sends it.
TEST(Validate, InvalidUtf8IsRefusedNamingTheKey) {
  struct Case {
    std::function<void(v1::JobSpec&)> change;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {[](v1::JobSpec& s) { s.set_command("echo caf\xE9"); },
            "command: must be valid UTF-8 (invalid byte 0xE9 at byte 8)"},
           {[](v1::JobSpec& s) { s.set_name("\xC3"); },
            "name: must be valid UTF-8 (invalid byte 0xC3 at byte 0)"},
           {[](v1::JobSpec& s) { (*s.mutable_environment_variables())["SEED"] = "7\xFF"; },
            "environment_variables.SEED: must be valid UTF-8 (invalid byte 0xFF at byte 1)"},
           {[](v1::JobSpec& s) { (*s.mutable_node_labels())["g\xE9"] = "a"; },
            "node_labels: a key must be valid UTF-8, got 'g\\351'"},
       }) {
    v1::JobSpec spec = Good();
    c.change(spec);
    absl::Status s = Validate(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(Error(s), c.error);
  }
}

// Validate's UTF-8 rule agrees with protobuf's own check (the one that refuses to send a string
// field) on every sequence of 1 to 3 bytes and on every 4-byte lead and second byte.
TEST(Validate, Utf8RuleAgreesWithProtobuf) {
  int checked = 0, mismatches = 0;
  const auto check = [&](const std::string& bytes) {
    v1::JobSpec spec = Good();
    spec.set_command("x" + bytes);
    const bool has_nul = bytes.find('\0') != std::string::npos;
    const bool want_ok = !has_nul && google::protobuf::internal::IsStructurallyValidUTF8(
                                         spec.command().data(), spec.command().size());
    const bool ok = Validate(spec).ok();
    ++checked;
    if (ok != want_ok && ++mismatches <= 5) {
      ADD_FAILURE() << absl::CEscape(bytes) << ": Validate says " << Validate(spec)
                    << ", protobuf says " << (want_ok ? "valid" : "invalid");
    }
  };
  for (int a = 0; a < 256; ++a) {
    check(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) {
      check(std::string{static_cast<char>(a), static_cast<char>(b)});
      if (a < 0xE0) continue;
      for (int c = 0; c < 256; ++c) {
        if (a < 0xF0) {
          check(std::string{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        } else if (c == 0x7F || c == 0x80 || c == 0xBF || c == 0xC0) {
          check(std::string{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c),
                            '\x80'});
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, 256 + 256 * 256 + 16 * 256 * 256 + 16 * 256 * 4);
}

// The packaged example (deploy/job.yaml, /usr/share/dgt/examples/job.yaml, the job of
// docs/OPERATIONS.md's walkthrough) parses and validates, and runs a script the package installs
// next to it (cmake/DgtInstall.cmake; its code_dir is that directory).
TEST(ParseJobSpecYaml, ThePackagedExampleJob) {
  std::ifstream in(std::string(DGT_SOURCE_DIR) + "/deploy/job.yaml");
  ASSERT_TRUE(in) << "cannot read deploy/job.yaml";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto spec = ParseJobSpecYaml(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(Validate(*spec).ok()) << Validate(*spec);
  v1::JobSpec want;
  want.set_name("ddp-example");
  want.set_command("python3 train_digits.py --epochs 30");
  want.set_code_dir("/usr/share/dgt/examples");
  (*want.mutable_environment_variables())["OMP_NUM_THREADS"] = "1";
  want.set_instance_count(2);
  want.mutable_distribution()->set_type("pytorch");
  want.mutable_distribution()->set_process_count_per_instance(2);
  want.set_max_restarts(1);
  want.set_restart_policy("group");
  (*want.mutable_node_labels())["pool"] = "default";
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*spec, want))
      << spec->DebugString();
  EXPECT_TRUE(
      std::filesystem::is_regular_file(std::string(DGT_SOURCE_DIR) + "/examples/train_digits.py"));
}

TEST(ReadJobSpecFile, RefusesADirectoryAndAnEndlessFile) {
  const std::string dir = ::testing::TempDir();
  auto d = ReadJobSpecFile(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(Error(d.status()), dir + ": is a directory, not a job file");
  // Read up to the limit, not forever (dgt submit /dev/zero).
  auto zero = ReadJobSpecFile("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(Error(zero.status()), "/dev/zero: larger than 1048576 bytes, the limit of a job file");
  auto missing = ReadJobSpecFile(dir + "/no-such-job.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(Error(missing.status()),
            "cannot read the job file " + dir + "/no-such-job.yaml: No such file or directory");
  // A file of exactly the limit is read whole.
  const std::string path = dir + "/read_job_spec_file_full.yaml";
  const std::string text = "command: 'true'\n#" + std::string(kMaxJobFileBytes - 18, 'x') + "\n";
  ASSERT_EQ(static_cast<int64_t>(text.size()), kMaxJobFileBytes);
  std::ofstream(path) << text;
  auto full = ReadJobSpecFile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*full, text);
}

TEST(ValidJobId, Rules) {
  EXPECT_TRUE(ValidJobId("job-1"));
  EXPECT_TRUE(ValidJobId(std::string(64, 'a')));
  EXPECT_FALSE(ValidJobId(std::string(65, 'a')));
  EXPECT_FALSE(ValidJobId(""));
  EXPECT_FALSE(ValidJobId("Job-1"));
  EXPECT_FALSE(ValidJobId("job/1"));
}

}  // namespace
}  // namespace dgt::jobs
