"""Measure the project's import graph: cycles, private imports, function-local imports."""
import ast, sys
from pathlib import Path
from collections import defaultdict
ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
APPS = ["library", "messaging", "realtime", "jobs", "config", "course", "bench"]
def modname(p):
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__": parts = parts[:-1]
    return ".".join(parts)
mods = {}
for app in APPS:
    for p in (ROOT / app).rglob("*.py"):
        rel = p.relative_to(ROOT).parts
        if "migrations" in rel or "tests" in rel: continue
        mods[modname(p)] = p
def resolve(name):
    while name and name not in mods: name = name.rpartition(".")[0]
    return name
edges = defaultdict(set); local = []; private = []
for m, p in mods.items():
    tree = ast.parse(p.read_text())
    pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
    funcs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if sub is not node: funcs.add(id(sub))
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                b = pkg.split(".")
                b = b[: len(b) - (node.level - 1)]
                base = ".".join(b + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                targets.append((full if full in mods else base, a.name))
        for t, nm in targets:
            if t.split(".")[0] not in APPS: continue
            r = resolve(t)
            if not r or r == m: continue
            # TYPE_CHECKING guarded?
            edges[m].add(r)
            if id(node) in funcs: local.append((m, r, node.lineno))
            if nm and nm.startswith("_") and not nm.startswith("__"):
                private.append((m, r, nm))
# SCCs
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(sorted(comp))
for v in list(mods): 
    if v not in idx: sc(v)
appedges = defaultdict(set)
for a, bs in edges.items():
    for b in bs:
        x, y = a.split(".")[0], b.split(".")[0]
        if x != y: appedges[x].add(y)
print("modules", len(mods))
print("module cycles", len(sccs)); [print("  ", s) for s in sccs]
print("app edges:"); [print("  ", a, "->", sorted(b)) for a, b in sorted(appedges.items())]
print("function-local project imports", len(local))
byapp = defaultdict(int)
for m, r, _ in local: byapp[m.split(".")[0]] += 1
print("  ", dict(byapp))
print("private cross-module imports", len(private))
if "-v" in sys.argv:
    for x in private: print("  P", x)
    for x in local: print("  L", x)
if "-x" in sys.argv:
    for a, bs in sorted(edges.items()):
        for b in sorted(bs):
            x, y = a.split(".")[0], b.split(".")[0]
            if x != y and x not in ("course", "bench") : print("  X", a, "->", b)
