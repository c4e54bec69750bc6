"""Every S3 client of a process reads botocore's S3 model and endpoint rules once: a new
boto3 session parsed them again (eight JSON files, about 0.05 CPU-s), twice per store (its
client and its completer), and the suite makes hundreds of stores. Nothing but those data
files is shared: each client keeps its own credentials, region and boto3's transfer methods."""

from __future__ import annotations

from typing import Any

from support import requires

pytestmark = requires("boto3")


def _client(**changes: Any) -> Any:
    from forewarn.clients.checkpoint.s3 import make_client

    options: dict[str, Any] = {
        "endpoint_url": "http://127.0.0.1:9",
        "region": "us-east-1",
        "access_key_id": "a",
        "secret_access_key": "b",
        "session_token": None,
        "profile": None,
        "addressing_style": None,
        "concurrency": 1,
        "upload_checksums": True,
    }
    options.update(changes)
    return make_client(**options)


def test_two_clients_share_the_parsed_s3_model() -> None:
    first, second = _client(), _client(read_timeout=300.0)
    model = first.meta.service_model._service_description
    assert second.meta.service_model._service_description is model


def test_the_shared_loader_does_not_grow_with_each_client() -> None:
    first = _client()
    paths = list(first._loader.search_paths)
    for _ in range(3):
        again = _client()
    assert again._loader is first._loader
    assert again._loader.search_paths == paths
    assert len(set(paths)) == len(paths)


def test_each_client_keeps_its_own_credentials_region_and_transfer_methods() -> None:
    ours = _client(access_key_id="ours", secret_access_key="s1", region="eu-west-1")
    theirs = _client(access_key_id="theirs", secret_access_key="s2", region="us-west-2")
    assert ours._request_signer._credentials.access_key == "ours"
    assert theirs._request_signer._credentials.access_key == "theirs"
    assert (ours.meta.region_name, theirs.meta.region_name) == ("eu-west-1", "us-west-2")
    for client in (ours, theirs):
        assert callable(client.upload_fileobj) and callable(client.download_fileobj)
