"""Unit tests of the torchrun backend's settings (python/dgt/torchrun/config.py): --rdzv-endpoint
lists and the --rdzv-conf keys, with the exact errors. Pure: no service, no torch needed."""
import importlib.util
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from dgt.torchrun.config import (  # noqa: E402
    MAX_KEEPALIVE_MS, ConfigError, parse_endpoints, settings_from, torchrun_args_from_argv)

TIMEOUT_KEYS = ("connect_timeout", "read_timeout", "join_timeout", "last_call_timeout",
                "exit_timeout")


class EndpointsTest(unittest.TestCase):
    def test_lists_default_port_and_ipv6(self):
        self.assertEqual(parse_endpoints("a:1,b"), ["a:1", "b:29400"])
        self.assertEqual(parse_endpoints("[::1]:5, [::1]"), ["[::1]:5", "[::1]:29400"])
        self.assertEqual(parse_endpoints("10.0.0.1:29400"), ["10.0.0.1:29400"])
        self.assertEqual(parse_endpoints("[node-0]:7,H:65535"), ["node-0:7", "H:65535"])

    def test_errors_name_the_item(self):
        cases = {
            "": "--rdzv-endpoint is required with --rdzv-backend=dgt, got ''",
            "a:1,,b": "--rdzv-endpoint: empty item (item 2 of 'a:1,,b')",
            "a:1,b:x": "--rdzv-endpoint: port must be 1..65535, got 'b:x' (item 2 of 'a:1,b:x')",
            "a:0": "--rdzv-endpoint: port must be 1..65535, got 'a:0' (item 1 of 'a:0')",
            "a:1,a:1": "--rdzv-endpoint: 'a:1' is listed twice in 'a:1,a:1'",
            ":5": "--rdzv-endpoint: empty host in ':5' (item 1 of ':5')",
            "h:1,H:1": "--rdzv-endpoint: 'H:1' is listed twice in 'h:1,H:1'",
        }
        for text, message in cases.items():
            with self.subTest(text=text):
                with self.assertRaises(ConfigError) as cm:
                    parse_endpoints(text)
                self.assertEqual(str(cm.exception), message)

    def test_as_dgt_run_parses_host_port(self):
        # A scheme, a bare IPv6 address or a second port is refused, not taken as an IPv6 host
        # with the default port (common/host_port.h).
        cases = {
            "http://127.0.0.1:29410":
                "--rdzv-endpoint: a URL scheme is not taken, write host:port, "
                "got 'http://127.0.0.1:29410' (item 1 of 'http://127.0.0.1:29410')",
            "a:1,grpc://b":
                "--rdzv-endpoint: a URL scheme is not taken, write host:port, "
                "got 'grpc://b' (item 2 of 'a:1,grpc://b')",
            "127.0.0.1:29410:1":
                "--rdzv-endpoint: IPv6 addresses must be written as [addr]:port, "
                "got '127.0.0.1:29410:1' (item 1 of '127.0.0.1:29410:1')",
            "::1":
                "--rdzv-endpoint: IPv6 addresses must be written as [addr]:port, "
                "got '::1' (item 1 of '::1')",
            "h:": "--rdzv-endpoint: empty port, got 'h:' (item 1 of 'h:')",
            "[::1]:": "--rdzv-endpoint: empty port, got '[::1]:' (item 1 of '[::1]:')",
            "[::1":
                "--rdzv-endpoint: missing ']' after IPv6 address, got '[::1' (item 1 of '[::1')",
            "[::1]5": "--rdzv-endpoint: expected ':' after ']', got '[::1]5' (item 1 of '[::1]5')",
            "[]:5": "--rdzv-endpoint: empty host in '[]:5' (item 1 of '[]:5')",
            "h:65536":
                "--rdzv-endpoint: port must be 1..65535, got 'h:65536' (item 1 of 'h:65536')",
            "h:+5": "--rdzv-endpoint: port must be 1..65535, got 'h:+5' (item 1 of 'h:+5')",
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
            ({"read_timeout": "soon"}, "--rdzv-conf read_timeout must be a number of seconds "
                                       "from 0.1 to 31536000 (a year), got 'soon'"),
            ({"connect_timeout": "0"}, "--rdzv-conf connect_timeout must be a number of seconds "
                                       "from 0.1 to 31536000 (a year), got '0'"),
            ({"nproc_per_node": "0"},
             "--rdzv-conf nproc_per_node must be an integer from 1 to 4096, got '0'"),
            ({"nproc_per_node": "4097"},
             "--rdzv-conf nproc_per_node must be an integer from 1 to 4096, got '4097'"),
            ({"max_restarts": "x"},
             "--rdzv-conf max_restarts must be an integer from 0 to 2147483647, got 'x'"),
            ({"max_restarts": "2147483648"},
             "--rdzv-conf max_restarts must be an integer from 0 to 2147483647, "
             "got '2147483648'"),
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

    def test_timeouts_are_finite_and_at_most_a_year(self):
        # As dgt-run's --rdzv-conf durations (common/flag_parse.h): inf, nan and 1e400 are refused.
        minimum = {"connect_timeout": "0.1", "read_timeout": "0.1"}
        for key in TIMEOUT_KEYS:
            self.assertEqual(getattr(settings_from("h:1", {key: "31536000"}), key), 31536000.0)
            self.assertEqual(getattr(settings_from("h:1", {key: "1.5"}), key), 1.5)
            for value in ("inf", "-inf", "nan", "1e400", "31536000.5", "-1"):
                with self.subTest(key=key, value=value):
                    with self.assertRaises(ConfigError) as cm:
                        settings_from("h:1", {key: value})
                    self.assertEqual(
                        str(cm.exception),
                        f"--rdzv-conf {key} must be a number of seconds from "
                        f"{minimum.get(key, '0')} to 31536000 (a year), got '{value}'")
        # torchrun's older name for the join timeout is checked the same way.
        with self.assertRaises(ConfigError) as cm:
            settings_from("h:1", {"timeout": "inf"})
        self.assertEqual(str(cm.exception), "--rdzv-conf timeout must be a number of seconds "
                                            "from 0 to 31536000 (a year), got 'inf'")

    def test_keepalive_at_most_an_hour(self):
        s = settings_from("h:1", {"keepalive_time_ms": "3600000", "keepalive_timeout_ms": "100"})
        self.assertEqual((s.keepalive_time_ms, s.keepalive_timeout_ms), (3600000, 100))
        cases = [
            ({"keepalive_time_ms": "2147483648"},
             "--rdzv-conf keepalive_time_ms must be an integer from 500 to 3600000, "
             "got '2147483648'"),
            ({"keepalive_time_ms": "3600001"},
             "--rdzv-conf keepalive_time_ms must be an integer from 500 to 3600000, got '3600001'"),
            ({"keepalive_time_ms": "499"},
             "--rdzv-conf keepalive_time_ms must be an integer from 500 to 3600000, got '499'"),
            ({"keepalive_timeout_ms": "99999999999999999999"},
             "--rdzv-conf keepalive_timeout_ms must be an integer from 100 to 3600000, "
             "got '99999999999999999999'"),
            ({"keepalive_timeout_ms": "1.5"},
             "--rdzv-conf keepalive_timeout_ms must be an integer from 100 to 3600000, got '1.5'"),
        ]
        for conf, message in cases:
            with self.subTest(conf=conf):
                with self.assertRaises(ConfigError) as cm:
                    settings_from("h:1", conf)
                self.assertEqual(str(cm.exception), message)

    @unittest.skipUnless(importlib.util.find_spec("grpc"), "grpcio is not installed")
    def test_keepalive_maximum_fits_grpc(self):
        # The session's channel takes the keepalive as a C int; the maximum must be accepted.
        import grpc
        channel = grpc.insecure_channel(
            "127.0.0.1:1", options=[("grpc.keepalive_time_ms", MAX_KEEPALIVE_MS),
                                    ("grpc.keepalive_timeout_ms", MAX_KEEPALIVE_MS)])
        channel.close()
        self.assertEqual(MAX_KEEPALIVE_MS, 3600000)

    def test_torchrun_argv(self):
        argv = ["--nnodes=2", "--nproc-per-node=4", "--max-restarts=3", "--rdzv-backend=dgt",
                "train.py", "--lr", "1"]
        self.assertEqual(torchrun_args_from_argv(argv),
                         {"nproc_per_node": 4, "max_restarts": 3, "role": "default"})


if __name__ == "__main__":
    unittest.main()
