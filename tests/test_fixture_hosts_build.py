"""The recorded test hosts are built from their sources, one way for all
(tests/fixtures/build_all_hosts.py): every host in tests/fixtures/hosts/ is built or a real
capture, a base is built before what is copied from it, an overlay gives back the host it was
made from, and a build keeps the hand-kept README.md and expected.toml.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.conftest import FIXTURE_HOSTS
from tests.engine_pages import make_hosts
from tests.fixtures import build_all_hosts, build_diff_hosts, build_gdr_hosts, overlay
from tests.fixtures.build_all_hosts import tree


def test_every_host_is_built_or_a_real_capture_and_keeps_its_plain_files():
    built = [name for name, _ in build_all_hosts.steps()]
    assert len(built) == len(set(built))
    on_disk = {p.name for p in FIXTURE_HOSTS.iterdir() if p.is_dir()}
    assert on_disk == set(built) | set(build_all_hosts.CAPTURED)
    for name in on_disk:
        for plain in build_all_hosts.PLAIN:
            assert (FIXTURE_HOSTS / name / plain).is_file(), (name, plain)
        assert (FIXTURE_HOSTS / name / "host.toml").is_file(), name


def test_a_base_is_built_before_every_host_copied_from_it():
    order = [name for name, _ in build_all_hosts.steps()]
    parents = {**{n: s[0] for n, s in build_diff_hosts.STORIES.items()},
               **{n: "healthy-epyc-9654-vllm" for n in make_hosts.STORIES},
               **{n: overlay.base(n) for n in overlay.names() if overlay.base(n)},
               **{n: build_gdr_hosts.STORIES[n].base for n in build_gdr_hosts.BUILT}}
    for host, base in parents.items():
        assert order.index(base) < order.index(host), (base, host)


def test_the_session_built_the_hosts_of_these_sources():
    assert build_all_hosts._current(build_all_hosts.sources_digest())
    assert build_all_hosts.ensure_built() is False  # current: nothing to do


def test_a_build_whose_output_is_gone_is_not_current(tmp_path, monkeypatch):
    stamp = tmp_path / ".hosts-built"
    stamp.write_text("abc\n")
    monkeypatch.setattr(build_all_hosts, "STAMP", stamp)
    (tmp_path / "hosts/h").mkdir(parents=True)
    (tmp_path / "hosts/h/README.md").write_text("kept in git; the built files are gone")
    assert not build_all_hosts._current("abc", tmp_path / "hosts")
    (tmp_path / "hosts/h/host.toml").write_text("[host]\nformat = 2\n")
    assert build_all_hosts._current("abc", tmp_path / "hosts")
    assert not build_all_hosts._current("other sources", tmp_path / "hosts")


def test_the_digest_changes_with_a_source(tmp_path, monkeypatch):
    source = tmp_path / "builder.py"
    source.write_text("A = 1\n")
    monkeypatch.setattr(build_all_hosts, "OTHER_SOURCES", (*build_all_hosts.OTHER_SOURCES, source))
    monkeypatch.setattr(build_all_hosts, "REPO", Path("/"))
    before = build_all_hosts.sources_digest()
    source.write_text("A = 2\n")
    assert build_all_hosts.sources_digest() != before


def test_an_overlay_gives_back_the_host_it_was_made_from(tmp_path, monkeypatch):
    monkeypatch.setattr(overlay, "OVERLAYS", tmp_path / "overlays")
    (tmp_path / "overlays").mkdir()
    hosts = tmp_path / "hosts"
    base, host = hosts / "base", hosts / "host"
    for rel in ("a/x", "b/f", "d/gone", "same"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(rel)
    os.symlink("../devices/one", base / "l")
    os.symlink("kept", base / "k")
    (host / "a").mkdir(parents=True)
    (host / "a/x").write_text("changed")  # a file changed
    (host / "b").write_text("a file now")  # a directory became a file
    os.symlink("../devices/two", host / "l")  # a link retargeted
    os.symlink("kept", host / "k")
    (host / "same").write_text("same")
    (host / "new").mkdir()
    (host / "new/.keep").write_text("")  # an empty directory, as a capture keeps one
    (host / "README.md").write_text("hand-kept")  # not part of the overlay
    assert overlay.make("host", "base", hosts) == (4, 3)  # a/x, b, l, new/.keep; b, d, l
    assert not (tmp_path / "overlays/host/tree/README.md").exists()
    into = tmp_path / "built"
    shutil.copytree(base, into / "base", symlinks=True)
    overlay.apply("host", into)
    assert tree(into / "host", with_dirs=True) == tree(host, with_dirs=True)


def test_a_real_overlay_gives_back_its_host(tmp_path, monkeypatch):
    name = "contended-epyc-7543-batch-job"
    base = overlay.base(name)
    into = tmp_path / "built"
    shutil.copytree(FIXTURE_HOSTS / base, into / base, symlinks=True)
    overlay.apply(name, into)
    assert tree(into / name, with_dirs=True) == tree(FIXTURE_HOSTS / name, with_dirs=True)
    monkeypatch.setattr(overlay, "OVERLAYS", tmp_path / "overlays")
    (tmp_path / "overlays").mkdir()
    overlay.make(name, base, FIXTURE_HOSTS)
    assert (tree(tmp_path / "overlays" / name, with_dirs=True)
            == tree(overlay.Path(overlay.__file__).parent / "overlays" / name, with_dirs=True))


def test_placing_a_build_keeps_the_plain_files_and_drops_stale_ones(tmp_path):
    target, built = tmp_path / "hosts/h", tmp_path / "scratch/h"
    (target / "fs/proc").mkdir(parents=True)
    (target / "fs/proc/stale").write_text("from an older build")
    (target / "README.md").write_text("hand-kept")
    (target / "expected.toml").write_text('level = "quick"\n')
    (built / "fs/proc").mkdir(parents=True)
    (built / "fs/proc/meminfo").write_text("MemTotal: 1 kB\n")
    (built / "host.toml").write_text("[host]\nformat = 2\n")
    (built / "README.md").write_text("what the builder wrote")
    build_all_hosts._place(built, target)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
        "README.md", "expected.toml", "fs", "fs/proc", "fs/proc/meminfo", "host.toml"]
    assert (target / "README.md").read_text() == "hand-kept"
