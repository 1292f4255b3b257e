"""Errors: every failure is a CclError carrying the gRPC status code."""

import grpc


class CclError(RuntimeError):
    """An RPC or an op failed.

    `code` is the grpc.StatusCode (the first failing rank's, for an op that
    failed on several), `details` its message, `rank` the world rank that
    reported it (None for the coordinator or a client-side check), and
    `errors` every failing rank's (code, details), keyed by rank.
    """

    def __init__(self, code, details, rank=None, errors=None):
        self.code = code
        self.details = details
        self.rank = rank
        self.errors = dict(errors or {})
        where = f"rank {rank}: " if rank is not None else ""
        text = f"{code.name}: {where}{details}"
        others = [r for r in sorted(self.errors) if r != rank]
        for r in others:
            c, d = self.errors[r]
            text += f"\n  rank {r}: {c.name}: {d}"
        super().__init__(text)

    @property
    def code_name(self):
        """The code's name, e.g. "DEADLINE_EXCEEDED"."""
        return self.code.name


def from_rpc_error(error, rank=None, prefix=""):
    """A CclError from a grpc.RpcError (or a grpc.Future's exception)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    return CclError(code, prefix + (details or code.name.lower()), rank=rank)


class InvalidArgument(CclError, ValueError):
    """Bad input caught by the client before any RPC (INVALID_ARGUMENT); it
    is a ValueError too, as torch raises for bad arguments."""


def invalid(message):
    return InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, message)


def combine(failures):
    """One CclError from {rank: CclError} (lowest rank first)."""
    first = min(failures)
    errors = {r: (e.code, e.details) for r, e in failures.items()}
    return CclError(failures[first].code, failures[first].details, rank=first,
                    errors=errors)
