#!/usr/bin/env bash
# kreplay profile (issue 12, in progress) on a CUDA machine, each step bounded by timeout:
# saxpy (results unchanged, table, JSON), the C example tool, a PyTorch training step with
# every GEMM profiled (results unchanged), a graph (skipped rows). KREPLAY_DEBUG_PROFILE=1
# traces each step of in-place replay.
#   scripts/gpu-profile-smoke.sh [BIN_DIR]
cd "$(dirname "$0")/.."
W=/tmp/p12; rm -rf $W; mkdir -p $W
K=${1:-dist}/kreplay; export KREPLAY_DEBUG_PROFILE=1
nvcc -O2 -std=c++17 -arch=sm_90 -o $W/kapps testdata/apps/kapps.cu || exit 2
cc -shared -fPIC -O2 -Iengine/include -o $W/libexample_tool.so testdata/tools/example_tool.c || exit 2
echo "== saxpy"
$W/kapps saxpy 3 > $W/base.out
timeout -k 5 60 $K profile -k saxpy --all --passes 5 --json -- $W/kapps saxpy 3 > $W/prof.out 2> $W/prof.err; echo "rc $?"; pkill -9 -f "$W/kapps"
head -12 $W/prof.err; echo ...; tail -25 $W/prof.err
grep -v '^{' $W/prof.out > $W/prof.app.out; cmp $W/base.out $W/prof.app.out && echo "saxpy output identical"
grep '^{' $W/prof.out | head -2 | cut -c1-400
echo "== example tool"
timeout -k 5 60 $K profile -k saxpy --all --tool $W/libexample_tool.so -- $W/kapps saxpy 3 > $W/tool.out 2> $W/tool.err; echo "rc $?"; pkill -9 -f "$W/kapps"
grep -v "profile:" $W/tool.err | head -20; tail -5 $W/tool.err; cmp $W/base.out $W/tool.out && echo "tool run output identical"
echo "== torch training step"
python3 testdata/apps/torch_train_app.py 3 > $W/t.base 2>&1
/usr/bin/time -f "plain wall %e s" python3 testdata/apps/torch_train_app.py 3 2>&1 | tail -1
/usr/bin/time -f "profile wall %e s" timeout -k 5 120 $K profile -k 'regex:gemm|sm90|cutlass|xmma' --all --passes 5 -o $W/train.csv -- python3 testdata/apps/torch_train_app.py 3 > $W/t.prof 2> $W/t.err; echo "rc $?"; pkill -9 -f torch_train_app
tail -1 $W/t.err
cmp $W/t.base $W/t.prof && echo "training output identical" || { diff $W/t.base $W/t.prof | head; }
grep -c "" $W/train.csv; grep -v "profile:" $W/t.err | head -40 | cut -c1-170; tail -8 $W/t.err
echo "== graph"
timeout -k 5 60 $K profile -k saxpy --all -- $W/kapps graph > $W/g.out 2> $W/g.err; echo "rc $?"; tail -5 $W/g.err | cut -c1-200
