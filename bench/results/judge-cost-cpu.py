# CPU seconds (user+sys) of interleaved judged / --no-judge runs: less
# sensitive to a loaded machine than wall-clock throughput. The load phase
# is the same in both, so the difference is the judge's.
import json, os, resource, subprocess, sys
os.chdir('/work/wt/bench')
X = './target/release/xstore'
out = open('bench/results/judge-cost-cpu.jsonl', 'w')
for i in range(3):
    for threads in (2,):
        for flag in ([], ['--no-judge']):
            cmd = [X, 'bench', '--keys', '2000000', '--ops', '4000000', '--workload', 'c',
                   '--dist', 'uniform', '--threads', str(threads), '--json', '-'] + flag
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            load = open('/proc/loadavg').read().split()[:3]
            p = subprocess.run(cmd, capture_output=True, text=True, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            r = json.loads(p.stdout)
            row = {'command': ' '.join(cmd), 'loadavg': load, 'cpu_seconds': round(cpu, 3),
                   'judged': r['judged'], 'threads': threads,
                   'throughput_ops_per_s': r['throughput_ops_per_s'], 'seconds': r['seconds']}
            out.write(json.dumps(row) + '\n'); out.flush()
            print(row, flush=True)
