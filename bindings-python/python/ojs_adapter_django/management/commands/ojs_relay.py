"""``manage.py ojs_relay [--database ALIAS] [relay options]``: runs the standalone relay (the
same Rust engine and command line as ``ojs-relay run``) in the foreground until SIGINT or
SIGTERM, then stops gracefully and exits 0. Use it with
``OJS_CONFIG = {..., "relay": {"mode": "external"}}`` so web processes run none.

The relay options (``--listen ADDR`` with ``--token``/``OJS_RELAY_TOKEN``, ``--tenant-token``
or ``--no-auth``, ``--poll-interval``, ``--batch-size``, ...) are the core's: this command
hands every argument Django does not know to the core's parser (``_native.RelayCommand``),
which refuses an unknown one naming the accepted ones (exit 2) and prints the option list for
``--help``. The base of the settings is Django's (``OJS_CONFIG`` with the alias's database);
the flags override it.

A process manager (systemd, Kubernetes) may send SIGTERM at any moment, also while the command
is still starting. The core's stop-signal handlers are therefore armed before anything else of
this command runs (Django's system checks, the configuration, the ready line): a signal from
then on is remembered and the relay, once it runs, stops at once. What remains outside is
Python's and Django's own start-up before this command's code is reached (``django.setup()``,
loading the command); a SIGTERM there still has its default effect."""

import argparse
import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from ojs_adapter_django import _native, relay_log
from ojs_adapter_django.facade import ojs
from ojs_adapter_django.errors import OJSError, from_native


class Command(BaseCommand):
    help = ("Run the OJS outbox relay until SIGINT/SIGTERM. The relay options are those of "
            "`ojs-relay run`.")
    #: The relay's arguments, for call_command("ojs_relay", relay_args=[...]).
    stealth_options = ("relay_args",)

    def create_parser(self, prog_name, subcommand, **kwargs):
        # `--help` is the core's (its option list), and no relay flag may be taken for an
        # abbreviation of one of Django's.
        kwargs.setdefault("add_help", False)
        kwargs.setdefault("allow_abbrev", False)
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        self._program = f"{os.path.basename(prog_name)} {subcommand}"
        self._parser = parser

        def parse_args(args=None, namespace=None):
            # Django's options here, every other argument (in order) to the core's parser.
            options, relay_args = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
            options.relay_args = relay_args
            return options

        parser.parse_args = parse_args
        parser.print_help = lambda file=None: self._print_core_help(file)
        return parser

    def add_arguments(self, parser):
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="Django database alias whose outbox to relay.")

    def _django_options(self) -> str:
        """Django's own options of this command, formatted by argparse, for after the core's
        option list in ``--help``."""
        parser = self._parser
        formatter = parser._get_formatter()
        formatter.start_section("Django options of this command")
        formatter.add_arguments([action for action in parser._actions if action.option_strings])
        formatter.end_section()
        return formatter.format_help().rstrip("\n")

    def _print_core_help(self, file=None) -> None:
        # `manage.py help ojs_relay`: the core's help needs no settings.
        framework = {"program": self._program, "after_help": self._django_options()}
        exit = _native.RelayCommand(["--help"], json.dumps(framework)).exit()
        (file or sys.stdout).write(exit[1])

    def execute(self, *args, **options):
        # First thing, before the system checks and handle() (manage.py and call_command both
        # come through here).
        try:
            _native.arm_stop_signals()
        except _native.NativeError as native:
            error = from_native(native)
            raise CommandError(f"[{error.code}] {error}") from None
        try:
            return super().execute(*args, **options)
        except KeyboardInterrupt:
            # SIGINT: Python's own handler runs after the core's and raises this wherever the
            # interpreter is at that moment; the relay (if it ran) has stopped gracefully.
            return None

    def handle(self, *args, **options):
        alias = options["database"]
        try:
            command = ojs.relay_command(options.get("relay_args") or [], using=alias,
                                        program=getattr(self, "_program", "manage.py ojs_relay"),
                                        after_help=self._django_options())
            exit = command.exit()
            if exit is not None:
                # --help, --version, or a usage error (exit 2): the core's words as they are.
                code, out, err = exit
                self.stdout.write(out, ending="")
                self.stdout.flush()
                stderr = getattr(self.stderr, "_out", sys.stderr)
                stderr.write(err)
                stderr.flush()
                if code:
                    raise SystemExit(code)
                return
            table = self._call(command.table)
        except OJSError as exc:
            raise CommandError(f"[{exc.code}] {exc}",
                               returncode=_native.relay_exit_code(exc.code)) from exc
        self.stdout.write(f"ojs_relay: relaying {table} of database {alias!r}; "
                          "SIGINT or SIGTERM stops it")
        self.stdout.flush()
        # The relay's records (its start line, the --listen address, pauses, resumes, dead
        # letters) go to the "ojs_adapter_django.relay" logger; without a handler for it in
        # LOGGING they are printed on stderr too (the command's stderr stream itself: its
        # OutputWrapper would style every line as an error).
        with relay_log.console("ojs_relay", getattr(self.stderr, "_out", None)):
            relay_log.start()
            try:
                self._call(command.run_until_signal)
            except OJSError as exc:
                raise CommandError(f"[{exc.code}] {exc}",
                                   returncode=_native.relay_exit_code(exc.code)) from exc
            finally:
                relay_log.forward()
        self.stdout.write("ojs_relay: stopped")

    @staticmethod
    def _call(method):
        try:
            return method()
        except _native.NativeError as native:
            raise from_native(native) from None
