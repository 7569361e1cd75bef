"""The relay's log records reach Python ``logging`` (the ``ojs_adapter_django.relay`` logger):
a pause when the backend cannot be reached (WARNING), a dead letter (ERROR, with its job id),
from the in-process relay and from ``manage.py ojs_relay``. Real relay, real ojs-devserver, a
real closed port; records are awaited with a deadline."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ojs_adapter_django import OJS
from support import WAIT, drop_table

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
LOGGER = "ojs_adapter_django.relay"
MANAGE = str(Path(__file__).with_name("manage.py"))


def closed_port_url() -> str:
    """A backend URL nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def adapter_for(url: str, alias: str, table: str, **relay) -> OJS:
    adapter = OJS({"ojs_url": url, "outbox": {"table_name": table, "poll_interval": "PT0.1S"},
                   "relay": {"initial_backoff": "PT0.05S", "max_backoff": "PT0.2S", **relay}})
    drop_table(alias, table)
    adapter.create_outbox_table(alias)
    return adapter


def wait_for_record(caplog, table, match, what):
    """The records of ``table``'s relay that ``match``, once there is one."""
    deadline = time.monotonic() + WAIT
    while True:
        found = [r for r in caplog.records
                 if r.name == LOGGER and getattr(r, "outbox_table", None) == table and match(r)]
        if found:
            return found
        if time.monotonic() > deadline:
            seen = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
            raise AssertionError(f"no {what} within {WAIT}s; logged: {seen}")
        time.sleep(0.02)


@DB
def test_a_pause_is_logged_as_a_warning_when_the_backend_is_unreachable(alias, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    table = f"py_log_pause_{alias}"
    adapter = adapter_for(closed_port_url(), alias, table)
    try:
        adapter.enqueue_after_commit("email.welcome", [1], using=alias)
        (record,) = wait_for_record(caplog, table, lambda r: r.levelno == logging.WARNING,
                                    "pause warning")
        assert "pausing" in record.getMessage(), record.getMessage()
        assert record.job_id is None
    finally:
        adapter.reset()


@DB
def test_a_dead_letter_is_logged_as_an_error_with_its_job_id(alias, backend, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    backend.call("POST", "/_dev/faults", {"status": 400, "code": "invalid_request",
                                           "match_type": "poison.job"})
    table = f"py_log_dead_{alias}"
    adapter = adapter_for(backend.url, alias, table)
    try:
        job_id = adapter.enqueue_after_commit("poison.job", [1], using=alias)
        (record,) = wait_for_record(caplog, table, lambda r: r.levelno == logging.ERROR,
                                    "dead letter")
        assert record.job_id == job_id
        assert job_id in record.getMessage() and "poison.job" in record.getMessage()
        assert "invalid_request" in record.getMessage()
        assert adapter.outbox_rows([job_id], using=alias)[job_id]["status"] == "dead"
    finally:
        backend.call("DELETE", "/_dev/faults")
        adapter.reset()


@DB
@pytest.mark.parametrize("logging_setting", ["LOGGING", "no LOGGING"])
def test_ojs_relay_prints_the_pause_while_it_runs(logging_setting, tmp_path):
    """``manage.py ojs_relay`` against a closed port with a committed row: the pause line comes
    out while the command runs, through the project's handler (LOGGING of the test project) or,
    without one, on stderr by the command itself."""
    table = "py_log_cli"
    staging = adapter_for("http://127.0.0.1:9", "default", table, mode="external")
    staging.enqueue_after_commit("email.welcome", [1])
    env = {**os.environ, "OJS_TEST_OJS_URL": closed_port_url(), "OJS_TEST_OUTBOX_TABLE": table}
    if logging_setting == "no LOGGING":
        env["OJS_TEST_NO_LOGGING"] = "1"
    with open(tmp_path / "stderr", "w+") as stderr:
        relay = subprocess.Popen([sys.executable, MANAGE, "ojs_relay"], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                 text=True)
        try:
            deadline = time.monotonic() + WAIT
            while "outbox relay: pausing" not in (lines := (tmp_path / "stderr").read_text()):
                assert relay.poll() is None, f"ojs_relay exited: {lines}"
                assert time.monotonic() < deadline, f"no pause line within {WAIT}s: {lines}"
                time.sleep(0.02)
        finally:
            relay.send_signal(signal.SIGTERM)
            output, _ = relay.communicate(timeout=WAIT)
    assert relay.returncode == 0, (output, lines)
    assert "ojs_relay: relaying py_log_cli" in output
    assert "ojs_relay: stopped" in output
    pause = next(line for line in lines.splitlines() if "outbox relay: pausing" in line)
    if logging_setting == "no LOGGING":
        assert pause.startswith("ojs_relay: WARNING outbox relay: pausing"), pause
    else:
        assert pause.startswith("outbox relay: pausing"), pause
