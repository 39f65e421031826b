"""Certificates, service-account keys and kubeconfigs for the test control plane.

Everything is generated fresh per control plane with the ``cryptography``
package: a CA, the API server's serving certificate (valid for loopback and the
in-cluster service names), one admin client certificate in ``system:masters``
that every component and test uses, and the RSA key pair that signs
service-account tokens.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The first address of the default service range, where ``kubernetes.default`` lives.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
_VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class PkiPaths:
    """Where the generated key material lies inside a control plane's state dir."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, pub: rsa.RSAPublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(pub)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def generate_pki(directory: Path) -> PkiPaths:
    """Write a fresh CA, serving/client certificates and SA keys under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = PkiPaths(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        apiserver_cert=directory / "apiserver.crt",
        apiserver_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    ca_key = _key()
    ca_name = _name("slurm-pool-test-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(paths.ca_key, _key_pem(ca_key), private=True)

    def leaf(cert_path: Path, key_path: Path, subject: x509.Name, server: bool) -> None:
        key = _key()
        builder = _builder(subject, ca_name, key.public_key()).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        if server:
            dns = [
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            ips = ["127.0.0.1", KUBERNETES_SERVICE_IP]
            san = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        _write(key_path, _key_pem(key), private=True)

    leaf(paths.apiserver_cert, paths.apiserver_key, _name("kube-apiserver"), server=True)
    leaf(paths.admin_cert, paths.admin_key, _name("slurm-pool-test-admin", "system:masters"), server=False)

    sa_key = _key()
    _write(paths.sa_key, _key_pem(sa_key), private=True)
    _write(
        paths.sa_pub,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return paths


def write_kubeconfig(path: Path, server: str, pki: PkiPaths, cluster: str = "slurm-pool-test") -> Path:
    """Write an admin kubeconfig (certificates embedded) for ``server``.

    JSON is valid YAML, so every kubeconfig reader accepts it.
    """

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)}}],
        "users": [
            {
                "name": "admin",
                "user": {"client-certificate-data": b64(pki.admin_cert), "client-key-data": b64(pki.admin_key)},
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "admin"}}],
        "current-context": cluster,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path
