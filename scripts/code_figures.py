#!/usr/bin/env python3
"""Per-crate code figures: functions, functions over a length, and runtime
assertions, counted over each crate's non-test source (`crates/*/src`,
without generated code and without what builds only under `cfg(test)`:
modules, functions, impls and blocks under `#[cfg(test)]` or
`#[cfg(all(test, ...))]`).

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
CFG = re.compile(r'#\[cfg\((.*)\)\]')
ITEM = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:async\s+)?(?:fn|impl|mod|struct|enum|trait)\b')


def test_only(raw_line):
    """Whether a line is a `#[cfg(...)]` whose predicate holds only under
    `cfg(test)`: `test` itself, or `all(test, ...)`; `not(test)` and
    `any(test, ...)` also build outside tests."""
    m = CFG.search(raw_line)
    if not m:
        return False
    pred = m.group(1).replace(' ', '')
    return pred == 'test' or (pred.startswith('all(') and re.search(r'[(,]test[,)]', pred) is not None)


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
    skip_until = None  # depth at which a cfg(test) item or block ends
    # A cfg(test) attribute was seen: the next item (module, fn, impl...)
    # or block-opening statement is test code, up to its closing brace.
    pending_test = False
    test_item = False  # the test item's header started; its `{` is coming
    stack = []  # (name, start line, depth at open)
    pending_fn = None
    found = []
    # Assertions per line outside test code; a function owns those of its
    # lines (from its `fn` line, so one-line functions count too) less
    # those of the functions nested in it (`inner`).
    line_counts = [(0, 0)] * len(lines)
    inner = {}
    for no, l in enumerate(lines):
        if skip_until is None:
            if test_only(raw[no]):
                pending_test = True
            elif pending_test and not test_item and l.strip() and not l.strip().startswith('#'):
                if ITEM.match(l):
                    test_item = True
                elif '{' not in l:
                    # A cfg(test) field, statement or `use`: nothing to skip.
                    pending_test = False
            m = FN.match(l)
            if m and not pending_test:
                pending_fn = (m.group(1), no)
            line_counts[no] = (len(ASSERT.findall(l)), len(DEBUG_ASSERT.findall(l)))
        for ch in l:
            if ch == '{':
                if skip_until is None and pending_test:
                    skip_until = depth
                    pending_test = test_item = False
                elif skip_until is None and pending_fn is not None:
                    key = (pending_fn[0], pending_fn[1])
                    stack.append((key, depth))
                    inner[key] = (0, 0)
                    pending_fn = None
                depth += 1
            elif ch == '}':
                depth -= 1
                if skip_until is not None and depth == skip_until:
                    skip_until = None
                elif stack and stack[-1][1] == depth:
                    key, _ = stack.pop()
                    span = line_counts[key[1]:no + 1]
                    a, d = sum(c[0] for c in span), sum(c[1] for c in span)
                    ia, id_ = inner.pop(key)
                    if stack:
                        pa, pd = inner[stack[-1][0]]
                        inner[stack[-1][0]] = (pa + a, pd + d)
                    found.append((key[0], key[1] + 1, no - key[1] + 1, a - ia, d - id_))
            elif ch == ';' and skip_until is None and pending_test and test_item:
                # A test item without a body (`mod tests;`, a declaration).
                pending_test = test_item = False
            elif ch == ';' and pending_fn is not None and not stack or (ch == ';' and pending_fn is not None and l.strip().endswith(';') and '{' not in l):
                # A declaration without a body (trait method).
                pending_fn = None
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
