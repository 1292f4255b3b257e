"""TLS, mTLS and tokens: the client takes the same files and variables as
ccctl (--tls-ca, --tls-cert, --tls-key, --token-file; CCL_TLS_*, CCL_TOKEN,
CCL_TOKEN_FILE) and is refused without them."""

import os
import subprocess

import grpc
import numpy as np
import pytest

import ccl
from conftest import WORKERS, start_cluster

FULL = "py-full-token-0123456789"
READ = "py-read-token-0123456789"

# A config of our own, so the system's openssl.cnf changes nothing; leaf
# certificates name 127.0.0.1 and serve both ways (workers are clients of
# the coordinator too).
OPENSSL_CNF = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = ccl python test
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
[v3_leaf]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
"""
NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


def openssl(directory, *args):
    subprocess.run(["openssl", *args], cwd=directory, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    (d / "openssl.cnf").write_text(OPENSSL_CNF)
    openssl(d, "req", "-x509", "-config", "openssl.cnf", "-extensions",
            "v3_ca", *NEW_KEY, "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=ca")
    for name in ("server", "client"):
        openssl(d, "req", "-new", "-config", "openssl.cnf", *NEW_KEY,
                "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                "/CN=localhost")
        openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem",
                "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                "-extfile", "openssl.cnf", "-extensions", "v3_leaf", "-out",
                f"{name}.pem")
    (d / "full.token").write_text(FULL + "\n")
    (d / "read.token").write_text(READ)
    return d


@pytest.fixture(scope="module")
def secure(certs):
    args = ["--tls-cert", str(certs / "server.pem"), "--tls-key",
            str(certs / "server.key"), "--tls-ca", str(certs / "ca.pem"),
            "--tls-require-client-cert", "--token-file",
            str(certs / "full.token"), "--read-only-token-file",
            str(certs / "read.token")]
    options = honest(certs)
    c = start_cluster(worker_args=args, coordinator_args=args,
                      client_options=options)
    yield c
    c.stop()


def honest(certs):
    return {"tls_ca": str(certs / "ca.pem"),
            "tls_cert": str(certs / "client.pem"),
            "tls_key": str(certs / "client.key"), "token": FULL}


def test_tls_and_token_work(secure, certs):
    with ccl.Client(secure.coordinator, **honest(certs)) as c:
        with c.from_numpy(lambda r: [r + 1.0], dtype="float32") as t:
            c.all_reduce(t)
            assert t.read(0)[0] == sum(r + 1 for r in range(WORKERS))


def test_from_the_environment(secure, certs, monkeypatch):
    monkeypatch.setenv("CCL_TLS_CA", str(certs / "ca.pem"))
    monkeypatch.setenv("CCL_TLS_CERT", str(certs / "client.pem"))
    monkeypatch.setenv("CCL_TLS_KEY", str(certs / "client.key"))
    monkeypatch.setenv("CCL_TOKEN_FILE", str(certs / "full.token"))
    monkeypatch.setenv("CCCTL_COORDINATOR", secure.coordinator)
    with ccl.Client() as c:
        c.barrier()


def test_wrong_or_missing_token_is_unauthenticated(secure, certs):
    for token in ("not-the-token", None):
        options = dict(honest(certs), token=token)
        with pytest.raises(ccl.CclError) as e:
            ccl.Client(secure.coordinator, **options)
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_read_only_token_reads_but_does_not_drive(secure, certs):
    with ccl.Client(secure.coordinator, **honest(certs)) as admin:
        t = admin.from_numpy(np.arange(3, dtype=np.float32), name="py-ro")
        with ccl.Client(secure.coordinator,
                        **dict(honest(certs), token=READ)) as reader:
            np.testing.assert_array_equal(
                reader.get_tensor("py-ro").read(1), [0, 1, 2])
            with pytest.raises(ccl.CclError) as e:
                reader.all_reduce("py-ro")
            assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        t.free()


def test_no_client_certificate_or_plaintext_is_refused(secure, certs):
    no_cert = dict(honest(certs), tls_cert=None, tls_key=None)
    with pytest.raises(ccl.CclError) as e:
        ccl.Client(secure.coordinator, timeout=5, **no_cert)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(ccl.CclError) as e:
        ccl.Client(secure.coordinator, timeout=5, token=FULL)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_bad_options_are_refused_before_dialling(certs, tmp_path):
    with pytest.raises(ccl.InvalidArgument) as e:
        ccl.Client("127.0.0.1:1", tls_ca=str(certs / "ca.pem"),
                   tls_cert=str(certs / "client.pem"))
    assert "needs its key" in str(e.value)
    with pytest.raises(ccl.InvalidArgument) as e:
        ccl.Client("127.0.0.1:1", tls_ca=str(tmp_path / "missing.pem"))
    assert "cannot read TLS CA file" in str(e.value)
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(ccl.InvalidArgument) as e:
        ccl.Client("127.0.0.1:1", token_file=str(empty))
    assert "is empty" in str(e.value)
    assert os.path.exists(certs / "ca.pem")
