"""Builds dgt's Python package. The gRPC stubs of the rendezvous protocol are generated here, at
build time, from the repository's proto/ folder (grpcio-tools, a build requirement): they land in
the build tree only and are never committed."""
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# The protos the torchrun handler speaks, relative to the proto root.
PROTOS = ["dgt/rendezvous/v1/rendezvous.proto", "dgt/replica/v1/leadership.proto"]


def proto_root():
    """The repository's proto/ folder ($DGT_PROTO_ROOT overrides)."""
    root = Path(os.environ.get("DGT_PROTO_ROOT", HERE.parent / "proto"))
    missing = [p for p in PROTOS if not (root / p).is_file()]
    if missing:
        raise SystemExit(f"dgt: cannot generate the gRPC stubs: {', '.join(missing)} not found "
                         f"under {root} (build from a dgt checkout, or set DGT_PROTO_ROOT)")
    return root


def generate(out_dir):
    """Runs protoc (grpcio-tools) on PROTOS into out_dir; each proto package gets __init__.py."""
    try:
        from grpc_tools import protoc
        import grpc_tools
    except ImportError as e:
        # dgt.recovery needs no stubs: the package still installs, and the torchrun backend
        # says what is missing when it is used.
        print(f"dgt: WARNING: no grpcio-tools ({e}): building without the rendezvous stubs; "
              "torchrun --rdzv-backend=dgt needs them (install grpcio-tools, reinstall dgt)",
              file=sys.stderr)
        return
    root = proto_root()
    wkt = Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{wkt}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *[str(root / p) for p in PROTOS]]
    if protoc.main(args) != 0:
        raise SystemExit(f"dgt: protoc failed on {PROTOS} under {root}")
    for proto in PROTOS:
        package = out_dir / Path(proto).parent
        while package != out_dir / "dgt":
            (package / "__init__.py").touch()
            package = package.parent


class BuildPyWithStubs(build_py):
    """build_py, then the generated stubs into the build tree."""

    def run(self):
        super().run()
        generate(Path(self.build_lib))


setup(cmdclass={"build_py": BuildPyWithStubs})
