"""Unit tests of the lint plumbing: scripts/check_layering.py's rule that scripts/lint.sh names
every product folder, and scripts/clang_tidy_cached.py's path-free cache keys. Standard library
only; each test works in its own temporary tree.
"""
import importlib.util
import os
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


check_layering = load("check_layering")
clang_tidy_cached = load("clang_tidy_cached")

LINT = """#!/usr/bin/env bash
pattern='^(common|jobs|tests)/.*\\.(cc|h)$'
tidy_pattern='^(common|jobs)/.*\\.cc$'
"""


class TempDirs(unittest.TestCase):
    def tempdir(self):
        d = tempfile.TemporaryDirectory(prefix="dgt-lint-test-")
        self.addCleanup(d.cleanup)
        return d.name


class LintCoverageTest(TempDirs):
    def tree(self, folders, lint=LINT):
        root = self.tempdir()
        os.makedirs(os.path.join(root, "scripts"))
        with open(os.path.join(root, "scripts", "lint.sh"), "w", encoding="utf-8") as f:
            f.write(lint)
        for folder, cmake in folders.items():
            os.makedirs(os.path.join(root, folder))
            with open(os.path.join(root, folder, "CMakeLists.txt"), "w", encoding="utf-8") as f:
                f.write(cmake)
        return root

    def test_every_product_folder_named_is_clean(self):
        root = self.tree({"common": "dgt_cc_library(NAME common SRCS a.cc)\n",
                          "jobs": "dgt_cc_library(NAME jobs SRCS b.cc)\n",
                          "tests": "dgt_cc_test(NAME t SRCS t.cc)\nadd_executable(x x.cc)\n",
                          "docs": "# add_library(nothing) in a comment builds nothing\n"})
        self.assertEqual(check_layering.lint_coverage(root), [])

    def test_a_new_folder_missing_from_both_patterns(self):
        root = self.tree({"common": "dgt_cc_library(NAME common SRCS a.cc)\n",
                          "jobs": "dgt_cc_library(NAME jobs SRCS b.cc)\n",
                          "server": "dgt_cc_binary(NAME dgt-server SRCS main.cc)\n"})
        rule = "[lint covers every product folder]"
        self.assertEqual(check_layering.lint_coverage(root), [
            "scripts/lint.sh: pattern does not name server/, a product folder "
            f"(server/CMakeLists.txt builds a target) {rule}",
            "scripts/lint.sh: tidy_pattern does not name server/, a product folder "
            f"(server/CMakeLists.txt builds a target) {rule}"])

    def test_a_folder_in_one_pattern_only(self):
        lint = LINT.replace("^(common|jobs)/", "^(common)/")
        root = self.tree({"jobs": "add_library(dgt_jobs STATIC b.cc)\n"}, lint=lint)
        self.assertEqual(check_layering.lint_coverage(root), [
            "scripts/lint.sh: tidy_pattern does not name jobs/, a product folder "
            "(jobs/CMakeLists.txt builds a target) [lint covers every product folder]"])

    def test_no_patterns_to_check(self):
        root = self.tree({}, lint="#!/usr/bin/env bash\n")
        self.assertEqual(len(check_layering.lint_coverage(root)), 2)


class CacheKeyPathsTest(TempDirs):
    def test_build_then_root_become_placeholders(self):
        places = [("/src/dgt/build", "@DGT_BUILD@"), ("/src/dgt", "@DGT_ROOT@")]
        text = (b'# 1 "/src/dgt/jobs/scheduler.cc"\n'
                b"c++ -I/src/dgt -I/src/dgt/build/proto/gen -c /src/dgt/jobs/scheduler.cc\n"
                b'# 1 "/src/dgt2/other.h"\n')
        self.assertEqual(clang_tidy_cached.without_paths(text, places),
                         b'# 1 "@DGT_ROOT@/jobs/scheduler.cc"\n'
                         b"c++ -I@DGT_ROOT@ -I@DGT_BUILD@/proto/gen -c @DGT_ROOT@/jobs/scheduler.cc\n"
                         b'# 1 "/src/dgt2/other.h"\n')

    def test_two_checkouts_hash_alike(self):
        def key_text(root):
            places = clang_tidy_cached.placeholders(os.path.join(root, "build"), root)
            return clang_tidy_cached.without_paths(
                f"c++ -I{root} -I{root}/build/proto/gen -c {root}/jobs/a.cc".encode(), places)
        a, b = self.tempdir(), self.tempdir()
        self.assertEqual(key_text(a), key_text(b))
        self.assertEqual(key_text(a),
                         b"c++ -I@DGT_ROOT@ -I@DGT_BUILD@/proto/gen -c @DGT_ROOT@/jobs/a.cc")


if __name__ == "__main__":
    unittest.main()
