#!/usr/bin/env python3
"""Fails on a cycle of calls between engine/'s folders.

Reads which object defines and which uses each global symbol of the built
zo-engine library (`nm`), maps each object to its source folder (engine/cli,
config, train, model, text, store, plan, sched) and looks for strongly
connected components in the folder graph. Files inside one folder may call
each other both ways (a folder is one unit: the scheduler's files, the model
and its architectures); two folders that call each other, directly or around
a longer loop, are a cycle and fail the check, naming the calls that close it.
Usage: scripts/check-cycles.py BUILD_DIR (run by scripts/test.sh after the build)
"""
import collections, os, subprocess, sys

def objects_to_folders(root):
    folder = {}
    for dp, _, fns in os.walk(os.path.join(root, "engine")):
        for fn in fns:
            if fn.endswith(".c"):
                rel = os.path.relpath(dp, os.path.join(root, "engine"))
                if fn + ".o" in folder:
                    sys.exit(f"check-cycles: two engine sources named {fn}: cannot map objects")
                folder[fn + ".o"] = rel
    return folder

def symbol_graph(lib, folder):
    out = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
    defs, uses = {}, collections.defaultdict(set)
    for line in out.splitlines():
        name, sep, rest = line.partition(".o:")
        if not sep: continue
        obj = name.rsplit(":", 1)[-1] + ".o"
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            defs[parts[2]] = obj
        elif len(parts) == 2 and parts[0] == "U":
            uses[obj].add(parts[1])
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for obj, syms in uses.items():
        for s in syms:
            d = defs.get(s)
            if d and obj in folder and d in folder and folder[obj] != folder[d]:
                edges[folder[obj]][folder[d]].append(f"{obj[:-2]} -> {s} ({d[:-2]})")
    return edges

def sccs(nodes, edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in sorted(nodes):
        if v not in index: visit(v)
    return out

def main():
    if len(sys.argv) != 2: sys.exit(__doc__.strip().splitlines()[-1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = os.path.join(sys.argv[1], "engine", "libzo-engine.a")
    if not os.path.exists(lib): sys.exit(f"check-cycles: {lib} not found: build first")
    folder = objects_to_folders(root)
    edges = symbol_graph(lib, folder)
    bad = sccs(set(folder.values()), edges)
    for comp in bad:
        print(f"check-cycles: engine folders call each other in a loop: {' <-> '.join(comp)}")
        for a in comp:
            for b in comp:
                for call in edges[a].get(b, [])[:4]:
                    print(f"  {a} -> {b}: {call}")
    if bad: sys.exit(1)
    print(f"check-cycles: ok ({len(set(folder.values()))} folders, no cycle between them)")

main()
