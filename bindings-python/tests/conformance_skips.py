"""Conformance cases this runner skips, each with its reason (conformance-tests/README.md,
"Skip policy"). Keys are case ids, optionally with " [sqlite]" / " [postgres]" /
" [mariadb]"."""

SKIPS: dict[str, str] = {}
