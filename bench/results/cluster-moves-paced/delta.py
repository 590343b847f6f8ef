import sys, collections, re
def role(args):
    if 'etcd' in args.split()[0]: return 'etcd'
    m=re.search(r'--id[ =](\S+)', args)
    if m: return 'server '+m.group(1)
    if 'move-bench' in args: return 'bench'
    return args.split()[1] if len(args.split())>1 else '?'
def load(f):
    d={}
    for line in open(f):
        a,_,args=line.partition(' | ')
        p,t,comm,u,s=a.split()
        d[(p,t)]=(role(args),comm,int(u),int(s))
    return d
a=load(sys.argv[1]); b=load(sys.argv[2])
rows=collections.defaultdict(lambda:[0,0])
for k,(r,comm,u,s) in b.items():
    u0,s0=(a[k][2],a[k][3]) if k in a else (0,0)
    c=re.sub(r'[-_]?\d+$','',comm)
    rows[(r,c)][0]+=u-u0; rows[(r,c)][1]+=s-s0
for (r,c),(u,s) in sorted(rows.items(), key=lambda kv:-sum(kv[1])):
    if u+s>0: print(f"{r:12} {c:20} user {u/100:6.2f} s  sys {s/100:6.2f} s")
print("total %.2f s" % (sum(u+s for u,s in rows.values())/100))
