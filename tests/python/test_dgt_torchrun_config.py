"""Unit tests of the torchrun backend's settings (python/dgt/torchrun/config.py): --rdzv-endpoint
lists and the --rdzv-conf keys, with the exact errors. Pure: no service, no torch needed."""
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from dgt.torchrun.config import (  # noqa: E402
    ConfigError, parse_endpoints, settings_from, torchrun_args_from_argv)


class EndpointsTest(unittest.TestCase):
    def test_lists_default_port_and_ipv6(self):
        self.assertEqual(parse_endpoints("a:1,b"), ["a:1", "b:29400"])
        self.assertEqual(parse_endpoints("[::1]:5, ::1"), ["[::1]:5", "[::1]:29400"])
        self.assertEqual(parse_endpoints("10.0.0.1:29400"), ["10.0.0.1:29400"])

    def test_errors_name_the_item(self):
        cases = {
            "": "--rdzv-endpoint is required with --rdzv-backend=dgt, got ''",
            "a:1,,b": "--rdzv-endpoint: empty item (item 2 of 'a:1,,b')",
            "a:1,b:x": "--rdzv-endpoint: port must be 1..65535, got 'b:x' (item 2 of 'a:1,b:x')",
            "a:0": "--rdzv-endpoint: port must be 1..65535, got 'a:0' (item 1 of 'a:0')",
            "a:1,a:1": "--rdzv-endpoint: 'a:1' is listed twice in 'a:1,a:1'",
            ":5": "--rdzv-endpoint: empty host in ':5' (item 1 of ':5')",
        }
        for text, message in cases.items():
            with self.subTest(text=text):
                with self.assertRaises(ConfigError) as cm:
                    parse_endpoints(text)
                self.assertEqual(str(cm.exception), message)


class SettingsTest(unittest.TestCase):
    def test_defaults(self):
        s = settings_from("h:1", {"node_id": "n0"})
        self.assertEqual((s.endpoints, s.node_id, s.connect_timeout, s.read_timeout,
                          s.join_timeout, s.last_call_timeout, s.nproc_per_node, s.max_restarts,
                          s.token, s.tls_ca, s.unknown_keys),
                         (["h:1"], "n0", 60.0, 60.0, 0.0, 0.0, 1, 0, None, None, []))

    def test_keys_and_command_line(self):
        s = settings_from("h:1", {"read_timeout": "5", "join_timeout": "30",
                                  "last_call_timeout": "2.5", "max_restarts": "4", "x": "1"},
                          {"nproc_per_node": 8, "max_restarts": 1})
        self.assertEqual((s.read_timeout, s.join_timeout, s.last_call_timeout, s.nproc_per_node,
                          s.max_restarts, s.unknown_keys), (5.0, 30.0, 2.5, 8, 4, ["x"]))
        # torchrun's older name for the join timeout.
        self.assertEqual(settings_from("h:1", {"timeout": "12"}).join_timeout, 12.0)

    def test_token_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write("  s3cret\n")
            f.flush()
            self.assertEqual(settings_from("h:1", {"token_file": f.name}).token, "s3cret")

    def test_bad_values(self):
        cases = [
            ({"read_timeout": "soon"}, "--rdzv-conf read_timeout must be a number of seconds, got 'soon'"),
            ({"connect_timeout": "0"}, "--rdzv-conf connect_timeout must be >= 0.1 seconds, got '0'"),
            ({"nproc_per_node": "0"}, "--rdzv-conf nproc_per_node must be >= 1, got '0'"),
            ({"max_restarts": "x"}, "--rdzv-conf max_restarts must be an integer, got 'x'"),
            ({"token_file": "/nonexistent/t"}, "--rdzv-conf token_file: cannot read '/nonexistent/t'"),
            ({"tls_cert": __file__}, "--rdzv-conf tls_cert and tls_key go together, got only tls_cert"),
            ({"tls_cert": __file__, "tls_key": __file__},
             "--rdzv-conf tls_cert needs tls_ca (TLS is on with a CA only)"),
        ]
        for conf, message in cases:
            with self.subTest(conf=conf):
                with self.assertRaises(ConfigError) as cm:
                    settings_from("h:1", conf)
                self.assertEqual(str(cm.exception), message)

    def test_torchrun_argv(self):
        argv = ["--nnodes=2", "--nproc-per-node=4", "--max-restarts=3", "--rdzv-backend=dgt",
                "train.py", "--lr", "1"]
        self.assertEqual(torchrun_args_from_argv(argv),
                         {"nproc_per_node": 4, "max_restarts": 3, "role": "default"})


if __name__ == "__main__":
    unittest.main()
