"""Fix plans: the exact change per finding, as data a person reads before anything runs.

``model`` holds the records (a plan, its steps and their actions), ``catalogue`` the one
builder per cause, ``script`` the renderings (POSIX shell, JSON, markdown) and ``apply``
the Python side of ``--apply`` and ``--revert``. The core layer: it reads a saved scan's
dict and knows no probe, renderer or command.
"""
