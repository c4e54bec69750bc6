"""Where the API server is and how to authenticate: in-cluster and kubeconfig."""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.kubernetes.config import (
    ConfigError,
    from_kubeconfig,
    host_boot,
    host_boot_id,
    host_boot_time,
    in_cluster,
    node_name,
    resolve,
)
from forewarn.providers.kubernetes.nodes import HostBoot
from forewarn.providers.kubernetes.settings import (
    DEFAULT_DRAIN_TAINTS,
    DEFAULT_TERMINATE_TAINTS,
    Settings,
    taint_key_problem,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    """A self-signed certificate and its key, PEM (for CA and client-certificate cases)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "forewarn-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return {
        "cert": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    }


def sa_dir(tmp_path: Path, token: str | None = "sa-token", ca: str | None = None) -> Settings:
    if token is not None:
        (tmp_path / "token").write_text(token + "\n")
    if ca is not None:
        (tmp_path / "ca.crt").write_text(ca)
    return Settings(token_file=tmp_path / "token", ca_file=tmp_path / "ca.crt")


def test_in_cluster_from_the_service_env(tmp_path: Path, pki: dict[str, str]) -> None:
    settings = sa_dir(tmp_path, ca=pki["cert"])
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cluster = in_cluster(settings, env)
    assert cluster.server == "https://10.96.0.1:443"
    assert cluster.token() == "sa-token"
    assert isinstance(cluster.verify, ssl.SSLContext)
    assert cluster.verify.verify_mode == ssl.CERT_REQUIRED
    assert cluster.verify.get_ca_certs()[0]["subject"] == ((("commonName", "forewarn-test"),),)
    # The token rotates: every call reads the file again.
    (tmp_path / "token").write_text("rotated\n")
    assert cluster.token() == "rotated"


def test_in_cluster_ipv6_is_bracketed(tmp_path: Path) -> None:
    settings = sa_dir(tmp_path)
    cluster = in_cluster(settings, {"KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert cluster.server == "https://[fd00::1]:443"


def test_not_in_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST is not set"):
        in_cluster(sa_dir(tmp_path), {})


def test_unreadable_token(tmp_path: Path) -> None:
    settings = sa_dir(tmp_path, token=None)
    with pytest.raises(ConfigError, match=r"token .*token is unreadable"):
        in_cluster(settings, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    (tmp_path / "token").write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        in_cluster(settings, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_bad_ca_is_named(tmp_path: Path) -> None:
    settings = sa_dir(tmp_path, ca="not a certificate")
    with pytest.raises(ConfigError, match="cannot load CA"):
        in_cluster(settings, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_url_override_needs_no_token(tmp_path: Path) -> None:
    settings = Settings(url="http://127.0.0.1:8001/", token_file=tmp_path / "absent")
    cluster = in_cluster(settings, {})
    assert cluster.server == "http://127.0.0.1:8001"
    assert cluster.token() is None
    assert cluster.verify is True
    # Messages say where the server came from (they said "in-cluster" outside any pod).
    assert cluster.source == (
        f"kubernetes.url http://127.0.0.1:8001 (no token: {tmp_path / 'absent'} does not exist)"
    )


def test_the_source_names_the_url_even_in_a_pod(tmp_path: Path) -> None:
    settings = sa_dir(tmp_path).model_copy(update={"url": "http://127.0.0.1:8001"})
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert in_cluster(settings, env).source == (
        f"kubernetes.url http://127.0.0.1:8001 (token from {tmp_path / 'token'})"
    )
    assert in_cluster(settings, env, url_from="--url").source.startswith("--url http://")
    assert in_cluster(sa_dir(tmp_path), env).source == "in-cluster"


def test_node_name(tmp_path: Path) -> None:
    assert node_name(Settings(node_name="a"), {"NODE_NAME": "b"}) == "a"
    assert node_name(Settings(), {"NODE_NAME": " b "}) == "b"
    # As `hostname` prints it: Node names are lower case (the kubelet lowers the hostname).
    assert node_name(Settings(node_name="GPU-Box-1"), {}) == "gpu-box-1"
    assert node_name(Settings(), {"NODE_NAME": "IP-10-0-1-2.EC2.Internal\n"}) == (
        "ip-10-0-1-2.ec2.internal"
    )
    with pytest.raises(ConfigError, match="NODE_NAME"):
        node_name(Settings(node_name="  "), {})


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ops",
        "contexts": [
            {"name": "ops", "context": {"cluster": "c1", "user": "u1"}},
            {"name": "other", "context": {"cluster": "c2", "user": "u1"}},
        ],
        "clusters": [
            {"name": "c1", "cluster": cluster or {"server": "https://k8s.example:6443"}},
            {"name": "c2", "cluster": {"server": "http://127.0.0.1:8080"}},
        ],
        "users": [{"name": "u1", "user": user}],
    }


def test_kubeconfig_json_with_token_file(tmp_path: Path, pki: dict[str, str]) -> None:
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "token").write_text("from-file\n")
    ca = base64.b64encode(pki["cert"].encode()).decode()
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            kubeconfig(
                {"tokenFile": "creds/token"},
                {"server": "https://k8s.example:6443/", "certificate-authority-data": ca},
            )
        )
    )
    cluster = from_kubeconfig(path, None, None)
    assert cluster.server == "https://k8s.example:6443"
    assert cluster.token() == "from-file"
    assert isinstance(cluster.verify, ssl.SSLContext)
    assert "context ops" in cluster.source
    other = from_kubeconfig(path, "other", None)
    assert other.server == "http://127.0.0.1:8080"
    assert from_kubeconfig(path, "other", "http://127.0.0.1:9").server == "http://127.0.0.1:9"


def test_a_url_over_a_kubeconfig_is_named_as_the_server_with_the_kubeconfigs_credentials(
    tmp_path: Path,
) -> None:
    """`kubernetes.url` with a kubeconfig: the server is the URL, the credentials the
    kubeconfig's. The source named the kubeconfig alone, and so did the log and every error
    (a 401's "the API server refused the token of kubeconfig ..."): an operator looked at the
    kubeconfig's cluster, which the agent was not talking to."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(kubeconfig({"token": "t1"})))
    cluster = from_kubeconfig(path, None, "http://127.0.0.1:9/")
    assert cluster.server == "http://127.0.0.1:9"
    assert cluster.source == (
        f"kubernetes.url http://127.0.0.1:9 (credentials from kubeconfig {path}, context ops)"
    )
    assert from_kubeconfig(path, None, None).source == f"kubeconfig {path} (context ops)"


def test_kubeconfig_yaml_with_client_certificate(tmp_path: Path, pki: dict[str, str]) -> None:
    import yaml

    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            kubeconfig(
                {
                    "client-certificate-data": encode(pki["cert"]),
                    "client-key-data": encode(pki["key"]),
                },
                {"server": "https://k8s.example:6443", "insecure-skip-tls-verify": True},
            )
        )
    )
    cluster = resolve(Settings(kubeconfig=path), {})
    assert cluster.token() is None
    assert isinstance(cluster.verify, ssl.SSLContext)  # carries the client certificate
    assert cluster.verify.verify_mode == ssl.CERT_NONE


