"""The control plane's certificates and kubeconfigs: a CA, the API server's serving certificate, its client
certificate for kubelets, the service-account key pair, and a kubeconfig by bearer token."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
from pathlib import Path


def write_certificates(folder: Path) -> None:
    """A CA, the API server's serving certificate (127.0.0.1, localhost), its client certificate for kubelets
    (``kubelet-client.crt``: what a one-node cluster's kubelet trusts) and a service-account key pair (ES256)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    end = start + dt.timedelta(days=30)
    ca_key, server_key, sa_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(4))
    ca = (x509.CertificateBuilder().subject_name(name("eppkit-ca")).issuer_name(name("eppkit-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(name("kube-apiserver")).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                          x509.DNSName("localhost"), x509.DNSName("kubernetes")]),
                             critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    client = (x509.CertificateBuilder().subject_name(x509.Name([
                  x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
                  x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
              .issuer_name(ca.subject).public_key(client_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kubelet-client.crt").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (folder / "kubelet-client.key").write_bytes(pem_key(client_key))
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.key").write_bytes(pem_key(server_key))
    (folder / "sa.key").write_bytes(pem_key(sa_key))
    (folder / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig_text(server: str, ca_file: Path, user: str, token: str, namespace: str = "default") -> str:
    """A kubeconfig for ``user`` by bearer token (JSON, which is YAML), its context in ``namespace``."""
    ca = base64.b64encode(Path(ca_file).read_bytes()).decode()
    return kubeconfig_json(server, user, namespace, {"certificate-authority-data": ca}, {"token": token})


def kubeconfig_json(server: str, user: str, namespace: str, trust: dict, credentials: dict) -> str:
    """A kubeconfig of one cluster (``server``, the CA as ``trust`` says: inline or by file) and one user
    (``credentials``: a token, or a token's file), its context in ``namespace``."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "eppkit", "preferences": {},
        "clusters": [{"name": "eppkit", "cluster": {"server": server, **trust}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "eppkit", "context": {"cluster": "eppkit", "user": user, "namespace": namespace}}],
    }, indent=1) + "\n"
