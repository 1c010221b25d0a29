"""`torchrun --rdzv-backend=dgt`: a torchrun rendezvous handler over dgt-rendezvous
(docs/TORCHRUN_BACKEND.md). torch imports it through the "torchrun.handlers" entry point."""


def create_handler(params):
    """RendezvousHandlerCreator: the handler for torchrun's RendezvousParameters. Imports the
    handler at the call: torch loads the entry point while it imports its rendezvous package,
    which the handler itself imports."""
    try:
        import dgt.rendezvous.v1.rendezvous_pb2  # noqa: F401 (generated when the package is built)
    except ImportError as e:
        raise ImportError(
            f"dgt: the rendezvous protocol's stubs are missing ({e}): this dgt was built without "
            "grpcio-tools; run `pip install grpcio-tools==1.85.1` and reinstall dgt "
            "(docs/TORCHRUN_BACKEND.md)") from None
    from dgt.torchrun.handler import create_handler as create
    return create(params)


def handler_creator():
    """The "torchrun.handlers" entry point: torch's registry calls it once and registers what it
    returns (create_handler) as the backend "dgt"."""
    return create_handler