def test_kubeconfig_insecure_skip_tls_verify_with_a_token(
    tmp_path: Path, pki: dict[str, str]
) -> None:
    """A self-signed API server on loopback, reached with a token only: no certificate check."""
    import http.server
    import threading

    import httpx

    (tmp_path / "server.pem").write_text(pki["cert"] + pki["key"])
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "server.pem")

    class Version(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"major": "1"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Version)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        path = tmp_path / "config.json"
        insecure = {"server": url, "insecure-skip-tls-verify": True}
        path.write_text(json.dumps(kubeconfig({"token": "t"}, insecure)))
        cluster = from_kubeconfig(path, None, None)
        with httpx.Client(verify=cluster.verify, trust_env=False, timeout=5) as client:
            assert client.get(f"{cluster.server}/version").json() == {"major": "1"}
    finally:
        server.shutdown()
        server.server_close()


def test_kubeconfig_static_token(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(kubeconfig({"token": "static"})))
    assert from_kubeconfig(path, None, None).token() == "static"


@pytest.mark.parametrize(
    ("user", "context", "message"),
    [
        ({"exec": {"command": "aws"}}, None, "exec: malformed request"),
        (
            {"exec": {"command": "false", "apiVersion": "client.authentication.k8s.io/v1"}},
            None,
            "exec: process returned 1",
        ),
        ({"token": "t"}, "nope", "Expected object with name nope"),
        ({"tokenFile": "missing"}, None, "No such file"),
    ],
)
def test_kubeconfig_errors(
    tmp_path: Path, user: dict[str, Any], context: str | None, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(kubeconfig(user)))
    with pytest.raises(ConfigError, match=message):
        from_kubeconfig(path, context, None)


