#!/usr/bin/env python3
"""Per-crate code figures: functions, functions over a length, and runtime
assertions, counted over each crate's non-test source (`crates/*/src`,
without `#[cfg(test)]` modules and generated code).

Usage: python3 scripts/code_figures.py [--limit 100] [--list] [--check]

`--list` prints every function over the limit (file:line name lines);
`--check` exits 1 if any function is over the limit. A function's length
is counted from its `fn` line to its closing brace. An assertion is a call
of `assert!`, `assert_eq!` or `assert_ne!` (kept in release builds);
`debug_assert*!` are counted apart.
"""
import os
import re
import sys

FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')
ASSERT = re.compile(r'(?<![A-Za-z0-9_])assert(?:_eq|_ne)?!')
DEBUG_ASSERT = re.compile(r'(?<![A-Za-z0-9_])debug_assert(?:_eq|_ne)?!')


def strip(line, state):
    """Removes comments and string/char contents from one line, carrying
    block-comment and raw/plain string state across lines."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if state['block']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out), state
            state['block'] -= 1
            i = j + 2
            continue
        if state['str'] is not None:
            end = state['str']
            if end == '"':
                if line[i] == '\\':
                    i += 2
                    continue
                if line[i] == '"':
                    state['str'] = None
                    out.append('"')
                i += 1
                continue
            j = line.find(end, i)
            if j < 0:
                return ''.join(out), state
            state['str'] = None
            out.append('"')
            i = j + len(end)
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] += 1
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == '_')):
            state['str'] = '"' + m.group(1)
            out.append('"')
            i += m.end()
            continue
        if c == '"':
            state['str'] = '"'
            out.append('"')
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", line[i:])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return ''.join(out), state


def functions(path):
    """Yields (name, first line, lines, asserts, debug asserts) per function
    outside test modules."""
    with open(path, encoding='utf-8') as f:
        raw = f.read().split('\n')
    state = {'block': 0, 'str': None}
    lines = []
    for l in raw:
        s, state = strip(l, state)
        lines.append(s)
    depth = 0
    skip_until = None  # depth at which a cfg(test) module ends
    pending_test = False
    stack = []  # (name, start line, depth at open)
    pending_fn = None
    found = []
    counts = {}
    for no, l in enumerate(lines):
        if skip_until is None:
            if re.search(r'#\[cfg\(test\)\]', raw[no]):
                pending_test = True
            m = FN.match(l)
            if m:
                pending_fn = (m.group(1), no)
            if stack:
                a = len(ASSERT.findall(l))
                d = len(DEBUG_ASSERT.findall(l))
                top = stack[-1][0]
                counts[top] = (counts.get(top, (0, 0))[0] + a, counts.get(top, (0, 0))[1] + d)
        for ch in l:
            if ch == '{':
                if skip_until is None and pending_test and re.search(r'\bmod\b', l):
                    skip_until = depth
                    pending_test = False
                elif skip_until is None and pending_fn is not None:
                    key = (pending_fn[0], pending_fn[1])
                    stack.append((key, depth))
                    counts.setdefault(key, (0, 0))
                    pending_fn = None
                depth += 1
            elif ch == '}':
                depth -= 1
                if skip_until is not None and depth == skip_until:
                    skip_until = None
                elif stack and stack[-1][1] == depth:
                    key, _ = stack.pop()
                    a, d = counts.pop(key)
                    found.append((key[0], key[1] + 1, no - key[1] + 1, a, d))
            elif ch == ';' and pending_fn is not None and not stack or (ch == ';' and pending_fn is not None and l.strip().endswith(';') and '{' not in l):
                # A declaration without a body (trait method).
                pending_fn = None
        if pending_test and skip_until is None and l.strip() and not l.strip().startswith('#') and not re.search(r'\bmod\b', l):
            pending_test = False
    return found


def main():
    limit = 100
    args = sys.argv[1:]
    if '--limit' in args:
        limit = int(args[args.index('--limit') + 1])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates')
    total = [0, 0, 0, 0, 0]
    over = []
    print(f"{'crate':<12} {'fns':>6} {'>70':>5} {'>' + str(limit):>5} {'longest':>8} {'assert':>7} {'debug':>6}")
    for crate in sorted(os.listdir(root)):
        src = os.path.join(root, crate, 'src')
        if not os.path.isdir(src):
            continue
        fns = []
        for dirpath, dirs, files in os.walk(src):
            if os.path.basename(dirpath) == 'gen':
                continue
            for name in sorted(files):
                if name.endswith('.rs'):
                    p = os.path.join(dirpath, name)
                    for f in functions(p):
                        fns.append((os.path.relpath(p, os.path.join(root, '..')),) + f)
        n = len(fns)
        o70 = sum(1 for f in fns if f[3] > 70)
        ol = [f for f in fns if f[3] > limit]
        longest = max((f[3] for f in fns), default=0)
        a = sum(f[4] for f in fns)
        d = sum(f[5] for f in fns)
        over += ol
        for i, v in enumerate((n, o70, len(ol), a, d)):
            total[i] += v
        print(f"{crate:<12} {n:>6} {o70:>5} {len(ol):>5} {longest:>8} {a:>7} {d:>6}")
    print(f"{'total':<12} {total[0]:>6} {total[1]:>5} {total[2]:>5} {'':>8} {total[3]:>7} {total[4]:>6}")
    if '--list' in args:
        for f in sorted(over, key=lambda f: -f[3]):
            print(f"{f[0]}:{f[2]} {f[1]} {f[3]} lines")
    if '--check' in args and over:
        print(f"{len(over)} functions are over {limit} lines", file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
