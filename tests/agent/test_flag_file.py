"""The flag file as people write it, against a real agent: the ways a shell or an operator
drops `checkpoint-now` into the runtime directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, eventually, examples, run_forewarn

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


def _agent_that_obeys_file_modes(tmp_path: Path) -> AgentProcess:
    """An agent that, like one run as the `forewarn` user, cannot read a file its mode keeps
    from it. Root reads any file (CAP_DAC_OVERRIDE): under root the agent runs without the
    two capabilities that bypass file modes."""
    agent = AgentProcess(tmp_path)
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv cannot run an agent that obeys file modes")
        agent.argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *agent.argv]
    return agent


def test_a_flag_file_the_agent_may_not_read_still_raises_its_drain(tmp_path: Path) -> None:
    # `sudo touch /run/forewarn/checkpoint-now` under root's umask 027 (CIS-hardened hosts)
    # made a 0640 root:root file the `forewarn` user could not open: no drain, only the local
    # provider "degraded (last error: stat)", while the operator took the checkpoint as asked.
    with _agent_that_obeys_file_modes(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        os.close(os.open(flag, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o000))
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/")
        assert drain["deadline"] is None
        warning = f"flag file {flag}: cannot read it"
        eventually(lambda: warning in agent.output(), what="the warning")
        health = agent.control({"op": "status"})["health"]
        assert [h["state"] for h in health if h["name"] == "local"] == ["healthy"], health
        # Handled as any flag: the ack removes it (the directory is the agent's) and clears.
        assert agent.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        cleared = sub.notice(timeout=5)
        assert (cleared["action"], cleared["id"]) == ("clear", drain["id"])
        assert not flag.exists()
    assert agent.output().count(warning) == 1


def test_a_flag_written_again_just_before_the_flush_is_kept_as_a_new_request(
    tmp_path: Path,
) -> None:
    # The flush of the first request removed the file the operator had just written again:
    # a script waiting for the file to go took a checkpoint started before its own request
    # for one taken after it. Between two looks (here a minute apart) the agent cannot see
    # the new mtime, so it looks before it removes.
    runtime = tmp_path / "run"
    runtime.mkdir()
    flag = runtime / "checkpoint-now"
    flag.write_text("")
    agent = AgentProcess(tmp_path, args=("--set", "local.flag_interval=60"))
    with agent, agent.subscriber() as sub:
        first = sub.notice(timeout=5)
        assert first["action"] == "drain"
        written = flag.stat()
        os.utime(flag, ns=(written.st_atime_ns, written.st_mtime_ns + 1_000_000_000))
        assert agent.control({"op": "ack", "notice_id": first["id"]})["ok"]
        cleared = sub.notice(timeout=5)
        assert (cleared["action"], cleared["id"]) == ("clear", first["id"])
        assert agent.control({"op": "status"})["ok"]
        assert flag.exists(), "the second request was removed by the first one's flush"
        assert "handled and removed" not in agent.output()


def test_a_flag_text_that_is_no_deadline_is_shown_as_its_note(tmp_path: Path) -> None:
    # The README says the text is kept as the drain's note, but it went to `detail.content`
    # alone: `watch` and `status`, which show a note, showed nothing of `terminate 10m`.
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("terminate 10m\r\n")
        drain = sub.notice(timeout=5)
        assert drain["deadline"] is None
        assert drain["detail"]["note"] == "terminate 10m"
        status = run_forewarn("status", env=agent.env)
        assert status.returncode == 0, status.stderr
        assert 'note "terminate 10m"' in status.stdout, status.stdout
        watch = run_forewarn("watch", "--count", "1", "--timeout", "20s", env=agent.env)
        assert watch.returncode == 0, watch.stderr
        assert 'note "terminate 10m"  [replay]' in watch.stdout, watch.stdout
        # A deadline it reads is no note (the watch's replay may come first).
        flag.write_text("15m\n")
        read = sub.notice(timeout=5)
        while read["id"] == drain["id"]:
            read = sub.notice(timeout=5)
        assert read["deadline"] is not None and "note" not in read["detail"]


def test_a_flag_written_just_after_a_restart_waits_for_the_clients_still_reconnecting(
    tmp_path: Path,
) -> None:
    # An agent restarted with no notice to restore held no flushes: a flag written in its first
    # seconds was flushed by the first client back, and the file removed (the request taken
    # as handled), while a client of the agent before, still reconnecting, had not saved.
    AgentProcess(tmp_path).start().stop()
    with (
        AgentProcess(tmp_path) as agent,
        Subscriber(agent.events, ("notice", "client/first")).ready() as first,
    ):
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        drain = first.notice(timeout=5)
        assert agent.control({"op": "ack", "notice_id": drain["id"], "client": "first"})["ok"]
        with Subscriber(agent.events, ("notice", "client/second")).ready() as second:
            assert second.notice(timeout=5)["id"] == drain["id"]  # replayed
            assert flag.exists(), "removed before the reconnecting client saved"
            ack = {"op": "ack", "notice_id": drain["id"], "client": "second"}
            assert agent.control(ack)["ok"]
            cleared = first.notice(timeout=10)
            while cleared["action"] == "drain":  # the replay to the second, seen by all
                cleared = first.notice(timeout=10)
            assert (cleared["action"], cleared["id"]) == ("clear", drain["id"])
            assert not flag.exists()


def test_a_flag_with_a_deadline_stays_in_force_after_the_flush_and_escalates(
    tmp_path: Path,
) -> None:
    # `echo 3s > checkpoint-now`: the machine goes in 3 s. Every client flushed for the drain
    # at once, the agent removed the file and cleared the notice: no terminate ever came at
    # the deadline, and the jobs trained on past their flush until the machine went, their
    # last steps saved nowhere. The file goes at the flush (a script waiting for it learns
    # every client saved), the notice stays until its deadline, sent as terminate within the
    # exit margin as any drain with a deadline is.
    agent = AgentProcess(tmp_path, args=("--set", "exit_margin=2s", "--set", "notice_grace=1s"))
    with agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("3s\n")
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["deadline"] is not None
        assert agent.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
        escalated = sub.notice(timeout=5)
        assert (escalated["id"], escalated["action"]) == (drain["id"], "terminate")
        assert escalated["deadline"] == drain["deadline"]
        # Retired once its deadline and grace have passed, as any notice with a deadline.
        retired = sub.notice(timeout=8)
        assert (retired["id"], retired["action"]) == (drain["id"], "clear")
        assert "expired" in retired["detail"]
        assert not flag.exists()


def test_a_flushed_flag_with_a_deadline_still_escalates_after_an_agent_restart(
    tmp_path: Path,
) -> None:
    # Its file removed at the flush, the restarted agent's local watcher found no file and
    # the agent withdrew the notice handed back from its state: the terminate never came.
    # The drain escalates 2 s after it is raised, and stays active 9 s: the restart must come
    # before its end, which a loaded node's stop and start once took past (4 s and 2 s).
    args = ("--set", "exit_margin=6s", "--set", "notice_grace=1s")
    first = AgentProcess(tmp_path, args=args)
    with first, first.subscriber() as sub:
        flag = Path(first.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("8s\n")
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain"
        assert first.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
    second = AgentProcess(tmp_path, args=args)
    with second, second.subscriber() as sub:
        seen = [sub.notice(timeout=10)]
        while seen[-1]["action"] == "drain":
            seen.append(sub.notice(timeout=5))
        assert [n["id"] for n in seen] == [drain["id"]] * len(seen)
        assert seen[-1]["action"] == "terminate", seen


def test_a_symlinked_flag_is_refused_with_a_line_that_says_what_to_do(tmp_path: Path) -> None:
    # `ln -s ~/request <runtime>/checkpoint-now`: no drain, and the agent's log said only
    # "is a symbolic link; not followed", while a guard reading the same path saved for it.
    # Both now refuse it and say that no drain is raised and what to write instead.
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        target = tmp_path / "request"
        target.write_text("10m\n")
        flag.symlink_to(target)
        line = (
            f"{flag}: is a symbolic link, not followed: no drain is raised; "
            "write the flag file itself (touch), not a link to one"
        )
        eventually(lambda: line in agent.output(), what="the refusal in the log")
        assert agent.control({"op": "status"})["active"] == []
        flag.unlink()
        flag.write_text("")
        drain = sub.notice(timeout=5)  # the first notice: nothing was raised for the link
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/")


def test_a_flag_written_with_a_byte_order_mark_and_crlf_keeps_its_deadline(
    tmp_path: Path,
) -> None:
    """A flag file from a Windows editor or PowerShell's `Set-Content -Encoding utf8` starts
    with a byte-order mark: "\\ufeff5m" was no deadline (one warning), and the drain went out
    without one, never escalated before the machine went."""
    agent = AgentProcess(tmp_path)
    with agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_bytes(b"\xef\xbb\xbf5m\r\n")
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["deadline"] is not None, drain
        assert "note" not in drain["detail"], drain
    assert "not a deadline" not in agent.output() and "not an RFC 3339" not in agent.output()


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64))
def test_a_flag_reads_the_same_with_or_without_a_byte_order_mark(
    tmp_path: Path, content: bytes
) -> None:
    """Any bytes: read as text, never an error; a leading byte-order mark changes nothing."""
    from forewarn.protocol.flagfile import read_flag

    flag = tmp_path / "checkpoint-now"
    flag.write_bytes(content)
    plain = read_flag(flag)
    flag.write_bytes(b"\xef\xbb\xbf" + content)
    marked = read_flag(flag)
    assert plain is not None and marked is not None
    if not content.startswith(b"\xef\xbb\xbf"):
        assert marked[1] == plain[1]
