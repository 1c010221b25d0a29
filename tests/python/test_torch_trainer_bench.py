"""Unit tests of bench/recovery/torch_trainer/run.py's pure parts: the --overhead verdict and
table (ratios against the same round's plain) and the EVENT parser's tolerance of a stderr line
glued to an EVENT line. No process is started.
"""
import contextlib
import importlib.util
import io
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "torch_trainer_run", REPO / "bench" / "recovery" / "torch_trainer" / "run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


class FakeLaunch:
    """What all_events needs of a Launch: its log text."""

    def __init__(self, text):
        self._text = text

    def text(self):
        return self._text

    events = run.Launch.events


class OverheadVerdictTest(unittest.TestCase):
    def test_below_one_percent_only_when_the_whole_interval_is(self):
        self.assertEqual(run.overhead_verdict(-0.4, 0.9, 0.2), "< 1 %")
        self.assertEqual(run.overhead_verdict(-0.9, -0.1, -0.5), "< 1 %")
        self.assertEqual(run.overhead_verdict(-0.4, 1.0, 0.2), "not shown at this noise")
        self.assertEqual(run.overhead_verdict(-5.0, 7.0, 0.3), "not shown at this noise")
        # Cheaper than plain in every round: the rounds' noise exceeds the interval.
        self.assertEqual(run.overhead_verdict(-10.1, -5.0, -6.5), "not shown at this noise")
        self.assertEqual(run.overhead_verdict(-1.0, 0.5, 0.0), "not shown at this noise")

    def test_measurable_when_the_whole_interval_is_above(self):
        self.assertEqual(run.overhead_verdict(1.5, 9.0, 4.25), "measurable: 4.2 %")
        self.assertEqual(run.overhead_verdict(1.0, 9.0, 4.0), "not shown at this noise")


class OverheadTableTest(unittest.TestCase):
    def table(self, runs):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run.overhead_table(list(runs), runs, "intervals")
        return {line.split()[0]: line for line in out.getvalue().splitlines()[1:]}

    def test_ratio_per_round_against_that_rounds_plain(self):
        runs = {"plain": [{"intervals": [99.0, 100.0, 101.0]}, {"intervals": [200.0]},
                          {"intervals": [100.0, 100.0]}],
                "dgt-inplace": [{"intervals": [100.5]}, {"intervals": [201.0, 201.0]},
                                {"intervals": [100.2]}],
                "torchft": [{"intervals": [110.0]}, {"error": "x"}, {"intervals": [130.0]}]}
        lines = self.table(runs)
        self.assertIn("100.00 200.00 100.00", lines["plain"])
        self.assertIn("spread of plain's rounds 100.0 %", lines["plain"])
        self.assertIn("100.50 201.00 100.20", lines["dgt-inplace"])
        self.assertIn("+0.5 +0.5 +0.2", lines["dgt-inplace"])
        self.assertIn("+0.5 [+0.2, +0.5]", lines["dgt-inplace"])
        self.assertTrue(lines["dgt-inplace"].endswith("< 1 %"))
        # A failed round has no ratio; the others still count.
        self.assertIn("110.00 - 130.00", lines["torchft"])
        self.assertIn("+20.0 [+10.0, +30.0]", lines["torchft"])
        self.assertTrue(lines["torchft"].endswith("measurable: 20.0 %"))


class AllEventsTest(unittest.TestCase):
    def test_a_warning_glued_to_an_event_line_keeps_its_time(self):
        text = ("EVENT step rank=1 step=3 cpu_ns=42 t_ns=1796136267692892695[rank1]:[W1201 "
                "12:00:00 ProcessGroupGloo.cpp] Warning: x\n"
                "EVENT step rank=0 step=3 t_ns=1796136267692892700\n"
                "EVENT step rank=0 step=4 t_ns=17961\n"  # cut short: not a time
                "EVENT done rank=0\n")
        ev = run.all_events([FakeLaunch(text)])
        self.assertEqual([(k, f["rank"], f["step"], f["t_ns"]) for k, f in ev],
                         [("step", 1, "3", 1796136267692892695),
                          ("step", 0, "3", 1796136267692892700)])
        self.assertEqual(ev[0][1]["cpu_ns"], "42")


if __name__ == "__main__":
    unittest.main()
