"""bench/chaos/run.sh, the chaos soak (docs/RELIABILITY.md, "The chaos soak"): its flags. A bad
flag is refused with a message that names it and exit 2, before anything is started. The soak
itself takes minutes (a fleet of 9 processes, then every job to its end and a 45 s orphan
grace), more than an e2e test may take; `bench/chaos/run.sh --minutes N` runs it."""
import subprocess

import pytest

from conftest import BIN, REPO

RUN = REPO / "bench" / "chaos" / "run.sh"


def run(*args):
    return subprocess.run([RUN, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, error", [
    ((), "one of the arguments --minutes --seconds is required"),
    (("--minutes", "0"), "--minutes must be a whole number above 0, got '0'"),
    (("--minutes", "1.5"), "--minutes must be a whole number above 0, got '1.5'"),
    (("--seconds", "-3"), "--seconds must be a whole number above 0, got '-3'"),
    (("--seconds", "x"), "--seconds must be a whole number above 0, got 'x'"),
    (("--minutes", "1", "--seconds", "5"), "argument --seconds: not allowed with argument "
                                            "--minutes"),
    (("--minutes", "1", "--seed", "s1"), "--seed must be a whole number, got 's1'"),
    (("--minutes", "1", "--jobs", "3"), "unrecognized arguments: --jobs 3"),
])
def test_bad_flags_exit_2_naming_the_flag(args, error):
    r = run(*args, "--build", BIN.parent)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines()[-1] == f"run.sh: error: {error}", r.stderr


def test_a_build_dir_without_the_binaries_is_refused(tmp_path):
    r = run("--minutes", "1", "--build", tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines()[-1] == \
        f"run.sh: error: no {tmp_path}/bin/dgt (build first, or pass --build DIR)", r.stderr
