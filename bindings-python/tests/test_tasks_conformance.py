"""The conformance cases that make sense for a task, run through ``task.enqueue()`` on the
Django Tasks backend (``ojs_adapter_django.tasks.OJSBackend``) instead of
``ojs.enqueue_after_commit``: the conformance runner of test_conformance.py, unchanged, with its
staging steps swapped (a subclass of its ``Run``).

- ``enqueue_after_commit``: ``<task>.using(queue_name=..., priority=..., run_after=...)
  .enqueue(*args)``, where ``<task>`` is a module-level task of this module standing for the
  case's job type (``email.welcome`` -> ``test_tasks_conformance.case_email__welcome``).
- ``enqueue_bulk``: the same, one ``enqueue`` per job in a loop, in the same transaction.
- ``expect_backend``'s job fields: the task's job type and args
  (``[{"args": [...], "kwargs": {}}]``, docs/django-tasks.md) for the case's.

A case is run when every step can be said with a task: every FA case (and the invalid-queue
case) whose staging steps use only ``type``, positional ``args``, and the options ``queue``,
``priority`` and ``delay_until``; ``NOT_FOR_TASKS`` says why the others are not. The RELAY-*
cases test the relay, which does not know how a row was staged; they run in test_conformance.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from django.test import override_settings

import test_conformance as conformance
from ojs_adapter_django import OJSError

try:  # one code path, as the backend has: Django 6's framework, else the backport
    from django.tasks import task
except ImportError:
    from django_tasks import task

#: The options of a staging step that a task can carry, and how.
TASK_OPTIONS = {"queue": "queue_name", "priority": "priority", "delay_until": "run_after"}
#: The expected errors a task can cause: a queue_name breaking the OJS rule. (A job type comes
#: from the import path; args are always a list; Django refuses a bad priority itself.)
TASK_ERRORS = {None, "INVALID_QUEUE"}
#: The cases run besides the FA ones.
ALSO = {"RELAY-validation-invalid-queue-stages-nothing"}

NOT_FOR_TASKS = {
    "FA-001-immediate-enqueue-skips-the-outbox": "`enqueue` sends now, without the outbox; "
        "task.enqueue always stages",
    "FA-001-job-fields-reach-backend-unchanged": "options timeout_ms and tags: a Task has no "
        "such field (test_tasks.py checks the fields a task has)",
    "FA-R001-clear-context-stops-injection": "`enqueue` sends now, without the outbox",
    "FA-R001-request-context-lands-in-job-meta": "`enqueue` sends now, without the outbox",
}


def _job_steps(case: dict) -> list[dict]:
    """The jobs a case stages, each as a step of its own."""
    jobs = []
    for step in case["steps"]:
        if step["op"] == "enqueue_after_commit":
            jobs.append(step)
        elif step["op"] == "enqueue_bulk":
            jobs.extend({**job, "expect_error": step.get("expect_error")}
                        for job in step.get("jobs", []))
            if "generate" in step:
                jobs.append({"type": step["generate"]["type"], "args": [0]})
    return jobs


def expressible(case: dict) -> bool:
    if any(step["op"] == "enqueue" for step in case["steps"]):
        return False
    for job in _job_steps(case):
        if set(job) - {"op", "ref", "type", "args", "options", "expect_error"}:
            return False
        if not isinstance(job.get("args"), list) or job.get("expect_error") not in TASK_ERRORS:
            return False
        if set(job.get("options") or {}) - set(TASK_OPTIONS):
            return False
    return True


CASES = [case for case in conformance.CASES
         if (case["id"].startswith("FA-") or case["id"] in ALSO) and expressible(case)]
for _case in conformance.CASES:
    if _case["id"].startswith("FA-") and _case not in CASES and _case["id"] not in NOT_FOR_TASKS:
        raise RuntimeError(f"{_case['id']} cannot be run through a task: say why in NOT_FOR_TASKS")


def _task_name(job_type: str) -> str:
    return "case_" + re.sub(r"[^a-z0-9_]", "_", job_type.replace(".", "__"))


def _define_task(job_type: str) -> Any:
    """A module-level task of this module standing for ``job_type``: a worker finds it by the
    job type, ``import_string("test_tasks_conformance.case_...")``."""
    name = _task_name(job_type)
    if name not in globals():
        def run(*args: Any, **kwargs: Any) -> None:
            return None

        run.__name__ = run.__qualname__ = name
        run.__module__ = __name__
        globals()[name] = task(run)
    return globals()[name]


_TYPES = sorted({job["type"] for case in CASES for job in _job_steps(case)})
if len({_task_name(job_type) for job_type in _TYPES}) != len(_TYPES):
    raise RuntimeError("two job types of the cases map to one task name")
for _job_type in _TYPES:
    _define_task(_job_type)


def job_type_of(case_type: str) -> str:
    return f"{__name__}.{_task_name(case_type)}"


class TaskRun(conformance.Run):
    """The runner with ``task.enqueue()`` in place of the adapter's staging calls; the Django
    task backend "default" is the OJS backend on the case's database, staging through the
    case's adapter (``OPTIONS["ADAPTER"]``: its configuration and outbox table)."""

    def execute(self) -> None:
        setting = {"default": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "QUEUES": [],
                               "OPTIONS": {"DATABASE": self.alias, "ADAPTER": self.ojs}}}
        with override_settings(TASKS=setting):
            super().execute()

    def stage(self, step: dict, bulk: bool) -> None:
        if bulk and "generate" in step:
            generate = step["generate"]
            jobs = [(f"{generate['ref_prefix']}{i}", {"type": generate["type"], "args": [i]})
                    for i in range(generate["count"])]
        elif bulk:
            jobs = [(job.get("ref"), job) for job in step["jobs"]]
        else:
            jobs = [(step.get("ref"), step)]
        for ref, job in jobs:
            error, result = None, None
            try:
                result = self.enqueue_task(job)
            except OJSError as exc:
                error = exc
            if self.check_error(step, error):
                continue
            if ref:
                self.refs[ref] = result.id
        if not self.atomics:
            self.last_commit_us = conformance.now_us()

    def enqueue_task(self, job: dict) -> Any:
        changes = {}
        for option, value in (job.get("options") or {}).items():
            if option == "delay_until":
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            changes[TASK_OPTIONS[option]] = value
        chosen = _define_task(job["type"])
        if changes:
            chosen = chosen.using(**changes)
        return chosen.enqueue(*job["args"])

    def expect_backend(self, step: dict) -> None:
        jobs = step.get("jobs")
        if jobs:
            step = {**step, "jobs": {ref: self.as_task_job(fields) for ref, fields in jobs.items()}}
        super().expect_backend(step)

    @staticmethod
    def as_task_job(fields: dict) -> dict:
        fields = dict(fields)
        if "type" in fields:
            fields["type"] = job_type_of(fields["type"])
        if "args" in fields:
            fields["args"] = [{"args": fields["args"], "kwargs": {}}]
        return fields


@pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
@pytest.mark.parametrize("database", list(conformance.DATABASES))
@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_task_case(case: dict, database: str, backend: Any) -> None:
    TaskRun(case, conformance.DATABASES[database], backend).execute()