def test_kubeconfig_without_the_client_library_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [*(m for m in sys.modules if m.split(".")[0] == "kubernetes"), "kubernetes"]:
        monkeypatch.setitem(sys.modules, name, None)
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nkind: Config\n")
    # The command names where this forewarn came from (forewarn is on no package index).
    with pytest.raises(ConfigError, match=r"pip install (-e '/\S*\[k8s\]'|'forewarn\[k8s\] @ )"):
        from_kubeconfig(path, None, None)


def test_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kubeconfig .*absent: no such file"):
        from_kubeconfig(tmp_path / "absent", None, None)


def test_a_kubeconfig_in_a_home_under_systemd_names_protect_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """forewarn-agent.service's ProtectHome=yes hides /home, /root and /run/user: a kubeconfig
    there worked from a shell and was "no such file" under the unit alone. Under systemd
    (INVOCATION_ID) the error says so, and what to do instead."""
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")
    monkeypatch.setenv("HOME", "/home/forewarn-absent")
    for written in ("/home/forewarn-absent/.kube/config", "/root/forewarn-absent/config"):
        with pytest.raises(ConfigError) as raised:
            from_kubeconfig(written, None, None)
        message = str(raised.value)
        assert f"kubeconfig {written}: no such file; {written} may be hidden" in message
        assert "ProtectHome=" in message and "/etc/forewarn/kubeconfig" in message
    # `~` is the agent's user's home under the unit: the error says which file it looked for.
    with pytest.raises(ConfigError, match=r"~/.kube/config \(/home/forewarn-absent/.kube/config\)"):
        from_kubeconfig("~/.kube/config", None, None)
    # The default ~/.kube/config outside a pod, unseen for the same reason.
    with pytest.raises(ConfigError, match=r"not in a pod: .*ProtectHome="):
        resolve(Settings(), {"INVOCATION_ID": "1", "HOME": "/home/forewarn-absent"})


def test_a_kubeconfig_elsewhere_or_outside_systemd_does_not_blame_protect_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    with pytest.raises(ConfigError) as raised:
        from_kubeconfig("/home/forewarn-absent/.kube/config", None, None)
    assert "ProtectHome" not in str(raised.value)
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")
    with pytest.raises(ConfigError) as raised:
        from_kubeconfig(tmp_path / "absent", None, None)
    assert "ProtectHome" not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        in_cluster(sa_dir(tmp_path), {"INVOCATION_ID": "1", "HOME": str(tmp_path)})
    assert "ProtectHome" not in str(raised.value)


