"""`providers/boot.boot_id`: the one reader of the kernel's boot id, for the agent's state,
GCP's, DigitalOcean's, AWS's and Azure's boot records."""

from __future__ import annotations

from pathlib import Path

from forewarn.providers.boot import boot_id
from hypothesis import given
from hypothesis import strategies as st


def test_the_kernels_id_is_read_as_written(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text("0f6d3e2a-4c1b-4f7e-9a51-6b2f0c9d8e71\n")
    assert boot_id(path) == "0f6d3e2a-4c1b-4f7e-9a51-6b2f0c9d8e71"


def test_a_missing_or_blank_file_is_no_id(tmp_path: Path) -> None:
    assert boot_id(tmp_path / "absent") is None
    (tmp_path / "blank").write_text(" \n")
    assert boot_id(tmp_path / "blank") is None


def test_an_id_that_is_not_text_is_no_id(tmp_path: Path) -> None:
    """Azure's own reader (before the two were one) took such a file as no id; the shared one
    raised UnicodeDecodeError, which a watcher or the agent's state load would not survive."""
    path = tmp_path / "boot_id"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert boot_id(path) is None


def test_upper_case_is_the_same_boot(tmp_path: Path) -> None:
    """Azure's records were written lower-cased; one id in either case is one boot."""
    path = tmp_path / "boot_id"
    path.write_text("0F6D3E2A-4C1B-4F7E-9A51-6B2F0C9D8E71\n")
    assert boot_id(path) == "0f6d3e2a-4c1b-4f7e-9a51-6b2f0c9d8e71"


@given(st.binary(max_size=64))
def test_any_file_gives_an_id_or_none(content: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "boot_id")
        path.write_bytes(content)
        found = boot_id(path)
    assert found is None or (found and found == found.strip().lower())
