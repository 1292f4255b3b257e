"""ccl: drive a ccl-service cluster from Python with torch.distributed's names.

    import ccl
    ccl.connect()                                  # like init_process_group
    x = ccl.from_numpy(lambda rank: [rank + 1.0], dtype="float32")
    ccl.all_reduce(x, op=ccl.ReduceOp.SUM)
    print(x.read())                                # {0: array([3.]), 1: ...}

The module-level calls use the client the last connect() made (the default
process group, in torch's words); every one of them is also a method of
ccl.Client, for scripts that talk to several clusters. docs/python.md has
the name map, dtypes, errors and TLS.
"""

from ccl._client import Client, Group, ReduceOp, Tensor, Work, premul_sum
from ccl._dtypes import DTYPES as _DTYPES
from ccl._errors import CclError, InvalidArgument

__version__ = "0.1.0"

__all__ = [
    "CclError", "InvalidArgument", "Client", "Group", "ReduceOp", "Tensor",
    "Work", "connect", "init_process_group", "destroy_process_group",
    "is_initialized", "default_client", "premul_sum", "dtypes",
]

# dtype names as constants: ccl.float32 == "float32".
dtypes = tuple(_DTYPES)
for _name in _DTYPES:
    globals()[_name] = _name
    __all__.append(_name)

_default = None


def connect(coordinator=None, **options):
    """Connects to a cluster and makes it the default for the module-level
    calls. The coordinator's address: the argument, else CCCTL_COORDINATOR,
    else the local cluster's (`ccctl cluster up`), else 127.0.0.1:29400.
    Options: timeout (seconds, default 30), group, tls_ca, tls_cert, tls_key,
    tls_server_name, token, token_file (the environment fills them as for
    ccctl: CCL_TLS_CA, CCL_TLS_CERT, CCL_TLS_KEY, CCL_TLS_SERVER_NAME,
    CCL_TOKEN, CCL_TOKEN_FILE)."""
    global _default
    client = Client(coordinator, **options)
    _default = client
    return client


def init_process_group(backend=None, init_method=None, **options):
    """connect() under torch's name. `backend` is ignored (the workers pick
    Gloo or NCCL by their device); init_method "tcp://HOST:PORT" names the
    coordinator."""
    coordinator = options.pop("coordinator", None)
    if init_method:
        coordinator = init_method.removeprefix("tcp://")
    return connect(coordinator, **options)


def is_initialized():
    return _default is not None


def default_client():
    """The client the module-level calls use; FAILED_PRECONDITION before
    connect()."""
    if _default is None:
        import grpc
        raise CclError(grpc.StatusCode.FAILED_PRECONDITION,
                       "no cluster: call ccl.connect() first")
    return _default


def destroy_process_group(group=None):
    """As torch: with a group, drops that subgroup on every worker;
    without, closes the default client (freeing the tensors it made)."""
    global _default
    if group is not None:
        default_client().destroy_group(group)
        return
    if _default is not None:
        _default.close()
        _default = None


def _forward(name):
    method = getattr(Client, name)

    def call(*args, **kwargs):
        return getattr(default_client(), name)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


_FORWARDED = [
    "get_world_size", "all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "gather", "scatter", "all_to_all", "all_to_all_single", "barrier", "send",
    "recv", "isend", "irecv", "new_group", "get_group", "groups", "tensor",
    "empty", "zeros", "ones", "full", "from_numpy", "get_tensor", "bench",
    "trace", "wait_ready", "refresh", "op_log", "info",
]
for _name in _FORWARDED:
    globals()[_name] = _forward(_name)
    __all__.append(_name)
del _name
