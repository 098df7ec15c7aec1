#!/usr/bin/env python3
"""Every dependency CMake looks for has a row in benchmarks/debs.txt, and
every package of those rows is in the list benchmarks/collect-debs.sh carries
(`collect-debs.sh --list`), so that gpu_check.sh's build from .debs/ alone
finds what configure asks for.

Reads each find_package, find_library, find_path, find_program,
pkg_check_modules and pkg_search_module call of the tracked CMakeLists.txt
and *.cmake files (comments stripped, calls over several lines joined), and
fails naming file:line and the requirement when:
  - it has no row in the table;
  - its row carries nothing ("-") without saying why;
  - a package of its row is missing from collect-debs.sh's list.
A row that matches no call (other than a tool(...) row) fails too: the table
says what CMake asks for today, nothing else.

Run by scripts/test.sh, then again with --self-test, which shows the check
fails when any one carried row is removed, when a CMakeLists.txt gains a
requirement, and when collect-debs.sh drops a package.
Usage: scripts/check-debs-list.py [--self-test]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = "benchmarks/debs.txt"
CALLS = ("find_package", "find_library", "find_path", "find_program", "pkg_check_modules", "pkg_search_module")
# Keywords that end a find_* NAMES list or that pkg_check_modules takes before its modules.
FIND_KEYWORDS = {"NAMES", "HINTS", "PATHS", "PATH_SUFFIXES", "DOC", "REQUIRED", "NO_DEFAULT_PATH", "NO_CACHE",
                 "NAMES_PER_DIR", "ENV", "REGISTRY_VIEW", "VALIDATOR", "NO_PACKAGE_ROOT_PATH", "NO_CMAKE_PATH",
                 "NO_CMAKE_ENVIRONMENT_PATH", "NO_SYSTEM_ENVIRONMENT_PATH", "NO_CMAKE_SYSTEM_PATH",
                 "CMAKE_FIND_ROOT_PATH_BOTH", "ONLY_CMAKE_FIND_ROOT_PATH", "NO_CMAKE_FIND_ROOT_PATH",
                 "NO_CMAKE_INSTALL_PREFIX"}
PKG_KEYWORDS = {"REQUIRED", "QUIET", "NO_CMAKE_PATH", "NO_CMAKE_ENVIRONMENT_PATH", "IMPORTED_TARGET", "GLOBAL"}


def cmake_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "*CMakeLists.txt", "*.cmake"], capture_output=True,
                         text=True, check=True).stdout.split()
    return {f: open(os.path.join(ROOT, f), encoding="utf-8").read() for f in out}


def strip_comments(text):
    """Line comments gone, line numbers kept (no CMake here puts '#' in a string)."""
    return "\n".join(line.split("#", 1)[0] for line in text.split("\n"))


def requirements(files):
    """[(file:line, "call(name)")] for every lookup call; names that are not literal are errors."""
    reqs, errors = [], []
    pat = re.compile(r"\b(" + "|".join(CALLS) + r")\s*\(([^()]*)\)", re.S)
    for path, text in sorted(files.items()):
        text = strip_comments(text)
        for m in pat.finditer(text):
            where = f"{path}:{text.count(chr(10), 0, m.start()) + 1}"
            call, args = m.group(1), m.group(2).split()
            if call == "find_package":
                names = args[:1]
            elif call.startswith("pkg_"):
                names = [re.split(r"[<>=]", a)[0] for a in args[1:] if a not in PKG_KEYWORDS]
            elif len(args) > 1 and args[1] == "NAMES":
                names = [args[2]] if len(args) > 2 else []
            else:
                names = args[1:2]
            if not names or any("${" in n or n in FIND_KEYWORDS for n in names):
                errors.append(f"{where}: {call}({' '.join(args)}): cannot read what it looks for")
                continue
            reqs += [(where, f"{call}({n})") for n in names]
    return reqs, errors


def parse_table(text):
    """{requirement: (packages, why)}, and the errors of malformed rows."""
    rows, errors = {}, []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cols = [c.strip() for c in line.split("|")]
        if len(cols) != 3 or not cols[0] or not cols[1]:
            errors.append(f"{TABLE}:{n}: want 'REQUIREMENT | PACKAGES | WHY', got: {line}")
            continue
        pkgs = [] if cols[1] == "-" else cols[1].split()
        rows[re.sub(r"\s+", "", cols[0])] = (pkgs, cols[2])
    return rows, errors


def check(files, table_text, carried):
    reqs, errors = requirements(files)
    rows, terr = parse_table(table_text)
    errors += terr
    used = set()
    for where, req in reqs:
        used.add(req)
        if req not in rows:
            errors.append(f"{where}: {req} has no row in {TABLE} (add it with the Debian packages that carry it, "
                          f"or '-' and why nothing is carried)")
            continue
        pkgs, why = rows[req]
        if not pkgs and not why:
            errors.append(f"{where}: {req}: its row in {TABLE} carries nothing and does not say why")
        missing = [p for p in pkgs if p not in carried]
        if missing:
            errors.append(f"{where}: {req}: {' '.join(missing)} not in benchmarks/collect-debs.sh's list")
    for req, (pkgs, _) in rows.items():
        if req not in used and not req.startswith("tool("):
            errors.append(f"{TABLE}: row {req} matches no lookup in the CMakeLists.txt files: remove it")
        elif req.startswith("tool("):
            errors += [f"{TABLE}: {req}: {p} not in benchmarks/collect-debs.sh's list" for p in pkgs
                       if p not in carried]
    return reqs, errors


def collect_list():
    r = subprocess.run(["bash", os.path.join(ROOT, "benchmarks/collect-debs.sh"), "--list"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit(f"check-debs-list: benchmarks/collect-debs.sh --list failed: {r.stderr.strip()}")
    return set(r.stdout.split())


def self_test(files, table_text, carried):
    fails = 0

    def expect_fail(what, f, t, c, needle):
        nonlocal fails
        _, errors = check(f, t, c)
        if not any(needle in e for e in errors):
            print(f"check-debs-list: self-test FAILED: {what} was not caught (errors: {errors})")
            fails += 1

    lines = table_text.split("\n")
    n_rows = 0
    for i, line in enumerate(lines):
        body = line.split("#", 1)[0]
        if "|" not in body or body.split("|")[1].strip() == "-":
            continue
        req = re.sub(r"\s+", "", body.split("|")[0])
        if req.startswith("tool("):  # no CMake call; its packages are checked as the "make" case below
            continue
        n_rows += 1
        cut = "\n".join(lines[:i] + lines[i + 1:])
        expect_fail(f"removing the row {req}", files, cut, carried, f"{req} has no row")
    extra = dict(files)
    extra["CMakeLists.txt"] = files["CMakeLists.txt"] + "\nfind_library(ZO_SELFTEST_LIB\n  zzselftest REQUIRED)\n"
    expect_fail("a new find_library over two lines", extra, table_text, carried, "find_library(zzselftest)")
    extra["CMakeLists.txt"] = files["CMakeLists.txt"] + "\npkg_check_modules(X REQUIRED IMPORTED_TARGET zzpc>=1)\n"
    expect_fail("a new pkg_check_modules", extra, table_text, carried, "pkg_check_modules(zzpc)")
    for p in ("libdnnl2", "ocl-icd-libopencl1", "libprotoc32", "make"):
        expect_fail(f"collect-debs.sh without {p}", files, table_text, carried - {p}, p)
    if fails:
        sys.exit(1)
    print(f"check-debs-list: self-test ok ({n_rows} carried rows removed one at a time, a new find_library and "
          f"pkg_check_modules, 4 packages dropped from collect-debs.sh: each caught)")


def main():
    files = cmake_files()
    table_text = open(os.path.join(ROOT, TABLE), encoding="utf-8").read()
    carried = collect_list()
    reqs, errors = check(files, table_text, carried)
    if errors:
        print("\n".join(f"check-debs-list: {e}" for e in errors))
        sys.exit(1)
    if sys.argv[1:] == ["--self-test"]:
        self_test(files, table_text, carried)
        return
    if sys.argv[1:]:
        sys.exit("usage: scripts/check-debs-list.py [--self-test]")
    print(f"check-debs-list: ok ({len(reqs)} lookups in the CMakeLists.txt files, {len(carried)} packages carried)")


if __name__ == "__main__":
    main()