def test_an_exec_plugin_in_a_home_under_systemd_names_protect_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec plugin installed in a home directory (gcloud's SDK unpacked in ~) runs from a
    shell, but under the unit's ProtectHome=yes the agent said only "[Errno 2] No such file or
    directory: '/home/.../gke-gcloud-auth-plugin'". Under systemd the error says why, and where
    to install the plugin instead; elsewhere it is the plain error."""
    pytest.importorskip("kubernetes")
    plugin = "/home/forewarn-absent/google-cloud-sdk/bin/gke-gcloud-auth-plugin"
    api = "client.authentication.k8s.io/v1"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(kubeconfig({"exec": {"command": plugin, "apiVersion": api}})))
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")
    with pytest.raises(ConfigError) as raised:
        from_kubeconfig(path, None, None)
    message = str(raised.value)
    assert f"No such file or directory: '{plugin}'; {plugin} may be hidden" in message, message
    assert "ProtectHome=" in message and "outside them (e.g. in /usr/local/bin)" in message
    monkeypatch.delenv("INVOCATION_ID")
    with pytest.raises(ConfigError) as raised:
        from_kubeconfig(path, None, None)
    assert "No such file or directory" in str(raised.value)
    assert "ProtectHome" not in str(raised.value)


def test_a_kubeconfig_behind_a_directory_the_agent_cannot_enter_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ProtectHome=yes leaves /home a directory of mode 000: looking for a kubeconfig there
    as the agent's user raised PermissionError from the file check, not the ConfigError
    naming the file and ProtectHome."""
    pytest.importorskip("kubernetes")
    import kubernetes.config.kube_config  # noqa: F401  (loaded before the uid drops)
    import yaml  # noqa: F401
    from forewarn.providers.kubernetes import kubeconfig
    from other_user import call_as, other_user, shared_tmp

    uid, gid = other_user()
    base = shared_tmp(uid, gid)
    path = base / "home" / "ml" / ".kube" / "config"
    try:
        path.parent.mkdir(parents=True)
        path.write_text("apiVersion: v1\n")
        (base / "home").chmod(0o000)  # as ProtectHome=yes leaves /home
        monkeypatch.setattr(kubeconfig, "PROTECTED_HOMES", (base / "home",))
        monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")

        def attempt() -> str:
            try:
                kubeconfig.load(str(path), None)
            except ConfigError as error:
                return str(error)
            return "loaded"

        message = call_as(uid, gid, attempt)
    finally:
        (base / "home").chmod(0o700)
        shutil.rmtree(base)
    assert message.startswith(f"kubeconfig {path}: permission denied; {path} may be hidden")
    assert "ProtectHome=" in message


def test_taints_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from forewarn.agent.config import load_settings

    monkeypatch.setenv("FOREWARN_KUBERNETES_TAINTS", "a/b, ToBeDeletedByClusterAutoscaler")
    monkeypatch.setenv("FOREWARN_KUBERNETES_NODE_NAME", "n1")
    loaded = load_settings().kubernetes
    assert loaded.taints == ["a/b", "ToBeDeletedByClusterAutoscaler"]
    assert loaded.node_name == "n1"
    monkeypatch.setenv("FOREWARN_KUBERNETES_TAINTS", '["x", "y"]')
    assert load_settings().kubernetes.taints == ["x", "y"]


def test_extra_taints_from_the_environment_add_to_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from forewarn.agent.config import load_settings

    monkeypatch.setenv("FOREWARN_KUBERNETES_EXTRA_TAINTS", "example.com/bye, a/b")
    loaded = load_settings().kubernetes
    assert loaded.extra_taints == ["example.com/bye", "a/b"]
    assert loaded.drain_taints == {*DEFAULT_DRAIN_TAINTS, "example.com/bye", "a/b"}
    monkeypatch.setenv("FOREWARN_KUBERNETES_EXTRA_TAINTS", "example.com/bye:NoSchedule")
    with pytest.raises(ConfigError, match=r"kubernetes.extra_taints: .* is not a taint key"):
        load_settings()


def test_terminate_taints_pick_terminates_among_the_taints_that_raise_a_notice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from forewarn.agent.config import load_settings

    loaded = load_settings().kubernetes
    assert loaded.imminent_taints == set(DEFAULT_TERMINATE_TAINTS) <= loaded.drain_taints
    monkeypatch.setenv("FOREWARN_KUBERNETES_EXTRA_TAINTS", "example.com/going")
    monkeypatch.setenv("FOREWARN_KUBERNETES_TERMINATE_TAINTS", "example.com/going other.io/x")
    # A key that raises no notice (not in taints or extra_taints) raises no terminate either.
    assert load_settings().kubernetes.imminent_taints == {"example.com/going"}
    monkeypatch.setenv("FOREWARN_KUBERNETES_TERMINATE_TAINTS", "[]")
    assert load_settings().kubernetes.imminent_taints == frozenset()
    monkeypatch.setenv("FOREWARN_KUBERNETES_TERMINATE_TAINTS", "spot-itn=x:NoSchedule")
    with pytest.raises(ConfigError, match=r"kubernetes.terminate_taints: .* is not a taint key"):
        load_settings()


@pytest.mark.parametrize(
    ("given_", "says"),
    [
        ("ToBeDeletedByClusterAutoscaler:NoSchedule", "without =value or :effect"),
        ("karpenter.sh/disruption=disrupting:NoSchedule", "without =value or :effect"),
        # A space inside a key; the space around one is dropped, as in the comma form.
        ('["karpenter.sh/dis rupted"]', "letters, digits"),
        ("Karpenter.sh/disrupted", "not a DNS subdomain"),
    ],
)
def test_a_taint_that_cannot_exist_is_refused(
    monkeypatch: pytest.MonkeyPatch, given_: str, says: str
) -> None:
    """kubectl's `key=value:Effect` form was accepted and then never matched any taint, so
    the autoscaler's deletion went unnoticed without a word."""
    from forewarn.agent.config import load_settings

    monkeypatch.setenv("FOREWARN_KUBERNETES_TAINTS", given_)
    with pytest.raises(ConfigError, match=rf"kubernetes.taints: .* is not a taint key: .*{says}"):
        load_settings()


_DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
_TAINT_NAME = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?", fullmatch=True)
_TAINT_KEYS = st.one_of(
    _TAINT_NAME,
    st.builds(
        lambda labels, name: ".".join(labels) + "/" + name,
        st.lists(_DNS_LABEL, min_size=1, max_size=4),
        _TAINT_NAME,
    ),
)


@settings(max_examples=examples(200), deadline=None)
@given(key=_TAINT_KEYS, suffix=st.sampled_from(["", "=v", ":NoSchedule", "=v:NoExecute", " "]))
def test_taint_keys_property(key: str, suffix: str) -> None:
    """Every qualified name is a key; the same with a value, an effect or a space is not."""
    assert (taint_key_problem(key + suffix) is None) == (suffix == "")
    assert Settings(taints=[key]).taints == [key]


def test_default_taints_are_keys() -> None:
    assert [taint_key_problem(key) for key in DEFAULT_DRAIN_TAINTS] == [None] * len(
        DEFAULT_DRAIN_TAINTS
    )


def test_in_cluster_never_loads_the_client_library(tmp_path: Path) -> None:
    """The agent in a pod needs only httpx: the kubeconfig library stays unimported."""
    import subprocess

    (tmp_path / "token").write_text("t")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from forewarn.providers.kubernetes.config import resolve\n"
        "from forewarn.providers.kubernetes.settings import Settings\n"
        f"settings = Settings(token_file=Path({str(tmp_path / 'token')!r}))\n"
        "resolve(settings, {'KUBERNETES_SERVICE_HOST': '10.96.0.1', 'KUBECONFIG': 'x'})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'yaml')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_host_boot_id_is_read_in_a_pod_only(tmp_path: Path, monkeypatch: Any) -> None:
    """In a pod the agent is on the node: its boot id is the node's. With a url or a
    kubeconfig it may run anywhere; only an explicit file is compared then."""
    from forewarn.providers.kubernetes import config

    default = tmp_path / "boot_id"
    default.write_text("ABC-1\n")
    monkeypatch.setattr(config, "HOST_BOOT_ID", default)
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert host_boot_id(Settings(), in_pod) == "abc-1"
    assert host_boot_id(Settings(), {}) is None
    assert host_boot_id(Settings(url="http://127.0.0.1:1"), in_pod) is None
    assert host_boot_id(Settings(url="http://127.0.0.1:1", boot_id_file=default), {}) == "abc-1"
    default.unlink()
    assert host_boot_id(Settings(), in_pod) is None  # every shutdown counts, as before
    with pytest.raises(ConfigError, match=r"boot_id_file .* unreadable"):
        host_boot_id(Settings(boot_id_file=default), {})
    default.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        host_boot_id(Settings(boot_id_file=default), {})


def test_host_boot_time_is_the_btime_of_proc_stat(tmp_path: Path, monkeypatch: Any) -> None:
    """The boot time is read wherever the boot id is compared; a set file that gives none
    is a config error, the default one only a warning (and then nothing is stale)."""
    from forewarn.providers.kubernetes import config

    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4\nintr 5\nbtime 1764640800\nprocesses 9\n")
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("abc-1\n")
    monkeypatch.setattr(config, "HOST_STAT", stat)
    monkeypatch.setattr(config, "HOST_BOOT_ID", boot_id)
    booted = datetime.datetime(2025, 12, 2, 2, 0, tzinfo=datetime.timezone.utc)
    assert host_boot_time(Settings()) == booted
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert host_boot(Settings(), in_pod) == HostBoot("abc-1", booted)
    assert host_boot(Settings(), {}) is None
    for broken in ("btime\n", "btime soon\n", "cpu 1\n", "btime 99999999999999999999\n"):
        stat.write_text(broken)
        assert host_boot(Settings(), in_pod) is None  # every shutdown counts, as before
        with pytest.raises(ConfigError, match=r"boot_time_file .* no `btime"):
            host_boot(Settings(boot_time_file=stat), in_pod)
    stat.unlink()
    assert host_boot(Settings(), in_pod) is None
    with pytest.raises(ConfigError, match=r"boot_time_file .* unreadable"):
        host_boot_time(Settings(boot_time_file=stat))


@given(name=st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,30}[A-Za-z0-9])?", fullmatch=True))
def test_a_node_name_in_any_case_is_the_lower_case_node(name: str) -> None:
    for settings_, env in (
        (Settings(node_name=name), {}),
        (Settings(), {"NODE_NAME": f" {name}\n"}),
    ):
        assert node_name(settings_, env) == name.lower()
