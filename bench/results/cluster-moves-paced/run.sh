#!/bin/bash
# run.sh BIN SEED OUT [extra move-bench flags]: a fresh 3-server 1 M key cluster, one quarter move
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$1; SEED=$2; OUT=$3; shift 3
DIR=$(mktemp -d /tmp/move-bench.XXXX)
RUST_LOG=xstore=info,cluster=info $BIN cluster up --servers 3 --dir $DIR/c --keys 1000000 > $DIR/up.out 2> $DIR/up.err &
UP=$!
for i in $(seq 1 300); do URL=$(grep -o 'etcd://[^ ]*' $DIR/up.out | head -1); [ -n "$URL" ] && break; sleep 1; done
sleep 2
echo "# uptime at start: $(uptime)" > $OUT
XSTORE_ETCD_AUTH_FILE=$DIR/c/etcd-auth RUST_LOG=${RUST_LOG:-cluster=info} $BIN cluster move-bench $URL --token-file $DIR/c/token --keys 1000000 --moves 1 --move-keys 250000 --seconds 30 --baseline-s 8 --gap-s 1 --run-seed $SEED "$@" >> $OUT 2> $DIR/bench.err &
B=$!
sleep 1; $HERE/cpu.sh $UP $B > $DIR/cpu0
sleep 7; $HERE/cpu.sh $UP $B > $DIR/cpu1
while ! grep -q "range moved" $DIR/bench.err && kill -0 $B 2>/dev/null; do sleep 0.2; done
$HERE/cpu.sh $UP $B > $DIR/cpu2
wait $B
echo "# uptime at end: $(uptime)" >> $OUT
XSTORE_ETCD_AUTH_FILE=$DIR/c/etcd-auth $BIN cluster status $URL --token-file $DIR/c/token --window-s 0 >> $OUT 2>&1
kill -INT $UP; wait $UP
echo "# stderr:" >> $OUT; grep -v "^\s*$" $DIR/bench.err | sed 's/\x1b\[[0-9;]*m//g' | tail -30 >> $OUT
echo "# CPU during the 7 s of baseline (cpu0 -> cpu1):" >> $OUT; python3 $HERE/delta.py $DIR/cpu0 $DIR/cpu1 >> $OUT
echo "# CPU during the move (cpu1 -> cpu2):" >> $OUT; python3 $HERE/delta.py $DIR/cpu1 $DIR/cpu2 >> $OUT
sed 's/\x1b\[[0-9;]*m//g' $DIR/up.err | grep -E "published|released|changed hands" | cut -c1-170 | sed 's/^/# server: /' >> $OUT
echo $DIR
