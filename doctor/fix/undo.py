"""What undoes a command a plan ran, from the command's own shape: never from a journal.

The catalogue plans few commands, and each has a fixed undo: persistence mode on is undone
by persistence mode off for the same GPUs, a power limit by the old limit the plan saw, a
``systemctl daemon-reload`` by one more reload once the drop-ins are gone, and nvidia-ctk's
/dev/char links by nothing (they are what the driver should have made). The argv is
matched part by part, GPU ids and watts held to digits, and the undo is built here from
constants and those parts: a command of any other shape is not run, and has no undo.
"""

from __future__ import annotations

import re

from doctor.fix.catalogue import DEV_CHAR_LINKS

RELOAD = ("systemctl", "daemon-reload")
_IDS = re.compile(r"\d{1,3}(,\d{1,3}){0,63}")
_WATTS = re.compile(r"\d{1,4}(\.\d{1,3})?")


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def undo_of(argv: object, planned: object) -> tuple[str, ...] | None:
    """The undo of ``argv``: ``()`` when nothing needs undoing, ``RELOAD`` for a reload
    (run once at the end), None when ``argv`` is no command llm-doctor plans. ``planned``
    is the plan's own undo, read only for the old power limit, and only as digits."""
    cmd, old = _strings(argv), _strings(planned) or ()
    if cmd is None:
        return None
    if cmd == RELOAD:
        return RELOAD
    if cmd == DEV_CHAR_LINKS:
        return ()
    if len(cmd) != 5 or cmd[:2] != ("nvidia-smi", "-i") or not _IDS.fullmatch(cmd[2]):
        return None
    if cmd[3:] == ("-pm", "1"):
        return ("nvidia-smi", "-i", cmd[2], "-pm", "0")
    if cmd[3] == "-pl" and _WATTS.fullmatch(cmd[4]) and len(old) == 5 \
            and old[:4] == ("nvidia-smi", "-i", cmd[2], "-pl") and _WATTS.fullmatch(old[4]):
        return ("nvidia-smi", "-i", cmd[2], "-pl", old[4])
    return None
