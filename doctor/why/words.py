"""What a user may type for a symptom: its id, its words in either language, the seed
articles' own words (../shared/domain.md §1), or a plain word from PLAIN_WORDS.

A word that names several rows is ambiguous: ``Ambiguous`` lists them, and the command exits
3 with the choices. Matching ignores case, spaces, hyphens and underscores.
"""

from __future__ import annotations

import re

from doctor.i18n import Speaking
from doctor.vocabulary import SYMPTOMS, symptom_words

# The articles' words for each row, as domain.md §1 quotes them (its "the article's words"
# column): several rows have two phrasings in the seeds.
ARTICLE_WORDS: dict[str, tuple[str, ...]] = {
    "startup-oom": ("启动时OOM", "模型加载时报显存不足"),
    "slow-first-token": ("首个token延迟过高",),
    "queueing-under-load": ("并发一高就排队", "队列调度不合理"),
    "stream-cutoff": ("生成中途断流",),
    "multi-gpu-imbalance": ("多卡负载不均衡",),
    "garbled-output": ("输出结果字母乱码或重复", "输出发散"),
    "slowdown": ("推理速度突然变慢", "越跑越慢"),
    "crash-under-concurrency": ("并发请求一多就崩溃",),
    "low-gpu-utilization": ("计算单元利用率低",),
    "memory-bandwidth-bound": ("显存带宽不足",),
    "kernel-fragmentation": ("算子零散",),
    "multi-gpu-slower-than-one": ("多卡性能还不如单卡",),
}

# Plain words an operator types, each to the rows it can mean (docs/why.md lists them). One
# row: resolved; several: the choices are listed. Unambiguous on purpose where the articles
# are: "slow" is the slowdown row (推理速度突然变慢), the first token has its own words.
PLAIN_WORDS: dict[str, tuple[str, ...]] = {
    "slow": ("slowdown",),
    "slower": ("slowdown",),
    "oom": ("startup-oom",),
    "queue": ("queueing-under-load",),
    "queueing": ("queueing-under-load",),
    "ttft": ("slow-first-token",),
    "first-token": ("slow-first-token",),
    "crash": ("crash-under-concurrency",),
    "cutoff": ("stream-cutoff",),
    "garbled": ("garbled-output",),
    "repetition": ("garbled-output",),
    "imbalance": ("multi-gpu-imbalance",),
    "utilization": ("low-gpu-utilization",),
    "util": ("low-gpu-utilization",),
    "bandwidth": ("memory-bandwidth-bound",),
    "kernels": ("kernel-fragmentation",),
    "latency": ("slow-first-token", "slowdown", "queueing-under-load"),
    "memory": ("startup-oom", "crash-under-concurrency", "memory-bandwidth-bound"),
    "multi-gpu": ("multi-gpu-imbalance", "multi-gpu-slower-than-one"),
    "gpus": ("multi-gpu-imbalance", "multi-gpu-slower-than-one", "low-gpu-utilization"),
    "concurrency": ("queueing-under-load", "crash-under-concurrency"),
    "慢": ("slow-first-token", "slowdown"),
    "排队": ("queueing-under-load",),
    "崩溃": ("crash-under-concurrency",),
    "乱码": ("garbled-output",),
    "断流": ("stream-cutoff",),
}

MAX_WORD_CHARS = 200


class Ambiguous(ValueError):
    """The word names several rows (``choices``), or none (``choices`` the closest or all)."""

    def __init__(self, word: str, choices: tuple[str, ...], unknown: bool) -> None:
        super().__init__(word)
        self.word, self.choices, self.unknown = word, choices, unknown


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).casefold()


def _names() -> dict[str, set[str]]:
    """Every normalised name → the rows it names."""
    out: dict[str, set[str]] = {}
    for symptom in SYMPTOMS:
        words = [symptom, *ARTICLE_WORDS.get(symptom, ())]
        for lang in ("en", "zh_CN"):
            with Speaking(lang):
                words.append(symptom_words(symptom))
        for word in words:
            out.setdefault(_norm(word), set()).add(symptom)
    for word, rows in PLAIN_WORDS.items():
        out.setdefault(_norm(word), set()).update(rows)
    return out


def resolve(word: str) -> str:
    """The symptom id ``word`` names; raises Ambiguous with the choices otherwise."""
    key = _norm(str(word)[:MAX_WORD_CHARS])
    names = _names()
    rows = names.get(key)
    if rows is None and key:
        # a part of a name ("首个token", "multi"): the rows whose names hold it
        rows = {r for name, found in names.items() if key in name for r in found}
    if rows is not None and len(rows) == 1:
        return next(iter(rows))
    if rows:
        return _raise(word, rows, unknown=False)
    return _raise(word, set(SYMPTOMS), unknown=True)


def _raise(word: str, rows: set[str], unknown: bool) -> str:
    raise Ambiguous(str(word)[:MAX_WORD_CHARS], tuple(s for s in SYMPTOMS if s in rows), unknown)
