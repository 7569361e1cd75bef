"""``manage.py ojs_relay [--database ALIAS] [relay options]`` is the core's relay command line
(issue 26): every argument Django does not know goes to the core's parser (the options of
``ojs-relay run``), which refuses an unknown flag naming the accepted ones (exit 2), prints the
same option list for ``--help`` as ``ojs-relay run --help``, and serves ``--listen`` with the
core's token rule (``crates/ojs-relay/src/http.rs``). Django's own options keep working. Real
processes, the test project's SQLite file, the session's ojs-devserver."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support import REPO, WAIT, drop_table, wait_until
from ojs_adapter_django import OJS

MANAGE = str(Path(__file__).with_name("manage.py"))
RUST_BIN = os.environ.get("OJS_RELAY_BIN") or str(REPO / "target/debug/ojs-relay")
DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OJS_URL", "OJS_DATABASE_URL", "OJS_RELAY_TOKEN")}
    env.update(extra)
    return env


def manage(*args, **env):
    return subprocess.run([sys.executable, MANAGE, "ojs_relay", *args], env=clean_env(**env),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT)


def long_options(help_text: str) -> list[str]:
    """The ``--long`` names of a clap help text's "Options:" section."""
    start = help_text.index("\nOptions:\n")
    section = help_text[start + len("\nOptions:\n"):].split("\n\n")[0]
    return sorted(set(re.findall(r"(?:^|[ ,])(--[a-z][a-z-]*)", section, re.M)))


def test_an_unknown_flag_is_refused_with_exit_2_naming_the_accepted_options():
    for args in (["--bogus-flag"], ["--verbosity", "2", "--bogus-flag"],
                 ["--database", "default", "--listen", "127.0.0.1:0", "--bogus-flag"]):
        done = manage(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "unexpected argument '--bogus-flag'" in done.stderr, done.stderr
        assert re.search(r"accepted options: .*--listen.*--token", done.stderr), done.stderr
        assert "Traceback" not in done.stderr


def test_help_lists_the_options_of_ojs_relay_run_and_djangos_own():
    django = manage("--help")
    assert django.returncode == 0, django.stderr
    rust = subprocess.run([RUST_BIN, "run", "--help"], env=clean_env(), capture_output=True,
                          text=True, timeout=WAIT)
    assert rust.returncode == 0, rust.stderr
    options = long_options(django.stdout)
    assert {"--listen", "--token", "--tenant-token", "--no-auth"} <= set(options), options
    assert options == long_options(rust.stdout)
    assert "Usage: manage.py ojs_relay [OPTIONS]" in django.stdout
    # Django's own options follow, and still work.
    assert "--database" in django.stdout and "--settings" in django.stdout
    with_settings = manage("--settings", "testproject.settings", "--help")
    assert with_settings.returncode == 0, with_settings.stderr
    assert long_options(with_settings.stdout) == options
    # `manage.py help ojs_relay` prints the same.
    helped = subprocess.run([sys.executable, MANAGE, "help", "ojs_relay"], env=clean_env(),
                            capture_output=True, text=True, timeout=WAIT)
    assert long_options(helped.stdout) == options, helped.stdout + helped.stderr


def test_a_bad_relay_option_value_is_a_typed_error_naming_the_flag_exit_2():
    done = manage("--poll-interval", "soon")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "[INVALID_CONFIG]" in done.stderr and "--poll-interval" in done.stderr, done.stderr
    done = manage("--listen", "127.0.0.1:0")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "--listen" in done.stderr and "--token" in done.stderr, done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@DB
def test_listen_with_a_token_serves_metrics_through_the_command(backend):
    table = "py_relay_command"
    adapter = OJS({"ojs_url": backend.url, "outbox": {"table_name": table},
                   "relay": {"mode": "external"}})
    drop_table("default", table)
    adapter.create_outbox_table("default")
    job_id = adapter.enqueue_after_commit("email.welcome", [1])
    port = free_port()
    relay = subprocess.Popen(
        [sys.executable, MANAGE, "ojs_relay", "--database", "default", "--poll-interval", "PT0.2S",
         "--listen", f"127.0.0.1:{port}", "--token", "T0ken"],
        env=clean_env(OJS_TEST_OJS_URL=backend.url, OJS_TEST_OUTBOX_TABLE=table),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def healthy():
            assert relay.poll() is None, relay.communicate()[0]
            try:
                return get(f"http://127.0.0.1:{port}/healthz") == 200
            except OSError:
                return False

        wait_until(healthy, what="the relay's /healthz")
        assert get(f"http://127.0.0.1:{port}/metrics") == 401
        assert get(f"http://127.0.0.1:{port}/metrics", "wrong") == 401
        assert get(f"http://127.0.0.1:{port}/metrics", "T0ken") == 200
        backend.wait_for([job_id])
    finally:
        relay.send_signal(signal.SIGTERM)
        output, _ = relay.communicate(timeout=WAIT)
        adapter.reset()
    assert relay.returncode == 0, output
    assert f"ojs_relay: relaying {table} of database 'default'" in output
    assert "ojs_relay: stopped" in output
