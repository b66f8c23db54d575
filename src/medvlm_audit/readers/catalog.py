"""The reader tasks of every registered suite, by task name (``Suite.reader_tasks()``), for the study store,
the app, export and analysis."""

from __future__ import annotations

from medvlm_audit.readers.tasks import ReaderTask, StudyError
from medvlm_audit.registry import did_you_mean

__all__ = ["reader_task", "reader_tasks", "task_suites"]


def _scan() -> tuple[dict[str, ReaderTask], dict[str, str]]:
    from medvlm_audit.suites import get_suite, suite_names

    out: dict[str, ReaderTask] = {}
    owner: dict[str, str] = {}
    for name in suite_names():
        for task in get_suite(name).reader_tasks():
            if task.name in out and out[task.name] is not task:
                raise StudyError(f"reader task {task.name!r} is declared by suites {owner[task.name]!r} and {name!r}")
            out[task.name] = task
            owner[task.name] = name
    return out, owner


def reader_tasks() -> dict[str, ReaderTask]:
    """Task name -> task, over the registered suites (in registry order); a name two suites declare is refused."""
    return _scan()[0]


def task_suites() -> dict[str, str]:
    """Task name -> the name of the suite that declares it."""
    return _scan()[1]


def reader_task(name: str, suite: str | None = None) -> ReaderTask:
    """The task called ``name``; a StudyError naming the known tasks otherwise. ``suite``: the suite recorded as
    declaring it (a study's or an export's), looked at first so that no other suite is loaded."""
    from medvlm_audit.suites import SUITES, get_suite

    if suite and suite in SUITES:
        for task in get_suite(suite).reader_tasks():
            if task.name == name:
                return task
    tasks = reader_tasks()
    if name not in tasks:
        raise StudyError(f"unknown task {name!r}{did_you_mean(name, tasks)}; known: {sorted(tasks)}")
    return tasks[name]
