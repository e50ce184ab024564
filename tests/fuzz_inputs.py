"""Generated bad inputs for llm-doctor, and the checks every run on them must pass.

Three kinds of input, each derived from a real one by a named mutation:

* ``host``: a copy of a recorded host (tests/fixtures/hosts/*) with host.toml,
  measurements.json, nvml.json (copied from a two-GPU host where the source has none), a
  file under fs/ or a command's output made wrong: wrong types, deep nesting, huge integers,
  non-UTF-8 bytes, missing keys, truncation, garbage, FIFOs, symbolic links out of the
  directory or to themselves, dotted keys of thousands of parts, NVML entries of every wrong
  shape and device counts far past the devices recorded. Every copy also holds an engine
  process whose command line carries ``--api-key FUZZSECRET…`` and whose environ carries
  ``FUZZ_TOKEN=…``.
* ``rules``: checks/host.toml with a rule made wrong, expressions built to exhaust time
  or memory (``key=`` functions called per item among them), dotted keys of many parts, or
  durations of hundreds of digits.
* ``config``: a config file made wrong, those keys and durations included.

Run and checked by tests/fuzz_runs.py, for tests/test_fuzz.py (a bounded sample, in the
suite) and benchmarks/fuzz.py (the campaign of 10,000 inputs). Outside the copied directory lie files holding a unique marker:
a scan that reads outside the recorded host shows the marker (a malformed-file message
quotes what it read), and the check fails.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from doctor._toml import tomllib
from doctor.tomlfile import check_shape

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"
RULES = REPO / "checks" / "host.toml"
GPU_HOST = HOSTS / "rtx4090-2x-consumer"  # whose nvml.json a host without one is given
ENGINE_PID = 77001  # the planted engine process


# --------------------------------------------------------------------------- what lies outside


@dataclass
class Outside:
    """Files outside every input directory, holding markers no output may show."""

    root: Path
    marker: str  # in the files outside DIR
    secret: str  # planted --api-key value
    token: str  # planted FUZZ_TOKEN= value in an environ file
    env_value: str  # a value of this process's environment
    entries: list[Path] = field(default_factory=list)

    def reset(self) -> None:
        """Set every outside entry's access time to 1970; a read then moves it (the kernel
        updates an atime older than the mtime even under ``relatime``)."""
        if not self.entries:  # listing a directory moves its atime: list once, up front
            self.entries = [self.root, *self.root.rglob("*")]
        for path in self.entries:
            os.utime(path, ns=(0, path.stat().st_mtime_ns))

    def touched(self) -> list[str]:
        """The outside entries read or listed since ``reset``."""
        return [str(p.relative_to(self.root)) or "." for p in self.entries
                if p.stat().st_atime_ns != 0]

    @property
    def needles(self) -> dict[str, str]:
        return {"outside": self.marker, "secret": self.secret, "token": self.token,
                "environment": self.env_value}


def make_outside(base: Path, rng: random.Random) -> Outside:
    tag = f"{rng.getrandbits(64):016x}"
    out = Outside(base / "outside", f"FUZZSENTINEL{tag}", f"FUZZSECRET{tag}",
                  f"fuzztoken{tag}", f"FUZZENV{tag}")
    out.root.mkdir(parents=True, exist_ok=True)
    (out.root / "sentinel.txt").write_text(f"{out.marker} 1 2 3 4\n")
    top = [{"pid": 1, "comm": out.marker, "cmdline": out.marker, "cpu_cores": 1.0, "related": False}]
    (out.root / "sentinel.json").write_text(json.dumps({"host.cpu_load": {
        "window_s": 0.5, "logical_cpus": 2, "busy_cores": 1.0, "top": top}}))
    cpufreq = out.root / "cpu" / "cpu0" / "cpufreq"
    cpufreq.mkdir(parents=True, exist_ok=True)
    (cpufreq / "scaling_governor").write_text(out.marker + "\n")
    (out.root / "node" / f"node{tag}").mkdir(parents=True, exist_ok=True)
    os.environ["FUZZ_ENV_VALUE"] = out.env_value
    return out


# --------------------------------------------------------------------------- value mutations


def wrong_values(rng: random.Random) -> list[Any]:
    """Values of every wrong type a TOML or JSON document can hold."""
    return ["x", "", 5, -1, 0, 2**63, 2**64 - 1, -(2**63), 10**400, 1.5e308, float("inf"), True,
            [], {}, ["x"], [["x"]], [5], {"a": {"b": 1}},
            datetime.datetime(1979, 5, 27, 7, 32), datetime.date(2026, 1, 1),
            "\x1b]0;pwned\x07\x1b[2J", "{", "{0.__class__}", "x" * rng.choice((10**3, 10**5))]


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:20]):
            out += _paths(v, prefix + (i,))
    return out


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


def mutate_tree(doc: Any, rng: random.Random) -> tuple[Any, str]:
    """One key of a parsed document replaced by a wrong value, deleted, or nested deep."""
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return {"x": rng.choice(wrong_values(rng))}, "tree:replace-root"
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    op = rng.choice(("replace", "replace", "delete", "nest"))
    if op == "delete":
        del parent[key]
    elif op == "nest":
        parent[key] = _nest(parent[key], rng.choice((50, 300, 2000)))
    else:
        parent[key] = rng.choice(wrong_values(rng))
    return doc, f"tree:{op}:{'.'.join(map(str, path))[:60]}"


def dotted_key(rng: random.Random) -> bytes:
    """A TOML key or table header of many parts: tomllib's work grows with their square."""
    parts = rng.choice((9, 17, 40, 5000, 40000))
    form = rng.choice(("key", "header", "array", "inline", "quoted"))
    name = "a" + ".a" * (parts - 1)
    return {"key": f"{name} = 1", "header": f"[{name}]", "array": f"[[{name}]]",
            "inline": f"x = {{{name} = 1}}", "quoted": '"a".' * (parts - 1) + '"a" = 1'
            }[form].encode()


