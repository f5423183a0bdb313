set -u
K=dist/kreplay; M=dram__bytes_write.sum,lts__t_sectors.sum,dram__bytes_read.sum,smsp__inst_executed.sum
$K record -k 'gemm|xmma|cutlass' -o /tmp/g.krr -- python3 testdata/apps/torch_app.py > /dev/null 2>&1
for v in "" "KREPLAY_DEBUG_CUPTI_REPLAY=kernel" "KREPLAY_DEBUG_CUPTI_REPLAY=kernel KREPLAY_DEBUG_FLUSH=sweep"; do for i in 1 2; do
 env $v $K play /tmp/g.krr --metrics $M --json 2>&1 | python3 -c "import json,sys; t=sys.stdin.read()
try: j=json.loads(t); print('g [$v]', j['metrics'], j['metric_passes'])
except Exception: print('g [$v] ERR', t[-400:])"
done; done
