"""Where the coordinator is, and channels with the same TLS and token rules
as ccctl (common/credentials.h): TLS when a CA is given, a client
certificate for mTLS, the token sent as "authorization: Bearer <token>"."""

import json
import os

import grpc

from ccl._errors import invalid

DEFAULT_COORDINATOR = "127.0.0.1:29400"
# Replies of ReadTensor are chunks of at most 1 MiB; headroom as ccctl.
MAX_MESSAGE_BYTES = 16 << 20


def state_dir():
    """Where `ccctl cluster up` keeps its state."""
    env = os.environ.get("CCCTL_STATE_DIR")
    if env:
        return env
    return os.path.join(os.environ.get("HOME") or "/tmp", ".ccctl", "cluster")


def resolve_coordinator(address=None):
    """The argument, else CCCTL_COORDINATOR, else the local cluster's (from
    `ccctl cluster up`), else 127.0.0.1:29400: ccctl's order."""
    if address:
        return address
    env = os.environ.get("CCCTL_COORDINATOR")
    if env:
        return env
    try:
        with open(os.path.join(state_dir(), "state.json")) as f:
            state = json.load(f)
        if isinstance(state, dict) and state.get("coordinator"):
            return state["coordinator"]
    except (OSError, ValueError):
        pass  # no local cluster, or a damaged state file: the default
    return DEFAULT_COORDINATOR


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise invalid(f"cannot read {what} file '{path}': {e.strerror}") from None


def _token(token, token_file):
    """The argument, else the file, else CCL_TOKEN_FILE, else CCL_TOKEN."""
    if token:
        return token.strip()
    path = token_file or os.environ.get("CCL_TOKEN_FILE")
    if path:
        value = _read(path, "token").decode().strip()
        if not value:
            raise invalid(f"token file '{path}' is empty")
        return value
    return os.environ.get("CCL_TOKEN", "").strip()


class _Bearer(grpc.UnaryUnaryClientInterceptor,
              grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor):
    """Adds the token to every call (plaintext channels included, which
    call credentials would refuse)."""

    def __init__(self, token):
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details):
        metadata = list(details.metadata or []) + [self._header]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, iterator):
        return continuation(self._details(details), iterator)


class Security:
    """TLS files and the token; arguments win over the environment
    (CCL_TLS_CA, CCL_TLS_CERT, CCL_TLS_KEY, CCL_TLS_SERVER_NAME, CCL_TOKEN,
    CCL_TOKEN_FILE), as in ccctl."""

    def __init__(self, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None, token=None, token_file=None):
        env = os.environ.get
        self.tls_ca = tls_ca or env("CCL_TLS_CA") or None
        self.tls_cert = tls_cert or env("CCL_TLS_CERT") or None
        self.tls_key = tls_key or env("CCL_TLS_KEY") or None
        self.tls_server_name = (tls_server_name or env("CCL_TLS_SERVER_NAME")
                                or None)
        self.token = _token(token, token_file)
        self._credentials = None
        if self.tls_ca:
            if bool(self.tls_cert) != bool(self.tls_key):
                raise invalid("a client certificate needs its key and the "
                              "other way round")
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(self.tls_ca, "TLS CA"),
                private_key=(_read(self.tls_key, "TLS key")
                             if self.tls_key else None),
                certificate_chain=(_read(self.tls_cert, "TLS certificate")
                                   if self.tls_cert else None))

    def channel(self, target):
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        if self._credentials is not None:
            if self.tls_server_name:
                options.append(("grpc.ssl_target_name_override",
                                self.tls_server_name))
            channel = grpc.secure_channel(target, self._credentials, options)
        else:
            channel = grpc.insecure_channel(target, options)
        if self.token:
            channel = grpc.intercept_channel(channel, _Bearer(self.token))
        return channel
