"""The size of the Chinese catalogue: entries, and words per language.

Run: ``python benchmarks/catalogue_size.py``. Counts three kinds of text: the messages of
``doctor/i18n/zh_CN/*.toml``, the rules' titles and remediations (``checks/zh_CN/``), and the
playbooks (``playbooks/*.zh_CN.md``). English words are whitespace-separated tokens with a
letter; Chinese is counted in characters (汉字, the usual measure), and in words as the
tokens a reader sees: each run of CJK characters counted by characters / 1.5 (the mean
length of a Chinese word) plus its Latin tokens.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from doctor.i18n import entries  # noqa: E402
from doctor.rules.loader import builtin_files, load_rules  # noqa: E402
from doctor.vocabulary import CAUSES  # noqa: E402
from playbooks import PLAYBOOKS, TRANSLATED  # noqa: E402
from probes.registry import by_name  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN = re.compile(r"[A-Za-z][\w'.-]*")


def en_words(text: str) -> int:
    return len([w for w in text.split() if re.search(r"[A-Za-z]", w)])


def zh_counts(text: str) -> tuple[int, int]:
    chars = len(CJK.findall(text))
    latin = len(LATIN.findall(CJK.sub(" ", text)))
    return chars, round(chars / 1.5) + latin


def main() -> None:
    rows = []
    msgs = entries("zh_CN")
    rows.append(("messages (doctor/i18n/zh_CN)", len(msgs), " ".join(m["en"] for m in msgs),
                 " ".join(m["zh_CN"] for m in msgs)))
    rules = load_rules(builtin_files(), by_name())
    rows.append(("rules: title + remediation", 2 * len([r for r in rules if "zh_CN" in r.texts]),
                 " ".join(r.title + " " + r.remediation for r in rules),
                 " ".join(r.texts["zh_CN"].title + " " + r.texts["zh_CN"].remediation
                          for r in rules if "zh_CN" in r.texts)))
    books = [c for c in CAUSES if TRANSLATED[(c, "zh_CN")].is_file()]
    rows.append(("playbooks", len(books),
                 " ".join(PLAYBOOKS[c].read_text(encoding="utf-8") for c in books),
                 " ".join(TRANSLATED[(c, "zh_CN")].read_text(encoding="utf-8") for c in books)))
    print(f"{'catalogue':<32} {'entries':>8} {'en words':>9} {'zh 汉字':>8} {'zh words':>9}")
    total = [0, 0, 0, 0]
    for name, n, en, zh in rows:
        chars, words = zh_counts(zh)
        print(f"{name:<32} {n:>8,} {en_words(en):>9,} {chars:>9,} {words:>9,}")
        for i, v in enumerate((n, en_words(en), chars, words)):
            total[i] += v
    print(f"{'total':<32} {total[0]:>8,} {total[1]:>9,} {total[2]:>9,} {total[3]:>9,}")


if __name__ == "__main__":
    main()
