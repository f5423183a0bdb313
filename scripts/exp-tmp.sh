set -u
K=dist/kreplay; W=/tmp/kw
for n in saxpy; do
 $K record -k '^saxpy' -o /tmp/s.krr -- $W/kapps saxpy 1 > /dev/null 2>&1
 for v in "" "KREPLAY_DEBUG_FLUSH_IN_RANGE=1"; do
  env $v $K play /tmp/s.krr --metrics dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum --json 2>&1 | python3 -c "import json,sys; t=sys.stdin.read()
try: print('saxpy [$v]', json.loads(t)['metrics'])
except Exception: print('ERR', t[-300:])"
 done
 ncu --csv --print-units base --metrics dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum -k regex:saxpy -c 1 $W/kapps saxpy 1 2>&1 | grep -oE '"(dram__[a-z_.]+|gpu__time_duration.sum)","[^"]*","[^"]*"'
done
