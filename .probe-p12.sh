#!/usr/bin/env bash
# kreplay profile smoke: saxpy (results unchanged, table, json), the C example tool, a PyTorch
# training step with every GEMM profiled (results unchanged), a graph (skipped rows).
cd "$(dirname "$0")/.."
W=/tmp/p12; rm -rf $W; mkdir -p $W
K=dist/kreplay
nvcc -O2 -std=c++17 -arch=sm_90 -o $W/kapps testdata/apps/kapps.cu || exit 2
cc -shared -fPIC -O2 -Iengine/include -o $W/libexample_tool.so testdata/tools/example_tool.c || exit 2
echo "== saxpy"
$W/kapps saxpy 3 > $W/base.out
$K profile -k saxpy --all --passes 5 --json -- $W/kapps saxpy 3 > $W/prof.out 2> $W/prof.err; echo "rc $?"
cat $W/prof.err | head -20
grep -v '^{' $W/prof.out > $W/prof.app.out; cmp $W/base.out $W/prof.app.out && echo "saxpy output identical"
grep '^{' $W/prof.out | head -2 | cut -c1-400
echo "== example tool"
$K profile -k saxpy --all --tool $W/libexample_tool.so -- $W/kapps saxpy 3 > $W/tool.out 2> $W/tool.err; echo "rc $?"
head -20 $W/tool.err; cmp $W/base.out $W/tool.out && echo "tool run output identical"
echo "== torch training step"
python3 testdata/apps/torch_train_app.py 3 > $W/t.base 2>&1
/usr/bin/time -f "plain wall %e s" python3 testdata/apps/torch_train_app.py 3 2>&1 | tail -1
/usr/bin/time -f "profile wall %e s" $K profile -k 'regex:gemm|sm90|cutlass|xmma' --all --passes 5 -o $W/train.csv -- python3 testdata/apps/torch_train_app.py 3 > $W/t.prof 2> $W/t.err; echo "rc $?"
tail -1 $W/t.err
cmp $W/t.base $W/t.prof && echo "training output identical" || { diff $W/t.base $W/t.prof | head; }
grep -c "" $W/train.csv; head -40 $W/t.err | cut -c1-170
echo "== graph"
$K profile -k saxpy --all -- $W/kapps graph > $W/g.out 2> $W/g.err; echo "rc $?"; tail -5 $W/g.err | cut -c1-200
