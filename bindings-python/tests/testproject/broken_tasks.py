"""A module that raises while it is imported: a job naming a task in it cannot be run now."""

raise RuntimeError("broken_tasks cannot be imported")