def mutate_bytes(data: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    """Raw damage: truncation, non-UTF-8, garbage, deep nesting, emptiness, hugeness, and
    for TOML dotted keys of many parts."""
    op = rng.choice(("truncate", "non-utf8", "garbage", "deep", "empty", "huge", "dup", "dotted"))
    if op == "dotted":
        if kind != "toml":
            return data + b"\n" + b"9" * rng.choice((21, 400, 5000)) + b"\n", "digits"
        at = data.rfind(b"\n", 0, rng.randrange(len(data) + 1)) + 1
        return data[:at] + dotted_key(rng) + b"\n" + data[at:], op
    if op == "truncate":
        return data[: rng.randrange(len(data) + 1)], op
    if op == "non-utf8":
        at = rng.randrange(len(data) + 1)
        return data[:at] + b"\xff\xfe\xc3(" + data[at:], op
    if op == "garbage":
        at = rng.randrange(len(data) + 1)
        return data[:at] + rng.randbytes(rng.randrange(1, 200)) + data[at:], op
    if op == "deep":
        n = rng.choice((200, 5000, 100000))
        if kind == "json":
            return b"[" * n + b"]" * n, op
        return data + b"\ndeep = " + b"[" * n + b"]" * n + b"\n", op
    if op == "empty":
        return b"", op
    if op == "huge":
        return data * max(1, (8 << 20) // max(len(data), 1)), op
    lines = data.split(b"\n")
    return b"\n".join(lines + lines), op


# --------------------------------------------------------------------------- recorded hosts


def copy_host(src: Path, dst: Path) -> None:
    """A copy whose fs/ files are hard links: every mutation below replaces, never edits."""
    def link_or_copy(s: str, d: str) -> None:
        if "/fs/" in s or "/commands/" in s:
            os.link(s, d)
        else:
            shutil.copy2(s, d)
    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)


def _replace(path: Path, data: bytes | None = None) -> None:
    """Remove ``path`` (file, link or tree) and, given data, write a new file there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):  # a file, a link (even a dangling one), a FIFO
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is not None:
        path.write_bytes(data)


# Files the probes read, preferred as targets over the thousands of /proc/<pid> files.
PROBED = ("proc/cpuinfo", "proc/meminfo", "proc/loadavg", "proc/self/limits", "proc/net/netstat",
          "proc/sys/fs/file-max", "proc/sys/net/core/somaxconn", "proc/sys/net/ipv4/tcp_rmem",
          "proc/sys/vm/swappiness", "sys/kernel/mm/transparent_hugepage/enabled",
          "proc/self/mountinfo", "proc/stat")


def _fs_target(root: Path, rng: random.Random) -> Path:
    fs = root / "fs"
    wanted = [fs / p for p in PROBED if (fs / p).exists()]
    if rng.random() < 0.6 and wanted:
        return rng.choice(wanted)
    files = [p for p in fs.rglob("*") if p.is_file() and not p.is_symlink()]
    return rng.choice(files) if files else fs / "proc" / "cpuinfo"


def plant_engine(root: Path, out: Outside) -> None:
    """An engine process with a secret on its command line and a token in its environ."""
    proc = root / "fs" / "proc" / str(ENGINE_PID)
    proc.mkdir(parents=True, exist_ok=True)
    argv = ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
            "/models/m", "--api-key", out.secret, "--port", "8000"]
    (proc / "cmdline").write_text("\0".join(argv) + "\0")
    (proc / "comm").write_text("python3\n")
    (proc / "environ").write_text(f"PATH=/usr/bin\0FUZZ_TOKEN={out.token}\0HOME=/root\0")
    limits = root / "fs" / "proc" / "self" / "limits"
    if limits.is_file():
        shutil.copy(limits, proc / "limits")


def _mutate_fs(root: Path, rng: random.Random, out: Outside) -> str:
    target = _fs_target(root, rng)
    rel = str(target.relative_to(root / "fs"))
    depth = len(target.relative_to(root).parts) - 1
    op = rng.choice(("bytes", "bytes", "absurd", "fifo", "link-out", "link-out-relative",
                     "link-self", "dir", "dir-link-out"))
    if op == "bytes":
        plain = target.is_file() and not target.is_symlink()
        data, how = mutate_bytes(target.read_bytes() if plain else b"", rng, "text")
        _replace(target, data)
        return f"fs:{how}:{rel}"
    if op == "absurd":
        word = rng.choice(("-1", str(2**64), str(10**30), "nan", "inf", "1e999", "0x10"))
        plain = target.is_file() and not target.is_symlink()
        text = target.read_text(errors="replace") if plain else ""
        _replace(target, "".join(word if c.isdigit() else c for c in text[:4096]).encode())
        return f"fs:absurd:{rel}"
    if op == "fifo":
        _replace(target)
        os.mkfifo(target)
    elif op == "link-out":
        _replace(target)
        target.symlink_to(out.root / "sentinel.txt")
    elif op == "link-out-relative":
        _replace(target)
        target.symlink_to("../" * depth + "../outside/sentinel.txt")
    elif op == "link-self":
        _replace(target)
        target.symlink_to(target.name)
    elif op == "dir":
        _replace(target)
        target.mkdir()
    else:
        which = rng.choice(("sys/devices/system/cpu", "sys/devices/system/node", "proc/self"))
        _replace(root / "fs" / which)
        (root / "fs" / which).symlink_to(out.root / which.rsplit("/", 1)[-1]
                                         if which != "proc/self" else out.root)
        rel = which
    return f"fs:{op}:{rel}"


def _mutate_manifest(root: Path, rng: random.Random, out: Outside) -> str:
    path = root / "host.toml"
    try:
        if not path.is_file() or path.is_symlink():
            raise ValueError("not a plain file")
        text = path.read_text()
        if check_shape(text):  # a key of thousands of parts: tomllib would take minutes
            raise ValueError("not a shape tomllib reads quickly")
        doc = tomllib.loads(text)
    except (ValueError, OSError, RecursionError):  # broken by an earlier mutation
        doc = None
    if doc is None or rng.random() < 0.5:
        plain = path.is_file() and not path.is_symlink()
        data, how = mutate_bytes(path.read_bytes() if plain else b"", rng, "toml")
        _replace(path, data)
        return f"host.toml:{how}"
    # an earlier mutation may have made "commands", or an entry of it, something else
    tables = [c for c in doc.get("commands") or [] if isinstance(c, dict)] \
        if isinstance(doc.get("commands"), list) else []
    if rng.random() < 0.25 and tables:
        cmd = rng.choice(tables)
        cmd["stdout_file"] = rng.choice((str(out.root / "sentinel.txt"),
                                         "../outside/sentinel.txt", "commands/../../outside/sentinel.txt",
                                         "/dev/zero", "fs", ""))
        how = "stdout_file-out"
    else:
        doc, how = mutate_tree(doc, rng)
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError, RecursionError):
        text = path.read_text() + "\nbroken = " + rng.choice(("[", "{", '"')) + "\n"
    _replace(path, text.encode())
    return f"host.toml:{how}"


def _mutate_measurements(root: Path, rng: random.Random, out: Outside) -> str:
    path = root / "measurements.json"
    op = rng.random()
    if op < 0.1:
        _replace(path)
        os.mkfifo(path)
        return "measurements.json:fifo"
    if op < 0.2:
        _replace(path)
        path.symlink_to(out.root / "sentinel.json")
        return "measurements.json:link-out"
    if op < 0.5:
        plain = path.is_file() and not path.is_symlink()
        data, how = mutate_bytes(path.read_bytes() if plain else b"", rng, "json")
        _replace(path, data)
        return f"measurements.json:{how}"
    try:
        if not path.is_file() or path.is_symlink():
            raise ValueError("not a plain file")
        doc, how = mutate_tree(json.loads(path.read_text()), rng)
    except (ValueError, OSError, RecursionError):  # broken by an earlier mutation
        _replace(path, b"{")
        return "measurements.json:truncate"
    try:
        text = json.dumps(doc, default=str)
    except (ValueError, RecursionError):
        text = "{"
    _replace(path, text.encode())
    return f"measurements.json:{how}"


def _mutate_command(root: Path, rng: random.Random, out: Outside) -> str:
    outs = sorted((root / "commands").glob("*")) if (root / "commands").is_dir() else []
    if not outs:
        return _mutate_fs(root, rng, out)
    target = rng.choice(outs)
    op = rng.choice(("fifo", "link-out", "bytes", "link-self"))
    if op == "bytes":  # never read a FIFO or a link an earlier mutation left there
        plain = target.is_file() and not target.is_symlink()
        data, how = mutate_bytes(target.read_bytes() if plain else b"", rng, "text")
        _replace(target, data)
        return f"command:{how}"
    _replace(target)
    if op == "fifo":
        os.mkfifo(target)
    elif op == "link-out":
        target.symlink_to(out.root / "sentinel.txt")
    else:
        target.symlink_to(target.name)
    return f"command:{op}"


NVML_ARGS = ([[0]], {"a": 1}, 5, [[[0]], 1], None, [True], [0.5], [10**30], ["0"], [2**62], [-1])
NVML_CALLS = (5, None, "", ["nvmlDeviceGetName"], {"x": 1}, "nvmlDeviceGetName", "x" * 10**5)
DEVICE_COUNTS = (3, 8, 65, 1000, 2**62, 2**64 - 1, 2**64, 10**400, 0, -1, "8", 2.0, None, True)


def _nvml_entries(path: Path) -> list | None:
    """The entries an earlier mutation left, when they are still a JSON list."""
    try:
        if path.is_file() and not path.is_symlink():
            entries = json.loads(path.read_text())
            return entries if isinstance(entries, list) and entries else None
    except (ValueError, OSError, RecursionError):
        pass
    return None


def _mutate_nvml(root: Path, rng: random.Random, out: Outside) -> str:
    """nvml.json with an entry of the wrong shape, a device count past what it holds, a
    value no NVML gives, or the file itself damaged; a host without one gets two GPUs."""
    path = root / "nvml.json"
    if not os.path.lexists(path):
        shutil.copy(GPU_HOST / "nvml.json", path)
    entries = _nvml_entries(path)
    op = rng.choice(("args", "call", "count", "count", "value", "tree", "bytes", "fifo", "link-out"))
    if op == "fifo":
        _replace(path)
        os.mkfifo(path)
        return "nvml.json:fifo"
    if op == "link-out":
        _replace(path)
        path.symlink_to(out.root / "sentinel.json")
        return "nvml.json:link-out"
    if entries is None or op == "bytes":
        plain = path.is_file() and not path.is_symlink()
        data, how = mutate_bytes(path.read_bytes() if plain else b"[]", rng, "json")
        _replace(path, data)
        return f"nvml.json:{how}"
    entry = rng.choice(entries)
    if op == "count":
        value = rng.choice(DEVICE_COUNTS)
        for e in entries:
            if isinstance(e, dict) and e.get("call") == "nvmlDeviceGetCount":
                e.pop("error", None)
                e["value"] = value
        how = f"count={str(value)[:20]}"
    elif op == "tree":
        entries, how = mutate_tree(entries, rng)
    elif not isinstance(entry, dict):
        how = "entry-not-a-table"
    elif op == "args":
        entry["args"] = rng.choice(NVML_ARGS)
        how = f"args={str(entry['args'])[:20]}"
    elif op == "call":
        entry["call"] = rng.choice(NVML_CALLS)
        how = f"call={str(entry['call'])[:20]}"
    else:
        entry.pop("error", None)
        entry["value"] = rng.choice((10**400, -(2**64), _nest(1, rng.choice((50, 900, 5000))),
                                     {"total": 10**30, "used": 1}, *wrong_values(rng)))
        how = "value"
    try:
        text = json.dumps(entries, default=str)  # wrong_values holds dates
    except (ValueError, RecursionError):
        text = "[" * 5000
    if rng.random() < 0.1:  # numbers json.dumps never writes
        text = text.replace(": 2", ": " + rng.choice(("1e999", "-1e999", "2" + "0" * 5000)), 1)
    _replace(path, text.encode())
    return f"nvml.json:{op}:{how}"


HOST_MUTATIONS: tuple[Callable[[Path, random.Random, Outside], str], ...] = (
    _mutate_fs, _mutate_fs, _mutate_fs, _mutate_manifest, _mutate_manifest,
    _mutate_measurements, _mutate_command, _mutate_nvml, _mutate_nvml,
)


def make_host(base: Path, source: Path, rng: random.Random, out: Outside) -> tuple[Path, str]:
    """A mutated copy of ``source`` under ``base``; returns it and the mutation's name."""
    root = base / f"{source.name}-{rng.getrandbits(32):08x}"
    copy_host(source, root)
    plant_engine(root, out)
    what = [rng.choice(HOST_MUTATIONS)(root, rng, out) for _ in range(rng.choice((1, 1, 2)))]
    return root, " + ".join(what)


# --------------------------------------------------------------------------- rule and config files


EXPRESSIONS = (  # evidence or conditions built to exhaust time or memory, or reach out
    "'\\t'.expandtabs(10**9)", "'x' * 10**10", "[[1] * 1000] * 1000", "[0] * 10**9",
    "(" * 300 + "1" + ")" * 300, "not " * 500 + "True", "1" + " + 1" * 5000,
    "10 ** 10 ** 10", "str(10 ** 100000)", "[x for x in range(10**9)]",
    "host.__class__.__init__.__globals__", "().__class__.__mro__[1].__subclasses__()",
    "__import__('os').environ", "open('/etc/passwd').read()",
    # one call that calls back per item, or walks its input, for longer than the limit
    "max('x' * 3999999, key=join)", "min('x' * 3999999, key=str)",
    "sorted('3141592653' * 399999)", "sorted('x' * 3999999, key=len)",
    "max(item.cmdline * 30000, key=join)", "join('x' * 3999999, '')",
    "len([('x' * 3999999).count('x') for i in [0] * 99999])",
    "any([('x' * 3999999).replace('x', 'y', 10 ** 9) for i in [0] * 99999])",
    "all(('x' * 3999999).startswith(c) for c in 'x' * 3999999)",
    "count({'x': 1}, 'x' * 3999999)", "[len][0]('x')",
)
DURATIONS = ("9" * 400 + "s", "9" * 400, "999999h", "315360001s", "1e400", "nan", "-1s", "1.5s",
             "0s", "90", "", " 5m ", "5 minutes", "x" * 10**5)
TITLES = ("{", "}", "{process", "{0}", "{process.__class__.__init__.__globals__}",
          "{params.__class__}", "{nofile_soft:{nofile_soft}}", "{nofile_soft!r:>999999999}",
          "{nofile_soft:>{width}}", "\x1b]0;pwned\x07")


def make_rules(base: Path, rng: random.Random, n: int) -> tuple[Path, str]:
    path = base / f"rules-{n}.toml"
    # Ids of their own, so that a scan can load the file beside the built-in rules.
    text = RULES.read_text().replace('\nid = "', '\nid = "fuzz-')
    op = rng.choice(("tree", "tree", "bytes", "expr", "expr", "title", "many", "fifo", "for",
                     "dotted"))
    if op == "fifo":
        os.mkfifo(path)
        return path, "rules:fifo"
    if op == "bytes":
        data, how = mutate_bytes(text.encode(), rng, "toml")
        path.write_bytes(data)
        return path, f"rules:{how}"
    if op == "dotted":
        at = text.find("\n[[rule]]", rng.randrange(len(text))) + 1
        data = text[:at] + dotted_key(rng).decode() + "\n" + text[at:]
        path.write_text(data)
        return path, "rules:dotted"
    if op == "many":
        n_rules = rng.choice((300, 3000))
        first = text.split("[[rule]]")[1]
        body = "".join("[[rule]]" + first.replace('id = "fuzz-fd-limit-low"', f'id = "fuzz-{i}"', 1)
                       for i in range(n_rules))
        path.write_text(body)
        return path, f"rules:many-{n_rules}"
    doc = tomllib.loads(text)
    rule = rng.choice(doc["rule"])
    if op == "expr":
        where = rng.choice(("when", "evidence"))
        expr = rng.choice(EXPRESSIONS)
        if where == "when":
            rule["when"] = expr
        else:
            rule.setdefault("evidence", {})["fuzz"] = expr
        how = f"expr:{where}:{expr[:30]}"
    elif op == "title":
        rule["title"] = rng.choice(TITLES)
        how = f"title:{rule['title'][:30]!r}"
    elif op == "for":
        rule["for"] = rng.choice((*DURATIONS, 10**400, 30, 1.5))
        how = f"for:{str(rule['for'])[:20]!r}"
    else:
        doc, how = mutate_tree(doc, rng)
    try:
        path.write_text(tomli_w.dumps(doc))
    except (TypeError, ValueError, RecursionError):
        path.write_text(text + "\n[[rule]\n")
    return path, f"rules:{how}"


CONFIG = """\
[scan]
level = "quick"
model_dirs = []
rule_files = []

[rules.fd-limit-low]
min_nofile = 131072
severity = "critical"
enabled = true

[rules.swap-active]
enabled = false
"""


def make_config(base: Path, rng: random.Random, n: int, out: Outside) -> tuple[Path, str]:
    path = base / f"config-{n}.toml"
    op = rng.choice(("tree", "tree", "bytes", "known", "fifo"))
    if op == "fifo":
        os.mkfifo(path)
        return path, "config:fifo"
    if op == "bytes":
        data, how = mutate_bytes(CONFIG.encode(), rng, "toml")
        path.write_bytes(data)
        return path, f"config:{how}"
    doc = tomllib.loads(CONFIG)
    if op == "known":
        key, value = rng.choice((("scan", 5), ("rules", 5), ("scan.rule_files", [5]),
                                 ("scan.model_dirs", [["x"]]), ("scan.level", "fast"),
                                 ("scan.rule_files", [str(out.root / "sentinel.txt")]),
                                 ("scan.rule_files", ["/dev/zero"]),
                                 ("rules.fd-limit-low.min_nofile", "x"),
                                 ("rules.fd-limit-low.severity", 5),
                                 ("rules.no-such-rule.x", 1),
                                 ("daemon.interval", rng.choice(DURATIONS)),
                                 ("daemon.kernel_interval", 10**400),
                                 ("daemon.history", float("inf")),
                                 ("daemon.for.cpu-contention", rng.choice(DURATIONS)),
                                 ("scan.level", "9" * 5000)))
        parts = key.split(".")
        parent = doc
        for k in parts[:-1]:
            parent = parent.setdefault(k, {}) if isinstance(parent, dict) else {}
        if isinstance(parent, dict):
            parent[parts[-1]] = value
        how = f"known:{key}={value!r}"[:80]
    else:
        doc, how = mutate_tree(doc, rng)
    try:
        path.write_text(tomli_w.dumps(doc))
    except (TypeError, ValueError, RecursionError):
        path.write_text(CONFIG + "\n[scan\n")
    return path, f"config:{how}"
